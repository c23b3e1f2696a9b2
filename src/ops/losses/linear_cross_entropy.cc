// src/ops/losses/linear_cross_entropy.cc: linear_cross_entropy, the forward
// (include/smax/linear_cross_entropy.h). Backward and fused:
// linear_cross_entropy_backward.cc; the shared pieces: _tiles.{h,cc}.
//
// validate everything -> allocate the tile (Nc x Vc floats; doubles on the
// float64 path) and copies -> for each token chunk: for each vocabulary
// chunk: SGEMM (DGEMM) into the tile, then the row steps (f32:
// kernels/linear_cross_entropy.h; float64: linear_cross_entropy_f64.cc) on
// every row of the tile in parallel (fixed grid; a row is one task's work)
// -> merge the per-chunk row results in float64 in vocabulary order ->
// write the outputs.
// Backward: (the same pass to get each row's LSE, unless given) then a
// gradient pass that turns each tile into dz in place and issues
// dhidden (+)= dz · W_v, dweight_v (+)= dz^T · H_c and the float64 column
// sums of dbias.
//
// Threads: smax's `threads` run the row kernels of a tile and the tile's
// GEMMs, split into blocks of rows or columns on a grid fixed by the shape
// (core/gemm.h: sgemm_parallel / dgemm_parallel; OpenBLAS itself runs single-threaded on each
// of smax's threads). Neither changes the order of any sum, so results do
// not depend on `threads`.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "kernels/linear_cross_entropy.h"
#include "ops/losses/cross_entropy.h"
#include "core/errors.h"
#include "core/gemm.h"
#include "core/internal.h"
#include "ops/losses/linear_cross_entropy_tiles.h"
#include "core/loss_rows.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/linear_cross_entropy.h"
#include "smax/runtime.h"

namespace smax {

namespace detail::lce {
namespace {

// Every row's statistics, in tiles of T (the f32 path or the float64 path):
// done(stat, row) for each row, in row order.
template <class T, class Done>
void statistics(const Setup& s, const StatRequest& req, Done&& done) {
  Work<T> w(s);
  std::vector<RowStat> st;
  for (int64_t n0 = 0; n0 < s.N; n0 += s.Nc) {
    const int64_t nc = std::min(s.Nc, s.N - n0);
    const GemmOperandT<T> hc = s.ops<T>().hm.rows(n0, nc, w.hbuf.data());
    stats_pass(s, w, hc, n0, nc, req, st);
    for (int64_t r = 0; r < nc; ++r) done(st[static_cast<size_t>(r)], n0 + r);
  }
}

}  // namespace
}  // namespace detail::lce

void linear_cross_entropy(const TensorView& hidden, const TensorView& weight,
                          const TensorView& target, const std::optional<TensorView>& bias,
                          const TensorView& dst, const CrossEntropyOptions& ce,
                          const LinearCrossEntropyOptions& lce, const SoftmaxOptions& options) {
  using namespace detail;
  using namespace detail::lce;
  const char* op = "linear_cross_entropy";
  const BlasOnCallingThread one_pool;  // gemm.h: BLAS on smax's threads only
  Setup s = prepare(op, hidden, weight, target, bias, ce, lce, options);

  // Outputs: shapes, then no overlap with any input or each other.
  const ForwardOuts fo = check_forward_outputs(op, s, dst, target, bias, ce);
  const std::optional<RowOut>& o_lse = fo.lse;
  const std::optional<RowOut>& o_ent = fo.entropy;
  const std::optional<RowOut>& o_tlp = fo.target_logprob;

  const size_t N = static_cast<size_t>(s.N);
  std::vector<double> loss = alloc<double>(op, s.N), z(ce.z_loss ? N : 0), lse(o_lse ? N : 0),
                      ent(o_ent ? N : 0), tlp(o_tlp ? N : 0), acc(ce.accuracy ? N : 0);
  StatRequest req;
  req.sums = s.a > 0.0;
  req.entropy = o_ent.has_value();
  req.argmax = ce.accuracy.has_value();
  req.all_rows = o_lse.has_value() || o_ent.has_value();

  auto row_done = [&](const RowStat& rs, int64_t gr) {
    const size_t ri = static_cast<size_t>(gr);
    const bool active = s.active(gr);
    const RowResult res = finalize_row(s, rs, gr);
    loss[ri] = res.loss;
    if (ce.z_loss) z[ri] = res.z;
    if (o_lse) lse[ri] = res.L;
    if (o_ent) ent[ri] = res.H;
    if (o_tlp) tlp[ri] = active ? res.tlp : 0.0;
    if (ce.accuracy) acc[ri] = active ? res.acc : 0.0;
  };
  if (s.f64) {
    statistics<double>(s, req, row_done);
  } else {
    statistics<float>(s, req, row_done);
  }

  write_reduced(s, loss, s.denominator, dst, "dst");
  if (ce.z_loss) write_reduced(s, z, s.denominator, *ce.z_loss, "z_loss");
  if (ce.accuracy) {
    double count = 0.0;
    for (int64_t r = 0; r < s.N; ++r) count += s.active(r) ? 1.0 : 0.0;
    write_reduced(s, acc, count, *ce.accuracy, "accuracy");
  }
  if (o_lse) write_row_out(*o_lse, lse);
  if (o_ent) write_row_out(*o_ent, ent);
  if (o_tlp) write_row_out(*o_tlp, tlp);
}

}  // namespace smax

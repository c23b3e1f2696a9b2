// src/ops/losses/linear_cross_entropy_backward.cc: linear_cross_entropy_backward and
// linear_cross_entropy_fused (include/smax/linear_cross_entropy.h); the tiling
// and the pieces shared with the forward are described in linear_cross_entropy.cc.
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
#include "ops/losses/linear_cross_entropy_grad.h"
#include "ops/losses/linear_cross_entropy_tiles.h"
#include "core/loss_rows.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/linear_cross_entropy.h"
#include "smax/runtime.h"

namespace smax {

namespace detail {
namespace lce {

// The f32 gradient row (the float64 one: linear_cross_entropy_f64.cc).
void grad_row(const Setup& s, float* row, int64_t vc, int64_t v0, int64_t gr, double L,
              double sum_w, double g, double* /*scratch*/) {
  if (special_grad_row(s, row, vc, gr, L, g)) return;
  const GradCoeffs c = grad_coeffs(s, gr, L, sum_w);
  kernels::LceGrad k;
  k.softcap = s.cap;
  k.scale = s.scale;
  k.shift = static_cast<float>(L);
  // p_j = e^(t_j - shift) * e^(shift - L): the f32 rounding of L is folded
  // into the factor in float64.
  k.factor = g * c.A * std::exp(static_cast<double>(k.shift) - L);
  k.b = static_cast<float>(g * s.a / c.C);
  k.weight = s.f32_ops.cw(v0);
  const bool has_y = c.y >= v0 && c.y < v0 + vc;
  const float uy = has_y ? row[c.y - v0] : 0.0f;
  kernels::lce_grad(row, vc, k);
  if (has_y && uy != -std::numeric_limits<float>::infinity()) {
    const double fix = static_cast<double>(s.scale) * cap_deriv(s, uy) * g * (1.0 - s.a) * c.wy;
    row[c.y - v0] = static_cast<float>(static_cast<double>(row[c.y - v0]) - fix);
  }
}

}  // namespace lce

namespace {

using namespace lce;

// The inputs and outputs of one backward (or fused) call, validated.
struct Call {
  bool fused = false, use_lse = false;
  const std::vector<double>* G = nullptr;       // G_r per row
  const std::vector<double>* lse_in = nullptr;  // the forward's lse (use_lse)
  TensorView dhidden, dweight;
  std::optional<TensorView> dbias;
  std::vector<double>* db_acc = nullptr;        // V float64 dbias sums
  std::vector<double>* loss = nullptr;          // fused: per-row loss
  std::vector<double>* lse = nullptr;           // fused with an lse output (else empty)
};

// The tiles of the backward in element type T (the f32 path or the float64
// path): statistics (unless the forward's lse is given), dz per tile, the
// gradient GEMMs; then dhidden / dweight written (dbias, the loss and lse
// are the caller's, from c.db_acc / c.loss / c.lse).
template <class T>
void gradient_pass(const Setup& s, const Call& c) {
  // Scratch (all before the first write). Gradients accumulate in T: an
  // output that is not T (or not unit stride along D) is accumulated in a
  // temporary and rounded once at the end.
  Work<T> w(s);
  OutMatrix<T> mh(s.op, c.dhidden, s.N, s.D), mw(s.op, c.dweight, s.V, s.D);
  std::vector<RowStat> st;
  std::vector<double> Lrow = alloc<double>(s.op, s.Nc), sumw = alloc<double>(s.op, s.Nc);
  GradTargets<T> t;
  t.dh = mh.data(c.dhidden);
  t.dh_ld = mh.ld(s.D);
  t.dh_rs = mh.row_step(c.dhidden, s.D);
  t.dw = mw.data(c.dweight);
  t.dw_ld = mw.ld(s.D);
  t.dw_rs = mw.row_step(c.dweight, s.D);
  t.db = c.dbias ? c.db_acc->data() : nullptr;
  const Operands<T>& ops = s.ops<T>();

  if (s.D > 0) {
    // No classes: dz is empty and dhidden = 0; no tokens: dweight = 0.
    for (int64_t r = 0; r < s.N && s.V == 0; ++r) std::fill(t.dh + r * t.dh_rs, t.dh + r * t.dh_rs + s.D, T(0));
    for (int64_t j = 0; j < s.V && s.N == 0; ++j) std::fill(t.dw + j * t.dw_rs, t.dw + j * t.dw_rs + s.D, T(0));
  }
  auto record = [&](const RowStat& rs, int64_t gr) {
    if (!c.fused) return;
    const RowResult res = finalize_row(s, rs, gr);
    (*c.loss)[static_cast<size_t>(gr)] = res.loss;
    if (!c.lse->empty()) (*c.lse)[static_cast<size_t>(gr)] = res.L;
  };
  const std::vector<double>& G = *c.G;

  for (int64_t n0 = 0; n0 < s.N; n0 += s.Nc) {
    const int64_t nc = std::min(s.Nc, s.N - n0);
    const GemmOperandT<T> hc = ops.hm.rows(n0, nc, w.hbuf.data());
    if (s.V == 0) {
      RowStat empty;
      for (int64_t r = 0; r < nc; ++r) record(empty, n0 + r);
      continue;
    }
    if (!c.use_lse && s.Vc >= s.V) {
      // Whole vocabulary in one tile: statistics and gradient from the same
      // logits (one GEMM for the logits of these tokens).
      const GemmOperandT<T> wv = logits_tile(s, w, hc, nc, 0, s.V);
      StatRequest req;
      req.sums = s.a > 0.0;
      for_tile_rows(s, w, nc, s.V, [&](int64_t r, double* scratch) {
        T* row = w.tile.data() + r * s.V;
        const int64_t gr = n0 + r;
        form_logits(s, row, s.V, 0);
        if (!s.active(gr) && c.lse->empty()) {
          std::fill(row, row + s.V, T(0));
          return;
        }
        RowStat rs;
        scan_chunk(s, row, s.V, 0, gr, req, rs, scratch);
        settle<T>(rs);
        record(rs, gr);
        grad_row(s, row, s.V, 0, gr, lse_of(rs), rs.sum_w, G[static_cast<size_t>(gr)], scratch);
      });
      grad_tile_tail(s, w, hc, wv, n0, nc, 0, s.V, t);
      continue;
    }
    if (c.use_lse) {
      for (int64_t r = 0; r < nc; ++r) Lrow[static_cast<size_t>(r)] = (*c.lse_in)[static_cast<size_t>(n0 + r)];
    } else {
      StatRequest req;
      req.sums = s.a > 0.0;
      req.all_rows = !c.lse->empty();
      stats_pass(s, w, hc, n0, nc, req, st);
      for (int64_t r = 0; r < nc; ++r) {
        const RowStat& rs = st[static_cast<size_t>(r)];
        Lrow[static_cast<size_t>(r)] = lse_of(rs);
        sumw[static_cast<size_t>(r)] = rs.sum_w;
        record(rs, n0 + r);
      }
    }
    for (int64_t v0 = 0; v0 < s.V; v0 += s.Vc) {
      const int64_t vc = std::min(s.Vc, s.V - v0);
      const GemmOperandT<T> wv = logits_tile(s, w, hc, nc, v0, vc);
      for_tile_rows(s, w, nc, vc, [&](int64_t r, double* scratch) {
        T* row = w.tile.data() + r * vc;
        const int64_t gr = n0 + r;
        if (s.active(gr)) form_logits(s, row, vc, v0);
        grad_row(s, row, vc, v0, gr, Lrow[static_cast<size_t>(r)], sumw[static_cast<size_t>(r)],
                 G[static_cast<size_t>(gr)], scratch);
      });
      grad_tile_tail(s, w, hc, wv, n0, nc, v0, vc, t);
    }
  }
  // Outputs that went through temporaries.
  mh.write(c.dhidden, s.N, s.D);
  mw.write(c.dweight, s.V, s.D);
}

// The backward pass, and with `dst` the fused forward + backward (writes the
// loss as linear_cross_entropy does; lse_out optional).
void backward_impl(const char* op, const TensorView& hidden, const TensorView& weight,
                   const TensorView& target, const std::optional<TensorView>& bias,
                   const TensorView& dloss, const TensorView& dhidden, const TensorView& dweight,
                   const std::optional<TensorView>& dbias, const CrossEntropyOptions& ce,
                   const LinearCrossEntropyOptions& lce, const SoftmaxOptions& options,
                   const TensorView* dst) {
  const bool fused = dst != nullptr;
  // The forward's lse (skips the statistics pass) when label smoothing is
  // off; the float64 path reads it only when it is f64 (an f32 lse would
  // undo its accuracy: then it is validated and recomputed).
  const bool lse_given = !fused && ce.lse.has_value() && ce.label_smoothing == 0.0f;
  const bool f64 = hidden.dtype == DType::kF64 || weight.dtype == DType::kF64;
  const bool use_lse = lse_given && (!f64 || ce.lse->dtype == DType::kF64);
  Setup s = prepare(op, hidden, weight, target, bias, ce, lce, options, /*whole_vocab=*/!use_lse);

  std::vector<std::pair<TensorView, const char*>> outs;
  std::optional<RowOut> o_lse;
  if (fused) {
    if (ce.z_loss || ce.entropy || ce.target_logprob || ce.accuracy) {
      fail(op, "only the lse optional output is supported (use linear_cross_entropy for the others)");
    }
    check_reduced(s, *dst, "dst");
    outs.push_back({*dst, "dst"});
    if (ce.lse) {
      o_lse = row_view(s, *ce.lse, "lse", true);
      outs.push_back({*ce.lse, "lse"});
    }
  }
  // Upstream gradient -> G_r.
  std::vector<double> G = alloc<double>(op, s.N);
  check_float_view(dloss, op, "dloss");
  const int dloss_size = dtype_size(dloss.dtype);
  if (s.reduction == Reduction::kNone) {
    const RowOut ro = row_view(s, dloss, "dloss", false);
    const auto* g = static_cast<const char*>(dloss.data);
    for (int64_t r = 0; r < s.N; ++r) {
      G[static_cast<size_t>(r)] =
          s.active(r) ? load_f64(g + r * ro.strides[0] * dloss_size, dloss.dtype) : 0.0;
    }
  } else {
    if (dloss.numel() != 1) {
      fail(op, "dloss shape " + dloss.describe() + " must hold one element for reduction '" +
                   reduction_name(s.reduction) + "'");
    }
    double g = load_f64(dloss.data, dloss.dtype);
    if (s.reduction == Reduction::kMean) {
      // A zero weight sum with counted rows: PyTorch's w / sum w = 0 / 0,
      // NaN for every counted row (kNan), or 0 (kZero).
      g = s.denominator != 0.0                    ? g / s.denominator
          : s.empty_mean == EmptyMean::kZero ? 0.0
                                               : kNan;
    }
    for (int64_t r = 0; r < s.N; ++r) G[static_cast<size_t>(r)] = s.active(r) ? g : 0.0;
  }
  std::vector<double> lse_in;
  if (lse_given) {
    const RowOut ro = row_view(s, *ce.lse, "lse", false);  // validated even when not read
    if (use_lse) {
      lse_in = alloc<double>(op, s.N);
      const auto* p = static_cast<const char*>(ce.lse->data);
      const int64_t step = ro.strides[0] * dtype_size(ce.lse->dtype);
      for (int64_t r = 0; r < s.N; ++r) lse_in[static_cast<size_t>(r)] = load_f64(p + r * step, ce.lse->dtype);
    }
  }
  // Gradient outputs.
  check_gradient_outputs(op, s, hidden, weight, dhidden, dweight, dbias, outs);
  auto ins = input_list(s, target, bias, ce);
  ins.push_back({dloss, "dloss"});
  if (lse_given) ins.push_back({*ce.lse, "lse"});
  check_disjoint(op, outs, ins);

  std::vector<double> db_acc = alloc<double>(op, dbias ? s.V : 0, 0.0);
  std::vector<double> loss = alloc<double>(op, fused ? s.N : 0), lse(o_lse ? s.N : 0);
  Call c;
  c.fused = fused;
  c.use_lse = use_lse;
  c.G = &G;
  c.lse_in = &lse_in;
  c.dhidden = dhidden;
  c.dweight = dweight;
  c.dbias = dbias;
  c.db_acc = &db_acc;
  c.loss = &loss;
  c.lse = &lse;
  if (s.f64) {
    gradient_pass<double>(s, c);
  } else {
    gradient_pass<float>(s, c);
  }
  if (dbias) {
    auto* out = static_cast<char*>(dbias->data);
    const int64_t step = dbias->strides[0] * dtype_size(dbias->dtype);
    for (int64_t j = 0; j < s.V; ++j) {
      store_f64(out + j * step, dbias->dtype, db_acc[static_cast<size_t>(j)]);
    }
  }
  if (fused) {
    write_reduced(s, loss, s.denominator, *dst, "dst");
    if (o_lse) write_row_out(*o_lse, lse);
  }
}

}  // namespace
}  // namespace detail

void linear_cross_entropy_backward(const TensorView& hidden, const TensorView& weight,
                                   const TensorView& target, const std::optional<TensorView>& bias,
                                   const TensorView& dloss, const TensorView& dhidden,
                                   const TensorView& dweight, const std::optional<TensorView>& dbias,
                                   const CrossEntropyOptions& ce,
                                   const LinearCrossEntropyOptions& lce,
                                   const SoftmaxOptions& options) {
  const detail::BlasOnCallingThread one_pool;  // gemm.h: BLAS on smax's threads only
  detail::backward_impl("linear_cross_entropy_backward", hidden, weight, target, bias, dloss,
                        dhidden, dweight, dbias, ce, lce, options, nullptr);
}

void linear_cross_entropy_fused(const TensorView& hidden, const TensorView& weight,
                                const TensorView& target, const std::optional<TensorView>& bias,
                                const TensorView& dst, const TensorView& dloss,
                                const TensorView& dhidden, const TensorView& dweight,
                                const std::optional<TensorView>& dbias,
                                const CrossEntropyOptions& ce,
                                const LinearCrossEntropyOptions& lce,
                                const SoftmaxOptions& options) {
  const detail::BlasOnCallingThread one_pool;  // gemm.h: BLAS on smax's threads only
  detail::backward_impl("linear_cross_entropy_fused", hidden, weight, target, bias, dloss,
                        dhidden, dweight, dbias, ce, lce, options, &dst);
}

}  // namespace smax

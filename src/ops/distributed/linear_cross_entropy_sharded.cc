// src/ops/distributed/linear_cross_entropy_sharded.cc: the vocabulary-parallel
// linear_cross_entropy, _backward and _fused (include/smax/distributed.h;
// the single-process ops: include/smax/linear_cross_entropy.h,
// docs/linear-cross-entropy.md).
//
// Each rank holds the LM head's rows [n_k, D] of its classes (and their
// bias, class weights, dweight, dbias); hidden [N, D] and the GLOBAL targets
// are replicated. The logits [N, n_k] are never materialised: the local
// work is the single-process op's tiles (ops/losses/linear_cross_entropy_
// tiles.h: the same Setup, tiling, GEMMs, row kernels), only the per-row
// target logic is the group's (lce_shard_rows.h).
//
// Flow. Handshake (group.h): every local check and the tiles' and
// temporaries' allocations run inside `validate`, so a bad argument or such
// an allocation failure on one rank fails every rank and nothing is
// written (the per-token records and the merge's vectors are allocated
// after it: distributed.h, "Failures after the handshake"); agreed: N, D, every option that changes the
// collective flow or the formulas, which optional outputs are given, and a
// checksum of the targets (then the global range check [0, V) gives the
// same answer on every rank).
//  * forward: per token chunk, the stats pass over this shard's vocabulary
//    tiles -> one record per token (lce_shard_rows.h: 80 bytes) ->
//    one allgather of all the records (80 P bytes received per token) ->
//    merged in rank order in float64 -> cross_entropy's formulas with C = V.
//  * backward: the row LSE from the forward's lse when given (and
//    label_smoothing == 0: no exchange but the class weights' w_y, 8 bytes
//    per token, when class weights are given), else the same stats pass and
//    record allgather; then a gradient pass that recomputes each tile, forms
//    dz with the global L, sum_w, w_y, C = V (the target's correction only
//    on the rank holding it), dweight / dbias of this shard exactly as the
//    single-process op (no exchange), and this rank's partial dhidden_k =
//    dz_k · W_k; then dhidden = sum over ranks, reduced deterministically
//    (reduce_rows: alltoall of row blocks, each rank sums its block's P
//    pieces in float64 in rank order and rounds once, allgather): per rank
//    about 2 N D 4 (P - 1) / P bytes sent and received.
//  * fused: forward stats + records, then the gradient pass: 4 GEMMs of
//    2 N n_k D flops per rank (the single-process fused call needs 3: it
//    reuses the whole-vocabulary tile for the gradient once the row's LSE
//    is known, which here needs the other ranks' records first).
// Memory per rank beyond the outputs: the single-process tiles (the whole-
// shard tile of Nc x n_k floats for fused / backward without lse, Nc the
// single-process rule applied to n_k), float64 per-token records (80 N
// bytes, 80 N P received), and the reduction's buffers (3.5 MiB). Measured
// (linear_cross_entropy_fused, N = 4096, D = 2048, V = 128256, 2 ranks as
// threads with 8 threads each, 16-core x86 host, OpenBLAS 0.3.21 on smax's
// threads): peak extra 49.6 MB per rank = 4.7% of its 1.05 GB logits shard.
//
// Paths: f32 arithmetic with f32 / bf16 / f16 operands (widened into the f32
// tiles as the single-process op does; outputs rounded once). The float64
// path (an f64 hidden or weight) is rejected with an error: its tiles
// (linear_cross_entropy_f64.cc) carry Neumaier compensations that the
// records would have to carry too.
//
// Bounds. The loss, lse, entropy, target_logprob: the single-process bounds
// of include/smax/linear_cross_entropy.h with C = V, plus the merge of the P
// records in float64 (each merge step adds <= 4 ulp of float64 relative to
// d and s1: < 1e-15 relative for any practical P). dweight, dbias: the
// single-process bounds (this shard's dz from the global L). dhidden: the
// single-process bound summed over the ranks (each rank's dz_k · W_k has
// the bound of its own shard) plus the float64 sum of P f32 partials and
// one f32 rounding: + 2^-24 |dhidden| + P 2^-53 sum_k |dhidden_k|.
// One rank: every output bit-equal to the single-process op (the records
// merge into the local statistics exactly, no reduction of dhidden), except
// that the fused call recomputes the logits tile (the same GEMM, the same
// bits). Any `threads`: the same bits (the tiles' guarantee; records and
// reductions are merged in a fixed order).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/errors.h"
#include "core/gemm.h"
#include "core/validate.h"
#include "kernels/linear_cross_entropy.h"
#include "ops/distributed/group.h"
#include "ops/distributed/lce_shard_rows.h"
#include "ops/losses/linear_cross_entropy_grad.h"
#include "ops/losses/linear_cross_entropy_tiles.h"
#include "smax/distributed.h"

namespace smax::detail::dist {
namespace {

using namespace lce;

// The local Setup's ignore_index: its (dummy) targets are all this value, so
// the local LossRows never sees a class; the group's targets are in GlobalRows.
constexpr int64_t kLocalIgnore = std::numeric_limits<int64_t>::min();

// What the three ops share after validation.
struct Shard {
  std::optional<Setup> s;
  std::vector<int64_t> dummy;  // the local Setup's targets (all kLocalIgnore)
  std::vector<int64_t> y;      // the group's targets as given
  int64_t checksum = 0;
};

// FNV-1a over the targets (agreed, so that every rank range-checks the same
// targets and the ranks cannot silently use different ones).
int64_t target_checksum(const std::vector<int64_t>& y) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : y) {
    auto u = static_cast<uint64_t>(v);
    for (int b = 0; b < 8; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return static_cast<int64_t>(h >> 1);
}

// Validates the call locally (prepare's checks with this shard's weight,
// bias and class weights) and reads the targets.
void prepare_shard(Shard& sh, const char* op, const TensorView& hidden, const TensorView& weight,
                   const TensorView& target, const std::optional<TensorView>& bias,
                   const CrossEntropyOptions& ce, const LinearCrossEntropyOptions& lce,
                   const SoftmaxOptions& options, bool whole_vocab) {
  if (hidden.dtype == DType::kF64 || weight.dtype == DType::kF64) {
    fail(op, "float64 hidden / weight are not supported by the vocab-parallel op (f32, bf16 or "
             "f16; the single-process op has the float64 path)");
  }
  if (is_floating(target.dtype)) {
    fail(op, "target must be i64 class indices (probability targets are not supported)");
  }
  const int64_t N = hidden.rank == 2 ? hidden.shape[0] : 0;
  sh.dummy.assign(static_cast<size_t>(std::max<int64_t>(N, 0)), kLocalIgnore);
  CrossEntropyOptions local = ce;
  local.loss.ignore_index = kLocalIgnore;
  const int64_t dummy_shape[2] = {N, 1};
  const TensorView dummy =
      make_view(sh.dummy.data(), DType::kI64, target.rank == 2 ? 2 : 1, dummy_shape, nullptr);
  sh.s.emplace(prepare(op, hidden, weight, dummy, bias, local, lce, options, whole_vocab));
  // The group's targets: [N] or [N, 1], any strides.
  check_view(target, op, "target", DType::kI64);
  int64_t strides[kMaxRank] = {};
  reduced_strides(sh.s->logits_shape, 1, target, "target", op, strides);
  const auto* tp = static_cast<const int64_t*>(target.data);
  sh.y.resize(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) sh.y[static_cast<size_t>(r)] = tp[r * strides[0]];
  sh.checksum = target_checksum(sh.y);
}

std::vector<Agreed> agreed_values(const TensorView& hidden, const CrossEntropyOptions& ce,
                                  const SoftmaxOptions& options) {
  std::vector<Agreed> a;
  a.push_back({"hidden rank", hidden.rank});
  a.push_back({"N", hidden.rank == 2 ? hidden.shape[0] : -1});
  a.push_back({"D", hidden.rank == 2 ? hidden.shape[1] : -1});
  a.push_back({"scale", bits(options.scale)});
  a.push_back({"temperature", bits(options.temperature)});
  a.push_back({"empty_row", static_cast<int64_t>(options.empty_row)});
  a.push_back({"ignore_index", ce.loss.ignore_index});
  a.push_back({"reduction", static_cast<int64_t>(ce.loss.reduction)});
  a.push_back({"empty_mean", static_cast<int64_t>(ce.loss.empty_mean)});
  a.push_back({"class weights given", ce.loss.weight.has_value() ? 1 : 0});
  a.push_back({"label_smoothing", bits(ce.label_smoothing)});
  a.push_back({"lse_square_scale", bits(ce.lse_square_scale)});
  a.push_back({"softcap", bits(ce.softcap)});
  a.push_back({"z_loss given", ce.z_loss.has_value() ? 1 : 0});
  a.push_back({"lse given", ce.lse.has_value() ? 1 : 0});
  a.push_back({"entropy given", ce.entropy.has_value() ? 1 : 0});
  a.push_back({"target_logprob given", ce.target_logprob.has_value() ? 1 : 0});
  a.push_back({"accuracy given", ce.accuracy.has_value() ? 1 : 0});
  return a;
}

// After the handshake: the targets' range against V (every rank checks the
// same targets: the checksum was agreed) and the rows everyone knows without
// an exchange.
GlobalRows global_rows(const Group& g, const Shard& sh, const CrossEntropyOptions& ce,
                       const char* op) {
  GlobalRows rows;
  rows.vocab = g.vocab;
  const int64_t N = static_cast<int64_t>(sh.y.size());
  rows.y = sh.y;
  rows.active.assign(static_cast<size_t>(N), 0);
  rows.wy.assign(static_cast<size_t>(N), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = sh.y[static_cast<size_t>(r)];
    if (t != ce.loss.ignore_index && (t < 0 || t >= g.vocab)) {
      fail(op_name(op).c_str(), "target " + std::to_string(t) + " (row " + std::to_string(r) +
                                    ") is outside [0, " + std::to_string(g.vocab) +
                                    ") and is not ignore_index (" +
                                    std::to_string(ce.loss.ignore_index) + ")");
    }
    rows.active[static_cast<size_t>(r)] = t != ce.loss.ignore_index;
    if (rows.active[static_cast<size_t>(r)]) rows.wy[static_cast<size_t>(r)] = 1.0;
  }
  return rows;
}

// The target's index in this shard, or -1.
int64_t local_target(const Group& g, const GlobalRows& rows, int64_t r) {
  if (!rows.active[static_cast<size_t>(r)]) return -1;
  const int64_t y = rows.y[static_cast<size_t>(r)];
  return y >= g.offset && y < g.offset + g.classes ? y - g.offset : -1;
}

// w_y of the rows whose target is this shard's (class weights given), else 0.
double weight_here(const Group& g, const Setup& s, const GlobalRows& rows, int64_t r) {
  const int64_t yl = local_target(g, rows, r);
  if (yl < 0) return 0.0;
  return s.lr->class_weight(yl);
}

// Class weights without a stats exchange: every rank's w_y of its targets,
// one allgather of N doubles (the owner's value is taken).
void exchange_weights(const Group& g, const Setup& s, GlobalRows& rows) {
  const int64_t N = static_cast<int64_t>(rows.y.size());
  std::vector<double> mine(static_cast<size_t>(N), 0.0);
  std::vector<double> owner(static_cast<size_t>(N), -1.0);
  for (int64_t r = 0; r < N; ++r) mine[static_cast<size_t>(r)] = weight_here(g, s, rows, r);
  const std::vector<double> all = allgather_rows(g, mine);
  for (int64_t r = 0; r < N; ++r) {
    if (!rows.active[static_cast<size_t>(r)]) continue;
    const int64_t y = rows.y[static_cast<size_t>(r)];
    const int k = static_cast<int>(std::upper_bound(g.offsets.begin(), g.offsets.end(), y) -
                                   g.offsets.begin()) - 1;
    rows.wy[static_cast<size_t>(r)] = all[static_cast<size_t>(k) * N + r];
  }
}

void set_denominator(GlobalRows& rows) {
  rows.denominator = 0.0;
  for (size_t r = 0; r < rows.y.size(); ++r) rows.denominator += rows.active[r] ? rows.wy[r] : 0.0;
}

// Stats of this shard for tokens [n0, n0 + nc): lce::stats_pass with the
// group's targets (t_y captured on the rank holding the target).
void shard_stats(const Group& g, const Setup& s, Work<float>& w, const GlobalRows& rows,
                 const GemmOperand& hc, int64_t n0, int64_t nc, const StatRequest& req,
                 std::vector<RowStat>& st) {
  st.assign(static_cast<size_t>(nc), RowStat());
  for (int64_t v0 = 0; v0 < s.V; v0 += s.Vc) {
    const int64_t vc = std::min(s.Vc, s.V - v0);
    logits_tile(s, w, hc, nc, v0, vc);
    for_tile_rows(s, w, nc, vc, [&](int64_t r, double*) {
      float* row = w.tile.data() + r * vc;
      form_logits(s, row, vc, v0);
      const int64_t gr = n0 + r;
      const bool active = rows.active[static_cast<size_t>(gr)];
      if (!req.all_rows && !active) return;
      kernels::LceScanRequest kr;
      kr.softcap = s.cap;
      kr.weight = s.f32_ops.cw(v0);
      kr.sums = req.sums;
      kr.entropy = req.entropy;
      kr.argmax = req.argmax;
      RowStat& rs = st[static_cast<size_t>(r)];
      merge(rs, kernels::lce_scan(row, vc, kr), v0);
      const int64_t yl = local_target(g, rows, gr);
      if (yl >= v0 && yl < v0 + vc) rs.ty = logit_of(s, row[yl - v0]);
    });
  }
}

// Every token's merged statistics: the local stats pass, one allgather of
// the records, the merge in rank order; also fills rows.wy (from the
// records) and the denominator.
std::vector<RowStat> group_stats(const Group& g, const Setup& s, Work<float>& w,
                                 GlobalRows& rows, const StatRequest& req) {
  const int64_t N = s.N;
  std::vector<double> local(static_cast<size_t>(N * kRecordFields), 0.0);
  std::vector<RowStat> st;
  for (int64_t n0 = 0; n0 < N; n0 += s.Nc) {
    const int64_t nc = std::min(s.Nc, N - n0);
    const GemmOperand hc = s.f32_ops.hm.rows(n0, nc, w.hbuf.data());
    if (s.V > 0) {
      shard_stats(g, s, w, rows, hc, n0, nc, req, st);
    } else {
      st.assign(static_cast<size_t>(nc), RowStat());
    }
    for (int64_t r = 0; r < nc; ++r) {
      put_record(st[static_cast<size_t>(r)], g.offset, weight_here(g, s, rows, n0 + r),
                 local.data() + (n0 + r) * kRecordFields);
    }
  }
  const std::vector<double> all = allgather_rows(g, local);
  std::vector<RowStat> merged(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) {
    RowStat& m = merged[static_cast<size_t>(r)];
    for (int k = 0; k < g.size; ++k) {
      const double* rec = all.data() + (static_cast<int64_t>(k) * N + r) * kRecordFields;
      merge_record(m, rec);
      if (!std::isnan(rec[7])) m.ty = rec[7];
    }
    if (rows.active[static_cast<size_t>(r)]) {
      // The w_y of the rank holding the target (1 without class weights).
      const int64_t y = rows.y[static_cast<size_t>(r)];
      const int k = static_cast<int>(std::upper_bound(g.offsets.begin(), g.offsets.end(), y) -
                                     g.offsets.begin()) - 1;
      const double* rec = all.data() + (static_cast<int64_t>(k) * N + r) * kRecordFields;
      rows.wy[static_cast<size_t>(r)] = rec[8];
    }
  }
  set_denominator(rows);
  return merged;
}

// ---- forward -------------------------------------------------------------------

void forward(Communicator& comm, const TensorView& hidden, const TensorView& weight,
             const TensorView& target, const std::optional<TensorView>& bias,
             const TensorView& dst, const CrossEntropyOptions& ce,
             const LinearCrossEntropyOptions& lce, const SoftmaxOptions& options) {
  const char* op = "linear_cross_entropy";
  const BlasOnCallingThread one_pool;
  Shard sh;
  std::optional<Work<float>> work;
  std::optional<RowOut> o_lse, o_ent, o_tlp;
  std::vector<Agreed> agreed = agreed_values(hidden, ce, options);
  agreed.push_back({"targets (checksum)", 0});
  const int64_t n_k = weight.rank == 2 ? weight.shape[0] : 0;
  const Group g = begin(comm, op, agreed, n_k, [&] {
    prepare_shard(sh, op, hidden, weight, target, bias, ce, lce, options, false);
    const Setup& s = *sh.s;
    ForwardOuts fo = check_forward_outputs(op, s, dst, target, bias, ce);
    o_lse = std::move(fo.lse);
    o_ent = std::move(fo.entropy);
    o_tlp = std::move(fo.target_logprob);
    work.emplace(s);
    // begin() reads `agreed` after validate: the checksum of the targets read here.
    agreed.back().value = sh.checksum;
  });
  const Setup& s = *sh.s;
  GlobalRows rows = global_rows(g, sh, ce, op);
  StatRequest req;
  req.sums = s.a > 0.0;
  req.entropy = o_ent.has_value();
  req.argmax = ce.accuracy.has_value();
  req.all_rows = o_lse.has_value() || o_ent.has_value();
  const std::vector<RowStat> st = group_stats(g, s, *work, rows, req);

  const size_t N = static_cast<size_t>(s.N);
  std::vector<double> loss(N), z(ce.z_loss ? N : 0), lse(o_lse ? N : 0), ent(o_ent ? N : 0),
      tlp(o_tlp ? N : 0), acc(ce.accuracy ? N : 0);
  for (size_t r = 0; r < N; ++r) {
    const bool active = rows.active[r];
    const RowResult res = finalize_global(s, rows, st[r], static_cast<int64_t>(r));
    loss[r] = res.loss;
    if (ce.z_loss) z[r] = res.z;
    if (o_lse) lse[r] = res.L;
    if (o_ent) ent[r] = res.H;
    if (o_tlp) tlp[r] = active ? res.tlp : 0.0;
    if (ce.accuracy) acc[r] = active ? res.acc : 0.0;
  }
  write_reduced_global(s, rows, loss, rows.denominator, dst, "dst");
  if (ce.z_loss) write_reduced_global(s, rows, z, rows.denominator, *ce.z_loss, "z_loss");
  if (ce.accuracy) {
    double count = 0.0;
    for (size_t r = 0; r < N; ++r) count += rows.active[r] ? 1.0 : 0.0;
    write_reduced_global(s, rows, acc, count, *ce.accuracy, "accuracy");
  }
  if (o_lse) write_row_out(*o_lse, lse);
  if (o_ent) write_row_out(*o_ent, ent);
  if (o_tlp) write_row_out(*o_tlp, tlp);
}

// ---- backward and fused ----------------------------------------------------------

void backward(Communicator& comm, const char* op, const TensorView& hidden,
              const TensorView& weight, const TensorView& target,
              const std::optional<TensorView>& bias, const TensorView& dloss,
              const TensorView& dhidden, const TensorView& dweight,
              const std::optional<TensorView>& dbias, const CrossEntropyOptions& ce,
              const LinearCrossEntropyOptions& lce, const SoftmaxOptions& options,
              const TensorView* dst) {
  const BlasOnCallingThread one_pool;
  const bool fused = dst != nullptr;
  // As the single-process backward: the forward's lse when label smoothing is off.
  const bool use_lse = !fused && ce.lse.has_value() && ce.label_smoothing == 0.0f;
  Shard sh;
  std::optional<Work<float>> work;
  std::optional<OutMatrix<float>> mh, mw;
  std::optional<ReduceBuffers> rb;
  std::optional<RowOut> o_lse;
  std::vector<double> lse_in, db_acc;
  std::vector<Agreed> agreed = agreed_values(hidden, ce, options);
  agreed.push_back({"dbias given", dbias.has_value() ? 1 : 0});
  agreed.push_back({"targets (checksum)", 0});
  const int64_t n_k = weight.rank == 2 ? weight.shape[0] : 0;
  const Group g = begin(comm, op, agreed, n_k, [&] {
    prepare_shard(sh, op, hidden, weight, target, bias, ce, lce, options, !use_lse);
    const Setup& s = *sh.s;
    std::vector<std::pair<TensorView, const char*>> outs;
    if (fused) {
      if (ce.z_loss || ce.entropy || ce.target_logprob || ce.accuracy) {
        fail(op, "only the lse optional output is supported (use linear_cross_entropy for the "
                 "others)");
      }
      check_reduced(s, *dst, "dst");
      outs.push_back({*dst, "dst"});
      if (ce.lse) {
        o_lse = row_view(s, *ce.lse, "lse", true);
        outs.push_back({*ce.lse, "lse"});
      }
    }
    check_float_view(dloss, op, "dloss");
    if (s.reduction == Reduction::kNone) {
      row_view(s, dloss, "dloss", false);
    } else if (dloss.numel() != 1) {
      fail(op, "dloss shape " + dloss.describe() + " must hold one element for reduction '" +
                   reduction_name(s.reduction) + "'");
    }
    if (!fused && ce.lse) {
      const RowOut ro = row_view(s, *ce.lse, "lse", false);
      if (use_lse) {
        lse_in = alloc<double>(op, s.N);
        const auto* p = static_cast<const char*>(ce.lse->data);
        const int64_t step = ro.strides[0] * dtype_size(ce.lse->dtype);
        for (int64_t r = 0; r < s.N; ++r) {
          lse_in[static_cast<size_t>(r)] = load_f64(p + r * step, ce.lse->dtype);
        }
      }
    }
    check_gradient_outputs(op, s, hidden, weight, dhidden, dweight, dbias, outs);
    auto ins = input_list(s, target, bias, ce);
    ins.push_back({dloss, "dloss"});
    if (!fused && ce.lse) ins.push_back({*ce.lse, "lse"});
    check_disjoint(op, outs, ins);
    // Every buffer before the handshake ends (an allocation failure is a
    // local rejection, not a hang).
    work.emplace(s);
    mh.emplace(op, dhidden, s.N, s.D);
    mw.emplace(op, dweight, s.V, s.D);
    rb.emplace(op, comm.size(), s.N, s.D);
    db_acc = alloc<double>(op, dbias ? s.V : 0, 0.0);
    agreed.back().value = sh.checksum;
  });
  const Setup& s = *sh.s;
  GlobalRows rows = global_rows(g, sh, ce, op);
  const size_t N = static_cast<size_t>(s.N);

  // The row LSE and smoothing sums: the forward's lse, or the group's stats.
  std::vector<double> L(N, 0.0), sum_w(N, 0.0), loss(fused ? N : 0), lse(o_lse ? N : 0);
  if (use_lse) {
    L = lse_in;
    if (ce.loss.weight) exchange_weights(g, s, rows);
    set_denominator(rows);
  } else {
    StatRequest req;
    req.sums = s.a > 0.0;
    req.all_rows = o_lse.has_value();
    const std::vector<RowStat> st = group_stats(g, s, *work, rows, req);
    for (size_t r = 0; r < N; ++r) {
      L[r] = lse_of(st[r]);
      sum_w[r] = st[r].sum_w;
      if (fused) {
        const RowResult res = finalize_global(s, rows, st[r], static_cast<int64_t>(r));
        loss[r] = res.loss;
        if (o_lse) lse[r] = res.L;
      }
    }
  }
  // Upstream gradient -> G_r (as the single-process backward).
  std::vector<double> G(N, 0.0);
  const int dloss_size = dtype_size(dloss.dtype);
  if (s.reduction == Reduction::kNone) {
    const RowOut ro = row_view(s, dloss, "dloss", false);
    const auto* gp = static_cast<const char*>(dloss.data);
    for (size_t r = 0; r < N; ++r) {
      G[r] = rows.active[r]
                 ? load_f64(gp + static_cast<int64_t>(r) * ro.strides[0] * dloss_size, dloss.dtype)
                 : 0.0;
    }
  } else {
    double gv = load_f64(dloss.data, dloss.dtype);
    if (s.reduction == Reduction::kMean) {
      gv = rows.denominator != 0.0               ? gv / rows.denominator
           : s.empty_mean == EmptyMean::kZero ? 0.0
                                                : kNan;
    }
    for (size_t r = 0; r < N; ++r) G[r] = rows.active[r] ? gv : 0.0;
  }

  // The gradient pass over this shard's tiles.
  Work<float>& w = *work;
  GradTargets<float> t;
  t.dh = mh->data(dhidden);
  t.dh_ld = mh->ld(s.D);
  t.dh_rs = mh->row_step(dhidden, s.D);
  t.dw = mw->data(dweight);
  t.dw_ld = mw->ld(s.D);
  t.dw_rs = mw->row_step(dweight, s.D);
  t.db = dbias ? db_acc.data() : nullptr;
  if (s.D > 0) {
    // No classes here: this rank's dz is empty, its partial dhidden 0; no tokens: dweight 0.
    for (int64_t r = 0; r < s.N && s.V == 0; ++r) {
      std::fill(t.dh + r * t.dh_rs, t.dh + r * t.dh_rs + s.D, 0.0f);
    }
    for (int64_t j = 0; j < s.V && s.N == 0; ++j) {
      std::fill(t.dw + j * t.dw_rs, t.dw + j * t.dw_rs + s.D, 0.0f);
    }
  }
  for (int64_t n0 = 0; n0 < s.N && s.V > 0; n0 += s.Nc) {
    const int64_t nc = std::min(s.Nc, s.N - n0);
    const GemmOperand hc = s.f32_ops.hm.rows(n0, nc, w.hbuf.data());
    for (int64_t v0 = 0; v0 < s.V; v0 += s.Vc) {
      const int64_t vc = std::min(s.Vc, s.V - v0);
      const GemmOperand wv = logits_tile(s, w, hc, nc, v0, vc);
      for_tile_rows(s, w, nc, vc, [&](int64_t r, double*) {
        float* row = w.tile.data() + r * vc;
        const int64_t gr = n0 + r;
        const size_t ri = static_cast<size_t>(gr);
        if (rows.active[ri]) form_logits(s, row, vc, v0);
        grad_row_shard(s, rows, row, vc, v0, gr, local_target(g, rows, gr), L[ri], sum_w[ri],
                       G[ri]);
      });
      grad_tile_tail(s, w, hc, wv, n0, nc, v0, vc, t);
    }
  }
  // dhidden = the sum of the ranks' partials (the same bits everywhere).
  reduce_rows(g, *rb, t.dh, t.dh_rs, s.N, s.D);
  mh->write(dhidden, s.N, s.D);
  mw->write(dweight, s.V, s.D);
  if (dbias) {
    auto* out = static_cast<char*>(dbias->data);
    const int64_t step = dbias->strides[0] * dtype_size(dbias->dtype);
    for (int64_t j = 0; j < s.V; ++j) store_f64(out + j * step, dbias->dtype, db_acc[static_cast<size_t>(j)]);
  }
  if (fused) {
    write_reduced_global(s, rows, loss, rows.denominator, *dst, "dst");
    if (o_lse) write_row_out(*o_lse, lse);
  }
}

}  // namespace
}  // namespace smax::detail::dist

namespace smax::distributed {

void linear_cross_entropy(Communicator& comm, const TensorView& hidden, const TensorView& weight,
                          const TensorView& target, const std::optional<TensorView>& bias,
                          const TensorView& dst, const CrossEntropyOptions& ce,
                          const LinearCrossEntropyOptions& lce, const SoftmaxOptions& options) {
  detail::dist::forward(comm, hidden, weight, target, bias, dst, ce, lce, options);
}

void linear_cross_entropy_backward(Communicator& comm, const TensorView& hidden,
                                   const TensorView& weight, const TensorView& target,
                                   const std::optional<TensorView>& bias,
                                   const TensorView& dloss, const TensorView& dhidden,
                                   const TensorView& dweight,
                                   const std::optional<TensorView>& dbias,
                                   const CrossEntropyOptions& ce,
                                   const LinearCrossEntropyOptions& lce,
                                   const SoftmaxOptions& options) {
  detail::dist::backward(comm, "linear_cross_entropy_backward", hidden, weight, target, bias,
                         dloss, dhidden, dweight, dbias, ce, lce, options, nullptr);
}

void linear_cross_entropy_fused(Communicator& comm, const TensorView& hidden,
                                const TensorView& weight, const TensorView& target,
                                const std::optional<TensorView>& bias, const TensorView& dst,
                                const TensorView& dloss, const TensorView& dhidden,
                                const TensorView& dweight, const std::optional<TensorView>& dbias,
                                const CrossEntropyOptions& ce,
                                const LinearCrossEntropyOptions& lce,
                                const SoftmaxOptions& options) {
  detail::dist::backward(comm, "linear_cross_entropy_fused", hidden, weight, target, bias, dloss,
                         dhidden, dweight, dbias, ce, lce, options, &dst);
}

}  // namespace smax::distributed

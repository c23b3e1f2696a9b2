// src/ops/distributed/cross_entropy_sharded.cc: the vocabulary-parallel
// cross_entropy and cross_entropy_backward (include/smax/distributed.h).
//
// Each op: handshake (group.h): every rank validates its arguments with the
// single-process op's own checks (ce_rows::Pass, the reducer's output
// checks, the outputs' shapes and overlaps) and the ranks agree on the row
// shape, dtypes, every option of CrossEntropyOptions that changes the result
// (label_smoothing, lse_square_scale, softcap, ignore_index, reduction,
// empty_mean, which optional outputs are given, weights or not), scale,
// temperature, empty_row and a checksum of the (replicated) targets. Then
// targets are checked against V = the classes of every rank (the same check
// on the same targets on every rank, so every rank throws together). One
// rank: the single-process op (bit-equal). Several: per chunk of rows
// (sharded_common.h), each rank scans its shard of each row
// (kernels::xent_scan, the single-process scan), packs a record
// (xent_merge.h), ONE allgather, merges in float64 in rank order (the same
// on every rank: replicated outputs are bit-identical), then, while the
// chunk is in cache, writes its shard of the fused gradient / dsrc with the
// single-process gradient kernel (ce_rows::grad_row_with: shift M, p_j =
// e^(t_j - M) / D, A from the merged record; the target's -(1 - a) w_y term
// on the rank that owns the target). With class weights and kMean, the
// denominator (sum of w_y over the rows) needs the owners' weights: one
// allgather of one double per rank before the chunks.
//
// Bytes per row and rank on the wire (f32 floats; xent_merge.h):
//   | what                                        | bytes |
//   |---------------------------------------------|-------|
//   | plain (class index: ref, d, t_y)            |    12 |
//   | + softcap (t_y as a float64)                |    +4 |
//   | + class weights (w_y as a float64)          |    +8 |
//   | + label_smoothing (sum w t, sum w)          |   +16 |
//   | + entropy output (sum e (t - ref))          |    +8 |
//   | + accuracy output (best, hit)               |   +12 |
//   | probability targets (ref, d, six sums)      |    56 |
//   |   + accuracy (best, hit, q's best)          |   +16 |
//   | z_loss, lse, target_logprob outputs         |    +0 |
//   | f64 logits: ref, d, t_y (+ q's best) doubles |  +8 (+4) |
// plus, with class weights and kMean, 8 bytes per rank per call.
// The backward sends the forward's record without entropy and accuracy.
//
// Accuracy: the single-process bounds (include/smax/losses.h, f32 path)
// plus the exchange's rounding: d_k travels as f32 (2^-24 relative), so D
// and L = M + log D move by at most 2^-24 (absolute in L, relative in every
// p_j); every other field is exact (f32 values or float64 bits). So per-row
// loss within 4e-6 M_r + 2^-24 (|(1 - a) w_y| + (a / C) |sum_U w_j| + 2 zs
// |w_y| (1 + |L|)) (probabilities: sum |w_j q_j| in the first term), lse
// within 2e-6 (1 + |L|) + 2^-24, target_logprob 2e-6 (1 + |L| + |t_y|) +
// 2^-24, entropy 4e-6 (1 + |L| + sum p_j |t_j| + H) + 2^-23 (1 + |L| + max
// |t_j|), gradient entries within the backward's bound + 2^-24 s cap'_j |G
// A| p_j. Accuracy: exact (the first argmax of the whole row). The sums of
// the record (smoothing, probabilities, entropy) are added in rank order:
// float64 roundings far below the f32 bounds.
// Logits: f32, bf16, f16 (Rowwise widens them exactly; the f32 path), and
// f64: the float64 rows (cross_entropy_f64.h: ce_shard_scan_f64 /
// ce_shard_grad_f64, the single-process float64 sweep and gradient on the
// shard), whose record sends ref, d, t_y and q's best as doubles (+8 bytes
// plain: 20; the table's other fields unchanged): nothing is rounded on
// the wire, so the float64 bound (losses.h: 1e-14 F) holds with the
// merge's few float64 roundings (e^(ref_k - M), the rank-order sums).
// cross_entropy_backward recomputes L with the exchange (it needs the
// owners' w_y and the merged sums anyway): a given `lse` is validated, not
// read (as the float64 path of the single-process op does).
// Determinism: each row is computed by the same code whatever the thread or
// chunk; merges are in rank order; the bits depend only on the world size
// and the shard sizes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/loss_rows.h"
#include "core/rowwise.h"
#include "core/validate.h"
#include "kernels/cross_entropy.h"
#include "ops/distributed/group.h"
#include "ops/distributed/sharded_common.h"
#include "ops/distributed/xent_merge.h"
#include "ops/losses/cross_entropy.h"
#include "ops/losses/cross_entropy_f64.h"
#include "ops/losses/cross_entropy_rows.h"
#include "smax/distributed.h"
#include "smax/losses.h"

namespace smax {
namespace detail::dist {
namespace {

using ce_rows::Pass;
constexpr double kNanD = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfD = std::numeric_limits<double>::infinity();

// Before the handshake the shard layout is unknown: targets are checked
// for >= 0 only, weights against this shard's classes.
constexpr ClassShard kProbeShard{0, std::numeric_limits<int64_t>::max()};

// FNV-1a over the targets in row order (0 when they cannot be read: the
// rank's validate rejects them then).
int64_t target_checksum(const char* op, const TensorView& src, const TensorView& target,
                        const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  if (is_floating(target.dtype)) return 0;
  try {
    const TensorView s = as_rank1_if_scalar(src);
    const int axis = resolve_axis(options.axis, src.rank, op);
    LossOptions lo = ce.loss;
    lo.weight.reset();
    const LossRows lr(op, s, axis, target, lo, kProbeShard);
    uint64_t h = 1469598103934665603ull;
    for (int64_t r = 0; r < lr.rows(); ++r) {
      uint64_t v = static_cast<uint64_t>(lr.target(r));
      for (int b = 0; b < 8; ++b) {
        h ^= (v >> (8 * b)) & 0xff;
        h *= 1099511628211ull;
      }
    }
    return static_cast<int64_t>(h & 0x7fffffffffffffffull);
  } catch (...) {
    return 0;
  }
}

std::vector<Agreed> ce_agreed(const char* op, const TensorView& src, const TensorView& target,
                              const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  std::vector<Agreed> a;
  row_shape_agreed(src, options.axis, a);
  a.push_back({"src dtype", static_cast<int64_t>(src.dtype)});
  a.push_back({"target dtype", static_cast<int64_t>(target.dtype)});
  a.push_back({"label_smoothing", bits(ce.label_smoothing)});
  a.push_back({"lse_square_scale", bits(ce.lse_square_scale)});
  a.push_back({"softcap", bits(ce.softcap)});
  a.push_back({"ignore_index", ce.loss.ignore_index});
  a.push_back({"reduction", static_cast<int64_t>(ce.loss.reduction)});
  a.push_back({"empty_mean", static_cast<int64_t>(ce.loss.empty_mean)});
  // Which optional inputs / outputs are given: they choose the record's fields.
  const int64_t given = (ce.loss.weight ? 1 : 0) | (ce.z_loss ? 2 : 0) | (ce.lse ? 4 : 0) |
                        (ce.entropy ? 8 : 0) | (ce.target_logprob ? 16 : 0) |
                        (ce.accuracy ? 32 : 0) | (ce.grad ? 64 : 0);
  a.push_back({"optional arguments given (weight, z_loss, lse, entropy, target_logprob, "
               "accuracy, grad as bits 0..6)",
               given});
  a.push_back({"scale", bits(options.scale)});
  a.push_back({"temperature", bits(options.temperature)});
  a.push_back({"empty_row", static_cast<int64_t>(options.empty_row)});
  // With softcap, accuracy compares the float64 capped logits when an
  // additive mask is given and u otherwise (best_value): every rank must
  // send the same kind of value, so with softcap the ranks agree on whether
  // an additive mask is given (an all-zero mask on the other ranks works).
  a.push_back({"additive_mask given (with softcap > 0)",
               ce.softcap > 0.0f && options.additive_mask.has_value() ? 1 : 0});
  a.push_back({"targets (checksum)", target_checksum(op, src, target, ce, options)});
  return a;
}

// The record's fields for this call.
XentFields fields_of(const CeSetup& s, bool entropy, bool accuracy) {
  XentFields f;
  f.f64 = s.src.dtype == DType::kF64;  // the float64 rows
  f.probs = s.probs;
  f.target = !s.probs;
  f.target_f64 = !s.probs && s.cap > 0.0f;
  f.weight = !s.probs && s.has_weight;  // every rank, empty shards too
  f.smoothing = s.a > 0.0;
  f.entropy = entropy;
  f.accuracy = accuracy;
  return f;
}

// The rank that owns global class y (the first rank whose shard holds it).
int owner_of(const Group& g, int64_t y) {
  const auto it = std::upper_bound(g.offsets.begin(), g.offsets.end(), y);
  return static_cast<int>(it - g.offsets.begin()) - 1;
}

// The value accuracy_argmax compares (losses.h): the float64 t with softcap
// and a post-cap mask, else the f32 row value (t, or u with softcap alone).
double best_value(const CeSetup& s, const RowArgs& a, int64_t j) {
  if (s.cap > 0.0f && s.mask_input >= 0) return ce_rows::logit_at(s, a, j);
  return static_cast<double>(a.in[0][j]);
}

// This rank's partial of row a.row (active: the row's target is not ignored).
XentPartial scan_row(const CeSetup& s, const RowArgs& a, bool active, bool entropy,
                     bool accuracy) {
  XentPartial x;
  if (a.n == 0) return x;
  const float* weight = s.weight.empty() ? nullptr : s.weight.data();
  kernels::XentScanRequest req;
  req.sums = active && s.a > 0.0;
  req.weight = weight;
  req.entropy = entropy;
  req.argmax = active && accuracy;
  const kernels::XentRow row = ce_rows::make_row(s, a);
  const kernels::XentScan sc = kernels::xent_scan(row, req);
  x.d = sc.d;
  // A fully masked shard is the identity (-inf, 0), whatever the scan's ref.
  x.ref = sc.d == 0.0 ? -std::numeric_limits<float>::infinity() : sc.ref;
  x.sum_t = sc.sum_t;
  x.sum_w = sc.sum_w;
  x.sum_et = sc.sum_et;
  if (!active) return x;
  if (s.probs) {
    const float* q = a.in[s.target_input];
    x.ps = kernels::xent_prob_sums(row, q, weight);
    if (accuracy) {
      const int64_t idx = ce_rows::accuracy_argmax(s, a, sc);
      const int64_t qi = ce_rows::first_argmax(q, a.n);
      x.best = best_value(s, a, idx);
      x.q_best = q[qi];
      x.hit = idx == qi;
    }
  } else {
    const bool local = s.lr->local(a.row);
    if (local) {
      const int64_t y = s.lr->local_target(a.row);
      x.ty = ce_rows::logit_at(s, a, y);
      x.wy = s.lr->weight(a.row);
    }
    if (accuracy) {
      const int64_t idx = ce_rows::accuracy_argmax(s, a, sc);
      x.best = best_value(s, a, idx);
      x.hit = local && idx == s.lr->local_target(a.row);
    }
  }
  return x;
}

// sum of w_y over the rows (class weights, class-index targets): each rank
// sums the rows whose target it owns, in row order; then rank order.
double global_weight_sum(const Group& g, const CeSetup& s) {
  double mine = 0.0;
  for (int64_t r = 0; r < s.rows; ++r) mine += s.lr->local(r) ? s.lr->weight(r) : 0.0;
  const std::vector<double> all = allgather_rows(g, std::vector<double>{mine});
  double total = 0.0;
  for (double v : all) total += v;
  return total;
}

// The kMean denominator every rank uses (prepare's counts only this shard's
// targets): without weights the count of non-ignored rows (the
// single-process value: a sum of ones), else the exchanged sum of w_y.
// Probability targets: the row count, already right.
void fix_denominator(const Group& g, CeSetup& s) {
  if (s.probs) return;
  double total = 0.0;
  if (!s.has_weight) {
    for (int64_t r = 0; r < s.rows; ++r) total += s.lr->ignored(r) ? 0.0 : 1.0;
  } else {
    total = global_weight_sum(g, s);
  }
  s.red.emplace(s.red->with_denominator(total));
}

// This rank's partial of a float64 row (ce_shard_scan_f64's statistics).
XentPartial scan_row_f64(const CeSetup& s, const RowArgs64& a, bool active, bool entropy,
                         bool accuracy) {
  const bool local = !s.probs && active && s.lr->local(a.row);
  const int64_t y = local ? s.lr->local_target(a.row) : -1;
  const CeShardF64 r = ce_shard_scan_f64(s, a, active, y, entropy, accuracy, a.scratch);
  XentPartial x;
  x.ref = r.m;
  x.d = r.S;
  x.ty = r.ty;
  x.wy = local ? s.lr->weight(a.row) : 0.0;
  x.sum_t = r.sum_t;
  x.sum_w = r.sum_w;
  x.sum_et = r.sum_et;
  x.best = r.best;
  x.q_best = r.q_best;
  x.hit = r.hit;
  x.ps = {r.qt, r.q, r.q_masked, r.wqt, r.wq, r.wq_masked};
  return x;
}

// Scratch (in row values) of the float64 rows' sweeps.
int64_t scratch_of(bool f64, int64_t n) { return f64 ? ce_f64_scratch(n) : 0; }

// The chunks of a call: scan (f32 or float64 rows), allgather, merge, then
// on_chunk(begin, end, merged) (the output pass over the chunk's rows).
// `stats`: inactive rows are scanned too (lse / entropy outputs).
template <class OnChunk>
void for_each_chunk(const Group& g, Pass& scan, const XentFields& f, bool entropy, bool accuracy,
                    bool stats, OnChunk&& on_chunk) {
  const CeSetup& s = scan.s;
  const int64_t F = f.floats();
  const int64_t chunk = chunk_rows(g, 12, s.rows);
  for (int64_t begin = 0; begin < s.rows; begin += chunk) {
    const int64_t end = std::min(s.rows, begin + chunk);
    const int64_t count = end - begin;
    std::vector<float> rec(static_cast<size_t>(count * F));
    for (int64_t i = 0; i < count; ++i) pack(f, XentPartial{}, rec.data() + i * F);
    auto scan_fn = [&](const auto& a) {
      const bool active = s.red->active(a.row);
      if (!active && !stats) return;
      float* out = rec.data() + (a.row - begin) * F;
      if constexpr (kIsF64Row<decltype(a)>) {
        pack(f, scan_row_f64(s, a, active, entropy, accuracy), out);
      } else {
        pack(f, scan_row(s, a, active, entropy, accuracy), out);
      }
    };
    if (f.f64) {
      scan.rw.run_rows<double>(begin, end, scratch_of(true, g.classes), scan_fn);
    } else {
      scan.rw.run_rows<float>(begin, end, 0, scan_fn);
    }
    const std::vector<float> all = allgather_rows(g, rec);
    std::vector<XentMerged> merged(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t r = begin + i;
      int owner = -1;
      if (!s.probs && s.red->active(r)) owner = owner_of(g, s.lr->target(r));
      merged[static_cast<size_t>(i)] = merge(f, all.data() + i * F, count * F, g.size, owner);
    }
    on_chunk(begin, end, merged);
  }
}

// The gradient rows of the chunk [begin, end) with coefficients G into the
// store pass's output 0 (the fused gradient or dsrc).
void grad_chunk(Pass& store, const XentFields& f, int64_t begin, int64_t end,
                const std::vector<XentMerged>& merged, const std::vector<double>& G) {
  const CeSetup& s = store.s;
  const double C = static_cast<double>(s.vocab);
  auto fn = [&](const auto& a) {
    const XentMerged& m = merged[static_cast<size_t>(a.row - begin)];
    const double g = G[static_cast<size_t>(a.row)];
    auto* out = a.out[0];
    if (!s.red->active(a.row)) {
      for (int64_t j = 0; j < a.n; ++j) out[j] = 0;
      return;
    }
    if (a.n == 0) return;
    const int64_t y = !s.probs && s.lr->local(a.row) ? s.lr->local_target(a.row) : -1;
    const double A = m.kind == XentMerged::kFinite ? grad_A(m, s.probs, s.a, s.zs, C) : 0.0;
    if constexpr (kIsF64Row<decltype(a)>) {
      ce_shard_grad_f64(s, a, g, m.L, m.M, m.D, A, y, m.wy, out, a.scratch);
    } else {
      if (ce_rows::grad_row_special(s, a, g, m.L, out)) return;
      ce_rows::grad_row_with(s, a, g, m.shift, 1.0 / m.D, A, y, m.wy, out);
    }
  };
  if (f.f64) {
    store.rw.run_rows<double>(begin, end, scratch_of(true, s.classes), fn);
  } else {
    store.rw.run_rows<float>(begin, end, 0, fn);
  }
}

}  // namespace
}  // namespace detail::dist

namespace distributed {

void cross_entropy(Communicator& comm, const TensorView& src, const TensorView& target,
                   const TensorView& dst, const CrossEntropyOptions& ce,
                   const SoftmaxOptions& options) {
  using namespace detail;
  using namespace detail::dist;
  const char* op = "cross_entropy";
  std::optional<Pass> scan, store;
  std::optional<RowView> lse_rv, ent_rv, tlp_rv;
  // Declares every operand on (scan, store) for `shard` and checks the
  // outputs as the single-process op does.
  auto build = [&](ClassShard shard) {
    scan.reset();
    store.reset();
    scan.emplace(op, src, target, ce, options, shard);
    store.emplace(op, src, target, ce, options, shard);
    const CeSetup& s = scan->s;
    s.red->check_output(dst, "dst");
    std::vector<NamedView> outs = {{dst, "dst"}};
    if (ce.z_loss) {
      s.red->check_output(*ce.z_loss, "z_loss");
      outs.push_back({*ce.z_loss, "z_loss"});
    }
    if (ce.accuracy) {
      s.red->check_output(*ce.accuracy, "accuracy");
      outs.push_back({*ce.accuracy, "accuracy"});
    }
    auto row_out = [&](const std::optional<TensorView>& v, const char* name,
                       std::optional<RowView>& rv) {
      rv.reset();
      if (!v) return;
      rv = check_row_view(op, s.src, s.axis, *v, name, true);
      outs.push_back({*v, name});
    };
    row_out(ce.lse, "lse", lse_rv);
    row_out(ce.entropy, "entropy", ent_rv);
    row_out(ce.target_logprob, "target_logprob", tlp_rv);
    std::vector<NamedView> ins = {{target, "target"}};
    if (ce.loss.weight) ins.push_back({*ce.loss.weight, "weight"});
    if (options.additive_mask) ins.push_back({*options.additive_mask, "additive_mask"});
    if (options.bool_mask) ins.push_back({*options.bool_mask, "bool_mask"});
    if (ce.grad) {
      const bool in_place = ce_rows::same_view(*ce.grad, src);
      if (in_place) check_no_self_overlap(*ce.grad, "grad", op);
      store->rw.add_output(*ce.grad, "grad", /*allow_alias=*/in_place);
      std::vector<NamedView> others = ins;
      others.insert(others.end(), outs.begin(), outs.end());
      check_outputs_disjoint(op, {{*ce.grad, "grad"}}, others);
    }
    ins.push_back({src, "src"});
    check_outputs_disjoint(op, outs, ins);
    scan->rw.run_rows<float>(0, 0, 0, [](const RowArgs&) {});
    store->rw.run_rows<float>(0, 0, 0, [](const RowArgs&) {});
  };
  const std::vector<Agreed> agreed = ce_agreed(op, src, target, ce, options);
  const Group g = begin(comm, op, agreed, shard_classes(src, options.axis), [&] {
    ce_rows::check_ce_options(op, ce);
    build(kProbeShard);
  });
  if (g.size == 1) {
    scan.reset();
    store.reset();
    smax::cross_entropy(src, target, dst, ce, options);
    return;
  }
  build(ClassShard{g.offset, g.vocab});  // targets in [0, V): same verdict on every rank
  CeSetup& s = scan->s;
  fix_denominator(g, s);
  fix_denominator(g, store->s);
  const bool want_ent = ent_rv.has_value(), want_acc = ce.accuracy.has_value();
  const XentFields f = fields_of(s, want_ent, want_acc);
  const size_t rows = static_cast<size_t>(s.rows);
  std::vector<double> loss(rows, 0.0), z(rows, 0.0), lse(rows, 0.0), ent(rows, 0.0),
      tlp(rows, 0.0), acc(rows, 0.0);
  const bool fused = ce.grad.has_value();
  const std::vector<double> G = fused ? s.red->unit_coefficients() : std::vector<double>();
  const double C = static_cast<double>(s.vocab);

  const bool stats = lse_rv.has_value() || want_ent;
  for_each_chunk(g, *scan, f, want_ent, want_acc, stats,
                 [&](int64_t begin, int64_t end, const std::vector<XentMerged>& merged) {
    for (int64_t r = begin; r < end; ++r) {
      const XentMerged& m = merged[static_cast<size_t>(r - begin)];
      const bool active = s.red->active(r);
      if (!active && !stats) continue;
      double L = -kInfD, H = 0.0, loss_r = 0.0, z_r = 0.0, tlp_r = -kInfD, acc_r = 0.0;
      if (m.kind == XentMerged::kNaN ||
          (m.kind == XentMerged::kEmpty && s.empty_row == EmptyRow::kNan)) {
        L = H = loss_r = z_r = tlp_r = acc_r = kNanD;
      } else if (m.kind == XentMerged::kFinite) {
        L = m.L;
        H = m.H;
        if (active) {
          const XentRowLoss rl = row_loss(m, s.probs, s.a, s.zs, C);
          loss_r = rl.loss;
          z_r = rl.z;
          tlp_r = rl.tlp;
          acc_r = m.hit ? 1.0 : 0.0;
        }
      }
      const size_t ri = static_cast<size_t>(r);
      loss[ri] = loss_r;
      z[ri] = z_r;
      lse[ri] = L;
      ent[ri] = H;
      tlp[ri] = active ? tlp_r : 0.0;
      acc[ri] = active ? acc_r : 0.0;
    }
    if (fused) grad_chunk(*store, f, begin, end, merged, G);
  });

  s.red->write(loss, dst);
  if (ce.z_loss) s.red->write(z, *ce.z_loss);
  if (ce.accuracy) {
    double count = 0.0;
    for (int64_t r = 0; r < s.rows; ++r) count += s.red->active(r) ? 1.0 : 0.0;
    s.red->with_denominator(count).write(acc, *ce.accuracy);
  }
  if (lse_rv) write_rows(s.src, s.axis, *lse_rv, lse);
  if (ent_rv) write_rows(s.src, s.axis, *ent_rv, ent);
  if (tlp_rv) write_rows(s.src, s.axis, *tlp_rv, tlp);
}

void cross_entropy_backward(Communicator& comm, const TensorView& src, const TensorView& target,
                            const TensorView& dloss, const TensorView& dsrc,
                            const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  using namespace detail;
  using namespace detail::dist;
  const char* op = "cross_entropy_backward";
  std::optional<Pass> scan, store;
  auto build = [&](ClassShard shard) {
    scan.reset();
    store.reset();
    scan.emplace(op, src, target, ce, options, shard);
    store.emplace(op, src, target, ce, options, shard);
    store->rw.add_output(dsrc, "dsrc", /*allow_alias=*/true);
    const CeSetup& s = scan->s;
    (void)s.red->coefficients(dloss);  // validates dloss
    std::vector<NamedView> ins = {{target, "target"}, {dloss, "dloss"}};
    if (ce.loss.weight) ins.push_back({*ce.loss.weight, "weight"});
    if (ce.lse) {
      // The single-process op's checks; the sharded backward recomputes L.
      check_row_view(op, s.src, s.axis, *ce.lse, "lse", false);
      if (s.a == 0.0) ins.push_back({*ce.lse, "lse"});
    }
    check_outputs_disjoint(op, {{dsrc, "dsrc"}}, ins);
    scan->rw.run_rows<float>(0, 0, 0, [](const RowArgs&) {});
    store->rw.run_rows<float>(0, 0, 0, [](const RowArgs&) {});
  };
  const std::vector<Agreed> agreed = ce_agreed(op, src, target, ce, options);
  const Group g = begin(comm, op, agreed, shard_classes(src, options.axis), [&] {
    ce_rows::check_ce_options(op, ce);
    if (ce.grad) {
      fail(op, "grad (the fused gradient of the forward) is not an option of the backward "
               "pass; pass the gradient as dsrc");
    }
    build(kProbeShard);
  });
  if (g.size == 1) {
    scan.reset();
    store.reset();
    smax::cross_entropy_backward(src, target, dloss, dsrc, ce, options);
    return;
  }
  build(ClassShard{g.offset, g.vocab});
  CeSetup& s = scan->s;
  fix_denominator(g, s);
  fix_denominator(g, store->s);
  const std::vector<double> G = s.red->coefficients(dloss);
  const XentFields f = fields_of(s, false, false);
  for_each_chunk(g, *scan, f, false, false, false,
                 [&](int64_t begin, int64_t end, const std::vector<XentMerged>& merged) {
                   grad_chunk(*store, f, begin, end, merged, G);
                 });
}

}  // namespace distributed
}  // namespace smax

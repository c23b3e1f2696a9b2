// src/ops/losses/cross_entropy_f64.h: the float64 rows of cross_entropy and
// cross_entropy_backward, taken when the logits are f64 (cross_entropy.cc
// runs Rowwise::run<double>, so every operand arrives as float64: logits
// t = x * s + mask with s = double(scale) / double(temperature), targets,
// class weights and dloss read exactly).
//
// A row: t_j = softcap tanh(u_j / softcap) + mask_j (u_j as is without a
// softcap), then one sweep of the float64 softmax kernel
// (kernels::exp_terms_row_f64: m = max t, e_j = e^(t_j - m) from the exact
// two-term t_j - m, or fl(t_j - m) in rows of range below 32, within 2^-49;
// S = sum e_j compensated), L = m + log S. Every other sum
// (label smoothing's sum w_j t_j, probability targets' sums, the entropy's
// sum e_j (t_j - m)) is a Neumaier sum in index order. The gradient is
// s cap'_j (g A e_j / S - w_j (b + b_q q_j)) with the target's -g (1 - a) w_y
// folded into its own entry, in float64, rounded once to dsrc's dtype.
// Results are bitwise identical for any thread count (one row, one task).
//
// Bounds (include/smax/losses.h, "float64"; tests/test_cross_entropy_f64.cc
// checks them against a long double oracle): per-row loss, lse, z and
// target_logprob within 1e-14 of the row's magnitude (1 + |L| plus the
// weighted magnitudes of the terms the loss adds); gradient entries within
// 1e-14 |s| cap'_j (|g A| p_j + |w_j (b + b_q q_j)| + |g (1 - a) w_y| [j = y])
// plus 1e-300 (p_j below float64's underflow is 0). The backward recomputes
// L from the logits: a given `lse` (f32 or not) is validated, not read.
#pragma once

#include <cstdint>
#include <limits>

#include "core/rowwise.h"
#include "ops/losses/cross_entropy.h"

namespace smax::detail {

/// What the forward wants of a row besides the loss.
struct CeWants {
  bool entropy = false;
  bool accuracy = false;
};

/// A row's results (the f32 rows' names in cross_entropy.cc).
struct CeRowF64 {
  double L = 0.0, H = 0.0, loss = 0.0, z = 0.0, tlp = 0.0, acc = 0.0;
};

/// Scratch (in doubles) a float64 row needs: the logits t and the terms e.
inline int64_t ce_f64_scratch(int64_t n) { return 2 * n; }

/// The forward row of row a.row (n >= 0; n = 0 is an empty row): per-row results (inactive rows:
/// only L and H), and, when grad is not null, the fused gradient with
/// coefficient G (an inactive row's gradient is 0). `work` holds
/// ce_f64_scratch(n) doubles; grad may be exactly a.in[0] (each element is
/// read before it is written) and must not overlap anything else.
CeRowF64 ce_forward_row_f64(const CeSetup& s, const RowArgs64& a, bool active, CeWants wants,
                            double G, double* grad, double* work);

/// The backward row: dsrc of an active row with coefficient g (inactive
/// rows are the caller's: 0). out may be exactly a.in[0].
void ce_backward_row_f64(const CeSetup& s, const RowArgs64& a, double g, double* out,
                         double* work);

/// A vocabulary-parallel shard of a float64 row
/// (ops/distributed/cross_entropy_sharded.cc): this shard's statistics from
/// one sweep (the row's own t and terms), which the ranks merge.
///  m, S: max t and the compensated sum of e^(t_j - m) (S NaN: NaN or +inf
///  here; S = 0: every entry masked, or n = 0); ty: t of the local target
///  y_local (when >= 0); sum_t, sum_w: label smoothing's sums (a > 0);
///  sum_et: sum e^(t_j - m) (t_j - m) (entropy); ps: the probability sums;
///  accuracy: best = the value of the shard's first argmax (of u with a
///  softcap and no mask, else of t), hit = that argmax is y_local (or q's
///  first argmax), q_best = q's max.
struct CeShardF64 {
  double m = -std::numeric_limits<double>::infinity(), S = 0.0;
  double ty = 0.0, sum_t = 0.0, sum_w = 0.0, sum_et = 0.0;
  double qt = 0.0, q = 0.0, q_masked = 0.0, wqt = 0.0, wq = 0.0, wq_masked = 0.0;
  double best = -std::numeric_limits<double>::infinity();
  double q_best = -std::numeric_limits<double>::infinity();
  bool hit = false;
};
CeShardF64 ce_shard_scan_f64(const CeSetup& s, const RowArgs64& a, bool active, int64_t y_local,
                             bool entropy, bool accuracy, double* work);

/// The gradient of this shard's part of an active row with coefficient g,
/// given the row's global L = M + log D and A (the p_j coefficient), the
/// local target y_local (-1: another shard's) and w_y: the formula of
/// grad_row above with p_j = e^(t_j - m) e^(m - M) / D; special rows (L
/// -inf: empty_row; L NaN or g NaN: NaN, masked entries 0) as there. out
/// may be exactly a.in[0]; work: ce_f64_scratch(n) doubles.
void ce_shard_grad_f64(const CeSetup& s, const RowArgs64& a, double g, double L, double M,
                       double D, double A, int64_t y_local, double wy, double* out, double* work);

}  // namespace smax::detail

// src/kernels/softmax_f64.h: float64 softmax, log_softmax, logsumexp and
// their backward over one contiguous row: float64 lanes on every SIMD
// target (Highway, dynamic dispatch), not f32 kernels behind a cast.
//
// Forward, a row of n >= 1 logits t (already scaled and masked by ops;
// -inf = masked), op 0 softmax, 1 log_softmax (out[0..n)), 2 logsumexp
// (out[0]); out may equal t (in place):
//   m = max t; d_i = t_i - m as an exact two-term difference d_i + e_i
//   (TwoSum), e^(t_i - m) = e^(d_i + e_i) by kernels/exp_f64-inl.h (within
//   1.33 u relative, u = 2^-53: 1.5 ulp; a cheaper form with the same bits when every
//   finite t_i - m is >= -708), so no bits of t_i - m are lost for any
//   |t_i - m|; except rows whose range max - min (over the entries above
//   -inf) is below 32: there d_i = fl(t_i - m) alone (its dropped error
//   |delta_i| <= half an ulp of 32 = 2^-49, and <= 2^-53 |d_i|) and e^d_i by
//   the same exp without the lo term. S = sum of those terms: blocks of 8
//   vectors summed plainly (a depth-3 tree), the block sums added with
//   per-lane Kahan compensation and the lanes with Neumaier's, in a fixed
//   order: within 7.1 u of the terms' sum, the error does not grow with n.
//   softmax_i = term_i * (1 / S) (the terms are kept in out between the
//   passes: one Exp per element); log_softmax_i = (d_i - log S) + e_i
//   (range-below-32 rows: fl(fl(t_i - m) - log S), within 2^-49 + u |value|
//   of (t_i - m) - log S); logsumexp = m + log S.
// Special values as the f32 kernels (kernels.h): NaN anywhere -> NaN row;
// +inf -> NaN row; all -inf -> `policy` (kZero: softmax 0, log_softmax and
// logsumexp -inf; kNan: NaN); -inf entries give exactly 0 (log_softmax -inf).
// Terms below e^-745 are 0 (float64 underflow).
//
// Backward (y, dy, dx of n >= 1; dx may equal dy):
//   softmax:     dx = s * y * (dy - <dy, y>), the dot with per-lane Kahan
//                compensation on every vector, lanes summed as above;
//   log_softmax: dx = s * (dy - exp(y) * sum dy), 0 where y = -inf.
//
// Error budget of softmax_i = term_i (1 / S), relative, u = 2^-53: the
// argument |delta_i| (0, or <= 2^-49 = 16 u in a range-below-32 row) plus
// S's weighted mean of the |delta_j| (<= 16 u), the exp of term_i and the
// weighted exps in S (1.33 u each), S's summation (7.1 u), 1 / S and the
// product (1 u each): <= 16 + 16 + 2.66 + 7.1 + 2 = 43.8 u = 4.9e-15 (under
// 1.3e-15 when the argument is exact); log_softmax / logsumexp take log S
// (S within 24.5 u: 2.8e-15 absolute in log S) and the exact d_i + e_i.
// Bounds (include/smax/softmax.h, "float64"; tests/test_softmax_f64.cc checks
// them against a long double oracle on every target): softmax relative
// error <= 1e-14 for outputs >= 1e-300 (below: absolute <= 1e-300);
// log_softmax / logsumexp absolute <= 1e-14 (1 + |value|); backward
// |dx - ref| <= 1e-14 |s| |y| (|dy| + |<dy,y>|) + 4e-16 |s| |y| sum_j |y_j dy_j|
// (softmax) and 1e-14 |s| (|dy| + e^y sum_j |dy_j|) (log_softmax), for any n.
// Results are bitwise identical whatever the alignment (blocks and the tail
// are on a grid from the row start).
#pragma once

#include <cstdint>
#include <string>

#include "smax/options.h"

namespace smax::kernels {

enum class F64Op : int { kSoftmax = 0, kLogSoftmax = 1, kLogSumExp = 2 };

/// next (optional): the next row's logits, a hint only: logsumexp rows of
/// n <= 2^15 prefetch its first n doubles during the exp pass (never read
/// otherwise; the results do not depend on it).
void softmax_row_f64(F64Op op, const double* t, int64_t n, EmptyRow policy, double* out,
                     const double* next = nullptr) noexcept;
void softmax_backward_row_f64(bool log, const double* y, const double* dy, int64_t n, double s,
                              double* dx) noexcept;
/// The float64 losses' sweep of a row of n >= 1 logits t (-inf = masked):
/// max = max t; when the row holds no NaN, no +inf and some t > -inf,
/// terms[i] = e^(t_i - max) as in softmax_row_f64 (exact two-term argument,
/// or fl(t_i - max) alone in a row of range below 32; 0 where t_i = -inf;
/// terms may equal t) and sum = their compensated sum
/// (>= 1). Otherwise terms is not written and sum is NaN (NaN or +inf in
/// the row) or 0 (every t_i = -inf).
struct F64Terms {
  double max;
  double sum;
};
F64Terms exp_terms_row_f64(const double* t, int64_t n, double* terms) noexcept;
/// e.g. "f64_softmax__avx2" (the active target's name).
std::string kernel_name_f64(const std::string& op);

}  // namespace smax::kernels

// src/ops/normalizers/rescaled_f64.h: the float64 row math of SSMax, softpick
// and StableMax (+ its cross-entropy) (include/smax/normalizers.h), used by
// ops/normalizers/rescaled.cc when the logits are f64 (Rowwise::run<double>
// hands float64 rows: t = x s + mask in double, -inf = masked).
//
// The same formulas and special rows as the f32 kernels (kernels/rescaled.h),
// evaluated in double: exponentials with an exact two-term argument, sums
// and dots compensated (Neumaier, index order), each result rounded once to
// double. None of this throws or allocates; outputs never alias inputs.
#pragma once

#include <cstdint>

#include "core/compensated.h"
#include "smax/options.h"

namespace smax::detail {

// ---- SSMax ------------------------------------------------------------------------
/// y = softmax(u), u_i = fl(t_i c) (-inf where t_i = -inf whatever the sign
/// of c; NaN where t_i = +inf and c <= 0), by the float64 softmax kernel.
/// `u` holds n doubles of scratch.
void ssmax_row_f64(const double* t, int64_t n, double c, EmptyRow policy, double* u,
                   double* y) noexcept;
/// sum_i t_i y_i (g_i - dot) over the entries with y_i != 0 (compensated).
double ssmax_ds_sum_f64(const double* t, const double* y, const double* g, int64_t n,
                        double dot) noexcept;

// ---- softpick ---------------------------------------------------------------------
/// y = softpick(t) with denominator term eps (>= 0); NaN / +inf -> NaN row,
/// all -inf -> policy, all visible t <= 0 -> zeros. With m = max t > 0:
/// a_j = |e^t_j - 1| e^-m = e^(t_j - m) (-expm1(-t_j)) (t_j > 0) or
/// e^-m (-expm1(t_j)) (t_j <= 0), y_j = [t_j > 0] a_j / (sum a + eps e^-m).
void softpick_row_f64(const double* t, int64_t n, double eps, EmptyRow policy,
                      double* y) noexcept;
/// dx_j = scale (e^t_j / S) ([t_j > 0] g_j - sgn(t_j) <g, y>), sgn(0) = -1;
/// 0 where masked (and masked g_j left out of <g, y>).
void softpick_backward_row_f64(const double* t, const double* g, int64_t n, double eps,
                               double scale, EmptyRow policy, double* dx) noexcept;

// ---- StableMax ----------------------------------------------------------------------
/// y = s(t) / sum s, s(x) = x + 1 (x >= 0), 1 / (1 - x) (x < 0), s(-inf) = 0;
/// NaN / +inf -> NaN row, all -inf -> policy. A sum beyond float64 is
/// taken on s 2^-600 (the quotients are unchanged).
void stablemax_row_f64(const double* t, int64_t n, EmptyRow policy, double* y) noexcept;
/// dx_j = scale (s'_j / sum s)(g_j - <g, y>), s' = 1 (t >= 0), 1 / (1 - t)^2.
void stablemax_backward_row_f64(const double* t, const double* g, int64_t n, double scale,
                                EmptyRow policy, double* dx) noexcept;
/// k sum_{j != exclude} s(t_j) (compensated; NaN if a t is NaN, +inf if a
/// t is +inf), with the row's scale k = 1, or 2^-600 when the plain sum
/// (or the sum with s(t_exclude)) would overflow float64; *k_out = k. Every
/// quotient of the losses is formed from k-scaled values.
double stablemax_sum_f64(const double* t, int64_t n, int64_t exclude, double* k_out) noexcept;
/// StableMax cross-entropy gradient row (target in [0, n)), from
/// others = stablemax_sum_f64(t, n, target, &k):
/// dx_j = coef (k s_j / S) / (1 + |t_j|) for j != target, dx_t = -coef
/// (others / S) / (1 + |t_t|), S = others + k s(t_target); 0 where masked.
void stablemax_ce_grad_row_f64(const double* t, int64_t n, int64_t target, double others,
                               double k, double coef, double* dx) noexcept;
/// s(x) in double.
double stable_s_f64(double x) noexcept;

}  // namespace smax::detail

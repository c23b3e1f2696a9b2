// src/ops/normalizers/reweight_f64.h: the float64 row math of the
// re-weighting normalisers (include/smax/normalizers.h, part 2): SA-Softmax,
// the sigmoid and softplus normalisers, Power-Softmax, probability-domain
// temperature and logit standardisation, used by ops/normalizers/reweight.cc
// when an input is f64 (Rowwise::run<double> hands float64 rows: t = x s +
// mask in double, -inf = masked).
//
// The same formulas and special rows as the f32 kernels (kernels/reweight.h),
// evaluated in double, with the quantities the f32 path rounds to f32 kept
// in double: the sigmoid's default bias -ln n, softplus's lambda and
// z = lambda t, the standardised logits v = (t - mean) k. Exponentials of a
// difference take an exact two-term argument, sums and dots are compensated
// (Neumaier, index order), softmaxes are the float64 softmax kernel's
// (kernels/softmax_f64.h); no flush of tiny values (each output is the
// float64 value rounded once to its dtype by the driver). None of this
// throws or allocates; outputs never alias inputs unless stated.
//
// Every row function takes a row of n >= 1 values on which the caller's
// prelude (reweight.cc) has already handled the rows it names (NaN, +inf, no
// visible entry) unless it says it handles them itself.
#pragma once

#include <cstdint>
#include <limits>

#include "smax/normalizers.h"
#include "smax/options.h"

namespace smax::detail {

/// Statistics of a float64 row over its visible entries (t != -inf): the
/// field names of kernels::RowStats.
struct RowStatsF64 {
  int64_t visible = 0;  ///< entries != -inf (NaN included)
  double min = std::numeric_limits<double>::infinity();   ///< over visible non-NaN entries
  double max = -std::numeric_limits<double>::infinity();  ///< over visible non-NaN entries
  bool has_nan = false;
};
RowStatsF64 row_stats_f64(const double* t, int64_t n) noexcept;

// ---- SA-Softmax -------------------------------------------------------------------
/// The bounds of the normalised variant: r_i = (t_i - a) c, a = min(min t, 0),
/// c = 1 / (b - a) with b = max(max t, 0) (c = 0 when b == a). Plain: a = 0,
/// c = 1 and r_i = t_i. When b - a overflows (logits of both signs near
/// DBL_MAX) r is formed on halves: (t/2 - a/2) c2, c2 = 1 / (b/2 - a/2), and
/// c = c2 / 2 (the derivative dr/dt).
struct SaBoundsF64 {
  bool normalized = false;
  bool halves = false;
  double a = 0.0, c = 1.0, c2 = 2.0;
  double r(double t) const {
    if (!normalized) return t;
    return halves ? (0.5 * t - 0.5 * a) * c2 : (t - a) * c;
  }
};
SaBoundsF64 sa_bounds_f64(bool normalized, const double* t, int64_t n) noexcept;
/// y_i = r_i p_i, p = softmax(t) (the float64 kernel: NaN / +inf / empty
/// rows as softmax); y_i = p_i where t_i = -inf (0, or NaN in a NaN row).
/// `p` holds n doubles of scratch (it may be y).
void sa_forward_row_f64(const double* t, int64_t n, bool normalized, EmptyRow policy, double* p,
                        double* y) noexcept;
/// dx_j = scale p_j (g_j q_j - <g, y>) (q = 1 + t plain, c + r normalised),
/// with the gradient through the bounds (grad_through_bounds, normalised):
/// scale c (<g, y> - <g, p>) at the first arg-min (min t < 0) and
/// -scale c <g, y> at the first arg-max (max t > 0). Masked entries: p_j * 0.
/// `p` holds n doubles of scratch (not g, not dx).
void sa_backward_row_f64(const double* t, const double* g, int64_t n, bool normalized,
                         bool grad_through_bounds, double scale, EmptyRow policy, double* p,
                         double* dx) noexcept;

// ---- sigmoid normaliser ------------------------------------------------------------
/// y_i = sigmoid(t_i + b) with e^-|t + b| from an exact two-term t + b;
/// +inf -> 1, -inf -> 0, NaN -> NaN.
void sigmoid_norm_row_f64(const double* t, int64_t n, double b, double* y) noexcept;

// ---- softplus normaliser -------------------------------------------------------------
/// The forward row (y of n doubles) of a row with a visible entry, no NaN
/// and no +inf, whose max visible t is tmax: z_i = lambda t_i; power 1:
/// y_i = softplus(z_i) / sum softplus(z), the terms scaled by
/// e^(-min(max z, 0)); else y = softmax(power log softplus(z)). Writes the
/// special rows itself (max z overflowing to +inf -> NaN row; every z = -inf
/// -> policy) and returns false for them.
bool softplus_row_f64(const double* t, int64_t n, double lambda, double power, double tmax,
                      EmptyRow policy, double* y) noexcept;
/// dx_j = coef y_j rho(z_j) (g_j - r), rho = sigmoid / softplus, r = <g, y>
/// (compensated); 0 where t_j = -inf. dx may equal g.
void softplus_backward_row_f64(const double* t, const double* y, const double* g, int64_t n,
                               double lambda, double coef, double* dx) noexcept;

// ---- Power-Softmax ---------------------------------------------------------------------
/// w_i = (t_i / M)^p (0 where masked), returns their compensated sum.
double power_terms_f64(const double* t, int64_t n, int p, double M, double* w) noexcept;
/// dx_j = ((t_j / M)^(p - 1) (g_j - r) coef) / M; 0 where masked (coef =
/// s p / S: no product with M is formed, so M near DBL_MAX or subnormal
/// neither overflows nor underflows the coefficient). dx may equal g.
void power_backward_row_f64(const double* t, const double* g, int64_t n, int p, double M,
                            double r, double coef, double* dx) noexcept;

// ---- probability-domain temperature -------------------------------------------------------
/// w_i = (t_i / M)^a, 0 where t_i is 0 or -inf; returns their compensated
/// sum. The quotient q = t_i / M is taken as mantissas and exponents
/// (frexp) when it would be subnormal, so q^a keeps its accuracy there.
double prob_pow_terms_f64(const double* t, int64_t n, double a, double M, double* w) noexcept;
/// dx_j = ((t_j / M)^(a - 1) (g_j - r) coef) / M (coef = s a / S); at
/// t_j = 0 the factor is 0 (a > 1), 1 (a == 1) or +inf (a < 1); 0 where
/// masked. dx may equal g.
void prob_pow_backward_row_f64(const double* t, const double* g, int64_t n, double a, double M,
                               double r, double coef, double* dx) noexcept;

// ---- logit standardisation ------------------------------------------------------------------
/// logit_standardization's float64 row (y of n doubles): mean and std over
/// the visible entries (N = visible of them), taken on the row scaled by a
/// power of two (so no sum overflows or underflows) with the mean kept as a
/// two-double pair (the deviations t - mean of logits far from 0,
/// 12345.678 +- 0.01, keep their accuracy, which the backward's C term
/// needs: one rounding of the mean would be 1e-10 of such a deviation);
/// v_i = ((t_i - mean) / (std + eps)) / T (0 when std = 0), never a product
/// that could overflow, then the float64 softmax kernel.
void standardization_row_f64(const double* t, int64_t n, int64_t visible,
                             const LogitStandardizationOptions& ls, EmptyRow policy,
                             double* y) noexcept;
/// Its VJP: dx_j = s ((h_j - d_j C) / se) / T, h = y (g - <g, y>),
/// d = t - mean, se = std + eps, C = (sum_i h_i d_i / std) / (se D)
/// (C = 0 when std = 0; a constant row with eps = 0 gets 0); 0 where
/// masked. `y` holds n doubles of scratch (not g, not dx).
void standardization_backward_row_f64(const double* t, const double* g, int64_t n,
                                      int64_t visible, const LogitStandardizationOptions& ls,
                                      double scale, EmptyRow policy, double* y,
                                      double* dx) noexcept;

}  // namespace smax::detail

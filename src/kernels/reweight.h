// src/kernels/reweight.h: row kernels of the re-weighting normalisers
// (include/smax/reweight.h): SA-Softmax, sigmoid and softplus normalisers,
// Power-Softmax, probability-domain temperature, logit standardisation.
//
// Contract shared by every function here (like kernels.h): one contiguous row
// `t` of n >= 1 f32 logits (the op's logit transform already applied, -inf =
// masked), noexcept, allocation-free, no read or write outside [p, p + n).
// Outputs may equal an input of the same role only where stated ("may equal
// p"). Masked entries (t == -inf) give exactly 0 in every output and every
// gradient unless stated. Sums and dots accumulate in float64.
// Ops validate parameters and handle NaN / all-masked rows before calling
// (except where a kernel states how it propagates them).
#pragma once

#include <cstdint>

namespace smax::kernels {

/// Statistics of a row over its visible entries (t != -inf).
struct RowStats {
  int64_t visible = 0;           ///< entries != -inf (NaN included)
  float min = __builtin_inff();  ///< min over visible non-NaN entries (+inf if none)
  float max = -__builtin_inff(); ///< max over visible non-NaN entries (-inf if none)
  bool has_nan = false;
};
RowStats reweight_row_stats(const float* t, int64_t n) noexcept;

/// sum of t_i over visible entries, float64.
double reweight_visible_sum(const float* t, int64_t n) noexcept;
/// sum of (t_i - mu)^2 over visible entries, float64 throughout.
double reweight_visible_sq_dev(const float* t, int64_t n, double mu) noexcept;

// ---- sigmoid normaliser ------------------------------------------------------
/// y_i = sigmoid(t_i + bias) with the sum t + bias exact (TwoSum) and
/// e^-|t + bias| from the library exp; -inf -> 0, +inf -> 1, NaN -> NaN.
void sigmoid_norm_row(const float* t, int64_t n, float bias, float* y) noexcept;
/// dx_i = scale * dy_i * y_i * (1 - y_i). dx may equal dy or y.
void sigmoid_norm_backward_row(const float* y, const float* dy, int64_t n, float scale,
                               float* dx) noexcept;

// ---- SA-Softmax ---------------------------------------------------------------
/// r_i = t_i (plain) or (t_i - a) * c (normalised, float64); q_i = 1 + t_i
/// (plain) or c + r_i (normalised).
struct SaParams {
  bool normalized = false;
  double a = 0.0;
  double c = 1.0;
  /// Backward only: g_min is added to dx[j_min], g_max to dx[j_max] (before
  /// the rounding to f32); -1 = none.
  int64_t j_min = -1, j_max = -1;
  double g_min = 0.0, g_max = 0.0;
};
/// y_i = r_i * p_i, y_i = p_i where t_i = -inf (p is the row's softmax: 0 or
/// NaN there). y may equal p.
void sa_forward_row(const float* t, const float* p, int64_t n, const SaParams& s,
                    float* y) noexcept;
struct SaDots {
  double gy = 0.0;  ///< sum g_i r_i p_i
  double gp = 0.0;  ///< sum g_i p_i
};
SaDots sa_dots(const float* t, const float* p, const float* g, int64_t n,
               const SaParams& s) noexcept;
/// dx_i = scale * p_i * (g_i q_i - gy) (+ g_min / g_max at j_min / j_max)
/// (float64, rounded once); p_i * 0 where t_i = -inf. dx may equal g.
void sa_backward_row(const float* t, const float* p, const float* g, int64_t n,
                     const SaParams& s, double gy, float scale, float* dx) noexcept;

// ---- softplus normaliser --------------------------------------------------------
/// z_i = fl(lambda * t_i) (-inf stays -inf). Stores q_i = softplus(z_i) *
/// e^(-shift), shift = min(max z, 0) (the caller's), computed as
/// z <= 0: e^(z - shift) * R(e^z),  z > 0: z + e^-z R(e^-z),
/// R(w) = log1p(w) / w (exact 1 at w = 0), and returns sum q (float64).
double softplus_norm_row(const float* t, int64_t n, float lambda, float shift,
                         float* q) noexcept;
/// L_i = log softplus(z_i) (-inf where masked).
void log_softplus_row(const float* t, int64_t n, float lambda, float* L) noexcept;
/// dx_i = coef * y_i * rho(z_i) * (g_i - r), rho = sigmoid / softplus. dx may
/// equal g.
void softplus_norm_backward_row(const float* t, const float* y, const float* g, int64_t n,
                                float lambda, float r, float coef, float* dx) noexcept;

// ---- Power-Softmax -----------------------------------------------------------------
/// y_i = (t_i / M)^p (p >= 1, M > 0 finite), products below FLT_MIN flushed
/// to 0; returns sum y (float64).
double power_row(const float* t, int64_t n, int p, float M, float* y) noexcept;
/// dx_i = coef * (t_i / M)^(p - 1) * (g_i - r), float64 lanes. dx may equal g.
void power_backward_row(const float* t, const float* g, int64_t n, int p, double M, double r,
                        double coef, float* dx) noexcept;

// ---- probability-domain temperature (float64 lanes) -------------------------------------
/// y_i = (t_i * inv_m)^a (float64 log / exp, rounded once; < FLT_MIN -> 0),
/// 0 where t_i == 0 or -inf; returns sum y (float64, of the f32 values).
double prob_pow_row(const float* t, int64_t n, double a, double inv_m, float* y) noexcept;
/// dx_i = coef * (t_i * inv_m)^(a - 1) * (g_i - r), where 0^(a-1) is 0
/// (a > 1), 1 (a == 1), +inf (a < 1); 0 where t_i = -inf. dx may equal g.
void prob_pow_backward_row(const float* t, const float* g, int64_t n, double a, double inv_m,
                           double r, double coef, float* dx) noexcept;

// ---- logit standardisation (float64 lanes) ------------------------------------------------
/// v_i = fl((t_i - mu) * k) with the product in float64; -inf stays -inf.
void standardize_row(const float* t, int64_t n, double mu, double k, float* v) noexcept;
/// sum y_i (g_i - r)(t_i - mu) over visible entries, float64.
double standardize_hd(const float* t, const float* y, const float* g, int64_t n, double mu,
                      double r) noexcept;
/// dx_i = coef * (y_i (g_i - r) - (t_i - mu) * C), float64; 0 where t_i =
/// -inf. dx may equal g.
void standardize_backward_row(const float* t, const float* y, const float* g, int64_t n,
                              double mu, double r, double C, double coef, float* dx) noexcept;

}  // namespace smax::kernels

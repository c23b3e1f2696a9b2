// src/ops/losses/z_loss_f64.h: the float64 row math of z_loss and
// spherical_z_loss (include/smax/losses.h, "z-losses"), used by
// ops/losses/z_loss.cc when src is f64 (Rowwise::run_native hands it
// float64 rows: logits t = x s + mask formed in double, -inf = masked).
// None of this throws or allocates.
#pragma once

#include <cstdint>

namespace smax::detail {

/// L = log sum_j e^(t_j) of a float64 row of n >= 1 logits: m + log S with
/// the float64 softmax kernel's terms (exact argument, or within 2^-49 of it
/// in rows of range below 32) and compensated sum (kernels::exp_terms_row_f64). `terms` holds n doubles (written with
/// e^(t_j - m) when the row is regular). kind: 0 regular, 1 NaN (a NaN or
/// +inf entry), 2 empty (every entry -inf).
struct ZRow64 {
  int kind = 0;
  double L = 0.0;
  double sum = 0.0;  ///< S (regular rows)
};
ZRow64 z_row_f64(const double* t, int64_t n, double* terms) noexcept;

/// Moments of the D unmasked entries of a float64 row (the spherical
/// Z-loss's mean and population std) and z_y for the target y. The row is
/// read scaled by a power of two, t' = t 2^-e with e the exponent of
/// max |t| (exact, so z is unchanged, and no square or sum can overflow or
/// underflow for any finite logits); the mean of t' is kept as an
/// unevaluated pair mean_hi + mean_lo (from a Neumaier sum), so that the
/// deviations t'_k - mean = (t'_k - mean_hi) - mean_lo lose nothing to the
/// size of the logits (rows at 1e4 +- 1e-2 keep their relative accuracy);
/// m2 = the compensated sum of their squares. sigma is in t's units
/// (sigma' 2^e).
struct Sphere64 {
  double D = 0.0, inv_scale = 1.0, mean_hi = 0.0, mean_lo = 0.0, sigma_scaled = 0.0;
  double sigma = 0.0, zy = 0.0;
  bool nan = false, empty = true;
  /// z_k = (t_k - mean) / sigma of a visible entry.
  double z(double t) const { return ((t * inv_scale - mean_hi) - mean_lo) / sigma_scaled; }
};
Sphere64 sphere_row_f64(const double* t, int64_t n, int64_t y) noexcept;

/// dst_k = alpha + gamma z_k (0 where t_k = -inf), and dst_y gets + f as
/// well: the spherical Z-loss gradient row in float64.
void sphere_grad_f64(const double* t, int64_t n, const Sphere64& s, double alpha, double gamma,
                     double f, int64_t y, double* dst) noexcept;

}  // namespace smax::detail

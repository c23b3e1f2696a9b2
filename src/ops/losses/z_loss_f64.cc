// src/ops/losses/z_loss_f64.cc: see z_loss_f64.h.
#include "ops/losses/z_loss_f64.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/compensated.h"
#include "kernels/softmax_f64.h"

namespace smax::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();


}  // namespace

ZRow64 z_row_f64(const double* t, int64_t n, double* terms) noexcept {
  ZRow64 z;
  const kernels::F64Terms ft = kernels::exp_terms_row_f64(t, n, terms);
  if (std::isnan(ft.sum)) {
    z.kind = 1;
  } else if (ft.sum == 0.0) {
    z.kind = 2;
  } else {
    z.sum = ft.sum;
    z.L = ft.max + std::log(ft.sum);
  }
  return z;
}

Sphere64 sphere_row_f64(const double* t, int64_t n, int64_t y) noexcept {
  Sphere64 s;
  double amax = 0.0;
  int64_t count = 0;
  bool special = false;  // NaN or +inf among the visible entries
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] == -kInf) continue;
    ++count;
    special |= !std::isfinite(t[k]);
    amax = std::max(amax, std::fabs(t[k]));
  }
  s.D = static_cast<double>(count);
  s.empty = count == 0;
  if (s.empty) return s;
  if (special) {
    s.nan = true;
    s.zy = kNan;
    return s;
  }
  if (amax > 0.0) s.inv_scale = std::ldexp(1.0, -std::ilogb(amax));  // |t'| < 2
  CompensatedSum sum;
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] != -kInf) sum.add(t[k] * s.inv_scale);
  }
  // mean = (sum + comp) / D as hi + lo: the remainder of the division by
  // an fma (exact), plus the compensation.
  s.mean_hi = (sum.sum + sum.comp) / s.D;
  s.mean_lo = (std::fma(-s.mean_hi, s.D, sum.sum) + sum.comp) / s.D;
  CompensatedSum m2;
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] == -kInf) continue;
    const double dev = (t[k] * s.inv_scale - s.mean_hi) - s.mean_lo;
    m2.add(dev * dev);
  }
  s.sigma_scaled = std::sqrt((m2.sum + m2.comp) / s.D);
  s.sigma = s.sigma_scaled / s.inv_scale;
  // std = 0 (a constant row, D = 1) or a masked target: z_y is NaN, a NaN row.
  s.zy = t[y] == -kInf ? kNan : s.z(t[y]);
  s.nan = std::isnan(s.zy) || std::isinf(s.zy);
  return s;
}

void sphere_grad_f64(const double* t, int64_t n, const Sphere64& s, double alpha, double gamma,
                     double f, int64_t y, double* dst) noexcept {
  for (int64_t k = 0; k < n; ++k) {
    dst[k] = t[k] == -kInf ? 0.0 : std::fma(gamma, s.z(t[k]), alpha);
  }
  if (t[y] != -kInf) dst[y] += f;
}

}  // namespace smax::detail

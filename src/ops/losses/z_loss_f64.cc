// src/ops/losses/z_loss_f64.cc: see z_loss_f64.h.
#include "ops/losses/z_loss_f64.h"

#include <cmath>
#include <limits>

#include "kernels/softmax_f64.h"

namespace smax::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Neumaier's compensated sum (value + comp is the sum to ~1 ulp, whatever n).
struct Neumaier {
  double sum = 0.0, comp = 0.0;
  void add(double v) {
    const double next = sum + v;
    comp += std::fabs(sum) >= std::fabs(v) ? (sum - next) + v : (v - next) + sum;
    sum = next;
  }
};

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
  Neumaier sum;
  int64_t count = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] == -kInf) continue;
    sum.add(t[k]);
    ++count;
  }
  s.D = static_cast<double>(count);
  s.empty = count == 0;
  if (s.empty) return s;
  // mean = (sum + comp) / D as hi + lo: the remainder of the division by
  // an fma (exact), plus the compensation.
  s.mean_hi = (sum.sum + sum.comp) / s.D;
  s.mean_lo = (std::fma(-s.mean_hi, s.D, sum.sum) + sum.comp) / s.D;
  Neumaier m2;
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] == -kInf) continue;
    const double dev = (t[k] - s.mean_hi) - s.mean_lo;
    m2.add(dev * dev);
  }
  s.sigma = std::sqrt((m2.sum + m2.comp) / s.D);
  const double ty = t[y];
  s.zy = ty == -kInf ? kNan : ((ty - s.mean_hi) - s.mean_lo) / s.sigma;
  // Non-finite moments (NaN / inf entries, or a sum beyond float64) give a
  // NaN row, as in the f32 path.
  s.nan = std::isnan(s.zy) || std::isnan(s.sigma) || std::isinf(s.sigma) ||
          !std::isfinite(s.mean_hi);
  return s;
}

void sphere_grad_f64(const double* t, int64_t n, const Sphere64& s, double alpha, double beta,
                     double f, int64_t y, double* dst) noexcept {
  for (int64_t k = 0; k < n; ++k) {
    dst[k] = t[k] == -kInf ? 0.0 : std::fma(beta, (t[k] - s.mean_hi) - s.mean_lo, alpha);
  }
  if (t[y] != -kInf) dst[y] += f;
}

}  // namespace smax::detail

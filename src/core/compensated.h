// src/core/compensated.h: the scalar float64 helpers of the ops' float64
// paths (cross_entropy_f64, z_loss_f64, rescaled_f64, clipped softmax, the
// sparse rows, the re-weighting normalisers, linear_cross_entropy_f64): a
// compensated sum and dot, an exact two-term difference and an exponential
// of an exact difference.
// Header-only, noexcept, no allocation.
#pragma once

#include <cmath>
#include <cstdint>

namespace smax::detail {

/// Neumaier's compensated sum in the order of the add() calls: value() is
/// the sum to ~1 ulp whatever the number of terms. An inf / NaN running sum
/// is returned as is (its compensation would be NaN).
struct CompensatedSum {
  double sum = 0.0, comp = 0.0;
  void add(double x) {
    const double next = sum + x;
    comp += std::fabs(sum) >= std::fabs(x) ? (sum - next) + x : (x - next) + sum;
    sum = next;
  }
  double value() const { return std::isfinite(sum) ? sum + comp : sum; }
};

/// <g, y> as a compensated sum in index order.
inline double dot_f64(const double* g, const double* y, int64_t n) {
  CompensatedSum s;
  for (int64_t i = 0; i < n; ++i) s.add(g[i] * y[i]);
  return s.value();
}

/// a - b as an exact two-term sum hi + lo (Knuth's TwoSum of a and -b;
/// finite a, b, no overflow): hi = fl(a - b).
struct TwoTerm {
  double hi, lo;
};
inline TwoTerm two_diff(double a, double b) {
  const double hi = a - b;
  const double bb = hi - a;
  return {hi, (a - (hi - bb)) + (-b - bb)};
}

/// e^(t - m) for finite t, m with t - m <= 709 (no overflow; t <= m in most
/// uses), the difference taken as an exact two-term sum hi + lo (two_diff),
/// so no bits of t - m are lost for any |t - m|: e^hi (1 + lo), within
/// ~1.5 ulp (std::exp is within 1); 0 below float64's smallest subnormal.
inline double exp_diff_f64(double t, double m) {
  if (!(t - m > -746.0)) return 0.0;
  const TwoTerm x = two_diff(t, m);
  const double e = std::exp(x.hi);
  return e + e * x.lo;
}

}  // namespace smax::detail

// tests/narrow_exact.h: references for the bf16 / f16 bounds: the spacing of
// a narrow type's values (ulp_of) and an exact log_softmax that stays
// accurate for values near 0 (exact_log_softmax), plus the rule that names
// the rows the narrow log_softmax computes by log1p (dominant_max_row).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "smax/tensor.h"

namespace smax_test {

// Spacing of dtype t's (kBF16 or kF16) values at |x|, its subnormal spacing
// below the normals.
inline double ulp_of(smax::DType t, double x) {
  const int mant = t == smax::DType::kBF16 ? 7 : 10;
  const int emin = t == smax::DType::kBF16 ? -126 : -14;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, emin) - mant);
}

// The exact log_softmax of the f32 logits t[0, n) (a finite max): m and
// log_sum = log1p(s1) with s1 the terms other than one max summed on their
// own (no cancellation near 0); at(t_i) = (t_i - m) - log_sum.
struct ExactLogSoftmax {
  double m = -INFINITY, log_sum = 0.0;
  ExactLogSoftmax(const float* t, int64_t n) {
    for (int64_t j = 0; j < n; ++j) m = std::max<double>(m, t[j]);
    double s1 = 0.0;
    int64_t maxima = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (t[j] == m) {
        ++maxima;
      } else {
        s1 += std::exp(t[j] - m);
      }
    }
    log_sum = std::log1p(s1 + static_cast<double>(maxima - 1));
  }
  double at(float t) const { return (t - m) - log_sum; }
};

// A log_softmax row (f32 results y[0, n)) with an output above -2^-5 (its
// max dominates): into a bf16 / f16 dst such rows are (t_i - m) - log1p(s1)
// (kernels/softmax_narrow.h), within 1 ulp of the exact value, and not
// round(f32 result).
inline bool dominant_max_row(const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] > -0x1p-5f) return true;
  }
  return false;
}

}  // namespace smax_test

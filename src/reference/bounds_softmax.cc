// src/reference/bounds_softmax.cc: the softmax family's documented bounds
// (include/smax/softmax.h; see bounds.h).
#include <cmath>

#include "reference/bounds.h"

namespace smax::reference {

double softmax_bound(double ref) { return 1e-36 + 2e-6 * std::fabs(ref); }

double log_softmax_bound(double ref) { return 2e-6 * (1.0 + std::fabs(ref)); }

double softmax_backward_bound(double s, double y, double dy, const BackwardRow& row) {
  return 2e-6 * s * std::fabs(y) * (std::fabs(dy) + std::fabs(row.dot)) + 1e-30;
}

double softmax_backward_dot_gap(double s, double y, const BackwardRow& row) {
  return 1.02e-6 * s * std::fabs(y) * row.abs_dot;
}

double log_softmax_backward_bound(double s, double y, double dy, const BackwardRow& row) {
  const double e = std::exp(y);
  return 2e-6 * s * (std::fabs(dy) + e * std::fabs(row.sum) + e * row.abs_sum) + 1e-30;
}

}  // namespace smax::reference

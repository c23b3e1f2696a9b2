// src/reference/bounds_sparse.cc: the sparse normalisers' documented bounds,
// one row at a time (include/smax/sparse.h; see bounds.h).
#include <algorithm>
#include <cmath>

#include "reference/bounds.h"

namespace smax::reference {
namespace {

constexpr double kU = 0x1p-24;

}  // namespace

double entmax_forward_bound(double y, double alpha, int64_t n) {
  const double p = 1.0 / (alpha - 1.0);
  return 2 * kU * std::fabs(y) + 1e-16 * (64.0 + static_cast<double>(n)) * std::max(1.0, p);
}

Row entmax_backward_bound(const Row& y, const Row& g, const Row& ref, double alpha, double sigma) {
  Row w(y.size(), 0.0);
  double sw = 0.0, gabs = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] > 0) w[i] = alpha == 2.0 ? 1.0 : std::pow(y[i], 2.0 - alpha);
    sw += w[i];
    gabs += std::fabs(g[i]) * w[i];
  }
  const double G = sw > 0 ? gabs / sw : 0.0;
  const double eq = 1e-15 * (static_cast<double>(y.size()) + 100.0 * (1.0 + std::fabs(2.0 - alpha)));
  Row b(y.size());
  for (size_t i = 0; i < y.size(); ++i) b[i] = 2.0 * kU * std::fabs(ref[i]) + eq * sigma * w[i] * G + 1e-30;
  return b;
}

}  // namespace smax::reference

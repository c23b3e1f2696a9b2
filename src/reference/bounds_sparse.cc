// src/reference/bounds_sparse.cc: the sparse normalisers' documented bounds
// (include/smax/sparse.h; see bounds.h): one row at a time, and the rules of
// sparsemax, entmax15, entmax_bisect, sparse_softmax and their backward.
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

void entmax_bounds(BoundRows& b, double alpha) {
  const double alpha0 = static_cast<float>(alpha);
  b.each_row([&](int64_t r) {
    const double a = b.row_param_or(r, alpha0);
    const Row y = b.ref_row(r);
    Row bound(y.size());
    for (size_t i = 0; i < y.size(); ++i) {
      bound[i] = a == 1.0 ? softmax_bound(y[i]) : entmax_forward_bound(y[i], a, b.R.n);
    }
    return bound;
  });
}

void entmax_backward_bounds(BoundRows& b, double alpha) {
  const double alpha0 = static_cast<float>(alpha);
  const double sigma = b.sigma();
  for (int64_t r = 0; r < b.R.rows; ++r) {
    const double a = b.row_param_or(r, alpha0);
    const Row y = b.row(r), g = b.dy_row(r);
    Row bound(y.size(), 1e-30);
    if (a == 1.0) {  // softmax_backward's bound (+ its documented dot gap)
      const bool ovf = vjp_row_overflows(y.data(), g.data(), static_cast<int64_t>(y.size()));
      BackwardRow row;
      for (size_t i = 0; i < y.size(); ++i) row.add(y[i], g[i]);
      for (size_t i = 0; i < y.size(); ++i) {
        const int64_t k = static_cast<int64_t>(i);
        if (ovf) b.allow_overflow(r, k);
        bound[i] = softmax_backward_bound(sigma, y[i], g[i], row);
        b.out.dot_gap[b.at(r, k)] = softmax_backward_dot_gap(sigma, y[i], row);
      }
    } else {
      bound = entmax_backward_bound(y, g, b.ref_row(r), a, sigma);
    }
    b.set_row(r, bound);
  }
}

}  // namespace smax::reference

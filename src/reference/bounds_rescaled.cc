// src/reference/bounds_rescaled.cc: the rescaled and rectified softmaxes'
// documented bounds (include/smax/normalizers.h; see bounds.h): one row at a
// time, and ssmax_backward's rule.
#include <cmath>
#include <limits>

#include "reference/bounds.h"
#include "reference/rescaled.h"

namespace smax::reference {
namespace {

constexpr double kInfD = std::numeric_limits<double>::infinity();

}  // namespace

Row softpick_forward_bound(const SoftpickRow& f) {
  Row b(f.y.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = 2e-6 * ((1.0 + f.K) * std::fabs(f.y[i]) + f.q[i]) + 1e-36;
  return b;
}

Row softpick_backward_bound(const Row& t, const Row& g, const SoftpickRow& f, double sigma) {
  double rr = 0.0, G2 = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (std::isnan(f.y[i]) || t[i] == -kInfD) continue;  // masked: out of <dy, y>
    rr += g[i] * f.y[i];
    G2 += std::fabs(g[i]) * (f.y[i] + f.q[i]);
  }
  Row b(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    b[i] = 2e-6 * sigma * f.q[i] * ((1.0 + f.K) * (std::fabs(g[i]) + std::fabs(rr)) + G2) + 1e-30;
  }
  return b;
}

Row stablemax_backward_bound(const Row& t, const Row& g, double sigma, EmptyRow empty) {
  const Row yy = stablemax_row(t, empty);
  double S = 0.0, rr = 0.0, ag = 0.0;
  for (double v : t) S += stable_s(v);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -kInfD) continue;
    rr += g[i] * yy[i];
    ag += std::fabs(g[i]) * yy[i];
  }
  Row b(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    const double sp = t[i] == -kInfD ? 0.0 : stable_ds(t[i]) / S;
    b[i] = 2e-6 * sigma * sp * (std::fabs(g[i]) + std::fabs(rr) + ag) + 1e-30;
  }
  return b;
}

Row ssmax_backward_bound(const Row& y, const Row& g, double c, Row* dot_gap) {
  double D = 0.0, abs_dot = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    D += g[i] * y[i];
    abs_dot += std::fabs(g[i] * y[i]);
  }
  Row b(y.size());
  if (dot_gap) dot_gap->assign(y.size(), 0.0);
  for (size_t i = 0; i < y.size(); ++i) {
    b[i] = 2e-6 * std::fabs(c) * std::fabs(y[i]) * (std::fabs(g[i]) + std::fabs(D)) + 1e-30;
    if (dot_gap) (*dot_gap)[i] = 1.02e-6 * std::fabs(c) * std::fabs(y[i]) * abs_dot;
  }
  return b;
}

double ssmax_ds_bound(const Row& t, const Row& y, const Row& g, int64_t n, double* dot_gap) {
  double D = 0.0, sum = 0.0, abs_dot = 0.0, ty = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    D += g[i] * y[i];
    abs_dot += std::fabs(g[i] * y[i]);
  }
  const double ln = n > 1 ? std::log(static_cast<double>(n)) : 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0 || !std::isfinite(t[i])) continue;
    sum += std::fabs(t[i] * y[i]) * (std::fabs(g[i]) + std::fabs(D));
    ty += std::fabs(t[i] * y[i]);
  }
  double bound = 1e-30;
  if (std::isfinite(sum)) bound += 2e-6 * ln * sum;
  if (dot_gap) {
    const double dot_term = 1.02e-6 * ln * ty * abs_dot;
    *dot_gap = std::isfinite(dot_term) ? dot_term : 0.0;
  }
  return bound;
}

void ssmax_backward_bounds(BoundRows& b, double s, int64_t fixed_n) {
  const RefRows Y = ref_rows("op_bounds", b.call.y, b.call.options, false);
  const double s0 = static_cast<float>(s);
  for (int64_t r = 0; r < b.R.rows; ++r) {
    const double sr = b.row_param_or(r, s0);
    const Row t = b.row(r), y = Y.row_copy(r), g = b.dy_row(r);
    const int64_t nn = ssmax_n(t, fixed_n);
    const double cf = nn > 0 ? ssmax_factor(sr, nn, true) : 0.0;
    Row gap;  // softmax_backward's dot term (the same kernel; smax/normalizers.h).
    const Row bound = ssmax_backward_bound(y, g, b.sigma() * cf, &gap);
    const bool ovf = vjp_row_overflows(y.data(), g.data(), static_cast<int64_t>(y.size()));
    for (size_t i = 0; i < y.size(); ++i) {
      const int64_t k = static_cast<int64_t>(i);
      b.out.dot_gap[b.at(r, k)] = gap[i];
      if (ovf) b.allow_overflow(r, k);
    }
    b.set_row(r, bound);
  }
}

}  // namespace smax::reference

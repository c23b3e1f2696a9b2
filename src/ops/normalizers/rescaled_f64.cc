// src/ops/normalizers/rescaled_f64.cc: see rescaled_f64.h.
#include "ops/normalizers/rescaled_f64.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/softmax_f64.h"

namespace smax::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kDown = 0x1p-600;  // the StableMax sums' scale on overflow

void fill(double* p, int64_t n, double v) { std::fill(p, p + n, v); }
double empty_value(EmptyRow policy) { return policy == EmptyRow::kNan ? kNaN : 0.0; }

// Softpick's classes of rows (the f32 kernel's SoftpickClassify).
enum class Pick { kNan, kEmpty, kZero, kCompute };
Pick classify(const double* t, int64_t n, double* max_out) {
  double m = -kInf;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    nan |= std::isnan(t[i]);
    m = t[i] > m ? t[i] : m;
  }
  *max_out = m;
  if (nan || m == kInf) return Pick::kNan;
  if (m == -kInf) return Pick::kEmpty;
  if (m <= 0.0) return Pick::kZero;
  return Pick::kCompute;
}

bool softpick_special(Pick p, int64_t n, EmptyRow policy, double* out) {
  switch (p) {
    case Pick::kNan: fill(out, n, kNaN); return true;
    case Pick::kEmpty: fill(out, n, empty_value(policy)); return true;
    case Pick::kZero: fill(out, n, 0.0); return true;
    case Pick::kCompute: break;
  }
  return false;
}

// |e^t - 1| e^-m for a visible t (m > 0 the row max, em = e^-m).
double softpick_a(double t, double m, double em) {
  return t > 0.0 ? exp_diff_f64(t, m) * -std::expm1(-t) : em * -std::expm1(t);
}

// s'(x) = 1 (x >= 0), 1 / (1 - x)^2 (x < 0), 0 at -inf.
double stable_ds(double x) {
  if (x >= 0.0) return 1.0;
  if (x == -kInf) return 0.0;
  const double u = 1.0 - x;
  return 1.0 / (u * u);
}

// k sum_{j != exclude} s(t_j), k = 1 or kDown (see the header).
double stable_sum(const double* t, int64_t n, int64_t exclude, double* k_out) {
  *k_out = 1.0;
  bool special = false;  // a NaN or +inf logit: the sum is NaN / +inf as it stands
  for (int64_t j = 0; j < n; ++j) special |= std::isnan(t[j]) || t[j] == kInf;
  for (const double k : {1.0, kDown}) {
    CompensatedSum s;
    for (int64_t j = 0; j < n; ++j) {
      if (j != exclude) s.add(stable_s_f64(t[j]) * k);
    }
    const double with = exclude >= 0 && exclude < n ? s.sum + stable_s_f64(t[exclude]) * k : s.sum;
    // Finite logits whose sum (with the excluded term) overflows: rescale.
    if (special || std::isfinite(with)) {
      *k_out = k;
      return s.value();  // NaN / inf as they stand when special
    }
  }
  return kInf;  // not reached: 2^-600 times sums of s <= DBL_MAX + 1 is finite
}

}  // namespace

// ---- SSMax ------------------------------------------------------------------------

void ssmax_row_f64(const double* t, int64_t n, double c, EmptyRow policy, double* u,
                   double* y) noexcept {
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) {
      u[i] = -kInf;  // masked stays masked whatever the sign of c
    } else if (t[i] == kInf && c <= 0.0) {
      u[i] = kNaN;
    } else {
      u[i] = t[i] * c;
    }
  }
  kernels::softmax_row_f64(kernels::F64Op::kSoftmax, u, n, policy, y);
}

double ssmax_ds_sum_f64(const double* t, const double* y, const double* g, int64_t n,
                        double dot) noexcept {
  CompensatedSum s;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] != 0.0) s.add(t[i] * y[i] * (g[i] - dot));
  }
  return s.value();
}

// ---- softpick ---------------------------------------------------------------------

void softpick_row_f64(const double* t, int64_t n, double eps, EmptyRow policy,
                      double* y) noexcept {
  double m;
  if (softpick_special(classify(t, n, &m), n, policy, y)) return;
  const double em = std::exp(-m);
  CompensatedSum S;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) {
      y[j] = 0.0;
      continue;
    }
    const double a = softpick_a(t[j], m, em);
    S.add(a);
    y[j] = t[j] > 0.0 ? a : 0.0;
  }
  const double D = S.value() + eps * em;
  if (std::isnan(D)) return fill(y, n, kNaN);
  if (!(D > 0.0)) return fill(y, n, 0.0);  // not reached: a_max = 1 - e^-m > 0
  for (int64_t j = 0; j < n; ++j) y[j] = y[j] / D;
}

void softpick_backward_row_f64(const double* t, const double* g, int64_t n, double eps,
                               double scale, EmptyRow policy, double* dx) noexcept {
  double m;
  if (softpick_special(classify(t, n, &m), n, policy, dx)) return;
  const double em = std::exp(-m);
  // S: the denominator / e^m; P: sum over the visible j of g_j [t_j > 0] a_j
  // (a NaN g_j anywhere visible makes the row NaN, as in the f32 kernel).
  CompensatedSum S, P;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) continue;
    const double a = softpick_a(t[j], m, em);
    S.add(a);
    P.add(g[j] * (t[j] > 0.0 ? a : 0.0));
  }
  const double D = S.value() + eps * em;
  const double r = P.value() / D;  // <g, y>
  if (std::isnan(D) || std::isnan(r)) return fill(dx, n, kNaN);
  if (!(D > 0.0)) return fill(dx, n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) {
      dx[j] = 0.0;
      continue;
    }
    const double q = exp_diff_f64(t[j], m) / D;  // e^t_j / S
    const double v = t[j] > 0.0 ? g[j] - r : r;  // sgn(t) = -1 for t <= 0
    dx[j] = scale * q * v;
  }
}

// ---- StableMax ----------------------------------------------------------------------

double stable_s_f64(double x) noexcept { return x >= 0.0 ? x + 1.0 : 1.0 / (1.0 - x); }

void stablemax_row_f64(const double* t, int64_t n, EmptyRow policy, double* y) noexcept {
  double k;
  const double S = stable_sum(t, n, -1, &k);
  if (!(S < kInf)) return fill(y, n, kNaN);  // NaN, +inf
  if (S == 0.0) return fill(y, n, empty_value(policy));  // every entry -inf
  for (int64_t j = 0; j < n; ++j) y[j] = stable_s_f64(t[j]) * k / S;
}

void stablemax_backward_row_f64(const double* t, const double* g, int64_t n, double scale,
                                EmptyRow policy, double* dx) noexcept {
  double k;
  const double S = stable_sum(t, n, -1, &k);
  if (!(S < kInf)) return fill(dx, n, kNaN);
  if (S == 0.0) return fill(dx, n, empty_value(policy));
  CompensatedSum P;  // <g, y> over the visible entries
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] != -kInf) P.add(g[j] * (stable_s_f64(t[j]) * k / S));
  }
  const double r = P.value();
  if (std::isnan(r)) return fill(dx, n, kNaN);
  for (int64_t j = 0; j < n; ++j) {
    dx[j] = t[j] == -kInf ? 0.0 : scale * (stable_ds(t[j]) * k / S) * (g[j] - r);
  }
}

double stablemax_sum_f64(const double* t, int64_t n, int64_t exclude, double* k_out) noexcept {
  return stable_sum(t, n, exclude, k_out);
}

void stablemax_ce_grad_row_f64(const double* t, int64_t n, int64_t target, double others,
                               double k, double coef, double* dx) noexcept {
  const double st = t[target] == -kInf ? 0.0 : stable_s_f64(t[target]) * k;
  const double S = others + st;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) {
      dx[j] = 0.0;
    } else if (j == target) {
      dx[j] = -coef * (others / S) / (1.0 + std::fabs(t[j]));
    } else {
      dx[j] = coef * (stable_s_f64(t[j]) * k / S) / (1.0 + std::fabs(t[j]));
    }
  }
}

}  // namespace smax::detail

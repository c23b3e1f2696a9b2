// src/ops/normalizers/reweight_f64.cc: see reweight_f64.h.
#include "ops/normalizers/reweight_f64.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/compensated.h"
#include "kernels/softmax_f64.h"

namespace smax::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void fill(double* p, int64_t n, double v) { std::fill(p, p + n, v); }

// R(w) = log1p(w) / w for w in [0, 1] (1 at w = 0, the limit).
double log1p_over_x(double w) { return w == 0.0 ? 1.0 : std::log1p(w) / w; }

// x^e for an integer e >= 1 by binary powering (the f32 kernels' PowInt:
// no squaring past the last bit, so intermediates never fall below the
// result).
double pow_int(double x, int e) {
  double result = 1.0;
  bool have = false;
  double base = x;
  while (true) {
    if (e & 1) {
      result = have ? result * base : base;
      have = true;
    }
    e >>= 1;
    if (e == 0) break;
    base *= base;
  }
  return result;
}

// (t / M)^e for 0 < t <= M (M finite): pow of the rounded quotient, or,
// when the quotient would be subnormal or 0, of the quotient of the
// mantissas times 2^(e k) (k the exponent difference), so tiny ratios keep
// their accuracy (and (t / M)^e with e < 0 does not become 1 / 0).
double pow_ratio(double t, double M, double e) {
  const double q = t / M;
  if (q >= std::numeric_limits<double>::min()) return std::pow(q, e);
  int et = 0, eM = 0;
  const double mt = std::frexp(t, &et), mM = std::frexp(M, &eM);
  return std::pow(mt / mM, e) * std::exp2(e * static_cast<double>(et - eM));
}

// softplus(z) / e^shift for z > -inf (shift = min(max z, 0) <= 0): z > 0
// (then shift = 0): z + log1p(e^-z); z <= 0: e^(z - shift) R(e^z).
double softplus_scaled(double z, double shift) {
  if (z > 0.0) return z + std::log1p(std::exp(-z));
  return exp_diff_f64(z, shift) * log1p_over_x(std::exp(z));
}

// log softplus(z) for z > -inf: log(z + log1p(e^-z)) (z > 0) or
// z + log R(e^z) (z <= 0: log1p(e^z) = e^z R(e^z)).
double log_softplus(double z) {
  if (z > 0.0) return std::log(z + std::log1p(std::exp(-z)));
  return z + std::log(log1p_over_x(std::exp(z)));
}

// z = lambda t with -inf kept (lambda = ln 1 / ln d = 0 for one visible
// entry: -inf * 0 would be NaN).
double scaled_z(double t, double lambda) { return t == -kInf ? -kInf : t * lambda; }

// sigmoid(z) / softplus(z) = 1 / ((1 + w) F), w = e^-|z|, F = R(w) (z <= 0)
// or z + w R(w) (z > 0).
double sigmoid_over_softplus(double z) {
  const double w = std::exp(-std::fabs(z));
  const double R = log1p_over_x(w);
  const double F = z > 0.0 ? z + w * R : R;
  return 1.0 / ((1.0 + w) * F);
}

}  // namespace

RowStatsF64 row_stats_f64(const double* t, int64_t n) noexcept {
  RowStatsF64 s;
  for (int64_t i = 0; i < n; ++i) {
    const double v = t[i];
    if (v == -kInf) continue;
    ++s.visible;
    if (std::isnan(v)) {
      s.has_nan = true;
      continue;
    }
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  return s;
}

// ---- SA-Softmax -------------------------------------------------------------------

SaBoundsF64 sa_bounds_f64(bool normalized, const double* t, int64_t n) noexcept {
  SaBoundsF64 b;
  b.normalized = normalized;
  if (normalized) {
    const RowStatsF64 s = row_stats_f64(t, n);
    const double lo = std::min(s.min, 0.0);
    const double hi = std::max(s.max, 0.0);
    b.a = lo;
    if (!(hi > lo)) {
      b.c = 0.0;
    } else if (std::isfinite(hi - lo) || !std::isfinite(hi) || !std::isfinite(lo)) {
      b.c = 1.0 / (hi - lo);
    } else {  // b - a overflows: halves (see the header)
      b.halves = true;
      b.c2 = 1.0 / (0.5 * hi - 0.5 * lo);
      b.c = 0.5 * b.c2;
    }
  }
  return b;
}

void sa_forward_row_f64(const double* t, int64_t n, bool normalized, EmptyRow policy, double* p,
                        double* y) noexcept {
  kernels::softmax_row_f64(kernels::F64Op::kSoftmax, t, n, policy, p);
  const SaBoundsF64 b = sa_bounds_f64(normalized, t, n);
  for (int64_t i = 0; i < n; ++i) y[i] = t[i] == -kInf ? p[i] : b.r(t[i]) * p[i];
}

void sa_backward_row_f64(const double* t, const double* g, int64_t n, bool normalized,
                         bool grad_through_bounds, double scale, EmptyRow policy, double* p,
                         double* dx) noexcept {
  kernels::softmax_row_f64(kernels::F64Op::kSoftmax, t, n, policy, p);
  const SaBoundsF64 b = sa_bounds_f64(normalized, t, n);
  CompensatedSum gy, gp;  // <g, y> = sum g r p, <g, p>, over the visible entries
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) continue;
    const double gpi = g[i] * p[i];
    gp.add(gpi);
    gy.add(gpi * b.r(t[i]));
  }
  const double dot_y = gy.value();
  // Gradient through a = min t (< 0) and b = max t (> 0): the first arg-min /
  // arg-max (a NaN or +inf row is NaN through p already).
  int64_t j_min = -1, j_max = -1;
  double g_min = 0.0, g_max = 0.0;
  const RowStatsF64 s = normalized ? row_stats_f64(t, n) : RowStatsF64{};
  if (normalized && grad_through_bounds && b.c > 0.0 && !s.has_nan && s.max != kInf) {
    if (s.min < 0.0) {
      j_min = std::find(t, t + n, s.min) - t;
      g_min = scale * b.c * (dot_y - gp.value());
    }
    if (s.max > 0.0) {
      j_max = std::find(t, t + n, s.max) - t;
      g_max = -scale * b.c * dot_y;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) {
      dx[i] = p[i] * 0.0;  // 0, or NaN in a NaN / empty-NaN row
      continue;
    }
    const double q = normalized ? b.c + b.r(t[i]) : 1.0 + t[i];
    double v = scale * (p[i] * (g[i] * q - dot_y));
    if (i == j_min) v += g_min;
    if (i == j_max) v += g_max;
    dx[i] = v;
  }
}

// ---- sigmoid normaliser ------------------------------------------------------------

void sigmoid_norm_row_f64(const double* t, int64_t n, double b, double* y) noexcept {
  for (int64_t i = 0; i < n; ++i) {
    const double x = t[i];
    if (std::isnan(x)) {
      y[i] = kNaN;
    } else if (x == kInf || x == -kInf) {
      y[i] = x > 0.0 ? 1.0 : 0.0;
    } else if (x + b > 0.0) {
      y[i] = 1.0 / (1.0 + exp_diff_f64(-x, b));  // e^-(x + b)
    } else {
      const double e = exp_diff_f64(x, -b);  // e^(x + b)
      y[i] = e / (1.0 + e);
    }
  }
}

// ---- softplus normaliser -------------------------------------------------------------

bool softplus_row_f64(const double* t, int64_t n, double lambda, double power, double tmax,
                      EmptyRow policy, double* y) noexcept {
  const double zmax = tmax * lambda;
  if (!(zmax < kInf)) {
    fill(y, n, kNaN);
    return false;
  }
  if (zmax == -kInf) {  // every visible z overflows to -inf: no mass
    fill(y, n, policy == EmptyRow::kNan ? kNaN : 0.0);
    return false;
  }
  if (power == 1.0) {
    // Terms scaled by e^-shift (rows of very negative z) or, for z_max > 1,
    // by 2^-E with E = ilogb(z_max) (softplus(z) <= z + 1: the sum of terms
    // near DBL_MAX would overflow); the quotients are unchanged.
    const double shift = std::min(zmax, 0.0);
    const int E = zmax > 1.0 ? std::ilogb(zmax) : 0;
    CompensatedSum S;
    for (int64_t i = 0; i < n; ++i) {
      const double z = scaled_z(t[i], lambda);
      y[i] = z == -kInf ? 0.0 : std::scalbn(softplus_scaled(z, shift), -E);
      S.add(y[i]);
    }
    const double sum = S.value();
    for (int64_t i = 0; i < n; ++i) y[i] /= sum;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const double z = scaled_z(t[i], lambda);
      y[i] = z == -kInf ? -kInf : power * log_softplus(z);
    }
    kernels::softmax_row_f64(kernels::F64Op::kSoftmax, y, n, policy, y);
  }
  return true;
}

void softplus_backward_row_f64(const double* t, const double* y, const double* g, int64_t n,
                               double lambda, double coef, double* dx) noexcept {
  const double r = dot_f64(g, y, n);
  for (int64_t i = 0; i < n; ++i) {
    const double z = scaled_z(t[i], lambda);
    dx[i] = z == -kInf ? 0.0 : coef * y[i] * sigmoid_over_softplus(z) * (g[i] - r);
  }
}

// ---- Power-Softmax ---------------------------------------------------------------------

double power_terms_f64(const double* t, int64_t n, int p, double M, double* w) noexcept {
  CompensatedSum S;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = t[i] == -kInf ? 0.0 : pow_int(t[i] / M, p);
    S.add(w[i]);
  }
  return S.value();
}

void power_backward_row_f64(const double* t, const double* g, int64_t n, int p, double M,
                            double r, double coef, double* dx) noexcept {
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = t[i] == -kInf ? 0.0 : ((pow_int(t[i] / M, p - 1) * (g[i] - r)) * coef) / M;
  }
}

// ---- probability-domain temperature -------------------------------------------------------

double prob_pow_terms_f64(const double* t, int64_t n, double a, double M, double* w) noexcept {
  CompensatedSum S;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = t[i] > 0.0 ? pow_ratio(t[i], M, a) : 0.0;  // 0 and -inf (masked) give 0
    S.add(w[i]);
  }
  return S.value();
}

void prob_pow_backward_row_f64(const double* t, const double* g, int64_t n, double a, double M,
                               double r, double coef, double* dx) noexcept {
  const double am1 = a - 1.0;
  const double at_zero = am1 > 0.0 ? 0.0 : (am1 == 0.0 ? 1.0 : kInf);
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) {
      dx[i] = 0.0;
      continue;
    }
    const double f = t[i] > 0.0 ? pow_ratio(t[i], M, am1) : at_zero;
    dx[i] = ((f * (g[i] - r)) * coef) / M;
  }
}

// ---- logit standardisation ------------------------------------------------------------------

namespace {

// Mean and std of the visible entries on the row scaled by 2^-e (e =
// ilogb of the largest |t|): the mean as a pair hi + lo, the std unscaled.
struct Moments {
  double mu_hi = 0.0, mu_lo = 0.0, sigma = 0.0;
  int e = 0;
  // 2^-e and 2^e as doubles when both are normal (a multiplication by them
  // rounds exactly as scalbn does, and costs a multiply, not a call);
  // scalbn for the subnormal rows (e < -1022).
  double down = 1.0, up = 1.0;
  bool multiply = true;
  void set_exponent(int exponent) {
    e = exponent;
    multiply = e >= -1022 && e <= 1022;
    if (multiply) {
      down = std::ldexp(1.0, -e);
      up = std::ldexp(1.0, e);
    }
  }
  double scale_down(double t) const { return multiply ? t * down : std::scalbn(t, -e); }
  double scale_up(double t) const { return multiply ? t * up : std::scalbn(t, e); }
  // t - mean for a visible t.
  double dev(double t) const { return scale_up((scale_down(t) - mu_hi) - mu_lo); }
};

Moments moments(const double* t, int64_t n, int64_t visible, bool unbiased) {
  Moments m;
  double amax = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] != -kInf) amax = std::max(amax, std::fabs(t[i]));
  }
  m.set_exponent(amax > 0.0 && std::isfinite(amax) ? std::ilogb(amax) : 0);
  CompensatedSum sum;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] != -kInf) sum.add(m.scale_down(t[i]));
  }
  // mean = (sum + comp) / N as hi + lo: the remainder of the division by an
  // fma (exact), plus the compensation.
  const double N = static_cast<double>(visible);
  m.mu_hi = sum.value() / N;
  m.mu_lo = std::isfinite(m.mu_hi) ? (std::fma(-m.mu_hi, N, sum.sum) + sum.comp) / N : 0.0;
  if (visible > 1) {
    CompensatedSum sq;
    for (int64_t i = 0; i < n; ++i) {
      if (t[i] == -kInf) continue;
      const double d = (m.scale_down(t[i]) - m.mu_hi) - m.mu_lo;
      sq.add(d * d);
    }
    const double D = static_cast<double>(unbiased ? visible - 1 : visible);
    m.sigma = m.scale_up(std::sqrt(sq.value() / D));
  }
  return m;
}

// y = softmax(v), v_i = ((t_i - mean) / se) / T (0 when sigma = 0).
void standardized(const double* t, int64_t n, const Moments& m, double se, double T,
                  EmptyRow policy, double* y) {
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) {
      y[i] = -kInf;
    } else {
      y[i] = m.sigma > 0.0 ? (m.dev(t[i]) / se) / T : 0.0;
    }
  }
  kernels::softmax_row_f64(kernels::F64Op::kSoftmax, y, n, policy, y);
}

}  // namespace

void standardization_row_f64(const double* t, int64_t n, int64_t visible,
                             const LogitStandardizationOptions& ls, EmptyRow policy,
                             double* y) noexcept {
  const Moments m = moments(t, n, visible, ls.unbiased);
  standardized(t, n, m, m.sigma + static_cast<double>(ls.eps), ls.temperature, policy, y);
}

void standardization_backward_row_f64(const double* t, const double* g, int64_t n,
                                      int64_t visible, const LogitStandardizationOptions& ls,
                                      double scale, EmptyRow policy, double* y,
                                      double* dx) noexcept {
  const Moments m = moments(t, n, visible, ls.unbiased);
  const double se = m.sigma + static_cast<double>(ls.eps);
  const double T = ls.temperature;
  standardized(t, n, m, se, T, policy, y);
  const double r = dot_f64(g, y, n);
  double C = 0.0;
  if (m.sigma > 0.0) {
    CompensatedSum hd;  // sum over visible i of y_i (g_i - r) (t_i - mean)
    for (int64_t i = 0; i < n; ++i) {
      if (t[i] != -kInf) hd.add(y[i] * (g[i] - r) * m.dev(t[i]));
    }
    const double D = static_cast<double>(ls.unbiased ? visible - 1 : visible);
    C = (hd.value() / m.sigma) / (se * D);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -kInf || !(se > 0.0)) {  // a constant row with eps = 0: 0 (documented)
      dx[i] = 0.0;
      continue;
    }
    const double h = y[i] * (g[i] - r);
    dx[i] = scale * (((h - (m.sigma > 0.0 ? m.dev(t[i]) * C : 0.0)) / se) / T);
  }
}

}  // namespace smax::detail

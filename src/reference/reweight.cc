// src/reference/reweight.cc: see reweight.h. Plain double loops.
#include "reference/reweight.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "reference/rows.h"
#include "smax/error.h"

namespace smax::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double empty_value(EmptyRow e) { return e == EmptyRow::kNan ? kNaN : 0.0; }

struct Stats {
  int64_t visible = 0;
  bool nan = false, pos_inf = false;
  double min = kInf, max = -kInf;
};

Stats stats(const Row& t) {
  Stats s;
  for (double v : t) {
    if (std::isnan(v)) {
      s.nan = true;
      ++s.visible;
      continue;
    }
    if (v == -kInf) continue;
    ++s.visible;
    if (v == kInf) s.pos_inf = true;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  return s;
}

// NaN row / +inf -> NaN (if inf_is_nan) / empty row; true when handled.
bool special(const Stats& s, bool inf_is_nan, EmptyRow empty, Row& out) {
  if (s.nan || (inf_is_nan && s.pos_inf)) {
    out.assign(out.size(), kNaN);
    return true;
  }
  if (s.visible == 0) {
    out.assign(out.size(), empty_value(empty));
    return true;
  }
  return false;
}

double dot(const Row& a, const Row& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Runs a row oracle f(t, s) over every row of src (logits) and scatters the result.
template <class F>
std::vector<double> by_rows(const char* fn, const TensorView& src, const SoftmaxOptions& o,
                            F&& f) {
  const RefRows R = ref_rows(fn, src, o, true);
  return map_rows(R, [&](int64_t r) { return f(R.row_copy(r), R.scale); });
}

// Same with a second, non-logit input (dy): f(t, g, s).
template <class F>
std::vector<double> by_rows2(const char* fn, const TensorView& src, const TensorView& dy,
                             const SoftmaxOptions& o, F&& f) {
  const RefRows R = ref_rows(fn, src, o, true);
  const RefRows G = ref_rows(fn, dy, o, false);
  if (G.rows != R.rows || G.n != R.n) {
    throw Error(Status::kInvalidArgument, std::string(fn) + ": dy shape mismatch");
  }
  return map_rows(R, [&](int64_t r) { return f(R.row_copy(r), G.row_copy(r), R.scale); });
}

Row scaled(Row v, double s) {
  for (double& x : v) x *= s;
  return v;
}

// lambda = ln N / ln d, rounded to f32 as the op's f32 path does (in double
// under float64 semantics).
double softplus_lambda(const SoftplusNormalizerOptions& sp, int64_t visible) {
  if (sp.lambda) return *sp.lambda;
  const double l = std::log(static_cast<double>(visible)) / std::log(static_cast<double>(sp.head_dim));
  return float64_semantics() ? l : static_cast<float>(l);
}

// z = fl(lambda * t) in f32 like the op (in double under float64
// semantics), -inf kept.
Row softplus_z_row(const Row& t, const SoftplusNormalizerOptions& sp, double* lambda_out) {
  const Stats s = stats(t);
  const double lambda = softplus_lambda(sp, std::max<int64_t>(s.visible, 1));
  const bool f64 = float64_semantics();
  Row z(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -kInf) {
      z[i] = -kInf;
    } else {
      z[i] = f64 ? t[i] * lambda
                 : static_cast<double>(static_cast<float>(t[i]) * static_cast<float>(lambda));
    }
  }
  *lambda_out = lambda;
  return z;
}

}  // namespace

Row softmax_finite_row(const Row& v) {
  double m = -kInf;
  for (double x : v) m = std::max(m, x);
  Row y(v.size(), 0.0);
  double S = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    y[i] = v[i] == -kInf ? 0.0 : std::exp(v[i] - m);
    S += y[i];
  }
  for (double& x : y) x /= S;
  return y;
}

VisibleMoments visible_moments(const Row& t, bool unbiased) {
  VisibleMoments m;
  double sum = 0.0;
  for (double v : t) {
    if (v != -kInf) sum += v, ++m.N;
  }
  m.mu = sum / static_cast<double>(m.N);
  m.D = static_cast<double>(unbiased ? m.N - 1 : m.N);
  if (m.N > 1) {
    double sq = 0.0;
    for (double v : t) {
      if (v != -kInf) sq += (v - m.mu) * (v - m.mu);
    }
    m.sigma = std::sqrt(sq / m.D);
  }
  return m;
}

// ---- SA ---------------------------------------------------------------------------
namespace {
struct SaState {
  double a = 0.0, b = 0.0, c = 1.0;
  Row p, r;
};
SaState sa_state(const Row& t, const Stats& s, bool normalized) {
  SaState st;
  st.p = softmax_finite_row(t);
  st.r.assign(t.size(), 0.0);
  if (normalized) {
    st.a = std::min(s.min, 0.0);
    st.b = std::max(s.max, 0.0);
    st.c = st.b > st.a ? 1.0 / (st.b - st.a) : 0.0;
  }
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -kInf) continue;
    st.r[i] = normalized ? (t[i] - st.a) * st.c : t[i];
  }
  return st;
}
}  // namespace

Row sa_row(const Row& t, bool normalized, EmptyRow empty) {
  Row y(t.size());
  const Stats s = stats(t);
  if (special(s, true, empty, y)) return y;
  const SaState st = sa_state(t, s, normalized);
  for (size_t i = 0; i < t.size(); ++i) y[i] = st.r[i] * st.p[i];
  return y;
}

Row sa_backward_row(const Row& t, const Row& g, bool normalized, bool grad_through_bounds,
                    EmptyRow empty) {
  Row dx(t.size());
  const Stats s = stats(t);
  if (special(s, true, empty, dx)) return dx;
  const SaState st = sa_state(t, s, normalized);
  double gy = 0.0, gp = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    gy += g[i] * st.r[i] * st.p[i];
    gp += g[i] * st.p[i];
  }
  for (size_t j = 0; j < t.size(); ++j) {
    if (t[j] == -kInf) {
      dx[j] = 0.0;
      continue;
    }
    const double q = normalized ? st.c + st.r[j] : 1.0 + t[j];
    dx[j] = st.p[j] * (g[j] * q - gy);
  }
  if (normalized && grad_through_bounds && st.c > 0.0) {
    if (s.min < 0.0) {
      const size_t j = static_cast<size_t>(std::find(t.begin(), t.end(), s.min) - t.begin());
      dx[j] += st.c * (gy - gp);
    }
    if (s.max > 0.0) {
      const size_t j = static_cast<size_t>(std::find(t.begin(), t.end(), s.max) - t.begin());
      dx[j] -= st.c * gy;
    }
  }
  return dx;
}

// ---- sigmoid -------------------------------------------------------------------------
Row sigmoid_norm_row(const Row& t, double bias, EmptyRow empty) {
  Row y(t.size());
  const Stats s = stats(t);
  if (special(s, false, empty, y)) return y;
  for (size_t i = 0; i < t.size(); ++i) {
    const double z = t[i] + bias;
    y[i] = t[i] == -kInf ? 0.0
           : z >= 0.0    ? 1.0 / (1.0 + std::exp(-z))
                         : std::exp(z) / (1.0 + std::exp(z));
  }
  return y;
}

// ---- softplus --------------------------------------------------------------------------
double log_softplus(double z) {
  if (z == -kInf) return -kInf;
  if (z > 0.0) return std::log(z + std::log1p(std::exp(-z)));
  const double w = std::exp(z);
  return w == 0.0 ? z : z + std::log(std::log1p(w) / w);
}

namespace {
// log sigmoid(z).
double log_sigmoid(double z) {
  return z >= 0.0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
}
}  // namespace

Row softplus_norm_row(const Row& z, double power, EmptyRow empty) {
  Row y(z.size());
  const Stats s = stats(z);
  if (special(s, true, empty, y)) return y;
  Row v(z.size());
  for (size_t i = 0; i < z.size(); ++i) v[i] = power * log_softplus(z[i]);
  return softmax_finite_row(v);
}

Row softplus_norm_backward_row(const Row& z, const Row& g, double power, EmptyRow empty) {
  Row dz(z.size());
  const Stats s = stats(z);
  if (special(s, true, empty, dz)) return dz;
  const Row y = softplus_norm_row(z, power, empty);
  const double r = dot(g, y);
  for (size_t i = 0; i < z.size(); ++i) {
    if (z[i] == -kInf) {
      dz[i] = 0.0;
      continue;
    }
    const double rho = std::exp(log_sigmoid(z[i]) - log_softplus(z[i]));
    dz[i] = power * y[i] * rho * (g[i] - r);
  }
  return dz;
}

// ---- power ---------------------------------------------------------------------------------
Row power_row(const Row& t, int p, EmptyRow empty) {
  Row y(t.size(), 0.0);
  const Stats s = stats(t);
  if (special(s, true, empty, y)) return y;
  const double M = std::max(std::fabs(s.min), std::fabs(s.max));
  double S = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -kInf) continue;
    y[i] = M == 0.0 ? 1.0 : std::pow(t[i] / M, p);
    S += y[i];
  }
  for (double& v : y) v /= S;
  return y;
}

Row power_backward_row(const Row& t, const Row& g, int p, EmptyRow empty) {
  Row dx(t.size(), 0.0);
  const Stats s = stats(t);
  if (special(s, true, empty, dx)) return dx;
  const double M = std::max(std::fabs(s.min), std::fabs(s.max));
  if (M == 0.0) return dx;
  double S = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != -kInf) S += std::pow(t[i] / M, p);
  }
  double r = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != -kInf) r += g[i] * std::pow(t[i] / M, p) / S;
  }
  for (size_t j = 0; j < t.size(); ++j) {
    if (t[j] == -kInf) continue;
    dx[j] = p / (M * S) * std::pow(t[j] / M, p - 1) * (g[j] - r);
  }
  return dx;
}

// ---- probability temperature -------------------------------------------------------------------
namespace {
// NaN / negative / +inf -> NaN row; no positive visible entry -> policy.
bool prob_special(const Row& t, EmptyRow empty, Row& out, double* M) {
  const Stats s = stats(t);
  if (s.nan || s.pos_inf || s.min < 0.0) {
    out.assign(out.size(), kNaN);
    return true;
  }
  if (s.visible == 0 || s.max == 0.0) {
    out.assign(out.size(), empty_value(empty));
    return true;
  }
  *M = s.max;
  return false;
}
}  // namespace

Row prob_temperature_row(const Row& t, double T, EmptyRow empty) {
  Row y(t.size(), 0.0);
  double M = 0.0;
  if (prob_special(t, empty, y, &M)) return y;
  double S = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] > 0.0) y[i] = std::pow(t[i] / M, 1.0 / T);
    S += y[i];
  }
  for (double& v : y) v /= S;
  return y;
}

Row prob_temperature_backward_row(const Row& t, const Row& g, double T, EmptyRow empty) {
  Row dx(t.size(), 0.0);
  double M = 0.0;
  if (prob_special(t, empty, dx, &M)) return dx;
  const double a = 1.0 / T;
  Row w(t.size(), 0.0);
  double S = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] > 0.0) w[i] = std::pow(t[i] / M, a);
    S += w[i];
  }
  double r = 0.0;
  for (size_t i = 0; i < t.size(); ++i) r += g[i] * w[i] / S;
  for (size_t j = 0; j < t.size(); ++j) {
    if (t[j] == -kInf) continue;
    // std::pow(0, a - 1): 0 (a > 1), 1 (a == 1), +inf (a < 1).
    dx[j] = a / (M * S) * std::pow(t[j] / M, a - 1.0) * (g[j] - r);
  }
  return dx;
}

// ---- logit standardisation ---------------------------------------------------------------------
namespace {
struct LsState {
  double mu = 0.0, sigma = 0.0, k = 0.0;
  int64_t N = 0;
  Row y;
};
LsState ls_state(const Row& t, const Stats& s, const LogitStandardizationOptions& ls) {
  LsState st;
  const VisibleMoments m = visible_moments(t, ls.unbiased);  // m.N == s.visible
  st.N = m.N;
  st.mu = m.mu;
  st.sigma = m.sigma;
  const double se = st.sigma + static_cast<double>(ls.eps);
  st.k = se > 0.0 ? 1.0 / (se * static_cast<double>(ls.temperature)) : 0.0;
  Row v(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    v[i] = t[i] == -kInf ? -kInf : (st.sigma > 0.0 ? (t[i] - st.mu) * st.k : 0.0);
  }
  st.y = softmax_finite_row(v);
  return st;
}
}  // namespace

Row standardization_row(const Row& t, const LogitStandardizationOptions& ls, EmptyRow empty) {
  Row y(t.size());
  const Stats s = stats(t);
  if (special(s, true, empty, y)) return y;
  return ls_state(t, s, ls).y;
}

Row standardization_backward_row(const Row& t, const Row& g,
                                 const LogitStandardizationOptions& ls, EmptyRow empty) {
  Row dx(t.size(), 0.0);
  const Stats s = stats(t);
  if (special(s, true, empty, dx)) return dx;
  const LsState st = ls_state(t, s, ls);
  const double r = dot(g, st.y);
  double hd = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != -kInf) hd += st.y[i] * (g[i] - r) * (t[i] - st.mu);
  }
  double C = 0.0;
  if (st.sigma > 0.0) {
    const double D = static_cast<double>(ls.unbiased ? st.N - 1 : st.N);
    C = hd / ((st.sigma + static_cast<double>(ls.eps)) * D * st.sigma);
  }
  const double k = std::isfinite(st.k) ? st.k : 0.0;
  for (size_t j = 0; j < t.size(); ++j) {
    if (t[j] == -kInf) continue;
    dx[j] = k * (st.y[j] * (g[j] - r) - (t[j] - st.mu) * C);
  }
  return dx;
}

// ---- tensor level --------------------------------------------------------------------------
std::vector<double> self_adjust_softmax(const TensorView& src, const SelfAdjustOptions& sa,
                                        const SoftmaxOptions& o) {
  return by_rows("self_adjust_softmax", src, o,
                 [&](const Row& t, double) { return sa_row(t, sa.normalized, o.empty_row); });
}

std::vector<double> self_adjust_softmax_backward(const TensorView& src, const TensorView& dy,
                                                 const SelfAdjustOptions& sa,
                                                 const SoftmaxOptions& o) {
  return by_rows2("self_adjust_softmax_backward", src, dy, o,
                  [&](const Row& t, const Row& g, double s) {
                    return scaled(sa_backward_row(t, g, sa.normalized, sa.grad_through_bounds,
                                                  o.empty_row),
                                  s);
                  });
}

std::vector<double> sigmoid_normalizer(const TensorView& src, const SigmoidNormalizerOptions& sig,
                                       const SoftmaxOptions& o) {
  return by_rows("sigmoid_normalizer", src, o, [&](const Row& t, double) {
    double b;
    if (sig.bias) {
      b = *sig.bias;
    } else {
      const int64_t count = sig.n_fixed > 0    ? sig.n_fixed
                            : sig.count_visible ? std::max<int64_t>(stats(t).visible, 1)
                                                : static_cast<int64_t>(t.size());
      b = -std::log(static_cast<double>(count));
      if (!float64_semantics()) b = static_cast<float>(b);
    }
    return sigmoid_norm_row(t, b, o.empty_row);
  });
}

std::vector<double> sigmoid_normalizer_backward(const TensorView& y, const TensorView& dy,
                                                const SoftmaxOptions& o) {
  const char* fn = "sigmoid_normalizer_backward";
  // Masked positions: y's logit view is -inf exactly there (y is finite).
  const RefRows L = ref_rows(fn, y, o, true);
  const RefRows Y = ref_rows(fn, y, o, false);
  const RefRows G = ref_rows(fn, dy, o, false);
  if (G.rows != Y.rows || G.n != Y.n) {
    throw Error(Status::kInvalidArgument, std::string(fn) + ": dy shape mismatch");
  }
  std::vector<double> out(static_cast<size_t>(Y.rows * Y.n));
  for (size_t i = 0; i < out.size(); ++i) {
    const double v = Y.values[i];
    out[i] = L.values[i] == -kInf ? 0.0 : L.scale * G.values[i] * v * (1.0 - v);
  }
  return Y.scatter(out);
}

std::vector<double> softplus_z(const TensorView& src, const SoftplusNormalizerOptions& sp,
                               const SoftmaxOptions& o) {
  return by_rows("softplus_z", src, o, [&](const Row& t, double) {
    double lambda = 0.0;
    return softplus_z_row(t, sp, &lambda);
  });
}

std::vector<double> softplus_normalizer(const TensorView& src, const SoftplusNormalizerOptions& sp,
                                        const SoftmaxOptions& o) {
  return by_rows("softplus_normalizer", src, o, [&](const Row& t, double) {
    double lambda = 0.0;
    const Row z = softplus_z_row(t, sp, &lambda);
    return softplus_norm_row(z, sp.power, o.empty_row);
  });
}

std::vector<double> softplus_normalizer_backward(const TensorView& src, const TensorView& dy,
                                                 const SoftplusNormalizerOptions& sp,
                                                 const SoftmaxOptions& o) {
  return by_rows2("softplus_normalizer_backward", src, dy, o,
                  [&](const Row& t, const Row& g, double s) {
                    double lambda = 0.0;
                    const Row z = softplus_z_row(t, sp, &lambda);
                    return scaled(softplus_norm_backward_row(z, g, sp.power, o.empty_row),
                                  s * lambda);
                  });
}

std::vector<double> power_softmax(const TensorView& src, int p, const SoftmaxOptions& o) {
  return by_rows("power_softmax", src, o,
                 [&](const Row& t, double) { return power_row(t, p, o.empty_row); });
}

std::vector<double> power_softmax_backward(const TensorView& src, const TensorView& dy, int p,
                                           const SoftmaxOptions& o) {
  return by_rows2("power_softmax_backward", src, dy, o,
                  [&](const Row& t, const Row& g, double s) {
                    return scaled(power_backward_row(t, g, p, o.empty_row), s);
                  });
}

std::vector<double> probability_temperature(const TensorView& p_src, float T,
                                            const SoftmaxOptions& o) {
  return by_rows("probability_temperature", p_src, o, [&](const Row& t, double) {
    return prob_temperature_row(t, T, o.empty_row);
  });
}

std::vector<double> probability_temperature_backward(const TensorView& p_src,
                                                     const TensorView& dy, float T,
                                                     const SoftmaxOptions& o) {
  return by_rows2("probability_temperature_backward", p_src, dy, o,
                  [&](const Row& t, const Row& g, double s) {
                    return scaled(prob_temperature_backward_row(t, g, T, o.empty_row), s);
                  });
}

std::vector<double> logit_standardization(const TensorView& src,
                                          const LogitStandardizationOptions& ls,
                                          const SoftmaxOptions& o) {
  return by_rows("logit_standardization", src, o,
                 [&](const Row& t, double) { return standardization_row(t, ls, o.empty_row); });
}

std::vector<double> logit_standardization_backward(const TensorView& src, const TensorView& dy,
                                                   const LogitStandardizationOptions& ls,
                                                   const SoftmaxOptions& o) {
  return by_rows2("logit_standardization_backward", src, dy, o,
                  [&](const Row& t, const Row& g, double s) {
                    return scaled(standardization_backward_row(t, g, ls, o.empty_row), s);
                  });
}

}  // namespace smax::reference

// src/ops/normalizers/reweight.cc: the re-weighting normalisers of smax/reweight.h on the
// Rowwise driver (validation, logit transform, masks, strides, in-place,
// threads) and the row kernels of kernels/reweight.h. Ops that end in a plain
// softmax (SA-Softmax, LSSA re-weighting, logit standardisation) call the
// library's softmax row kernel on the gathered row (the row is in scratch or
// contiguous, hence in cache: the three-pass reload variant).
// An f64 input runs the row on float64 rows (Rowwise::run_native) with the
// float64 row math of ops/normalizers/reweight_f64.h; each op's row function
// is generic over the row type and picks the f32 kernels or the float64 ones.
#include "smax/reweight.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/reweight.h"
#include "core/errors.h"
#include "core/long_row.h"
#include "core/compensated.h"
#include "core/rowwise.h"
#include "ops/normalizers/reweight_f64.h"
#include "smax/error.h"

namespace smax {
namespace {

using detail::RowArgs;
using detail::RowStatsF64;
using detail::RowValue;
using detail::Rowwise;
using detail::BackwardRowwise;
using kernels::RowStats;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using detail::fail;
using detail::num;

// Length of the reduced axis (for scratch sizes; valid once rw is constructed).
int64_t axis_length(const Rowwise& rw) { return rw.src().shape[rw.axis()]; }

template <class T>
void fill(T* y, int64_t n, T v) {
  std::fill(y, y + n, v);
}
float empty_value(EmptyRow e) { return e == EmptyRow::kNan ? kNaN : 0.0f; }

// The row statistics of a row in its type (kernels::RowStats's fields).
kernels::RowStats stats_of(const float* t, int64_t n) { return kernels::reweight_row_stats(t, n); }
RowStatsF64 stats_of(const double* t, int64_t n) { return detail::row_stats_f64(t, n); }
template <class T>
using StatsOf = decltype(stats_of(static_cast<const T*>(nullptr), 0));

using detail::softmax_row_reload;

// y *= 1 / S for a sum S >= smallest normal (pre-scaled by 2^-64 steps when
// 1 / S would not be a normal f32).
void normalize_by(float* y, int64_t n, double S) {
  double f = 1.0 / S;
  while (f < 1e-30) {
    kernels::scale_segment(y, n, 0x1p-64f);
    f *= 0x1p64;
  }
  kernels::scale_segment(y, n, static_cast<float>(f));
}

// Shared prelude of every row function: true when the row was fully written
// (NaN row, +inf -> NaN row if `inf_is_nan`, no visible entry -> policy).
template <class Stats, class Args, class T>
bool special_row(const Stats& s, const Args& a, bool inf_is_nan, T* out) {
  if (s.has_nan || (inf_is_nan && s.max == kInf)) {
    fill<T>(out, a.n, kNaN);
    return true;
  }
  if (s.visible == 0) {
    fill<T>(out, a.n, empty_value(a.empty_row));
    return true;
  }
  return false;
}

// ---- SA-Softmax ------------------------------------------------------------------
kernels::SaParams sa_params(const RowStats& s, bool normalized) {
  kernels::SaParams p;
  p.normalized = normalized;
  if (normalized) {
    const double a = std::min(static_cast<double>(s.min), 0.0);
    const double b = std::max(static_cast<double>(s.max), 0.0);
    p.a = a;
    p.c = b > a ? 1.0 / (b - a) : 0.0;
  }
  return p;
}

// ---- softplus ------------------------------------------------------------------------
// lambda = log N / log d in double (the f32 path rounds it to f32).
double softplus_lambda(const SoftplusNormalizerOptions& sp, int64_t visible) {
  if (sp.lambda) return *sp.lambda;
  return std::log(static_cast<double>(visible)) / std::log(static_cast<double>(sp.head_dim));
}

// Writes the forward row into y; false when the row is special (written).
bool softplus_forward_row(const RowArgs& a, const SoftplusNormalizerOptions& sp, float* y,
                          float* lambda_out) {
  const float* t = a.in[0];
  const RowStats s = kernels::reweight_row_stats(t, a.n);
  if (special_row(s, a, true, y)) return false;
  const float lambda = static_cast<float>(softplus_lambda(sp, s.visible));
  const float zmax = s.max * lambda;  // the kernel's fl(lambda * t) of the max
  if (!(zmax < kInf)) {
    fill(y, a.n, kNaN);
    return false;
  }
  if (zmax == -kInf) {  // every visible z = fl(lambda t) overflows to -inf: no mass,
    fill(y, a.n, empty_value(a.empty_row));  // as a row with no visible entry
    return false;
  }
  if (sp.power == 1.0f) {
    const double S = kernels::softplus_norm_row(t, a.n, lambda, std::min(zmax, 0.0f), y);
    normalize_by(y, a.n, S);
  } else {
    kernels::log_softplus_row(t, a.n, lambda, y);
    softmax_row_reload(y, a.n, sp.power, a.empty_row, y);
  }
  *lambda_out = lambda;
  return true;
}

// The float64 row: lambda and z = lambda t in double.
bool softplus_forward_row(const detail::RowArgs64& a, const SoftplusNormalizerOptions& sp,
                          double* y, double* lambda_out) {
  const double* t = a.in[0];
  const RowStatsF64 s = detail::row_stats_f64(t, a.n);
  if (special_row(s, a, true, y)) return false;
  *lambda_out = softplus_lambda(sp, s.visible);
  return detail::softplus_row_f64(t, a.n, *lambda_out, sp.power, s.max, a.empty_row, y);
}

void check_softplus(const char* op, const SoftplusNormalizerOptions& sp) {
  if (sp.lambda) {
    if (!(std::isfinite(*sp.lambda) && *sp.lambda > 0.0f)) {
      fail(op, "lambda must be finite and > 0, got " + num(*sp.lambda));
    }
  } else if (sp.head_dim < 2) {
    fail(op, "head_dim must be >= 2 when lambda is not given, got " + std::to_string(sp.head_dim));
  }
  if (!(std::isfinite(sp.power) && sp.power > 0.0f)) {
    fail(op, "power must be finite and > 0, got " + num(sp.power));
  }
}

// ---- Power-Softmax ---------------------------------------------------------------------
void check_power(const char* op, int p) {
  if (p <= 0 || p % 2 != 0) fail(op, "p must be even and > 0, got " + std::to_string(p));
}

// Uniform over the visible entries (all-zero rows).
template <class T>
void uniform_visible(const T* t, int64_t n, int64_t visible, T* y) {
  const T u = static_cast<T>(1.0 / static_cast<double>(visible));
  for (int64_t i = 0; i < n; ++i) y[i] = t[i] == -kInf ? T(0) : u;
}

// ---- probability temperature -------------------------------------------------------------
void check_temperature(const char* op, const char* name, float T) {
  if (!(std::isfinite(T) && T > 0.0f)) {
    fail(op, std::string(name) + " must be finite and > 0, got " + num(T));
  }
}

// NaN / negative / +inf -> NaN row; no positive visible entry -> policy.
template <class Stats, class Args, class T>
bool prob_special_row(const Stats& s, const Args& a, T* out) {
  if (s.has_nan || s.min < 0 || s.max == kInf) {
    fill<T>(out, a.n, kNaN);
    return true;
  }
  if (s.visible == 0 || s.max == 0) {
    fill<T>(out, a.n, empty_value(a.empty_row));
    return true;
  }
  return false;
}

// ---- drivers ----------------------------------------------------------------------
// The row prelude a driver runs before the op's row function: none, or the
// row statistics of a.in[0] and the special rows written whole (then the
// row function does not run): special_row with +inf -> NaN (kLogits) or
// without (kLogitsInfOk), prob_special_row (kProbabilities).
enum class Prelude { kNone, kLogits, kLogitsInfOk, kProbabilities };

// Runs the prelude on a row with a.n > 0; true when it wrote the row. `s`
// is left default-constructed under kNone.
template <class Args, class Stats>
bool prelude_wrote(Prelude pre, const Args& a, Stats* s) {
  if (pre == Prelude::kNone) return false;
  *s = stats_of(a.in[0], a.n);
  if (pre == Prelude::kProbabilities) return prob_special_row(*s, a, a.out[0]);
  return special_row(*s, a, pre == Prelude::kLogits, a.out[0]);
}

// The driver of every forward op here: a Rowwise over the logits `src`
// (named `src_name` in errors) writing `dst`, no scratch; for each row with
// at least one element (a.n > 0) not written by the prelude, row(a, stats)
// runs, on Rowwise's threads, with RowArgs and kernels::RowStats, or
// RowArgs64 and RowStatsF64 when an input is f64 (row is generic).
template <class Row>
void forward_rows(const char* op, const TensorView& src, const char* src_name,
                  const TensorView& dst, const SoftmaxOptions& options, Prelude pre,
                  const Row& row) {
  Rowwise rw(op, src, src_name, true, options);
  rw.add_output(dst, "dst");
  rw.run_native(0, [&](const auto& a) {
    StatsOf<RowValue<decltype(a)>> s;
    if (a.n == 0 || prelude_wrote(pre, a, &s)) return;
    row(a, s);
  });
}

// The driver of the backward ops that recompute from the logits: inputs
// src (a.in[0]) and dy (a.in[1]), output dsrc (a.out[0]), one axis-length
// row of scratch (a.scratch, in the row's type); row(a, stats) as in
// forward_rows.
template <class Row>
void backward_rows(const char* op, const TensorView& src, const char* src_name,
                   const TensorView& dy, const TensorView& dsrc, const SoftmaxOptions& options,
                   Prelude pre, const Row& row) {
  BackwardRowwise rw(op, src, src_name, true, dy, dsrc, options);
  rw.run_native(8 * axis_length(rw), [&](const auto& a) {
    StatsOf<RowValue<decltype(a)>> s;
    if (a.n == 0 || prelude_wrote(pre, a, &s)) return;
    row(a, s);
  });
}

// ---- logit standardisation ------------------------------------------------------------------
void check_standardization(const char* op, const LogitStandardizationOptions& ls) {
  check_temperature(op, "temperature", ls.temperature);
  if (!(std::isfinite(ls.eps) && ls.eps >= 0.0f)) {
    fail(op, "eps must be finite and >= 0, got " + num(ls.eps));
  }
}

struct Moments {
  double mu = 0.0, sigma = 0.0;
  int64_t N = 0;
};

Moments moments(const float* t, int64_t n, int64_t visible, bool unbiased) {
  Moments m;
  m.N = visible;
  m.mu = kernels::reweight_visible_sum(t, n) / static_cast<double>(visible);
  if (visible > 1) {
    const double D = static_cast<double>(unbiased ? visible - 1 : visible);
    m.sigma = std::sqrt(kernels::reweight_visible_sq_dev(t, n, m.mu) / D);
  }
  return m;
}

// k = 1 / ((sigma + eps) T), 0 when sigma == 0 (then v = 0).
double standardize_k(double sigma, const LogitStandardizationOptions& ls) {
  return sigma > 0.0 ? 1.0 / ((sigma + static_cast<double>(ls.eps)) * ls.temperature) : 0.0;
}

// y = softmax((t - mu) k), v rounded to f32 (the f32 rows).
void standardized_softmax(const RowArgs& a, const Moments& m,
                          const LogitStandardizationOptions& ls, float* y) {
  kernels::standardize_row(a.in[0], a.n, m.mu, standardize_k(m.sigma, ls), y);
  softmax_row_reload(y, a.n, 1.0f, a.empty_row, y);
}

}  // namespace

// ================================================================================
void self_adjust_softmax(const TensorView& src, const TensorView& dst,
                         const SelfAdjustOptions& sa, const SoftmaxOptions& options) {
  forward_rows("self_adjust_softmax", src, "src", dst, options, Prelude::kNone,
      [&](const auto& a, const auto&) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      detail::sa_forward_row_f64(a.in[0], a.n, sa.normalized, a.empty_row, a.out[0], a.out[0]);
    } else {
      const float* t = a.in[0];
      float* y = a.out[0];
      // NaN / +inf / empty rows are handled by the softmax kernel.
      softmax_row_reload(t, a.n, 1.0f, a.empty_row, y);
      RowStats s;
      if (sa.normalized) s = kernels::reweight_row_stats(t, a.n);
      kernels::sa_forward_row(t, y, a.n, sa_params(s, sa.normalized), y);
    }
  });
}

void self_adjust_softmax_backward(const TensorView& src, const TensorView& dy,
                                  const TensorView& dsrc, const SelfAdjustOptions& sa,
                                  const SoftmaxOptions& options) {
  backward_rows("self_adjust_softmax_backward", src, "src", dy, dsrc, options, Prelude::kNone,
      [&](const auto& a, const auto&) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      detail::sa_backward_row_f64(a.in[0], a.in[1], a.n, sa.normalized, sa.grad_through_bounds,
                                  a.scale, a.empty_row, a.scratch, a.out[0]);
    } else {
      const float* t = a.in[0];
      const float* g = a.in[1];
      float* dx = a.out[0];
      float* p = a.scratch;
      softmax_row_reload(t, a.n, 1.0f, a.empty_row, p);
      RowStats s;
      if (sa.normalized) s = kernels::reweight_row_stats(t, a.n);
      kernels::SaParams prm = sa_params(s, sa.normalized);
      const kernels::SaDots dots = kernels::sa_dots(t, p, g, a.n, prm);
      if (sa.normalized && sa.grad_through_bounds && prm.c > 0.0 && !s.has_nan && s.max != kInf) {
        // Gradient through a = min t (if < 0) and b = max t (if > 0): first
        // arg-min / arg-max (subgradient choice for ties).
        const double scale = a.scale;
        if (s.min < 0.0f) {
          prm.j_min = std::find(t, t + a.n, s.min) - t;
          prm.g_min = scale * prm.c * (dots.gy - dots.gp);
        }
        if (s.max > 0.0f) {
          prm.j_max = std::find(t, t + a.n, s.max) - t;
          prm.g_max = -scale * prm.c * dots.gy;
        }
      }
      kernels::sa_backward_row(t, p, g, a.n, prm, dots.gy, a.scale, dx);
    }
  });
}

// ================================================================================
void sigmoid_normalizer(const TensorView& src, const TensorView& dst,
                        const SigmoidNormalizerOptions& sig, const SoftmaxOptions& options) {
  const char* op = "sigmoid_normalizer";
  if (sig.bias && !std::isfinite(*sig.bias)) fail(op, "bias must be finite, got " + num(*sig.bias));
  if (sig.n_fixed < 0) fail(op, "n_fixed must be >= 0, got " + std::to_string(sig.n_fixed));
  forward_rows(op, src, "src", dst, options, Prelude::kLogitsInfOk,
      [&](const auto& a, const auto& s) {
    // b = -ln n in double: rounded to f32 for the f32 kernel only.
    double b;
    if (sig.bias) {
      b = *sig.bias;
    } else {
      const int64_t count = sig.n_fixed > 0 ? sig.n_fixed : (sig.count_visible ? s.visible : a.n);
      b = -std::log(static_cast<double>(count));
    }
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      detail::sigmoid_norm_row_f64(a.in[0], a.n, b, a.out[0]);
    } else {
      kernels::sigmoid_norm_row(a.in[0], a.n, static_cast<float>(b), a.out[0]);
    }
  });
}

void sigmoid_normalizer_backward(const TensorView& y, const TensorView& dy,
                                 const TensorView& dsrc, const SoftmaxOptions& options) {
  BackwardRowwise rw("sigmoid_normalizer_backward", y, "y", false, dy, dsrc, options);
  rw.zero_masked_outputs();
  rw.run_native(0, [&](const auto& a) {
    if (a.n == 0) return;
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      for (int64_t i = 0; i < a.n; ++i) {
        // The scale first: a raw y far from [0, 1] (y = 1e160) must not
        // overflow y (1 - y) where the result does not (as the f32 kernel).
        a.out[0][i] = a.in[1][i] * a.scale * a.in[0][i] * (1.0 - a.in[0][i]);
      }
    } else {
      kernels::sigmoid_norm_backward_row(a.in[0], a.in[1], a.n, a.scale, a.out[0]);
    }
  });
}

// ================================================================================
void softplus_normalizer(const TensorView& src, const TensorView& dst,
                         const SoftplusNormalizerOptions& sp, const SoftmaxOptions& options) {
  const char* op = "softplus_normalizer";
  check_softplus(op, sp);
  forward_rows(op, src, "src", dst, options, Prelude::kNone,
      [&](const auto& a, const auto&) {
    RowValue<decltype(a)> lambda = 0;
    softplus_forward_row(a, sp, a.out[0], &lambda);
  });
}

void softplus_normalizer_backward(const TensorView& src, const TensorView& dy,
                                  const TensorView& dsrc, const SoftplusNormalizerOptions& sp,
                                  const SoftmaxOptions& options) {
  const char* op = "softplus_normalizer_backward";
  check_softplus(op, sp);
  backward_rows(op, src, "src", dy, dsrc, options, Prelude::kNone,
      [&](const auto& a, const auto&) {
    auto* y = a.scratch;
    RowValue<decltype(a)> lambda = 0;
    if (!softplus_forward_row(a, sp, y, &lambda)) {  // special row: y is 0 or NaN
      std::copy(y, y + a.n, a.out[0]);
      return;
    }
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      detail::softplus_backward_row_f64(a.in[0], y, a.in[1], a.n, lambda,
                                        a.scale * lambda * sp.power, a.out[0]);
    } else {
      const float* g = a.in[1];
      const double r = kernels::dot_segment(g, y, a.n);
      const float coef = a.scale * lambda * sp.power;
      kernels::softplus_norm_backward_row(a.in[0], y, g, a.n, lambda, static_cast<float>(r), coef,
                                          a.out[0]);
    }
  });
}

// ================================================================================
void power_softmax(const TensorView& src, const TensorView& dst, int p,
                   const SoftmaxOptions& options) {
  const char* op = "power_softmax";
  check_power(op, p);
  forward_rows(op, src, "src", dst, options, Prelude::kLogits,
      [&](const auto& a, const auto& s) {
    const auto* t = a.in[0];
    auto* y = a.out[0];
    const auto M = std::max(std::fabs(s.min), std::fabs(s.max));
    if (M == 0) {
      uniform_visible(t, a.n, s.visible, y);
      return;
    }
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      const double S = detail::power_terms_f64(t, a.n, p, M, y);
      for (int64_t i = 0; i < a.n; ++i) y[i] /= S;
    } else {
      normalize_by(y, a.n, kernels::power_row(t, a.n, p, M, y));
    }
  });
}

void power_softmax_backward(const TensorView& src, const TensorView& dy, const TensorView& dsrc,
                            int p, const SoftmaxOptions& options) {
  const char* op = "power_softmax_backward";
  check_power(op, p);
  backward_rows(op, src, "src", dy, dsrc, options, Prelude::kLogits,
      [&](const auto& a, const auto& s) {
    using T = RowValue<decltype(a)>;
    const T* t = a.in[0];
    const T* g = a.in[1];
    T* dx = a.out[0];
    const T M = std::max(std::fabs(s.min), std::fabs(s.max));
    if (M == 0) {
      fill<T>(dx, a.n, 0);
      return;
    }
    T* w = a.scratch;
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      const double S = detail::power_terms_f64(t, a.n, p, M, w);
      const double r = detail::dot_f64(g, w, a.n) / S;
      detail::power_backward_row_f64(t, g, a.n, p, M, r, a.scale * p / S, dx);
    } else {
      const double S = kernels::power_row(t, a.n, p, M, w);
      const double r = kernels::dot_segment(g, w, a.n) / S;
      const double coef = static_cast<double>(a.scale) * p / (static_cast<double>(M) * S);
      kernels::power_backward_row(t, g, a.n, p, M, r, coef, dx);
    }
  });
}

// ================================================================================
void probability_temperature(const TensorView& p_src, const TensorView& dst, float T,
                             const SoftmaxOptions& options) {
  const char* op = "probability_temperature";
  check_temperature(op, "T", T);
  const double inv_T = 1.0 / static_cast<double>(T);
  forward_rows(op, p_src, "p_src", dst, options, Prelude::kProbabilities,
      [&](const auto& a, const auto& s) {
    const auto* t = a.in[0];
    auto* y = a.out[0];
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      const double S = detail::prob_pow_terms_f64(t, a.n, inv_T, s.max, y);
      for (int64_t i = 0; i < a.n; ++i) y[i] /= S;
    } else {
      const double inv_m = 1.0 / static_cast<double>(s.max);
      normalize_by(y, a.n, kernels::prob_pow_row(t, a.n, inv_T, inv_m, y));
    }
  });
}

void probability_temperature_backward(const TensorView& p_src, const TensorView& dy,
                                      const TensorView& dsrc, float T,
                                      const SoftmaxOptions& options) {
  const char* op = "probability_temperature_backward";
  check_temperature(op, "T", T);
  const double inv_T = 1.0 / static_cast<double>(T);
  backward_rows(op, p_src, "p_src", dy, dsrc, options, Prelude::kProbabilities,
      [&](const auto& a, const auto& s) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      const double M = s.max;
      double* w = a.scratch;
      const double S = detail::prob_pow_terms_f64(a.in[0], a.n, inv_T, M, w);
      const double r = detail::dot_f64(a.in[1], w, a.n) / S;
      detail::prob_pow_backward_row_f64(a.in[0], a.in[1], a.n, inv_T, M, r, a.scale * inv_T / S,
                                        a.out[0]);
    } else {
      const float* t = a.in[0];
      const float* g = a.in[1];
      float* dx = a.out[0];
      const double inv_m = 1.0 / static_cast<double>(s.max);
      float* w = a.scratch;
      const double S = kernels::prob_pow_row(t, a.n, inv_T, inv_m, w);
      const double r = kernels::dot_segment(g, w, a.n) / S;
      const double coef = static_cast<double>(a.scale) * inv_T * inv_m / S;
      kernels::prob_pow_backward_row(t, g, a.n, inv_T, inv_m, r, coef, dx);
    }
  });
}

// ================================================================================
void logit_standardization(const TensorView& src, const TensorView& dst,
                           const LogitStandardizationOptions& ls, const SoftmaxOptions& options) {
  const char* op = "logit_standardization";
  check_standardization(op, ls);
  forward_rows(op, src, "src", dst, options, Prelude::kLogits,
      [&](const auto& a, const auto& s) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      detail::standardization_row_f64(a.in[0], a.n, s.visible, ls, a.empty_row, a.out[0]);
    } else {
      standardized_softmax(a, moments(a.in[0], a.n, s.visible, ls.unbiased), ls, a.out[0]);
    }
  });
}

void logit_standardization_backward(const TensorView& src, const TensorView& dy,
                                    const TensorView& dsrc,
                                    const LogitStandardizationOptions& ls,
                                    const SoftmaxOptions& options) {
  const char* op = "logit_standardization_backward";
  check_standardization(op, ls);
  backward_rows(op, src, "src", dy, dsrc, options, Prelude::kLogits,
      [&](const auto& a, const auto& s) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      detail::standardization_backward_row_f64(a.in[0], a.in[1], a.n, s.visible, ls, a.scale,
                                               a.empty_row, a.scratch, a.out[0]);
    } else {
      const float* t = a.in[0];
      const float* g = a.in[1];
      float* dx = a.out[0];
      float* y = a.scratch;
      const Moments m = moments(t, a.n, s.visible, ls.unbiased);
      standardized_softmax(a, m, ls, y);
      const double r = kernels::dot_segment(g, y, a.n);
      const double se = m.sigma + static_cast<double>(ls.eps);
      double C = 0.0;
      if (m.sigma > 0.0) {
        const double D = static_cast<double>(ls.unbiased ? m.N - 1 : m.N);
        C = kernels::standardize_hd(t, y, g, a.n, m.mu, r) / (se * D * m.sigma);
      }
      // k = 1 / ((sigma + eps) T); a constant row with eps = 0 has no finite
      // derivative: 0 (documented).
      const double k = se > 0.0 ? 1.0 / (se * ls.temperature) : 0.0;
      const double coef = std::isfinite(k) ? static_cast<double>(a.scale) * k : 0.0;
      kernels::standardize_backward_row(t, y, g, a.n, m.mu, r, C, coef, dx);
    }
  });
}

}  // namespace smax

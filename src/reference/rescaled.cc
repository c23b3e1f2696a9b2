// src/reference/rescaled.cc: see rescaled.h. Plain float64 loops.
#include "reference/rescaled.h"

#include <algorithm>
#include <cfloat>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "reference/reference.h"
#include "reference/rows.h"
#include "smax/error.h"

namespace smax::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

bool has_nan_or_posinf(const Row& t) {
  for (double v : t) {
    if (std::isnan(v) || v == kInf) return true;
  }
  return false;
}
bool all_masked(const Row& t) {
  for (double v : t) {
    if (v != -kInf) return false;
  }
  return true;
}
Row constant(size_t n, double v) { return Row(n, v); }
double empty_value(EmptyRow p) { return p == EmptyRow::kNan ? kNaN : 0.0; }
// The value every entry of a special row takes: NaN when t holds a NaN or
// +inf, else empty_value(policy) when every entry is -inf (or t is empty);
// nullopt for an ordinary row.
std::optional<double> special_value(const Row& t, EmptyRow policy) {
  if (has_nan_or_posinf(t)) return kNaN;
  if (all_masked(t)) return empty_value(policy);
  return std::nullopt;
}


// Targets in row order (dropped or keepdim shape: the same order).
std::vector<int64_t> targets_of(const TensorView& target) { return i64_dense(target); }

// Per-row weights (0 for ignored) after validating the targets.
std::vector<double> loss_weights(const char* fn, const RefRows& R,
                                 const std::vector<int64_t>& tg, const LossOptions& loss) {
  if (static_cast<int64_t>(tg.size()) != R.rows) fail(fn, "target has the wrong number of rows");
  std::vector<double> cw(static_cast<size_t>(R.n), 1.0);
  if (loss.weight) cw = to_dense(*loss.weight);
  std::vector<double> w(tg.size());
  for (size_t r = 0; r < tg.size(); ++r) {
    if (tg[r] == loss.ignore_index) continue;
    if (tg[r] < 0 || tg[r] >= R.n) fail(fn, "target out of range");
    w[r] = cw[static_cast<size_t>(tg[r])];
  }
  return w;
}

}  // namespace

// ---- rows ---------------------------------------------------------------------------

Row softmax_row(const Row& u, EmptyRow policy) {
  const size_t n = u.size();
  if (const auto v = special_value(u, policy)) return constant(n, *v);
  const double m = *std::max_element(u.begin(), u.end());
  double s = 0.0;
  for (double v : u) s += std::exp(v - m);
  Row y(n);
  for (size_t i = 0; i < n; ++i) y[i] = std::exp(u[i] - m) / s;
  return y;
}

double ssmax_factor(double s, int64_t n, bool f32_factor) {
  const double c = s * std::log(static_cast<double>(n));
  return f32_factor ? static_cast<double>(static_cast<float>(c)) : c;
}

int64_t ssmax_n(const Row& t, int64_t fixed_n) {
  if (fixed_n > 0) return fixed_n;
  int64_t k = 0;
  for (double v : t) k += v != -kInf;
  return k;
}

Row ssmax_row(const Row& t, double s, int64_t fixed_n, EmptyRow policy, bool f32_factor,
              bool f32_logits) {
  const size_t n = t.size();
  if (n == 0) return {};
  const int64_t nn = ssmax_n(t, fixed_n);
  if (nn == 0) return constant(n, empty_value(policy));
  const double c = ssmax_factor(s, nn, f32_factor);
  if (!std::isfinite(c)) return constant(n, kNaN);
  Row u(n);
  for (size_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) {
      u[i] = -kInf;
    } else if (t[i] == kInf) {
      u[i] = kNaN;
    } else {
      u[i] = f32_logits ? static_cast<double>(static_cast<float>(t[i]) * static_cast<float>(c))
                        : t[i] * c;
    }
  }
  return softmax_row(u, policy);
}

Row ssmax_vjp_row(const Row& t, const Row& y, const Row& g, double s, int64_t fixed_n,
                  double sigma, EmptyRow policy, bool f32_factor, double* ds) {
  const size_t n = t.size();
  if (ds) *ds = 0.0;
  if (n == 0) return {};
  const int64_t nn = ssmax_n(t, fixed_n);
  if (all_masked(t)) {
    if (ds) *ds = empty_value(policy);
    return constant(n, empty_value(policy));
  }
  const double c = ssmax_factor(s, nn, f32_factor);
  if (!std::isfinite(c)) {  // a non-finite s (s_rows): NaN row, masked entries 0 (smax/rescaled.h)
    if (ds) *ds = kNaN;
    Row dx(n);
    for (size_t i = 0; i < n; ++i) dx[i] = t[i] == -kInf ? 0.0 : kNaN;
    return dx;
  }
  double dot = 0.0;
  for (size_t i = 0; i < n; ++i) dot += g[i] * y[i];
  Row dx(n);
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    dx[i] = t[i] == -kInf ? 0.0 : sigma * c * y[i] * (g[i] - dot);
    if (y[i] != 0.0) acc += t[i] * y[i] * (g[i] - dot);
  }
  if (ds) *ds = std::log(static_cast<double>(nn)) * acc;
  return dx;
}

SoftpickRow softpick_row(const Row& t, double eps, EmptyRow policy) {
  const size_t n = t.size();
  SoftpickRow out;
  out.q.assign(n, 0.0);
  if (has_nan_or_posinf(t)) {
    out.y = constant(n, kNaN);
    return out;
  }
  if (all_masked(t)) {
    out.y = constant(n, empty_value(policy));
    return out;
  }
  const double m = *std::max_element(t.begin(), t.end());
  if (m <= 0.0) {
    out.y = constant(n, 0.0);
    return out;
  }
  // a_j = e^(t_j - m) - e^-m = e^-m expm1(t_j), without cancellation.
  const double em = std::exp(-m);
  Row a(n, 0.0);
  double S = eps * em;
  for (size_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) continue;
    a[j] = std::fabs(t[j]) < 1.0 ? em * std::expm1(t[j]) : std::exp(t[j] - m) - em;
    S += std::fabs(a[j]);
  }
  out.y.assign(n, 0.0);
  for (size_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) continue;
    out.y[j] = std::max(a[j], 0.0) / S;
    out.q[j] = std::exp(t[j] - m) / S;
    out.K += out.q[j];
  }
  return out;
}

Row softpick_vjp_row(const Row& t, const Row& g, double eps, double sigma, EmptyRow policy) {
  const size_t n = t.size();
  const SoftpickRow f = softpick_row(t, eps, policy);
  if (const auto v = special_value(t, policy)) return constant(n, *v);
  // r = <dy, y> over the visible entries: masked entries (t = -inf) are left
  // out of the sum (smax/rescaled.h), so a non-finite dy there cannot reach
  // the other entries through 0 * inf.
  double r = 0.0;
  for (size_t j = 0; j < n; ++j) {
    if (t[j] != -kInf) r += g[j] * f.y[j];
  }
  Row dx(n, 0.0);
  for (size_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) continue;
    const double pos = t[j] > 0.0 ? 1.0 : 0.0;
    const double sgn = t[j] > 0.0 ? 1.0 : -1.0;  // sgn(0) = -1 (docs/normalizers.md, "softpick")
    dx[j] = sigma * f.q[j] * (pos * g[j] - sgn * r);
  }
  return dx;
}

Row clipped_softmax_row(const Row& t, double gamma, double zeta, EmptyRow policy) {
  Row y = softmax_row(t, policy);  // NaN / +inf -> NaN row, all masked -> policy
  const double a = zeta - gamma;
  for (double& v : y) {
    if (std::isnan(v)) continue;
    v = std::min(std::max(a * v + gamma, 0.0), 1.0);
  }
  return y;
}

Row clipped_softmax_vjp_row(const Row& t, const Row& g, double gamma, double zeta, double sigma,
                            EmptyRow policy) {
  const size_t n = t.size();
  if (const auto v = special_value(t, policy)) return constant(n, *v);
  const Row p = softmax_row(t, policy);
  const double a = zeta - gamma;
  // u_i = a g_i where the clip passes the gradient (0 <= z_i <= 1, as
  // torch.clamp), 0 where it clips; masked entries are left out of <u, p>.
  Row u(n, 0.0);
  double r = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) continue;
    const double z = a * p[i] + gamma;
    if (z >= 0.0 && z <= 1.0) u[i] = a * g[i];
    r += u[i] * p[i];
  }
  Row dx(n, 0.0);
  for (size_t j = 0; j < n; ++j) {
    if (t[j] != -kInf) dx[j] = sigma * p[j] * (u[j] - r);
  }
  return dx;
}

namespace {
// The forward error bound of z_i = a p_i + gamma before rounding: softmax's
// documented bound times a.
double clipped_z_bound(double a, double p) { return a * (2e-6 * p + 1e-36); }
}  // namespace

Row clipped_softmax_bound_row(const Row& t, double gamma, double zeta, EmptyRow policy) {
  const Row p = softmax_row(t, policy);
  const Row y = clipped_softmax_row(t, gamma, zeta, policy);
  const double a = zeta - gamma;
  Row b(t.size(), 0.0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (std::isnan(p[i])) continue;  // compared exactly
    b[i] = clipped_z_bound(a, p[i]) * (1.0 + 0x1p-23) + 0x1p-24 * std::fabs(y[i]);
  }
  return b;
}

Row clipped_softmax_vjp_bound_row(const Row& t, const Row& g, double gamma, double zeta,
                                  double sigma, EmptyRow policy) {
  const size_t n = t.size();
  Row b(n, 1e-30);
  if (has_nan_or_posinf(t) || all_masked(t)) return b;  // special rows: compared exactly
  const Row p = softmax_row(t, policy);
  const Row dx = clipped_softmax_vjp_row(t, g, gamma, zeta, sigma, policy);
  const double a = zeta - gamma;
  // u, |r| and the error E of r = <u, p>; entries whose z lies within the
  // forward bound of 0 or 1 may clip either way in f32: their whole
  // contribution a |g_i| (p_i + [i = j]) is allowed.
  Row u(n, 0.0);
  std::vector<char> amb(n, 0);
  double r = 0.0, E = 0.0, F = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) continue;
    const double z = a * p[i] + gamma;
    if (z >= 0.0 && z <= 1.0) u[i] = a * g[i];
    r += u[i] * p[i];
    E += std::fabs(u[i]) * (2e-6 * p[i] + 1e-36);
    const double d = clipped_z_bound(a, p[i]);
    if (std::fabs(z) <= d || std::fabs(z - 1.0) <= d) {
      amb[i] = 1;
      F += a * std::fabs(g[i]) * p[i];
    }
  }
  for (size_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) continue;
    const double pe = 2e-6 * p[j] + 1e-36;
    double bj = sigma * (pe * (std::fabs(u[j]) + std::fabs(r)) + (p[j] + pe) * E) +
                0x1p-24 * std::fabs(dx[j]) + 1e-30;
    bj += sigma * (p[j] + pe) * (F + (amb[j] ? a * std::fabs(g[j]) : 0.0));
    b[j] = bj;
  }
  return b;
}

double stable_s(double t) { return t >= 0.0 ? t + 1.0 : 1.0 / (1.0 - t); }
double stable_ds(double t) { return t >= 0.0 ? 1.0 : 1.0 / ((1.0 - t) * (1.0 - t)); }

Row stablemax_row(const Row& t, EmptyRow policy) {
  const size_t n = t.size();
  if (const auto v = special_value(t, policy)) return constant(n, *v);
  double S = 0.0;
  for (double v : t) S += stable_s(v);
  Row y(n);
  for (size_t i = 0; i < n; ++i) y[i] = stable_s(t[i]) / S;
  return y;
}

Row stablemax_vjp_row(const Row& t, const Row& g, double sigma, EmptyRow policy) {
  const size_t n = t.size();
  if (const auto v = special_value(t, policy)) return constant(n, *v);
  double S = 0.0, P = 0.0;
  for (size_t i = 0; i < n; ++i) {
    S += stable_s(t[i]);
    if (t[i] != -kInf) P += g[i] * stable_s(t[i]);
  }
  const double r = P / S;
  Row dx(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (t[i] != -kInf) dx[i] = sigma * stable_ds(t[i]) / S * (g[i] - r);
  }
  return dx;
}

double stablemax_ce_row(const Row& t, int64_t target, EmptyRow policy) {
  if (const auto v = special_value(t, policy)) return *v;
  const double tt = t[static_cast<size_t>(target)];
  if (tt == -kInf) return kInf;
  double others = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (static_cast<int64_t>(i) != target) others += stable_s(t[i]);
  }
  return std::log1p(others / stable_s(tt));
}

Row stablemax_ce_grad_row(const Row& t, int64_t target, double coef, EmptyRow policy) {
  const size_t n = t.size();
  if (const auto v = special_value(t, policy)) return constant(n, *v);
  double S = 0.0, others = 0.0;
  for (size_t i = 0; i < n; ++i) {
    S += stable_s(t[i]);
    if (static_cast<int64_t>(i) != target) others += stable_s(t[i]);
  }
  Row dx(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) continue;
    const double ymd = static_cast<int64_t>(i) == target ? -others / S : stable_s(t[i]) / S;
    dx[i] = coef * ymd / (1.0 + std::fabs(t[i]));  // s'/s = 1/(1 + |t|)
  }
  return dx;
}

double round_to(double v, Precision precision) {
  if (!(v > 0.0) || std::isinf(v)) return v;
  // Significand bits p and smallest normal 2^emin of the format.
  const int p = precision == Precision::kF16 ? 11 : 8;
  const int emin = precision == Precision::kF16 ? -14 : -126;
  const double maxv = precision == Precision::kF16 ? 65504.0 : (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127);
  const int e = std::max(static_cast<int>(std::floor(std::log2(v))), emin);  // v in [2^e, 2^(e+1))
  // Guard against log2 rounding at binade edges.
  int ee = e;
  if (std::ldexp(1.0, ee) > v && ee > emin) --ee;
  if (std::ldexp(1.0, ee + 1) <= v) ++ee;
  const double quantum = std::ldexp(1.0, ee - (p - 1));
  const double r = std::nearbyint(v / quantum) * quantum;
  return r > maxv ? kInf : r;
}

bool collapse_row(const Row& t, Precision precision, int lanes, int perturb) {
  const size_t n = t.size();
  if (n == 0 || has_nan_or_posinf(t) || all_masked(t)) return false;
  const double m = *std::max_element(t.begin(), t.end());
  std::vector<float> e(n);
  for (size_t i = 0; i < n; ++i) {
    float v = static_cast<float>(std::exp(t[i] - m));
    if (t[i] != m && v > 0.0f) {
      for (int k = 0; k < 4; ++k) {
        v = perturb > 0 ? std::nextafter(v, FLT_MAX) : perturb < 0 ? std::nextafter(v, 0.0f) : v;
      }
    }
    // The kernel's exp flushes results below ~2^-125.5 to 0; the lower bound
    // flushes a little more, the others never.
    if (perturb < 0 && v < 0x1p-124f) v = 0.0f;
    e[i] = v;
  }
  if (precision == Precision::kF32) {
    // The library's blocked order (exp-inl.h ExpSum / BlockSum).
    const size_t N = static_cast<size_t>(lanes);
    std::vector<float> acc0(N, 0.0f), acc1(N, 0.0f);
    std::vector<double> wide(N, 0.0);
    auto flush = [&] {
      for (size_t l = 0; l < N; ++l) {
        wide[l] += static_cast<double>(acc0[l]);
        wide[l] += static_cast<double>(acc1[l]);
        acc0[l] = acc1[l] = 0.0f;
      }
    };
    size_t i = 0;
    unsigned steps = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
      for (size_t l = 0; l < N; ++l) {
        acc0[l] += e[i + l];
        acc1[l] += e[i + N + l];
        acc0[l] += e[i + 2 * N + l];
        acc1[l] += e[i + 3 * N + l];
      }
      if (++steps == 8) {
        flush();
        steps = 0;
      }
    }
    unsigned k = 0;
    for (; i < n; i += N, ++k) {  // whole vectors, then the zero-padded tail
      std::vector<float>& acc = (k & 1) ? acc1 : acc0;
      for (size_t l = 0; l < N && i + l < n; ++l) acc[l] += e[i + l];
    }
    flush();
    double s = 0.0;
    for (size_t l = 0; l < N; ++l) s += wide[l];
    return static_cast<float>(s) == 1.0f;
  }
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) acc = round_to(acc + round_to(e[i], precision), precision);
  return acc == 1.0;
}

// ---- views ---------------------------------------------------------------------------

std::vector<double> ssmax(const TensorView& src, const SsmaxOptions& params,
                          const SoftmaxOptions& options) {
  const RefRows R = ref_rows("ssmax", src, options);
  std::vector<double> s(static_cast<size_t>(R.rows), params.s);
  if (params.s_rows) s = ref_row_values("ssmax", *params.s_rows, R);
  return map_rows(R, [&](int64_t r) {
    const bool f32 = !float64_semantics();
    return ssmax_row(R.row_copy(r), s[static_cast<size_t>(r)], params.fixed_n, options.empty_row,
                     f32, f32);
  });
}

std::vector<double> ssmax_backward(const TensorView& src, const TensorView& y,
                                   const TensorView& dy, const SsmaxOptions& params,
                                   const SoftmaxOptions& options, std::vector<double>* ds) {
  const RefRows R = ref_rows("ssmax_backward", src, options);
  const RefRows Y = ref_rows("ssmax_backward", y, options, false);
  const RefRows G = ref_rows("ssmax_backward", dy, options, false);
  std::vector<double> s(static_cast<size_t>(R.rows), params.s);
  if (params.s_rows) s = ref_row_values("ssmax_backward", *params.s_rows, R);
  if (ds) ds->assign(static_cast<size_t>(R.rows), 0.0);
  return map_rows(R, [&](int64_t r) {
    double d = 0.0;
    Row dx = ssmax_vjp_row(R.row_copy(r), Y.row_copy(r), G.row_copy(r), s[static_cast<size_t>(r)],
                           params.fixed_n, R.scale, options.empty_row, !float64_semantics(), &d);
    if (ds) (*ds)[static_cast<size_t>(r)] = d;
    return dx;
  });
}

std::vector<double> softpick(const TensorView& src, const SoftpickOptions& params,
                             const SoftmaxOptions& options) {
  const RefRows R = ref_rows("softpick", src, options);
  return map_rows(R, [&](int64_t r) {
    return softpick_row(R.row_copy(r), params.eps, options.empty_row).y;
  });
}

std::vector<double> softpick_backward(const TensorView& src, const TensorView& dy,
                                      const SoftpickOptions& params,
                                      const SoftmaxOptions& options) {
  const RefRows R = ref_rows("softpick_backward", src, options);
  const RefRows G = ref_rows("softpick_backward", dy, options, false);
  return map_rows(R, [&](int64_t r) {
    return softpick_vjp_row(R.row_copy(r), G.row_copy(r), params.eps, R.scale, options.empty_row);
  });
}

std::vector<double> clipped_softmax(const TensorView& src, const ClippedSoftmaxOptions& params,
                                    const SoftmaxOptions& options) {
  const RefRows R = ref_rows("clipped_softmax", src, options);
  return map_rows(R, [&](int64_t r) {
    return clipped_softmax_row(R.row_copy(r), params.gamma, params.zeta, options.empty_row);
  });
}

std::vector<double> clipped_softmax_backward(const TensorView& src, const TensorView& dy,
                                             const ClippedSoftmaxOptions& params,
                                             const SoftmaxOptions& options) {
  const RefRows R = ref_rows("clipped_softmax_backward", src, options);
  const RefRows G = ref_rows("clipped_softmax_backward", dy, options, false);
  return map_rows(R, [&](int64_t r) {
    return clipped_softmax_vjp_row(R.row_copy(r), G.row_copy(r), params.gamma, params.zeta,
                                   R.scale, options.empty_row);
  });
}

std::vector<double> stablemax(const TensorView& src, const SoftmaxOptions& options) {
  const RefRows R = ref_rows("stablemax", src, options);
  return map_rows(R, [&](int64_t r) { return stablemax_row(R.row_copy(r), options.empty_row); });
}

std::vector<double> stablemax_backward(const TensorView& src, const TensorView& dy,
                                       const SoftmaxOptions& options) {
  const RefRows R = ref_rows("stablemax_backward", src, options);
  const RefRows G = ref_rows("stablemax_backward", dy, options, false);
  return map_rows(R, [&](int64_t r) {
    return stablemax_vjp_row(R.row_copy(r), G.row_copy(r), R.scale, options.empty_row);
  });
}

std::vector<double> stablemax_cross_entropy(const TensorView& src, const TensorView& target,
                                            const LossOptions& loss,
                                            const SoftmaxOptions& options) {
  const char* fn = "stablemax_cross_entropy";
  const RefRows R = ref_rows(fn, src, options);
  const std::vector<int64_t> tg = targets_of(target);
  const std::vector<double> w = loss_weights(fn, R, tg, loss);
  std::vector<double> per(static_cast<size_t>(R.rows), 0.0);
  double sum = 0.0, wsum = 0.0;
  for (int64_t r = 0; r < R.rows; ++r) {
    const size_t k = static_cast<size_t>(r);
    if (tg[k] == loss.ignore_index) continue;
    per[k] = w[k] * stablemax_ce_row(R.row_copy(r), tg[k], options.empty_row);
    sum += per[k];
    wsum += w[k];
  }
  if (loss.reduction == Reduction::kNone) return per;
  if (loss.reduction == Reduction::kSum) return {sum};
  if (wsum == 0.0) return {loss.empty_mean == EmptyMean::kZero ? 0.0 : kNaN};
  return {sum / wsum};
}

std::vector<double> stablemax_cross_entropy_backward(const TensorView& src,
                                                     const TensorView& target,
                                                     const TensorView& dloss,
                                                     const LossOptions& loss,
                                                     const SoftmaxOptions& options) {
  const char* fn = "stablemax_cross_entropy_backward";
  const RefRows R = ref_rows(fn, src, options);
  const std::vector<int64_t> tg = targets_of(target);
  const std::vector<double> w = loss_weights(fn, R, tg, loss);
  const std::vector<double> g = to_dense(dloss);
  double wsum = 0.0;
  for (double v : w) wsum += v;
  return map_rows(R, [&](int64_t r) {
    const size_t k = static_cast<size_t>(r);
    if (tg[k] == loss.ignore_index) return Row(static_cast<size_t>(R.n), 0.0);
    double c = w[k] * (loss.reduction == Reduction::kNone ? g[k] : g[0]);
    if (loss.reduction == Reduction::kMean) {
      // Zero weight sum with non-ignored rows: 0 / 0 (PyTorch's w / sum w).
      c = wsum != 0.0 ? c / wsum : loss.empty_mean == EmptyMean::kZero ? 0.0 : kNaN;
    }
    return stablemax_ce_grad_row(R.row_copy(r), tg[k], c * R.scale, options.empty_row);
  });
}

int f32_lanes_of_target(std::string_view target) {
  std::string t;
  for (char ch : target) t += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (t.find("avx3") != std::string::npos || t.find("avx512") != std::string::npos) return 16;
  if (t.find("avx2") != std::string::npos) return 8;
  if (t.find("sse") != std::string::npos || t.find("emu128") != std::string::npos) return 4;
  if (t.find("scalar") != std::string::npos) return 1;
  return 0;
}

std::vector<int> softmax_collapse_flags(const TensorView& src, Precision precision,
                                        const SoftmaxOptions& options, int lanes) {
  const RefRows R = ref_rows("softmax_collapse_fraction", src, options);
  std::vector<int> out(static_cast<size_t>(R.rows));
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t = R.row_copy(r);
    const bool lo = collapse_row(t, precision, lanes, -1);
    const bool hi = collapse_row(t, precision, lanes, +1);
    // The sum is monotone in every e_i: collapsed with the larger exps =>
    // collapsed for any exps in between; not collapsed with the smaller ones
    // => never.
    out[static_cast<size_t>(r)] = hi ? 1 : !lo ? 0 : -1;
  }
  return out;
}

}  // namespace smax::reference

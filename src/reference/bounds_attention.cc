// src/reference/bounds_attention.cc: the error bounds of smax::attention and
// attention_backward (include/smax/attention.h, docs/attention.md), built
// on the float64 oracle's result. One copy for every checker: the unit
// tests (tests/attention_util.h), `smax attention --check` and the
// attention fuzz harness.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/attention.h"

namespace smax::reference {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

int64_t visible(const AttentionProblem& p, const AttentionResult& r, int64_t row) {
  int64_t n = 0;
  for (int64_t j = 0; j < p.Lk; ++j) n += r.T[static_cast<size_t>(row * p.Lk + j)] != kNegInf;
  return n;
}

}  // namespace

double attention_power_kappa(int p) {
  const double pp = static_cast<double>(p);
  return std::max(2e-6, (2 * pp + 4 * std::log2(pp) + 6) * kU);
}

double attention_row_delta(const AttentionProblem& p, const AttentionResult& r, int64_t row,
                           double* dot_max) {
  const int64_t G = p.Hkv > 0 ? p.H / p.Hkv : 1;
  const int64_t bh = row / std::max<int64_t>(p.Lq, 1);
  const int64_t b = bh / std::max<int64_t>(p.H, 1), h = bh % std::max<int64_t>(p.H, 1);
  const double* Q = p.q.data() + row * p.D;
  const double* K = p.k.data() + (b * p.Hkv + h / G) * p.Lk * p.D;
  double delta = 0;
  for (int64_t j = 0; j < p.Lk; ++j) {
    double a = 0;
    for (int64_t c = 0; c < p.D; ++c) a += std::abs(Q[c] * K[j * p.D + c]);
    if (dot_max != nullptr && !std::isnan(a)) *dot_max = std::max(*dot_max, a);
    const double t = r.T[static_cast<size_t>(row * p.Lk + j)];
    if (t == kNegInf || std::isnan(t)) continue;
    delta = std::max(delta, (p.D + 2) * kU * std::abs(p.scale) * a + 2 * kU * std::abs(t) +
                                4 * kU * p.o.softcap);
  }
  return delta;
}

double attention_sensitivity(const AttentionProblem& p, const AttentionResult& r, int64_t row) {
  const double n = static_cast<double>(std::max<int64_t>(visible(p, r, row), 1));
  switch (p.o.normalizer) {
    case AttentionNormalizer::kSigmoid:
      return 1.0;
    case AttentionNormalizer::kSsmax: {
      const int64_t h = (row / std::max<int64_t>(p.Lq, 1)) % std::max<int64_t>(p.H, 1);
      const double s = p.ssmax.empty() ? static_cast<double>(p.o.ssmax_s)
                                       : p.ssmax[static_cast<size_t>(h)];
      return 2.0 * std::abs(s * std::log(n));
    }
    case AttentionNormalizer::kSoftplus:
      return 2.0 * std::log(n) / std::log(static_cast<double>(p.D)) + 2.0;
    default:
      return 2.0;
  }
}

double attention_norm_error(const AttentionProblem& p) {
  switch (p.o.normalizer) {
    case AttentionNormalizer::kSoftmax:
      return 0.0;
    case AttentionNormalizer::kPower:
      return attention_power_kappa(p.o.power_p);
    default:
      return 2e-6;
  }
}

void attention_bound_weights(const AttentionProblem& p, const AttentionResult& r, int64_t row,
                             double* w) {
  const double* P = r.P.data() + row * p.Lk;
  const double* T = r.T.data() + row * p.Lk;
  for (int64_t j = 0; j < p.Lk; ++j) w[j] = std::abs(P[j]);
  double m = kNegInf;
  for (int64_t j = 0; j < p.Lk; ++j) {
    if (T[j] != kNegInf && !std::isnan(T[j])) {
      m = std::max(m, p.o.normalizer == AttentionNormalizer::kPower ? std::abs(T[j]) : T[j]);
    }
  }
  if (!(m > kNegInf)) return;
  if (p.o.normalizer == AttentionNormalizer::kSoftpick) {
    double S = 0;
    for (int64_t j = 0; j < p.Lk; ++j) {
      if (T[j] != kNegInf) S += std::abs(std::exp(T[j] - m) - std::exp(-m));
    }
    S += static_cast<double>(p.o.softpick_eps) * std::exp(-m);
    for (int64_t j = 0; j < p.Lk; ++j) {
      if (T[j] != kNegInf && S > 0) w[j] += std::exp(T[j] - m) / S;
    }
  } else if (p.o.normalizer == AttentionNormalizer::kPower) {
    // y_j = |t_j|^q / S (q = power_p even): a logit error e_j moves y_j by
    // q (|t_j|^(q-1) / S + y_j sum_k |t_k|^(q-1) / S) max|e| at most, which
    // the row's E = 2 Delta + ... times these weights covers. With
    // M = max |t| the terms are (|t_j| / M)^(q-1) / (M S'), S' = sum (|t|/M)^q.
    // A row whose logits are all 0 (M = 0) is uniform exactly, but any
    // logit error may move it anywhere; the same below M = 2^-100, where the
    // f32 products of the logits lose their relative precision to underflow
    // (Power-Softmax depends on the logits' ratios only). No finite bound:
    // the largest double, so that a zero value column still gives a bound
    // of 0, not inf * 0.
    const int q = p.o.power_p;
    if (m < 0x1p-100) {
      for (int64_t j = 0; j < p.Lk; ++j) {
        if (T[j] != kNegInf) w[j] = std::numeric_limits<double>::max();
      }
      return;
    }
    double S = 0, A = 0;
    for (int64_t j = 0; j < p.Lk; ++j) {
      if (T[j] != kNegInf) S += std::pow(std::abs(T[j]) / m, q);
    }
    for (int64_t j = 0; j < p.Lk; ++j) {
      if (T[j] != kNegInf) A += std::pow(std::abs(T[j]) / m, q - 1) / (m * S);
    }
    for (int64_t j = 0; j < p.Lk; ++j) {
      if (T[j] == kNegInf) continue;
      const double g = std::pow(std::abs(T[j]) / m, q - 1) / (m * S);
      w[j] += 0.5 * q * (g + std::abs(P[j]) * A);
    }
  }
}

double attention_row_error(const AttentionProblem& p, const AttentionResult& r, int64_t row) {
  const bool softmax = p.o.normalizer == AttentionNormalizer::kSoftmax;
  const double lacc = softmax ? 512.0 + static_cast<double>(p.Lk) / 512.0
                              : static_cast<double>(p.Lk);
  return attention_sensitivity(p, r, row) * attention_row_delta(p, r, row) +
         attention_norm_error(p) + (lacc + 16) * kU;
}

std::vector<double> attention_forward_bounds(const AttentionProblem& p,
                                             const AttentionResult& r) {
  const int64_t G = p.Hkv > 0 ? p.H / p.Hkv : 1;
  std::vector<double> bound(static_cast<size_t>(p.B * p.H * p.Lq * p.Dv));
  std::vector<double> w(static_cast<size_t>(p.Lk));
  for (int64_t row = 0; row < p.B * p.H * p.Lq; ++row) {
    const int64_t bh = row / p.Lq, b = bh / p.H, h = bh % p.H;
    const double* V = p.v.data() + (b * p.Hkv + h / G) * p.Lk * p.Dv;
    attention_bound_weights(p, r, row, w.data());
    const double E = attention_row_error(p, r, row);
    for (int64_t c = 0; c < p.Dv; ++c) {
      double W = 0;
      for (int64_t j = 0; j < p.Lk; ++j) W += w[static_cast<size_t>(j)] * std::abs(V[j * p.Dv + c]);
      bound[static_cast<size_t>(row * p.Dv + c)] = E * W + 1e-30;
    }
  }
  return bound;
}

double attention_backward_rel(const AttentionProblem& p, const AttentionResult& r,
                              int64_t extra) {
  double dmax = 0;
  for (int64_t row = 0; row < p.B * p.H * p.Lq; ++row) {
    dmax = std::max(dmax, attention_row_delta(p, r, row));
  }
  const double base = p.o.normalizer == AttentionNormalizer::kPower
                          ? std::max(2e-6, 2 * attention_power_kappa(p.o.power_p))
                          : 2e-6;
  return base + 2.0 * static_cast<double>(p.Lq + p.Lk + p.D + p.Dv + extra) * kU + 4 * dmax;
}

int64_t attention_backward_lse_extra(const AttentionProblem& p) {
  const double lacc = 512.0 + static_cast<double>(p.Lk) / 512.0;
  // Finite sinks only: a -inf sink adds nothing to lse, and a +inf one
  // makes its rows NaN (those take the full-row backward). Capped so that
  // a huge sink cannot overflow the count (the bound is then vacuous).
  double sink = 0;
  for (double x : p.sinks) {
    if (std::isfinite(x)) sink = std::max(sink, std::abs(x));
  }
  const double e = std::ceil((lacc + 16) / 2) +
                   std::ceil((sink + std::log(static_cast<double>(p.Lk) + 2) + 4) / 2);
  return static_cast<int64_t>(std::min(e, 1e15));
}

}  // namespace smax::reference

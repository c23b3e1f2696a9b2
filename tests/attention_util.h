// tests/attention_util.h: helpers and the per-target fixture shared by
// tests/test_attention*.cc, which test
// smax::attention / attention_backward against the
// float64 oracle (src/reference/attention.h), per SIMD target.
//
// Forward bound (include/smax/attention.h), per output element:
//   |out_ic - ref_ic| <= (sens * Delta_i + e_norm + (L_acc + 16) u) * W_ic + 1e-30
//   Delta_i = max_j vis [(D + 2) u |scale| sum_d |q_id k_jd| + 2 u |t_ij| + 4 u cap]
//   W_ic = sum_j G_ij |v_jc| (G = P; softpick: P + e^t / S)
// with sens = 2 (softmax, stablemax, softpick), 2 |c| (ssmax), 1 (sigmoid),
// 2 lambda (softplus); e_norm = the row op's own relative bound (2e-6, 0 for
// softmax); L_acc = 512 + Lk / 512 (softmax), Lk (others).
// Backward, elementwise: |d - ref| <= (2e-6 + 2 (Lq + Lk + D + Dv) u + 4 max Delta) * mag + 1e-30,
// mag = the reference's sums with absolute values (reference/attention.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "reference/attention.h"
#include "smax/attention.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::AttentionNormalizer;
using smax::AttentionOptions;
namespace ref = smax::reference;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

inline const std::vector<AttentionNormalizer>& all_normalizers() {
  static const std::vector<AttentionNormalizer> v = {
      AttentionNormalizer::kSoftmax, AttentionNormalizer::kSigmoid,
      AttentionNormalizer::kSoftpick, AttentionNormalizer::kSsmax,
      AttentionNormalizer::kStablemax, AttentionNormalizer::kSoftplus};
  return v;
}

struct Shape {
  int64_t B, H, Hkv, Lq, Lk, D, Dv;
};

inline std::string shape_name(const Shape& s) {
  return "[B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) + " Hkv=" +
         std::to_string(s.Hkv) + " Lq=" + std::to_string(s.Lq) + " Lk=" + std::to_string(s.Lk) +
         " D=" + std::to_string(s.D) + " Dv=" + std::to_string(s.Dv) + "]";
}

// Tensors of one problem; `transposed` stores q/k/v/out as [B, L, H, D].
struct Problem {
  Shape s;
  Tensor q, k, v, out;
  Problem(const Shape& sh, bool transposed) : s(sh) {
    auto make = [&](int64_t b, int64_t h, int64_t l, int64_t d) {
      std::vector<int64_t> shape = {b, h, l, d};
      if (!transposed) return Tensor(shape, {}, 1);
      return Tensor(shape, permuted_strides(shape, {0, 2, 1, 3}), 3);
    };
    q = make(sh.B, sh.H, sh.Lq, sh.D);
    k = make(sh.B, sh.Hkv, sh.Lk, sh.D);
    v = make(sh.B, sh.Hkv, sh.Lk, sh.Dv);
    out = make(sh.B, sh.H, sh.Lq, sh.Dv);
  }
  void fill(Rng& rng, float qs = 1.0f) {
    q.fill([&](int64_t) { return rng.normal() * qs; });
    k.fill([&](int64_t) { return rng.normal(); });
    v.fill([&](int64_t) { return rng.normal(); });
  }
};

inline double sensitivity(const ref::AttentionProblem& p, int64_t row, const ref::AttentionResult& r) {
  switch (p.o.normalizer) {
    case AttentionNormalizer::kSigmoid:
      return 1.0;
    case AttentionNormalizer::kSsmax: {
      int64_t vis = 0;
      for (int64_t j = 0; j < p.Lk; ++j) vis += r.T[row * p.Lk + j] != -kInfD;
      const int64_t h = (row / p.Lq) % p.H;  // per-head s (ssmax_scales) when given
      const double sv = p.ssmax.empty() ? static_cast<double>(p.o.ssmax_s) : p.ssmax[h];
      return 2.0 * std::abs(sv * std::log(std::max<double>(vis, 1)));
    }
    case AttentionNormalizer::kSoftplus: {
      int64_t vis = 0;
      for (int64_t j = 0; j < p.Lk; ++j) vis += r.T[row * p.Lk + j] != -kInfD;
      return 2.0 * std::log(std::max<double>(vis, 1)) / std::log(static_cast<double>(p.D)) + 2.0;
    }
    default:
      return 2.0;
  }
}

// Delta_i: bound on the error of the f32 logits of query row (b, h, i).
inline double row_delta(const ref::AttentionProblem& p, const ref::AttentionResult& r, int64_t b,
                 int64_t h, int64_t i) {
  const int64_t G = p.Hkv > 0 ? p.H / p.Hkv : 1;
  const int64_t row = (b * p.H + h) * p.Lq + i;
  const double* Q = p.q.data() + row * p.D;
  const double* K = p.k.data() + (b * p.Hkv + h / G) * p.Lk * p.D;
  double delta = 0;
  for (int64_t j = 0; j < p.Lk; ++j) {
    const double t = r.T[row * p.Lk + j];
    if (t == -kInfD || std::isnan(t)) continue;
    double a = 0;
    for (int64_t c = 0; c < p.D; ++c) a += std::abs(Q[c] * K[j * p.D + c]);
    delta = std::max(delta, (p.D + 2) * kU * std::abs(p.scale) * a + 2 * kU * std::abs(t) +
                                4 * kU * p.o.softcap);
  }
  return delta;
}

// The forward bound above for every output element [B, H, Lq, Dv] (of the
// ungated output a).
inline std::vector<double> forward_bounds(const ref::AttentionProblem& p,
                                          const ref::AttentionResult& r) {
  std::vector<double> bound(static_cast<size_t>(p.B * p.H * p.Lq * p.Dv));
  const int64_t G = p.Hkv > 0 ? p.H / p.Hkv : 1;
  const bool softmax = p.o.normalizer == AttentionNormalizer::kSoftmax;
  const double lacc = softmax ? 512.0 + static_cast<double>(p.Lk) / 512.0 : static_cast<double>(p.Lk);
  const double enorm = softmax ? 0.0 : 2e-6;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const int64_t row = (b * p.H + h) * p.Lq + i;
        const int64_t hk = h / G;
        const double* V = p.v.data() + (b * p.Hkv + hk) * p.Lk * p.Dv;
        const double delta = row_delta(p, r, b, h, i);
        double m = -kInfD, S = 0;
        for (int64_t j = 0; j < p.Lk; ++j) {
          const double t = r.T[row * p.Lk + j];
          if (t == -kInfD || std::isnan(t)) continue;
          m = std::max(m, t);
        }
        std::vector<double> G(static_cast<size_t>(p.Lk));
        for (int64_t j = 0; j < p.Lk; ++j) G[j] = std::abs(r.P[row * p.Lk + j]);
        if (p.o.normalizer == AttentionNormalizer::kSoftpick && m > -kInfD) {
          for (int64_t j = 0; j < p.Lk; ++j) {
            const double t = r.T[row * p.Lk + j];
            if (t != -kInfD) S += std::abs(std::exp(t - m) - std::exp(-m));
          }
          S += p.o.softpick_eps * std::exp(-m);
          for (int64_t j = 0; j < p.Lk; ++j) {
            const double t = r.T[row * p.Lk + j];
            if (t != -kInfD) G[j] += std::exp(t - m) / S;
          }
        }
        const double E = sensitivity(p, row, r) * delta + enorm + (lacc + 16) * kU;
        for (int64_t c = 0; c < p.Dv; ++c) {
          double W = 0;
          for (int64_t j = 0; j < p.Lk; ++j) W += G[j] * std::abs(V[j * p.Dv + c]);
          bound[static_cast<size_t>(row * p.Dv + c)] = E * W + 1e-30;
        }
      }
  return bound;
}

// Checks a forward result against the reference with the bound above.
inline ::testing::AssertionResult check_forward(const ref::AttentionProblem& p,
                                         const ref::AttentionResult& r,
                                         const std::vector<float>& out, const std::string& what,
                                         double* worst = nullptr) {
  CheckResult cr;
  const std::vector<double> bound = forward_bounds(p, r);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const int64_t row = (b * p.H + h) * p.Lq + i;
        for (int64_t c = 0; c < p.Dv; ++c) {
          const int64_t idx = row * p.Dv + c;
          check_element(cr, idx, out[idx], r.out[idx], bound[static_cast<size_t>(idx)], false, [&] {
            return " (b=" + std::to_string(b) + " h=" + std::to_string(h) + " i=" +
                   std::to_string(i) + " c=" + std::to_string(c) + ")";
          });
        }
      }
  if (worst != nullptr) *worst = std::max(*worst, cr.worst_ratio);
  return to_assertion(cr, what);
}

inline std::vector<float> dense_f(const Tensor& t) { return t.dense(); }

// Runs the library forward on `pr` (out poisoned first) and checks it.
inline ::testing::AssertionResult run_forward(Problem& pr, const AttentionOptions& o,
                                       const std::string& what, double* worst = nullptr) {
  pr.out.poison();
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  if (!pr.out.guards_intact()) return ::testing::AssertionFailure() << what << ": guards";
  const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
  const auto r = ref::attention_forward(p);
  return check_forward(p, r, dense_f(pr.out), what, worst);
}

// Elementwise comparison of a gradient tensor: |got - want| <= rel * mag + 1e-30.
inline ::testing::AssertionResult check_grad(const std::vector<float>& got,
                                      const std::vector<double>& want,
                                      const std::vector<double>& mag, double rel,
                                      const std::string& what, double* worst = nullptr) {
  CheckResult cr;
  for (size_t i = 0; i < want.size(); ++i) {
    check_element(cr, static_cast<int64_t>(i), got[i], want[i], rel * mag[i] + 1e-30, false);
  }
  if (worst != nullptr) *worst = std::max(*worst, cr.worst_ratio);
  return to_assertion(cr, what);
}

struct Grads {
  Tensor dq, dk, dv;
};

inline Grads run_backward(Problem& pr, const Tensor& dout, const AttentionOptions& o) {
  Grads g{Tensor({pr.s.B, pr.s.H, pr.s.Lq, pr.s.D}, {}, 2),
          Tensor({pr.s.B, pr.s.Hkv, pr.s.Lk, pr.s.D}, {}, 1),
          Tensor({pr.s.B, pr.s.Hkv, pr.s.Lk, pr.s.Dv}, {}, 3)};
  smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                           g.dq.view(), g.dk.view(), g.dv.view(), o);
  return g;
}

// The backward's relative bound 2e-6 + 2 (Lq + Lk + D + Dv + extra) u +
// 4 max_i Delta_i (extra: roundings a caller adds, e.g. the gate's 2).
inline double backward_rel(const ref::AttentionProblem& p, const ref::AttentionResult& fr,
                           int64_t extra = 0) {
  double dmax = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) dmax = std::max(dmax, row_delta(p, fr, b, h, i));
  return 2e-6 + 2.0 * static_cast<double>(p.Lq + p.Lk + p.D + p.Dv + extra) * kU + 4 * dmax;
}

double g_bwd_worst = 0;
std::string g_bwd_worst_what;

// Backward bound: rel = 2e-6 + 2 (Lq + Lk + D + Dv) u + 4 max_i Delta_i, times the
// reference magnitudes.
inline ::testing::AssertionResult check_backward_case(Problem& pr, const AttentionOptions& o, Rng& rng,
                                               const std::string& what) {
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  Tensor dout({pr.s.B, pr.s.H, pr.s.Lq, pr.s.Dv});
  dout.fill([&](int64_t) { return rng.normal(); });
  Grads g = run_backward(pr, dout, o);
  if (!g.dq.guards_intact() || !g.dk.guards_intact() || !g.dv.guards_intact()) {
    return ::testing::AssertionFailure() << what << ": guards";
  }
  const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
  const auto want = ref::attention_backward(p, to_dense(dout.view()));
  const double rel = backward_rel(p, ref::attention_forward(p));
  const double before = g_bwd_worst;
  struct Note {
    const double& before;
    const std::string& what;
    ~Note() {
      if (g_bwd_worst > before) g_bwd_worst_what = what;
    }
  } note{before, what};
  auto a = check_grad(g.dq.dense(), want.dq, want.dq_mag, rel, what + " dq", &g_bwd_worst);
  if (!a) return a;
  a = check_grad(g.dk.dense(), want.dk, want.dk_mag, rel, what + " dk", &g_bwd_worst);
  if (!a) return a;
  return check_grad(g.dv.dense(), want.dv, want.dv_mag, rel, what + " dv", &g_bwd_worst);
}

class Attention : public TargetTest {};

}  // namespace
}  // namespace smax_test

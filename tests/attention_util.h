// tests/attention_util.h: helpers and the per-target fixture shared by
// tests/test_attention*.cc, which test
// smax::attention / attention_backward against the
// float64 oracle (src/reference/attention.h), per SIMD target.
//
// The bounds (include/smax/attention.h) come from src/reference/attention.h
// ("error bounds"), the one copy the CLI and the fuzz harness use too:
// forward |out_ic - ref_ic| <= E_i W_ic + 1e-30 per element; backward
// |d - ref| <= rel * mag + 1e-30 with the reference's magnitudes.
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
      AttentionNormalizer::kStablemax, AttentionNormalizer::kSoftplus,
      AttentionNormalizer::kPower};
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

// The forward bound above for every output element [B, H, Lq, Dv] (of the
// ungated output a): src/reference/bounds_attention.cc, shared with the CLI
// and the fuzz harness.
inline std::vector<double> forward_bounds(const ref::AttentionProblem& p,
                                          const ref::AttentionResult& r) {
  return ref::attention_forward_bounds(p, r);
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
// 4 max_i Delta_i (extra: roundings a caller adds, e.g. the gate's 2;
// Power-Softmax's base is max(2e-6, 2 kappa(p))).
inline double backward_rel(const ref::AttentionProblem& p, const ref::AttentionResult& fr,
                           int64_t extra = 0) {
  return ref::attention_backward_rel(p, fr, extra);
}

double g_bwd_worst = 0;
std::string g_bwd_worst_what;

// True when attention_backward can take the softmax from options.lse (the
// forward's), FlashAttention-2's tiles: the softmax normaliser, f32 out.
inline bool lse_backward_case(const Problem& pr, const AttentionOptions& o) {
  return o.normalizer == AttentionNormalizer::kSoftmax &&
         pr.out.view().dtype == smax::DType::kF32 && !o.cache_seqlens && !o.block_table;
}

// Backward bound: rel = 2e-6 + 2 (Lq + Lk + D + Dv) u + 4 max_i Delta_i, times the
// reference magnitudes. Softmax: also with the forward's lse given to the
// backward (the tiled backward from lse; its extra roundings:
// ref::attention_backward_lse_extra), which falls back to the full-row
// backward, bit for bit, where a task does not qualify (non-finite q / k, a
// NaN row).
inline ::testing::AssertionResult check_backward_case(Problem& pr, const AttentionOptions& o,
                                                      Rng& rng, const std::string& what) {
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  Tensor dout({pr.s.B, pr.s.H, pr.s.Lq, pr.s.Dv});
  dout.fill([&](int64_t) { return rng.normal(); });
  Grads g = run_backward(pr, dout, o);
  if (!g.dq.guards_intact() || !g.dk.guards_intact() || !g.dv.guards_intact()) {
    return ::testing::AssertionFailure() << what << ": guards";
  }
  const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
  const auto want = ref::attention_backward(p, to_dense(dout.view()));
  const auto fwd = ref::attention_forward(p);
  const double before = g_bwd_worst;
  struct Note {
    const double& before;
    const std::string& what;
    ~Note() {
      if (g_bwd_worst > before) g_bwd_worst_what = what;
    }
  } note{before, what};
  auto check = [&](const Grads& got, double rel, const std::string& w) {
    auto a = check_grad(got.dq.dense(), want.dq, want.dq_mag, rel, w + " dq", &g_bwd_worst);
    if (!a) return a;
    a = check_grad(got.dk.dense(), want.dk, want.dk_mag, rel, w + " dk", &g_bwd_worst);
    if (!a) return a;
    return check_grad(got.dv.dense(), want.dv, want.dv_mag, rel, w + " dv", &g_bwd_worst);
  };
  auto a = check(g, backward_rel(p, fwd), what);
  if (!a || !lse_backward_case(pr, o)) return a;
  Tensor lse({pr.s.B, pr.s.H, pr.s.Lq});
  Tensor out2({pr.s.B, pr.s.H, pr.s.Lq, pr.s.Dv});
  AttentionOptions ol = o;
  ol.lse = lse.view();
  ol.backward_from_lse = true;
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), out2.view(), ol);
  Grads gl{Tensor({pr.s.B, pr.s.H, pr.s.Lq, pr.s.D}, {}, 2),
           Tensor({pr.s.B, pr.s.Hkv, pr.s.Lk, pr.s.D}, {}, 1),
           Tensor({pr.s.B, pr.s.Hkv, pr.s.Lk, pr.s.Dv}, {}, 3)};
  smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), out2.view(), dout.view(),
                           gl.dq.view(), gl.dk.view(), gl.dv.view(), ol);
  if (!gl.dq.guards_intact() || !gl.dk.guards_intact() || !gl.dv.guards_intact() ||
      !lse.guards_intact()) {
    return ::testing::AssertionFailure() << what << " (from lse): guards";
  }
  return check(gl, backward_rel(p, fwd, ref::attention_backward_lse_extra(p)),
               what + " (from lse)");
}

class Attention : public TargetTest {};

}  // namespace
}  // namespace smax_test

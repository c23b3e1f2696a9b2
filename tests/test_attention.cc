// tests/test_attention.cc: smax::attention / attention_backward against the
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

const std::vector<AttentionNormalizer>& all_normalizers() {
  static const std::vector<AttentionNormalizer> v = {
      AttentionNormalizer::kSoftmax, AttentionNormalizer::kSigmoid,
      AttentionNormalizer::kSoftpick, AttentionNormalizer::kSsmax,
      AttentionNormalizer::kStablemax, AttentionNormalizer::kSoftplus};
  return v;
}

struct Shape {
  int64_t B, H, Hkv, Lq, Lk, D, Dv;
};

std::string shape_name(const Shape& s) {
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

double sensitivity(const ref::AttentionProblem& p, int64_t row, const ref::AttentionResult& r) {
  switch (p.o.normalizer) {
    case AttentionNormalizer::kSigmoid:
      return 1.0;
    case AttentionNormalizer::kSsmax: {
      int64_t vis = 0;
      for (int64_t j = 0; j < p.Lk; ++j) vis += r.T[row * p.Lk + j] != -kInfD;
      return 2.0 * std::abs(p.o.ssmax_s * std::log(std::max<double>(vis, 1)));
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
double row_delta(const ref::AttentionProblem& p, const ref::AttentionResult& r, int64_t b,
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

// Checks a forward result against the reference with the bound above.
::testing::AssertionResult check_forward(const ref::AttentionProblem& p,
                                         const ref::AttentionResult& r,
                                         const std::vector<float>& out, const std::string& what,
                                         double* worst = nullptr) {
  CheckResult cr;
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
          const int64_t idx = row * p.Dv + c;
          check_element(cr, idx, out[idx], r.out[idx], E * W + 1e-30, false, [&] {
            return " (b=" + std::to_string(b) + " h=" + std::to_string(h) + " i=" +
                   std::to_string(i) + " c=" + std::to_string(c) + ")";
          });
        }
      }
  if (worst != nullptr) *worst = std::max(*worst, cr.worst_ratio);
  return to_assertion(cr, what);
}

std::vector<float> dense_f(const Tensor& t) { return t.dense(); }

// Runs the library forward on `pr` (out poisoned first) and checks it.
::testing::AssertionResult run_forward(Problem& pr, const AttentionOptions& o,
                                       const std::string& what, double* worst = nullptr) {
  pr.out.poison();
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  if (!pr.out.guards_intact()) return ::testing::AssertionFailure() << what << ": guards";
  const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
  const auto r = ref::attention_forward(p);
  return check_forward(p, r, dense_f(pr.out), what, worst);
}

// Elementwise comparison of a gradient tensor: |got - want| <= rel * mag + 1e-30.
::testing::AssertionResult check_grad(const std::vector<float>& got,
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

Grads run_backward(Problem& pr, const Tensor& dout, const AttentionOptions& o) {
  Grads g{Tensor({pr.s.B, pr.s.H, pr.s.Lq, pr.s.D}, {}, 2),
          Tensor({pr.s.B, pr.s.Hkv, pr.s.Lk, pr.s.D}, {}, 1),
          Tensor({pr.s.B, pr.s.Hkv, pr.s.Lk, pr.s.Dv}, {}, 3)};
  smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                           g.dq.view(), g.dk.view(), g.dv.view(), o);
  return g;
}

double g_bwd_worst = 0;
std::string g_bwd_worst_what;

// Backward bound: rel = 2e-6 + 2 (Lq + Lk + D + Dv) u + 4 max_i Delta_i, times the
// reference magnitudes.
::testing::AssertionResult check_backward_case(Problem& pr, const AttentionOptions& o, Rng& rng,
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
  const auto fr = ref::attention_forward(p);
  double dmax = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) dmax = std::max(dmax, row_delta(p, fr, b, h, i));
  const double rel =
      2e-6 + 2.0 * static_cast<double>(pr.s.Lq + pr.s.Lk + pr.s.D + pr.s.Dv) * kU + 4 * dmax;
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

// ---- hand vectors (docs/vectors.md, "Attention") ---------------------------------
// D = 2, q = (1, 0), k_j = (x_j, 0), scale 1, V = identity: out = P.
std::vector<float> hand(AttentionNormalizer n, const std::vector<float>& x, float param = NAN) {
  const int64_t L = static_cast<int64_t>(x.size());
  Tensor q({1, 1, 1, 2}), k({1, 1, L, 2}), v({1, 1, L, L}), out({1, 1, 1, L});
  q.fill([](int64_t i) { return i == 0 ? 1.0f : 0.0f; });
  k.fill([&](int64_t i) { return i % 2 == 0 ? x[static_cast<size_t>(i / 2)] : 0.0f; });
  v.fill([&](int64_t i) { return i / L == i % L ? 1.0f : 0.0f; });
  AttentionOptions o;
  o.scale = 1.0f;
  o.normalizer = n;
  if (n == AttentionNormalizer::kSsmax) o.ssmax_s = param;
  smax::attention(q.view(), k.view(), v.view(), out.view(), o);
  return out.dense();
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

TEST_P(Attention, HandVectors) {
  expect_near_all(hand(AttentionNormalizer::kSoftmax, {1, 2, 3}),
                  {0.0900306, 0.2447285, 0.6652410}, 1e-6);
  expect_near_all(hand(AttentionNormalizer::kSoftpick, {std::log(3.0f), std::log(2.0f)}),
                  {2.0 / 3, 1.0 / 3}, 2e-6);
  expect_near_all(hand(AttentionNormalizer::kSoftpick, {std::log(2.0f), 0, -std::log(2.0f)}),
                  {2.0 / 3, 0, 0}, 2e-6);
  expect_near_all(hand(AttentionNormalizer::kStablemax, {0, 1, -1}), {2.0 / 7, 4.0 / 7, 1.0 / 7},
                  1e-6);
  expect_near_all(hand(AttentionNormalizer::kSigmoid, {std::log(4.0f), 0, 0, 0}),
                  {0.5, 0.2, 0.2, 0.2}, 1e-6);
  expect_near_all(hand(AttentionNormalizer::kSsmax, {1, 0}, 1.0f), {2.0 / 3, 1.0 / 3}, 1e-6);
  expect_near_all(hand(AttentionNormalizer::kSsmax, {1, 0, 0, 0}, 1.0f),
                  {4.0 / 7, 1.0 / 7, 1.0 / 7, 1.0 / 7}, 1e-6);
  // softplus with D = 2, N = 2: lambda = ln 2 / ln 2 = 1.
  expect_near_all(hand(AttentionNormalizer::kSoftplus, {0, 0}), {0.5, 0.5}, 1e-6);
  expect_near_all(hand(AttentionNormalizer::kSoftplus, {static_cast<float>(std::log(M_E - 1)), 0}),
                  {0.5906161, 0.4093839}, 1e-6);
}

// Sigmoid's default bias under is_causal (hand vectors, D = 2, q_i = (1, 0),
// k_j = (x_j, 0), scale 1, V = identity: out = P). kPerSequence (default):
// one b = -ln Lk for every row, so row 0 (one visible key) is sigmoid(x_0 -
// ln Lk), as Ramapuram et al. 2024 pass b = -ln(sequence length);
// kPerRowVisible: row i uses b = -ln(i + 1) (row 0: b = 0). The backward
// of both modes against the float64 reference.
TEST_P(Attention, SigmoidBiasModesCausal) {
  const std::vector<float> x = {0.75f, -0.5f, 1.25f, 0.0f, -2.0f};
  const int64_t L = static_cast<int64_t>(x.size());
  Tensor q({1, 1, L, 2}), k({1, 1, L, 2}), v({1, 1, L, L}), out({1, 1, L, L});
  q.fill([](int64_t i) { return i % 2 == 0 ? 1.0f : 0.0f; });
  k.fill([&](int64_t i) { return i % 2 == 0 ? x[static_cast<size_t>(i / 2)] : 0.0f; });
  v.fill([&](int64_t i) { return i / L == i % L ? 1.0f : 0.0f; });
  auto sig = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  for (const auto mode : {smax::SigmoidBiasMode::kPerSequence, smax::SigmoidBiasMode::kPerRowVisible}) {
    const bool per_seq = mode == smax::SigmoidBiasMode::kPerSequence;
    AttentionOptions o;
    o.scale = 1.0f;
    o.is_causal = true;
    o.normalizer = AttentionNormalizer::kSigmoid;
    if (!per_seq) o.sigmoid_bias_mode = mode;
    smax::attention(q.view(), k.view(), v.view(), out.view(), o);
    const auto got = out.dense();
    for (int64_t i = 0; i < L; ++i) {
      const double b = -std::log(static_cast<double>(per_seq ? L : i + 1));
      for (int64_t j = 0; j < L; ++j) {
        const double want = j > i ? 0.0 : sig(static_cast<double>(x[static_cast<size_t>(j)]) + b);
        EXPECT_NEAR(got[static_cast<size_t>(i * L + j)], want, 2e-6 * want)
            << (per_seq ? "per-sequence" : "per-row") << " i=" << i << " j=" << j;
      }
    }
    // Random problems, Lq < Lk, Lq > Lk and a bool mask, forward and backward.
    Rng rng(per_seq ? "sigseq" : "sigrow");
    for (const Shape& sh : {Shape{1, 2, 1, 6, 9, 8, 4}, Shape{2, 2, 2, 11, 5, 8, 3}}) {
      Problem pr(sh, false);
      pr.fill(rng);
      BoolTensor bm({sh.Lq, sh.Lk});
      bm.fill([&](int64_t) -> uint8_t { return rng.bernoulli(0.8); });
      for (int masked = 0; masked < 2; ++masked) {
        AttentionOptions r = o;
        if (masked) r.attn_mask = bm.view();
        const std::string what = std::string(per_seq ? "per-sequence " : "per-row ") +
                                 shape_name(sh) + (masked ? " masked" : "");
        EXPECT_TRUE(run_forward(pr, r, what));
        EXPECT_TRUE(check_backward_case(pr, r, rng, what));
      }
    }
  }
}

// ---- forward vs reference -----------------------------------------------------------
TEST_P(Attention, ForwardShapesEveryNormalizer) {
  const std::vector<Shape> shapes = {
      {1, 1, 1, 1, 1, 1, 1},    {2, 4, 2, 7, 9, 8, 8},     {1, 2, 1, 33, 31, 64, 64},
      {1, 1, 1, 3, 100, 100, 7}, {1, 2, 2, 65, 130, 128, 16}, {1, 1, 1, 2, 1001, 8, 3},
      {1, 1, 1, 0, 5, 4, 4},    {1, 1, 1, 3, 0, 4, 4},     {1, 2, 1, 4, 3, 0, 2}};
  Rng rng("fwd");
  double worst = 0;
  for (const auto n : all_normalizers()) {
    for (const Shape& sh : shapes) {
      if (n == AttentionNormalizer::kSoftplus && sh.D < 2) continue;
      for (int causal = 0; causal < 2; ++causal) {
        Problem pr(sh, false);
        pr.fill(rng);
        AttentionOptions o;
        o.normalizer = n;
        o.is_causal = causal != 0;
        EXPECT_TRUE(run_forward(pr, o,
                                std::string(smax::attention_normalizer_name(n)) + " " +
                                    shape_name(sh) + (causal ? " causal" : ""),
                                &worst));
      }
    }
  }
  RecordProperty("worst_ratio", std::to_string(worst));
  std::printf("forward worst err/bound = %.3g\n", worst);
}

TEST_P(Attention, ForwardLongSoftmaxAndStrided) {
  Rng rng("long");
  double worst = 0;
  // Long key rows, odd block tails, transposed [B, L, H, D] storage, GQA.
  for (const Shape& sh : {Shape{1, 2, 1, 17, 2051, 64, 64}, Shape{2, 4, 2, 70, 129, 32, 40}}) {
    for (bool tr : {false, true}) {
      for (int causal = 0; causal < 2; ++causal) {
        Problem pr(sh, tr);
        pr.fill(rng, 2.0f);
        AttentionOptions o;
        o.is_causal = causal != 0;
        EXPECT_TRUE(run_forward(pr, o, shape_name(sh) + (tr ? " transposed" : "") +
                                           (causal ? " causal" : ""), &worst));
      }
    }
  }
  std::printf("long/strided worst err/bound = %.3g\n", worst);
}

TEST_P(Attention, CausalLqNotLk) {
  Rng rng("causal");
  for (const auto n : all_normalizers()) {
    for (const Shape& sh : {Shape{1, 2, 2, 5, 20, 8, 8}, Shape{1, 2, 2, 20, 5, 8, 8},
                            Shape{1, 1, 1, 130, 70, 4, 4}}) {
      Problem pr(sh, false);
      pr.fill(rng);
      AttentionOptions o;
      o.normalizer = n;
      o.is_causal = true;
      EXPECT_TRUE(run_forward(pr, o, std::string(smax::attention_normalizer_name(n)) + " " +
                                         shape_name(sh)));
    }
  }
}

TEST_P(Attention, MasksBroadcastAndEmptyRows) {
  Rng rng("masks");
  const Shape sh{2, 2, 1, 6, 11, 8, 5};
  for (const auto n : all_normalizers()) {
    for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
      // bool [Lq, Lk] with row 2 fully masked.
      BoolTensor bm({6, 11});
      bm.fill([&](int64_t i) -> uint8_t { return i / 11 == 2 ? 0 : rng.bernoulli(0.7); });
      // f32 [B, 1, 1, Lk] with -inf entries (strided: every other element).
      Tensor fm({2, 1, 1, 11}, {44, 44, 44, 2});
      fm.fill([&](int64_t) { return rng.bernoulli(0.2) ? -kInfF : rng.normal(); });
      // f32 [H, Lq, Lk] where row (h=1, i=4) is all -inf.
      Tensor fm3({2, 6, 11});
      fm3.fill([&](int64_t i) { return i / 11 == 6 + 4 ? -kInfF : rng.uniform(-1, 1); });
      int which = 0;
      for (const TensorView& mv : {bm.view(), fm.view(), fm3.view()}) {
        Problem pr(sh, which == 2);
        pr.fill(rng);
        AttentionOptions o;
        o.normalizer = n;
        o.empty_row = er;
        o.attn_mask = mv;
        o.is_causal = which == 1;
        EXPECT_TRUE(run_forward(pr, o, std::string(smax::attention_normalizer_name(n)) +
                                           " mask " + std::to_string(which) +
                                           (er == EmptyRow::kNan ? " nan" : " zero")));
        // Fully masked rows: exactly 0 or NaN.
        if (which == 0) {
          const auto out = pr.out.dense();
          for (int64_t b = 0; b < 2; ++b)
            for (int64_t h = 0; h < 2; ++h)
              for (int64_t c = 0; c < 5; ++c) {
                const float x = out[static_cast<size_t>(((b * 2 + h) * 6 + 2) * 5 + c)];
                if (er == EmptyRow::kZero) {
                  EXPECT_EQ(x, 0.0f);
                } else {
                  EXPECT_TRUE(std::isnan(x));
                }
              }
        }
        ++which;
      }
    }
  }
}

TEST_P(Attention, SpecialValues) {
  Rng rng("special");
  const Shape sh{1, 1, 1, 4, 37, 8, 4};
  for (const auto n : all_normalizers()) {
    // Huge scores (naive exp overflows), a NaN in one query, a +inf key entry.
    Problem pr(sh, false);
    pr.fill(rng, 60.0f);
    AttentionOptions o;
    o.normalizer = n;
    o.scale = 1.0f;
    EXPECT_TRUE(run_forward(pr, o, std::string(smax::attention_normalizer_name(n)) + " huge"));
    Problem pn(sh, false);
    pn.fill(rng);
    pn.q.at(1 * 8 + 3) = kNanF;  // query row 1 -> NaN row
    pn.k.at(5 * 8 + 0) = kInfF;  // key 5: inf * q -> +-inf / NaN scores
    EXPECT_TRUE(run_forward(pn, o, std::string(smax::attention_normalizer_name(n)) + " nan/inf"));
    const auto out = pn.out.dense();
    for (int c = 0; c < 4; ++c) EXPECT_TRUE(std::isnan(out[static_cast<size_t>(4 + c)]));
  }
}

TEST_P(Attention, SoftcapSinksAlibiLse) {
  Rng rng("extras");
  const Shape sh{2, 4, 2, 19, 45, 16, 8};
  for (int variant = 0; variant < 6; ++variant) {
    Problem pr(sh, variant % 2 == 1);
    pr.fill(rng, 3.0f);
    Tensor sinks({4});
    sinks.fill([&](int64_t i) { return i == 3 ? -kInfF : rng.normal(); });
    Tensor slopes({2, 4});
    slopes.fill([&](int64_t i) { return 0.05f * static_cast<float>(i + 1); });
    Tensor lse({2, 4, 19});
    AttentionOptions o;
    o.softcap = variant >= 2 ? 5.0f : 0.0f;
    if (variant != 2) o.sinks = sinks.view();
    if (variant >= 3) o.alibi_slopes = slopes.view();
    o.is_causal = variant >= 4;
    if (variant == 5) {
      o.normalizer = AttentionNormalizer::kSoftpick;
      o.sinks.reset();
    } else {
      o.lse = lse.view();
    }
    lse.poison();
    EXPECT_TRUE(run_forward(pr, o, "variant " + std::to_string(variant)));
    if (variant == 5) continue;
    EXPECT_TRUE(lse.guards_intact());
    const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
    const auto r = ref::attention_forward(p);
    const auto got = lse.dense();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], r.lse[i], 1e-5 * (1 + std::abs(r.lse[i]))) << i;
    }
  }
}

// The softcap chain-rule factor f = 1 - tanh(x s / cap)^2 (Highway's Tanh in
// f32) has an absolute error <= 8 u (measured: 3 u); the backward bound's
// magnitudes add 1/4 > 8 u / 2e-6 to f (src/reference/attention.cc).
TEST_P(Attention, SoftcapFactorAbsoluteError) {
  const int64_t n = 20001;
  std::vector<float> s(n), dt(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) s[i] = -20.0f + 40.0f * static_cast<float>(i) / (n - 1);
  for (float cap : {0.7f, 2.0f, 30.0f}) {
    std::fill(dt.begin(), dt.end(), 1.0f);
    smax::kernels::attention_softcap_grad_row(s.data(), dt.data(), n, 0.37f, cap);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(static_cast<float>(s[i] * 0.37f)) / cap;
      const double th = std::tanh(x);
      worst = std::max(worst, std::abs(dt[i] - (1 - th) * (1 + th)) / kU);
    }
    EXPECT_LE(worst, 8.0) << "cap " << cap;
    std::printf("softcap factor: worst abs error %.1f u (cap %g)\n", worst, cap);
  }
}

// ---- threads --------------------------------------------------------------------
TEST_P(Attention, ThreadCountsBitwise) {
  Rng rng("threads");
  const Shape sh{2, 4, 2, 150, 77, 16, 12};
  for (const auto n : {AttentionNormalizer::kSoftmax, AttentionNormalizer::kSoftpick}) {
    Problem pr(sh, false);
    pr.fill(rng);
    Tensor dout({2, 4, 150, 12});
    dout.fill([&](int64_t) { return rng.normal(); });
    std::vector<float> o1, q1, k1, v1;
    for (int th : {1, 2, 3}) {
      AttentionOptions o;
      o.normalizer = n;
      o.is_causal = true;
      o.threads = th;
      smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
      Grads g = run_backward(pr, dout, o);
      if (th == 1) {
        o1 = pr.out.dense();
        q1 = g.dq.dense();
        k1 = g.dk.dense();
        v1 = g.dv.dense();
      } else {
        EXPECT_EQ(0, std::memcmp(o1.data(), pr.out.dense().data(), o1.size() * 4)) << th;
        EXPECT_EQ(0, std::memcmp(q1.data(), g.dq.dense().data(), q1.size() * 4)) << th;
        EXPECT_EQ(0, std::memcmp(k1.data(), g.dk.dense().data(), k1.size() * 4)) << th;
        EXPECT_EQ(0, std::memcmp(v1.data(), g.dv.dense().data(), v1.size() * 4)) << th;
      }
    }
  }
}

// ---- backward ---------------------------------------------------------------------
TEST_P(Attention, BackwardEveryNormalizer) {
  Rng rng("bwd");
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 2, 1}, {2, 4, 2, 9, 13, 8, 6},
                                     {1, 2, 1, 70, 33, 64, 32}, {1, 1, 1, 5, 300, 100, 8}};
  for (const auto n : all_normalizers()) {
    for (const Shape& sh : shapes) {
      for (int variant = 0; variant < 3; ++variant) {
        Problem pr(sh, variant == 2);
        pr.fill(rng);
        AttentionOptions o;
        o.normalizer = n;
        o.is_causal = variant >= 1;
        if (variant == 2) o.softcap = 2.0f;
        EXPECT_TRUE(check_backward_case(pr, o, rng,
                                        std::string(smax::attention_normalizer_name(n)) + " " +
                                            shape_name(sh) + " v" + std::to_string(variant)));
      }
    }
  }
  std::printf("backward worst err/bound = %.3g (%s)\n", g_bwd_worst, g_bwd_worst_what.c_str());
}

TEST_P(Attention, BackwardMasksSinksAlibi) {
  Rng rng("bwd2");
  const Shape sh{2, 4, 2, 12, 21, 8, 8};
  BoolTensor bm({12, 21});
  bm.fill([&](int64_t i) -> uint8_t { return i / 21 == 3 ? 0 : rng.bernoulli(0.7); });
  Tensor sinks({4});
  sinks.fill([&](int64_t) { return rng.normal(); });
  Tensor slopes({4});
  slopes.fill([&](int64_t i) { return 0.1f * static_cast<float>(i + 1); });
  for (const auto n : all_normalizers()) {
    for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
      for (bool with_sink : {false, true}) {
        if (with_sink && n != AttentionNormalizer::kSoftmax) continue;
        Problem pr(sh, true);
        pr.fill(rng);
        AttentionOptions o;
        o.normalizer = n;
        o.attn_mask = bm.view();
        o.alibi_slopes = slopes.view();
        o.empty_row = er;
        if (with_sink) o.sinks = sinks.view();
        EXPECT_TRUE(check_backward_case(
            pr, o, rng,
            std::string(smax::attention_normalizer_name(n)) +
                (er == EmptyRow::kNan ? " nan" : " zero") + (with_sink ? " sink" : "")));
      }
    }
  }
}

// The reference VJP against float64 central differences of the reference forward.
// Regression (fuzz_attention): non-finite k / q entries whose scores are all
// masked gave NaN gradients (0 * inf in the dQ = dS K and dK = dS^T Q SGEMMs,
// and 0 * NaN in the softcap factor), although the forward ignores them and
// masked entries contribute exactly 0. Keys 3 and 4 are causally masked for
// every query row (Lq = 3) and hold inf / NaN; query row 0 of head 0 is fully
// masked by the bool mask and holds inf.
TEST_P(Attention, BackwardNonFiniteUnderMask) {
  Rng rng("nonfinite-under-mask");
  for (AttentionNormalizer n : all_normalizers()) {
    for (float cap : {0.0f, 2.0f}) {
      Problem pr({1, 2, 1, 3, 5, 4, 3}, false);
      pr.fill(rng);
      for (int64_t c = 0; c < 4; ++c) {
        pr.k.at(4 * 4 + c) = c % 2 == 0 ? kInfF : -kInfF;  // k[0, 0, 4, c]
        pr.k.at(3 * 4 + c) = c == 1 ? kNanF : 1.0f;         // k[0, 0, 3, c]
        pr.q.at(c) = kInfF;                                 // q[0, 0, 0, c]
      }
      Array<uint8_t> keep({2, 3, 5});
      keep.fill([](int64_t i) { return static_cast<uint8_t>(i < 5 ? 0 : 1); });
      AttentionOptions o;
      o.normalizer = n;
      o.is_causal = true;
      o.softcap = cap;
      o.attn_mask = keep.view();
      const std::string what = std::string(smax::attention_normalizer_name(n)) +
                               (cap > 0 ? " softcap" : "");
      EXPECT_TRUE(run_forward(pr, o, what + " forward"));
      for (float x : pr.out.dense()) EXPECT_TRUE(std::isfinite(x)) << what;
      EXPECT_TRUE(check_backward_case(pr, o, rng, what + " backward"));
    }
  }
}

// Regressions (fuzz_attention): NaN rows (a NaN query; an empty row with
// kNan) must give NaN in their dq and in dk / dv of every key of their kv
// head. With scale = 0 the dQ / dK SGEMMs (alpha = 0) skipped the product
// (dq = 0), with causal the keys past the query block's causal end
// (Lq = 3 < Lk = 4: key 3) kept dk = dv = 0, and the softcap factor must keep
// a NaN dT NaN.
TEST_P(Attention, BackwardNaNRowsScaleZeroAndCausal) {
  Rng rng("nan-rows");
  for (AttentionNormalizer n : all_normalizers()) {
    for (float scale : {0.0f, 0.5f}) {
      for (bool causal : {false, true}) {
       for (float cap : {0.0f, 3.0f}) {
        Problem pr({1, 2, 1, 3, 4, 4, 3}, false);
        pr.fill(rng);
        pr.q.at(1 * 4 + 2) = kNanF;  // q[0, 0, 1, 2]: row 1 of head 0 is NaN
        Array<uint8_t> keep({2, 3, 1});
        keep.fill([](int64_t i) { return static_cast<uint8_t>(i == 3 ? 0 : 1); });  // h 1, row 0
        AttentionOptions o;
        o.normalizer = n;
        o.scale = scale;
        o.is_causal = causal;
        o.attn_mask = keep.view();
        o.empty_row = smax::EmptyRow::kNan;
        o.softcap = cap;
        const std::string what = std::string(smax::attention_normalizer_name(n)) + " scale " +
                                 std::to_string(scale) + (causal ? " causal" : "") +
                                 (cap > 0 ? " softcap" : "");
        EXPECT_TRUE(check_backward_case(pr, o, rng, what));
        Tensor dout({1, 2, 3, 3});
        dout.fill([&](int64_t) { return rng.normal(); });
        const Grads g = run_backward(pr, dout, o);
        const auto dq = g.dq.dense();
        const auto dk = g.dk.dense();
        const auto dv = g.dv.dense();
        for (int64_t c = 0; c < 4; ++c) {
          EXPECT_TRUE(std::isnan(dq[static_cast<size_t>(1 * 4 + c)])) << what << " NaN row";
          EXPECT_TRUE(std::isnan(dq[static_cast<size_t>(3 * 4 + c)])) << what << " empty row";
          EXPECT_FALSE(std::isnan(dq[static_cast<size_t>(0 * 4 + c)])) << what;
          EXPECT_TRUE(std::isnan(dk[static_cast<size_t>(3 * 4 + c)])) << what << " dk key 3";
        }
        for (int64_t c = 0; c < 3; ++c) {
          EXPECT_TRUE(std::isnan(dv[static_cast<size_t>(3 * 3 + c)])) << what << " dv key 3";
        }
       }
      }
    }
  }
}

// Regression (fuzz_attention): softpick with eps = 0 and every visible score
// 0 (here q = 0) has S = 0: smax::softpick gives exactly 0 (a row whose
// visible entries are all <= 0) and 0 gradient; the float64 oracle gave
// 0 / 0 = NaN.
TEST_P(Attention, SoftpickEpsZeroZeroScores) {
  Rng rng("softpick-eps0");
  Problem pr({1, 2, 1, 3, 5, 4, 3}, false);
  pr.fill(rng);
  pr.q.fill([](int64_t) { return 0.0f; });
  AttentionOptions o;
  o.normalizer = AttentionNormalizer::kSoftpick;
  o.softpick_eps = 0.0f;
  EXPECT_TRUE(run_forward(pr, o, "softpick eps 0"));
  for (float x : pr.out.dense()) EXPECT_EQ(x, 0.0f);
  EXPECT_TRUE(check_backward_case(pr, o, rng, "softpick eps 0 backward"));
}

// Regression (fuzz_attention): Lk = 0 with kNan: every row is empty, so out
// and dq are NaN (the oracle's backward gave dq = 0 while its forward gave
// NaN); kZero: 0.
TEST_P(Attention, NoKeysEmptyRowPolicy) {
  Rng rng("no-keys");
  for (AttentionNormalizer n : all_normalizers()) {
    for (smax::EmptyRow e : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
      Problem pr({1, 2, 1, 3, 0, 4, 3}, false);
      pr.fill(rng);
      AttentionOptions o;
      o.normalizer = n;
      o.empty_row = e;
      const std::string what = std::string(smax::attention_normalizer_name(n)) +
                               (e == smax::EmptyRow::kNan ? " nan" : " zero");
      EXPECT_TRUE(run_forward(pr, o, what + " forward"));
      EXPECT_TRUE(check_backward_case(pr, o, rng, what + " backward"));
      Tensor dout({1, 2, 3, 3});
      dout.fill([&](int64_t) { return rng.normal(); });
      for (float x : run_backward(pr, dout, o).dq.dense()) {
        if (e == smax::EmptyRow::kNan) {
          EXPECT_TRUE(std::isnan(x)) << what;
        } else {
          EXPECT_EQ(x, 0.0f) << what;
        }
      }
    }
  }
}

// Regression (fuzz/regressions/attention/sinks_lk0_softcap_nan_out): Lk = 0
// with sinks: out is the empty sum P[:, :0] V = 0 whatever the sink (a NaN
// sink gave NaN), lse the sink's (NaN / empty policy for -inf / the sink).
TEST_P(Attention, NoKeysWithSinks) {
  Rng rng("no-keys-sinks");
  for (smax::EmptyRow e : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    Problem pr({1, 3, 1, 2, 0, 4, 3}, false);
    pr.fill(rng);
    Tensor sinks({3});
    const float sv[3] = {kNanF, -kInfF, 1.5f};
    sinks.fill([&](int64_t i) { return sv[i]; });
    Tensor lse({1, 3, 2});
    AttentionOptions o;
    o.empty_row = e;
    o.sinks = sinks.view();
    o.softcap = 0.5f;
    o.lse = lse.view();
    const std::string what = e == smax::EmptyRow::kNan ? "nan" : "zero";
    EXPECT_TRUE(run_forward(pr, o, what + " forward"));
    for (float x : pr.out.dense()) EXPECT_EQ(x, 0.0f) << what;
    const std::vector<float> l = lse.dense();
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(std::isnan(l[static_cast<size_t>(i)])) << what;
      if (e == smax::EmptyRow::kNan) {
        EXPECT_TRUE(std::isnan(l[static_cast<size_t>(2 + i)])) << what;
      } else {
        EXPECT_EQ(l[static_cast<size_t>(2 + i)], -kInfF) << what;
      }
      EXPECT_EQ(l[static_cast<size_t>(4 + i)], 1.5f) << what;
    }
    o.lse.reset();
    EXPECT_TRUE(check_backward_case(pr, o, rng, what + " backward"));
  }
}

// Regression (fuzz_attention): a NaN row whose other keys are masked (a
// float mask of -inf plus a NaN key: NaN + -inf = NaN) must give NaN dk at
// every key of its kv head for every normaliser; ssmax's row VJP kept 0 at
// the masked entries.
TEST_P(Attention, BackwardNaNRowMaskedKeysEveryNormalizer) {
  Rng rng("nan-row-masked");
  for (AttentionNormalizer n : all_normalizers()) {
    Problem pr({1, 1, 1, 2, 3, 2, 2}, false);
    pr.fill(rng);
    pr.k.at(1 * 2 + 0) = kNanF;  // key 1
    Tensor add({1});
    add.fill([](int64_t) { return -kInfF; });
    AttentionOptions o;
    o.normalizer = n;
    o.attn_mask = add.view();
    const std::string what = smax::attention_normalizer_name(n);
    EXPECT_TRUE(check_backward_case(pr, o, rng, what));
    Tensor dout({1, 1, 2, 2});
    dout.fill([&](int64_t) { return rng.normal(); });
    for (float x : run_backward(pr, dout, o).dk.dense()) EXPECT_TRUE(std::isnan(x)) << what;
  }
}

TEST(AttentionReference, FiniteDifferences) {
  Rng rng("fd");
  for (const auto n : all_normalizers()) {
    Problem pr({1, 2, 1, 4, 6, 3, 2}, false);
    pr.fill(rng);
    Tensor sinks({2});
    sinks.fill([&](int64_t) { return rng.normal(); });
    Tensor slopes({2});
    slopes.fill([&](int64_t) { return 0.3f; });
    AttentionOptions o;
    o.normalizer = n;
    o.is_causal = true;
    o.softcap = 1.5f;
    o.alibi_slopes = slopes.view();
    if (n == AttentionNormalizer::kSoftmax) o.sinks = sinks.view();
    auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
    std::vector<double> dout(static_cast<size_t>(2 * 4 * 2));
    for (double& x : dout) x = rng.normal();
    const auto g = ref::attention_backward(p, dout);
    auto loss = [&](const ref::AttentionProblem& pp) {
      const auto r = ref::attention_forward(pp);
      double l = 0;
      for (size_t i = 0; i < dout.size(); ++i) l += r.out[i] * dout[i];
      return l;
    };
    const double h = 1e-6;
    auto fd = [&](std::vector<double> ref::AttentionProblem::*field, const std::vector<double>& an,
                  const char* name) {
      for (size_t i = 0; i < an.size(); ++i) {
        auto pp = p, pm = p;
        (pp.*field)[i] += h;
        (pm.*field)[i] -= h;
        const double num = (loss(pp) - loss(pm)) / (2 * h);
        EXPECT_NEAR(an[i], num, 1e-6 * (1 + std::abs(num)))
            << smax::attention_normalizer_name(n) << " " << name << "[" << i << "]";
      }
    };
    fd(&ref::AttentionProblem::q, g.dq, "dq");
    fd(&ref::AttentionProblem::k, g.dk, "dk");
    fd(&ref::AttentionProblem::v, g.dv, "dv");
  }
}

// ---- errors ---------------------------------------------------------------------
TEST_P(Attention, ErrorsLeaveOutputsUntouched) {
  Rng rng("errors");
  Problem pr({1, 4, 2, 3, 5, 8, 6}, false);
  pr.fill(rng);
  pr.out.poison();
  const auto before = pr.out.storage();
  auto untouched = [&] { return pr.out.storage() == before; };
  auto call = [&](const AttentionOptions& o) {
    smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  };
  AttentionOptions o;
  {
    AttentionOptions b = o;
    b.scale = kInfF;
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "scale"));
  }
  {
    AttentionOptions b = o;
    b.softcap = -1.0f;
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "softcap"));
  }
  {
    Tensor sinks({4});
    AttentionOptions b = o;
    b.sinks = sinks.view();
    b.normalizer = AttentionNormalizer::kSigmoid;
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "sinks"));
    Tensor s3({3});
    b.normalizer = AttentionNormalizer::kSoftmax;
    b.sinks = s3.view();
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "sinks"));
  }
  {
    Tensor m({3, 4});
    AttentionOptions b = o;
    b.attn_mask = m.view();
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "attn_mask"));
    Array<int64_t> mi({3, 5});
    b.attn_mask = mi.view();
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "attn_mask"));
  }
  {
    Tensor lse({1, 4, 3});
    AttentionOptions b = o;
    b.lse = lse.view();
    b.normalizer = AttentionNormalizer::kSoftpick;
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "lse"));
    Tensor lse2({1, 4, 2});
    b.normalizer = AttentionNormalizer::kSoftmax;
    b.lse = lse2.view();
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "lse"));
  }
  {
    AttentionOptions b = o;
    b.threads = -1;
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "threads"));
    b = o;
    b.softpick_eps = -1.0f;
    b.normalizer = AttentionNormalizer::kSoftpick;
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "softpick_eps"));
    b = o;
    b.normalizer = static_cast<AttentionNormalizer>(17);
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "normalizer"));
    b = o;
    b.normalizer = AttentionNormalizer::kSigmoid;
    b.sigmoid_bias_mode = static_cast<smax::SigmoidBiasMode>(0);
    EXPECT_TRUE(throws_invalid([&] { call(b); }, "sigmoid_bias_mode"));
  }
  // Shapes.
  Tensor k3({1, 3, 5, 8}), kd({1, 2, 5, 7}), vL({1, 2, 4, 6}), o3({1, 4, 3, 5}), q3({4, 3, 8});
  EXPECT_TRUE(throws_invalid([&] { smax::attention(pr.q.view(), k3.view(), pr.v.view(), pr.out.view()); }, "Hkv"));
  EXPECT_TRUE(throws_invalid([&] { smax::attention(pr.q.view(), kd.view(), pr.v.view(), pr.out.view()); }, "head dim"));
  EXPECT_TRUE(throws_invalid([&] { smax::attention(pr.q.view(), pr.k.view(), vL.view(), pr.out.view()); }, "v"));
  EXPECT_TRUE(throws_invalid([&] { smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), o3.view()); }, "out"));
  EXPECT_TRUE(throws_invalid([&] { smax::attention(q3.view(), pr.k.view(), pr.v.view(), pr.out.view()); }, "q"));
  // Output aliasing an input.
  {
    Problem pa({1, 1, 1, 4, 4, 4, 4}, false);
    pa.fill(rng);
    EXPECT_TRUE(throws_invalid([&] { smax::attention(pa.q.view(), pa.k.view(), pa.v.view(), pa.q.view()); }, "out"));
  }
  EXPECT_TRUE(untouched());
  // Backward errors: dq wrong shape, dk aliasing dv.
  Tensor dout({1, 4, 3, 6});
  Grads g{Tensor({1, 4, 3, 8}), Tensor({1, 2, 5, 8}), Tensor({1, 2, 5, 6})};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  const auto dq0 = g.dq.storage(), dk0 = g.dk.storage(), dv0 = g.dv.storage();
  Tensor bad_dq({1, 4, 3, 7});
  EXPECT_TRUE(throws_invalid([&] {
    smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                             bad_dq.view(), g.dk.view(), g.dv.view());
  }, "dq"));
  EXPECT_TRUE(throws_invalid([&] {
    smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                             g.dq.view(), g.dk.view(), pr.v.view());
  }, "dv"));
  EXPECT_TRUE(throws_invalid([&] {
    smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                             g.dq.view(), g.dk.view(), g.dk.view());
  }, "dv"));
  EXPECT_EQ(g.dq.storage(), dq0);
  EXPECT_EQ(g.dk.storage(), dk0);
  EXPECT_EQ(g.dv.storage(), dv0);
}

SMAX_INSTANTIATE_PER_TARGET(Attention);

}  // namespace
}  // namespace smax_test

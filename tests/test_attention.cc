// tests/test_attention.cc: attention on every SIMD target, forward: hand vectors
// (docs/vectors.md), every normalizer vs the float64 oracle, shapes, strides,
// causal, masks, special values, softcap, sinks, ALiBi, thread counts.
// Helpers, bounds and the fixture: tests/attention_util.h.
#include "attention_util.h"

namespace smax_test {
namespace {

// ---- hand vectors (docs/attention.md, "Hand vectors") ----------------------------
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
  if (n == AttentionNormalizer::kPower) o.power_p = static_cast<int>(param);
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
  // Power-Softmax: t^p / sum t^p, negative logits weigh by |t|; all zero: uniform.
  expect_near_all(hand(AttentionNormalizer::kPower, {1, -2}, 2.0f), {0.2, 0.8}, 1e-6);
  expect_near_all(hand(AttentionNormalizer::kPower, {1, -2, 0.5f}, 4.0f),
                  {16.0 / 273, 256.0 / 273, 1.0 / 273}, 1e-6);
  expect_near_all(hand(AttentionNormalizer::kPower, {0, 0, 0}, 2.0f), {1.0 / 3, 1.0 / 3, 1.0 / 3},
                  1e-6);
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

SMAX_INSTANTIATE_PER_TARGET(Attention);

}  // namespace
}  // namespace smax_test

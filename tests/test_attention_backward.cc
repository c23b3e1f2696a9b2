// tests/test_attention_backward.cc: attention backward on every SIMD target, rows
// without keys, float64 finite differences of the oracle, every error path.
// Helpers, bounds and the fixture: tests/attention_util.h.
#include "attention_util.h"

namespace smax_test {
namespace {

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

// The softmax backward from the forward's lse (every case of
// check_backward_case runs it too): the same bits for any thread count; a
// task with a non-finite k entry falls back to the full-row backward bit
// for bit (only that task: the other batch's task still runs from lse); a
// gate (delta from ungated_out, dO gated) within the bound.
TEST_P(Attention, BackwardFromLse) {
  Rng rng(421);
  const Shape s{2, 4, 2, 130, 260, 24, 16};  // 3 query tiles, 3 key tiles per head
  Problem pr(s, false);
  pr.fill(rng);
  Tensor lse({s.B, s.H, s.Lq}), dout({s.B, s.H, s.Lq, s.Dv});
  dout.fill([&](int64_t) { return rng.normal(); });
  AttentionOptions o;
  o.is_causal = true;
  o.lse = lse.view();
  o.backward_from_lse = true;
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  std::vector<std::vector<float>> first;
  for (int threads : {1, 2, 3}) {
    o.threads = threads;
    const Grads g = run_backward(pr, dout, o);
    const std::vector<std::vector<float>> got = {g.dq.dense(), g.dk.dense(), g.dv.dense()};
    if (first.empty()) first = got;
    for (size_t t = 0; t < got.size(); ++t) {
      EXPECT_EQ(0, std::memcmp(first[t].data(), got[t].data(), got[t].size() * sizeof(float)))
          << "threads " << threads << " output " << t;
    }
  }
  // A NaN in k of batch 1, kv head 0, visible: that task (b = 1, hk = 0)
  // falls back (the same bits as without lse); the task (0, 0) does not
  // (its gradients differ from the full-row ones in the last bits).
  pr.k.at(((1 * s.Hkv + 0) * s.Lk + 3) * s.D + 2) = NAN;
  AttentionOptions plain = o;
  plain.lse.reset();
  EXPECT_THROW(run_backward(pr, dout, plain), smax::Error);  // backward_from_lse without lse
  plain.backward_from_lse = false;
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  const Grads from_lse = run_backward(pr, dout, o), full_row = run_backward(pr, dout, plain);
  const auto a = from_lse.dk.dense(), b = full_row.dk.dense();
  const size_t task = static_cast<size_t>(s.Lk * s.D), nan_task = 2 * task;  // (1, 0)
  EXPECT_EQ(0, std::memcmp(a.data() + nan_task, b.data() + nan_task, task * sizeof(float)));
  EXPECT_NE(0, std::memcmp(a.data(), b.data(), task * sizeof(float)));
  // A NaN key that a bool mask hides from every row: lse stays finite, but
  // the task must still fall back (the masked products are skipped there,
  // where the tiles' dQ += dT K would take 0 * NaN): finite dq, the
  // full-row bits.
  {
    Problem pm(s, false);
    pm.fill(rng);
    pm.k.at(((0 * s.Hkv + 1) * s.Lk + 200) * s.D + 5) = NAN;  // (b 0, hk 1, key 200)
    Array<uint8_t> keep({s.B, s.H, s.Lq, s.Lk});
    keep.fill([&](int64_t e) { return static_cast<uint8_t>(e % s.Lk != 200); });
    AttentionOptions om = o;
    om.threads = 1;
    om.attn_mask = keep.view();
    smax::attention(pm.q.view(), pm.k.view(), pm.v.view(), pm.out.view(), om);
    AttentionOptions fm = om;
    fm.lse.reset();
    fm.backward_from_lse = false;
    const Grads gl = run_backward(pm, dout, om), gf = run_backward(pm, dout, fm);
    for (float x : gl.dq.dense()) ASSERT_TRUE(std::isfinite(x));
    const auto ql = gl.dq.dense(), qf = gf.dq.dense();
    const size_t head_rows = static_cast<size_t>(s.Lq * s.D);  // (b 0, hk 1): heads 2, 3
    EXPECT_EQ(0, std::memcmp(ql.data() + 2 * head_rows, qf.data() + 2 * head_rows,
                             2 * head_rows * sizeof(float)));
  }
  // A gate: delta = <dO s, ungated_out>.
  Problem pg(s, false);
  pg.fill(rng);
  Tensor gate({s.B, s.H, s.Lq, s.Dv}), ungated({s.B, s.H, s.Lq, s.Dv});
  gate.fill([&](int64_t) { return rng.normal() * 2.0f; });
  AttentionOptions og;
  og.gate = gate.view();
  og.ungated_out = ungated.view();
  og.lse = lse.view();
  og.backward_from_lse = true;
  smax::attention(pg.q.view(), pg.k.view(), pg.v.view(), pg.out.view(), og);
  const Grads gg = run_backward(pg, dout, og);
  const auto p = ref::attention_problem(pg.q.view(), pg.k.view(), pg.v.view(), og);
  const auto want = ref::attention_backward(p, to_dense(dout.view()));
  const double rel =
      backward_rel(p, ref::attention_forward(p), 2 + ref::attention_backward_lse_extra(p));
  EXPECT_TRUE(check_grad(gg.dq.dense(), want.dq, want.dq_mag, rel, "gated dq from lse"));
  EXPECT_TRUE(check_grad(gg.dk.dense(), want.dk, want.dk_mag, rel, "gated dk from lse"));
  EXPECT_TRUE(check_grad(gg.dv.dense(), want.dv, want.dv_mag, rel, "gated dv from lse"));
}

// Softplus with logits so negative that softplus(lambda t) underflows to 0
// in float64 (lambda t < -745): the oracle's sigmoid(z) / softplus(z) was
// 0 / 0 there (found by the attention fuzz harness); the ratio's limit is 1
// and the weight is 0, so those keys get exactly no gradient.
TEST_P(Attention, BackwardSoftplusUnderflowingLogits) {
  Rng rng("softplus_underflow");
  const std::vector<float> x = {1.0f, -2000.0f, 0.5f, -1500.0f, 0.25f};
  const int64_t L = static_cast<int64_t>(x.size());
  Problem pr({1, 1, 1, 2, L, 4, 3}, false);
  pr.q.fill([](int64_t i) { return i % 4 == 0 ? 1.0f : 0.0f; });
  pr.k.fill([&](int64_t i) { return i % 4 == 0 ? x[static_cast<size_t>(i / 4)] : 0.0f; });
  pr.v.fill([&](int64_t) { return rng.normal(); });
  AttentionOptions o;
  o.normalizer = AttentionNormalizer::kSoftplus;
  o.scale = 1.0f;
  EXPECT_TRUE(check_backward_case(pr, o, rng, "softplus, logits -2000 and -1500"));
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

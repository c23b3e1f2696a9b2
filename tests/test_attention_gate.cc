// tests/test_attention_gate.cc: gated attention (AttentionOptions::gate,
// ungated_out, dgate; out = sigmoid(gate) * attention) on every SIMD target
// against the float64 oracle (src/reference/attention.h): element-wise and
// head-wise gates, the prefill and decode drivers, every normaliser, the
// backward through the gate (dq, dk, dv, dgate), special values and errors.
// Helpers, bounds and the fixture: tests/attention_util.h.
#include "attention_util.h"

namespace smax_test {
namespace {

class AttentionGate : public TargetTest {};

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// The gated output is fl(a * s), s = sigmoid(g) in f32 (3 ulp), a the ungated
// f32 result: within 4 u |a s| of a * sigmoid(g) (and the ungated output
// within its bound).
::testing::AssertionResult check_gated(const ref::AttentionProblem& p,
                                       const ref::AttentionResult& r, const Tensor& out,
                                       const Tensor& ungated, const std::string& what) {
  // The ungated output against the ungated bound.
  ref::AttentionResult ru = r;
  ru.out = r.ungated;
  auto a = check_forward(p, ru, ungated.dense(), what + " (ungated_out)");
  if (!a) return a;
  const auto got = out.dense(), ug = ungated.dense();
  for (size_t e = 0; e < got.size(); ++e) {
    const double want = static_cast<double>(ug[e]) * sigmoid(p.gate[e]);
    if (std::isnan(want) ? !std::isnan(got[e])
                         : !(std::abs(got[e] - want) <= 4 * kU * std::abs(want) + 1e-38)) {
      return ::testing::AssertionFailure() << what << ": element " << e << " is " << got[e]
                                           << ", a sigmoid(g) = " << want;
    }
  }
  return ::testing::AssertionSuccess();
}

struct GateCase {
  Shape s;
  bool head_wise;
  bool causal;
};

// Forward through both drivers (Lq > 16: prefill; Lq <= 16: decode) and every
// normaliser, element-wise and head-wise gates with large |g| (saturated
// sigmoids), the output before the gate in ungated_out.
TEST_P(AttentionGate, ForwardMatchesReference) {
  Rng rng(501);
  const std::vector<GateCase> cases = {
      {{2, 4, 2, 40, 70, 16, 12}, false, true},
      {{1, 4, 4, 33, 33, 8, 8}, true, false},
      {{2, 8, 2, 1, 3000, 32, 32}, false, false},
      {{1, 8, 1, 5, 600, 16, 16}, true, true},
  };
  for (const GateCase& gc : cases) {
    for (AttentionNormalizer n : all_normalizers()) {
      const Shape& s = gc.s;
      Problem pr(s, false);
      pr.fill(rng);
      Tensor gate({s.B, s.H, s.Lq, gc.head_wise ? 1 : s.Dv}), ungated({s.B, s.H, s.Lq, s.Dv});
      gate.fill([&](int64_t i) { return i % 11 == 0 ? -30.0f : rng.normal() * 3.0f; });
      AttentionOptions o;
      o.normalizer = n;
      o.is_causal = gc.causal;
      o.gate = gate.view();
      o.ungated_out = ungated.view();
      pr.out.poison();
      ungated.poison();
      smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
      ASSERT_TRUE(pr.out.guards_intact() && ungated.guards_intact());
      const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
      EXPECT_TRUE(check_gated(p, ref::attention_forward(p), pr.out, ungated,
                              shape_name(s) + " " + smax::attention_normalizer_name(n) +
                                  (gc.head_wise ? " head-wise" : " element-wise")));
    }
  }
}

// Without ungated_out the gated output is the same; a NaN gate makes its
// outputs NaN, +-inf gates give a and 0.
TEST_P(AttentionGate, SpecialGates) {
  Rng rng(502);
  const Shape s{1, 2, 1, 3, 50, 8, 4};
  Problem pr(s, false);
  pr.fill(rng);
  Tensor gate({s.B, s.H, s.Lq, s.Dv}), ungated({s.B, s.H, s.Lq, s.Dv}), again({s.B, s.H, s.Lq, s.Dv});
  gate.fill([&](int64_t i) {
    return i == 0 ? NAN : i == 1 ? INFINITY : i == 2 ? -INFINITY : rng.normal();
  });
  AttentionOptions o;
  o.gate = gate.view();
  o.ungated_out = ungated.view();
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
  const auto out = pr.out.dense(), a = ungated.dense();
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], a[1]);  // sigmoid(+inf) = 1
  EXPECT_EQ(out[2], 0.0f);  // sigmoid(-inf) = 0
  o.ungated_out.reset();
  smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), again.view(), o);
  const auto b = again.dense();
  EXPECT_EQ(0, std::memcmp(out.data() + 1, b.data() + 1, (out.size() - 1) * sizeof(float)));
}

// Backward through the gate: dq, dk, dv with the ungated bound applied to
// dout * sigmoid(g) (the f32 product is one more rounding: 2 u on top), and
// dgate = sum over broadcast dims of dout * a * s (1 - s), within a's
// forward bound times |dout| s (1 - s) plus its own rounding.
TEST_P(AttentionGate, BackwardMatchesReference) {
  Rng rng(503);
  const std::vector<GateCase> cases = {
      {{2, 4, 2, 24, 40, 8, 6}, false, true},
      {{1, 4, 2, 17, 30, 16, 16}, true, false},
      {{2, 2, 1, 3, 100, 8, 8}, false, false},
  };
  for (const GateCase& gc : cases) {
    for (AttentionNormalizer n : {AttentionNormalizer::kSoftmax, AttentionNormalizer::kSigmoid,
                                  AttentionNormalizer::kSsmax}) {
      const Shape& s = gc.s;
      Problem pr(s, false);
      pr.fill(rng);
      const int64_t gc_cols = gc.head_wise ? 1 : s.Dv;
      Tensor gate({s.B, s.H, s.Lq, gc_cols}), ungated({s.B, s.H, s.Lq, s.Dv});
      Tensor dgate({s.B, s.H, s.Lq, gc_cols});
      gate.fill([&](int64_t) { return rng.normal() * 2.0f; });
      AttentionOptions o;
      o.normalizer = n;
      o.is_causal = gc.causal;
      o.gate = gate.view();
      o.ungated_out = ungated.view();
      smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
      Tensor dout({s.B, s.H, s.Lq, s.Dv});
      dout.fill([&](int64_t) { return rng.normal(); });
      o.dgate = dgate.view();
      Grads g{Tensor({s.B, s.H, s.Lq, s.D}), Tensor({s.B, s.Hkv, s.Lk, s.D}),
              Tensor({s.B, s.Hkv, s.Lk, s.Dv})};
      dgate.poison();
      smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                               g.dq.view(), g.dk.view(), g.dv.view(), o);
      ASSERT_TRUE(dgate.guards_intact());
      const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
      const auto want = ref::attention_backward(p, to_dense(dout.view()));
      const auto fr = ref::attention_forward(p);
      const double rel = backward_rel(p, fr, 2);  // + the gate's rounding of dout * s
      const std::string what = shape_name(s) + " " + smax::attention_normalizer_name(n) +
                               (gc.head_wise ? " head-wise" : " element-wise");
      EXPECT_TRUE(check_grad(g.dq.dense(), want.dq, want.dq_mag, rel, what + " dq"));
      EXPECT_TRUE(check_grad(g.dk.dense(), want.dk, want.dk_mag, rel, what + " dk"));
      EXPECT_TRUE(check_grad(g.dv.dense(), want.dv, want.dv_mag, rel, what + " dv"));
      // dgate = sum_c dout a s (1 - s) (over the head-wise gate's column):
      // a's forward bound through |dout| s (1 - s), plus the float64 sum
      // and the final rounding to f32 (half an ulp, 2^-24 relative).
      const auto got = dgate.dense();
      const auto abound = forward_bounds(p, fr);
      const auto dd = to_dense(dout.view());
      for (int64_t row = 0; row < s.B * s.H * s.Lq; ++row) {
        double w = 0, err = 0;
        for (int64_t c = 0; c < s.Dv; ++c) {
          const size_t e = static_cast<size_t>(row * s.Dv + c);
          const double sg = sigmoid(p.gate[e]);
          w += want.dgate[e];
          err += std::abs(dd[e]) * sg * (1 - sg) * abound[e] + 8 * kU * want.dgate_mag[e];
          if (!gc.head_wise) {
            EXPECT_NEAR(got[e], want.dgate[e], err + kU * std::abs(want.dgate[e]) + 1e-30)
                << what << " dgate " << e;
            w = 0;
            err = 0;
          }
        }
        if (gc.head_wise) {
          EXPECT_NEAR(got[static_cast<size_t>(row)], w, err + kU * std::abs(w) + 1e-30)
              << what << " dgate row " << row;
        }
      }
    }
  }
}

TEST_P(AttentionGate, Errors) {
  Rng rng(504);
  const Shape s{1, 2, 1, 4, 8, 4, 4};
  Problem pr(s, false);
  pr.fill(rng);
  Tensor gate({s.B, s.H, s.Lq, s.Dv}), ungated({s.B, s.H, s.Lq, s.Dv});
  Tensor bad_gate({s.B, s.H, s.Lq, 3}), small({1, 2, 4, 3});
  auto expect_error = [&](const AttentionOptions& o, const std::string& needle, bool backward) {
    pr.out.poison();
    try {
      if (backward) {
        Tensor dq({s.B, s.H, s.Lq, s.D}), dk({s.B, s.Hkv, s.Lk, s.D}), dv({s.B, s.Hkv, s.Lk, s.Dv});
        smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), ungated.view(),
                                 ungated.view(), dq.view(), dk.view(), dv.view(), o);
      } else {
        smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
      }
      ADD_FAILURE() << "no error for " << needle;
    } catch (const smax::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    if (!backward) {
      for (float x : pr.out.dense()) ASSERT_EQ(x, kSentinel) << needle << ": out was written";
    }
  };
  AttentionOptions o;
  o.gate = bad_gate.view();
  expect_error(o, "gate", false);
  o = {};
  o.ungated_out = ungated.view();
  expect_error(o, "belong to a gate", false);
  o = {};
  o.gate = gate.view();
  o.ungated_out = small.view();
  expect_error(o, "ungated_out must be [B, H, Lq, Dv]", false);
  o.ungated_out = pr.out.view();
  expect_error(o, "ungated_out", false);  // overlaps out
  o = {};
  o.gate = gate.view();
  expect_error(o, "a gate needs ungated_out", true);
  o.ungated_out = ungated.view();
  o.dgate = small.view();
  expect_error(o, "dgate", true);
}

// An element-wise gate's dgate is stored row by row from the tasks (no
// reduction): the same bits whatever dgate's layout (rank 4 or 3 with B = 1,
// strided columns), and a gate broadcast over the queries ([B, H, 1, Dv],
// reduced) equals the float64 sum of the element-wise terms rounded once.
TEST_P(AttentionGate, DgateLayoutsGiveTheSameBits) {
  Rng rng(509);
  const Shape s{1, 4, 2, 9, 50, 8, 12};
  Problem pr(s, false);
  pr.fill(rng);
  Tensor dout({s.B, s.H, s.Lq, s.Dv}), ungated({s.B, s.H, s.Lq, s.Dv});
  dout.fill([&](int64_t) { return rng.normal(); });
  Tensor gate4({s.B, s.H, s.Lq, s.Dv});
  gate4.fill([&](int64_t) { return rng.normal() * 2.0f; });
  Tensor gate3({s.H, s.Lq, s.Dv});
  gate3.fill([&](int64_t e) { return gate4.at(e); });
  auto run = [&](const Tensor& gate, const Tensor& dgate) {
    AttentionOptions o;
    o.gate = gate.view();
    o.ungated_out = ungated.view();
    smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
    o.dgate = dgate.view();
    Grads g{Tensor({s.B, s.H, s.Lq, s.D}), Tensor({s.B, s.Hkv, s.Lk, s.D}),
            Tensor({s.B, s.Hkv, s.Lk, s.Dv})};
    smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                             g.dq.view(), g.dk.view(), g.dv.view(), o);
    EXPECT_TRUE(dgate.guards_intact());
    return dgate.dense();
  };
  Tensor d4({s.B, s.H, s.Lq, s.Dv}), d3({s.H, s.Lq, s.Dv});
  Tensor dstrided({s.B, s.H, s.Lq, s.Dv},
                  permuted_strides({s.B, s.H, s.Lq, s.Dv}, {0, 3, 1, 2}, 1));
  const auto want = run(gate4, d4);
  const auto got3 = run(gate3, d3);
  const auto gots = run(gate4, dstrided);
  ASSERT_EQ(want.size(), got3.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got3.data(), want.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(want.data(), gots.data(), want.size() * sizeof(float)));
  // Broadcast over the queries: the element-wise terms of each column, summed.
  Tensor gate_b({s.B, s.H, 1, s.Dv}), dgate_b({s.B, s.H, 1, s.Dv});
  gate_b.fill([&](int64_t) { return rng.normal() * 2.0f; });
  Tensor gate_full({s.B, s.H, s.Lq, s.Dv}), dfull({s.B, s.H, s.Lq, s.Dv});
  gate_full.fill([&](int64_t e) { return gate_b.at((e / (s.Lq * s.Dv)) * s.Dv + e % s.Dv); });
  const auto terms = run(gate_full, dfull);
  const auto reduced = run(gate_b, dgate_b);
  for (int64_t h = 0; h < s.H; ++h) {
    for (int64_t c = 0; c < s.Dv; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < s.Lq; ++i) {
        sum += terms[static_cast<size_t>((h * s.Lq + i) * s.Dv + c)];
      }
      EXPECT_EQ(reduced[static_cast<size_t>(h * s.Dv + c)], static_cast<float>(sum))
          << "head " << h << " column " << c;
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(AttentionGate);

}  // namespace
}  // namespace smax_test

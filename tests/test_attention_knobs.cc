// tests/test_attention_knobs.cc: the gradients of attention's learnable
// knobs (attention_backward's dattn_mask, dsinks, dalibi_slopes,
// dsigmoid_bias, dssmax_scales) on every SIMD target against the float64
// oracle (src/reference/attention.h): full and broadcast float masks,
// per-head sinks, [H] and [B, H] slopes, the sigmoid bias, SSMax's per-head
// or scalar s, causal rows, and errors.
// Helpers, bounds and the fixture: tests/attention_util.h.
#include "attention_util.h"

namespace smax_test {
namespace {

class AttentionKnobs : public TargetTest {};

// Sums `full` (dense over full_shape, rank n) over the dims `shape`
// (right-aligned, rank <= n) broadcasts over. A shape that does not
// broadcast to full_shape is a test bug: aborts the test.
std::vector<double> reduce(const std::vector<double>& full, const std::vector<int64_t>& full_shape,
                           const std::vector<int64_t>& shape) {
  const size_t n = full_shape.size();
  std::vector<int64_t> osh(n, 1);
  for (size_t d = 0; d < shape.size(); ++d) osh[n - shape.size() + d] = shape[d];
  int64_t on = 1;
  for (int64_t x : osh) on *= x;
  for (size_t d = 0; d < n; ++d) {
    if (osh[d] != 1 && osh[d] != full_shape[d]) {
      ADD_FAILURE() << "reduce: shape does not broadcast";
      return {};
    }
  }
  std::vector<double> out(static_cast<size_t>(on), 0.0);
  for (size_t e = 0; e < full.size(); ++e) {
    int64_t rem = static_cast<int64_t>(e), idx = 0, mul = 1;
    for (size_t d = n; d-- > 0;) {
      const int64_t x = rem % full_shape[d];
      rem /= full_shape[d];
      idx += (osh[d] == 1 ? 0 : x) * mul;
      mul *= osh[d];
    }
    out[static_cast<size_t>(idx)] += full[e];
  }
  return out;
}

::testing::AssertionResult near_all(const std::vector<float>& got, const std::vector<double>& want,
                                    const std::vector<double>& mag, double rel,
                                    const std::string& what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size";
  for (size_t e = 0; e < got.size(); ++e) {
    const double tol = rel * mag[e] + 1e-30;
    if (std::isnan(want[e]) ? !std::isnan(got[e]) : !(std::abs(got[e] - want[e]) <= tol)) {
      return ::testing::AssertionFailure() << what << " element " << e << ": got " << got[e]
                                           << ", want " << want[e] << ", tolerance " << tol;
    }
  }
  return ::testing::AssertionSuccess();
}

struct KnobCase {
  Shape s;
  bool causal;
  AttentionNormalizer n;
  bool mask_broadcast;  // [1, H, Lq, Lk] instead of [B, H, Lq, Lk]
  bool slopes_bh;       // [B, H] slopes instead of [H]
};

TEST_P(AttentionKnobs, GradientsMatchReference) {
  Rng rng(601);
  const std::vector<KnobCase> cases = {
      {{2, 4, 2, 20, 33, 8, 8}, true, AttentionNormalizer::kSoftmax, true, false},
      {{2, 4, 4, 9, 70, 16, 8}, false, AttentionNormalizer::kSoftmax, false, true},
      // Several 64 x 128 tiles of the backward from lse (key offsets j0 > 0).
      {{1, 2, 1, 70, 300, 8, 8}, true, AttentionNormalizer::kSoftmax, false, false},
      {{1, 2, 1, 30, 30, 8, 8}, true, AttentionNormalizer::kSigmoid, true, true},
      {{2, 2, 2, 7, 19, 4, 4}, false, AttentionNormalizer::kSoftpick, false, false},
  };
  for (const KnobCase& kc : cases) {
    const Shape& s = kc.s;
    const bool softmax = kc.n == AttentionNormalizer::kSoftmax;
    Problem pr(s, false);
    pr.fill(rng);
    const std::vector<int64_t> mshape = {kc.mask_broadcast ? 1 : s.B, s.H, s.Lq, s.Lk};
    const std::vector<int64_t> ashape =
        kc.slopes_bh ? std::vector<int64_t>{s.B, s.H} : std::vector<int64_t>{s.H};
    Tensor mask(mshape), dmask(mshape), sinks({s.H}), dsinks({s.H}), slopes(ashape),
        dslopes(ashape), dbias(std::vector<int64_t>{1});
    mask.fill([&](int64_t i) { return i % 13 == 5 ? -INFINITY : rng.normal(); });
    sinks.fill([&](int64_t) { return rng.normal(); });
    slopes.fill([&](int64_t i) { return 0.05f * static_cast<float>(i % 4 + 1); });
    AttentionOptions o;
    o.normalizer = kc.n;
    o.is_causal = kc.causal;
    o.attn_mask = mask.view();
    o.alibi_slopes = slopes.view();
    if (softmax) o.sinks = sinks.view();
    if (kc.n == AttentionNormalizer::kSigmoid) o.sigmoid_bias = -1.5f;
    // Softmax: also from the forward's lse (the tiled backward).
    Tensor lse({s.B, s.H, s.Lq});
    for (bool with_lse : {false, true}) {
      if (with_lse && !softmax) break;
      if (with_lse) {
        o.lse = lse.view();
        o.backward_from_lse = true;
      }
      smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
      Tensor dout({s.B, s.H, s.Lq, s.Dv});
      dout.fill([&](int64_t) { return rng.normal(); });
      Grads g{Tensor({s.B, s.H, s.Lq, s.D}), Tensor({s.B, s.Hkv, s.Lk, s.D}),
              Tensor({s.B, s.Hkv, s.Lk, s.Dv})};
      AttentionOptions ob = o;
      ob.dattn_mask = dmask.view();
      ob.dalibi_slopes = dslopes.view();
      if (softmax) ob.dsinks = dsinks.view();
      if (kc.n == AttentionNormalizer::kSigmoid) ob.dsigmoid_bias = dbias.view();
      for (Tensor* t : {&dmask, &dsinks, &dslopes, &dbias}) t->poison();
      smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                               g.dq.view(), g.dk.view(), g.dv.view(), ob);
      for (Tensor* t : {&dmask, &dsinks, &dslopes, &dbias}) ASSERT_TRUE(t->guards_intact());
      // dq, dk, dv are the same as without the knob outputs.
      Grads g0 = run_backward(pr, dout, o);
      EXPECT_EQ(g.dq.dense(), g0.dq.dense());
      EXPECT_EQ(g.dk.dense(), g0.dk.dense());

      const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
      const auto want = ref::attention_backward(p, to_dense(dout.view()));
      const double rel = backward_rel(p, ref::attention_forward(p),
                                      with_lse ? ref::attention_backward_lse_extra(p) : 0);
      const std::string what = shape_name(s) + " " + smax::attention_normalizer_name(kc.n) +
                               (with_lse ? " (from lse)" : "");
      const std::vector<int64_t> full = {s.B, s.H, s.Lq, s.Lk};
      // dattn_mask: dt summed over the mask's broadcast dims.
      EXPECT_TRUE(near_all(dmask.dense(), reduce(want.dt, full, mshape),
                           reduce(want.dt_mag, full, mshape), rel, what + " dattn_mask"));
      // dalibi_slopes: sum of dt * -|i - j|; dsigmoid_bias: sum of dt.
      std::vector<double> da(want.dt.size()), dam(want.dt.size());
      for (size_t e = 0; e < da.size(); ++e) {
        const int64_t j = static_cast<int64_t>(e) % s.Lk;
        const int64_t i = (static_cast<int64_t>(e) / s.Lk) % s.Lq;
        da[e] = -want.dt[e] * static_cast<double>(std::abs(i - j));
        dam[e] = want.dt_mag[e] * static_cast<double>(std::abs(i - j));
      }
      // Per (b, h) first (the slopes are [B, H] or [H], left of [Lq, Lk]).
      const std::vector<int64_t> bh = {s.B, s.H};
      EXPECT_TRUE(near_all(dslopes.dense(), reduce(reduce(da, full, {s.B, s.H, 1, 1}), bh, ashape),
                           reduce(reduce(dam, full, {s.B, s.H, 1, 1}), bh, ashape), rel,
                           what + " dalibi_slopes"));
      if (kc.n == AttentionNormalizer::kSigmoid) {
        EXPECT_TRUE(near_all(dbias.dense(), reduce(want.dt, full, {1}),
                             reduce(want.dt_mag, full, {1}),
                             rel, what + " dsigmoid_bias"));
      }
      if (softmax) {
        const std::vector<int64_t> rows = {s.B, s.H, s.Lq};
        EXPECT_TRUE(near_all(dsinks.dense(),
                             reduce(reduce(want.dsink, rows, {s.B, s.H, 1}), bh, {s.H}),
                             reduce(reduce(want.dsink_mag, rows, {s.B, s.H, 1}), bh, {s.H}), rel,
                             what + " dsinks"));
      }
    }
  }
}

// SSMax's s: per head (ssmax_scales [H], each head its own s, the forward
// against the oracle) and its gradient dssmax_scales, per head and for the
// scalar ssmax_s (one element), causal and not, with masked keys; the
// oracle's dL/ds itself against central differences of its forward.
TEST_P(AttentionKnobs, SsmaxScalesAndTheirGradient) {
  Rng rng(603);
  for (const auto& [s, causal] : {std::pair<Shape, bool>{{2, 4, 2, 20, 33, 8, 8}, true},
                                  std::pair<Shape, bool>{{1, 3, 3, 9, 70, 16, 8}, false}}) {
    Problem pr(s, false);
    pr.fill(rng);
    Tensor scales({s.H}), dscales({s.H}), d1(std::vector<int64_t>{1}), mask({1, s.H, s.Lq, s.Lk});
    scales.fill([&](int64_t h) { return 0.2f + 0.35f * static_cast<float>(h); });
    mask.fill([&](int64_t i) { return i % 11 == 3 ? -INFINITY : 0.0f; });
    for (bool per_head : {true, false}) {
      AttentionOptions o;
      o.normalizer = AttentionNormalizer::kSsmax;
      o.is_causal = causal;
      o.attn_mask = mask.view();
      o.ssmax_s = 0.6f;
      if (per_head) o.ssmax_scales = scales.view();
      const std::string what =
          shape_name(s) + (per_head ? " per-head s" : " scalar s") + (causal ? " causal" : "");
      ASSERT_TRUE(run_forward(pr, o, what));
      Tensor dout({s.B, s.H, s.Lq, s.Dv});
      dout.fill([&](int64_t) { return rng.normal(); });
      Grads g{Tensor({s.B, s.H, s.Lq, s.D}), Tensor({s.B, s.Hkv, s.Lk, s.D}),
              Tensor({s.B, s.Hkv, s.Lk, s.Dv})};
      Tensor& ds = per_head ? dscales : d1;
      AttentionOptions ob = o;
      ob.dssmax_scales = ds.view();
      ds.poison();
      smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                               g.dq.view(), g.dk.view(), g.dv.view(), ob);
      ASSERT_TRUE(ds.guards_intact());
      Grads g0 = run_backward(pr, dout, o);
      EXPECT_EQ(g.dq.dense(), g0.dq.dense()) << what;
      const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
      const auto want = ref::attention_backward(p, to_dense(dout.view()));
      const double rel = backward_rel(p, ref::attention_forward(p));
      const std::vector<int64_t> rows = {s.B, s.H, s.Lq}, bh = {s.B, s.H};
      const std::vector<int64_t> shape =
          per_head ? std::vector<int64_t>{s.H} : std::vector<int64_t>{1};
      // Per (b, h) first, then over the dims the output broadcasts over.
      const std::vector<double> per = reduce(reduce(want.dssmax, rows, {s.B, s.H, 1}), bh, {s.H});
      EXPECT_TRUE(near_all(ds.dense(), reduce(per, {s.H}, shape),
                           reduce(reduce(reduce(want.dssmax_mag, rows, {s.B, s.H, 1}), bh, {s.H}),
                                  {s.H}, shape),
                           rel, what + " dssmax_scales"));
      // The oracle's dL/ds (L = <dout, out>) against central differences.
      if (per_head) {
        const std::vector<double> dd = to_dense(dout.view());
        for (int64_t h = 0; h < s.H; ++h) {
          auto loss = [&](double delta) {
            auto q = p;
            q.ssmax[static_cast<size_t>(h)] += delta;
            const auto f = ref::attention_forward(q);
            double l = 0;
            for (size_t e = 0; e < f.out.size(); ++e) l += f.out[e] * dd[e];
            return l;
          };
          const double eps = 1e-5, fd = (loss(eps) - loss(-eps)) / (2 * eps);
          EXPECT_NEAR(per[static_cast<size_t>(h)], fd, 1e-6 * (1 + std::abs(fd)))
              << what << " head " << h;
        }
      }
    }
  }
}

TEST_P(AttentionKnobs, Errors) {
  Rng rng(602);
  const Shape s{1, 2, 1, 3, 5, 4, 4};
  Problem pr(s, false);
  pr.fill(rng);
  Tensor dout({s.B, s.H, s.Lq, s.Dv}), dq({s.B, s.H, s.Lq, s.D}), dk({s.B, s.Hkv, s.Lk, s.D}),
      dv({s.B, s.Hkv, s.Lk, s.Dv});
  Tensor mask({s.B, s.H, s.Lq, s.Lk}), dmask({s.B, s.H, s.Lq, s.Lk}), dsinks({s.H}), d1({1});
  BoolTensor keep({s.B, s.H, s.Lq, s.Lk});
  auto expect_error = [&](const AttentionOptions& o, const std::string& needle) {
    dq.poison();
    try {
      smax::attention_backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), dout.view(),
                               dq.view(), dk.view(), dv.view(), o);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const smax::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (float x : dq.dense()) ASSERT_EQ(x, kSentinel) << needle << ": dq was written";
  };
  AttentionOptions o;
  o.dattn_mask = dmask.view();
  expect_error(o, "dattn_mask needs a floating attn_mask");
  o.attn_mask = keep.view();
  expect_error(o, "dattn_mask needs a floating attn_mask");
  o = {};
  o.dsinks = dsinks.view();
  expect_error(o, "dsinks needs sinks");
  o = {};
  o.dsigmoid_bias = d1.view();
  expect_error(o, "dsigmoid_bias needs the sigmoid normalizer");
  o = {};
  o.attn_mask = mask.view();
  o.dattn_mask = dq.view();  // overlaps dq
  expect_error(o, "dattn_mask");
  o = {};
  o.dssmax_scales = d1.view();
  expect_error(o, "dssmax_scales needs the ssmax normalizer");
  o.normalizer = AttentionNormalizer::kSsmax;
  o.dssmax_scales = dsinks.view();  // [H] without ssmax_scales
  expect_error(o, "must hold one element");
  Tensor scales({s.H + 1});
  o = {};
  o.normalizer = AttentionNormalizer::kSsmax;
  o.ssmax_scales = scales.view();
  expect_error(o, "ssmax_scales must be [H]");
  Tensor bad({s.H});
  bad.fill([](int64_t) { return NAN; });
  o.ssmax_scales = bad.view();
  expect_error(o, "ssmax_scales must be finite");
  o = {};
  o.ssmax_scales = dsinks.view();
  expect_error(o, "ssmax_scales are supported with the ssmax normalizer only");
}

SMAX_INSTANTIATE_PER_TARGET(AttentionKnobs);

}  // namespace
}  // namespace smax_test

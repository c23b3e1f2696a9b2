// tests/test_cross_entropy_fuzz.cc: fuzz regressions of cross_entropy
// (fuzz/regressions/{losses,options}/cross_entropy_*), on every SIMD target.
// Helpers, bounds and the fixture: tests/cross_entropy_util.h.
#include "cross_entropy_util.h"

namespace smax_test {
namespace {

// ---------------------------------------------------------------------------
// Fuzz regressions (fuzz/regressions/{losses,options}/cross_entropy_*).
// ---------------------------------------------------------------------------

// Accuracy with softcap and an additive mask: the f32 t = fl(tanh(7.9375) +
// 7.9375) rounds to 8.9375 = fl(tanh(1e38) + 7.9375), a tie the float64
// capped logits do not have (entry 5 is the maximum). The library took the
// first f32 maximum (0); it now agrees with the oracle.
TEST_P(CrossEntropy, FuzzRegressionSoftcapMaskAccuracy) {
  const std::vector<float> x = {7.9375f, 0.125f, -4.625f, 2.25f, -4.625f, 1e38f,
                                0.5f,    7.9375f, 1.0f,   -2.0f, 7.9375f, 3.0f};
  const float mask = 7.9375f;
  SoftmaxOptions o;
  o.additive_mask = smax::make_view(&mask, {1});
  CrossEntropyOptions ce;
  ce.softcap = 1.0f;
  ce.loss.reduction = Reduction::kNone;
  std::vector<float> dst(2), acc(2, 7.0f);
  ce.accuracy = smax::make_view(acc.data(), {2});
  // Probability targets (all 0: the target's argmax is class 0).
  const std::vector<float> q(12, 0.0f);
  smax::cross_entropy(smax::make_view(x.data(), {2, 6}), smax::make_view(q.data(), {2, 6}),
                      smax::make_view(dst.data(), {2}), ce, o);
  CrossEntropyOptions rce = ce;
  rce.accuracy.reset();
  const ref::CrossEntropyRef r = ref::cross_entropy(smax::make_view(x.data(), {2, 6}),
                                                    smax::make_view(q.data(), {2, 6}), rce, o);
  EXPECT_EQ(acc[0], 0.0f);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(static_cast<double>(acc[i]), r.accuracy[i]) << i;
  // Class targets: 5 is right for row 0; row 1's u ties exactly at 7.9375
  // (entries 1 and 4): the first wins.
  const std::vector<int64_t> y = {5, 1};
  smax::cross_entropy(smax::make_view(x.data(), {2, 6}), smax::make_index_view(y.data(), {2}),
                      smax::make_view(dst.data(), {2}), ce, o);
  const ref::CrossEntropyRef ri = ref::cross_entropy(smax::make_view(x.data(), {2, 6}),
                                                     smax::make_index_view(y.data(), {2}), rce, o);
  EXPECT_EQ(acc[0], 1.0f);
  EXPECT_EQ(acc[1], 1.0f);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(static_cast<double>(acc[i]), ri.accuracy[i]) << i;
}

// A gradient row whose p_j factor (2 zs L, L = 1e38) is beyond f32: the
// kernel's f32 factor was inf, and inf * e^(t_j - L) = inf * 0 gave NaN at
// every other entry; now -inf at the max (float64 -5.2e45) and -0
// elsewhere, as the oracle. With dloss = 1 the factor (2e38) is still past
// 2^126: the float64 path, bitwise the same in the fused forward.
TEST_P(CrossEntropy, FuzzRegressionZlossOverflowRowNoNan) {
  const std::vector<float> x = {-kInfF, -6.8125f, -4.75f, 1e38f, 97.65625f, 0.1875f, -3.875f, 1.0f, -6.3125f};
  const std::vector<float> q(9, 0.0f);
  const std::vector<float> w = {0, 1, 0, 1, 0.5f, 0.5f, 0, 1.5f, 0.5f};
  const float dloss = -26114000.0f;
  CrossEntropyOptions ce;
  ce.lse_square_scale = 1.0f;
  ce.loss.weight = smax::make_view(w.data(), {9});
  std::vector<float> dx(9, 7.0f);
  smax::cross_entropy_backward(smax::make_view(x.data(), {9}), smax::make_view(q.data(), {9}),
                               smax::make_view(&dloss, {}), smax::make_view(dx.data(), {9}), ce);
  const ref::GradRef g = ref::cross_entropy_backward(smax::make_view(x.data(), {9}),
                                                     smax::make_view(q.data(), {9}),
                                                     smax::make_view(&dloss, {}), ce);
  EXPECT_EQ(dx[3], -kInfF);
  EXPECT_LT(g.dsrc[3], -static_cast<double>(FLT_MAX));  // -5.2e45: -inf in f32
  for (size_t j = 0; j < 9; ++j) {
    if (j == 3) continue;
    EXPECT_EQ(dx[j], 0.0f) << j;
    EXPECT_EQ(g.dsrc[j], 0.0) << j;
  }
  // The fused gradient (unit dloss) has the same bits as the backward pass.
  std::vector<float> dst(1), fused(9, 7.0f), back(9, 5.0f);
  CrossEntropyOptions fce = ce;
  fce.grad = smax::make_view(fused.data(), {9});
  smax::cross_entropy(smax::make_view(x.data(), {9}), smax::make_view(q.data(), {9}),
                      smax::make_view(dst.data(), {}), fce);
  const float one = 1.0f;
  smax::cross_entropy_backward(smax::make_view(x.data(), {9}), smax::make_view(q.data(), {9}),
                               smax::make_view(&one, {}), smax::make_view(back.data(), {9}), ce);
  EXPECT_EQ(std::memcmp(fused.data(), back.data(), sizeof(float) * 9), 0);
  EXPECT_NEAR(back[3], 2e38, 2e38 * 1e-6);  // 2 zs L, L = 1e38: still finite
  for (size_t j = 0; j < 9; ++j) EXPECT_FALSE(std::isnan(back[j])) << j;
}

// Softcap and a large additive mask (3500.875): t = fl(tanh(u) + 3500.875)
// keeps 2^-13 of the capped value, so p_j is off by ~2^-24 (|t_j| + |L|)
// relative against the float64 oracle: the 0.03 (|t_j| + |L|) term of the
// bound (the old bound, without it, was 20x too small here).
TEST_P(CrossEntropy, FuzzRegressionSoftcapMaskBound) {
  const std::vector<float> x = {-7.3125f, 1.875f, -6.75f, 0.1025390625f, -3.6875f, 2.0625f, 0.875f, 6.0625f};
  const std::vector<int64_t> y = {0};
  const float mask = 3500.875f, dloss = 0.25f;
  SoftmaxOptions o;
  o.additive_mask = smax::make_view(&mask, {1});
  CrossEntropyOptions ce;
  ce.softcap = 1.0f;
  std::vector<float> dx(8);
  smax::cross_entropy_backward(smax::make_view(x.data(), {1, 8}), smax::make_index_view(y.data(), {1}),
                               smax::make_view(&dloss, {}), smax::make_view(dx.data(), {1, 8}), ce, o);
  const ref::GradRef g = ref::cross_entropy_backward(smax::make_view(x.data(), {1, 8}),
                                                     smax::make_index_view(y.data(), {1}),
                                                     smax::make_view(&dloss, {}), ce, o);
  ASSERT_EQ(g.t_round.size(), 8u);
  for (size_t j = 0; j < 8; ++j) {
    EXPECT_GT(g.t_round[j], 0.0);
    const double f = 1.0 + std::fabs(x[j]) / ce.softcap + g.t_round[j];
    EXPECT_LE(std::fabs(dx[j] - g.dsrc[j]), 4e-6 * g.mag[j] * f + 1e-30) << j;
  }
  // Without the mask the term is absent (the oracle's t is the library's).
  const ref::GradRef g0 = ref::cross_entropy_backward(smax::make_view(x.data(), {1, 8}),
                                                      smax::make_index_view(y.data(), {1}),
                                                      smax::make_view(&dloss, {}), ce);
  for (double v : g0.t_round) EXPECT_EQ(v, 0.0);
}

// Fuzz regression (fuzz/regressions/losses/z_loss_backward_factor_overflow_nan):
// L ~ 8e37 and dloss 2.6e7 put the z-loss gradient factor 2 c L dloss (4e41)
// beyond f32: inf * p_j = inf * 0 gave NaN at every entry but the max. Now
// inf only at the max (its float64 value is beyond f32), exact 0 elsewhere.
TEST_P(CrossEntropy, FuzzRegressionZLossFactorOverflow) {
  const std::vector<float> x = {7.99999995e+37f, -FLT_MAX, 97.109375f, 0.0f, -kInfF};
  const float dloss = 25784000.0f;
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  std::vector<float> dx(5, 7.0f);
  smax::z_loss_backward(smax::make_view(x.data(), {1, 5}), smax::make_view(&dloss, {1}),
                        smax::make_view(dx.data(), {1, 5}), 1e-4f, lo);
  const ref::GradRef g = ref::z_loss_backward(smax::make_view(x.data(), {1, 5}), nullptr,
                                              smax::make_view(&dloss, {1}), 1e-4, lo);
  EXPECT_GT(g.dsrc[0], static_cast<double>(FLT_MAX));
  EXPECT_EQ(dx[0], kInfF);
  for (size_t j = 1; j < 5; ++j) {
    EXPECT_EQ(dx[j], 0.0f) << j;
    EXPECT_EQ(g.dsrc[j], 0.0) << j;
  }
}

// Fuzz regression (fuzz/regressions/losses/spherical_z_loss_backward_target_beyond_flt_max):
// a row of nearly equal denormals has std ~ 1e-41, so the gradient's terms
// are far beyond FLT_MAX. The target entry was the f32 rounding of
// alpha + beta (t_y - mean) (+inf) plus f in float64 (-9e38): +inf, where
// the float64 value is about -8.4e38 (-inf in f32). It is now one float64
// sum rounded once.
TEST_P(CrossEntropy, FuzzRegressionSphericalTargetBeyondFltMax) {
  const std::vector<float> x = {9.21956439e-39f, 9.21956439e-39f, 9.19660551e-39f, 9.21956439e-39f};
  const std::vector<int64_t> y = {0};
  const float dloss = 0.25f;
  LossOptions lo;
  std::vector<float> dx(4, 7.0f);
  smax::spherical_z_loss_backward(smax::make_view(x.data(), {1, 4}), smax::make_index_view(y.data(), {1}),
                                  smax::make_view(&dloss, {}), smax::make_view(dx.data(), {1, 4}),
                                  1.0f, 1.0f, lo);
  const ref::GradRef g = ref::spherical_z_loss_backward(
      smax::make_view(x.data(), {1, 4}), smax::make_index_view(y.data(), {1}),
      smax::make_view(&dloss, {}), 1.0, 1.0, lo);
  for (size_t j = 0; j < 4; ++j) {
    const double r = g.dsrc[j];
    if (std::fabs(r) >= 0x1.ffffffp127) {
      EXPECT_EQ(dx[j], r > 0 ? kInfF : -kInfF) << j << " ref " << r;
    } else {
      EXPECT_TRUE(std::isfinite(dx[j])) << j;
      EXPECT_LE(std::fabs(dx[j] - r), kGradEps * g.mag[j] + 1e-30) << j << " ref " << r;
    }
  }
  EXPECT_LT(g.dsrc[0], -static_cast<double>(FLT_MAX));  // the case the fix is about
}

// Fuzz regression (fuzz/regressions/losses/cross_entropy_backward_softcap_bool_mask_nan):
// with softcap the additive mask is added after the cap, to logits the bool
// mask had already set to -inf; a NaN in the additive mask at a hidden entry
// then made the entry NaN. The bool mask wins (as without softcap): the loss
// and gradients equal those with 0 there, hidden entries get exactly 0.
TEST_P(CrossEntropy, FuzzRegressionSoftcapBoolMaskBeatsNanMask) {
  const std::vector<float> x = {0.5f, -1.25f, 2.0f, 0.75f, -0.5f, 1.5f, 0.25f, -2.0f};
  const std::vector<int64_t> y = {0, 3};
  const uint8_t keep[8] = {1, 1, 0, 1, 0, 1, 1, 1};
  const float dloss = 0.25f;
  for (int variant = 0; variant < 2; ++variant) {
    const float hidden = variant == 0 ? kNanF : 0.0f;
    const float add[8] = {0.5f, 0.0f, hidden, -1.0f, hidden, 0.25f, 0.0f, 0.0f};
    SoftmaxOptions o;
    o.additive_mask = smax::make_view(add, {2, 4});
    o.bool_mask = smax::make_bool_view(keep, {2, 4});
    CrossEntropyOptions ce;
    ce.softcap = 1.0f;
    std::vector<float> dx(8, 7.0f), loss(1, 7.0f);
    smax::cross_entropy(smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}),
                        smax::make_view(loss.data(), {}), ce, o);
    smax::cross_entropy_backward(smax::make_view(x.data(), {2, 4}),
                                 smax::make_index_view(y.data(), {2}), smax::make_view(&dloss, {}),
                                 smax::make_view(dx.data(), {2, 4}), ce, o);
    // The oracles agree (the bool mask wins there too).
    const ref::CrossEntropyRef R = ref::cross_entropy(
        smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}), ce, o);
    EXPECT_NEAR(loss[0], R.loss.reduce(R.loss.rows), 1e-5 * (1 + std::fabs(R.loss.reduce(R.loss.rows))));
    const ref::GradRef G = ref::cross_entropy_backward(
        smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}),
        smax::make_view(&dloss, {}), ce, o);
    for (size_t j = 0; j < 8; ++j) {
      EXPECT_LE(std::fabs(dx[j] - G.dsrc[j]), 1e-5 * G.mag[j] + 1e-30) << j << " ref " << G.dsrc[j];
    }
    static std::vector<float> loss0, dx0;
    if (variant == 0) {
      loss0 = loss;
      dx0 = dx;
      EXPECT_TRUE(std::isfinite(loss[0]));
      for (int j = 0; j < 8; ++j) {
        EXPECT_FALSE(std::isnan(dx[j])) << j;
        if (keep[j] == 0) {
          EXPECT_EQ(dx[j], 0.0f) << j;
        }
      }
    } else {
      EXPECT_EQ(std::memcmp(loss.data(), loss0.data(), sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(dx.data(), dx0.data(), sizeof(float) * 8), 0);
    }
  }
  // Every entry hidden, NaN in the additive mask: an empty row (0 gradient).
  const uint8_t none[8] = {};
  const float nan_add[8] = {kNanF, kNanF, kNanF, kNanF, kNanF, kNanF, kNanF, kNanF};
  SoftmaxOptions o;
  o.additive_mask = smax::make_view(nan_add, {2, 4});
  o.bool_mask = smax::make_bool_view(none, {2, 4});
  CrossEntropyOptions ce;
  ce.softcap = 1.0f;
  std::vector<float> dx(8, 7.0f);
  smax::cross_entropy_backward(smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}),
                               smax::make_view(&dloss, {}), smax::make_view(dx.data(), {2, 4}), ce, o);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(dx[j], 0.0f) << j;
  // The forward of such rows (fuzz/regressions/losses/cross_entropy_softcap_all_hidden_nan_mask):
  // empty rows (0 with the default policy), in the library and the oracle.
  for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
    ce.loss.reduction = red;
    ce.loss.empty_mean = smax::EmptyMean::kZero;
    std::vector<float> loss(2, 7.0f);
    const TensorView lv = red == Reduction::kNone ? smax::make_view(loss.data(), {2})
                                                  : smax::make_view(loss.data(), {});
    smax::cross_entropy(smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}), lv,
                        ce, o);
    const ref::CrossEntropyRef R = ref::cross_entropy(
        smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}), ce, o);
    EXPECT_EQ(loss[0], 0.0f);
    for (double v : R.loss.rows) EXPECT_EQ(v, 0.0);
  }
}

SMAX_INSTANTIATE_PER_TARGET(CrossEntropy);

}  // namespace
}  // namespace smax_test

// tests/test_rescaled_losses.cc: stablemax cross-entropy (every reduction, weights,
// ignore_index, masks, zero weight sum), softmax_collapse_fraction, and the
// fuzz regressions of the rescaled ops, on every SIMD target.
// Helpers, bounds and the fixture: tests/rescaled_util.h.
#include "rescaled_util.h"

namespace smax_test {
namespace {

// Cross-entropy: every reduction, class weights, ignore_index, masks.
TEST_P(Rescaled, StablemaxCrossEntropy) {
  Rng rng("ce");
  for (int64_t n : std::vector<int64_t>{1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000, kVocab}) {
    for (Data data : {Data::kUniform, Data::kWide, Data::kHuge, Data::kSomeNegInf, Data::kNan,
                      Data::kPosInf, Data::kAllNegInf, Data::kHigh}) {
      const int64_t rows = n >= 32000 ? 2 : 6;
      Tensor src({rows, n});
      fill_rows(src, 1, data, rng);
      I64Tensor target({rows});
      target.fill([&](int64_t i) { return i == 2 ? int64_t{-100} : rng.index(n); });
      Tensor w({n});
      w.fill([&](int64_t) { return rng.uniform(0.5f, 2.0f); });
      for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
        LossOptions lo;
        lo.reduction = red;
        if (red != Reduction::kSum) lo.weight = w.view();
        const std::string what = std::string("CE ") + data_name(data) + " n=" + std::to_string(n) +
                                 " " + smax::reduction_name(red);
        Tensor dst(red == Reduction::kNone ? std::vector<int64_t>{rows} : std::vector<int64_t>{});
        dst.poison();
        smax::stablemax_cross_entropy(src.view(), target.view(), dst.view(), lo);
        ASSERT_TRUE(dst.guards_intact()) << what;
        const std::vector<double> r = ref::stablemax_cross_entropy(src.view(), target.view(), lo);
        // Bounds: per row 1e-6 |w l|; reduced: sum of them / denominator.
        lo.reduction = Reduction::kNone;
        const std::vector<double> per = ref::stablemax_cross_entropy(src.view(), target.view(), lo);
        lo.reduction = red;
        Checker c;
        if (red == Reduction::kNone) {
          for (int64_t i = 0; i < rows; ++i) {
            c.element(dst.at(i), r[static_cast<size_t>(i)], 1e-6 * std::fabs(r[static_cast<size_t>(i)]) + 1e-30, false);
          }
        } else {
          double b = 0, wsum = 0;
          for (int64_t i = 0; i < rows; ++i) {
            b += 1e-6 * std::fabs(per[static_cast<size_t>(i)]);
            if (target.at(i) != -100) wsum += lo.weight ? w.at(target.at(i)) : 1.0;
          }
          if (red == Reduction::kMean) b /= wsum;
          c.element(dst.at(0), r[0], b + 0x1p-24 * std::fabs(r[0]) + 1e-30, false);
        }
        record(to_assertion(c.res, what));
        // Gradient.
        Tensor dl(red == Reduction::kNone ? std::vector<int64_t>{rows} : std::vector<int64_t>{});
        fill_normal(dl, rng);
        Tensor dx({rows, n});
        dx.poison();
        smax::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), dx.view(), lo);
        ASSERT_TRUE(dx.guards_intact()) << what;
        const std::vector<double> gr =
            ref::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), lo);
        Checker cg;
        double wsum = 0;
        for (int64_t i = 0; i < rows; ++i) {
          if (target.at(i) != -100) wsum += lo.weight ? w.at(target.at(i)) : 1.0;
        }
        for (int64_t rr = 0; rr < rows; ++rr) {
          const int64_t tg = target.at(rr);
          double cf = 0;
          if (tg != -100) {
            cf = (lo.weight ? w.at(tg) : 1.0) * (red == Reduction::kNone ? dl.at(rr) : dl.at(0));
            if (red == Reduction::kMean) cf /= wsum;
          }
          Row t(static_cast<size_t>(n));
          for (int64_t k = 0; k < n; ++k) t[static_cast<size_t>(k)] = src.at(rr * n + k);
          double S = 0;
          for (double v : t) S += ref::stable_s(v);
          for (int64_t k = 0; k < n; ++k) {
            const size_t i = static_cast<size_t>(rr * n + k);
            const double y = ref::stable_s(t[static_cast<size_t>(k)]) / S;
            const double ymd = std::fabs(y - (k == tg ? 1.0 : 0.0));
            cg.element(dx.at(static_cast<int64_t>(i)), gr[i],
                       2e-6 * std::fabs(cf) * ymd / (1.0 + std::fabs(t[static_cast<size_t>(k)])) + 1e-30);
          }
        }
        record(to_assertion(cg.res, what + " gradient"));
        if (stop()) FAIL() << "stopping";
      }
    }
  }
  // Masks and scale, class axis 0 of a strided 3-D tensor.
  {
    const std::vector<int64_t> shape = {7, 3, 4};
    Tensor src(shape, permuted_strides(shape, {2, 1, 0}, 1));
    src.fill([&](int64_t) { return 3.0f * rng.normal(); });
    BoolTensor keep({7, 1, 1});
    keep.fill([](int64_t i) { return static_cast<uint8_t>(i != 3); });
    I64Tensor target({3, 4});
    target.fill([&](int64_t i) { return i == 5 ? int64_t{3} : rng.index(7); });  // row 5: masked target
    SoftmaxOptions o;
    o.axis = 0;
    o.temperature = 2.0f;
    o.bool_mask = keep.view();
    LossOptions lo;
    lo.reduction = Reduction::kNone;
    Tensor dst({3, 4});
    smax::stablemax_cross_entropy(src.view(), target.view(), dst.view(), lo, o);
    const std::vector<double> r = ref::stablemax_cross_entropy(src.view(), target.view(), lo, o);
    Checker c;
    for (int64_t i = 0; i < 12; ++i) c.element(dst.at(i), r[static_cast<size_t>(i)], 1e-6 * std::fabs(r[static_cast<size_t>(i)]) + 1e-30, false);
    EXPECT_EQ(dst.at(5), INFINITY);
    record(to_assertion(c.res, "CE axis 0 masked"));
    Tensor dl({3, 4});
    fill_normal(dl, rng);
    Tensor dx(shape);
    smax::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), dx.view(), lo, o);
    const std::vector<double> gr = ref::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), lo, o);
    for (int64_t i = 0; i < dx.numel(); ++i) {
      EXPECT_NEAR(dx.at(i), gr[static_cast<size_t>(i)], 2e-6 * std::fabs(gr[static_cast<size_t>(i)]) + 1e-7) << i;
      if (i / 12 == 3) {
        EXPECT_EQ(dx.at(i), 0.0f) << "masked class gets exactly 0";
      }
    }
  }
}

// kMean where every counted row has weight 0 (targets 1 and 3 weigh 0, row
// 1 ignored): 0 / 0, so the gradient of the counted rows is NaN (a
// bool-masked entry stays exactly 0), the ignored row 0; kZero: 0. Library
// and oracle. (It used to be 0.)
TEST_P(Rescaled, StablemaxCrossEntropyZeroWeightSumMean) {
  const ZeroWeightSumProblem p;
  for (int zero = 0; zero < 2; ++zero) {
    const LossOptions lo = p.loss_options(zero);
    float dx[12];
    std::fill(dx, dx + 12, 7.0f);
    smax::stablemax_cross_entropy_backward(p.x(), p.target(), p.dloss(),
                                           smax::make_view(dx, {3, 4}), lo, p.options());
    p.expect_gradient(dx,
                      ref::stablemax_cross_entropy_backward(p.x(), p.target(), p.dloss(), lo,
                                                            p.options()),
                      zero, "stablemax_cross_entropy");
  }
}

TEST_P(Rescaled, SoftmaxCollapse) {
  const int lanes = ref::f32_lanes_of_target(smax::active_target());
  if (lanes == 0) GTEST_SKIP() << "unknown lane count for " << smax::active_target();
  Rng rng("collapse");
  struct Case {
    Precision p;
    float gap;  // around the precision's threshold
  };
  for (const Case& cs : {Case{Precision::kF32, 16.6f}, Case{Precision::kF16, 7.6f},
                         Case{Precision::kBF16, 5.5f}}) {
    for (int64_t n : {1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000}) {
      const int64_t rows = n >= 32000 ? 8 : 40;
      Tensor src({rows, n});
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = rng.index(n);
        const float m = rng.uniform(-50.0f, 50.0f);
        // Gap grows with log n so that a sizeable share of rows is near the threshold.
        const float base = cs.gap + std::log(static_cast<float>(n)) * rng.uniform(0.0f, 1.2f) +
                           rng.uniform(-2.0f, 2.0f);
        for (int64_t k = 0; k < n; ++k) {
          src.at(r * n + k) = k == at ? m : m - base - std::fabs(rng.normal(0.0f, 2.0f));
        }
        if (r == 5 && n > 1) src.at(r * n + (at + 1) % n) = -INFINITY;
        if (r == 6) src.at(r * n + at) = NAN;
        if (r == 7 && n > 2) src.at(r * n + (at + 1) % n) = m;  // a tie
      }
      Tensor flags({rows});
      const TensorView fv = flags.view();
      const double frac = smax::softmax_collapse_fraction(src.view(), cs.p, {}, &fv);
      const std::vector<int> want = ref::softmax_collapse_flags(src.view(), cs.p, {}, lanes);
      int64_t decided = 0, count = 0;
      for (int64_t r = 0; r < rows; ++r) {
        count += flags.at(r) == 1.0f;
        EXPECT_TRUE(flags.at(r) == 0.0f || flags.at(r) == 1.0f);
        if (want[static_cast<size_t>(r)] < 0) continue;
        ++decided;
        EXPECT_EQ(flags.at(r), static_cast<float>(want[static_cast<size_t>(r)]))
            << smax::precision_name(cs.p) << " n=" << n << " row " << r;
      }
      EXPECT_EQ(frac, static_cast<double>(count) / static_cast<double>(rows));
      EXPECT_GE(decided * 10, rows * 9) << "too few decidable rows";
      EXPECT_EQ(flags.at(6), 0.0f) << "NaN row " << smax::precision_name(cs.p) << " n=" << n;
      if (n == 1) {
        EXPECT_EQ(frac, static_cast<double>(rows - 1) / static_cast<double>(rows));  // all but the NaN row
      }
    }
  }
  // Empty, all-masked and +inf rows.
  Tensor e({3, 0});
  EXPECT_EQ(smax::softmax_collapse_fraction(e.view()), 0.0);
  std::vector<float> x = {-INFINITY, -INFINITY, 0.0f, INFINITY};
  EXPECT_EQ(smax::softmax_collapse_fraction(smax::make_view(x.data(), {2, 2})), 0.0);
}

// Fuzz regression (fuzz/regressions/normalizers/softpick_backward_neg_inf_logits_nan_ref):
// a non-finite dy at a masked entry (t = -inf, from src or a mask) is left
// out of <dy, y>: the other entries are exactly those of dy = 0 there, and
// the float64 oracle agrees (it gave NaN through -inf * 0).
TEST_P(Rescaled, SoftpickBackwardNonFiniteDyAtMaskedEntries) {
  const std::vector<float> x = {1.6875f, -2.5e-39f, 7.875f, 3.0f, -INFINITY,
                                0.5f,    -1.0f,     2.0f,   4.0f, 1.0f};
  const uint8_t keep[10] = {1, 1, 1, 1, 1, 1, 0, 1, 1, 0};
  SoftmaxOptions o;
  o.bool_mask = smax::make_bool_view(keep, {2, 5});
  for (float bad : {-INFINITY, INFINITY, NAN}) {
    std::vector<float> dy = {2.5f, 2.5f, -2.7f, 7.0f, bad, 1.0f, bad, -0.5f, 0.25f, bad};
    std::vector<float> dy0 = dy;
    for (float& v : dy0) {
      if (!std::isfinite(v)) v = 0.0f;
    }
    std::vector<float> dx(10), dx0(10);
    smax::softpick_backward(smax::make_view(x.data(), {2, 5}), smax::make_view(dy.data(), {2, 5}),
                            smax::make_view(dx.data(), {2, 5}), {}, o);
    smax::softpick_backward(smax::make_view(x.data(), {2, 5}), smax::make_view(dy0.data(), {2, 5}),
                            smax::make_view(dx0.data(), {2, 5}), {}, o);
    EXPECT_EQ(std::memcmp(dx.data(), dx0.data(), sizeof(float) * dx.size()), 0);
    const std::vector<double> r = ref::softpick_backward(
        smax::make_view(x.data(), {2, 5}), smax::make_view(dy.data(), {2, 5}), {}, o);
    for (size_t i = 0; i < dx.size(); ++i) {
      const bool masked = i == 4 || keep[i] == 0;
      if (masked) {
        EXPECT_EQ(dx[i], 0.0f) << i;
        EXPECT_EQ(r[i], 0.0) << i;
        continue;
      }
      EXPECT_TRUE(std::isfinite(dx[i])) << i;
      EXPECT_TRUE(std::isfinite(r[i])) << i;
      EXPECT_NEAR(dx[i], r[i], 1e-5 * (1.0 + std::fabs(r[i]))) << i;
    }
  }
}

// Fuzz regression (fuzz/regressions/options/ssmax_backward_ds_f32_overflow):
// ds summed fl(t_i y_i) (g_i - dot); with t near 1e38 and a y above 1 (a y
// that is not a softmax output) t y overflowed f32 to -inf and met the +inf
// of a masked-by-value entry: NaN where the float64 sum is +inf. The
// products are now formed in float64.
TEST_P(Rescaled, FuzzRegressionSsmaxDsNoF32Overflow) {
  const std::vector<float> x = {0.0947265625f, -kInfF};
  const std::vector<float> y = {7.1875f, 6.9375f}, dy = {0.25f, 0.25f};
  const float mask = 1e38f, s_row = 0.43f;
  SoftmaxOptions o;
  o.scale = 0.001f;
  o.additive_mask = smax::make_view(&mask, {});
  SsmaxOptions p;
  p.s_rows = smax::make_view(&s_row, {});
  p.fixed_n = 7;
  std::vector<float> dx(2), ds(1);
  const TensorView dsv = smax::make_view(ds.data(), {});
  smax::ssmax_backward(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}),
                       smax::make_view(dy.data(), {2}), smax::make_view(dx.data(), {2}), p, o, &dsv);
  // t = {1e38, -inf}; dot = 0.25 (7.1875 + 6.9375); entry 1's t y (g - dot)
  // is (-inf)(6.9375)(negative) = +inf, entry 0's finite in float64.
  EXPECT_EQ(ds[0], kInfF);
  // t y beyond FLT_MAX (9e38) with a small g - dot: ds is finite.
  const std::vector<float> x2 = {3e37f, 2e37f};
  const std::vector<float> y2 = {30.0f, 2.0f}, dy2 = {1e-3f, 1e-3f};
  SoftmaxOptions o2;
  std::vector<float> dx2(2), ds2(1);
  const TensorView dsv2 = smax::make_view(ds2.data(), {});
  SsmaxOptions p2;
  p2.s = 1e-30f;
  smax::ssmax_backward(smax::make_view(x2.data(), {2}), smax::make_view(y2.data(), {2}),
                       smax::make_view(dy2.data(), {2}), smax::make_view(dx2.data(), {2}), p2, o2, &dsv2);
  // ds = ln 2 sum t y (g - dot), g - dot = fl(1e-3 - fl(0.032)) (about -0.031).
  const float w = 1e-3f - static_cast<float>(30.0 * 1e-3f + 2.0 * 1e-3f);
  const double want = std::log(2.0) * (3e37 * 30.0 + 2e37 * 2.0) * static_cast<double>(w);
  EXPECT_TRUE(std::isfinite(ds2[0]));
  EXPECT_NEAR(ds2[0], want, 1e-6 * std::fabs(want));
}

SMAX_INSTANTIATE_PER_TARGET(Rescaled);

}  // namespace
}  // namespace smax_test

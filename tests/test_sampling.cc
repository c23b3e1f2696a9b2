// tests/test_sampling.cc: hand vectors of the sampling ops (docs/vectors.md),
// gumbel_softmax and gumbel_max on every SIMD target.
// Helpers, bounds and the fixture: tests/sampling_util.h.
#include "sampling_util.h"

namespace smax_test {
namespace {

// ---------------------------------------------------------------------------
// Hand vectors (docs/sampling.md, "Hand vectors")
// ---------------------------------------------------------------------------

TEST(SamplingSpec, GumbelSoftmaxVectors) {
  const float x[2] = {0.0f, 0.0f};
  const float g[2] = {0.0f, 2.0f};
  float y[2], soft[2];
  GumbelSoftmaxOptions o;
  o.noise = smax::make_view(g, {2});
  o.tau = 1.0f;
  smax::gumbel_softmax(smax::make_view(x, {2}), smax::make_view(y, {2}), o);
  EXPECT_NEAR(y[0], 0.1192029, 1e-7);
  EXPECT_NEAR(y[1], 0.8807971, 1e-7);
  o.tau = 2.0f;
  smax::gumbel_softmax(smax::make_view(x, {2}), smax::make_view(y, {2}), o);
  EXPECT_NEAR(y[0], 0.2689414, 1e-7);
  EXPECT_NEAR(y[1], 0.7310586, 1e-7);
  o.tau = 1.0f;
  o.hard = true;
  o.y_soft = smax::make_view(soft, {2});
  smax::gumbel_softmax(smax::make_view(x, {2}), smax::make_view(y, {2}), o);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_NEAR(soft[1], 0.8807971, 1e-7);
  // Straight-through gradient = gradient of the soft sample.
  const float dy[2] = {1.0f, -1.0f};
  float dx[2];
  smax::gumbel_softmax_backward(smax::make_view(soft, {2}), smax::make_view(dy, {2}),
                                smax::make_view(dx, {2}), 1.0f);
  const double y0 = 0.11920292202211755, y1 = 1.0 - y0, dot = y0 - y1;
  EXPECT_NEAR(dx[0], y0 * (1.0 - dot), 1e-7);
  EXPECT_NEAR(dx[1], y1 * (-1.0 - dot), 1e-7);
}

TEST(SamplingSpec, SoftNmsVectors) {
  const float boxes[8] = {0, 0, 10, 10, 0, 5, 10, 15};
  const float scores[2] = {0.9f, 0.8f};
  struct Case {
    SoftNmsMethod method;
    bool plus_one;
    double expect;
  };
  const Case cases[] = {{SoftNmsMethod::kLinear, false, 0.533333},
                        {SoftNmsMethod::kGaussian, false, 0.640590},
                        {SoftNmsMethod::kLinear, true, 0.5},
                        {SoftNmsMethod::kGaussian, true, 0.603872}};
  for (const Case& c : cases) {
    SoftNmsOptions o;
    o.method = c.method;
    o.plus_one = c.plus_one;
    const auto r = smax::soft_nms(smax::make_view(boxes, {2, 4}), smax::make_view(scores, {2}), o);
    ASSERT_EQ(r.indices, (std::vector<int64_t>{0, 1}));
    EXPECT_FLOAT_EQ(r.scores[0], 0.9f);
    EXPECT_NEAR(r.scores[1], c.expect, 1e-6) << smax::soft_nms_method_name(c.method) << " "
                                             << c.plus_one;
  }
  // Hard NMS: IoU 1/3 > 0.3 removes B; with Nt = 0.4 it survives untouched.
  SoftNmsOptions o;
  o.method = SoftNmsMethod::kHard;
  auto r = smax::soft_nms(smax::make_view(boxes, {2, 4}), smax::make_view(scores, {2}), o);
  EXPECT_EQ(r.indices, (std::vector<int64_t>{0}));
  o.iou_threshold = 0.4f;
  r = smax::soft_nms(smax::make_view(boxes, {2, 4}), smax::make_view(scores, {2}), o);
  EXPECT_EQ(r.indices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(r.scores[1], 0.8f);
  EXPECT_EQ(smax::parse_soft_nms_method("gaussian"), SoftNmsMethod::kGaussian);
  EXPECT_TRUE(throws_invalid([] { smax::parse_soft_nms_method("soft"); }, "soft"));
}

// f64 boxes and scores are read exactly and the kept scores written as the
// float64 values: two boxes of width 0.5 at x = 1e6, the second shifted by
// 205/1024 (f32's spacing there is 0.0625, so rounded to f32 the shift would
// be 0.1875), and a score that f32 cannot hold.
TEST(SamplingSpec, SoftNmsFloat64ReadsExactly) {
  const double d = 205.0 / 1024.0;
  double boxes[8] = {1e6, 0, 1e6 + 0.5, 1, 1e6 + d, 0, 1e6 + 0.5 + d, 1};
  double scores[2] = {0.9, 0.8 + 1e-12};
  std::vector<int64_t> idx(2);
  std::vector<double> kept(2);
  SoftNmsOptions o;
  o.method = SoftNmsMethod::kGaussian;
  const int64_t count =
      smax::soft_nms(smax_test::f64_view(boxes, {2, 4}), smax_test::f64_view(scores, {2}),
                     smax::make_index_view(idx.data(), {2}), smax_test::f64_view(kept.data(), {2}), o);
  ASSERT_EQ(count, 2);
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(kept[0], 0.9);
  // IoU = (0.5 - d) / (0.5 + d) = 307 / 717 (the coordinates are exact).
  const long double iou = 307.0L / 717.0L;
  const double want = static_cast<double>((0.8L + 1e-12L) * std::exp(-iou * iou / 0.5L));
  EXPECT_NEAR(kept[1], want, 4e-16 * want);
  // The f32 kept scores of the same call are those values rounded once.
  std::vector<float> kept32(2);
  smax::soft_nms(smax_test::f64_view(boxes, {2, 4}), smax_test::f64_view(scores, {2}),
                 smax::make_index_view(idx.data(), {2}), smax::make_view(kept32.data(), {2}), o);
  EXPECT_EQ(kept32[1], static_cast<float>(kept[1]));
}

TEST(SamplingSpec, NoiseDefinitionAndRange) {
  // The library's noise helper, the public gumbel_noise and the independent
  // reference agree exactly, on every axis of a strided 3-D tensor.
  const std::vector<int64_t> shape = {3, 5, 4};
  for (int axis = 0; axis < 3; ++axis) {
    Tensor g(shape, permuted_strides(shape, {1, 2, 0}, 1), 1);
    smax::gumbel_noise(g.view(), 77, axis);
    const auto r = ref::gumbel_noise(shape, axis, 77);
    for (int64_t i = 0; i < g.numel(); ++i) {
      ASSERT_EQ(g.at(i), static_cast<float>(r[static_cast<size_t>(i)])) << axis << " " << i;
    }
    EXPECT_TRUE(g.guards_intact());
  }
  double lo = 1e300, hi = -1e300, mean = 0.0;
  const int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    const double a = smax::kernels::gumbel(123, 4, static_cast<uint64_t>(i));
    ASSERT_EQ(a, ref::gumbel(123, 4, static_cast<uint64_t>(i)));
    lo = std::min(lo, a);
    hi = std::max(hi, a);
    mean += a / kDraws;
  }
  // Extremes of U: g in [-log(-log 2^-53), -log(-log(1 - 2^-53))] = [-3.61, 36.74].
  EXPECT_EQ(smax::kernels::gumbel_from_u64(0), -std::log(-std::log(0x1p-53)));
  EXPECT_EQ(smax::kernels::gumbel_from_u64(~uint64_t{0}), -std::log(-std::log(1.0 - 0x1p-53)));
  EXPECT_LT(smax::kernels::gumbel_from_u64(~uint64_t{0}), smax::kernels::kGumbelBound);
  EXPECT_GT(lo, -3.62);
  // Mean of the standard Gumbel: Euler's gamma; sd pi / sqrt(6) / sqrt(draws).
  EXPECT_NEAR(mean, 0.5772156649, 6.0 * 1.2825 / std::sqrt(double{kDraws}));
}

// ---------------------------------------------------------------------------
// gumbel_softmax
// ---------------------------------------------------------------------------

::testing::AssertionResult check_gumbel_softmax(const Tensor& x, GumbelSoftmaxOptions go,
                                                const SoftmaxOptions& o, bool with_soft,
                                                const std::string& what) {
  Tensor dst(x.shape(), {}, 1), soft(x.shape());
  if (with_soft) go.y_soft = soft.view();
  smax::gumbel_softmax(x.view(), dst.view(), go, o);
  const auto r = ref::gumbel_softmax(x.view(), go, o);
  auto res = check_probs(widen(dst.dense()), r.dst, 2e-6, what + " dst");
  if (res && with_soft) res = check_probs(widen(soft.dense()), r.soft, 2e-6, what + " y_soft");
  return and_guards_intact(res, dst.guards_intact() && soft.guards_intact(), what);
}

TEST_P(Sampling, GumbelSoftmaxRowsVsReference) {
  Rng rng("data");
  const std::vector<int64_t> sizes = sizes_with_vocab();
  for (const auto& [name, fill] : data_sets(1)) {
    for (int64_t n : sizes) {
      if (n > 1001 && name != "normal*20" && name != "one-nan" && name != "ties") continue;
      Tensor x({n > 1001 ? 1 : 3, n});
      fill(x, rng);
      for (int variant = 0; variant < 3; ++variant) {
        GumbelSoftmaxOptions go;
        go.seed = 11 + variant;
        go.tau = variant == 1 ? 0.3f : 1.0f;
        go.hard = variant == 2;
        ASSERT_TRUE(check_gumbel_softmax(x, go, {}, variant == 2, name + " n=" + std::to_string(n) +
                                                                     " variant " + std::to_string(variant)));
      }
    }
  }
}

TEST_P(Sampling, GumbelSoftmaxAnyAxisMasksInPlaceThreads) {
  Rng rng("data");
  const std::vector<int64_t> shape = {4, 6, 9};
  for (int axis = 0; axis < 3; ++axis) {
    Tensor x = any_axis_logits(shape, {2, 0, 1}, 1, axis, Data::kWide, rng);
    const BoolTensor keep = hide_every({shape[2]}, 4, 1);
    Tensor add({6, 1});
    add.fill([&](int64_t i) { return i == 3 ? -kInfF : rng.normal(); });
    SoftmaxOptions o = masked_along(axis, keep, &add);
    o.scale = 0.7f;
    GumbelSoftmaxOptions go;
    go.seed = 5;
    go.tau = 0.5f;
    ASSERT_TRUE(check_gumbel_softmax(x, go, o, false, "axis " + std::to_string(axis)));
    go.hard = true;
    ASSERT_TRUE(check_gumbel_softmax(x, go, o, true, "hard axis " + std::to_string(axis)));
    // Threads: bitwise equal. In place: same result as out of place.
    Tensor a(shape), b(shape);
    o.threads = 1;
    smax::gumbel_softmax(x.view(), a.view(), go, o);
    o.threads = 3;
    smax::gumbel_softmax(x.view(), b.view(), go, o);
    ASSERT_EQ(a.dense(), b.dense());
    Tensor inplace = x;
    go.hard = false;
    smax::gumbel_softmax(x.view(), a.view(), go, o);
    smax::gumbel_softmax(inplace.view(), inplace.view(), go, o);
    ASSERT_EQ(std::memcmp(a.dense().data(), inplace.dense().data(), a.numel() * sizeof(float)), 0);
  }
  // The hard index is gumbel_max's index for the same seed.
  Tensor x({50, 33});
  fill_rows(x, 1, Data::kUniform, rng);
  Tensor y({50, 33});
  I64Tensor idx({50});
  GumbelSoftmaxOptions go;
  go.seed = 99;
  go.hard = true;
  smax::gumbel_softmax(x.view(), y.view(), go);
  smax::gumbel_max(x.view(), idx.view(), 99);
  for (int64_t r = 0; r < 50; ++r) ASSERT_EQ(y.at(r * 33 + idx.at(r)), 1.0f);
}

TEST_P(Sampling, GumbelSoftmaxBackward) {
  Rng rng("data");
  for (int64_t n : {1, 2, 7, 33, 1000, 70000}) {
    for (float tau : {1.0f, 0.25f, 3.0f}) {
      Tensor x({3, n}), y({3, n}), dy({3, n}), dx({3, n}, {}, 1);
      fill_rows(x, 1, Data::kSomeNegInf, rng);
      fill_normal(dy, rng);
      GumbelSoftmaxOptions go;
      go.tau = tau;
      go.seed = 3;
      SoftmaxOptions o;
      o.temperature = 0.8f;
      smax::gumbel_softmax(x.view(), y.view(), go, o);
      smax::gumbel_softmax_backward(y.view(), dy.view(), dx.view(), tau, o);
      const auto r = ref::gumbel_softmax_backward(y.view(), dy.view(), tau, o);
      const double c = static_cast<float>(eff_scale(o) / tau);
      ASSERT_TRUE(check_backward(false, widen(dx.dense()), r, widen(y.dense()), widen(dy.dense()),
                                 Geometry({3, n}, 1), c, "n=" + std::to_string(n)));
      ASSERT_TRUE(dx.guards_intact());
      // In place over dy.
      Tensor d2 = dy;
      smax::gumbel_softmax_backward(y.view(), d2.view(), d2.view(), tau, o);
      ASSERT_EQ(d2.dense(), dx.dense());
    }
  }
  // Masked entries get exactly 0 whatever dy holds there.
  Tensor y({2, 5}), dy({2, 5}), dx({2, 5});
  y.fill([](int64_t i) { return i % 5 == 2 ? 0.0f : 0.25f; });
  dy.fill([](int64_t i) { return static_cast<float>(i) - 3.0f; });
  BoolTensor keep({5});
  keep.fill([](int64_t i) { return static_cast<uint8_t>(i != 2); });
  SoftmaxOptions o;
  o.bool_mask = keep.view();
  smax::gumbel_softmax_backward(y.view(), dy.view(), dx.view(), 2.0f, o);
  EXPECT_EQ(dx.at(2), 0.0f);
  EXPECT_EQ(dx.at(7), 0.0f);
}

// The oracle's VJP against central differences of a float64 forward
// y(x) = softmax((s x + g) / tau) (s / tau exact in f32 here).
TEST(SamplingSpec, ReferenceVjpMatchesFiniteDifferences) {
  Rng rng("data");
  const int64_t n = 9;
  const double s = 0.5, tau = 0.25;
  std::vector<double> x(n), g(n), dy(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = rng.normal();
    g[i] = ref::gumbel(8, 0, static_cast<uint64_t>(i));
    dy[i] = rng.normal();
  }
  auto forward = [&](const std::vector<double>& v) {
    std::vector<double> z(n), y(n);
    double m = -kInfD, sum = 0.0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, z[i] = (s * v[i] + g[i]) / tau);
    for (int64_t i = 0; i < n; ++i) sum += y[i] = std::exp(z[i] - m);
    for (double& e : y) e /= sum;
    return y;
  };
  const auto y = forward(x);
  std::vector<float> yf(y.begin(), y.end()), dyf(dy.begin(), dy.end());
  SoftmaxOptions o;
  o.scale = 0.5f;
  const auto vjp = ref::gumbel_softmax_backward(smax::make_view(yf.data(), {n}),
                                                smax::make_view(dyf.data(), {n}), 0.25f, o);
  for (int64_t i = 0; i < n; ++i) {
    const double h = 1e-6;
    auto xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    const auto yp = forward(xp), ym = forward(xm);
    double fd = 0.0;
    for (int64_t j = 0; j < n; ++j) fd += dy[j] * (yp[j] - ym[j]) / (2 * h);
    // vjp used the f32-rounded y and dy: relative 1e-6 covers that and the
    // O(h^2) truncation.
    EXPECT_NEAR(vjp[i], fd, 1e-6 * (1.0 + std::fabs(fd))) << i;
  }
}

// ---------------------------------------------------------------------------
// gumbel_max
// ---------------------------------------------------------------------------

TEST_P(Sampling, GumbelMaxExactlyTheOracle) {
  Rng rng("data");
  const std::vector<int64_t> sizes = sizes_with_vocab();
  for (const auto& [name, fill] : data_sets(1)) {
    for (int64_t n : sizes) {
      if (n == kVocab && name != "normal*20" && name != "ties" && name != "constant") continue;
      const int64_t rows = n > 1001 ? 2 : 5;
      Tensor x({rows, n});
      fill(x, rng);
      I64Tensor idx({rows});
      smax::gumbel_max(x.view(), idx.view(), 2024);
      const auto r = ref::gumbel_max(x.view(), 2024);
      for (int64_t i = 0; i < rows; ++i) {
        ASSERT_EQ(idx.at(i), r[static_cast<size_t>(i)]) << name << " n=" << n << " row " << i;
      }
      ASSERT_TRUE(idx.guards_intact());
    }
  }
}

TEST_P(Sampling, SimdPhiloxMatchesRandom123) {
  for (uint64_t j0 : {uint64_t{0}, uint64_t{5}, (uint64_t{1} << 32) - 3, uint64_t{123456789}}) {
    for (int64_t count : {0, 1, 2, 3, 4, 5, 7, 8, 9, 17, 33, 512}) {
      std::vector<uint32_t> hi(static_cast<size_t>(2 * count + 2), 0xDEADBEEFu);
      const uint64_t seed = 0x123456789ABCDEFull + j0, row = (uint64_t{7} << 32) + 11;
      smax::kernels::philox_hi_words(seed, row, j0, count, hi.data());
      for (int64_t q = 0; q < count; ++q) {
        uint32_t w[4];
        smax::kernels::philox_words(seed, row, j0 + static_cast<uint64_t>(q), w);
        ASSERT_EQ(hi[static_cast<size_t>(2 * q)], w[1]) << j0 << " " << count << " " << q;
        ASSERT_EQ(hi[static_cast<size_t>(2 * q + 1)], w[3]) << j0 << " " << count << " " << q;
      }
      ASSERT_EQ(hi[static_cast<size_t>(2 * count)], 0xDEADBEEFu);  // nothing past the end
    }
  }
}

TEST_P(Sampling, GumbelMaxAnyAxisLayoutAndThreads) {
  Rng rng("data");
  const std::vector<int64_t> shape = {5, 7, 6};
  for (int axis = 0; axis < 3; ++axis) {
    Tensor x = any_axis_logits(shape, {1, 2, 0}, 2, axis, Data::kUniform, rng);
    Tensor same(shape);  // the same logical tensor, another layout
    same.fill([&](int64_t i) { return x.at(i); });
    const BoolTensor keep = hide_every({shape[2]}, 3, 0);
    SoftmaxOptions o = masked_along(axis, keep);
    o.temperature = 0.5f;
    std::vector<int64_t> kshape = shape;
    kshape[static_cast<size_t>(axis)] = 1;
    I64Tensor a(drop_axis(shape, axis)), b(kshape, permuted_strides(kshape, {2, 1, 0}, 1));
    o.threads = 1;
    smax::gumbel_max(x.view(), a.view(), 31, o);
    o.threads = 3;
    smax::gumbel_max(same.view(), b.view(), 31, o);
    const auto r = ref::gumbel_max(x.view(), 31, o);
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_EQ(a.at(i), r[static_cast<size_t>(i)]) << axis;
      ASSERT_EQ(b.at(i), r[static_cast<size_t>(i)]) << axis;
    }
    ASSERT_TRUE(a.guards_intact() && b.guards_intact());
  }
}

TEST(SamplingStats, GumbelMaxFrequenciesMatchSoftmax) {
  // 400000 draws from one logit row (src broadcast with row stride 0).
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 2.5f, 0.5f, -3.0f, 1.7f, -kInfF};
  const int64_t n = static_cast<int64_t>(logits.size()), draws = 400000;
  TensorView src = smax::make_view(logits.data(), {draws, n}, {0, 1});
  std::vector<int64_t> out(static_cast<size_t>(draws));
  smax::gumbel_max(src, smax::make_index_view(out.data(), {draws}), 42);
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int64_t v : out) {
    ASSERT_TRUE(v >= 0 && v < n - 1) << v;  // never the masked entry
    ++counts[static_cast<size_t>(v)];
  }
  double m = 2.5, s = 0.0;
  std::vector<double> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  for (int64_t i = 0; i < n; ++i) p[i] = std::exp(static_cast<double>(logits[i]) - m) / s;
  int df = 0;
  const double stat = chi2(counts, p, draws, &df);
  EXPECT_LT(stat, chi2_bound(df)) << "df " << df;
}

// Fuzz regression (fuzz/regressions/sampling/gumbel_softmax_backward_denormal_y_scale_1e30):
// temperature 1e-30 (c = 1e30) and a denormal y: the kernel formed
// y (dy - dot) = 8.6e-42 first, a denormal with 4e-5 relative rounding,
// then multiplied by 1e30. The products are now formed in float64 and rounded
// once (scaling y first instead overflowed for a raw y near FLT_MAX). The same
// kernel serves softmax_backward.
TEST_P(Sampling, FuzzRegressionBackwardLargeScaleDenormalY) {
  const std::vector<float> y = {3.4240728e-41f, 0.5f, 0.25f};
  const std::vector<float> dy = {0.25f, -1.0f, 2.0f};
  SoftmaxOptions o;
  o.temperature = 1e-30f;
  const double c = static_cast<double>(1.0f / 1e-30f);
  double dot = 0.0;
  for (size_t i = 0; i < 3; ++i) dot += static_cast<double>(y[i]) * dy[i];
  for (int which = 0; which < 2; ++which) {
    std::vector<float> dx(3, 7.0f);
    if (which == 0) {
      smax::gumbel_softmax_backward(smax::make_view(y.data(), {3}), smax::make_view(dy.data(), {3}),
                                    smax::make_view(dx.data(), {3}), 1.0f, o);
    } else {
      smax::softmax_backward(smax::make_view(y.data(), {3}), smax::make_view(dy.data(), {3}),
                             smax::make_view(dx.data(), {3}), o);
    }
    for (size_t i = 0; i < 3; ++i) {
      const double want = c * y[i] * (dy[i] - dot);
      EXPECT_LE(std::fabs(dx[i] - want), 2e-6 * c * y[i] * (std::fabs(dy[i]) + std::fabs(dot)) + 1e-30)
          << which << " " << i << " " << dx[i] << " vs " << want;
    }
  }
  // fuzz/regressions/options/ssmax_backward_raw_y_flt_max_scale_first_nan:
  // a raw y of -FLT_MAX with dy - dot = 0 and a scale > 1 is 0, not
  // -inf * 0 = NaN (no f32 intermediate may overflow either).
  const std::vector<float> y2 = {-FLT_MAX, 0.0087890625f}, dy2 = {0.0f, 0.0f};
  SoftmaxOptions o2;
  o2.scale = 2.68f;
  std::vector<float> dx2(2, 7.0f);
  smax::softmax_backward(smax::make_view(y2.data(), {2}), smax::make_view(dy2.data(), {2}),
                         smax::make_view(dx2.data(), {2}), o2);
  for (float v : dx2) EXPECT_EQ(v, 0.0f);
}

SMAX_INSTANTIATE_PER_TARGET(Sampling);

}  // namespace
}  // namespace smax_test

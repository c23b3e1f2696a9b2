// tests/test_sampling.cc: Gumbel noise, gumbel_softmax (+ backward),
// gumbel_max, softmax_topk, sampling_filter, sample and soft_nms
// (include/smax/sampling.h) against the float64 oracles of
// src/reference/sampling.h, on every SIMD target.
//
// Bounds (the header's, enforced as written):
//  gumbel_softmax:   |y - ref| <= 2e-6 ref + 1e-36 (ref: float64 softmax of
//                    the same f32 z); hard one-hot exactly the oracle's.
//  backward:         |dx - ref| <= 2e-6 c |y| (|dy| + |<dy,y>|) + 1e-30.
//  softmax_topk:     indices exactly the oracle's (sort-based); probs
//                    |p - ref| <= 2e-6 ref + 1e-36 (renormalised: 1e-6).
//  gumbel_max, sample, sampling_filter: exactly the oracle's (noise, indices
//                    and filtered logits use exact arithmetic), except
//                    sampling_filter / sample rows whose top-p cut lies within
//                    the documented 1e-6 of the boundary ("fragile").
//  soft_nms:         exactly the oracle's (same float64 formulas).
// Statistics: gumbel_max and sample frequencies against softmax / the
// filtered distribution, Pearson chi-square against the chi-square quantile
// at p = 1e-6 (Wilson-Hilferty), fixed seeds: deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "reference/rows.h"
#include "reference/sampling.h"
#include "smax/sampling.h"
#include "test_util.h"

namespace smax_test {
namespace {

namespace ref = smax::reference;
using smax::GumbelSoftmaxOptions;
using smax::SampleOptions;
using smax::SoftmaxTopkOptions;
using smax::SoftNmsMethod;
using smax::SoftNmsOptions;
using I64Tensor = Array<int64_t>;

const std::vector<int64_t> kSizes = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000};
constexpr int64_t kVocab = 128256;

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// NaN <=> NaN; ref exactly 0 -> out exactly 0; |out - ref| <= rel |ref| + 1e-36.
::testing::AssertionResult check_probs(const std::vector<double>& out,
                                       const std::vector<double>& r, double rel,
                                       const std::string& what) {
  if (out.size() != r.size()) return ::testing::AssertionFailure() << what << ": size";
  for (size_t i = 0; i < r.size(); ++i) {
    const bool ok = std::isnan(r[i]) ? std::isnan(out[i])
                    : r[i] == 0.0    ? out[i] == 0.0
                                     : std::fabs(out[i] - r[i]) <= rel * std::fabs(r[i]) + 1e-36;
    if (!ok) {
      return ::testing::AssertionFailure() << what << ": element " << i << " = " << out[i]
                                           << ", reference " << r[i] << " (seed " << base_seed()
                                           << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Rows with many exact ties (values from a small set), some -inf.
void fill_ties(Tensor& t, Rng& rng) {
  t.fill([&](int64_t) {
    const int64_t k = rng.index(5);
    return k == 4 ? -kInfF : static_cast<float>(k);
  });
}

// Every distribution of test_util.h plus ties.
std::vector<std::pair<std::string, std::function<void(Tensor&, Rng&)>>> data_sets(int axis) {
  std::vector<std::pair<std::string, std::function<void(Tensor&, Rng&)>>> v;
  for (Data d : all_data()) {
    v.push_back({data_name(d), [d, axis](Tensor& t, Rng& rng) { fill_rows(t, axis, d, rng); }});
  }
  v.push_back({"ties", [](Tensor& t, Rng& rng) { fill_ties(t, rng); }});
  return v;
}

// Upper quantile of chi-square(df) at tail probability 1e-6 (Wilson-Hilferty;
// z = 4.753424 is the standard normal quantile at 1 - 1e-6).
double chi2_bound(int df) {
  const double z = 4.753424, a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Pearson chi-square of counts against probabilities (bins with expected
// count < 5 merged into one).
double chi2(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t draws,
            int* df) {
  double stat = 0.0, small_e = 0.0, small_o = 0.0;
  int bins = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(draws);
    if (e < 5.0) {
      small_e += e;
      small_o += static_cast<double>(counts[i]);
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++bins;
  }
  if (small_e > 0.0) {
    stat += (small_o - small_e) * (small_o - small_e) / std::max(small_e, 1e-300);
    ++bins;
  }
  *df = bins - 1;
  return stat;
}

SoftmaxOptions axis_only(int64_t axis) {
  SoftmaxOptions o;
  o.axis = axis;
  return o;
}

class Sampling : public TargetTest {};

// ---------------------------------------------------------------------------
// Hand vectors (docs/vectors.md, "Sampling and detection")
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
  if (res && !(dst.guards_intact() && soft.guards_intact())) {
    res = ::testing::AssertionFailure() << what << ": wrote outside the view";
  }
  return res;
}

TEST_P(Sampling, GumbelSoftmaxRowsVsReference) {
  Rng rng("data");
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back(kVocab);
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
    Tensor x(shape, permuted_strides(shape, {2, 0, 1}, 1), 1);
    fill_rows(x, axis, Data::kWide, rng);
    BoolTensor keep({shape[2]});
    keep.fill([](int64_t i) { return static_cast<uint8_t>(i % 4 != 1); });
    Tensor add({6, 1});
    add.fill([&](int64_t i) { return i == 3 ? -kInfF : rng.normal(); });
    SoftmaxOptions o;
    o.axis = axis;
    o.scale = 0.7f;
    o.bool_mask = keep.view();
    o.additive_mask = add.view();
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
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back(kVocab);
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
    Tensor x(shape, permuted_strides(shape, {1, 2, 0}, 2), 1);
    fill_rows(x, axis, Data::kUniform, rng);
    Tensor same(shape);  // the same logical tensor, another layout
    same.fill([&](int64_t i) { return x.at(i); });
    BoolTensor keep({shape[2]});
    keep.fill([](int64_t i) { return static_cast<uint8_t>(i % 3 != 0); });
    SoftmaxOptions o;
    o.axis = axis;
    o.temperature = 0.5f;
    o.bool_mask = keep.view();
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

// ---------------------------------------------------------------------------
// softmax_topk
// ---------------------------------------------------------------------------

::testing::AssertionResult check_topk(const Tensor& x, int64_t k, bool renorm,
                                      const SoftmaxOptions& o, const std::string& what) {
  const int axis = static_cast<int>(o.axis < 0 ? o.axis + static_cast<int64_t>(x.shape().size())
                                               : o.axis);
  std::vector<int64_t> oshape = x.shape();
  oshape[static_cast<size_t>(axis)] = k;
  Tensor probs(oshape, {}, 1);
  I64Tensor idx(oshape);
  SoftmaxTopkOptions t;
  t.k = k;
  t.renormalize = renorm;
  smax::softmax_topk(x.view(), probs.view(), idx.view(), t, o);
  const auto r = ref::softmax_topk(x.view(), t, o);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (idx.at(i) != r.indices[static_cast<size_t>(i)]) {
      return ::testing::AssertionFailure() << what << ": index " << i << " = " << idx.at(i)
                                           << ", reference " << r.indices[static_cast<size_t>(i)];
    }
  }
  auto res = check_probs(widen(probs.dense()), r.probs, renorm ? 1e-6 : 2e-6, what);
  if (res && !(probs.guards_intact() && idx.guards_intact())) {
    res = ::testing::AssertionFailure() << what << ": wrote outside the view";
  }
  return res;
}

TEST_P(Sampling, SoftmaxTopkRowsVsReference) {
  Rng rng("data");
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back(kVocab);
  for (const auto& [name, fill] : data_sets(1)) {
    for (int64_t n : sizes) {
      const bool big = n > 1001;
      Tensor x({big ? 1 : 4, n}, {}, 1);
      fill(x, rng);
      if (big && name != "normal*20" && name != "ties" && name != "one-nan" &&
          name != "some-inf" && name != "uniform[90,100]") {
        continue;
      }
      const std::vector<int64_t> ks =
          big ? std::vector<int64_t>{1, 50} : std::vector<int64_t>{0, 1, 5, 50, n / 2, n};
      for (int64_t k : ks) {
        if (k > n) continue;
        for (bool renorm : {false, true}) {
          if (renorm && (k == 0 || (big && k == 1))) continue;
          ASSERT_TRUE(check_topk(x, k, renorm, {}, name + " n=" + std::to_string(n) + " k=" +
                                                       std::to_string(k) + (renorm ? " renorm" : "")));
        }
      }
    }
  }
}

TEST_P(Sampling, SoftmaxTopkAnyAxisMasksThreadsEmptyRow) {
  Rng rng("data");
  const std::vector<int64_t> shape = {3, 40, 6};
  for (int axis = 0; axis < 3; ++axis) {
    Tensor x(shape, permuted_strides(shape, {2, 1, 0}, 1), 1);
    fill_rows(x, axis, Data::kWide, rng);
    BoolTensor keep({40, 1});
    keep.fill([](int64_t i) { return static_cast<uint8_t>(i % 5 != 0); });
    Tensor add({6});
    add.fill([&](int64_t i) { return i == 4 ? -kInfF : 0.5f * static_cast<float>(i); });
    SoftmaxOptions o;
    o.axis = axis;
    o.scale = 2.0f;
    o.bool_mask = keep.view();
    o.additive_mask = add.view();
    for (EmptyRow e : {EmptyRow::kZero, EmptyRow::kNan}) {
      o.empty_row = e;
      for (int64_t k : {int64_t{1}, int64_t{3}, shape[static_cast<size_t>(axis)]}) {
        ASSERT_TRUE(check_topk(x, k, false, o, "axis " + std::to_string(axis)));
        ASSERT_TRUE(check_topk(x, k, true, o, "renorm axis " + std::to_string(axis)));
      }
    }
  }
  // Threads bitwise equal on vocabulary rows.
  Tensor x({6, 32000});
  fill_rows(x, 1, Data::kWide, rng);
  Tensor p1({6, 50}), p2({6, 50});
  I64Tensor i1({6, 50}), i2({6, 50});
  SoftmaxOptions o;
  o.threads = 1;
  smax::softmax_topk(x.view(), p1.view(), i1.view(), 50, o);
  for (int threads : {2, 3}) {
    o.threads = threads;
    smax::softmax_topk(x.view(), p2.view(), i2.view(), 50, o);
    EXPECT_EQ(std::memcmp(p1.dense().data(), p2.dense().data(), 300 * sizeof(float)), 0);
    EXPECT_EQ(i1.dense(), i2.dense());
  }
  // Ties across the whole row: the lowest indices, probabilities 1/n.
  Tensor c({1, 1000});
  c.fill([](int64_t) { return 3.0f; });
  Tensor pc({1, 4});
  I64Tensor ic({1, 4});
  smax::softmax_topk(c.view(), pc.view(), ic.view(), 4);
  EXPECT_EQ(ic.dense(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_NEAR(pc.at(0), 1e-3, 2e-9);
  EXPECT_NE(smax::kernels::softmax_topk_kernel_name().find("__" + [] {
    std::string s = smax::active_target();
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }() + "_"), std::string::npos);
}

// ---------------------------------------------------------------------------
// sampling_filter and sample
// ---------------------------------------------------------------------------

std::vector<SampleOptions> sample_cases() {
  std::vector<SampleOptions> v;
  const float temps[] = {1.0f, 0.7f, 0.0f, 2.0f};
  const int64_t ks[] = {0, 1, 5, 50};
  const float ps[] = {1.0f, 0.9f, 0.5f, 0.05f};
  uint64_t seed = 1;
  for (float t : temps) {
    for (int64_t k : ks) {
      for (float p : ps) {
        SampleOptions s;
        s.temperature = t;
        s.top_k = k;
        s.top_p = p;
        s.seed = seed++;
        v.push_back(s);
      }
    }
  }
  return v;
}

// Compares sampling_filter and sample with the oracle; returns the number of
// fragile rows skipped.
::testing::AssertionResult check_filter(const Tensor& x, const SampleOptions& s,
                                        const SoftmaxOptions& o, const std::string& what,
                                        int64_t* fragile_rows) {
  Tensor dst(x.shape(), {}, 1);
  smax::sampling_filter(x.view(), dst.view(), s, o);
  const auto F = ref::sampling_filter(x.view(), s, o, 2e-6);
  const ref::RefRows R = ref::ref_rows("test", x.view(), o, true);
  const ref::RefRows D = ref::ref_rows("test", dst.view(), axis_only(o.axis), false);
  const auto Rv = ref::ref_rows("test", x.view(), o, true);  // shape / order helper
  std::vector<int64_t> ishape = drop_axis(x.shape(), static_cast<int>(R.axis));
  I64Tensor idx(ishape);
  smax::sample(x.view(), idx.view(), s, o);
  const auto samples = ref::sample(x.view(), s, o);
  // F.values is dense logical; compare row by row through the row view.
  Tensor fv(x.shape());
  for (int64_t i = 0; i < fv.numel(); ++i) fv.at(i) = static_cast<float>(F.values[static_cast<size_t>(i)]);
  const ref::RefRows FR = ref::ref_rows("test", fv.view(), axis_only(o.axis), false);
  (void)Rv;
  for (int64_t r = 0; r < R.rows; ++r) {
    if (F.fragile[static_cast<size_t>(r)]) {
      ++*fragile_rows;
      continue;
    }
    for (int64_t i = 0; i < R.n; ++i) {
      const double a = D.row(r)[i], b = FR.row(r)[i];
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) {
        return ::testing::AssertionFailure() << what << ": row " << r << " element " << i << " = "
                                             << a << ", reference " << b;
      }
    }
    if (idx.at(r) != samples[static_cast<size_t>(r)]) {
      return ::testing::AssertionFailure() << what << ": sample of row " << r << " = "
                                           << idx.at(r) << ", reference "
                                           << samples[static_cast<size_t>(r)];
    }
  }
  if (!dst.guards_intact() || !idx.guards_intact()) {
    return ::testing::AssertionFailure() << what << ": wrote outside the view";
  }
  return ::testing::AssertionSuccess();
}

TEST_P(Sampling, FilterAndSampleVsReference) {
  Rng rng("data");
  // Fragile rows (a top-p cut within 2e-6 of the boundary) are counted on
  // continuous data only: rows with exact ties or constant rows hit the
  // boundary exactly by construction and are skipped without counting.
  int64_t fragile = 0, fragile_discrete = 0, rows = 0;
  const auto cases = sample_cases();
  size_t next = 0;  // rotate through the cases: 4 per (data, n), 2 for long rows
  for (const auto& [name, fill] : data_sets(1)) {
    const bool continuous = name == "uniform[-4,4]" || name == "normal*20" ||
                            name == "uniform[90,100]" || name == "uniform[-100,-1]";
    for (int64_t n : kSizes) {
      Tensor x({3, n});
      fill(x, rng);
      for (int j = 0; j < (n > 1001 ? 2 : 4); ++j) {
        const size_t c = next++ % cases.size();
        if (continuous) rows += 3;
        ASSERT_TRUE(check_filter(x, cases[c], {}, name + " n=" + std::to_string(n) + " case " +
                                                      std::to_string(c),
                                 continuous ? &fragile : &fragile_discrete));
      }
    }
  }
  // Vocabulary rows with nucleus sampling over the full row (the top-p loop
  // that widens its candidate set) and with top-k.
  Tensor v({2, kVocab});
  fill_rows(v, 1, Data::kWide, rng);
  for (float p : {0.9f, 0.999f}) {
    SampleOptions s;
    s.top_p = p;
    s.temperature = 0.8f;
    s.seed = 9;
    ASSERT_TRUE(check_filter(v, s, {}, "vocab top_p", &fragile));
    s.top_k = 50;
    ASSERT_TRUE(check_filter(v, s, {}, "vocab top_k top_p", &fragile));
    rows += 4;
  }
  // Each continuous row is fragile with probability ~ 2 * 2e-6 / (mass of
  // the entry at the cut); 1% is far above that and far below a real bug.
  EXPECT_LE(fragile * 100, rows) << "more than 1% of rows too close to the top-p cut";
}

// top_p alone: the candidates above the (m, d) threshold, the bisection of
// the boundary, the fallback (top_p so close to 1 that rounding may leave the
// candidates short of the target), kept sets larger than kPrefixLoopMax
// (sampled through gumbel_argmax over the masked row) and small ones; flat,
// peaked, masked and huge rows, temperatures.
TEST_P(Sampling, TopPAloneThresholdPaths) {
  Rng rng("top_p_alone");
  int64_t fragile = 0, fragile_discrete = 0, rows = 0;
  const float ps[] = {0.05f, 0.5f, 0.9f, 0.999f, 0.99999994f};
  uint64_t seed = 100;
  for (Data d : {Data::kUniform, Data::kWide, Data::kNegative, Data::kSomeNegInf, Data::kHuge,
                 Data::kHigh}) {
    for (int64_t n : {int64_t{2}, int64_t{33}, int64_t{1001}, int64_t{8193}}) {
      Tensor x({3, n});
      fill_rows(x, 1, d, rng);
      // Exact ties (huge, masked rows) land on the cut by construction.
      const bool continuous_data = d != Data::kHuge && d != Data::kSomeNegInf;
      for (float p : ps) {
        // top_p = 1 - 2^-24 cuts within 2e-6 of the boundary on every row
        // (the fallback path): compared where not fragile, not counted.
        const bool continuous = continuous_data && p < 0.9999f;
        SampleOptions s;
        s.top_p = p;
        s.seed = seed++;
        s.temperature = (seed % 3 == 0) ? 0.6f : 1.0f;
        ASSERT_TRUE(check_filter(x, s, {}, std::string(data_name(d)) + " n=" + std::to_string(n) +
                                               " top_p=" + std::to_string(p),
                                 continuous ? &fragile : &fragile_discrete));
        if (continuous) rows += 3;
      }
    }
  }
  // Long rows with top_p = 0.999 cut deep in the tail, where an entry's mass
  // is ~1e-5 of the total: a 2e-6 tolerance makes ~1 row in 20 fragile
  // there (11 of 192 rows with n up to 32000). Every other row matched the
  // oracle exactly.
  EXPECT_LE(fragile * 10, rows) << "more than 10% of rows too close to the top-p cut";
}

TEST_P(Sampling, FilterAnyAxisMasksInPlaceThreads) {
  Rng rng("data");
  const std::vector<int64_t> shape = {4, 30, 5};
  int64_t fragile = 0;
  for (int axis = 0; axis < 3; ++axis) {
    Tensor x(shape, permuted_strides(shape, {0, 2, 1}, 1), 1);
    fill_rows(x, axis, Data::kWide, rng);
    BoolTensor keep({30, 1});
    keep.fill([](int64_t i) { return static_cast<uint8_t>(i % 7 != 3); });
    SoftmaxOptions o;
    o.axis = axis;
    o.temperature = 4.0f;
    o.bool_mask = keep.view();
    SampleOptions s;
    s.top_k = 3;
    s.top_p = 0.7f;
    s.temperature = 0.5f;
    s.seed = 4;
    ASSERT_TRUE(check_filter(x, s, o, "axis " + std::to_string(axis), &fragile));
    Tensor a(shape), b = x;
    o.threads = 1;
    smax::sampling_filter(x.view(), a.view(), s, o);
    o.threads = 3;
    smax::sampling_filter(b.view(), b.view(), s, o);  // in place
    ASSERT_EQ(std::memcmp(a.dense().data(), b.dense().data(), a.numel() * sizeof(float)), 0);
    I64Tensor i1(drop_axis(shape, axis)), i2(drop_axis(shape, axis));
    o.threads = 1;
    smax::sample(x.view(), i1.view(), s, o);
    o.threads = 2;
    smax::sample(x.view(), i2.view(), s, o);
    ASSERT_EQ(i1.dense(), i2.dense());
  }
  EXPECT_EQ(fragile, 0);
}

TEST(SamplingStats, SampleFrequenciesMatchTheFilteredSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 2.5f, 0.5f, -3.0f, 1.7f, 2.4f, 0.2f, -0.5f};
  const int64_t n = static_cast<int64_t>(logits.size()), draws = 300000;
  const TensorView src = smax::make_view(logits.data(), {draws, n}, {0, 1});
  struct Case {
    float t;
    int64_t k;
    float p;
  };
  for (const Case& c : {Case{1.0f, 0, 1.0f}, Case{0.7f, 5, 1.0f}, Case{1.3f, 0, 0.8f},
                        Case{0.9f, 6, 0.7f}}) {
    SampleOptions s;
    s.temperature = c.t;
    s.top_k = c.k;
    s.top_p = c.p;
    s.seed = 1234;
    std::vector<int64_t> out(static_cast<size_t>(draws));
    smax::sample(src, smax::make_index_view(out.data(), {draws}), s);
    // The distribution of row 0 (every row has the same logits).
    const auto F = ref::sampling_filter(smax::make_view(logits.data(), {1, n}), s);
    ASSERT_FALSE(F.fragile[0]);
    std::vector<double> p(static_cast<size_t>(n), 0.0);
    for (const auto& [i, q] : F.dist[0]) p[static_cast<size_t>(i)] = q;
    std::vector<int64_t> counts(static_cast<size_t>(n));
    for (int64_t v : out) {
      ASSERT_TRUE(v >= 0 && v < n);
      ASSERT_GT(p[static_cast<size_t>(v)], 0.0) << "sampled a filtered entry " << v;
      ++counts[static_cast<size_t>(v)];
    }
    int df = 0;
    const double stat = chi2(counts, p, draws, &df);
    EXPECT_LT(stat, chi2_bound(df)) << "T " << c.t << " k " << c.k << " p " << c.p;
  }
  // Greedy: always the first max.
  SampleOptions g;
  g.temperature = 0.0f;
  int64_t out[3];
  smax::sample(smax::make_view(logits.data(), {3, n}, {0, 1}), smax::make_index_view(out, {3}), g);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[2], 3);
}

TEST(SamplingSpec, SpecialRows) {
  // Empty, all-masked, NaN and +inf rows of every sampler.
  const float rows[4][3] = {{-kInfF, -kInfF, -kInfF}, {0.0f, kNanF, 1.0f}, {0.0f, kInfF, 1.0f},
                            {1.0f, 1.0f, 0.0f}};
  int64_t idx[4];
  smax::gumbel_max(smax::make_view(&rows[0][0], {4, 3}), smax::make_index_view(idx, {4}), 1);
  EXPECT_EQ(idx[0], -1);
  EXPECT_EQ(idx[1], -1);
  EXPECT_EQ(idx[2], -1);
  EXPECT_GE(idx[3], 0);
  SampleOptions g;
  g.temperature = 0.0f;
  smax::sample(smax::make_view(&rows[0][0], {4, 3}), smax::make_index_view(idx, {4}), g);
  EXPECT_EQ(idx[0], -1);
  EXPECT_EQ(idx[1], -1);
  EXPECT_EQ(idx[2], 1);  // greedy: +inf is the max
  EXPECT_EQ(idx[3], 0);  // first max
  float probs[4][2];
  int64_t top[4][2];
  smax::softmax_topk(smax::make_view(&rows[0][0], {4, 3}), smax::make_view(&probs[0][0], {4, 2}),
                     smax::make_index_view(&top[0][0], {4, 2}), 2);
  EXPECT_EQ(top[0][0], 0);
  EXPECT_EQ(top[0][1], 1);
  EXPECT_EQ(probs[0][0], 0.0f);
  EXPECT_EQ(top[1][0], 1);  // NaN ranks first
  EXPECT_EQ(top[1][1], 2);
  EXPECT_TRUE(std::isnan(probs[1][0]) && std::isnan(probs[2][1]));
  EXPECT_EQ(top[2][0], 1);
  EXPECT_EQ(top[3][0], 0);
  EXPECT_EQ(top[3][1], 1);
  // n = 0: k = 0 is fine, outputs of per-row samplers are -1.
  float none[1];
  int64_t e[2] = {7, 7};
  smax::gumbel_max(smax::make_view(none, {2, 0}), smax::make_index_view(e, {2}), 1);
  EXPECT_EQ(e[0], -1);
  smax::softmax_topk(smax::make_view(none, {2, 0}), smax::make_view(none, {2, 0}),
                     smax::make_index_view(e, {2, 0}), 0);
  // n = 1.
  const float one = 5.0f;
  float y = 0.0f;
  smax::gumbel_softmax(smax::make_view(&one, {1}), smax::make_view(&y, {1}));
  EXPECT_EQ(y, 1.0f);
}

// ---------------------------------------------------------------------------
// Errors: smax::Error naming the argument, nothing written.
// ---------------------------------------------------------------------------

TEST(SamplingErrors, ThrowBeforeWriting) {
  Tensor x({3, 8}), y({3, 8}), soft({3, 8}), noise({3, 7});
  x.fill([](int64_t i) { return static_cast<float>(i % 5); });
  I64Tensor idx({3}), idx_bad({4}), topi({3, 2});
  Tensor topp({3, 2}), topp_bad({3, 3});
  y.poison();
  auto untouched = [&] {
    return y.guards_intact() && y.dense() == std::vector<float>(24, kSentinel) &&
           idx.dense() == std::vector<int64_t>(3, Array<int64_t>::sentinel()) &&
           topp.dense() == std::vector<float>(6, kSentinel);
  };
  GumbelSoftmaxOptions go;
  go.tau = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "tau"));
  go.tau = kNanF;
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "tau"));
  go = {};
  go.noise = noise.view();
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "noise"));
  go = {};
  go.y_soft = y.view();
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "y_soft"));
  SoftmaxOptions bad_axis;
  bad_axis.axis = 2;
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), {}, bad_axis); }, "axis"));
  EXPECT_TRUE(throws_invalid(
      [&] { smax::gumbel_softmax_backward(x.view(), x.view(), y.view(), -1.0f); }, "tau"));
  EXPECT_TRUE(throws_invalid(
      [&] { smax::gumbel_softmax_backward(x.view(), noise.view(), y.view(), 1.0f); }, "dy"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_max(x.view(), y.view(), 1); }, "indices"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_max(x.view(), idx_bad.view(), 1); }, "indices"));
  TensorView alias = smax::make_index_view(static_cast<int64_t*>(x.view().data), {3});
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_max(x.view(), alias, 1); }, "overlaps"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp.view(), topi.view(), 9); }, "k"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp.view(), topi.view(), -1); }, "k"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp_bad.view(), topi.view(), 2); }, "probs"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp.view(), topp.view(), 2); }, "indices"));
  TensorView probs1 = topp.view();
  probs1.shape[1] = 1;  // [3, 1] strides [2, 1]
  const TensorView overlap = smax::make_index_view(static_cast<int64_t*>(topp.view().data), {3, 1});
  EXPECT_TRUE(throws_invalid(
      [&] { smax::softmax_topk(x.view(), probs1, overlap, 1); }, "overlaps"));
  SampleOptions s;
  s.temperature = -1.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), s); }, "temperature"));
  s = {};
  s.top_k = -2;
  EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), s); }, "top_k"));
  for (float p : {0.0f, 1.5f, kNanF}) {
    s = {};
    s.top_p = p;
    EXPECT_TRUE(throws_invalid([&] { smax::sampling_filter(x.view(), y.view(), s); }, "top_p"));
    EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), s); }, "top_p"));
  }
  SoftmaxOptions t0;
  t0.temperature = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), {}, t0); }, "temperature"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_noise(idx.view(), 1); }, "dst"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_noise(y.view(), 1, 5); }, "axis"));
  EXPECT_TRUE(untouched());
}

// ---------------------------------------------------------------------------
// Soft-NMS
// ---------------------------------------------------------------------------

TEST(SoftNms, RandomBoxesVsReference) {
  Rng rng("boxes");
  for (int64_t n : {0, 1, 2, 5, 40, 300}) {
    Tensor boxes({n, 4}, permuted_strides({n, 4}, {1, 0}), 1);  // column-major too
    Tensor scores({n});
    for (int64_t i = 0; i < n; ++i) {
      const float x1 = rng.uniform(0.0f, 100.0f), y1 = rng.uniform(0.0f, 100.0f);
      const float w = rng.index(10) == 0 ? 0.0f : rng.uniform(1.0f, 40.0f);
      boxes.at(4 * i) = x1;
      boxes.at(4 * i + 1) = y1;
      boxes.at(4 * i + 2) = x1 + w;
      boxes.at(4 * i + 3) = y1 + rng.uniform(0.0f, 40.0f);
      scores.at(i) = rng.index(8) == 0 ? 0.5f : rng.uniform(0.0f, 1.0f);  // ties
    }
    for (SoftNmsMethod m : {SoftNmsMethod::kHard, SoftNmsMethod::kLinear, SoftNmsMethod::kGaussian}) {
      for (bool plus_one : {false, true}) {
        SoftNmsOptions o;
        o.method = m;
        o.plus_one = plus_one;
        o.score_threshold = m == SoftNmsMethod::kGaussian ? 0.05f : 0.001f;
        const auto a = smax::soft_nms(boxes.view(), scores.view(), o);
        const auto r = ref::soft_nms(boxes.view(), scores.view(), o);
        ASSERT_EQ(a.indices, r.indices) << n << " " << smax::soft_nms_method_name(m);
        ASSERT_EQ(a.scores, r.scores);
        for (size_t j = 1; j < a.scores.size(); ++j) {
          // Scores only decay, so the selection order is non-increasing.
          ASSERT_LE(a.scores[j], a.scores[j - 1]);
        }
        I64Tensor ki({n});
        Tensor ks({n});
        const int64_t count = smax::soft_nms(boxes.view(), scores.view(), ki.view(), ks.view(), o);
        ASSERT_EQ(count, static_cast<int64_t>(r.indices.size()));
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(ki.at(j), j < count ? r.indices[static_cast<size_t>(j)] : -1);
          ASSERT_EQ(ks.at(j), j < count ? r.scores[static_cast<size_t>(j)] : 0.0f);
        }
        ASSERT_TRUE(ki.guards_intact() && ks.guards_intact());
      }
    }
  }
}

TEST(SoftNms, Errors) {
  float b[8] = {0, 0, 10, 10, 0, 5, 10, 15};
  float s[2] = {0.9f, 0.8f};
  const TensorView boxes = smax::make_view(b, {2, 4}), scores = smax::make_view(s, {2});
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(smax::make_view(b, {2, 3}), scores); }, "boxes"));
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, smax::make_view(s, {1})); }, "scores"));
  SoftNmsOptions o;
  o.sigma = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "sigma"));
  o = {};
  o.iou_threshold = 1.5f;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "iou_threshold"));
  o = {};
  o.score_threshold = kInfF;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "score_threshold"));
  o = {};
  o.method = static_cast<SoftNmsMethod>(7);
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "method"));
  b[2] = -1.0f;  // x2 < x1
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores); }, "box 0"));
  o = {};
  o.plus_one = true;  // width x2 - x1 + 1 = 0: a valid (empty) box with +1
  EXPECT_EQ(smax::soft_nms(boxes, scores, o).indices.size(), 2u);
  b[2] = kNanF;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores); }, "box 0"));
  b[2] = 10.0f;
  s[1] = kNanF;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores); }, "score 1"));
  s[1] = 0.8f;
  int64_t ki[3] = {5, 5, 5};
  float ks[2] = {5, 5};
  EXPECT_TRUE(throws_invalid(
      [&] { smax::soft_nms(boxes, scores, smax::make_index_view(ki, {3}), smax::make_view(ks, {2})); },
      "indices"));
  EXPECT_TRUE(throws_invalid(
      [&] { smax::soft_nms(boxes, scores, smax::make_index_view(ki, {2}), smax::make_view(s, {2})); },
      "kept_scores"));
  EXPECT_EQ(ki[0], 5);
  EXPECT_EQ(ks[0], 5.0f);
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

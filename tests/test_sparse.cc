// tests/test_sparse.cc: sparse normalisers on every SIMD target: hand vectors
// (docs/vectors.md), sizes and adversarial data vs the float64 oracles, long
// rows, entmax-1.5 thresholds, axes, masks, in place, threads.
// Helpers, bounds and the fixture: tests/sparse_util.h.
#include "sparse_util.h"

namespace smax_test {
namespace {

// ---------------------------------------------------------------------------
// Hand vectors (docs/normalizers.md, "Sparse normalisers")
// ---------------------------------------------------------------------------
std::vector<float> run1(const Case& c, std::vector<float> x) {
  std::vector<float> y(x.size());
  forward(c, smax::make_view(x.data(), {static_cast<int64_t>(x.size())}),
          smax::make_view(y.data(), {static_cast<int64_t>(y.size())}), {});
  return y;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST_P(Sparse, SpecVectors) {
  const Case sm{Case::kSparsemax}, e15{Case::kEntmax15};
  expect_near(run1(sm, {-2, 0, 0.5f}), {0, 0.25, 0.75}, 1e-7);
  expect_near(run1(sm, {0.5f, 0.3f, 0.1f}), {8.0 / 15, 1.0 / 3, 2.0 / 15}, 1e-7);
  expect_near(run1(sm, {1, 2, 3}), {0, 0, 1}, 0);
  expect_near(run1(e15, {-2, 0, 0.5f}), {0, 0.3260074, 0.6739926}, 1e-7);
  expect_near(run1(e15, {1, 0}), {0.8307189, 0.1692811}, 1e-7);
  expect_near(run1(e15, {3, 0}), {1, 0}, 0);
  const Case b133{Case::kBisect, 1.33};
  expect_near(run1(b133, {-1, 0, 0.5f}), {0.0460, 0.3276, 0.6264}, 1e-4);
  expect_near(run1(b133, {1, 2, 3.5f}), {0.0026, 0.1012, 0.8963}, 1e-4);
  // alpha = 1.5 bisection equals exact 1.5-entmax; alpha = 2 equals sparsemax.
  expect_near(run1({Case::kBisect, 1.5}, {-2, 0, 0.5f}), {0, 0.3260074, 0.6739926}, 2e-7);
  expect_near(run1({Case::kBisect, 2.0}, {0.5f, 0.3f, 0.1f}), {8.0 / 15, 1.0 / 3, 2.0 / 15}, 2e-7);
  expect_near(run1({Case::kTopK, 2, 2}, {1, 2, 3, 0}), {0, 0.2689414, 0.7310586, 0}, 1e-7);
  {
    // Regression: a support of one entry without renormalisation must give
    // exactly that entry 1 (the bisection used to drift to tau_hi: 1/n).
    std::vector<float> x = {0, 3}, y(2);
    smax::EntmaxBisectOptions p;
    p.alpha = 1.7f;
    p.ensure_sum_one = false;
    smax::entmax_bisect(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}), p);
    expect_near(y, {0, 1}, 1e-6);
  }

  // VJPs.
  std::vector<float> y = {0, 0.25f, 0.75f}, g = {1, 2, 4}, dx(3);
  smax::sparsemax_backward(smax::make_view(y.data(), {3}), smax::make_view(g.data(), {3}),
                           smax::make_view(dx.data(), {3}));
  expect_near(dx, {0, -1, 1}, 0);
  std::vector<float> y15 = {0, 0.3260074f, 0.6739926f}, g15 = {0, 1, 0};
  smax::entmax15_backward(smax::make_view(y15.data(), {3}), smax::make_view(g15.data(), {3}),
                          smax::make_view(dx.data(), {3}));
  expect_near(dx, {0, 0.336760, -0.336760}, 1e-6);

  // Losses (reduction none).
  auto loss1 = [](int which, std::vector<float> x, int64_t t, int64_t k = 1) {
    float out = 0;
    int64_t tg = t;
    LossOptions lo;
    lo.reduction = Reduction::kNone;
    const auto xv = smax::make_view(x.data(), {1, static_cast<int64_t>(x.size())});
    const auto tv = smax::make_index_view(&tg, {1});
    const auto ov = smax::make_view(&out, {1});
    if (which == 0) smax::sparsemax_loss(xv, tv, ov, lo);
    if (which == 1) smax::entmax15_loss(xv, tv, ov, lo);
    if (which == 2) smax::sparse_softmax_loss(xv, tv, ov, k, {}, lo);
    if (which == 3) {
      EntmaxBisectOptions p;
      p.alpha = 1.5f;
      smax::entmax_bisect_loss(xv, tv, ov, p, lo);
    }
    return out;
  };
  EXPECT_NEAR(loss1(0, {-2, 0, 0.5f}, 1), 0.5625, 1e-7);
  EXPECT_NEAR(loss1(0, {-2, 0, 0.5f}, 2), 0.0625, 1e-8);
  EXPECT_NEAR(loss1(1, {-2, 0, 0.5f}, 2), 0.184371, 1e-6);
  EXPECT_NEAR(loss1(1, {-2, 0, 0.5f}, 1), 0.684371, 1e-6);
  EXPECT_NEAR(loss1(3, {-2, 0, 0.5f}, 2), 0.184371, 1e-6);
  EXPECT_NEAR(loss1(2, {1, 2, 3, 0}, 2, 2), 0.3132617, 1e-6);
  EXPECT_NEAR(loss1(2, {1, 2, 3, 0}, 0, 2), 2.3132617, 1e-6);
}

// ---------------------------------------------------------------------------
// Sizes and adversarial data vs the float64 oracles
// ---------------------------------------------------------------------------
TEST_P(Sparse, SizesAndData) {
  const std::vector<int64_t> sizes = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001};
  Rng rng("data");
  int failures = 0;
  for (const Case& c : all_cases()) {
    for (int64_t n : sizes) {
      for (Data d : all_data()) {
        Tensor src({3, n}, {}, n % 3), dst({3, n});
        fill_rows(src, 1, d, rng);
        const auto res = run_case(c, src, dst, {}, std::string(data_name(d)) + " n=" + std::to_string(n));
        EXPECT_TRUE(res);
        if (!res && ++failures > 8) FAIL() << "too many failures";
      }
      Tensor src({2, n}), dst({2, n});
      fill_ties(src, rng);
      EXPECT_TRUE(run_case(c, src, dst, {}, "ties n=" + std::to_string(n)));
    }
  }
}

TEST_P(Sparse, LongRows) {
  Rng rng("long");
  for (const Case& c : {Case{Case::kSparsemax}, Case{Case::kEntmax15}, Case{Case::kBisect, 1.5},
                        Case{Case::kBisect, 1.3}, Case{Case::kTopK, 2, 50}}) {
    for (int64_t n : {32000, 128256}) {
      for (Data d : {Data::kUniform, Data::kWide, Data::kConstant, Data::kNan, Data::kSomeNegInf,
                     Data::kHuge, Data::kAllNegInf}) {
        if (n == 128256 && d == Data::kConstant && c.which == Case::kBisect && c.alpha != 1.5) continue;
        Tensor src({1, n}), dst({1, n});
        fill_rows(src, 1, d, rng);
        EXPECT_TRUE(run_case(c, src, dst, {}, std::string(data_name(d)) + " n=" + std::to_string(n)));
      }
      Tensor src({1, n}), dst({1, n});
      src.fill([&](int64_t) { return rng.uniform(-0.05f, 0.05f); });  // every entry a candidate
      EXPECT_TRUE(run_case(c, src, dst, {}, "dense-support n=" + std::to_string(n)));
      if (n == 32000) {
        fill_ties(src, rng);
        EXPECT_TRUE(run_case(c, src, dst, {}, "ties n=" + std::to_string(n)));
      }
    }
  }
}

// The whole-row 1.5-entmax path (rows up to kEntmax15WholeRowMax): the
// kernel's certified threshold against the exact sort algorithm in
// float64, on data that stresses the certificate (ties, an entry exactly at
// the threshold, huge and tiny spreads, masked entries); it must either
// match or decline (NaN: the op then takes the sorted path), and decline
// rarely on ordinary rows. Then the op across the path boundary.
double sorted_entmax15_tau(const std::vector<float>& t, float m) {
  std::vector<double> z;
  for (float x : t) {
    if (x > -std::numeric_limits<float>::infinity()) {
      z.push_back(0.5 * (static_cast<double>(x) - static_cast<double>(m)));
    }
  }
  std::sort(z.begin(), z.end(), std::greater<double>());
  double tau = 0.0;
  smax::detail::sparse::entmax15_support(z.data(), static_cast<int64_t>(z.size()), &tau);
  return tau;
}

TEST_P(Sparse, Entmax15WholeRowThreshold) {
  namespace kn = smax::kernels;
  Rng rng("e15-whole-row");
  int rows = 0, declined = 0, ordinary_rows = 0, ordinary_declined = 0;
  auto check = [&](const std::vector<float>& t, const std::string& what, bool ordinary) {
    const int64_t n = static_cast<int64_t>(t.size());
    float m = -std::numeric_limits<float>::infinity();
    for (float x : t) m = std::max(m, x);
    ASSERT_TRUE(std::isfinite(m)) << what;
    const double tau = kn::entmax15_threshold(t.data(), n, m);
    const double want = sorted_entmax15_tau(t, m);
    ++rows;
    ordinary_rows += ordinary;
    if (std::isnan(tau)) {
      ++declined;
      ordinary_declined += ordinary;
      return;
    }
    // Both are float64 thresholds in z units (|tau| <= 1) from sums of <= n terms.
    EXPECT_NEAR(tau, want, 1e-16 * (64.0 + static_cast<double>(n)) * 4.0) << what << " n=" << n;
    std::vector<float> y(t.size());
    kn::entmax15_store(t.data(), n, m, tau, y.data());
    double sum = 0.0;
    for (size_t i = 0; i < t.size(); ++i) {
      const double v = std::max(0.5 * (static_cast<double>(t[i]) - m) - want, 0.0);
      EXPECT_NEAR(y[i], v * v, 2 * kU * v * v + 1e-16 * (64.0 + static_cast<double>(n)) * 2)
          << what << " i=" << i;
      sum += y[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << what;
  };
  for (int64_t n : {1, 2, 3, 5, 8, 9, 17, 64, 128, 129, 255, 1000, 2048}) {
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> t(static_cast<size_t>(n));
      for (auto& x : t) x = rng.normal();
      check(t, "normal", true);
      for (auto& x : t) x = rng.normal(0.0f, 20.0f);
      check(t, "wide", true);
      for (auto& x : t) x = rng.uniform(-0.01f, 0.01f);  // every entry in the support
      check(t, "narrow", true);
      for (auto& x : t) x = static_cast<float>(rng.index(4)) * 0.5f;
      check(t, "ties", false);
      for (auto& x : t) x = rng.normal() + 1e6f;  // f32 stage A rounds coarsely here
      check(t, "offset 1e6", false);
      for (auto& x : t) x = rng.bernoulli(0.3) ? -std::numeric_limits<float>::infinity() : rng.normal();
      t[0] = 0.0f;
      check(t, "masked", false);
      for (auto& x : t) x = rng.bernoulli(0.5) ? 1e30f * rng.normal() : 1e-40f * rng.normal();
      t[0] = std::fabs(t[0]);
      check(t, "huge", false);
    }
    // An entry exactly at the threshold: four tied maxima c (y = 1/4 each,
    // tau* = -1/2 in z units) and entries at c - 1 (z = -1/2: y = 0).
    for (float c : {0.0f, 3.25f, -1024.0f, 1.5e7f}) {
      std::vector<float> t(static_cast<size_t>(std::max<int64_t>(n, 5)), c - 3.0f);
      for (int i = 0; i < 4; ++i) t[static_cast<size_t>(i) * t.size() / 5] = c;
      t.back() = c - 1.0f;
      t[t.size() / 2 + 1] = c - 1.0f;
      check(t, "entry at the threshold c=" + std::to_string(c), false);
    }
  }
  // Declining is the exception: the op's speed rests on it.
  EXPECT_LE(ordinary_declined * 100, ordinary_rows) << declined << " of " << rows << " declined";
}

TEST_P(Sparse, Entmax15PathBoundary) {
  using smax::detail::sparse::kEntmax15WholeRowMax;
  Rng rng("e15-boundary");
  const Case c{Case::kEntmax15};
  for (int64_t n : {kEntmax15WholeRowMax - 1, kEntmax15WholeRowMax, kEntmax15WholeRowMax + 1}) {
    for (Data d : all_data()) {
      Tensor src({2, n}), dst({2, n});
      fill_rows(src, 1, d, rng);
      EXPECT_TRUE(run_case(c, src, dst, {}, std::string(data_name(d)) + " n=" + std::to_string(n)));
    }
    Tensor src({2, n}), dst({2, n});
    fill_ties(src, rng);
    EXPECT_TRUE(run_case(c, src, dst, {}, "ties n=" + std::to_string(n)));
  }
}

// Every axis of a strided 3-D tensor, bool + additive masks, scale and
// temperature, empty-row policies, in place, and 1/2/3 threads bitwise equal.
TEST_P(Sparse, AxesMasksInPlaceThreads) {
  Rng rng("axes");
  const std::vector<int64_t> shape = {4, 9, 6};
  BoolTensor keep({9, 6});
  keep.fill([&](int64_t i) { return static_cast<uint8_t>(rng.bernoulli(0.7) || i % 6 == 1); });
  Tensor add({6});
  add.fill([&](int64_t i) { return i == 4 ? -kInfF : rng.normal(); });
  for (const Case& c : all_cases()) {
    for (int axis = 0; axis < 3; ++axis) {
      for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
        Tensor src(shape, permuted_strides(shape, {2, 0, 1}, 1), 1);
        src.fill([&](int64_t) { return 2.0f * rng.normal(); });
        src.at(5) = -kInfF;
        SoftmaxOptions o;
        o.axis = axis;
        o.scale = 1.5f;
        o.temperature = 0.75f;
        o.bool_mask = keep.view();
        o.additive_mask = add.view();
        o.empty_row = er;
        Tensor dst(shape, permuted_strides(shape, {1, 2, 0}, 2));
        std::vector<float> first;
        for (int threads : {1, 2, 3}) {
          o.threads = threads;
          ASSERT_TRUE(run_case(c, src, dst, o, "axis " + std::to_string(axis)));
          const auto v = dst.dense();
          if (threads == 1) {
            first = v;
          } else {
            ASSERT_EQ(0, std::memcmp(first.data(), v.data(), v.size() * sizeof(float)))
                << c.name() << " threads " << threads;
          }
        }
        // In place (dst is src).
        Tensor inplace = src;
        const auto expect = reference_fwd(c, src.view(), o);
        forward(c, inplace.view(), inplace.view(), o);
        EXPECT_TRUE(check_fwd(c, dense(inplace), expect, "in place", shape[static_cast<size_t>(axis)])) << c.name();
        EXPECT_TRUE(inplace.guards_intact());
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(Sparse);

}  // namespace
}  // namespace smax_test

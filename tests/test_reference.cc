// tests/test_reference.cc: the float64 oracle itself, checked against the
// hand-checkable vectors of docs/numerics.md ("Hand vectors (softmax family)") and against
// central finite differences (float64) for its VJPs; then the library against the same
// hand vectors for every algorithm.
#include <cmath>
#include <vector>

#include "reference/reference.h"
#include "test_util.h"

namespace smax_test {
namespace {

namespace ref = smax::reference;

Tensor make(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  Tensor t(shape);
  t.fill([&](int64_t i) { return values[static_cast<size_t>(i)]; });
  return t;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                     double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
  }
}

const double kLn2 = std::log(2.0), kLn3 = std::log(3.0);

// ---- hand vectors (docs/numerics.md, "Hand vectors (softmax family)") -------

TEST(Reference, SoftmaxHandVectors) {
  Tensor a = make({3}, {1, 2, 3});
  expect_near_all(ref::softmax(a.view()), {0.0900306, 0.2447285, 0.6652410}, 1e-7,
                  "softmax [1,2,3]");
  // ln2, ln3 are rounded to f32 first (the reference uses the f32 logits), so
  // the result is 1/6, 1/3, 1/2 to about 1e-7.
  Tensor b = make({3}, {0.0f, static_cast<float>(kLn2), static_cast<float>(kLn3)});
  expect_near_all(ref::softmax(b.view()), {1.0 / 6, 1.0 / 3, 1.0 / 2}, 2e-7,
                  "softmax [0,ln2,ln3]");
  // Shift invariance (the two-pass example): [1000,1001,1002] == [1,2,3].
  Tensor c = make({3}, {1000, 1001, 1002});
  const std::vector<double> yc = ref::softmax(c.view()), ya = ref::softmax(a.view());
  for (size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(yc[i], ya[i]);
}

TEST(Reference, LogSoftmaxAndLogSumExpHandVectors) {
  Tensor a = make({3}, {1, 2, 3});
  expect_near_all(ref::log_softmax(a.view()), {-2.4076060, -1.4076060, -0.4076060}, 1e-7,
                  "log_softmax [1,2,3]");
  // Online state (3, 1.5032147): LSE = 3 + ln(1.5032147).
  expect_near_all(ref::logsumexp(a.view()), {3.0 + std::log(1.5032147)}, 1e-7,
                  "logsumexp [1,2,3]");
  // Two-pass state (1.1238754, 1446): LSE = ln(1.1238754) + 1446 ln 2.
  Tensor c = make({3}, {1000, 1001, 1002});
  expect_near_all(ref::logsumexp(c.view()), {std::log(1.1238754) + 1446 * kLn2}, 1e-6,
                  "logsumexp [1000,1001,1002]");
}

TEST(Reference, SoftmaxVjpHandVector) {
  Tensor y = make({3}, {1.0f / 6, 1.0f / 3, 1.0f / 2});
  Tensor g = make({3}, {1, 0, 0});
  expect_near_all(ref::softmax_backward(y.view(), g.view()), {5.0 / 36, -1.0 / 18, -1.0 / 12},
                  1e-7, "softmax VJP");
  // log-softmax VJP: dx = g - exp(y) * sum g.
  Tensor ly = make({3}, {static_cast<float>(-std::log(6.0)), static_cast<float>(-kLn3),
                         static_cast<float>(-kLn2)});
  Tensor lg = make({3}, {1, 2, -4});
  expect_near_all(ref::log_softmax_backward(ly.view(), lg.view()),
                  {1 + 1.0 / 6, 2 + 1.0 / 3, -4 + 1.0 / 2}, 1e-7, "log_softmax VJP");
}

TEST(Reference, Temperature) {
  SoftmaxOptions o;
  o.temperature = 2.0f;
  Tensor x = make({2}, {0.0f, static_cast<float>(2 * kLn2)});
  expect_near_all(ref::softmax(x.view(), o), {1.0 / 3, 2.0 / 3}, 1e-7, "T=2");
  // dT = -(1/T^2) sum x_i y_i (g_i - <g,y>) = -(1/T) sum x_i dx_i, where
  // dx = (1/T) y (g - <g,y>) is the VJP the reference returns.
  Tensor x2 = make({3}, {0, 1, 3});
  const std::vector<double> y = ref::softmax(x2.view(), o);
  Tensor yf = make({3}, {static_cast<float>(y[0]), static_cast<float>(y[1]),
                         static_cast<float>(y[2])});
  Tensor g = make({3}, {1, 0, 0});
  const std::vector<double> dx = ref::softmax_backward(yf.view(), g.view(), o);
  double dT = 0;
  for (int i = 0; i < 3; ++i) dT += -(1.0 / 2.0) * x2.at(i) * dx[static_cast<size_t>(i)];
  EXPECT_NEAR(dT, 0.0742180, 1e-6);
}

TEST(Reference, LogitsAreTheF32Values) {
  // t = fl(fl(x * s) + mask), s = fl(scale / temperature), then double.
  SoftmaxOptions o;
  o.scale = 0.3f;
  o.temperature = 0.7f;
  Tensor m = make({1, 3}, {0.1f, -0.25f, 1e-3f});
  o.additive_mask = m.view();
  Tensor x = make({1, 3}, {1.1f, 2.7f, -3.3f});
  const float s = o.scale / o.temperature;
  double t[3], mx = -kInfD, sum = 0;
  for (int i = 0; i < 3; ++i) {
    const float p = x.at(i) * s;
    const float q = p + m.at(i);
    t[i] = q;
    mx = std::max(mx, t[i]);
  }
  for (double v : t) sum += std::exp(v - mx);
  const std::vector<double> lse = ref::logsumexp(x.view(), o);
  ASSERT_EQ(lse.size(), 1u);
  EXPECT_DOUBLE_EQ(lse[0], mx + std::log(sum));
  const std::vector<double> ls = ref::log_softmax(x.view(), o);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(ls[static_cast<size_t>(i)], (t[i] - mx) - std::log(sum));
}

// ---- special values ---------------------------------------------------------

TEST(Reference, SpecialValues) {
  for (float bad : {kNanF, kInfF}) {
    Tensor x = make({2, 3}, {1, bad, 2, 1, 2, 3});
    const std::vector<double> y = ref::softmax(x.view());
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(i)]));
    for (int i = 3; i < 6; ++i) EXPECT_FALSE(std::isnan(y[static_cast<size_t>(i)]));
    const std::vector<double> l = ref::logsumexp(x.view());
    EXPECT_TRUE(std::isnan(l[0]));
    EXPECT_FALSE(std::isnan(l[1]));
  }
  // -inf entries: exactly 0 (softmax), -inf (log_softmax).
  Tensor x = make({4}, {-kInfF, 0, -kInfF, 0});
  expect_near_all(ref::softmax(x.view()), {0, 0.5, 0, 0.5}, 0, "-inf entries");
  EXPECT_EQ(ref::log_softmax(x.view())[0], -kInfD);
  // all -inf: empty_row policy.
  Tensor e = make({1, 3}, {-kInfF, -kInfF, -kInfF});
  SoftmaxOptions o;
  for (double v : ref::softmax(e.view(), o)) EXPECT_EQ(v, 0.0);
  for (double v : ref::log_softmax(e.view(), o)) EXPECT_EQ(v, -kInfD);
  EXPECT_EQ(ref::logsumexp(e.view(), o)[0], -kInfD);
  o.empty_row = EmptyRow::kNan;
  for (double v : ref::softmax(e.view(), o)) EXPECT_TRUE(std::isnan(v));
  for (double v : ref::log_softmax(e.view(), o)) EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(std::isnan(ref::logsumexp(e.view(), o)[0]));
  // n = 1 and n = 0.
  Tensor one = make({2, 1}, {7.5f, -3.0f});
  expect_near_all(ref::softmax(one.view()), {1, 1}, 0, "n=1 softmax");
  expect_near_all(ref::log_softmax(one.view()), {0, 0}, 0, "n=1 log_softmax");
  expect_near_all(ref::logsumexp(one.view()), {7.5, -3.0}, 0, "n=1 logsumexp");
  Tensor zero({2, 0});
  EXPECT_TRUE(ref::softmax(zero.view()).empty());
  const std::vector<double> lz = ref::logsumexp(zero.view());
  ASSERT_EQ(lz.size(), 2u);
  EXPECT_EQ(lz[0], -kInfD);
  EXPECT_EQ(lz[1], -kInfD);
  // Backward: masked entries (y = 0 / y = -inf) get exactly 0.
  Tensor y = make({3}, {0.0f, 0.25f, 0.75f});
  Tensor g = make({3}, {3.0f, -1.0f, 2.0f});
  EXPECT_EQ(ref::softmax_backward(y.view(), g.view())[0], 0.0);
  Tensor ly = make({3}, {-kInfF, std::log(0.25f), std::log(0.75f)});
  EXPECT_EQ(ref::log_softmax_backward(ly.view(), g.view())[0], 0.0);
}

TEST(Reference, MasksEqualExplicitLogits) {
  Rng rng("masks");
  const int64_t rows = 4, cols = 9;
  Tensor x({rows, cols});
  x.fill([&](int64_t) { return rng.normal(); });
  Tensor add({1, cols});
  add.fill([&](int64_t i) { return i % 4 == 1 ? -kInfF : rng.normal(); });
  BoolTensor keep({rows, 1});
  keep.fill([&](int64_t i) { return static_cast<uint8_t>(i == 2 ? 0 : 1); });
  SoftmaxOptions o;
  o.additive_mask = add.view();
  o.bool_mask = keep.view();
  Tensor explicit_t({rows, cols});
  explicit_t.fill([&](int64_t i) {
    const int64_t r = i / cols, c = i % cols;
    return r == 2 ? -kInfF : x.at(i) + add.at(c);
  });
  const std::vector<double> a = ref::softmax(x.view(), o), b = ref::softmax(explicit_t.view());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
  // The same mask given as a stride-0 broadcast view of full rank.
  TensorView add0 = add.view();
  add0.shape[0] = rows;
  add0.strides[0] = 0;
  o.additive_mask = add0;
  const std::vector<double> c = ref::softmax(x.view(), o);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], c[i]) << i;
}

TEST(Reference, StridedViewsMatchContiguous) {
  Rng rng("strided");
  const std::vector<int64_t> shape = {3, 4, 5};
  Tensor c(shape);
  c.fill([&](int64_t) { return rng.normal(); });
  Tensor p(shape, permuted_strides(shape, {2, 0, 1}, 2), 1);
  p.fill([&](int64_t i) { return c.at(i); });
  for (int axis = -3; axis < 3; ++axis) {
    SoftmaxOptions o;
    o.axis = axis;
    EXPECT_EQ(ref::softmax(c.view(), o), ref::softmax(p.view(), o)) << axis;
    EXPECT_EQ(ref::logsumexp(c.view(), o), ref::logsumexp(p.view(), o)) << axis;
  }
  EXPECT_EQ(ref::to_dense(c.view()), ref::to_dense(p.view()));
}

// ---- finite differences of the VJPs (float64) --------------------------------
//
// The logits are multiples of 2^-8 and the step is h = 2^-12, so x +- h is
// exact in f32 and the reference forward evaluates the perturbed rows exactly
// in float64; with s a power of two, x * s is exact too. L(x) = <g, f(x)>
// with random g; central differences have O(h^2) ~ 1e-8 truncation error.

void fd_check(bool log, float scale, int64_t n) {
  Rng rng("fd" + std::to_string(log) + std::to_string(n));
  SoftmaxOptions o;
  o.scale = scale;
  Tensor x({n}), g({n});
  x.fill([&](int64_t) { return std::round(rng.uniform(-4, 4) * 256.0f) / 256.0f; });
  g.fill([&](int64_t) { return rng.normal(); });
  auto fwd = [&](const Tensor& t) {
    return log ? ref::log_softmax(t.view(), o) : ref::softmax(t.view(), o);
  };
  auto loss = [&](const Tensor& t) {
    const std::vector<double> y = fwd(t);
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += g.at(i) * y[static_cast<size_t>(i)];
    return l;
  };
  const std::vector<double> y = fwd(x);
  Tensor yf({n});
  yf.fill([&](int64_t i) { return static_cast<float>(y[static_cast<size_t>(i)]); });
  const std::vector<double> vjp = log ? ref::log_softmax_backward(yf.view(), g.view(), o)
                                      : ref::softmax_backward(yf.view(), g.view(), o);
  const float h = 1.0f / 4096;
  double gnorm = 0;
  for (int64_t i = 0; i < n; ++i) gnorm += std::fabs(g.at(i));
  for (int64_t i = 0; i < n; ++i) {
    Tensor xp = x, xm = x;
    xp.at(i) = x.at(i) + h;
    xm.at(i) = x.at(i) - h;
    const double fd = (loss(xp) - loss(xm)) / (2.0 * h);
    EXPECT_NEAR(vjp[static_cast<size_t>(i)], fd, 1e-6 * scale * (1 + gnorm))
        << (log ? "log_softmax" : "softmax") << " VJP, n=" << n << " i=" << i;
  }
}

TEST(Reference, FiniteDifferenceSoftmaxVjp) {
  for (int64_t n : {1, 2, 3, 7, 16}) {
    fd_check(false, 1.0f, n);
    fd_check(false, 0.5f, n);
  }
}

TEST(Reference, FiniteDifferenceLogSoftmaxVjp) {
  for (int64_t n : {1, 2, 3, 7, 16}) {
    fd_check(true, 1.0f, n);
    fd_check(true, 4.0f, n);
  }
}

// ---- validation ---------------------------------------------------------------

TEST(Reference, Validation) {
  Tensor x({2, 3});
  x.fill([](int64_t i) { return static_cast<float>(i); });
  SoftmaxOptions o;
  o.axis = 2;
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(x.view(), o); }, "axis"));
  o.axis = -3;
  EXPECT_TRUE(throws_invalid([&] { ref::logsumexp(x.view(), o); }, "axis"));
  o = {};
  o.scale = 0;
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(x.view(), o); }, "scale"));
  o = {};
  o.temperature = -1;
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(x.view(), o); }, "temperature"));
  o = {};
  o.algorithm = static_cast<Algorithm>(99);
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(x.view(), o); }, "algorithm"));
  o = {};
  Tensor m({3, 3});
  o.additive_mask = m.view();
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(x.view(), o); }, "additive_mask"));
  o = {};
  o.bool_mask = x.view();  // f32, not bool
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(x.view(), o); }, "bool_mask"));
  TensorView bad = x.view();
  bad.shape[0] = -1;
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(bad); }, "src"));
  bad = x.view();
  bad.shape[0] = int64_t{1} << 40;
  bad.shape[1] = int64_t{1} << 40;
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(bad); }, "src"));
  bad = x.view();
  bad.data = nullptr;
  EXPECT_TRUE(throws_invalid([&] { ref::softmax(bad); }, "src"));
  Tensor dy({3, 2});
  EXPECT_TRUE(throws_invalid([&] { ref::softmax_backward(x.view(), dy.view()); }, "dy"));
}

// ---- the library on the same hand vectors, every algorithm -------------------

class HandVectors : public ::testing::TestWithParam<Algorithm> {};

TEST_P(HandVectors, Library) {
  SoftmaxOptions o;
  o.algorithm = GetParam();
  Tensor a = make({3}, {1, 2, 3}), out({3});
  smax::softmax(a.view(), out.view(), o);
  EXPECT_TRUE(check_softmax(to_dense(out.view()), {0.0900306, 0.2447285, 0.6652410}, "softmax"))
      << "(hand values have 7 digits)";
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(out.at(i), (std::vector<double>{0.0900306, 0.2447285, 0.6652410})[i], 1e-7);
  }
  smax::log_softmax(a.view(), out.view(), o);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(out.at(i), (std::vector<double>{-2.4076060, -1.4076060, -0.4076060})[i], 5e-7);
  }
  Tensor lse({1});
  smax::logsumexp(a.view(), lse.view(), o);
  EXPECT_NEAR(lse.at(0), 3.4076060, 5e-7);
  Tensor c = make({3}, {1000, 1001, 1002});
  smax::softmax(c.view(), out.view(), o);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(out.at(i), (std::vector<double>{0.0900306, 0.2447285, 0.6652410})[i], 1e-7);
  }
  Tensor b = make({3}, {0.0f, static_cast<float>(kLn2), static_cast<float>(kLn3)});
  smax::softmax(b.view(), out.view(), o);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out.at(i), (i + 1) / 6.0, 3e-7);
  Tensor g = make({3}, {1, 0, 0}), dx({3});
  smax::softmax_backward(out.view(), g.view(), dx.view(), o);
  const double want[] = {5.0 / 36, -1.0 / 18, -1.0 / 12};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(dx.at(i), want[i], 3e-7);
  SoftmaxOptions t = o;
  t.temperature = 2.0f;
  Tensor x2 = make({2}, {0.0f, static_cast<float>(2 * kLn2)}), y2({2});
  smax::softmax(x2.view(), y2.view(), t);
  EXPECT_NEAR(y2.at(0), 1.0 / 3, 3e-7);
  EXPECT_NEAR(y2.at(1), 2.0 / 3, 3e-7);
  // Masks: exact zeros and the empty-row policy.
  Tensor xm = make({2, 3}, {1, 2, 3, 4, 5, 6}), ym({2, 3});
  BoolTensor keep({2, 3});
  const uint8_t kv[] = {1, 0, 1, 0, 0, 0};
  keep.fill([&](int64_t i) { return kv[i]; });
  SoftmaxOptions om = o;
  om.bool_mask = keep.view();
  smax::softmax(xm.view(), ym.view(), om);
  EXPECT_EQ(ym.at(1), 0.0f);
  EXPECT_NEAR(ym.at(0), 1.0 / (1.0 + std::exp(2.0)), 2e-7);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(ym.at(i), 0.0f);
  om.empty_row = EmptyRow::kNan;
  smax::softmax(xm.view(), ym.view(), om);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(ym.at(i)));
  EXPECT_FALSE(std::isnan(ym.at(0)));
}

INSTANTIATE_TEST_SUITE_P(All, HandVectors, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           std::string s = algo_str(info.param);
                           for (char& ch : s) {
                             if (ch == '-') ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace smax_test

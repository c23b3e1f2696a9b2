// tests/test_clipped_softmax.cc: clipped softmax and its VJP
// (include/smax/rescaled.h) against the float64 reference
// (src/reference/rescaled.h), within the bounds the header documents
// (computed once, by ref::clipped_softmax_bound_row / _vjp_bound_row), on
// every SIMD target: hand vectors (docs/vectors.md), finite differences of
// the reference VJP, every adversarial data kind, every axis with strides,
// masks and scale, thread-count determinism, in place, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/rescaled.h"
#include "reference/rows.h"
#include "smax/rescaled.h"
#include "test_util.h"

namespace smax_test {
namespace {

namespace ref = smax::reference;
using ref::Row;
using smax::ClippedSoftmaxOptions;

ClippedSoftmaxOptions params(float gamma, float zeta) {
  ClippedSoftmaxOptions p;
  p.gamma = gamma;
  p.zeta = zeta;
  return p;
}

// The settings tested: the default (the paper's BERT setting), clipping on
// both sides, gamma = 0 with zeta = 1 (plain softmax) and a strong stretch.
const std::vector<ClippedSoftmaxOptions>& settings() {
  static const std::vector<ClippedSoftmaxOptions> v = {
      ClippedSoftmaxOptions{}, params(-0.1f, 1.5f), params(0.0f, 1.0f), params(-3.0f, 1.0f)};
  return v;
}

// Rows of a view as they are (no logit transform), in row order.
ref::RefRows plain_rows(const TensorView& v, const SoftmaxOptions& o) {
  SoftmaxOptions plain;
  plain.axis = o.axis;
  return ref::ref_rows("test", v, plain, false);
}
Row row(const ref::RefRows& R, int64_t r) { return Row(R.row(r), R.row(r) + R.n); }

::testing::AssertionResult check_forward(const Tensor& src, Tensor& dst, const SoftmaxOptions& o,
                                         const ClippedSoftmaxOptions& p, const std::string& what) {
  dst.poison();
  smax::clipped_softmax(src.view(), dst.view(), p, o);
  if (!dst.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const ref::RefRows R = ref::ref_rows("test", src.view(), o);
  const ref::RefRows O = plain_rows(dst.view(), o);
  CheckResult res;
  int64_t index = 0;
  const double a = static_cast<double>(p.zeta) - static_cast<double>(p.gamma);
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t = row(R, r), out = row(O, r);
    const Row y = ref::clipped_softmax_row(t, p.gamma, p.zeta, o.empty_row);
    const Row b = ref::clipped_softmax_bound_row(t, p.gamma, p.zeta, o.empty_row);
    const Row pr = ref::softmax_row(t, o.empty_row);
    for (int64_t i = 0; i < R.n; ++i) {
      // Exact 0 where masked, or clipped below by more than the bound of z.
      const bool exact = t[i] == -kInfD || a * pr[i] + p.gamma < -b[i];
      check_element(res, index++, static_cast<float>(out[i]), y[i], b[i], exact);
    }
  }
  return to_assertion(res, what);
}

::testing::AssertionResult check_backward(const Tensor& src, const Tensor& dy, Tensor& dst,
                                          const SoftmaxOptions& o,
                                          const ClippedSoftmaxOptions& p,
                                          const std::string& what) {
  dst.poison();
  smax::clipped_softmax_backward(src.view(), dy.view(), dst.view(), p, o);
  if (!dst.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const ref::RefRows R = ref::ref_rows("test", src.view(), o);
  const ref::RefRows G = plain_rows(dy.view(), o);
  const ref::RefRows O = plain_rows(dst.view(), o);
  CheckResult res;
  int64_t index = 0;
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t = row(R, r), g = row(G, r), out = row(O, r);
    const Row dx = ref::clipped_softmax_vjp_row(t, g, p.gamma, p.zeta, R.scale, o.empty_row);
    const Row b =
        ref::clipped_softmax_vjp_bound_row(t, g, p.gamma, p.zeta, R.scale, o.empty_row);
    for (int64_t i = 0; i < R.n; ++i) {  // exact 0 where masked only
      check_element(res, index++, static_cast<float>(out[i]), dx[i], b[i], t[i] == -kInfD);
    }
  }
  return to_assertion(res, what);
}

// Hand vectors (docs/normalizers.md, "Rescaled and rectified softmaxes"): x = [ln 6, ln 3, 0]
// gives p = [0.6, 0.3, 0.1].
TEST(ClippedSoftmaxSpec, HandVectors) {
  std::vector<float> x = {static_cast<float>(std::log(6.0)), static_cast<float>(std::log(3.0)),
                          0.0f};
  std::vector<float> y(3), g = {1.0f, 0.0f, 0.0f}, dx(3);
  auto view = [](std::vector<float>& v) { return smax::make_view(v.data(), {3}); };
  auto expect = [](const std::vector<float>& got, const std::vector<double>& want,
                   const char* what) {
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6) << what << " [" << i << "]";
    }
  };
  // gamma = -0.25, zeta = 1.25: a = 1.5, z = [0.65, 0.2, -0.1].
  smax::clipped_softmax(view(x), view(y), params(-0.25f, 1.25f));
  expect(y, {0.65, 0.2, 0.0}, "forward, clipped below");
  EXPECT_EQ(y[2], 0.0f) << "a clipped entry is exactly 0";
  // u = [1.5, 0, 0] (entry 2 clipped), <u, p> = 0.9.
  smax::clipped_softmax_backward(view(x), view(g), view(dx), params(-0.25f, 1.25f));
  expect(dx, {0.36, -0.27, -0.09}, "backward, clipped below");
  // x = [ln 8, 0, 0]: p = [0.8, 0.1, 0.1]; gamma = -0.1, zeta = 1.5: a = 1.6,
  // z = [1.18, 0.06, 0.06].
  x = {static_cast<float>(std::log(8.0)), 0.0f, 0.0f};
  smax::clipped_softmax(view(x), view(y), params(-0.1f, 1.5f));
  expect(y, {1.0, 0.06, 0.06}, "forward, clipped above");
  EXPECT_EQ(y[0], 1.0f) << "a clipped entry is exactly 1";
  g = {1.0f, 1.0f, 0.0f};  // u = [0 (clipped), 1.6, 0], <u, p> = 0.16
  smax::clipped_softmax_backward(view(x), view(g), view(dx), params(-0.1f, 1.5f));
  expect(dx, {-0.128, 0.144, -0.016}, "backward, clipped above");
  // gamma = 0, zeta = 1 is softmax.
  std::vector<float> s(3);
  smax::clipped_softmax(view(x), view(y), params(0.0f, 1.0f));
  smax::softmax(view(x), view(s));
  EXPECT_EQ(0, std::memcmp(y.data(), s.data(), sizeof(float) * 3));
}

// The reference VJP is the derivative of the reference forward (central
// differences away from the clip thresholds).
TEST(ClippedSoftmaxSpec, ReferenceVjpMatchesFiniteDifferences) {
  Rng rng("fd");
  for (int trial = 0; trial < 40; ++trial) {
    const ClippedSoftmaxOptions p = settings()[static_cast<size_t>(trial) % settings().size()];
    const size_t n = 2 + static_cast<size_t>(trial % 7);
    Row t(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      t[i] = 2.0 * rng.normal();
      g[i] = rng.normal();
    }
    if (trial % 5 == 0) t[0] = -INFINITY;  // a masked entry
    const double sigma = 1.0;
    const Row dx = ref::clipped_softmax_vjp_row(t, g, p.gamma, p.zeta, sigma, EmptyRow::kZero);
    const Row y0 = ref::clipped_softmax_row(t, p.gamma, p.zeta, EmptyRow::kZero);
    const Row pr = ref::softmax_row(t, EmptyRow::kZero);
    // Skip rows with an entry near a threshold (the map is not smooth there).
    bool near = false;
    for (size_t i = 0; i < n; ++i) {
      const double z = (static_cast<double>(p.zeta) - p.gamma) * pr[i] + p.gamma;
      near = near || (std::fabs(z) < 1e-4 && t[i] != -INFINITY) || std::fabs(z - 1.0) < 1e-4;
    }
    if (near) continue;
    for (size_t j = 0; j < n; ++j) {
      if (t[j] == -INFINITY) {
        EXPECT_EQ(dx[j], 0.0);
        continue;
      }
      const double h = 1e-6;
      Row tp = t, tm = t;
      tp[j] += h;
      tm[j] -= h;
      const Row yp = ref::clipped_softmax_row(tp, p.gamma, p.zeta, EmptyRow::kZero);
      const Row ym = ref::clipped_softmax_row(tm, p.gamma, p.zeta, EmptyRow::kZero);
      double fd = 0.0;
      for (size_t i = 0; i < n; ++i) fd += g[i] * (yp[i] - ym[i]) / (2 * h);
      EXPECT_NEAR(dx[j], fd, 1e-6 * (1.0 + std::fabs(fd))) << "trial " << trial << " j " << j;
    }
    (void)y0;
  }
}

class ClippedSoftmax : public RecordingTargetTest {};

TEST_P(ClippedSoftmax, RandomAndAdversarialRows) {
  const std::vector<int64_t> sizes = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1001, 32000};
  for (size_t pi = 0; pi < settings().size(); ++pi) {
    const ClippedSoftmaxOptions& p = settings()[pi];
    for (Data data : all_data()) {
      Rng rng(std::string(data_name(data)) + "/" + std::to_string(pi));
      for (int64_t n : sizes) {
        const int64_t rows = n >= 32000 ? 1 : 3;
        Tensor src({rows, n}, {}, n % 3), dst({rows, n}), dy({rows, n});
        fill_rows(src, 1, data, rng);
        fill_normal(dy, rng);
        const std::string what = "p" + std::to_string(pi) + " " + data_name(data) +
                                 " n=" + std::to_string(n);
        record(check_forward(src, dst, {}, p, what));
        record(check_backward(src, dy, dst, {}, p, what + " backward"));
        if (stop()) FAIL() << "stopping after " << failures_ << " failing cases";
      }
    }
    // Rows that sit on the thresholds: every visible p equal (1/n), with
    // gamma chosen so that z = 0 exactly, and empty rows under kNan.
    Rng rng("extra/" + std::to_string(pi));
    for (int64_t n : {4, 64, 1001}) {
      Tensor src({3, n}), dst({3, n}), dy({3, n});
      fill_normal(dy, rng);
      src.fill([](int64_t) { return 1.5f; });
      const float g0 = -1.0f / static_cast<float>(n - 1);  // z = (1 - g0) / n + g0 = 0
      record(check_forward(src, dst, {}, params(g0, 1.0f), "on threshold"));
      record(check_backward(src, dy, dst, {}, params(g0, 1.0f), "on threshold backward"));
      SoftmaxOptions nan_rows;
      nan_rows.empty_row = EmptyRow::kNan;
      fill_rows(src, 1, Data::kAllNegInf, rng);
      record(check_forward(src, dst, nan_rows, p, "all-masked kNan"));
      record(check_backward(src, dy, dst, nan_rows, p, "all-masked kNan backward"));
    }
  }
}

TEST_P(ClippedSoftmax, AnyAxisStridedWithMasksAndScale) {
  Rng rng("axis");
  const std::vector<int64_t> shape = {4, 9, 6};
  const AxisMasks masks(rng);
  for (int axis = 0; axis < 3; ++axis) {
    Tensor src(shape, permuted_strides(shape, {2, 0, 1}, 1), 1);
    src.fill([&](int64_t) { return 2.0f * rng.normal(); });
    Tensor dst(shape, permuted_strides(shape, {1, 2, 0}, 2));
    SoftmaxOptions o = masks.options(axis, 1.5f, 0.8f);
    const std::string what = "axis " + std::to_string(axis);
    record(check_forward(src, dst, o, params(-0.2f, 1.1f), what));
    Tensor dyf(shape, permuted_strides(shape, {0, 2, 1}, 0), 2);
    dyf.fill([&](int64_t) { return rng.normal(); });
    record(check_backward(src, dyf, dst, o, params(-0.2f, 1.1f), what + " backward"));
    // The view-level oracle agrees with the row-level one.
    const std::vector<double> r = ref::clipped_softmax(src.view(), params(-0.2f, 1.1f), o);
    smax::clipped_softmax(src.view(), dst.view(), params(-0.2f, 1.1f), o);
    const std::vector<float> out = dst.dense();
    for (size_t i = 0; i < r.size(); ++i) {
      // The absolute form of the bound (p <= 1): check_forward holds the
      // elementwise one.
      EXPECT_NEAR(out[i], r[i], (1.1 - -0.2) * 2.2e-6) << what << " " << i;
    }
  }
}

TEST_P(ClippedSoftmax, ThreadsBitwiseEqualAndInPlace) {
  Rng rng("threads");
  for (int64_t n : {7, 1001, 33000}) {
    const WideRows in(n, rng);
    const Tensor& src = in.src;
    const Tensor& dy = in.dy;
    auto run = [&](int threads, bool in_place) {
      SoftmaxOptions o;
      o.threads = threads;
      const ClippedSoftmaxOptions p = params(-0.01f, 1.0f);
      Tensor y(src.shape()), dx(src.shape());
      if (in_place) {
        y.fill([&](int64_t i) { return src.at(i); });
        smax::clipped_softmax(y.view(), y.view(), p, o);
        dx.fill([&](int64_t i) { return dy.at(i); });
        smax::clipped_softmax_backward(src.view(), dx.view(), dx.view(), p, o);
      } else {
        smax::clipped_softmax(src.view(), y.view(), p, o);
        smax::clipped_softmax_backward(src.view(), dy.view(), dx.view(), p, o);
      }
      std::vector<float> all = y.dense();
      const std::vector<float> d = dx.dense();
      all.insert(all.end(), d.begin(), d.end());
      return all;
    };
    expect_threads_bitwise_equal(run, n);
  }
}

SMAX_INSTANTIATE_PER_TARGET(ClippedSoftmax);

TEST(ClippedSoftmaxErrors, ThrowBeforeWriting) {
  Tensor src({2, 5}), dst({2, 5}), dy({2, 5});
  src.fill([](int64_t i) { return static_cast<float>(i % 5); });
  dy.fill([](int64_t) { return 1.0f; });
  struct Bad {
    ClippedSoftmaxOptions p;
    const char* needle;
  };
  const Bad bad[] = {{params(0.1f, 1.0f), "gamma"},      {params(-0.1f, 0.9f), "zeta"},
                     {params(NAN, 1.0f), "gamma"},       {params(-0.1f, INFINITY), "zeta"},
                     {params(-INFINITY, 1.0f), "gamma"}, {params(-0.1f, NAN), "zeta"}};
  for (const Bad& b : bad) {
    for (bool backward : {false, true}) {
      dst.poison();
      const std::vector<float> before = dst.dense();
      try {
        if (backward) {
          smax::clipped_softmax_backward(src.view(), dy.view(), dst.view(), b.p);
        } else {
          smax::clipped_softmax(src.view(), dst.view(), b.p);
        }
        ADD_FAILURE() << "no error for " << b.needle;
      } catch (const smax::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(backward ? "clipped_softmax_backward" : "clipped_softmax"),
                  std::string::npos) << msg;
        EXPECT_NE(msg.find(b.needle), std::string::npos) << msg;
        EXPECT_EQ(e.status(), smax::Status::kInvalidArgument);
      }
      const std::vector<float> after = dst.dense();
      EXPECT_EQ(0, std::memcmp(before.data(), after.data(), before.size() * sizeof(float)));
    }
  }
  // Wrong shapes are named too.
  Tensor small({2, 4});
  EXPECT_THROW(smax::clipped_softmax(src.view(), small.view()), smax::Error);
  EXPECT_THROW(smax::clipped_softmax_backward(src.view(), small.view(), dst.view()), smax::Error);
}

}  // namespace
}  // namespace smax_test

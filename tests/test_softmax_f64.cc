// tests/test_softmax_f64.cc: the float64 path of the softmax family
// (src/ops/softmax/f64.h, src/kernels/softmax_f64.h) on every SIMD target,
// against a long double oracle (x87 80-bit: 11 more bits than float64,
// compensated sums):
//  * bounds (include/smax/softmax.h, "float64"): softmax relative <= 1e-14
//    for outputs >= 1e-300 (absolute <= 1e-300 below), log_softmax /
//    logsumexp absolute <= 1e-14 (1 + |value|), backward as the header
//    states, for n from 1 to 2^20 and logits spread up to +-700;
//  * special values: NaN and +inf rows, all-masked rows under both
//    policies, -inf entries (exact 0 / -inf, zero gradient);
//  * layouts: strided, transposed, masked and scaled calls give the bits of
//    the contiguous call on the logits they form; thread counts 1, 2, 7
//    give the same bits; in place;
//  * mixed dtypes: f32 / f16 / bf16 outputs are the f64 result rounded once;
//  * errors name the dtype and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/convert.h"
#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::DType;
using LD = long double;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Kahan-compensated long double sum.
struct SumL {
  LD s = 0, c = 0;
  void add(LD x) {
    const LD y = x - c;
    const LD t = s + y;
    c = (t - s) - y;
    s = t;
  }
};

struct RefRow {
  LD m = 0, S = 0;
};
RefRow ref_row(const double* t, int64_t n) {
  RefRow r;
  r.m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) r.m = std::max<LD>(r.m, t[i]);
  SumL s;
  for (int64_t i = 0; i < n; ++i) s.add(std::exp(static_cast<LD>(t[i]) - r.m));
  r.S = s.s;
  return r;
}

void expect_softmax_row(const double* t, int64_t n, const double* y) {
  const RefRow r = ref_row(t, n);
  for (int64_t i = 0; i < n; ++i) {
    const LD want = std::exp(static_cast<LD>(t[i]) - r.m) / r.S;
    const double err = static_cast<double>(std::fabs(static_cast<LD>(y[i]) - want));
    if (want >= 1e-300L) {
      ASSERT_LE(err, 1e-14 * static_cast<double>(want)) << "i " << i << " n " << n;
    } else {
      ASSERT_LE(err, 1e-300) << "i " << i << " n " << n;
    }
  }
}

void expect_log_softmax_row(const double* t, int64_t n, const double* y) {
  const RefRow r = ref_row(t, n);
  const LD log_s = std::log(r.S);
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -kInf) {  // masked: exactly -inf
      ASSERT_EQ(y[i], -kInf) << "i " << i << " n " << n;
      continue;
    }
    const LD want = (static_cast<LD>(t[i]) - r.m) - log_s;
    const double err = static_cast<double>(std::fabs(static_cast<LD>(y[i]) - want));
    ASSERT_LE(err, 1e-14 * (1.0 + std::fabs(static_cast<double>(want)))) << "i " << i << " n " << n;
  }
}

std::vector<double> random_row(std::mt19937_64& rng, int64_t n, double spread) {
  std::uniform_real_distribution<double> u(-spread, spread);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

class SoftmaxF64 : public TargetTest {};

TEST_P(SoftmaxF64, ForwardBoundsForEveryLength) {
  std::mt19937_64 rng(11);
  for (int64_t n : std::vector<int64_t>{1, 2, 3, 7, 8, 9, 31, 100, 1000, 4099, int64_t{1} << 20}) {
    for (double spread : {1.0, 30.0, 700.0}) {
      SCOPED_TRACE("n " + std::to_string(n) + " spread " + std::to_string(spread));
      std::vector<double> x = random_row(rng, n, spread), y(x.size()), l(x.size());
      double lse = 0;
      smax::softmax(f64_view(x.data(), {n}), f64_view(y.data(), {n}));
      smax::log_softmax(f64_view(x.data(), {n}), f64_view(l.data(), {n}));
      smax::logsumexp(f64_view(x.data(), {n}), f64_view(&lse, {}));
      expect_softmax_row(x.data(), n, y.data());
      expect_log_softmax_row(x.data(), n, l.data());
      const RefRow r = ref_row(x.data(), n);
      const LD want = r.m + std::log(r.S);
      EXPECT_LE(static_cast<double>(std::fabs(lse - want)), 1e-14 * (1 + std::fabs(lse)));
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST_P(SoftmaxF64, TermsNearTheMaxKeepEveryBit) {
  // t_i - m is not exact in float64 for |t| large: 1e6 + tiny differences.
  std::vector<double> x = {1e6, 1e6 - 1e-9, 1e6 - 0.5, 1e6 - 3.25e-7, 999990.0};
  std::vector<double> y(x.size()), l(x.size());
  const auto n = static_cast<int64_t>(x.size());
  smax::softmax(f64_view(x.data(), {n}), f64_view(y.data(), {n}));
  smax::log_softmax(f64_view(x.data(), {n}), f64_view(l.data(), {n}));
  expect_softmax_row(x.data(), n, y.data());
  expect_log_softmax_row(x.data(), n, l.data());
}

// Rows whose range max - min (entries above -inf) is just below, at and
// above the kernel's thresholds: below 32 it drops the TwoSum error term of
// t - m (the rounding error, <= 2^-49, is what the bound must absorb), up to
// 708 it takes the normal-range exp; m off the grid of t - m so fl(t - m)
// is inexact, many entries near the bottom of the range (where that error
// is largest), -inf entries that must not count in the range, and lengths
// around the summation's blocks of 8 vectors.
TEST_P(SoftmaxF64, RowsAtTheRangeThresholds) {
  std::mt19937_64 rng(21);
  const double below32 = std::nextafter(32.0, 0.0), above32 = std::nextafter(32.0, 64.0);
  for (double range : {31.0, below32, 32.0, above32, 708.0, std::nextafter(708.0, 1e3)}) {
    for (double m : {0.1, 1.0 / 3.0, 1e3 + 0.123, -17.77, 0x1.fffffffffffffp-1}) {
      for (int64_t n : {2, 5, 63, 64, 65, 129, 1000, 4099}) {
        SCOPED_TRACE("range " + std::to_string(range) + " m " + std::to_string(m) + " n " +
                     std::to_string(n));
        std::uniform_real_distribution<double> near_bottom(m - range, m - range + 1.0);
        std::uniform_real_distribution<double> any(m - range, m);
        std::vector<double> x(static_cast<size_t>(n));
        for (size_t i = 0; i < x.size(); ++i) x[i] = i % 2 ? near_bottom(rng) : any(rng);
        x[0] = m;
        x[x.size() - 1] = m - range;
        if (n > 4) {
          x[2] = -kInf;
          for (size_t i = 3; i + 1 < x.size(); i += 7) x[i] = -kInf;
        }
        std::vector<double> y(x.size()), l(x.size());
        double lse = 0;
        smax::softmax(f64_view(x.data(), {n}), f64_view(y.data(), {n}));
        smax::log_softmax(f64_view(x.data(), {n}), f64_view(l.data(), {n}));
        smax::logsumexp(f64_view(x.data(), {n}), f64_view(&lse, {}));
        expect_softmax_row(x.data(), n, y.data());
        expect_log_softmax_row(x.data(), n, l.data());
        const RefRow r = ref_row(x.data(), n);
        const LD want = r.m + std::log(r.S);
        EXPECT_LE(static_cast<double>(std::fabs(lse - want)), 1e-14 * (1 + std::fabs(lse)));
        if (n > 4) {
          EXPECT_EQ(y[2], 0.0);
          EXPECT_EQ(l[2], -kInf);
        }
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Every length from 1 to 300 (each tail after the blocks of 8 vectors, on
// every target's vector width) and three spreads.
TEST_P(SoftmaxF64, EveryShortLength) {
  std::mt19937_64 rng(22);
  for (int64_t n = 1; n <= 300; ++n) {
    for (double spread : {2.0, 30.0, 700.0}) {
      SCOPED_TRACE("n " + std::to_string(n) + " spread " + std::to_string(spread));
      std::vector<double> x = random_row(rng, n, spread), y(x.size()), l(x.size());
      smax::softmax(f64_view(x.data(), {n}), f64_view(y.data(), {n}));
      smax::log_softmax(f64_view(x.data(), {n}), f64_view(l.data(), {n}));
      expect_softmax_row(x.data(), n, y.data());
      expect_log_softmax_row(x.data(), n, l.data());
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

// One -inf entry at every position of rows up to 140 long (in a whole
// block of 8 vectors, in the vectors after the blocks, in the padded last
// vector): rows without -inf skip the lane masks, rows with one must not.
TEST_P(SoftmaxF64, OneMaskedEntryAnywhere) {
  std::mt19937_64 rng(23);
  for (int64_t n = 2; n <= 140; ++n) {
    for (double spread : {2.0, 100.0}) {
      const std::vector<double> base = random_row(rng, n, spread);
      for (int64_t at = 0; at < n; ++at) {
        SCOPED_TRACE("n " + std::to_string(n) + " at " + std::to_string(at));
        std::vector<double> x = base, y(x.size()), l(x.size());
        x[static_cast<size_t>(at)] = -kInf;
        smax::softmax(f64_view(x.data(), {n}), f64_view(y.data(), {n}));
        smax::log_softmax(f64_view(x.data(), {n}), f64_view(l.data(), {n}));
        ASSERT_EQ(y[static_cast<size_t>(at)], 0.0);
        expect_softmax_row(x.data(), n, y.data());
        expect_log_softmax_row(x.data(), n, l.data());
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(SoftmaxF64, SpecialValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> y(4), l(4);
  double lse;
  std::vector<double> with_nan = {1, nan, 2, 3};
  smax::softmax(f64_view(with_nan.data(), {4}), f64_view(y.data(), {4}));
  for (double v : y) EXPECT_TRUE(std::isnan(v));
  std::vector<double> with_inf = {1, kInf, 2, 3};
  smax::log_softmax(f64_view(with_inf.data(), {4}), f64_view(l.data(), {4}));
  for (double v : l) EXPECT_TRUE(std::isnan(v));
  std::vector<double> masked = {-kInf, 1.0, -kInf, 2.0};
  smax::softmax(f64_view(masked.data(), {4}), f64_view(y.data(), {4}));
  smax::log_softmax(f64_view(masked.data(), {4}), f64_view(l.data(), {4}));
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[2], 0.0);
  EXPECT_EQ(l[0], -kInf);
  EXPECT_EQ(l[2], -kInf);
  EXPECT_NEAR(y[3], 1.0 / (1.0 + std::exp(-1.0)), 1e-15);
  std::vector<double> empty = {-kInf, -kInf, -kInf, -kInf};
  smax::softmax(f64_view(empty.data(), {4}), f64_view(y.data(), {4}));
  smax::logsumexp(f64_view(empty.data(), {4}), f64_view(&lse, {}));
  for (double v : y) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(lse, -kInf);
  smax::SoftmaxOptions nan_policy;
  nan_policy.empty_row = smax::EmptyRow::kNan;
  smax::softmax(f64_view(empty.data(), {4}), f64_view(y.data(), {4}), nan_policy);
  for (double v : y) EXPECT_TRUE(std::isnan(v));
  // n = 1: exactly 1, 0, t.
  double one = 5.5, out = 0;
  smax::softmax(f64_view(&one, {1}), f64_view(&out, {1}));
  EXPECT_EQ(out, 1.0);
  smax::log_softmax(f64_view(&one, {1}), f64_view(&out, {1}));
  EXPECT_EQ(out, 0.0);
  smax::logsumexp(f64_view(&one, {1}), f64_view(&out, {}));
  EXPECT_EQ(out, 5.5);
}

TEST_P(SoftmaxF64, BackwardBounds) {
  std::mt19937_64 rng(12);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t n : std::vector<int64_t>{1, 5, 64, 1001, int64_t{1} << 18}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<double> x = random_row(rng, n, 20.0), y(x.size()), l(x.size()), dy(x.size());
    for (double& g : dy) g = normal(rng);
    x[0] = -kInf;  // a masked entry: zero gradient
    smax::softmax(f64_view(x.data(), {n}), f64_view(y.data(), {n}));
    smax::log_softmax(f64_view(x.data(), {n}), f64_view(l.data(), {n}));
    std::vector<double> dx(x.size()), dlx(x.size());
    smax::SoftmaxOptions o;
    o.scale = 0.75f;
    smax::softmax_backward(f64_view(y.data(), {n}), f64_view(dy.data(), {n}), f64_view(dx.data(), {n}), o);
    smax::log_softmax_backward(f64_view(l.data(), {n}), f64_view(dy.data(), {n}),
                               f64_view(dlx.data(), {n}), o);
    SumL dot, abs_dot, sum, abs_sum;
    for (int64_t i = 0; i < n; ++i) {
      dot.add(static_cast<LD>(y[i]) * dy[i]);
      abs_dot.add(std::fabs(static_cast<LD>(y[i]) * dy[i]));
      sum.add(dy[i]);
      abs_sum.add(std::fabs(static_cast<LD>(dy[i])));
    }
    const double s = 0.75;
    for (int64_t i = 0; i < n; ++i) {
      const LD want = s * static_cast<LD>(y[i]) * (dy[i] - dot.s);
      const double bound = 1e-14 * s * std::fabs(y[i]) * (std::fabs(dy[i]) + std::fabs(static_cast<double>(dot.s))) +
                           4e-16 * s * std::fabs(y[i]) * static_cast<double>(abs_dot.s) + 1e-300;
      ASSERT_LE(static_cast<double>(std::fabs(dx[i] - want)), bound) << "softmax_backward i " << i;
      const LD e = l[i] == -kInf ? 0.0L : std::exp(static_cast<LD>(l[i]));
      const LD want_l = l[i] == -kInf ? 0.0L : s * (dy[i] - e * sum.s);
      const double bound_l =
          1e-14 * s * (std::fabs(dy[i]) + static_cast<double>(e * abs_sum.s)) + 1e-300;
      ASSERT_LE(static_cast<double>(std::fabs(dlx[i] - want_l)), bound_l) << "log_softmax_backward i " << i;
    }
    EXPECT_EQ(dx[0], 0.0);
    EXPECT_EQ(dlx[0], 0.0);
  }
}

TEST_P(SoftmaxF64, LayoutsMasksThreadsAndInPlaceGiveTheContiguousBits) {
  std::mt19937_64 rng(13);
  const int64_t R = 5, C = 37;
  std::vector<double> x = random_row(rng, R * C, 50.0);
  std::vector<uint8_t> keep(static_cast<size_t>(R * C), 1);
  std::vector<float> add(static_cast<size_t>(R * C));
  for (size_t i = 0; i < keep.size(); ++i) {
    keep[i] = i % 5 != 2;
    add[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  }
  smax::SoftmaxOptions o;
  o.scale = 1.5f;
  o.temperature = 0.7f;
  o.bool_mask = smax::make_bool_view(keep.data(), {R, C});
  o.additive_mask = smax::make_view(add.data(), {R, C});
  // The logits these options form, in double: x * (1.5 / 0.7) + add, -inf where masked.
  const double s = 1.5 / static_cast<double>(0.7f);
  std::vector<double> t(x.size());
  for (size_t i = 0; i < x.size(); ++i) t[i] = keep[i] ? x[i] * s + static_cast<double>(add[i]) : -kInf;
  std::vector<double> want(x.size());
  smax::softmax(f64_view(t.data(), {R, C}), f64_view(want.data(), {R, C}));
  for (int threads : {1, 2, 7}) {
    o.threads = threads;
    std::vector<double> got(x.size());
    smax::softmax(f64_view(x.data(), {R, C}), f64_view(got.data(), {R, C}), o);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(double))) << threads;
  }
  // Transposed: the same rows along dim 0 of a [C, R] view.
  std::vector<double> xt(x.size()), gt(x.size());
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) xt[static_cast<size_t>(c * R + r)] = t[static_cast<size_t>(r * C + c)];
  }
  smax::SoftmaxOptions axis0;
  axis0.axis = 0;
  smax::softmax(f64_view(xt.data(), {C, R}), f64_view(gt.data(), {C, R}), axis0);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      ASSERT_EQ(gt[static_cast<size_t>(c * R + r)], want[static_cast<size_t>(r * C + c)]);
    }
  }
  // In place.
  std::vector<double> inplace = t;
  smax::softmax(f64_view(inplace.data(), {R, C}), f64_view(inplace.data(), {R, C}));
  EXPECT_EQ(0, std::memcmp(inplace.data(), want.data(), want.size() * sizeof(double)));
}

TEST_P(SoftmaxF64, NarrowerOutputsAreTheF64ResultRoundedOnce) {
  std::mt19937_64 rng(14);
  const int64_t n = 300;
  std::vector<double> x = random_row(rng, n, 10.0), want(x.size());
  smax::log_softmax(f64_view(x.data(), {n}), f64_view(want.data(), {n}));
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<unsigned char> out(static_cast<size_t>(n * smax::dtype_size(dt)));
    const int64_t shape[] = {n};
    smax::log_softmax(f64_view(x.data(), {n}), smax::make_view(out.data(), dt, 1, shape, nullptr));
    for (int64_t i = 0; i < n; ++i) {
      unsigned char expect[8];
      smax::detail::store_f64(expect, dt, want[static_cast<size_t>(i)]);
      ASSERT_EQ(0, std::memcmp(expect, out.data() + i * smax::dtype_size(dt), smax::dtype_size(dt)))
          << smax::dtype_name(dt) << " i " << i;
    }
  }
}

TEST_P(SoftmaxF64, ErrorsNameTheDtypeAndWriteNothing) {
  std::vector<double> x(6, 1.0);
  std::vector<int64_t> bad(6, 7);
  const int64_t shape[] = {6};
  try {
    smax::softmax(f64_view(x.data(), {6}), smax::make_view(bad.data(), DType::kI64, 1, shape, nullptr));
    FAIL() << "expected smax::Error";
  } catch (const smax::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dst has dtype i64"), std::string::npos) << e.what();
  }
  for (int64_t v : bad) EXPECT_EQ(v, 7);
}

SMAX_INSTANTIATE_PER_TARGET(SoftmaxF64);

}  // namespace
}  // namespace smax_test

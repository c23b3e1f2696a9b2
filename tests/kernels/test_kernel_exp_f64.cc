// tests/kernels/test_kernel_exp_f64.cc: the float64 exp of
// src/kernels/exp_f64-inl.h (the f64 softmax kernels' exp) on every SIMD
// target, against long double.
//
// The contract tested (exp_f64-inl.h):
//  * ExpSplit(hi, lo) = e^(hi + lo) within 1.5 ulp where the result is a
//    normal double, for lo the rounding error of hi (here: hi = fl(t - m),
//    lo = the exact TwoSum error, as the kernels form them);
//  * subnormal results within one subnormal spacing plus 1.5 ulp of the
//    normal-range value (one rounding by gradual underflow); 0 below
//    e^-745.2, +inf above e^709.8; e^0 = 1 exactly (NaN never reaches it:
//    the kernels handle NaN rows before any exp);
//  * ExpNormal gives ExpSplit's bits for every hi in [-708, 0];
//  * ExpFast(x) (no lo term) = e^x within 1.5 ulp for x in [-708, 0].
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "test_kernel_exp_f64.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernel_target-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
#include "kernels/exp_f64-inl.h"

// out[i] = e^(hi[i] + lo[i]) by ExpSplit (normal = false) or ExpNormal.
void KtExpF64(bool normal, const double* hi, const double* lo, size_t n, double* out) {
  const exp_f64::D d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i + N <= n; i += N) {
    const auto h = hn::LoadU(d, hi + i);
    const auto l = hn::LoadU(d, lo + i);
    hn::StoreU(normal ? exp_f64::ExpNormal(d, h, l) : exp_f64::ExpSplit(d, h, l), d, out + i);
  }
}
// out[i] = e^x[i] by ExpFast.
void KtExpFastF64(const double* x, size_t n, double* out) {
  const exp_f64::D d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i + N <= n; i += N) {
    hn::StoreU(exp_f64::ExpFast(d, hn::LoadU(d, x + i)), d, out + i);
  }
}
size_t KtLanesF64() { return hn::Lanes(exp_f64::D()); }

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "test_util.h"

namespace smax::kernels {
HWY_EXPORT(KtExpF64);
HWY_EXPORT(KtLanesF64);
HWY_EXPORT(KtExpFastF64);
namespace {

using LD = long double;

// Arguments t - m as the f64 kernels form them: hi = fl(t - m), lo = the
// exact error (TwoSum), padded to whole vectors.
struct Args {
  std::vector<double> hi, lo;
  std::vector<LD> exact;  // t - m in long double (exact: 64-bit mantissa)
};
void Add(Args& a, double t, double m) {
  const double s = t - m;
  const double bb = s - t;
  const double e = (t - (s - bb)) + (-m - bb);
  a.hi.push_back(s);
  a.lo.push_back(e);
  a.exact.push_back(static_cast<LD>(t) - static_cast<LD>(m));
}
std::vector<double> Eval(bool normal, Args& a) {
  const size_t N = HWY_DYNAMIC_DISPATCH(KtLanesF64)();
  while (a.hi.size() % N != 0) Add(a, 0.0, 0.0);
  std::vector<double> out(a.hi.size(), -1.0);
  HWY_DYNAMIC_DISPATCH(KtExpF64)(normal, a.hi.data(), a.lo.data(), a.hi.size(), out.data());
  return out;
}

// The error of y against e^x in ulps of the result (normal) or in
// subnormal spacings plus the relative part (subnormal), as the contract.
double Ulps(double y, LD x) {
  const LD r = std::exp(x);
  if (r >= static_cast<LD>(DBL_MIN)) {
    const LD ulp = std::ldexp(static_cast<LD>(1.0), std::ilogb(static_cast<double>(r)) - 52);
    return static_cast<double>(std::fabs(static_cast<LD>(y) - r) / ulp);
  }
  const LD spacing = static_cast<LD>(std::ldexp(1.0, -1074));
  return static_cast<double>(std::fabs(static_cast<LD>(y) - r) / spacing) - 1.0;
}

class KernelExpF64 : public KernelTest {};

TEST_P(KernelExpF64, WithinOneAndAHalfUlpOverTheDomain) {
  std::mt19937_64 rng(5);
  Args a;
  for (double m : {0.0, 1.0, -3.5, 1e6, 123456.789, 1e15, -1e15}) {
    std::uniform_real_distribution<double> u(-745.0, 709.0);
    for (int k = 0; k < 20000; ++k) Add(a, m + u(rng), m);
    for (double x = -745.0; x <= 709.0; x += 0.37) Add(a, m + x, m);
  }
  // t and m of unrelated magnitudes: t - m is inexact, lo != 0 (the term
  // the two-term reduction exists for).
  for (double m : {0.1, 0.3, 1.0 / 3.0, 7.77}) {
    std::uniform_real_distribution<double> u(-745.0, 709.0);
    for (int k = 0; k < 20000; ++k) Add(a, u(rng), m);
  }
  for (double x = 0x1p-60; x < 1.0; x *= 1.01) {  // small arguments, both signs
    Add(a, x, 0.0);
    Add(a, -x, 0.0);
  }
  size_t with_lo = 0;
  for (double lo : a.lo) with_lo += lo != 0.0;
  EXPECT_GT(with_lo, 40000u) << "the arguments must exercise lo";
  const std::vector<double> y = Eval(false, a);
  double worst = 0.0;
  int failures = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (a.exact[i] < -745.2L) continue;  // e^x < 2^-1075.3: rounds to 0
    const double u = Ulps(y[i], a.exact[i]);
    worst = std::max(worst, u);
    if (!(u <= 1.5) && failures++ < 5) {
      ADD_FAILURE() << "x = " << static_cast<double>(a.exact[i]) << ": got " << y[i]
                    << ", " << u << " ulp";
    }
  }
  RecordProperty("worst_ulp", std::to_string(worst));
  EXPECT_GT(worst, 0.2) << "suspiciously exact: is the exp under test?";
}

TEST_P(KernelExpF64, SpecialValues) {
  Args a;
  const double inf = INFINITY;
  for (double x : {0.0, -0.0, -746.0, -1e10, -inf, 710.0, 1e10, inf}) {
    a.hi.push_back(x);
    a.lo.push_back(0.0);
    a.exact.push_back(static_cast<LD>(x));
  }
  const std::vector<double> y = Eval(false, a);
  EXPECT_EQ(y[0], 1.0);
  EXPECT_EQ(y[1], 1.0);
  EXPECT_EQ(y[2], 0.0);
  EXPECT_EQ(y[3], 0.0);
  EXPECT_EQ(y[4], 0.0);
  EXPECT_EQ(y[5], inf);
  EXPECT_EQ(y[6], inf);
  EXPECT_EQ(y[7], inf);
}

TEST_P(KernelExpF64, NormalFormGivesTheSplitFormsBits) {
  std::mt19937_64 rng(9);
  Args a;
  std::uniform_real_distribution<double> u(-708.0, 0.0);
  for (int k = 0; k < 200000; ++k) Add(a, 1e3 + u(rng), 1e3);
  for (int k = 0; k < 100000; ++k) Add(a, u(rng) * 0.999 + 0.1, 0.1 + 1.0 / 3.0);  // lo != 0
  for (double x = -708.0; x <= 0.0; x += 0.013) Add(a, x, 0.0);
  Add(a, -708.0, 0.0);
  Add(a, 0.0, 0.0);
  Args b = a;
  size_t with_lo = 0;
  for (double lo : a.lo) with_lo += lo != 0.0;
  EXPECT_GT(with_lo, 10000u) << "the arguments must exercise lo";
  const std::vector<double> split = Eval(false, a), normal = Eval(true, b);
  for (size_t i = 0; i < split.size(); ++i) {
    ASSERT_EQ(smax_kernel_test::Bits(split[i]), smax_kernel_test::Bits(normal[i]))
        << "x = " << a.hi[i] << " + " << a.lo[i];
  }
}

TEST_P(KernelExpF64, FastFormWithinOneAndAHalfUlp) {
  std::mt19937_64 rng(13);
  std::vector<double> x;
  std::uniform_real_distribution<double> wide(-708.0, 0.0), near(-32.0, 0.0);
  for (int k = 0; k < 100000; ++k) x.push_back(wide(rng));
  for (int k = 0; k < 100000; ++k) x.push_back(near(rng));
  for (double v = 0x1p-60; v < 1.0; v *= 1.01) x.push_back(-v);
  for (double v = -708.0; v <= 0.0; v += 0.0137) x.push_back(v);
  x.push_back(-708.0);
  x.push_back(0.0);
  x.push_back(-0.0);
  const size_t N = HWY_DYNAMIC_DISPATCH(KtLanesF64)();
  while (x.size() % N != 0) x.push_back(0.0);
  std::vector<double> y(x.size(), -1.0);
  HWY_DYNAMIC_DISPATCH(KtExpFastF64)(x.data(), x.size(), y.data());
  double worst = 0.0;
  int failures = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double u = Ulps(y[i], static_cast<LD>(x[i]));
    worst = std::max(worst, u);
    if (!(u <= 1.5) && failures++ < 5) {
      ADD_FAILURE() << "x = " << x[i] << ": got " << y[i] << ", " << u << " ulp";
    }
    if (x[i] == 0.0) {
      EXPECT_EQ(y[i], 1.0);
    }
  }
  RecordProperty("worst_ulp", std::to_string(worst));
  EXPECT_GT(worst, 0.2) << "suspiciously exact: is the exp under test?";
}

SMAX_INSTANTIATE_PER_TARGET(KernelExpF64);

}  // namespace
}  // namespace smax::kernels
#endif  // HWY_ONCE

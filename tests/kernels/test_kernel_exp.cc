// tests/kernels/test_kernel_exp.cc: the f32 exp of src/kernels/exp-inl.h on
// every SIMD target, against float64 over a dense sweep of its domain.
//
// The contract tested (exp-inl.h): for x = t - N ln2 (ExpRef, t reduced
// exactly for |N ln2| up to about kRefMaxAbs) or x = t - m (ExpDiff, exact
// difference, any finite m):
//  * e^x within kExpUlp = 2.5 ulp of the float64 value where the result is a
//    normal f32 number (x <= 88.3: 2^(n - N) with n - N <= 127);
//  * exact 0 (never a denormal) where the result is below 2^-125.5 (the
//    flush: n - N <= -126), and never 0 where it is >= 2^-124;
//  * -inf gives 0, NaN gives NaN;
//  * ExpRefNoFlush gives ExpRef's bits wherever NeverFlushes(t_min) holds.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "test_kernel_exp.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernel_target-inl.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// Applies exp to t[0, n) the way the kernels do: full vectors, then the
// tail through ExpTail (its padding lanes are -inf).
template <class Exp>
void KtApply(const Exp& exp, const float* t, size_t n, float* out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const Logits<false, false> src{t, nullptr, 1.0f};
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(exp(d, src.Load(d, i)), d, out + i);
  if (i < n) StoreTail(d, ExpTail(exp, d, src.LoadTail(d, i, n - i)), out + i, n - i);
}

// which: 0 ExpRef(nref), 1 ExpRefNoFlush(nref), 2 ExpRefTable(nref), 3 ExpDiff(m = shift).
// Returns false if that variant is not available on this target.
bool KtExp(int which, float shift, const float* t, size_t n, float* out) {
  const ExpRef e = ExpRef::Make(shift);
  switch (which) {
    case 0:
      KtApply(e, t, n, out);
      return true;
    case 1:
      KtApply(ExpRefNoFlush{e}, t, n, out);
      return true;
    case 2:
      if (!kHaveExpTable) return false;
      KtApply(ExpRefTable::Make(e, shift), t, n, out);
      return true;
    default:
      KtApply(ExpDiff::Make(shift), t, n, out);
      return true;
  }
}

// ExpRef::NeverFlushes(t_min) for N = nref.
bool KtNeverFlushes(float nref, float t_min) { return ExpRef::Make(nref).NeverFlushes(t_min); }

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "test_util.h"

namespace smax::kernels {
HWY_EXPORT(KtExp);
HWY_EXPORT(KtNeverFlushes);
namespace {


// The bounds this file enforces (exp-inl.h states them), in ulp of the
// result: rr2 reduction + degree-5 polynomial, measured on these sweeps
// 2.26 ulp with FMA (AVX2) and 2.30 without (SSE4, SSSE3, SCALAR).
constexpr double kExpUlp = 2.5;
// The table variant (ExpRefTable: 2.6e-8 polynomial + 3.2e-8 table,
// relative): measured 1.44 ulp.
constexpr double kExpTableUlp = 2.0;

std::vector<float> EvalExp(int which, float shift, const std::vector<float>& t) {
  std::vector<float> out(t.size(), -1.0f);
  const bool ok = HWY_DYNAMIC_DISPATCH(KtExp)(which, shift, t.data(), t.size(), out.data());
  if (!ok) out.clear();
  return out;
}

// ulp of a normal f32 value r (as a double).
double UlpOf(double r) { return std::ldexp(1.0, std::ilogb(r) - 23); }

// Dense sweep: every `stride`-th f32 in [lo, hi] (by bit pattern, both signs)
// plus a uniform grid, so every binade of the argument is covered.
std::vector<float> Sweep(float lo, float hi, size_t grid) {
  std::vector<float> t;
  for (size_t k = 0; k <= grid; ++k) {
    t.push_back(static_cast<float>(lo + (static_cast<double>(hi) - lo) * k / grid));
  }
  // Small arguments, every binade from 2^-40 up to 1 (both signs).
  for (float a = 0x1p-40f; a < 1.0f; a *= 1.0001f) {
    if (a >= lo && a <= hi) t.push_back(a);
    if (-a >= lo && -a <= hi) t.push_back(-a);
  }
  if (lo <= 0.0f && 0.0f <= hi) t.push_back(0.0f);
  return t;
}

struct UlpReport {
  double worst = 0.0;
  float at = 0.0f;
  int64_t failures = 0;
  std::string first;
};

// Checks y = e^(t - x0) (x0 in float64) against the contract.
UlpReport Check(const std::vector<float>& t, const std::vector<float>& y, double x0, double bound) {
  UlpReport rep;
  for (size_t i = 0; i < t.size(); ++i) {
    const double r = std::exp(static_cast<double>(t[i]) - x0);
    std::string why;
    if (y[i] == 0.0f) {
      if (r >= 0x1p-124) why = "flushed a result >= 2^-124";
    } else if (!(std::fabs(y[i]) >= FLT_MIN)) {
      why = "denormal or NaN";
    } else if (r < 0x1p-126) {
      why = "kept a result below FLT_MIN";
    } else {
      const double ulps = std::fabs(static_cast<double>(y[i]) - r) / UlpOf(r);
      if (ulps > rep.worst) {
        rep.worst = ulps;
        rep.at = t[i];
      }
      if (ulps > bound) why = std::to_string(ulps) + " ulp";
    }
    if (!why.empty() && rep.failures++ == 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "t = %a (x = %.9g): got %a, float64 %.9g: ", t[i],
                    static_cast<double>(t[i]) - x0, y[i], r);
      rep.first = buf + why;
    }
  }
  return rep;
}

class KernelExp : public KernelTest {};

// ExpRef with N = 0 is e^t itself: the dense sweep of the whole domain.
TEST_P(KernelExp, ExpRefUlpOverTheDomain) {
  const std::vector<float> t = Sweep(-104.0f, 88.3f, 1 << 22);
  const std::vector<float> y = EvalExp(0, 0.0f, t);
  const UlpReport rep = Check(t, y, 0.0, kExpUlp);
  EXPECT_EQ(rep.failures, 0) << rep.failures << " violations, first: " << rep.first;
  RecordProperty("worst_ulp", std::to_string(rep.worst));
  EXPECT_GT(rep.worst, 0.3) << "suspiciously exact: is the exp really under test?";
}

// With a reference exponent N (the softmax's e^(t - N ln2), t near N ln2):
// the reduction of t itself is exact up to |N ln2| ~ kRefMaxAbs.
TEST_P(KernelExp, ExpRefWithReferenceExponent) {
  const float max_abs = HWY_DYNAMIC_DISPATCH(KtRefMaxAbs)();
  for (const float m : {-max_abs, -700.0f, -90.0f, -1.0f, 3.0f, 60.0f, 200.0f, max_abs}) {
    if (std::fabs(m) > max_abs) continue;
    const float nref = std::nearbyint(m * smax_kernel_test::kLog2eF);
    const double x0 = static_cast<double>(nref) * smax_kernel_test::kLn2;
    const std::vector<float> t = Sweep(m - 100.0f, m + 20.0f, 1 << 18);
    const std::vector<float> y = EvalExp(0, nref, t);
    const UlpReport rep = Check(t, y, x0, kExpUlp);
    EXPECT_EQ(rep.failures, 0) << "m = " << m << ": " << rep.first;
  }
}

// The table exp (AVX2 and up) where the three-pass kernels use it (no flush
// possible: results >= 2^-122).
TEST_P(KernelExp, ExpRefTableUlp) {
  for (const float m : {-200.0f, 0.0f, 37.5f, 250.0f}) {
    const float nref = std::nearbyint(m * smax_kernel_test::kLog2eF);
    const double x0 = static_cast<double>(nref) * smax_kernel_test::kLn2;
    const std::vector<float> t = Sweep(m - 80.0f, m, 1 << 18);
    const std::vector<float> y = EvalExp(2, nref, t);
    if (y.empty()) GTEST_SKIP() << "no ExpRefTable on " << GetParam();
    const UlpReport rep = Check(t, y, x0, kExpTableUlp);
    EXPECT_EQ(rep.failures, 0) << "m = " << m << ": " << rep.first;
  }
}

// ExpDiff: e^(t - m) with the exact difference, any finite m (huge ones
// included, where an f32 t - m would be rounded).
TEST_P(KernelExp, ExpDiffUlpForAnyShift) {
  for (const float m : {-3.0e38f, -1.0e6f, -5000.0f, -87.0f, 0.0f, 0.1f, 12345.678f, 1.0e30f}) {
    const float ulp_m = std::fabs(m) * 0x1p-23f;
    // t within +-100 of m on the f32 grid around m.
    std::vector<float> t = Sweep(-100.0f, 20.0f, 1 << 17);
    for (float& x : t) x = static_cast<float>(static_cast<double>(m) + x);
    const std::vector<float> y = EvalExp(3, m, t);
    const UlpReport rep = Check(t, y, static_cast<double>(m), kExpUlp);
    EXPECT_EQ(rep.failures, 0) << "m = " << m << " (ulp(m) = " << ulp_m << "): " << rep.first;
  }
}

TEST_P(KernelExp, SpecialValues) {
  const float inf = smax_test::kInfF, nan = smax_test::kNanF;
  const std::vector<float> t = {-inf, nan, -1000.0f, -104.0f, 0.0f, -inf, nan, 1.0f, -inf};
  for (const int which : {0, 3}) {
    const std::vector<float> y = EvalExp(which, 0.0f, t);
    for (size_t i = 0; i < t.size(); ++i) {
      if (std::isnan(t[i])) {
        EXPECT_TRUE(std::isnan(y[i])) << "which " << which << " at " << i;
      } else if (t[i] <= -104.0f) {
        EXPECT_EQ(y[i], 0.0f) << "which " << which << " at " << i;
        EXPECT_FALSE(std::signbit(y[i]));
      }
    }
    EXPECT_EQ(y[4], 1.0f) << "e^0 is exactly 1 (which " << which << ")";
  }
}

// ExpRefNoFlush drops the flush compare only where it is proven idle: the
// same bits as ExpRef for every t >= t_min when NeverFlushes(t_min).
TEST_P(KernelExp, NoFlushIsExpRefWhereNeverFlushes) {
  for (const float m : {-50.0f, 0.0f, 10.0f, 100.0f}) {
    const float nref = std::nearbyint(m * smax_kernel_test::kLog2eF);
    float t_min = m - 200.0f;
    while (!HWY_DYNAMIC_DISPATCH(KtNeverFlushes)(nref, t_min)) t_min += 0.25f;
    EXPECT_GT(t_min, m - 90.0f);
    const std::vector<float> t = Sweep(t_min, m, 1 << 16);
    const std::vector<float> a = EvalExp(0, nref, t), b = EvalExp(1, nref, t);
    for (size_t i = 0; i < t.size(); ++i) {
      ASSERT_EQ(smax_kernel_test::Bits(a[i]), smax_kernel_test::Bits(b[i])) << "t = " << t[i] << ", m = " << m;
    }
  }
}

}  // namespace
SMAX_INSTANTIATE_PER_TARGET(KernelExp);
}  // namespace smax::kernels
#endif  // HWY_ONCE

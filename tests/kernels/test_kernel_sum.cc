// tests/kernels/test_kernel_sum.cc: the blocked f32 -> float64 sums of
// src/kernels/sum-inl.h (BlockSum, as ExpSum in pass-inl.h drives it) on
// every SIMD target.
//
// Contract tested:
//  * order: the result is exactly (bit for bit) that of the documented
//    order: per lane l, acc0 / acc1 take the vectors of a step alternately,
//    a block of kStepsPerBlock = 8 steps (16 adds per lane) is widened into
//    a float64 lane sum, single vectors after the last step alternate
//    acc0 / acc1, and the float64 lanes are added in lane order;
//  * error vs n: |S - sum x_i| <= (16 u + (n / 16 + 16) v) sum |x_i| with
//    u = 2^-24, v = 2^-53: the f32 part does not grow with n (a plain f32
//    loop does: it fails this bound from a few thousand terms on).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "test_kernel_sum.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernel_target-inl.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// The identity as ExpSum's "exp": x itself, 0 for the -inf padding of the tail.
struct KtIdentity {
  HWY_INLINE VF operator()(DF d, VF t) const {
    return hn::IfThenZeroElse(hn::Eq(t, hn::Set(d, kNegInf)), t);
  }
};

double KtBlockSum(const float* x, size_t n) {
  return ExpSum<false>(Logits<false, false>{x, nullptr, 1.0f}, n, KtIdentity{}, nullptr);
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "test_util.h"

namespace smax::kernels {
HWY_EXPORT(KtBlockSum);
namespace {


// The documented order, in scalar code (N lanes).
double EmulatedBlockSum(const float* x, size_t n, size_t N) {
  std::vector<float> acc0(N, 0.0f), acc1(N, 0.0f);
  std::vector<double> wide(N, 0.0);
  unsigned steps = 0;
  auto flush = [&] {
    for (size_t l = 0; l < N; ++l) {
      wide[l] += static_cast<double>(acc0[l]);
      wide[l] += static_cast<double>(acc1[l]);
      acc0[l] = acc1[l] = 0.0f;
    }
    steps = 0;
  };
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    for (size_t l = 0; l < N; ++l) {
      acc0[l] += x[i + l];
      acc1[l] += x[i + N + l];
      acc0[l] += x[i + 2 * N + l];
      acc1[l] += x[i + 3 * N + l];
    }
    if (++steps == 8) flush();
  }
  unsigned k = 0;
  for (; i < n; i += N, ++k) {
    std::vector<float>& acc = (k & 1) ? acc1 : acc0;
    for (size_t l = 0; l < N && i + l < n; ++l) acc[l] += x[i + l];
  }
  flush();
  double s = 0.0;
  for (size_t l = 0; l < N; ++l) s += wide[l];
  return s;
}

// sum x_i to ~2^-100 relative (Neumaier in float64 of exact f32 terms, then
// the two parts rounded once).
double ExactSum(const std::vector<float>& x, double* abs_sum) {
  double s = 0.0, c = 0.0, a = 0.0;
  for (const float f : x) {
    const double v = f;
    const double t = s + v;
    c += std::fabs(s) >= std::fabs(v) ? (s - t) + v : (v - t) + s;
    s = t;
    a += std::fabs(v);
  }
  *abs_sum = a;
  return s + c;
}

double Bound(size_t n, double abs_sum) {
  return (16.0 * 0x1p-24 + (static_cast<double>(n) / 16.0 + 16.0) * 0x1p-53) * abs_sum;
}

class KernelSum : public KernelTest {};

const size_t kSizes[] = {1,   2,   3,   7,    8,    15,    16,    31,     32,      33,
                         63,  64,  65,  127,  128,  129,   255,   256,    257,     511,
                         512, 513, 1000, 4096, 4099, 65537, 100000, 1 << 20, (1 << 22) + 3};

TEST_P(KernelSum, BlockSumFollowsTheDocumentedOrder) {
  const size_t N = HWY_DYNAMIC_DISPATCH(KtLanes)();
  smax_test::Rng rng("order");
  for (const size_t n : kSizes) {
    if (n > 100000) continue;
    std::vector<float> x(n);
    for (float& v : x) v = rng.uniform(0.0f, 1.0f) * std::exp(rng.uniform(-10.0f, 10.0f));
    const double got = HWY_DYNAMIC_DISPATCH(KtBlockSum)(x.data(), n);
    const double want = EmulatedBlockSum(x.data(), n, N);
    EXPECT_EQ(smax_kernel_test::Bits(got), smax_kernel_test::Bits(want))
        << "n = " << n << ": " << got << " vs the documented order's " << want;
  }
}

// The error bound for growing n, positive terms (the exp-sums) and terms of
// both signs; terms in [1/2, 1) make a plain f32 loop fail early.
TEST_P(KernelSum, BlockSumErrorVersusN) {
  smax_test::Rng rng("error");
  for (const int kind : {0, 1, 2}) {
    for (const size_t n : kSizes) {
      std::vector<float> x(n);
      for (float& v : x) {
        if (kind == 0) v = rng.uniform(0.5f, 1.0f);
        if (kind == 1) v = std::exp(rng.uniform(-30.0f, 30.0f));
        if (kind == 2) v = rng.normal(0.0f, 1.0f);
      }
      double abs_sum = 0.0;
      const double exact = ExactSum(x, &abs_sum);
      const double got = HWY_DYNAMIC_DISPATCH(KtBlockSum)(x.data(), n);
      const double err = std::fabs(got - exact);
      EXPECT_LE(err, Bound(n, abs_sum))
          << "kind " << kind << ", n = " << n << ": relative error " << err / abs_sum;
    }
  }
}

// The bound is tight enough to mean something: a plain f32 running sum
// breaks it at the larger sizes above.
TEST_P(KernelSum, PlainF32LoopWouldFailTheBound) {
  smax_test::Rng rng("plain");
  const size_t n = 1 << 20;
  std::vector<float> x(n);
  for (float& v : x) v = rng.uniform(0.5f, 1.0f);
  float plain = 0.0f;
  for (const float v : x) plain += v;
  double abs_sum = 0.0;
  const double exact = ExactSum(x, &abs_sum);
  EXPECT_GT(std::fabs(static_cast<double>(plain) - exact), Bound(n, abs_sum));
}

}  // namespace
SMAX_INSTANTIATE_PER_TARGET(KernelSum);
}  // namespace smax::kernels
#endif  // HWY_ONCE

// tests/kernels/test_kernel_scan.cc: the row scans of src/kernels/scan-inl.h
// on every SIMD target: OnlineScanWith (the online-scan template) and its
// visitors OnlineSum (OnlineScan) and TwoPassSum (TwoPassScan), against
// float64.
//
// Contract tested:
//  * OnlineScanWith visits every element once: Step4 at i = 0, 4N, 8N, ...,
//    then Step1 for each remaining vector (k = 0, 1, ...; count < N only for
//    the tail), and calls Rebase (first = true only the first time) exactly
//    when a step's max exceeds the threshold the last Rebase returned (-inf
//    before it); it returns the row's max;
//  * a visitor's extra per-step work does not change the sums' bits;
//  * OnlineScan: max exact, ref <= max <= ref + 32 for finite rows, and
//    d = sum_i e^(t_i - ref) within 2e-6 relative of float64 (the exp's
//    2 ulp plus the blocked sum's 16 u); all -inf: d = 0;
//  * TwoPassScan: nu = round(max log2e), mu 2^nu = sum_i e^(t_i) within
//    2e-6 relative where in_range (|max| <= kRefMaxAbs).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "test_kernel_scan.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <vector>

#include "kernel_test.h"
#include "kernel_target-inl.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// Records every call; its threshold is the step's max + slack.
struct KtRecorder {
  std::vector<smax_kernel_test::KtCall>* calls;
  float slack;
  HWY_INLINE float Rebase(DF d, VF step_max, bool first) {
    const float m = ReduceMax(d, step_max);
    calls->push_back(smax_kernel_test::KtCall{0, 0, 0, 0, first, m});
    return m + slack;
  }
  HWY_INLINE void Step4(DF /*d*/, size_t i, VF, VF, VF, VF, VF) {
    calls->push_back(smax_kernel_test::KtCall{4, i, 0, 0, false, 0.0f});
  }
  HWY_INLINE void Step1(DF /*d*/, size_t i, VF, size_t count, unsigned k) {
    calls->push_back(smax_kernel_test::KtCall{1, i, count, k, false, 0.0f});
  }
};

float KtRecord(const float* x, size_t n, float slack,
               std::vector<smax_kernel_test::KtCall>* calls) {
  KtRecorder v{calls, slack};
  return OnlineScanWith(Logits<false, false>{x, nullptr, 1.0f}, n, v);
}

// OnlineSum plus extra work of its own (a second blocked sum of t^2): the
// scan's sums must not depend on it.
struct KtBusyOnline {
  OnlineSum s;
  BlockSum sq;
  explicit KtBusyOnline(DF d) : s(d), sq(d) {}
  HWY_INLINE float Rebase(DF d, VF m, bool first) { return s.Rebase(d, m, first); }
  HWY_INLINE void Step4(DF d, size_t i, VF t0, VF t1, VF t2, VF t3, VF sm) {
    sq.Add4(d, hn::Mul(t0, t0), hn::Mul(t1, t1), hn::Mul(t2, t2), hn::Mul(t3, t3));
    s.Step4(d, i, t0, t1, t2, t3, sm);
  }
  HWY_INLINE void Step1(DF d, size_t i, VF t, size_t count, unsigned k) {
    sq.Add1(hn::Mul(t, t), k);
    s.Step1(d, i, t, count, k);
  }
};

// OnlineScan's (ref, d, max); busy: through KtBusyOnline instead.
void KtOnline(const float* x, size_t n, bool busy, float* ref, double* dsum, float* max) {
  const Logits<false, false> src{x, nullptr, 1.0f};
  if (!busy) {
    const OnlineResult r = OnlineScan(src, n);
    *ref = r.ref;
    *dsum = r.d;
    *max = r.max;
    return;
  }
  const DF d;
  KtBusyOnline v(d);
  *max = OnlineScanWith(src, n, v);
  *ref = v.s.r.ref;
  *dsum = v.s.sum.Total(d);
}

void KtTwoPass(const float* x, size_t n, double* mu, double* nu, float* max, bool* in_range) {
  const TwoPassResult r = TwoPassScan(Logits<false, false>{x, nullptr, 1.0f}, n);
  *mu = r.mu;
  *nu = r.nu;
  *max = r.max;
  *in_range = r.in_range;
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernel_test.h"
#include "test_util.h"

namespace smax::kernels {
HWY_EXPORT(KtRecord);
HWY_EXPORT(KtOnline);
HWY_EXPORT(KtTwoPass);
namespace {

using smax_kernel_test::KtCall;
constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

class KernelScan : public KernelTest {};

// Rows of every shape the scans meet: n around the step (4N) and block
// sizes, noise of several widths, ramps (a rebase every step), masked
// entries, all masked.
std::vector<float> Row(int kind, size_t n, smax_test::Rng& rng) {
  std::vector<float> x(n);
  for (size_t j = 0; j < n; ++j) {
    const float z = rng.normal(0.0f, 1.0f);
    switch (kind) {
      case 0: x[j] = z; break;
      case 1: x[j] = 30.0f * z; break;
      case 2: x[j] = 1000.0f + 200.0f * z; break;
      case 3: x[j] = 0.5f * static_cast<float>(j) + z; break;    // rising: rebases
      case 4: x[j] = 80.0f * static_cast<float>(j) + z; break;   // a rebase every step
      case 5: x[j] = -3000.0f - 0.25f * static_cast<float>(j); break;  // falling, far off 0
      case 6: x[j] = (j % 3 == 0) ? kNegInfF : 5.0f * z; break;
      case 7: x[j] = kNegInfF; break;
      default: x[j] = -1.0e30f + 1.0e28f * z; break;          // huge |t|
    }
  }
  return x;
}
const size_t kSizes[] = {1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 64, 65, 100, 255, 256, 1000, 4099,
                         70001};

// The template's own contract, with a recording visitor.
TEST_P(KernelScan, OnlineScanWithVisitsEveryElementOnce) {
  const size_t N = HWY_DYNAMIC_DISPATCH(KtLanes)();
  smax_test::Rng rng("visits");
  for (const int kind : {0, 3, 4, 6, 7}) {
    for (const size_t n : kSizes) {
      const std::vector<float> x = Row(kind, n, rng);
      const float slack = 3.0f;
      std::vector<KtCall> calls;
      const float max = HWY_DYNAMIC_DISPATCH(KtRecord)(x.data(), n, slack, &calls);
      const float want_max = *std::max_element(x.begin(), x.end());
      EXPECT_EQ(max, want_max) << "kind " << kind << ", n = " << n;
      // Replay: the expected sequence from the documented rule.
      std::vector<KtCall> want;
      float thresh = kNegInfF;
      bool first = true;
      auto step = [&](size_t i, size_t len) {
        float m = kNegInfF;
        for (size_t j = i; j < i + len; ++j) m = std::max(m, x[j]);
        if (m > thresh) {
          want.push_back(KtCall{0, 0, 0, 0, first, m});
          first = false;
          thresh = m + slack;
        }
      };
      size_t i = 0;
      for (; i + 4 * N <= n; i += 4 * N) {
        step(i, 4 * N);
        want.push_back(KtCall{4, i, 0, 0, false, 0.0f});
      }
      unsigned k = 0;
      for (; i < n; i += N, ++k) {
        const size_t count = std::min(N, n - i);
        step(i, count);
        want.push_back(KtCall{1, i, count, k, false, 0.0f});
      }
      ASSERT_EQ(calls.size(), want.size()) << "kind " << kind << ", n = " << n;
      for (size_t c = 0; c < calls.size(); ++c) {
        const KtCall& a = calls[c];
        const KtCall& b = want[c];
        ASSERT_TRUE(a.kind == b.kind && a.i == b.i && a.count == b.count && a.k == b.k &&
                    a.first == b.first && a.step_max == b.step_max)
            << "kind " << kind << ", n = " << n << ", call " << c << ": got (" << a.kind << ", "
            << a.i << ", " << a.count << ", " << a.k << ", " << a.first << ", " << a.step_max
            << "), want (" << b.kind << ", " << b.i << ", " << b.count << ", " << b.k << ", "
            << b.first << ", " << b.step_max << ")";
      }
    }
  }
}

// Calls check(x, at, want_max) for a row of every kind 0..8 and size of
// kSizes, drawn from Rng(seed); `at` names the row, want_max is its max.
template <class Check>
void ForEveryRow(const char* seed, const Check& check) {
  smax_test::Rng rng(seed);
  for (int kind = 0; kind <= 8; ++kind) {
    for (const size_t n : kSizes) {
      const std::vector<float> x = Row(kind, n, rng);
      const std::string at = "kind " + std::to_string(kind) + ", n = " + std::to_string(n);
      check(x, at, *std::max_element(x.begin(), x.end()));
    }
  }
}

TEST_P(KernelScan, OnlineScanMatchesFloat64) {
  ForEveryRow("online", [](const std::vector<float>& x, const std::string& at, float want_max) {
    const size_t n = x.size();
    float ref = 0.0f, max = 0.0f;
    double dsum = 0.0;
    HWY_DYNAMIC_DISPATCH(KtOnline)(x.data(), n, false, &ref, &dsum, &max);
    EXPECT_EQ(max, want_max) << at;
    if (want_max == kNegInfF) {
      EXPECT_EQ(dsum, 0.0) << at;
      return;
    }
    EXPECT_LE(ref, max) << at;
    EXPECT_LE(static_cast<double>(max) - ref, 32.0) << at;
    double want = 0.0;
    for (const float t : x) want += std::exp(static_cast<double>(t) - ref);
    EXPECT_GE(want, 1.0) << at;
    EXPECT_LE(std::fabs(dsum - want), 2e-6 * want)
        << at << ": d = " << dsum << ", float64 " << want << " (ref " << ref << ")";
    // Extra per-step work in the visitor leaves the bits alone.
    float ref2 = 0.0f, max2 = 0.0f;
    double dsum2 = 0.0;
    HWY_DYNAMIC_DISPATCH(KtOnline)(x.data(), n, true, &ref2, &dsum2, &max2);
    EXPECT_EQ(smax_kernel_test::Bits(dsum2), smax_kernel_test::Bits(dsum)) << at;
    EXPECT_EQ(ref2, ref) << at;
    EXPECT_EQ(max2, max) << at;
  });
}

TEST_P(KernelScan, TwoPassScanMatchesFloat64) {
  const float max_abs = HWY_DYNAMIC_DISPATCH(KtRefMaxAbs)();
  ForEveryRow("two-pass", [&](const std::vector<float>& x, const std::string& at, float want_max) {
    double mu = 0.0, nu = 0.0;
    float max = 0.0f;
    bool in_range = false;
    HWY_DYNAMIC_DISPATCH(KtTwoPass)(x.data(), x.size(), &mu, &nu, &max, &in_range);
    EXPECT_EQ(max, want_max) << at;
    if (want_max == kNegInfF) {
      EXPECT_TRUE(in_range) << at;
      EXPECT_EQ(mu, 0.0) << at;
      return;
    }
    EXPECT_EQ(in_range, std::fabs(want_max) <= max_abs) << at;
    if (!in_range) return;
    EXPECT_EQ(nu, std::nearbyint(static_cast<double>(max) * 1.4426950408889634)) << at;
    // sum e^(t - nu ln2) in float64.
    double want = 0.0;
    for (const float t : x) want += std::exp(static_cast<double>(t) - nu * smax_kernel_test::kLn2);
    EXPECT_LE(std::fabs(mu - want), 2e-6 * want)
        << at << ": mu = " << mu << ", float64 " << want << " (nu " << nu << ")";
  });
}

}  // namespace
SMAX_INSTANTIATE_PER_TARGET(KernelScan);
}  // namespace smax::kernels
#endif  // HWY_ONCE

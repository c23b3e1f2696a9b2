// src/kernels/cross_entropy_zloss.cc: row kernels of de Brebisson & Vincent's
// spherical Z-loss (kernels/cross_entropy.h): the mean / variance of the
// unmasked logits and the affine gradient row.
//
// Everything is computed in float64 vectors (f32 loads promoted): the loss
// needs (t_y - mean) / std accurately for rows of any magnitude (|t| up to
// FLT_MAX, where f32 deviations or squares would overflow), and a variance
// by the two-pass formula sum (t - mean)^2 has no cancellation. The row is
// read twice (sum, then squared deviations); it is the cheap part next to a
// softmax (no exp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cross_entropy_zloss.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cross_entropy.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D64 = hn::ScalableTag<double>;
using V64 = hn::Vec<D64>;
using D32 = hn::Rebind<float, D64>;
constexpr size_t kMax64 = HWY_MAX_BYTES / sizeof(double);

// Calls f(v, i, count) over the row as promoted double vectors; the tail is
// copied into a buffer padded with -inf (count = valid lanes).
template <class F>
HWY_INLINE void ForEach64(const float* t, size_t n, F&& f) {
  const D64 d;
  const D32 d32;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) f(hn::PromoteTo(d, hn::LoadU(d32, t + i)), i, N);
  if (i < n) {
    HWY_ALIGN float b[kMax64];
    for (size_t k = 0; k < kMax64; ++k) b[k] = -std::numeric_limits<float>::infinity();
    std::memcpy(b, t + i, (n - i) * sizeof(float));
    f(hn::PromoteTo(d, hn::Load(d32, b)), i, n - i);
  }
}

HWY_INLINE double SumLanes(D64 d, V64 v) {
  HWY_ALIGN double b[kMax64];
  hn::Store(v, d, b);
  double s = 0.0;
  for (size_t k = 0; k < hn::Lanes(d); ++k) s += b[k];
  return s;
}

SphereStats SphereStatsImpl(const float* t, int64_t n64) {
  const D64 d;
  const size_t n = static_cast<size_t>(n64);
  const V64 neg_inf = hn::Set(d, -std::numeric_limits<double>::infinity());
  V64 s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t count = 0;
  unsigned k = 0;
  // Pass 1: sum and count of the unmasked entries (NaN and +inf kept).
  ForEach64(t, n, [&](V64 v, size_t, size_t) {
    const auto masked = hn::Eq(v, neg_inf);
    count += static_cast<int64_t>(hn::Lanes(d) - hn::CountTrue(d, masked));
    if (k++ & 1) {
      s1 = hn::Add(s1, hn::IfThenZeroElse(masked, v));
    } else {
      s0 = hn::Add(s0, hn::IfThenZeroElse(masked, v));
    }
  });
  SphereStats out;
  out.count = count;
  if (count == 0) return out;
  out.mean = SumLanes(d, hn::Add(s0, s1)) / static_cast<double>(count);
  // Pass 2: sum of squared deviations.
  const V64 vm = hn::Set(d, out.mean);
  V64 q0 = hn::Zero(d), q1 = hn::Zero(d);
  k = 0;
  ForEach64(t, n, [&](V64 v, size_t, size_t) {
    const V64 dev = hn::IfThenZeroElse(hn::Eq(v, neg_inf), hn::Sub(v, vm));
    if (k++ & 1) {
      q1 = hn::MulAdd(dev, dev, q1);
    } else {
      q0 = hn::MulAdd(dev, dev, q0);
    }
  });
  out.m2 = SumLanes(d, hn::Add(q0, q1));
  return out;
}

void SphereGradImpl(const float* t, int64_t n64, double mean, double alpha, double beta,
                    float* dst) {
  const D64 d;
  const D32 d32;
  const size_t n = static_cast<size_t>(n64);
  const V64 neg_inf = hn::Set(d, -std::numeric_limits<double>::infinity());
  const V64 vm = hn::Set(d, mean);
  const V64 va = hn::Set(d, alpha);
  const V64 vb = hn::Set(d, beta);
  ForEach64(t, n, [&](V64 v, size_t i, size_t count) {
    const V64 g = hn::IfThenZeroElse(hn::Eq(v, neg_inf), hn::MulAdd(vb, hn::Sub(v, vm), va));
    const auto g32 = DemoteIeee(d, g);
    if (count == hn::Lanes(d)) {
      hn::StoreU(g32, d32, dst + i);
    } else {
      HWY_ALIGN float b[kMax64];
      hn::Store(g32, d32, b);
      std::memcpy(dst + i, b, count * sizeof(float));
    }
  });
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SphereStatsImpl);
HWY_EXPORT(SphereGradImpl);

SphereStats sphere_stats(const float* t, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(SphereStatsImpl)(t, n);
}
void sphere_grad(const float* t, int64_t n, double mean, double alpha, double beta,
                 float* dst) noexcept {
  HWY_DYNAMIC_DISPATCH(SphereGradImpl)(t, n, mean, alpha, beta, dst);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE

// bench/floors.cc: see floors.h. Highway dynamic dispatch over every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "floors.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>

#include "floors.h"

HWY_BEFORE_NAMESPACE();
namespace smax_bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// f(x) summed over the whole steps of 4 vectors of src[0, n) in four
// accumulators; *i: where the steps end.
template <class F>
HWY_INLINE float SumSteps(const float* HWY_RESTRICT src, size_t n, size_t* i, F f) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  for (*i = 0; *i + 4 * N <= n; *i += 4 * N) {
    a0 = hn::Add(a0, f(d, hn::LoadU(d, src + *i)));
    a1 = hn::Add(a1, f(d, hn::LoadU(d, src + *i + N)));
    a2 = hn::Add(a2, f(d, hn::LoadU(d, src + *i + 2 * N)));
    a3 = hn::Add(a3, f(d, hn::LoadU(d, src + *i + 3 * N)));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

struct Identity {
  template <class D, class V>
  HWY_INLINE V operator()(D, V v) const { return v; }
};
struct ExpOf {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V v) const { return hn::Exp(d, v); }
};

float ReadFloorImpl(const float* HWY_RESTRICT src, size_t n) {
  size_t i;
  float s = SumSteps(src, n, &i, Identity{});
  for (; i < n; ++i) s += src[i];
  return s;
}

void ReadWriteFloorImpl(const float* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, src + i), one), d, dst + i);
    hn::StoreU(hn::Mul(hn::LoadU(d, src + i + N), one), d, dst + i + N);
    hn::StoreU(hn::Mul(hn::LoadU(d, src + i + 2 * N), one), d, dst + i + 2 * N);
    hn::StoreU(hn::Mul(hn::LoadU(d, src + i + 3 * N), one), d, dst + i + 3 * N);
  }
  for (; i < n; ++i) dst[i] = src[i];
}

void StreamCopyFloorImpl(const float* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  // Scalar head up to dst's first vector-aligned element (Stream needs it).
  while (i < n && reinterpret_cast<uintptr_t>(dst + i) % (N * sizeof(float)) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 4 * N <= n; i += 4 * N) {
    hn::Stream(hn::LoadU(d, src + i), d, dst + i);
    hn::Stream(hn::LoadU(d, src + i + N), d, dst + i + N);
    hn::Stream(hn::LoadU(d, src + i + 2 * N), d, dst + i + 2 * N);
    hn::Stream(hn::LoadU(d, src + i + 3 * N), d, dst + i + 3 * N);
  }
  for (; i < n; ++i) dst[i] = src[i];
  hwy::FlushStream();
}

float ExpFloorImpl(const float* HWY_RESTRICT src, size_t n) {
  size_t i;
  return SumSteps(src, n, &i, ExpOf{});
}

const char* TargetImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace smax_bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax_bench {
HWY_EXPORT(ReadFloorImpl);
HWY_EXPORT(ReadWriteFloorImpl);
HWY_EXPORT(ExpFloorImpl);
HWY_EXPORT(StreamCopyFloorImpl);
HWY_EXPORT(TargetImpl);

float read_floor(const float* src, size_t n) { return HWY_DYNAMIC_DISPATCH(ReadFloorImpl)(src, n); }
void read_write_floor(const float* src, float* dst, size_t n) {
  HWY_DYNAMIC_DISPATCH(ReadWriteFloorImpl)(src, dst, n);
}
float exp_floor(const float* src, size_t n) { return HWY_DYNAMIC_DISPATCH(ExpFloorImpl)(src, n); }
void stream_copy_floor(const float* src, float* dst, size_t n) {
  HWY_DYNAMIC_DISPATCH(StreamCopyFloorImpl)(src, dst, n);
}
const char* floor_target() { return HWY_DYNAMIC_DISPATCH(TargetImpl)(); }
}  // namespace smax_bench
#endif

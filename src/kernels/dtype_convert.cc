// src/kernels/dtype_convert.cc: see dtype_convert.h. Per target:
//  * bf16 / f16: narrow-inl.h's vector conversions (bf16 by integer round
//    to nearest even; f16 by F16C where the target has it, an exact integer
//    emulation elsewhere), the ones the fused narrow softmax kernels use;
//  * f64 <-> f32: PromoteTo / DemoteIeee (row-inl.h: rounds to nearest
//    even and gives +-inf beyond f32 on every target; Highway's own DemoteTo
//    saturates at +-FLT_MAX on SCALAR), the scalar cast for the tail.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dtype_convert.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include "kernels/row-inl.h"
#include "kernels/narrow-inl.h"
#include "kernels/dtype_convert.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

template <Storage S>
void WidenNarrow(const uint16_t* HWY_RESTRICT src, size_t n, float* HWY_RESTRICT out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadWiden<S>(src + i), d, out + i);
  if (i < n) StoreTail(d, LoadWidenTail<S>(src + i, n - i), out + i, n - i);
}

template <Storage S>
void NarrowNarrow(const float* HWY_RESTRICT in, size_t n, uint16_t* HWY_RESTRICT dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) StoreNarrow<S>(hn::LoadU(d, in + i), dst + i);
  if (i < n) StoreNarrowTail<S>(LoadTailZero(d, in + i, n - i), dst + i, n - i);
}

void WidenF64(const double* HWY_RESTRICT src, size_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const size_t N = hn::Lanes(dd);
  size_t i = 0;
  // DemoteIeee: Highway's DemoteTo saturates +-inf and values beyond f32 at
  // +-FLT_MAX on SCALAR (found by the fuzz harness's f64 storage draws).
  for (; i + N <= n; i += N) hn::StoreU(DemoteIeee(dd, hn::LoadU(dd, src + i)), df, dst + i);
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void NarrowF64(const float* HWY_RESTRICT src, size_t n, double* HWY_RESTRICT dst) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const size_t N = hn::Lanes(dd);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(dd, hn::LoadU(df, src + i)), dd, dst + i);
  for (; i < n; ++i) dst[i] = src[i];
}

void WidenRowImpl(const void* src, DType dtype, int64_t n, float* dst) {
  const auto count = static_cast<size_t>(n);
  switch (dtype) {
    case DType::kBF16:
      return WidenNarrow<Storage::kBF16>(static_cast<const uint16_t*>(src), count, dst);
    case DType::kF16:
      return WidenNarrow<Storage::kF16>(static_cast<const uint16_t*>(src), count, dst);
    case DType::kF64: return WidenF64(static_cast<const double*>(src), count, dst);
    default:
      if (src != dst) std::memmove(dst, src, count * sizeof(float));
      return;
  }
}

void NarrowRowImpl(const float* src, int64_t n, void* dst, DType dtype) {
  const auto count = static_cast<size_t>(n);
  switch (dtype) {
    case DType::kBF16: return NarrowNarrow<Storage::kBF16>(src, count, static_cast<uint16_t*>(dst));
    case DType::kF16: return NarrowNarrow<Storage::kF16>(src, count, static_cast<uint16_t*>(dst));
    case DType::kF64: return NarrowF64(src, count, static_cast<double*>(dst));
    default:
      if (static_cast<const void*>(src) != dst) std::memmove(dst, src, count * sizeof(float));
      return;
  }
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {
bool cpu_has_bf16_instruction() noexcept {
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
  // CPUID leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16. The AVX-512 targets
  // that use it run only where Highway found the OS saving zmm state.
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return ((a >> 5) & 1u) != 0;
#else
  return false;
#endif
}
bool g_bf16_instruction = cpu_has_bf16_instruction();
bool set_bf16_instruction(bool on) noexcept {
  const bool previous = g_bf16_instruction;
  g_bf16_instruction = on && cpu_has_bf16_instruction();
  return previous;
}

HWY_EXPORT(WidenRowImpl);
HWY_EXPORT(NarrowRowImpl);

void widen_row(const void* src, DType dtype, int64_t n, float* dst) noexcept {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(WidenRowImpl)(src, dtype, n, dst);
}
void narrow_row(const float* src, int64_t n, void* dst, DType dtype) noexcept {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(NarrowRowImpl)(src, n, dst, dtype);
}
}  // namespace smax::kernels
#endif

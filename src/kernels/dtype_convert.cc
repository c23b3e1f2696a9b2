// src/kernels/dtype_convert.cc: see dtype_convert.h. Per target:
//  * bf16 -> f32: the 16 bits shifted into the upper half (exact);
//  * f32 -> bf16: integer round to nearest even (bits + 0x7fff + lsb) >> 16,
//    NaN kept quiet (Highway 1.0.3's DemoteTo truncates);
//  * f16 <-> f32: Highway's PromoteTo / DemoteTo where the target has F16C
//    (AVX2 and up: vcvtps2ph rounds to nearest even); other targets use the
//    scalar definitions of src/core/convert.h (their emulated DemoteTo
//    truncates);
//  * f64 <-> f32: PromoteTo / DemoteTo (cvtpd2ps rounds to nearest even).
// Tails (n not a multiple of the vector) use the scalar definitions, which
// give the same bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dtype_convert.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "core/convert.h"
#include "kernels/dtype_convert.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;  // half-width: one u16 per f32 lane

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
constexpr bool kNativeF16 = true;
#else
constexpr bool kNativeF16 = false;
#endif

void WidenBf16(const uint16_t* HWY_RESTRICT src, size_t n, float* HWY_RESTRICT dst) {
  const DF df;
  const DU32 du32;
  const DU16 du16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto w = hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, src + i)));
    hn::StoreU(hn::BitCast(df, w), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = detail::bf16_to_f32(src[i]);
}

void NarrowBf16(const float* HWY_RESTRICT src, size_t n, uint16_t* HWY_RESTRICT dst) {
  const DF df;
  const DU32 du32;
  const DI32 di32;
  const DU16 du16;
  const size_t N = hn::Lanes(df);
  const auto k7fff = hn::Set(du32, 0x7fffu);
  const auto kOne = hn::Set(du32, 1u);
  const auto kQuiet = hn::Set(du32, 0x400000u);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, src + i);
    const auto u = hn::BitCast(du32, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(u), kOne);
    const auto rounded = hn::Add(hn::Add(u, k7fff), lsb);
    // NaN test on the bits (Ne(v, v) is an ordered compare on x86: false).
    const auto magnitude = hn::BitCast(di32, hn::And(u, hn::Set(du32, 0x7fffffffu)));
    const auto nan = hn::RebindMask(du32, hn::Gt(magnitude, hn::Set(di32, 0x7f800000)));
    const auto bits = hn::ShiftRight<16>(hn::IfThenElse(nan, hn::Or(u, kQuiet), rounded));
    // bits < 2^16: the signed -> unsigned demotion does not saturate.
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, bits)), du16, dst + i);
  }
  for (; i < n; ++i) dst[i] = detail::f32_to_bf16(src[i]);
}

void WidenF16(const uint16_t* HWY_RESTRICT src, size_t n, float* HWY_RESTRICT dst) {
  size_t i = 0;
  if constexpr (kNativeF16) {
    const DF df;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const size_t N = hn::Lanes(df);
    for (; i + N <= n; i += N) {
      const auto h = hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src + i));
      hn::StoreU(hn::PromoteTo(df, h), df, dst + i);
    }
  }
  for (; i < n; ++i) dst[i] = detail::f16_to_f32(src[i]);
}

void NarrowF16(const float* HWY_RESTRICT src, size_t n, uint16_t* HWY_RESTRICT dst) {
  size_t i = 0;
  if constexpr (kNativeF16) {
    const DF df;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const size_t N = hn::Lanes(df);
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, src + i)), dh,
                 reinterpret_cast<hwy::float16_t*>(dst + i));
    }
  }
  for (; i < n; ++i) dst[i] = detail::f32_to_f16(src[i]);
}

void WidenF64(const double* HWY_RESTRICT src, size_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const size_t N = hn::Lanes(dd);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(df, hn::LoadU(dd, src + i)), df, dst + i);
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
    case DType::kBF16: WidenBf16(static_cast<const uint16_t*>(src), count, dst); return;
    case DType::kF16: WidenF16(static_cast<const uint16_t*>(src), count, dst); return;
    case DType::kF64: WidenF64(static_cast<const double*>(src), count, dst); return;
    default: std::memcpy(dst, src, count * sizeof(float)); return;
  }
}

void NarrowRowImpl(const float* src, int64_t n, void* dst, DType dtype) {
  const auto count = static_cast<size_t>(n);
  switch (dtype) {
    case DType::kBF16: NarrowBf16(src, count, static_cast<uint16_t*>(dst)); return;
    case DType::kF16: NarrowF16(src, count, static_cast<uint16_t*>(dst)); return;
    case DType::kF64: NarrowF64(src, count, static_cast<double*>(dst)); return;
    default: std::memcpy(dst, src, count * sizeof(float)); return;
  }
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {
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

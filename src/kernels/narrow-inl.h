// src/kernels/narrow-inl.h: bf16 / f16 storage in registers: exact widening
// to f32 lanes, round-to-nearest-even narrowing of f32 lanes, and the row
// sources and sinks the narrow kernels (softmax_narrow*.cc) are built from.
//
// Contract (the scalar definitions are core/convert.h's; tests/
// test_narrow_convert.cc checks every target against them):
//  * Widen<S>: bf16 and f16 -> f32 exactly (f16 subnormals, inf, NaN
//    payloads included).
//  * Narrow<S>: f32 -> bf16 / f16 rounded to nearest, ties to even, once;
//    overflow -> +-inf (f16: |x| >= 65520), below half the smallest
//    subnormal -> +-0, NaN -> quiet NaN with the sign and the top payload
//    bits kept. Highway 1.0.3's DemoteTo(bf16) truncates and its software
//    f16 DemoteTo (no F16C) truncates, so bf16 is rounded with integer ops
//    (on AVX-512 targets of CPUs with AVX512_BF16, by vcvtneps2bf16, the
//    same bits: see NarrowBf16), and f16 uses F16C (vcvtps2ph, round to
//    nearest even) on AVX2 / AVX-512 and an exact integer emulation
//    elsewhere.
//  * RowLogits<S>: the Src of load-inl.h (Load, LoadTail with -inf lanes
//    past the row) for a row of storage S: t = fl(fl(x * scale) + mask) on
//    the widened x, the same f32 values Logits<> forms from the widened row.
//    Narrow tails are read through a stack copy of `count` elements (16-bit
//    masked loads do not exist on AVX2).
//  * AnyOut: a row sink of run-time storage: Store(d, v, i) (a full vector
//    at element i), StoreTail(d, v, i, count) (writes exactly `count`
//    elements); In<S>: Load(d, i) and LoadTailZero(d, i, count) (lanes past
//    `count` are 0) for the backward inputs.
//
// A per-target header of its own (not a row-inl.h piece, so the kernels
// that do not use it are not rebuilt with it): include it after
// kernels/row-inl.h, outside any namespace; it has the Highway per-target
// toggle guard and declares into smax::kernels::HWY_NAMESPACE.
#if defined(SMAX_KERNELS_NARROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SMAX_KERNELS_NARROW_INL_H_
#undef SMAX_KERNELS_NARROW_INL_H_
#else
#define SMAX_KERNELS_NARROW_INL_H_
#endif

#include "kernels/row-inl.h"

namespace smax::kernels {
extern bool g_bf16_instruction;  // dtype_convert.cc
}  // namespace smax::kernels

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

enum class Storage { kF32, kBF16, kF16 };

using DU16 = hn::Rebind<uint16_t, DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using VU16 = hn::Vec<DU16>;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
constexpr bool kHaveF16C = true;
#else
constexpr bool kHaveF16C = false;
#endif

// ---- widening -------------------------------------------------------------
HWY_INLINE VF WidenBf16(VU16 h) {
  const DF d;
  const DU32 du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}

// f16 -> f32 with integer ops (targets without F16C): normal numbers
// rebias the exponent, inf / NaN get the f32 all-ones exponent, zeros and
// subnormals are man * 2^-24 (exact in f32).
HWY_INLINE VF WidenF16Emulated(VU16 h) {
  const DF d;
  const DU32 du;
  const auto u = hn::PromoteTo(du, h);
  const auto sign = hn::ShiftLeft<16>(hn::And(u, hn::Set(du, 0x8000u)));
  const auto em = hn::And(u, hn::Set(du, 0x7fffu));
  const auto shifted = hn::ShiftLeft<13>(em);
  const auto normal = hn::Add(shifted, hn::Set(du, 112u << 23));
  const auto special = hn::Add(shifted, hn::Set(du, 224u << 23));
  const DI di;
  const VF sub = hn::Mul(hn::ConvertTo(d, hn::BitCast(di, em)), hn::Set(d, 0x1p-24f));
  const auto is_special = hn::Gt(hn::BitCast(di, em), hn::Set(di, 0x7c00 - 1));
  const auto is_sub = hn::Lt(hn::BitCast(di, em), hn::Set(di, 0x0400));
  auto bits = hn::IfThenElse(hn::RebindMask(du, is_special), special, normal);
  bits = hn::IfThenElse(hn::RebindMask(du, is_sub), hn::BitCast(du, sub), bits);
  return hn::BitCast(d, hn::Or(bits, sign));
}

HWY_INLINE VF WidenF16(VU16 h) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const VF v = hn::PromoteTo(d, hn::BitCast(dh, h));
  // vcvtph2ps quiets signalling NaNs; convert.h keeps their payload as is.
  if (HWY_UNLIKELY(!hn::AllFalse(d, hn::IsNaN(v)))) return WidenF16Emulated(h);
  return v;
#else
  return WidenF16Emulated(h);
#endif
}

template <Storage S>
HWY_INLINE VF Widen(VU16 h) {
  static_assert(S != Storage::kF32, "f32 needs no widening");
  return S == Storage::kBF16 ? WidenBf16(h) : WidenF16(h);
}

// ---- narrowing ------------------------------------------------------------
// u32 lanes that hold values <= 0xffff -> u16 lanes.
HWY_INLINE VU16 LowHalves(hn::Vec<DU32> u) {
  const DU16 dh;
  const DI di;
  return hn::DemoteTo(dh, hn::BitCast(di, u));
}

// vcvtneps2bf16 (AVX512_BF16) rounds to nearest even and quiets NaNs as
// NarrowBf16Integer does ((bits >> 16) | 0x40, sign and top payload kept),
// but reads f32 subnormal inputs as zero: vectors holding one take the
// integer path. The subnormal test is on the integer bits (vfpclassps
// follows MXCSR.DAZ, which programs turn on, e.g.
// torch.set_flush_denormal(True); the conversion ignores MXCSR). Used
// where the CPU has it (dtype_convert.h's set_bf16_instruction;
// g_bf16_instruction is defined in dtype_convert.cc).
#undef SMAX_BF16_INSTRUCTION
#if (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && \
    (defined(__GNUC__) || defined(__clang__))
#define SMAX_BF16_INSTRUCTION 1
#else
#define SMAX_BF16_INSTRUCTION 0
#endif

HWY_INLINE VU16 NarrowBf16Integer(VF v) {
  const DU32 du;
  const auto u = hn::BitCast(du, v);
  const auto odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), odd));
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  const DI di;
  const auto a = hn::BitCast(di, hn::And(u, hn::Set(du, 0x7fffffffu)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(a, hn::Set(di, 0x7f800000)));
  return LowHalves(hn::IfThenElse(is_nan, quiet_nan, rounded));
}

HWY_INLINE VU16 NarrowBf16(VF v) {
#if SMAX_BF16_INSTRUCTION
  if (g_bf16_instruction) {
    // Subnormal lanes: 0 < |bits| < 0x00800000, i.e. |bits| - 1 < 0x007fffff
    // unsigned.
    const DU32 du;
    const auto a = hn::And(hn::BitCast(du, v), hn::Set(du, 0x7fffffffu));
    const auto sub = hn::Lt(hn::Sub(a, hn::Set(du, 1u)), hn::Set(du, 0x007fffffu));
    if (HWY_LIKELY(hn::AllFalse(du, sub))) {
      __m256i r;
      asm("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(v.raw));
      return VU16{r};
    }
  }
#endif
  return NarrowBf16Integer(v);
}

// f32 -> f16 with integer ops and one f32 add (core/convert.h's f32_to_f16,
// vectorised): |x| < 2^-14 rounds through x + 0.5 (the FPU's round to
// nearest even puts the f16 subnormal in the low mantissa bits).
HWY_INLINE VU16 NarrowF16Emulated(VF v) {
  const DF d;
  const DU32 du;
  const DI di;
  const auto u = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const auto a = hn::And(u, hn::Set(du, 0x7fffffffu));
  const auto ai = hn::BitCast(di, a);
  const auto odd = hn::And(hn::ShiftRight<13>(a), hn::Set(du, 1u));
  const auto normal = hn::ShiftRight<13>(
      hn::Sub(hn::Add(hn::Add(a, hn::Set(du, 0xfffu)), odd), hn::Set(du, 0x38000000u)));
  const VF half = hn::Set(d, 0.5f);
  const auto sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, a), half)),
                           hn::BitCast(du, half));
  const auto nan = hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(a), hn::Set(du, 0x3ffu)));
  auto r = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000))), sub, normal);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x477ff000 - 1))),
                     hn::Set(du, 0x7c00u), r);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7f800000))), nan, r);
  return LowHalves(hn::Or(r, sign));
}

HWY_INLINE VU16 NarrowF16(VF v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
  const DU16 dh;
  const hn::Rebind<hwy::float16_t, DF> df16;
  return hn::BitCast(dh, hn::DemoteTo(df16, v));
#else
  return NarrowF16Emulated(v);
#endif
}

template <Storage S>
HWY_INLINE VU16 Narrow(VF v) {
  static_assert(S != Storage::kF32, "f32 needs no narrowing");
  return S == Storage::kBF16 ? NarrowBf16(v) : NarrowF16(v);
}

// ---- row access ------------------------------------------------------------
template <Storage S>
HWY_INLINE VF LoadWiden(const uint16_t* HWY_RESTRICT p) {
  return Widen<S>(hn::LoadU(DU16(), p));
}
// Lanes [count, N) read as +0.
template <Storage S>
HWY_INLINE VF LoadWidenTail(const uint16_t* HWY_RESTRICT p, size_t count) {
  HWY_ALIGN uint16_t b[kMaxLanes] = {};
  std::memcpy(b, p, count * sizeof(uint16_t));
  return Widen<S>(hn::Load(DU16(), b));
}
template <Storage S>
HWY_INLINE void StoreNarrow(VF v, uint16_t* HWY_RESTRICT p) {
  hn::StoreU(Narrow<S>(v), DU16(), p);
}
template <Storage S>
HWY_INLINE void StoreNarrowTail(VF v, uint16_t* HWY_RESTRICT p, size_t count) {
  HWY_ALIGN uint16_t b[kMaxLanes];
  hn::Store(Narrow<S>(v), DU16(), b);
  std::memcpy(p, b, count * sizeof(uint16_t));
}

// t = fl(fl(x * scale) + mask) of a row x of storage S (f32 mask, nullable):
// the values load-inl.h's Logits<kMask, kScale> forms from the widened row.
// Whether to scale and mask is a run-time flag (a predicted branch per
// vector) rather than four instantiations, to keep the narrow kernels'
// code (and build time) small. kPlain = true is the common call (no mask,
// scale 1) compiled without the flags: t = x, fewer live registers in the
// fused scans (mask and scale are then ignored).
template <Storage S, bool kPlain = false>
struct RowLogits {
  using T = std::conditional_t<S == Storage::kF32, float, uint16_t>;
  const T* HWY_RESTRICT x;
  const float* HWY_RESTRICT mask;
  float scale;
  bool scaled;  // scale != 1

  HWY_INLINE VF Raw(DF d, size_t i) const {
    if constexpr (S == Storage::kF32) {
      return hn::LoadU(d, x + i);
    } else {
      return LoadWiden<S>(x + i);
    }
  }
  HWY_INLINE VF RawTail(DF d, size_t i, size_t count) const {
    if constexpr (S == Storage::kF32) {
      return LoadTailZero(d, x + i, count);
    } else {
      return LoadWidenTail<S>(x + i, count);
    }
  }
  HWY_INLINE VF Load(DF d, size_t i) const {
    VF v = Raw(d, i);
    if constexpr (kPlain) return v;
    if (scaled) v = Opaque(hn::Mul(v, hn::Set(d, scale)));
    if (mask != nullptr) v = hn::Add(v, hn::LoadU(d, mask + i));
    return v;
  }
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    VF v = RawTail(d, i, count);
    if constexpr (kPlain) return hn::IfThenElse(hn::FirstN(d, count), v, hn::Set(d, kNegInf));
    if (scaled) v = Opaque(hn::Mul(v, hn::Set(d, scale)));
    if (mask != nullptr) v = hn::Add(v, LoadTailZero(d, mask + i, count));
    return hn::IfThenElse(hn::FirstN(d, count), v, hn::Set(d, kNegInf));
  }
};

// A row sink of any storage (chosen at run time: a predicted branch per
// vector): each stored f32 lane is rounded once.
struct AnyOut {
  void* p;
  Storage s;
  float* F32() const { return static_cast<float*>(p); }
  uint16_t* U16() const { return static_cast<uint16_t*>(p); }
  HWY_INLINE void Store(DF d, VF v, size_t i) const {
    switch (s) {
      case Storage::kF32: hn::StoreU(v, d, F32() + i); return;
      case Storage::kBF16: StoreNarrow<Storage::kBF16>(v, U16() + i); return;
      case Storage::kF16: StoreNarrow<Storage::kF16>(v, U16() + i); return;
    }
  }
  HWY_INLINE void StoreTail(DF d, VF v, size_t i, size_t count) const {
    switch (s) {
      case Storage::kF32: ::smax::kernels::HWY_NAMESPACE::StoreTail(d, v, F32() + i, count); return;
      case Storage::kBF16: StoreNarrowTail<Storage::kBF16>(v, U16() + i, count); return;
      case Storage::kF16: StoreNarrowTail<Storage::kF16>(v, U16() + i, count); return;
    }
  }
  HWY_INLINE void Put(size_t i, float value) const { StoreTail(DF(), hn::Set(DF(), value), i, 1); }
  // The element at index i (for row arithmetic on the sink).
  AnyOut At(int64_t i) const {
    const size_t bytes = s == Storage::kF32 ? 4 : 2;
    return AnyOut{static_cast<char*>(p) + i * static_cast<int64_t>(bytes), s};
  }
};

// A row sink of storage S fixed at compile time (AnyOut's interface): the
// kernels' fast path when the output's storage is the input's.
template <Storage S>
struct Out {
  using T = std::conditional_t<S == Storage::kF32, float, uint16_t>;
  T* p;
  float* F32() const {
    if constexpr (S == Storage::kF32) {
      return p;
    } else {
      return nullptr;
    }
  }
  HWY_INLINE void Store(DF d, VF v, size_t i) const {
    if constexpr (S == Storage::kF32) {
      hn::StoreU(v, d, p + i);
    } else {
      StoreNarrow<S>(v, p + i);
    }
  }
  HWY_INLINE void StoreTail(DF d, VF v, size_t i, size_t count) const {
    if constexpr (S == Storage::kF32) {
      ::smax::kernels::HWY_NAMESPACE::StoreTail(d, v, p + i, count);
    } else {
      StoreNarrowTail<S>(v, p + i, count);
    }
  }
  HWY_INLINE void Put(size_t i, float value) const { StoreTail(DF(), hn::Set(DF(), value), i, 1); }
  Out At(int64_t i) const { return Out{p + i}; }
};

HWY_INLINE bool IsF32Out(const AnyOut& out) { return out.s == Storage::kF32; }
// Bytes per element of a sink.
HWY_INLINE size_t OutBytes(const AnyOut& out) { return out.s == Storage::kF32 ? 4 : 2; }
template <Storage S>
constexpr size_t OutBytes(const Out<S>&) {
  return S == Storage::kF32 ? 4 : 2;
}
template <Storage S>
constexpr bool IsF32Out(const Out<S>&) {
  return S == Storage::kF32;
}

// A row source of storage S for plain values (backward y / dy).
template <Storage S>
struct In {
  using T = std::conditional_t<S == Storage::kF32, float, uint16_t>;
  const T* HWY_RESTRICT p;
  HWY_INLINE VF Load(DF d, size_t i) const {
    if constexpr (S == Storage::kF32) {
      return hn::LoadU(d, p + i);
    } else {
      return LoadWiden<S>(p + i);
    }
  }
  HWY_INLINE VF LoadTailZero(DF d, size_t i, size_t count) const {
    if constexpr (S == Storage::kF32) {
      return ::smax::kernels::HWY_NAMESPACE::LoadTailZero(d, p + i, count);
    } else {
      return LoadWidenTail<S>(p + i, count);
    }
  }
};

// Fills out[0, n) with `value` (rounded once).
template <class O>
HWY_INLINE void FillOut(const O& out, size_t n, float value) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF v = hn::Set(d, value);
  size_t i = 0;
  for (; i + N <= n; i += N) out.Store(d, v, i);
  if (i < n) out.StoreTail(d, v, i, n - i);
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SMAX_KERNELS_NARROW_INL_H_

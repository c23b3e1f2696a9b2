// src/kernels/load-inl.h: the per-target lane layout every smax kernel
// shares (DF / VF, kUnroll, kMaxLanes), logit loading with tails (Logits:
// t = fl(fl(x * scale) + mask), lanes past the row read as -inf), plain f32
// tail loads / stores that never touch memory past the row, and the
// horizontal max / min.
//
// Contract: a Src (Logits, or a kernel's own row source) has
// Load(d, i) (the full vector at element i) and LoadTail(d, i, count)
// (count < N lanes; lanes [count, N) are -inf and only [i, i + count) is
// read). LoadTailZero / StoreTail read / write exactly `count` floats.
//
// Included only from kernels/row-inl.h, inside its per-target namespace
// smax::kernels::HWY_NAMESPACE (with `hn`, the standard and Highway headers
// and the pieces listed before this one in row-inl.h already in scope).
#ifndef SMAX_KERNELS_ROW_INL_PIECE_
#error "include kernels/row-inl.h, not its pieces"
#endif

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Unroll: 4 vectors per step ("u4") in every row loop (scans, exp-sums,
// store passes).
constexpr size_t kUnroll = 4;

// Targets whose MaskedLoad / BlendedStore never touch masked-out lanes
// (vmaskmovps, AVX-512 masks). SSE4/SSSE3 emulate them with full-vector
// accesses, so the tail is copied through a small stack buffer instead.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
constexpr bool kMaskedMem = true;
#else
constexpr bool kMaskedMem = false;
#endif
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// ---- logits -----------------------------------------------------------------
// Opaque(v) is an optimisation barrier: GCC contracts a separate multiply and
// add (even across statements, -ffp-contract=fast is its C++ default) into
// an FMA, which would turn fl(fl(x * scale) + mask) into one rounding and
// break TwoSum's exactness. The empty asm makes the product a fixed value.
HWY_INLINE VF Opaque(VF v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3 && (defined(__GNUC__) || defined(__clang__))
  // x86 SIMD targets only (EMU128's raw is a plain array). Through a local:
  // clang rejects "+v" on a member of an object that sits in memory (e.g. at
  // -O1 under ASan: "tied indirect register inputs").
  auto raw = v.raw;
  __asm__("" : "+v"(raw));
  v.raw = raw;
#endif
  return v;
}

// t = fl(fl(x * scale) + mask); kScale = false when scale == 1 (t = x).
template <bool kMask, bool kScale>
struct Logits {
  const float* HWY_RESTRICT x;
  const float* HWY_RESTRICT mask;
  float scale;

  HWY_INLINE VF Load(DF d, size_t i) const {
    VF v = hn::LoadU(d, x + i);
    if (kScale) v = Opaque(hn::Mul(v, hn::Set(d, scale)));
    if (kMask) v = hn::Add(v, hn::LoadU(d, mask + i));
    return v;
  }
  // Lanes [count, N) are -inf; reads only [i, i + count).
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    if (kMaskedMem) {
      const auto m = hn::FirstN(d, count);
      VF v = hn::MaskedLoad(m, d, x + i);
      if (kScale) v = Opaque(hn::Mul(v, hn::Set(d, scale)));
      if (kMask) v = hn::Add(v, hn::MaskedLoad(m, d, mask + i));
      return hn::IfThenElse(m, v, hn::Set(d, kNegInf));
    }
    HWY_ALIGN float bx[kMaxLanes];
    for (size_t k = 0; k < kMaxLanes; ++k) bx[k] = kNegInf;
    std::memcpy(bx, x + i, count * sizeof(float));
    VF v = hn::Load(d, bx);
    if (kScale) v = Opaque(hn::Mul(v, hn::Set(d, scale)));
    if (kMask) {
      HWY_ALIGN float bm[kMaxLanes] = {};
      std::memcpy(bm, mask + i, count * sizeof(float));
      v = hn::Add(v, hn::Load(d, bm));
    }
    return v;
  }
};

// Calls f(logits) with the right Logits<> instantiation.
template <class F>
HWY_INLINE void WithLogits(const float* x, const float* mask, float scale, F&& f) {
  if (mask != nullptr) {
    if (scale != 1.0f) {
      f(Logits<true, true>{x, mask, scale});
    } else {
      f(Logits<true, false>{x, mask, scale});
    }
  } else {
    if (scale != 1.0f) {
      f(Logits<false, true>{x, mask, scale});
    } else {
      f(Logits<false, false>{x, mask, scale});
    }
  }
}

// Plain f32 array loads (backward kernels), with the same tail rules.
HWY_INLINE VF LoadTailZero(DF d, const float* HWY_RESTRICT p, size_t count) {
  if (kMaskedMem) return hn::MaskedLoad(hn::FirstN(d, count), d, p);
  HWY_ALIGN float b[kMaxLanes] = {};
  std::memcpy(b, p, count * sizeof(float));
  return hn::Load(d, b);
}

HWY_INLINE void StoreTail(DF d, VF v, float* HWY_RESTRICT p, size_t count) {
  if (kMaskedMem) {
    hn::BlendedStore(v, hn::FirstN(d, count), d, p);
    return;
  }
  HWY_ALIGN float b[kMaxLanes];
  hn::Store(v, d, b);
  std::memcpy(p, b, count * sizeof(float));
}

// ---- horizontal max / min ---------------------------------------------------------
// Highway 1.0.3's EMU128 MaxOfLanes / MinOfLanes start from the lowest /
// highest *finite* value, so a vector of -inf (+inf) reduces to -FLT_MAX
// (FLT_MAX) there: an all-masked row then looked finite and came out NaN
// (found by the fuzz targets, which clang builds with EMU128 as fallback).
// These fold the lanes themselves on EMU128 and use Highway elsewhere.
HWY_INLINE float ReduceMax(DF d, VF v) {
#if HWY_TARGET == HWY_EMU128
  HWY_ALIGN float lanes[kMaxLanes];
  hn::Store(v, d, lanes);
  float m = lanes[0];
  for (size_t i = 1; i < hn::Lanes(d); ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
#else
  return hn::GetLane(hn::MaxOfLanes(d, v));
#endif
}
HWY_INLINE float ReduceMin(DF d, VF v) {
#if HWY_TARGET == HWY_EMU128
  HWY_ALIGN float lanes[kMaxLanes];
  hn::Store(v, d, lanes);
  float m = lanes[0];
  for (size_t i = 1; i < hn::Lanes(d); ++i) m = lanes[i] < m ? lanes[i] : m;
  return m;
#else
  return hn::GetLane(hn::MinOfLanes(d, v));
#endif
}

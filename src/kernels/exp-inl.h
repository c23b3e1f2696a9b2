// src/kernels/exp-inl.h: the per-target building blocks shared by every smax
// kernel: the f32 exp, logit loading with tails, blocked f32 -> f64 sums and
// the row scans (max, exp-sum, online (m, d), two-pass (mu, nu)).
//
// Included once per Highway target from each kernels/*.cc after
// <hwy/foreach_target.h>; guarded with the usual per-target toggle.
//
// ---------------------------------------------------------------------------
// The exp (one design, two ways to feed it)
// ---------------------------------------------------------------------------
// e^x = 2^n * e^r, n = round(x * log2(e)), r = x - n * ln2 in [-ln2/2, ln2/2].
//  1. Magic-bias rounding: nb = fma(x, log2e, B) with B = 1.5 * 2^23 + 127 - N
//     (N: a reference exponent, see below). ulp(B) = 1, so the FMA rounds
//     x * log2e to an integer n and leaves n - N + 127 in the low mantissa bits
//     of nb; `bits(nb) << 23` is then exactly 2^(n - N) (one shift, no cvt).
//     n = nb - B is exact.
//  2. Cody-Waite reduction with a hi/lo split of ln2 ("rr2"):
//     r = fma(n, -ln2_hi, x) is exact (ln2_hi has 15 significant bits, see
//     kLn2Hi), then r = fma(n, -ln2_lo, r).
//  3. Degree-5 minimax polynomial ("p5") for e^r on [-ln2/2, ln2/2]:
//     e^r ~ 1 + r * (c1 + r * (c2 + r * (c3 + r * (c4 + r * c5)))),
//     evaluated as f = fma(r * s, p, s) with s = 2^(n - N) (no separate +1).
//  4. One compare: n - N <= -126 gives exact 0 (-inf gives 0, and no denormal
//     is ever produced: the smallest kept value is 2^-125 * e^(-ln2/2) >
//     FLT_MIN). NaN propagates (no compare is true for NaN).
// Error of steps 2-3: <= ~1.5 ulp (measured, see docs/numerics.md).
//
// The softmax needs e^(t - m), and f32 `t - m` is rounded when |t - m| > 16
// (costs up to 3.8e-6 relative). Two exact ways are used:
//  * ExpRef ("reduce t itself", Dukhan & Ablavatski): with a reference
//    exponent N = round(m * log2e), e^(t - N ln2) = 2^(n - N) * e^r where the
//    reduction of t is exact as long as |n * ln2_hi| fits (kRefMaxAbs). The
//    sum is then S' = e^(N ln2 - m) * S; callers convert in float64.
//  * ExpDiff (exact difference): (hi, lo) = TwoSum(t, -m), 6 add-pipe ops
//    that run beside the FMAs on Zen 3; lo joins the reduced argument. Used
//    when the shift is arbitrary (segment kernels, online) or |m| is huge.
#if defined(SMAX_KERNELS_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SMAX_KERNELS_EXP_INL_H_
#undef SMAX_KERNELS_EXP_INL_H_
#else
#define SMAX_KERNELS_EXP_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;

// ---- constants --------------------------------------------------------------
// log2(e) rounded to f32.
constexpr float kLog2e = 0x1.715476p+0f;
// ln2 = kLn2Hi + kLn2Lo. kLn2Hi = 0x1.62E400p-1 keeps 15 significant bits
// (its last 9 mantissa bits are zero), so n * kLn2Hi is exact for |n| < 2^9
// even without FMA; with FMA the product is exact anyway and x - n * kLn2Hi
// is representable for any |n| < 2^14. kLn2Lo = ln2 - kLn2Hi rounded to f32.
// Both from XNNPACK src/math/f32-expminus-*-rr2-p5.c.
constexpr float kLn2Hi = 0x1.62E400p-1f;
constexpr float kLn2Lo = 0x1.7F7D1Cp-20f;
// 1.5 * 2^23 + 127: ulp = 1 (rounds to integer), 127 = f32 exponent bias.
constexpr float kMagic = 0x1.8000FEp23f;
// Degree-5 minimax coefficients of e^r on [-ln2/2, ln2/2] (c0 = 1 implied),
// from XNNPACK src/math/f32-expminus-scalar-rr2-p5.c (Marat Dukhan, generated
// with Sollya's fpminimax); max relative error of the polynomial ~2^-23.
constexpr float kC1 = 0x1.FFFFF6p-1f;
constexpr float kC2 = 0x1.FFFDC6p-2f;
constexpr float kC3 = 0x1.555A80p-3f;
constexpr float kC4 = 0x1.573A1Ap-5f;
constexpr float kC5 = 0x1.0F9F9Cp-7f;
// Exponents n - N <= -126 are flushed to exact 0 (see step 4 above).
constexpr float kFlushBelow = -125.0f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kLn2d = 0.6931471805599453;
constexpr double kLog2ed = 1.4426950408889634;

// Largest |m| for which ExpRef's reduction of t is exact: with FMA,
// x - n * ln2_hi is exact for |n| < 2^14 (n <= 2048 * log2e + 126 here);
// without FMA (SSE4, SSSE3, scalar) n * ln2_hi must fit 24 bits: |n| < 512,
// i.e. |m| * log2e + 126 < 512.
#if HWY_NATIVE_FMA
constexpr float kRefMaxAbs = 2048.0f;
#else
constexpr float kRefMaxAbs = 256.0f;
#endif

// Unroll: 4 vectors per step ("u4"); sums in 2 f32 accumulators ("acc2"),
// each receiving 2 adds per step; a block is 8 steps = 16 adds per lane, then
// the accumulators are widened into float64 (so the error does not grow with
// n). 2 accumulators hide the 3-4 cycle add latency behind ~40 FMA-pipe ops.
constexpr size_t kUnroll = 4;
constexpr unsigned kStepsPerBlock = 8;
// Slack of the online / two-pass reference: elements up to e^32 (online) or
// 2^40 (two-pass) above the reference are summed without rescaling. The
// reference only moves when a step's max exceeds it by more (rare), so the
// steady state costs one exp per element and one compare per 4 vectors.
constexpr float kOnlineSlack = 32.0f;
constexpr float kTwoPassSlack = 40.0f;

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

// ---- the exp --------------------------------------------------------------------
// Shared tail of both variants: nb carries the biased exponent, r the reduced
// argument; returns 2^(n-N) * p5(r), 0 where n < flush_below. kFlush = false
// leaves out the compare + and-not (on Zen 3 the compare shares the two FMA
// pipes with the exp's 9 FMA-class ops): only for callers that proved that
// no lane can reach flush_below (ExpRefNoFlush), so the result is the same.
template <bool kFlush = true>
HWY_INLINE VF ExpFinish(DF d, VF nb, VF n, VF r, VF flush_below) {
  const DI di;
  const VF s = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, nb)));
  VF p = hn::MulAdd(hn::Set(d, kC5), r, hn::Set(d, kC4));
  p = hn::MulAdd(p, r, hn::Set(d, kC3));
  p = hn::MulAdd(p, r, hn::Set(d, kC2));
  p = hn::MulAdd(p, r, hn::Set(d, kC1));
  const VF rs = hn::Mul(r, s);
  const VF f = hn::MulAdd(rs, p, s);
  if (!kFlush) return f;
  return hn::IfThenZeroElse(hn::Lt(n, flush_below), f);
}

// e^(t - N ln2) by reducing t itself (exact for |t| <~ kRefMaxAbs + 87).
// `flush_below` is N - 125 (+ extra, see FlushExtra).
struct ExpRef {
  float bias;         // kMagic - N
  float flush_below;  // flush where n < flush_below

  static ExpRef Make(float n_ref, float extra = 0.0f) {
    return ExpRef{kMagic - n_ref, n_ref + kFlushBelow + extra};
  }
  HWY_INLINE VF operator()(DF d, VF t) const {
    const VF b = hn::Set(d, bias);
    const VF nb = hn::MulAdd(t, hn::Set(d, kLog2e), b);
    const VF n = hn::Sub(nb, b);
    VF r = hn::NegMulAdd(n, hn::Set(d, kLn2Hi), t);
    r = hn::NegMulAdd(n, hn::Set(d, kLn2Lo), r);
    return ExpFinish(d, nb, n, r, hn::Set(d, flush_below));
  }
  // True if no t >= t_min can be flushed: n = round(t log2e) >= t_min log2e
  // - 1/2 (minus the product's rounding), so a margin of 1 is safe. False for
  // t_min = -inf or NaN (masked / special rows keep the flushing exp).
  bool NeverFlushes(float t_min) const {
    return static_cast<double>(t_min) * kLog2ed - 1.0 >= static_cast<double>(flush_below);
  }
};

// ExpRef without the flush, bit-identical to it where ExpRef::NeverFlushes
// holds for the row's minimum (then every 2^(n - N) is a normal number and
// the flush mask is all false). Saves 2 of ~13 ops per vector.
struct ExpRefNoFlush {
  ExpRef e;
  HWY_INLINE VF operator()(DF d, VF t) const {
    const VF b = hn::Set(d, e.bias);
    const VF nb = hn::MulAdd(t, hn::Set(d, kLog2e), b);
    const VF n = hn::Sub(nb, b);
    VF r = hn::NegMulAdd(n, hn::Set(d, kLn2Hi), t);
    r = hn::NegMulAdd(n, hn::Set(d, kLn2Lo), r);
    return ExpFinish<false>(d, nb, n, r, n);
  }
};

// ExpRefNoFlush with an 8-entry table: e^(t - N ln2) = 2^(k - N) * 2^(j/8) *
// e^r with n8 = round(8 t log2e) = 8k + j, r = t - n8 ln2/8 (|r| <= ln2/16,
// reduced exactly as ExpRef: |n8| < 2^14 with FMA). The table lookup (one
// lane permute) replaces two polynomial degrees: degree 3 with c1 = 1 has
// relative error 2.6e-8 on [-ln2/16, ln2/16] (coefficients fitted for this
// range, rounded to f32), the table entries 3.2e-8; 7 FMA-pipe ops per
// vector instead of 9. Targets with >= 8 f32 lanes (the table is one
// vector); elsewhere kHaveExpTable is false and callers keep ExpRefNoFlush.
// Usable(m, t_min): |m| <= kRefMaxAbs / 8 (exact reduction) and a margin of
// 3 above the flush threshold (2^(k - N) 2^(j/8) e^r stays normal).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
constexpr bool kHaveExpTable = true;
#else
constexpr bool kHaveExpTable = false;
#endif
constexpr float kLog2e8 = 0x1.715476p+3f;     // 8 log2(e)
constexpr float kLn2Hi8 = 0x1.62E400p-4f;     // kLn2Hi / 8 (exact)
constexpr float kLn2Lo8 = 0x1.7F7D1Cp-23f;    // kLn2Lo / 8 (exact)
constexpr float kMagic8 = 0x1.8007F0p23f;     // 1.5 * 2^23 + 8 * 127
constexpr float kT2 = 0x1.000876p-1f;         // e^r ~ 1 + r + kT2 r^2 + kT3 r^3
constexpr float kT3 = 0x1.55575Cp-3f;
// Mantissa bits of 2^(j/8) rounded to f32 (exponent field 0: the exponent is
// added from n8).
constexpr int32_t kExp2Frac8[16] = {0x000000, 0x0B95C2, 0x1837F0, 0x25FED7,
                                    0x3504F3, 0x45672A, 0x5744FD, 0x6AC0C7,
                                    0, 0, 0, 0, 0, 0, 0, 0};  // 16: AVX3's lanes
struct ExpRefTable {
  ExpRef e;     // the flushing exp, for tail vectors (ExpTail)
  float bias8;  // kMagic8 - 8 N
  static ExpRefTable Make(const ExpRef& e, float n_ref) {
    return ExpRefTable{e, kMagic8 - 8.0f * n_ref};
  }
  static bool Usable(float m, float t_min, const ExpRef& e) {
    return kHaveExpTable && std::fabs(m) <= kRefMaxAbs / 8 &&
           static_cast<double>(t_min) * kLog2ed - 3.0 >= static_cast<double>(e.flush_below);
  }
  HWY_INLINE VF operator()(DF d, VF t) const {
    const DI di;
    const VF b = hn::Set(d, bias8);
    const VF nb = hn::MulAdd(t, hn::Set(d, kLog2e8), b);
    const VF n8 = hn::Sub(nb, b);
    VF r = hn::NegMulAdd(n8, hn::Set(d, kLn2Hi8), t);
    r = hn::NegMulAdd(n8, hn::Set(d, kLn2Lo8), r);
    const auto bits = hn::BitCast(di, nb);
#if HWY_TARGET == HWY_AVX2
    // vpermd reads only the low 3 bits of each index: j = bits mod 8 as is.
    const hn::Vec<DI> frac{_mm256_permutevar8x32_epi32(hn::LoadU(di, kExp2Frac8).raw, bits.raw)};
#else
    const auto j = hn::And(bits, hn::Set(di, 7));
    const auto frac = hn::TableLookupLanes(hn::LoadU(di, kExp2Frac8), hn::IndicesFromVec(di, j));
#endif
    const VF s = hn::BitCast(d, hn::Add(frac, hn::ShiftLeft<23>(hn::ShiftRight<3>(bits))));
    VF p = hn::MulAdd(hn::Set(d, kT3), r, hn::Set(d, kT2));
    p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
    return hn::MulAdd(hn::Mul(r, s), p, s);
  }
};

// The exp of a tail vector, whose lanes past the row are -inf padding: those
// need the flush (without it -inf gives NaN), so ExpRefNoFlush hands the tail
// to the flushing ExpRef.
template <class Exp>
HWY_INLINE VF ExpTail(const Exp& exp, DF d, VF t) {
  return exp(d, t);
}
HWY_INLINE VF ExpTail(const ExpRefNoFlush& exp, DF d, VF t) { return exp.e(d, t); }
HWY_INLINE VF ExpTail(const ExpRefTable& exp, DF d, VF t) { return exp.e(d, t); }

// Calls f(exp) with the exp the three-pass kernels (rows and segments) sum
// e^(t - N ln2) with, N = nref = round(m log2e), for a row of max m
// (|m| <= kRefMaxAbs) and min t_min: the table exp where ExpRefTable::Usable,
// the flush-free polynomial where no term can be flushed, else the
// flushing ExpRef. f must return the same type for the three.
template <class F>
HWY_INLINE auto WithRefExp(float m, float t_min, float nref, F&& f) {
  const ExpRef e = ExpRef::Make(nref);
  if (ExpRefTable::Usable(m, t_min, e)) return f(ExpRefTable::Make(e, nref));
  if (e.NeverFlushes(t_min)) return f(ExpRefNoFlush{e});  // row range < ~85
  return f(e);
}

// e^(t - m) with the exact difference t - m = hi + lo (TwoSum, Knuth): 6
// add-pipe ops; lo joins the reduced argument. m may differ per lane
// (columns). n <= -126 (hi < ~-87) flushes, which also catches -inf and
// huge |t - m| (hi = -inf, lo = NaN: masked by the flush).
HWY_INLINE VF ExpDiffV(DF d, VF t, VF vm, VF flush_below) {
  const VF hi = hn::Sub(t, vm);
  const VF tp = hn::Add(hi, vm);           // t' = hi + m
  const VF bp = hn::Sub(hi, tp);           // (-m)' = hi - t'
  const VF dt = hn::Sub(t, tp);            // t - t'
  const VF dm = hn::Sub(hn::Neg(vm), bp);  // -m - (-m)'
  const VF lo = hn::Add(dt, dm);           // hi + lo == t - m exactly
  const VF b = hn::Set(d, kMagic);
  const VF nb = hn::MulAdd(hi, hn::Set(d, kLog2e), b);
  const VF n = hn::Sub(nb, b);
  VF r = hn::NegMulAdd(n, hn::Set(d, kLn2Hi), hi);
  const VF rlo = hn::NegMulAdd(n, hn::Set(d, kLn2Lo), lo);
  r = hn::Add(r, rlo);
  return ExpFinish(d, nb, n, r, flush_below);
}

struct ExpDiff {
  float m;
  float flush_below;  // -125 (+ extra)

  static ExpDiff Make(float m, float extra = 0.0f) {
    return ExpDiff{m, kFlushBelow + extra};
  }
  HWY_INLINE VF operator()(DF d, VF t) const {
    return ExpDiffV(d, t, hn::Set(d, m), hn::Set(d, flush_below));
  }
};

// When an exp result is multiplied by `factor` < 1 before it is stored, flush
// 2^(-floor(log2 factor)) earlier so that the product is never denormal.
HWY_INLINE float FlushExtra(float factor) {
  if (!(factor < 1.0f) || !(factor > 0.0f)) return 0.0f;
  int e = 0;
  std::frexp(factor, &e);  // factor in [2^(e-1), 2^e)
  return static_cast<float>(1 - e);
}

// ---- float64 accumulation of f32 block sums ----------------------------------
// Per-lane float64 accumulators (lanes split in two halves, widened exactly).
// The final reduction sums the lanes in a fixed order.
#if HWY_TARGET == HWY_SCALAR
struct F64Acc {
  double s = 0.0;
  HWY_INLINE void Add(DF /*d*/, VF v) { s += static_cast<double>(hn::GetLane(v)); }
  HWY_INLINE void AddProduct(DF /*d*/, VF a, VF b) {
    s += static_cast<double>(hn::GetLane(a)) * static_cast<double>(hn::GetLane(b));
  }
  HWY_INLINE void AddProduct3(DF /*d*/, VF a, VF b, VF c) {
    s += static_cast<double>(hn::GetLane(a)) * static_cast<double>(hn::GetLane(b)) *
         static_cast<double>(hn::GetLane(c));
  }
  HWY_INLINE void Scale(double f) { s *= f; }
  HWY_INLINE double Total(DF /*d*/) const { return s; }
  HWY_INLINE void StoreLanes(DF /*d*/, double* out) const { out[0] = s; }
};
#else
using DH = hn::Half<DF>;
using DD = hn::Rebind<double, DH>;
using VD = hn::Vec<DD>;
struct F64Acc {
  VD lo, hi;
  HWY_INLINE F64Acc() : lo(hn::Zero(DD())), hi(hn::Zero(DD())) {}
  HWY_INLINE void Add(DF /*d*/, VF v) {
    const DH dh;
    const DD dd;
    lo = hn::Add(lo, hn::PromoteTo(dd, hn::LowerHalf(dh, v)));
    hi = hn::Add(hi, hn::PromoteTo(dd, hn::UpperHalf(dh, v)));
  }
  // += a * b per lane; the f64 product of two f32 is exact.
  HWY_INLINE void AddProduct(DF /*d*/, VF a, VF b) {
    const DH dh;
    const DD dd;
    lo = hn::MulAdd(hn::PromoteTo(dd, hn::LowerHalf(dh, a)),
                    hn::PromoteTo(dd, hn::LowerHalf(dh, b)), lo);
    hi = hn::MulAdd(hn::PromoteTo(dd, hn::UpperHalf(dh, a)),
                    hn::PromoteTo(dd, hn::UpperHalf(dh, b)), hi);
  }
  // += a * b * c per lane in float64 (no f32 overflow of a partial product).
  HWY_INLINE void AddProduct3(DF /*d*/, VF a, VF b, VF c) {
    const DH dh;
    const DD dd;
    const VD ab_lo = hn::Mul(hn::PromoteTo(dd, hn::LowerHalf(dh, a)),
                             hn::PromoteTo(dd, hn::LowerHalf(dh, b)));
    const VD ab_hi = hn::Mul(hn::PromoteTo(dd, hn::UpperHalf(dh, a)),
                             hn::PromoteTo(dd, hn::UpperHalf(dh, b)));
    lo = hn::MulAdd(ab_lo, hn::PromoteTo(dd, hn::LowerHalf(dh, c)), lo);
    hi = hn::MulAdd(ab_hi, hn::PromoteTo(dd, hn::UpperHalf(dh, c)), hi);
  }
  HWY_INLINE void Scale(double f) {
    const DD dd;
    lo = hn::Mul(lo, hn::Set(dd, f));
    hi = hn::Mul(hi, hn::Set(dd, f));
  }
  HWY_INLINE double Total(DF /*d*/) const {
    const DD dd;
    HWY_ALIGN double b[2 * kMaxLanes];
    const size_t nd = hn::Lanes(dd);
    hn::Store(lo, dd, b);
    hn::Store(hi, dd, b + nd);
    double s = 0.0;
    for (size_t k = 0; k < 2 * nd; ++k) s += b[k];
    return s;
  }
  // Lane l's total in out[l] (LowerHalf holds lanes [0, N/2)).
  HWY_INLINE void StoreLanes(DF /*d*/, double* out) const {
    const DD dd;
    hn::StoreU(lo, dd, out);
    hn::StoreU(hi, dd, out + hn::Lanes(dd));
  }
};

#endif

// Per-lane blocked sum along a strided axis (columns): one f32 accumulator,
// widened to float64 every 16 adds.
struct LaneSum {
  VF acc;
  F64Acc wide;
  unsigned adds = 0;
  explicit LaneSum(DF d) : acc(hn::Zero(d)) {}
  HWY_INLINE void Add(DF d, VF v) {
    acc = hn::Add(acc, v);
    if (++adds == 2 * kStepsPerBlock) {
      wide.Add(d, acc);
      acc = hn::Zero(d);
      adds = 0;
    }
  }
  HWY_INLINE void StoreLanes(DF d, double* out) {
    wide.Add(d, acc);
    acc = hn::Zero(d);
    adds = 0;
    wide.StoreLanes(d, out);
  }
};

// Blocked sum: f32 accumulators acc0/acc1 with <= 16 adds per lane, then f64.
struct BlockSum {
  VF acc0, acc1;
  F64Acc wide;
  unsigned steps = 0;
  explicit BlockSum(DF d) : acc0(hn::Zero(d)), acc1(hn::Zero(d)) {}
  HWY_INLINE void Add4(DF d, VF e0, VF e1, VF e2, VF e3) {
    acc0 = hn::Add(acc0, e0);
    acc1 = hn::Add(acc1, e1);
    acc0 = hn::Add(acc0, e2);
    acc1 = hn::Add(acc1, e3);
    if (++steps == kStepsPerBlock) Flush(d);
  }
  // Tail vectors (at most 4 after the last full step) alternate accumulators.
  HWY_INLINE void Add1(VF e, unsigned k) {
    if (k & 1) {
      acc1 = hn::Add(acc1, e);
    } else {
      acc0 = hn::Add(acc0, e);
    }
  }
  HWY_INLINE void Flush(DF d) {
    wide.Add(d, acc0);
    wide.Add(d, acc1);
    acc0 = hn::Zero(d);
    acc1 = hn::Zero(d);
    steps = 0;
  }
  HWY_INLINE double Total(DF d) {
    Flush(d);
    return wide.Total(d);
  }
};

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

// ---- row scans ----------------------------------------------------------------
// max_i t_i with 4 independent accumulators (hides the 3-cycle max latency;
// the loop is load-bound). NaN may or may not propagate (x86 max semantics).
template <class Src>
HWY_INLINE float RowMax(const Src& src, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    m0 = hn::Max(m0, src.Load(d, i));
    m1 = hn::Max(m1, src.Load(d, i + N));
    m2 = hn::Max(m2, src.Load(d, i + 2 * N));
    m3 = hn::Max(m3, src.Load(d, i + 3 * N));
  }
  for (; i + N <= n; i += N) m0 = hn::Max(m0, src.Load(d, i));
  if (i < n) m1 = hn::Max(m1, src.LoadTail(d, i, n - i));
  m0 = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  return ReduceMax(d, m0);
}

// ---- store passes ---------------------------------------------------------------
// A per-vector pass over one row: Vector(d, i) handles the full vector at
// element i, Tail(d, i, count) the last partial one. RunPass runs it alone;
// RowMinMaxWith runs it inside the (min, max) scan of another row of the
// same length (the batched three-pass kernels fuse a row's last pass with the
// next row's first: the last pass is store-bound and leaves the FP pipes
// and a load port idle for the scan).
template <class Pass>
HWY_INLINE void RunPass(size_t n, const Pass& pass) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    pass.Vector(d, i);
    pass.Vector(d, i + N);
    pass.Vector(d, i + 2 * N);
    pass.Vector(d, i + 3 * N);
  }
  for (; i + N <= n; i += N) pass.Vector(d, i);
  if (i < n) pass.Tail(d, i, n - i);
}

struct NoPass {
  HWY_INLINE void Vector(DF /*d*/, size_t /*i*/) const {}
  HWY_INLINE void Tail(DF /*d*/, size_t /*i*/, size_t /*count*/) const {}
};

// (min_i t_i, max_i t_i) in one read: the min lets the three-pass kernels
// drop the exp's flush (ExpRefNoFlush). 4 + 4 accumulators; in cache the
// extra min costs ~0.1 cycle per element, the saved flush ~0.25. `pass`
// (over another row of n elements) runs in the same loop; the scan's loads
// and accumulator order do not depend on it, so the result is the same bits
// as RowMinMax's.
struct MinMax {
  float min, max;
};
template <class Src, class Pass>
HWY_INLINE MinMax RowMinMaxWith(const Src& src, size_t n, const Pass& pass) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
  VF l0 = hn::Set(d, kInf), l1 = l0, l2 = l0, l3 = l0;
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF t0 = src.Load(d, i), t1 = src.Load(d, i + N);
    const VF t2 = src.Load(d, i + 2 * N), t3 = src.Load(d, i + 3 * N);
    pass.Vector(d, i);
    pass.Vector(d, i + N);
    pass.Vector(d, i + 2 * N);
    pass.Vector(d, i + 3 * N);
    m0 = hn::Max(m0, t0);
    m1 = hn::Max(m1, t1);
    m2 = hn::Max(m2, t2);
    m3 = hn::Max(m3, t3);
    l0 = hn::Min(l0, t0);
    l1 = hn::Min(l1, t1);
    l2 = hn::Min(l2, t2);
    l3 = hn::Min(l3, t3);
  }
  for (; i + N <= n; i += N) {
    const VF t = src.Load(d, i);
    pass.Vector(d, i);
    m0 = hn::Max(m0, t);
    l0 = hn::Min(l0, t);
  }
  if (i < n) {
    // Tail lanes past n are -inf: fine for the max; the min takes +inf
    // there instead, so it is the min of the row's own entries.
    const VF t = src.LoadTail(d, i, n - i);
    pass.Tail(d, i, n - i);
    m1 = hn::Max(m1, t);
    l1 = hn::Min(l1, hn::IfThenElse(hn::FirstN(d, n - i), t, hn::Set(d, kInf)));
  }
  m0 = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  l0 = hn::Min(hn::Min(l0, l1), hn::Min(l2, l3));
  return MinMax{ReduceMin(d, l0), ReduceMax(d, m0)};
}
template <class Src>
HWY_INLINE MinMax RowMinMax(const Src& src, size_t n) {
  return RowMinMaxWith(src, n, NoPass{});
}

// True if some t_i is NaN (IsNaN, not Ne(t, t): AVX2 Ne is the ordered
// compare, false for NaN) (used only when the max is -inf, where a NaN could
// hide behind max's operand order).
template <class Src>
HWY_INLINE bool RowHasNaN(const Src& src, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const VF t = src.Load(d, i);
    if (!hn::AllFalse(d, hn::IsNaN(t))) return true;
  }
  if (i < n) {
    const VF t = src.LoadTail(d, i, n - i);
    if (!hn::AllFalse(d, hn::IsNaN(t))) return true;
  }
  return false;
}

// sum_i exp(t_i) (exp = ExpRef or ExpDiff), blocked; stores e_i if kStore.
// `ahead` (nullable): the next row's first element, of a row as long as this
// one; each step prefetches as many bytes of it as the step reads, so the
// next row's first pass finds it in cache (batched rows beyond L1, where
// this compute-bound pass would otherwise leave the memory idle).
template <bool kStore, class Src, class Exp>
HWY_INLINE double ExpSum(const Src& src, size_t n, const Exp& exp,
                         float* HWY_RESTRICT dst, const float* ahead = nullptr) {
  const DF d;
  const size_t N = hn::Lanes(d);
  BlockSum sum(d);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    if (ahead != nullptr) {
      for (size_t k = 0; k < kUnroll * N; k += 64 / sizeof(float)) hwy::Prefetch(ahead + i + k);
    }
    const VF e0 = exp(d, src.Load(d, i));
    const VF e1 = exp(d, src.Load(d, i + N));
    const VF e2 = exp(d, src.Load(d, i + 2 * N));
    const VF e3 = exp(d, src.Load(d, i + 3 * N));
    if (kStore) {
      hn::StoreU(e0, d, dst + i);
      hn::StoreU(e1, d, dst + i + N);
      hn::StoreU(e2, d, dst + i + 2 * N);
      hn::StoreU(e3, d, dst + i + 3 * N);
    }
    sum.Add4(d, e0, e1, e2, e3);
  }
  unsigned k = 0;
  for (; i + N <= n; i += N, ++k) {
    const VF e = exp(d, src.Load(d, i));
    if (kStore) hn::StoreU(e, d, dst + i);
    sum.Add1(e, k);
  }
  if (i < n) {
    const VF e = ExpTail(exp, d, src.LoadTail(d, i, n - i));
    if (kStore) StoreTail(d, e, dst + i, n - i);
    sum.Add1(e, k);
  }
  return sum.Total(d);
}

// dst_i = exp(t_i) * factor (the exp's flush_below already accounts for
// factor via FlushExtra, so no denormal is stored).
template <class Src, class Exp>
HWY_INLINE void ExpScaleStore(const Src& src, size_t n, const Exp& exp, float factor,
                              float* HWY_RESTRICT dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF f = hn::Set(d, factor);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF e0 = exp(d, src.Load(d, i));
    const VF e1 = exp(d, src.Load(d, i + N));
    const VF e2 = exp(d, src.Load(d, i + 2 * N));
    const VF e3 = exp(d, src.Load(d, i + 3 * N));
    hn::StoreU(hn::Mul(e0, f), d, dst + i);
    hn::StoreU(hn::Mul(e1, f), d, dst + i + N);
    hn::StoreU(hn::Mul(e2, f), d, dst + i + 2 * N);
    hn::StoreU(hn::Mul(e3, f), d, dst + i + 3 * N);
  }
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(exp(d, src.Load(d, i)), f), d, dst + i);
  if (i < n) {
    StoreTail(d, hn::Mul(ExpTail(exp, d, src.LoadTail(d, i, n - i)), f), dst + i, n - i);
  }
}

// dst_i = e^(t_i - shift) * factor for an arbitrary finite shift. When
// |shift| <= kRefMaxAbs the exp is ExpRef with N = round(shift log2e) and the
// constant e^(N ln2 - shift) (float64) is folded into the factor: one extra
// f32 rounding of the factor instead of 6 TwoSum ops per element.
template <class Src>
HWY_INLINE void ExpShiftScaleStore(const Src& src, size_t n, float shift, double factor,
                                   float* HWY_RESTRICT dst) {
  if (std::fabs(shift) <= kRefMaxAbs) {
    const float nref = std::nearbyint(shift * kLog2e);
    const float f = static_cast<float>(
        factor * std::exp(static_cast<double>(nref) * kLn2d - static_cast<double>(shift)));
    ExpScaleStore(src, n, ExpRef::Make(nref, FlushExtra(f)), f, dst);
  } else {
    const float f = static_cast<float>(factor);
    ExpScaleStore(src, n, ExpDiff::Make(shift, FlushExtra(f)), f, dst);
  }
}

// dst_i *= factor; kFlush: products below FLT_MIN flushed to 0 (no
// denormals). kFlush = false only where softmax_outputs_normal (kernels.h)
// holds.
template <bool kFlush = true>
struct ScalePass {
  float* HWY_RESTRICT dst;
  float factor;
  HWY_INLINE VF Apply(DF d, VF v) const {
    const VF y = hn::Mul(v, hn::Set(d, factor));
    if (!kFlush) return y;
    return hn::IfThenZeroElse(hn::Lt(hn::Abs(y), hn::Set(d, std::numeric_limits<float>::min())),
                              y);
  }
  HWY_INLINE void Vector(DF d, size_t i) const {
    hn::StoreU(Apply(d, hn::LoadU(d, dst + i)), d, dst + i);
  }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    StoreTail(d, Apply(d, LoadTailZero(d, dst + i, count)), dst + i, count);
  }
};
template <bool kFlush = true>
HWY_INLINE void ScaleInPlace(float* HWY_RESTRICT dst, size_t n, float factor) {
  RunPass(n, ScalePass<kFlush>{dst, factor});
}

// dst_i = (t_i - shift) - log_sum, in that order.
template <class Src>
struct LogPass {
  const Src& src;
  float* HWY_RESTRICT dst;
  float shift, log_sum;
  HWY_INLINE VF Apply(DF d, VF t) const {
    return hn::Sub(hn::Sub(t, hn::Set(d, shift)), hn::Set(d, log_sum));
  }
  HWY_INLINE void Vector(DF d, size_t i) const {
    hn::StoreU(Apply(d, src.Load(d, i)), d, dst + i);
  }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    StoreTail(d, Apply(d, src.LoadTail(d, i, count)), dst + i, count);
  }
};
template <class Src>
HWY_INLINE void LogStore(const Src& src, size_t n, float shift, float log_sum,
                         float* HWY_RESTRICT dst) {
  RunPass(n, LogPass<Src>{src, dst, shift, log_sum});
}

HWY_INLINE void Fill(float* HWY_RESTRICT dst, size_t n, float value) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF v = hn::Set(d, value);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(v, d, dst + i);
  if (i < n) StoreTail(d, v, dst + i, n - i);
}

// ---- online (Milakov & Gimelshein) scan ------------------------------------------
// Sum = d * e^ref, with ref a single (row-wide) f32 reference and the true
// max m tracked alongside. Each step of 4 vectors takes its per-lane max;
// only if some lane exceeds ref + kOnlineSlack does ref move (to the step's
// max): the f32 block sums are widened, the float64 sums are multiplied by
// e^(ref_old - ref_new) computed in float64 (exact to 1e-16, so rescaling
// never adds f32 error) and the step continues. Otherwise elements up to
// e^32 above ref are summed as they are (no overflow: 2^46 * 16 * 4 << FLT_MAX;
// nothing that matters is flushed: an element flushed relative to ref is
// below e^-87 of the true max). Hence ~1 exp per element. Before the first
// finite element ref's threshold is -inf, which also guards -inf - -inf.
struct OnlineResult {
  float ref;   // the reference (finite unless the row holds +inf / NaN)
  double d;    // sum = d * e^ref
  float max;   // true max (NaN/inf rows: unspecified)
};

template <class Src>
HWY_INLINE OnlineResult OnlineScan(const Src& src, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  BlockSum sum(d);
  float ref = 0.0f;           // any finite value: -inf elements give 0
  float thresh = kNegInf;     // ref + slack; -inf until the first finite max
  VF vmax = hn::Set(d, kNegInf);
  ExpDiff exp = ExpDiff::Make(ref);

  auto rebase = [&](VF step_max) {  // rare path
    const float new_ref = ReduceMax(d, step_max);
    const bool first = !(thresh > kNegInf);
    sum.Flush(d);
    if (!first) sum.wide.Scale(std::exp(static_cast<double>(ref) - new_ref));
    ref = new_ref;
    thresh = ref + kOnlineSlack;
    exp = ExpDiff::Make(ref);
  };

  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF t0 = src.Load(d, i);
    const VF t1 = src.Load(d, i + N);
    const VF t2 = src.Load(d, i + 2 * N);
    const VF t3 = src.Load(d, i + 3 * N);
    const VF sm = hn::Max(hn::Max(t0, t1), hn::Max(t2, t3));
    vmax = hn::Max(vmax, sm);
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Gt(sm, hn::Set(d, thresh))))) rebase(sm);
    sum.Add4(d, exp(d, t0), exp(d, t1), exp(d, t2), exp(d, t3));
  }
  unsigned k = 0;
  auto one = [&](VF t) {
    vmax = hn::Max(vmax, t);
    if (!hn::AllFalse(d, hn::Gt(t, hn::Set(d, thresh)))) rebase(t);
    sum.Add1(exp(d, t), k++);
  };
  for (; i + N <= n; i += N) one(src.Load(d, i));
  if (i < n) one(src.LoadTail(d, i, n - i));
  OnlineResult res;
  res.d = sum.Total(d);
  res.ref = ref;
  res.max = ReduceMax(d, vmax);
  return res;
}

// ---- two-pass (Dukhan & Ablavatski) scan ---------------------------------------
// e^t = mu * 2^nu. The sum is kept as S * 2^N with a row-wide integer
// reference N; every element is computed directly as 2^(n_i - N) * p(r_i)
// by ExpRef (no max pass, no subtraction t - m: the reduction of t itself is
// exact). N moves only when a step's max t exceeds (N + slack) * ln2; the
// rescale by 2^(N_old - N_new) is a power of two, exact in float64.
// in_range: the true max of t must satisfy |max| <= kRefMaxAbs (so that
// every reduction that is not flushed is exact); -inf rows are in range.
struct TwoPassResult {
  double mu;   // sum = mu * 2^nu
  double nu;   // round(max * log2e); -inf for an empty row
  float max;   // true max of t
  bool in_range;
};

template <class Src>
HWY_INLINE TwoPassResult TwoPassScan(const Src& src, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  BlockSum sum(d);
  float nref = 0.0f;
  float thresh = kNegInf;  // (nref + slack) * ln2
  VF vmax = hn::Set(d, kNegInf);
  ExpRef exp = ExpRef::Make(nref);

  auto rebase = [&](VF step_max) {  // rare path
    const float m = ReduceMax(d, step_max);
    // Clamp keeps the exponent arithmetic finite for inf/huge rows (those
    // are out of range and recomputed by the caller anyway).
    const float mc = std::fmin(std::fmax(m, -1e6f), 1e6f);
    const float new_ref = std::nearbyint(mc * kLog2e);
    const bool first = !(thresh > kNegInf);
    sum.Flush(d);
    if (!first) sum.wide.Scale(std::ldexp(1.0, static_cast<int>(nref - new_ref)));
    nref = new_ref;
    thresh = (nref + kTwoPassSlack) * static_cast<float>(kLn2d);
    if (!(m < kInf)) thresh = kInf;
    exp = ExpRef::Make(nref);
  };

  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF t0 = src.Load(d, i);
    const VF t1 = src.Load(d, i + N);
    const VF t2 = src.Load(d, i + 2 * N);
    const VF t3 = src.Load(d, i + 3 * N);
    const VF sm = hn::Max(hn::Max(t0, t1), hn::Max(t2, t3));
    vmax = hn::Max(vmax, sm);
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Gt(sm, hn::Set(d, thresh))))) rebase(sm);
    sum.Add4(d, exp(d, t0), exp(d, t1), exp(d, t2), exp(d, t3));
  }
  unsigned k = 0;
  auto one = [&](VF t) {
    vmax = hn::Max(vmax, t);
    if (!hn::AllFalse(d, hn::Gt(t, hn::Set(d, thresh)))) rebase(t);
    sum.Add1(exp(d, t), k++);
  };
  for (; i + N <= n; i += N) one(src.Load(d, i));
  if (i < n) one(src.LoadTail(d, i, n - i));

  TwoPassResult res;
  const double s = sum.Total(d);
  res.max = ReduceMax(d, vmax);
  if (res.max == kNegInf && s == 0.0) {  // every logit -inf (NaN gives s NaN)
    res.mu = 0.0;
    res.nu = -std::numeric_limits<double>::infinity();
    res.in_range = true;
    return res;
  }
  res.in_range = std::fabs(res.max) <= kRefMaxAbs && std::isfinite(s);
  if (!res.in_range) {
    res.mu = s;
    res.nu = nref;
    return res;
  }
  // Normalise to nu = round(max * log2e) (the two-pass state of docs/design.md,
  // "Softmax algorithms: passes over memory"), exactly.
  const double nu = std::nearbyint(static_cast<double>(res.max) * kLog2ed);
  res.mu = std::ldexp(s, static_cast<int>(nref - nu));
  res.nu = nu;
  return res;
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SMAX_KERNELS_EXP_INL_H_

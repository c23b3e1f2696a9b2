// src/kernels/exp-inl.h: the f32 exp of every smax kernel (ExpRef, its
// flush-free and table variants, ExpDiff) and the constants it is built on.
// Loads are in load-inl.h, sums in sum-inl.h, row passes in pass-inl.h, row
// scans in scan-inl.h.
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
// Error of steps 2-3: <= 2.5 ulp of the result wherever it is a normal f32
// (measured 2.26 ulp with FMA, 2.30 without, over the dense sweeps of
// tests/kernels/test_kernel_exp.cc, which enforce the bound on every
// target); ExpRefTable <= 2 ulp (measured 1.44).
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
//
// Included only from kernels/row-inl.h, inside its per-target namespace
// smax::kernels::HWY_NAMESPACE (with `hn`, the standard and Highway headers
// and the pieces listed before this one in row-inl.h already in scope).
#ifndef SMAX_KERNELS_ROW_INL_PIECE_
#error "include kernels/row-inl.h, not its pieces"
#endif

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

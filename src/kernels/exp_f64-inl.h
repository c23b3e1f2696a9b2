// src/kernels/exp_f64-inl.h: the float64 exp of the f64 softmax kernels
// (softmax_f64.cc), per target: e^(hi + lo) of a two-term argument.
//
// Contract (tests/test_softmax_f64.cc checks the kernels built on it against
// long double on every target; u = 2^-53):
//  * ExpSplit(d, hi, lo) = e^(hi + lo) for |lo| <= ulp(hi) (lo: the rounding
//    error of hi, e.g. the TwoSum error of t - m), within 1.5 ulp where the
//    result is normal (1.16 ulp by the analysis below); subnormal results by
//    gradual underflow (one rounding); hi is clamped to
//    [-1100, 1100] first (lo dropped there), where e^hi is 0 / inf;
//    e^0 = 1 exactly.
//  * ExpNormal(d, hi, lo): the same bits as ExpSplit for hi in
//    [kExpNormalMin, 0], without the clamp and the split scaling.
//  * ExpFast(d, x): e^x for x in [kExpNormalMin, 0] (no lo term), within
//    the same 1.5 ulp, e^0 = 1 exactly (its last reduction step is one FMA,
//    so its bits may differ from ExpNormal(d, x, 0)).
// Algorithm: k = round(hi 16 / ln2) by magic-bias rounding (an FMA where the
// target has one); k = 16 k_hi + j, j in [0, 16); Cody-Waite reduction
// r = (hi - k C_hi) + (lo - k C_lo) with C = ln2 / 16, C_hi's low 20 bits
// zero (k C_hi exact for |k| < 2^20, the difference exact by Sterbenz),
// |r| <= ln2 / 32 (+ 2^-40 relative slack for the non-FMA rounding of k);
// e^r = 1 + w, w = r + r^2 q(r) with q of degree 4 (Chebyshev fit on
// [-1.0005 ln2/32, 1.0005 ln2/32], 1 + w is within 0.26 u of e^r there);
// p = T_hi + (T_hi w + T_lo) with 2^(j/16) = T_hi + T_lo (two tables of
// 16: in-register two-table permutes on AVX-512, gathers elsewhere); result
// p 2^k_hi (the exponent added to p's bits for normal
// results; ExpSplit multiplies by 2^k1 2^k2, k1 = floor(k_hi / 2),
// k2 = k_hi - k1, both normal powers, so only the last product rounds).
// Error of p against 2^(j/16) e^(r_exact), relative, u = 2^-53: the fit
// (0.26 u), r's rounding (<= 2^-59 absolute: 0.016 u), w's (<= 2^-59, times
// T_hi / p: 0.016 u), the inner FMA's (<= 2^-58: |T w + T_lo| < 0.05, over
// p >= 0.97: 0.033 u), T_lo's and C_lo's (< 2^-70): < 0.33 u before the
// final add, whose rounding is half an ulp (<= u relative): p and p 2^k_hi
// within 1.33 u relative and 0.5 + 2 * 0.33 = 1.16 ulp.
//
// Include after <hwy/highway.h> inside HWY_BEFORE_NAMESPACE / the per-target
// namespace smax::kernels::HWY_NAMESPACE with `hn` in scope; it has the
// Highway per-target toggle guard.
#if defined(SMAX_KERNELS_EXP_F64_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SMAX_KERNELS_EXP_F64_INL_H_
#undef SMAX_KERNELS_EXP_F64_INL_H_
#else
#define SMAX_KERNELS_EXP_F64_INL_H_
#endif

namespace exp_f64 {

using D = hn::ScalableTag<double>;
using V = hn::Vec<D>;
using DI = hn::RebindToSigned<D>;
using VI = hn::Vec<DI>;
using DU = hn::RebindToUnsigned<D>;

constexpr double kInvC = 0x1.71547652b82fep+4;      // 16 / ln2
constexpr double kCHi = 0x1.62e42fee00000p-5;       // ln2 / 16, high part
constexpr double kCLo = 0x1.a39ef35793c76p-37;      // ln2 / 16 - kCHi
constexpr double kMagic = 0x1.8p52;  // adding it rounds |x| < 2^51 to an integer
constexpr double kClamp = 1100.0;
constexpr double kExpNormalMin = -708.0;  // e^-708 > DBL_MIN: k_hi >= -1022

// T_j = 2^(j/16) = kExp2Hi[j] + kExp2Lo[j] (hi rounded to nearest, lo the
// rest rounded: together within 2^-106 relative).
alignas(64) constexpr double kExp2Hi[16] = {
    0x1.0000000000000p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0, 0x1.2387a6e756238p+0,
    0x1.306fe0a31b715p+0, 0x1.3dea64c123422p+0, 0x1.4bfdad5362a27p+0, 0x1.5ab07dd485429p+0,
    0x1.6a09e667f3bcdp+0, 0x1.7a11473eb0187p+0, 0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
    0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0, 0x1.d5818dcfba487p+0, 0x1.ea4afa2a490dap+0};
alignas(64) constexpr double kExp2Lo[16] = {
    0x0.0p+0, 0x1.8a62e4adc610bp-54, -0x1.19041b9d78a76p-55, 0x1.9b07eb6c70573p-54,
    0x1.6f46ad23182e4p-55, 0x1.ada0911f09ebcp-55, 0x1.d4397afec42e2p-56, 0x1.6324c054647adp-54,
    -0x1.bdd3413b26456p-54, -0x1.41577ee04992fp-55, 0x1.6e9f156864b27p-54, 0x1.c7c46b071f2bep-56,
    0x1.7a1cd345dcc81p-54, 0x1.11065895048ddp-55, 0x1.2ed02d75b3707p-55, -0x1.e9c23179c2893p-54};

// table[j] for j = the low 4 bits of each lane of kb's bits (kb = kMagic +
// k: those bits are k mod 16).
HWY_INLINE V Table(D d, const double* table, V kb) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // vpermt2pd reads the low 4 bits of each index lane: 16 entries in two
  // registers (loaded once per loop: the compiler hoists them).
  const V t0 = hn::Load(d, table);
  const V t1 = hn::Load(d, table + 8);
  return V{_mm512_permutex2var_pd(t0.raw, _mm512_castpd_si512(kb.raw), t1.raw)};
#else
  const DI di;
  return hn::GatherIndex(d, table, hn::And(hn::BitCast(di, kb), hn::Set(di, 15)));
#endif
}

// q(r) ~ (e^r - 1 - r) / r^2 on |r| <= 1.0005 ln2/32 (degree 4).
HWY_INLINE V Poly(D d, V r) {
  V q = hn::Set(d, 0x1.6c17bb91efb39p-10);
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.11120b36ff666p-7));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.55555555192e5p-5));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.55555554dd075p-3));
  q = hn::MulAdd(q, r, hn::Set(d, 0.5));
  return q;
}

// p = 2^(j/16) e^r in [0.97, 2.05] and kb (k = 16 k_hi + j in its bits)
// of e^(hi + lo) = p 2^k_hi (|hi| <= kClamp). kLo: lo is used (else 0).
struct Reduced {
  V p;
  V kb;
};
template <bool kLo>
HWY_INLINE Reduced Reduce(D d, V hi, V lo) {
  const V kb = hn::MulAdd(hi, hn::Set(d, kInvC), hn::Set(d, kMagic));
  const V k = hn::Sub(kb, hn::Set(d, kMagic));
  const V r_hi = hn::NegMulAdd(k, hn::Set(d, kCHi), hi);  // exact
  const V r = kLo ? hn::Add(r_hi, hn::NegMulAdd(k, hn::Set(d, kCLo), lo))
                  : hn::NegMulAdd(k, hn::Set(d, kCLo), r_hi);
  const V w = hn::MulAdd(hn::Mul(r, r), Poly(d, r), r);  // e^r - 1
  const V th = Table(d, kExp2Hi, kb);
  return {hn::Add(th, hn::MulAdd(th, w, Table(d, kExp2Lo, kb))), kb};
}

// p 2^k_hi for normal results: k_hi added to p's exponent field. kb's bits
// 15..4 are k_hi mod 2^12 (kb = 1.5 2^52 + k, k = 16 k_hi + j); shifted to
// bits 63..52 and added to p's bits they give exponent + k_hi mod 2^12 in
// the sign and exponent field: p 2^k_hi while that is a normal number.
HWY_INLINE V ScaleNormal(D d, const Reduced& x) {
  const DU du;
  const auto kh = hn::ShiftLeft<52>(hn::ShiftRight<4>(hn::BitCast(du, x.kb)));
  return hn::BitCast(d, hn::Add(hn::BitCast(du, x.p), kh));
}

HWY_INLINE V ExpSplit(D d, V hi, V lo) {
  const V h = hn::Min(hn::Max(hi, hn::Set(d, -kClamp)), hn::Set(d, kClamp));
  const V l = hn::IfThenElseZero(hn::Lt(hn::Abs(hi), hn::Set(d, kClamp)), lo);
  const Reduced x = Reduce<true>(d, h, l);
  const DI di;
  const DU du;
  // k = kb's bits - kMagic's bits; k_hi = floor(k / 16) for |k| <= 25391,
  // by a logical shift of k + 2^20 >= 0; then k1 = floor(k_hi / 2) the
  // same way (|k_hi| <= 1587).
  const VI k = hn::Sub(hn::BitCast(di, x.kb), hn::BitCast(di, hn::Set(d, kMagic)));
  const VI kh = hn::Sub(
      hn::BitCast(di, hn::ShiftRight<4>(hn::BitCast(du, hn::Add(k, hn::Set(di, 1 << 20))))),
      hn::Set(di, 1 << 16));
  const VI k1 = hn::Sub(
      hn::BitCast(di, hn::ShiftRight<1>(hn::BitCast(du, hn::Add(kh, hn::Set(di, 2048))))),
      hn::Set(di, 1024));
  const VI k2 = hn::Sub(kh, k1);
  const VI bias = hn::Set(di, 1023);
  const V s1 = hn::BitCast(d, hn::ShiftLeft<52>(hn::Add(k1, bias)));
  const V s2 = hn::BitCast(d, hn::ShiftLeft<52>(hn::Add(k2, bias)));
  return hn::Mul(hn::Mul(x.p, s1), s2);
}

HWY_INLINE V ExpNormal(D d, V hi, V lo) { return ScaleNormal(d, Reduce<true>(d, hi, lo)); }

HWY_INLINE V ExpFast(D d, V x) { return ScaleNormal(d, Reduce<false>(d, x, x)); }

}  // namespace exp_f64

#endif  // SMAX_KERNELS_EXP_F64_INL_H_

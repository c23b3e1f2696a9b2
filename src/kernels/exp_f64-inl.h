// src/kernels/exp_f64-inl.h: the float64 exp of the f64 softmax kernels
// (softmax_f64.cc), per target: e^(hi + lo) of a two-term argument.
//
// Contract (tests/test_softmax_f64.cc checks the kernels built on it against
// long double on every target):
//  * ExpSplit(d, hi, lo) = e^(hi + lo) for |lo| <= ulp(hi) (lo: the rounding
//    error of hi, e.g. the TwoSum error of t - m), within 1.5 ulp where the
//    result is normal; subnormal results by gradual underflow (one
//    rounding); hi is clamped to [-1100, 1100] first (lo dropped there),
//    where e^hi is 0 / inf; e^0 = 1 exactly.
//  * ExpNormal(d, hi, lo): the same bits as ExpSplit for hi in
//    [kExpNormalMin, 0], without the clamp and the split scaling.
// Algorithm: k = round(hi log2e) by magic-bias rounding; Cody-Waite
// reduction r = (hi - k ln2_hi) + (lo - k ln2_lo) with ln2_hi's low 20 bits
// zero (k ln2_hi exact for |k| < 2^20, the difference exact by Sterbenz),
// |r| <= 0.3466 + 2^-40; e^r = 1 + (r + r^2 q(r)) with q the degree-11 tail
// of the Taylor series (degree 13 in all: truncation < 4.2e-18 relative);
// the result p 2^k as (p 2^k1) 2^k2, k1 = floor(k / 2), k2 = k - k1, both
// normal powers, so only the last product rounds.
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

constexpr double kLog2e = 0x1.71547652b82fep+0;
constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
constexpr double kMagic = 0x1.8p52;  // adding it rounds |x| < 2^51 to an integer
constexpr double kClamp = 1100.0;
constexpr double kExpNormalMin = -708.0;  // e^-708 > DBL_MIN: k >= -1022

// q(r) = sum_{j=2..13} r^(j-2) / j!, so that e^r = 1 + (r + r^2 q(r)).
HWY_INLINE V Poly(D d, V r) {
  V q = hn::Set(d, 0x1.6124613a86d09p-33);
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.1eed8eff8d898p-29));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.ae64567f544e4p-26));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.27e4fb7789f5cp-22));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.71de3a556c734p-19));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.a01a01a01a01ap-16));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.a01a01a01a01ap-13));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.6c16c16c16c17p-10));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.1111111111111p-7));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.5555555555555p-5));
  q = hn::MulAdd(q, r, hn::Set(d, 0x1.5555555555555p-3));
  q = hn::MulAdd(q, r, hn::Set(d, 0.5));
  return q;
}

// p = e^r and the integer k of e^(hi + lo) = p 2^k (|hi| <= kClamp).
struct Reduced {
  V p;
  VI k;
};
HWY_INLINE Reduced Reduce(D d, V hi, V lo) {
  const V kb = hn::Add(hn::Mul(hi, hn::Set(d, kLog2e)), hn::Set(d, kMagic));
  const V k = hn::Sub(kb, hn::Set(d, kMagic));
  const V r_hi = hn::Sub(hi, hn::Mul(k, hn::Set(d, kLn2Hi)));
  const V r = hn::Add(r_hi, hn::Sub(lo, hn::Mul(k, hn::Set(d, kLn2Lo))));
  const V p = hn::Add(hn::MulAdd(hn::Mul(r, r), Poly(d, r), r), hn::Set(d, 1.0));
  const DI di;
  return {p, hn::Sub(hn::BitCast(di, kb), hn::BitCast(di, hn::Set(d, kMagic)))};
}

HWY_INLINE V ExpSplit(D d, V hi, V lo) {
  const V h = hn::Min(hn::Max(hi, hn::Set(d, -kClamp)), hn::Set(d, kClamp));
  const V l = hn::IfThenElseZero(hn::Lt(hn::Abs(hi), hn::Set(d, kClamp)), lo);
  const Reduced x = Reduce(d, h, l);
  const DI di;
  // floor(k / 2) of |k| <= 1587, by a logical shift of k + 2048 >= 0.
  const VI k1 = hn::Sub(hn::ShiftRight<1>(hn::Add(x.k, hn::Set(di, 2048))), hn::Set(di, 1024));
  const VI k2 = hn::Sub(x.k, k1);
  const VI bias = hn::Set(di, 1023);
  const V s1 = hn::BitCast(d, hn::ShiftLeft<52>(hn::Add(k1, bias)));
  const V s2 = hn::BitCast(d, hn::ShiftLeft<52>(hn::Add(k2, bias)));
  return hn::Mul(hn::Mul(x.p, s1), s2);
}

HWY_INLINE V ExpNormal(D d, V hi, V lo) {
  const Reduced x = Reduce(d, hi, lo);
  const DI di;
  return hn::Mul(x.p, hn::BitCast(d, hn::ShiftLeft<52>(hn::Add(x.k, hn::Set(di, 1023)))));
}

}  // namespace exp_f64

#endif  // SMAX_KERNELS_EXP_F64_INL_H_

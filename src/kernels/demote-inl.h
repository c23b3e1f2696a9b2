// src/kernels/demote-inl.h: float64 -> f32 rounding as IEEE does it, per
// SIMD target (DemoteIeee), and the backward steps evaluated in float64 and
// rounded once with it (SoftmaxGradF64, LogSoftmaxGradF64, LogSoftmaxStep).
//
// Highway's DemoteTo saturates at +-FLT_MAX on some targets (EMU128 /
// SCALAR), while IEEE rounding (and the x86 conversion instructions) gives
// +-inf for |v| >= 2^128 - 2^103, the midpoint between FLT_MAX and 2^128.
// A gradient or output beyond f32 must come out as inf on every target
// (found by the fuzz targets: spherical z-loss and self-adjust gradients
// saturated at FLT_MAX on EMU128).
//
// Included only from kernels/row-inl.h, inside its per-target namespace
// smax::kernels::HWY_NAMESPACE (with `hn`, the standard and Highway headers
// and the pieces listed before this one in row-inl.h already in scope).
#ifndef SMAX_KERNELS_ROW_INL_PIECE_
#error "include kernels/row-inl.h, not its pieces"
#endif

/// f32 lanes (as many as `d64` has) of v rounded as IEEE does: +-inf where
/// |v| >= 2^128 - 2^103, DemoteTo elsewhere.
template <class D64>
HWY_INLINE hn::Vec<hn::Rebind<float, D64>> DemoteIeee(D64 d64, hn::Vec<D64> v) {
  const hn::Rebind<float, D64> d32;
  const auto big_d = hn::Ge(hn::Abs(v), hn::Set(d64, 0x1.ffffffp127));
  // The mask carried to f32 lanes as 1.0f / 0.0f (masks of different lane
  // sizes do not convert).
  const auto big = hn::Eq(hn::DemoteTo(d32, hn::IfThenElseZero(big_d, hn::Set(d64, 1.0))),
                          hn::Set(d32, 1.0f));
  const auto f = hn::DemoteTo(d32, v);
  return hn::IfThenElse(big, hn::Mul(f, hn::Set(d32, std::numeric_limits<float>::infinity())), f);
}

/// softmax_backward's slow path: dx = y * g * scale (g = dy - dot) in float64
/// from the f32 y and g, rounded once (IEEE: beyond FLT_MAX -> inf).
HWY_INLINE VF SoftmaxGradF64(VF y, VF g, double scale) {
  const DF d;
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(d, static_cast<float>(static_cast<double>(hn::GetLane(y)) *
                                       static_cast<double>(hn::GetLane(g)) * scale));
#else
  using DH = hn::Half<DF>;
  using DD = hn::Rebind<double, DH>;
  const DH dh;
  const DD dd;
  const auto vs = hn::Set(dd, scale);
  const auto lo = hn::Mul(hn::Mul(hn::PromoteTo(dd, hn::LowerHalf(dh, y)),
                                  hn::PromoteTo(dd, hn::LowerHalf(dh, g))), vs);
  const auto hi = hn::Mul(hn::Mul(hn::PromoteTo(dd, hn::UpperHalf(dh, y)),
                                  hn::PromoteTo(dd, hn::UpperHalf(dh, g))), vs);
  return hn::Combine(d, DemoteIeee(dd, hi), DemoteIeee(dd, lo));
#endif
}

/// log_softmax_backward's row in float64, for a sum of dy beyond f32 (or
/// +-inf): in f32, e^y (0 below y = -87) * sum would be 0 * inf = NaN, or
/// inf where the result is finite. dx = scale * (dy - e^y * sum), e^y in
/// float64 (> 0 down to -745; NaN y -> NaN), rounded once; the caller
/// zeroes y = -inf lanes.
HWY_INLINE VF LogSoftmaxGradF64(VF y, VF dy, double sum, double scale) {
  const DF d;
#if HWY_TARGET == HWY_SCALAR
  const double yv = static_cast<double>(hn::GetLane(y));
  return hn::Set(d, static_cast<float>(
                        scale * (static_cast<double>(hn::GetLane(dy)) - std::exp(yv) * sum)));
#else
  using DH = hn::Half<DF>;
  using DD = hn::Rebind<double, DH>;
  const DH dh;
  const DD dd;
  auto half = [&](hn::Vec<DH> yh, hn::Vec<DH> gh) {
    const auto yw = hn::PromoteTo(dd, yh);
    // Highway's Exp maps NaN to 0 and is valid up to ~706: NaN stays NaN,
    // e^y beyond float64 (a raw y > 709.78) is inf.
    auto e = hn::IfThenElse(hn::IsNaN(yw), yw, hn::Exp(dd, yw));
    e = hn::IfThenElse(hn::Gt(yw, hn::Set(dd, 709.78)), hn::Set(dd, HUGE_VAL), e);
    const auto r = hn::Mul(hn::NegMulAdd(e, hn::Set(dd, sum), hn::PromoteTo(dd, gh)),
                           hn::Set(dd, scale));
    return DemoteIeee(dd, r);
  };
  return hn::Combine(d, half(hn::UpperHalf(dh, y), hn::UpperHalf(dh, dy)),
                     half(hn::LowerHalf(dh, y), hn::LowerHalf(dh, dy)));
#endif
}

/// log_softmax_backward's step: dx = (dy - e^y sum) scale, 0 where y = -inf,
/// for one vector. f32 (ExpRef: e^y is exactly 0 below y ~ -87) except where
/// f32 loses the result, which is then LogSoftmaxGradF64's: `wide` (the
/// row's sum of dy beyond f32, or +-inf: 0 * inf), or a lane with
/// -inf < y < -86, whose e^y sum term f32 flushes although a large scale
/// or a tiny dy makes it count (fuzz/regressions/log_softmax_backward).
/// sum64 / scale64: the float64 values of sum / scale.
struct LogSoftmaxStep {
  VF sum, scale;
  double sum64, scale64;
  bool wide;
  HWY_INLINE VF operator()(DF d, VF y, VF dy) const {
    if (HWY_UNLIKELY(wide || AnyTiny(d, y))) {
      return hn::IfThenZeroElse(hn::Eq(y, hn::Set(d, kNegInf)),
                                LogSoftmaxGradF64(y, dy, sum64, scale64));
    }
    return F32(d, y, dy, sum, scale);
  }
  /// The f32 formula alone, for callers that send the float64 cases
  /// elsewhere: no lane has -inf < y < -86 (AnyTiny false). e^y then needs
  /// no flush: it flushes only where round(y log2e) < -125, i.e. y below
  /// about -86.99, and for y = -inf, whose result is the zero selected below (the
  /// flushless exp gives NaN there, a lane that select discards); NaN and
  /// +inf lanes never flushed. So ExpRefNoFlush gives ExpRef's bits, two
  /// ops per vector cheaper.
  static HWY_INLINE VF F32(DF d, VF y, VF dy, VF sum, VF scale) {
    const VF e = ExpRefNoFlush{ExpRef::Make(0.0f)}(d, y);
    const VF g = hn::Mul(hn::NegMulAdd(e, sum, dy), scale);
    return hn::IfThenZeroElse(hn::Eq(y, hn::Set(d, kNegInf)), g);
  }
  /// Lanes where f32 flushes e^y but y is not -inf.
  static HWY_INLINE bool AnyTiny(DF d, VF y) {
    return !hn::AllFalse(d, hn::And(hn::Lt(y, hn::Set(d, -86.0f)), hn::Ne(y, hn::Set(d, kNegInf))));
  }
  static LogSoftmaxStep Make(DF d, double sum64, float scale) {
    const float sum = static_cast<float>(sum64);
    return {hn::Set(d, sum), hn::Set(d, scale), sum64, static_cast<double>(scale),
            !std::isfinite(sum)};
  }
};


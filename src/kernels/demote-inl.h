// src/kernels/demote-inl.h: float64 -> f32 rounding as IEEE does it, per
// SIMD target.
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

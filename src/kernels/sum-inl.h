// src/kernels/sum-inl.h: blocked f32 -> float64 sums. F64Acc: per-lane
// float64 accumulators (f32 lanes widened exactly), reduced in a fixed lane
// order. BlockSum: 2 f32 accumulators (acc0, acc1) that receive at most
// 2 * kStepsPerBlock adds per lane before they are widened, so the f32
// error of a sum of n non-negative terms is bounded by that of 16 adds
// (about 16 * 2^-24 relative) plus float64 rounding, whatever n. LaneSum: the
// same with one accumulator per lane along a strided axis (columns).
// The order of the adds is part of the contract: kernels that must give the
// same bits (rescaled.cc reproduces ExpSum's order) rely on it.
//
// Included only from kernels/row-inl.h, inside its per-target namespace
// smax::kernels::HWY_NAMESPACE (with `hn`, the standard and Highway headers
// and the pieces listed before this one in row-inl.h already in scope).
#ifndef SMAX_KERNELS_ROW_INL_PIECE_
#error "include kernels/row-inl.h, not its pieces"
#endif

// Sums in 2 f32 accumulators ("acc2"), each receiving 2 adds per step of
// kUnroll vectors; a block is 8 steps = 16 adds per lane, then the
// accumulators are widened into float64 (so the error does not grow with
// n). 2 accumulators hide the 3-4 cycle add latency behind ~40 FMA-pipe ops.
constexpr unsigned kStepsPerBlock = 8;

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

// src/kernels/narrow_pass-inl.h: pass-inl.h's last passes into any row sink
// (narrow-inl.h's AnyOut / Out<S>): the same f32 arithmetic as the f32
// passes, each result rounded once by the sink. Shared by the whole-row
// narrow kernels (softmax_narrow.cc) and the segment kernels of long narrow
// rows (softmax_segments_narrow.cc), so both give round(f32 kernel) bits.
//
// A per-target header: include it after kernels/narrow-inl.h, outside any
// namespace (Highway per-target toggle guard as narrow-inl.h's).
#if defined(SMAX_KERNELS_NARROW_PASS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SMAX_KERNELS_NARROW_PASS_INL_H_
#undef SMAX_KERNELS_NARROW_PASS_INL_H_
#else
#define SMAX_KERNELS_NARROW_PASS_INL_H_
#endif

#include <cmath>

#include "kernels/narrow-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// y = e * factor, reload's ScalePass (kFlush: |y| < FLT_MIN -> 0).
template <bool kFlush>
HWY_INLINE VF ScaleLanes(DF d, VF e, float factor) {
  return ScalePass<kFlush>{nullptr, factor}.Apply(d, e);
}

// out_i = ScaleLanes<kFlush>(exp(t_i), factor), the tail through ExpTail
// (as ExpSum computes the terms that reload stores and then scales).
template <bool kFlush, class Src, class Exp, class O>
struct ExpScaleOutPass {
  const Src& src;
  Exp exp;
  O out;
  float factor;
  HWY_INLINE void Vector(DF d, size_t i) const {
    out.Store(d, ScaleLanes<kFlush>(d, exp(d, src.Load(d, i)), factor), i);
  }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    out.StoreTail(d, ScaleLanes<kFlush>(d, ExpTail(exp, d, src.LoadTail(d, i, count)), factor),
                  i, count);
  }
};
// ExpScaleStore (pass-inl.h) into any sink: e_i * factor, no flush (the
// exp's FlushExtra already covers it).
template <class Src, class Exp, class O>
HWY_INLINE void ExpScaleOut(const Src& src, size_t n, const Exp& exp, float factor, const O& out) {
  RunPass(n, ExpScaleOutPass<false, Src, Exp, O>{src, exp, out, factor});
}
// ExpShiftScaleStore (pass-inl.h) into any sink.
template <class Src, class O>
HWY_INLINE void ExpShiftScaleOut(const Src& src, size_t n, float shift, double factor,
                                 const O& out) {
  if (std::fabs(shift) <= kRefMaxAbs) {
    const float nref = std::nearbyint(shift * kLog2e);
    const float f = static_cast<float>(
        factor * std::exp(static_cast<double>(nref) * kLn2d - static_cast<double>(shift)));
    ExpScaleOut(src, n, ExpRef::Make(nref, FlushExtra(f)), f, out);
  } else {
    const float f = static_cast<float>(factor);
    ExpScaleOut(src, n, ExpDiff::Make(shift, FlushExtra(f)), f, out);
  }
}

// LogPass (pass-inl.h) into any sink: (t_i - shift) - log_sum.
template <class Src, class O>
struct LogOutPass {
  const Src& src;
  O out;
  float shift, log_sum;
  HWY_INLINE VF Apply(DF d, VF t) const {
    return hn::Sub(hn::Sub(t, hn::Set(d, shift)), hn::Set(d, log_sum));
  }
  HWY_INLINE void Vector(DF d, size_t i) const { out.Store(d, Apply(d, src.Load(d, i)), i); }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    out.StoreTail(d, Apply(d, src.LoadTail(d, i, count)), i, count);
  }
};

// out_i = ScaleLanes<kFlush>(scratch_i, factor): reload's scale pass on the
// exps the sum pass kept in an f32 scratch row, rounded into any sink.
template <bool kFlush, class O>
struct ScratchScaleOutPass {
  const float* HWY_RESTRICT scratch;
  O out;
  float factor;
  HWY_INLINE void Vector(DF d, size_t i) const {
    out.Store(d, ScaleLanes<kFlush>(d, hn::LoadU(d, scratch + i), factor), i);
  }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    out.StoreTail(d, ScaleLanes<kFlush>(d, LoadTailZero(d, scratch + i, count), factor), i, count);
  }
};

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SMAX_KERNELS_NARROW_PASS_INL_H_

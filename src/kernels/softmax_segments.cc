// src/kernels/softmax_segments.cc: the segment kernels of one long row
// (kernels.h, "Segments of one long row"). Ops cut the row on a fixed grid of
// kSegment elements, run a partial kernel per segment, merge in order, then
// run a store kernel per segment. The shift passed by ops is arbitrary, so
// the exp here is ExpDiff (TwoSum exact difference); twopass_* use ExpRef.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_segments.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <type_traits>

#include "kernels/row-inl.h"
#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// max NaN when the segment holds a NaN and no finite or +inf entry:
// RowMinMax need not propagate NaN (EMU128's Max drops it), and an all-NaN
// segment must not read as an empty one (-inf), as in the row kernels
// (softmax_rows.cc).
SegmentRange MinMaxSegmentImpl(const float* x, const float* mask, int64_t n, float scale) {
  SegmentRange r{kInf, kNegInf};
  WithLogits(x, mask, scale, [&](const auto& src) {
    const MinMax mm = RowMinMax(src, static_cast<size_t>(n));
    r = SegmentRange{mm.min, mm.max};
    if (r.max == kNegInf && RowHasNaN(src, static_cast<size_t>(n))) {
      r.max = std::numeric_limits<float>::quiet_NaN();
    }
  });
  return r;
}

double ExpSumSegmentImpl(const float* x, const float* mask, int64_t n, float scale,
                         float shift, float* dst, const SegmentPrefetch& hint) {
  double s = 0.0;
  const ExpDiff e = ExpDiff::Make(shift);
  const RowPrefetch prefetch = ToRowPrefetch(hint);
  WithLogits(x, mask, scale, [&](const auto& src) {
    s = dst != nullptr ? ExpSum<true>(src, static_cast<size_t>(n), e, dst, prefetch)
                       : ExpSum<false>(src, static_cast<size_t>(n), e, nullptr, prefetch);
  });
  return s;
}

float RefExponentImpl(float m) {
  if (!(std::fabs(m) <= kRefMaxAbs)) return std::numeric_limits<float>::quiet_NaN();
  return std::nearbyint(m * kLog2e);  // as ThreePassToSum (softmax_rows.cc)
}

// ExpRef costs ~8 fewer ops per vector than ExpDiff's TwoSum; measured on the
// Zen 3 VM: reload softmax of one 1M-element row (16 segments) 0.56 -> 0.40
// ns per element, 64x128256 0.72 -> 0.60 (docs/benchmarking.md).
// The exp is chosen as ThreePassToSum (softmax_rows.cc) does (WithRefExp),
// from the row's max and min.
double ExpSumRefSegmentImpl(const float* x, const float* mask, int64_t n, float scale,
                            float nref, float m, float t_min, float* dst,
                            const SegmentPrefetch& hint) {
  double s = 0.0;
  const size_t len = static_cast<size_t>(n);
  const RowPrefetch prefetch = ToRowPrefetch(hint);
  WithLogits(x, mask, scale, [&](const auto& src) {
    s = WithRefExp(m, t_min, nref, [&](const auto& exp) {
      return dst != nullptr ? ExpSum<true>(src, len, exp, dst, prefetch)
                            : ExpSum<false>(src, len, exp, nullptr, prefetch);
    });
  });
  return s;
}

void ExpScaleSegmentImpl(const float* x, const float* mask, int64_t n, float scale,
                         float shift, float factor, float* dst) {
  WithLogits(x, mask, scale, [&](const auto& src) {
    ExpShiftScaleStore(src, static_cast<size_t>(n), shift, factor, dst);
  });
}

void ScaleSegmentImpl(float* dst, int64_t n, float factor) {
  ScaleInPlace(dst, static_cast<size_t>(n), factor);
}

void ScaleSegmentNormalImpl(float* dst, int64_t n, float factor) {
  ScaleInPlace<false>(dst, static_cast<size_t>(n), factor);
}

void LogStoreSegmentImpl(const float* x, const float* mask, int64_t n, float scale,
                         float shift, float log_sum, float* dst, bool stream) {
  const size_t count = static_cast<size_t>(n);
  WithLogits(x, mask, scale, [&](const auto& src) {
    using Src = std::decay_t<decltype(src)>;
    if (stream && StreamAligned(dst, count)) {
      RunPass(count, LogPass<Src, true>{src, dst, shift, log_sum});
      hwy::FlushStream();
    } else {
      LogStore(src, count, shift, log_sum, dst);
    }
  });
}

// (m, d) with m the true max: OnlineScan's d * e^ref is re-expressed
// relative to the max with one float64 exp (skipped when ref == max).
OnlineState OnlineSegmentImpl(const float* x, const float* mask, int64_t n, float scale) {
  OnlineState st;
  WithLogits(x, mask, scale, [&](const auto& src) {
    const OnlineResult r = OnlineScan(src, static_cast<size_t>(n));
    if (r.d == 0.0) return;  // all -inf: identity (-inf, 0)
    if (std::isnan(r.d)) {
      st.m = r.max;
      st.d = r.d;
      return;
    }
    st.m = r.max;
    st.d = r.ref == r.max ? r.d
                          : r.d * std::exp(static_cast<double>(r.ref) - r.max);
  });
  return st;
}

TwoPassState TwoPassSegmentImpl(const float* x, const float* mask, int64_t n, float scale) {
  TwoPassState st;
  WithLogits(x, mask, scale, [&](const auto& src) {
    const TwoPassResult r = TwoPassScan(src, static_cast<size_t>(n));
    st.mu = r.mu;
    st.nu = r.nu;
    st.in_range = r.in_range;
  });
  return st;
}

void TwoPassStoreSegmentImpl(const float* x, const float* mask, int64_t n, float scale,
                             double nu, double inv_mu, float* dst) {
  const float inv = static_cast<float>(inv_mu);
  const ExpRef e = ExpRef::Make(static_cast<float>(nu), FlushExtra(inv));
  WithLogits(x, mask, scale, [&](const auto& src) {
    ExpScaleStore(src, static_cast<size_t>(n), e, inv, dst);
  });
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(MinMaxSegmentImpl);
HWY_EXPORT(ExpSumSegmentImpl);
HWY_EXPORT(ExpScaleSegmentImpl);
HWY_EXPORT(RefExponentImpl);
HWY_EXPORT(ExpSumRefSegmentImpl);
HWY_EXPORT(ScaleSegmentImpl);
HWY_EXPORT(ScaleSegmentNormalImpl);
HWY_EXPORT(LogStoreSegmentImpl);
HWY_EXPORT(OnlineSegmentImpl);
HWY_EXPORT(TwoPassSegmentImpl);
HWY_EXPORT(TwoPassStoreSegmentImpl);

SegmentRange minmax_segment(const float* x, const float* mask, int64_t n, float scale) noexcept {
  return HWY_DYNAMIC_DISPATCH(MinMaxSegmentImpl)(x, mask, n, scale);
}
double expsum_segment(const float* x, const float* mask, int64_t n, float scale,
                      float shift, float* dst, const SegmentPrefetch& prefetch) noexcept {
  return HWY_DYNAMIC_DISPATCH(ExpSumSegmentImpl)(x, mask, n, scale, shift, dst, prefetch);
}
float ref_exponent(float m) noexcept { return HWY_DYNAMIC_DISPATCH(RefExponentImpl)(m); }
double expsum_ref_segment(const float* x, const float* mask, int64_t n, float scale,
                          float nref, float m, float t_min, float* dst,
                          const SegmentPrefetch& prefetch) noexcept {
  return HWY_DYNAMIC_DISPATCH(ExpSumRefSegmentImpl)(x, mask, n, scale, nref, m, t_min, dst,
                                                    prefetch);
}
void exp_scale_segment(const float* x, const float* mask, int64_t n, float scale,
                       float shift, float factor, float* dst) noexcept {
  HWY_DYNAMIC_DISPATCH(ExpScaleSegmentImpl)(x, mask, n, scale, shift, factor, dst);
}
void scale_segment(float* dst, int64_t n, float factor) noexcept {
  HWY_DYNAMIC_DISPATCH(ScaleSegmentImpl)(dst, n, factor);
}
void scale_segment_normal(float* dst, int64_t n, float factor) noexcept {
  HWY_DYNAMIC_DISPATCH(ScaleSegmentNormalImpl)(dst, n, factor);
}
void log_store_segment(const float* x, const float* mask, int64_t n, float scale,
                       float shift, float log_sum, float* dst, bool stream) noexcept {
  HWY_DYNAMIC_DISPATCH(LogStoreSegmentImpl)(x, mask, n, scale, shift, log_sum, dst, stream);
}
OnlineState online_segment(const float* x, const float* mask, int64_t n,
                           float scale) noexcept {
  return HWY_DYNAMIC_DISPATCH(OnlineSegmentImpl)(x, mask, n, scale);
}
TwoPassState twopass_segment(const float* x, const float* mask, int64_t n,
                             float scale) noexcept {
  return HWY_DYNAMIC_DISPATCH(TwoPassSegmentImpl)(x, mask, n, scale);
}
void twopass_store_segment(const float* x, const float* mask, int64_t n, float scale,
                           double nu, double inv_mu, float* dst) noexcept {
  HWY_DYNAMIC_DISPATCH(TwoPassStoreSegmentImpl)(x, mask, n, scale, nu, inv_mu, dst);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE

// src/kernels/softmax_segments_narrow.cc: the segment kernels of one long
// row of any storage type (segments_narrow.h). Each one is
// softmax_segments.cc's kernel of the same name with the row read through
// RowLogits<S> (narrow-inl.h: the same f32 logits, widened in registers) and
// its outputs written through AnyOut (rounded once), using the same scans,
// exps and passes, so the partials are the f32 kernels' and the outputs are
// theirs rounded.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_segments_narrow.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <limits>

#include "kernels/row-inl.h"
#include "kernels/narrow-inl.h"
#include "kernels/narrow_pass-inl.h"
#include "kernels/segments_narrow.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace {

// kF32, kBF16 or kF16 (segments_narrow.h); the ops never send f64 here.
HWY_INLINE Storage StorageOfType(DType t) {
  return t == DType::kBF16 ? Storage::kBF16 : t == DType::kF16 ? Storage::kF16 : Storage::kF32;
}

// Calls f(src) with the RowLogits<S> of the segment's storage (the plain
// instantiation when there is neither a mask nor a scale).
template <class F>
HWY_INLINE void WithSegmentLogits(const SegmentIn& in, F&& f) {
  const bool plain = in.mask == nullptr && in.scale == 1.0f;
  auto typed = [&](auto tag) {
    constexpr Storage S = decltype(tag)::value;
    using T = typename RowLogits<S>::T;
    const T* x = static_cast<const T*>(in.x);
    if (plain) {
      f(RowLogits<S, true>{x, nullptr, 1.0f, false});
    } else {
      f(RowLogits<S, false>{x, in.mask, in.scale, in.scale != 1.0f});
    }
  };
  switch (StorageOfType(in.type)) {
    case Storage::kBF16: return typed(std::integral_constant<Storage, Storage::kBF16>{});
    case Storage::kF16: return typed(std::integral_constant<Storage, Storage::kF16>{});
    case Storage::kF32: return typed(std::integral_constant<Storage, Storage::kF32>{});
  }
}

HWY_INLINE AnyOut Sink(const SegmentOut& out) { return AnyOut{out.p, StorageOfType(out.type)}; }

}  // namespace

// As MinMaxSegmentImpl (softmax_segments.cc): an all-NaN segment reads as
// max NaN, not as an empty one.
SegmentRange MinMaxSegmentAnyImpl(const SegmentIn& in) {
  SegmentRange r{kInf, kNegInf};
  const size_t n = static_cast<size_t>(in.n);
  WithSegmentLogits(in, [&](const auto& src) {
    const MinMax mm = RowMinMax(src, n);
    r = SegmentRange{mm.min, mm.max};
    if (r.max == kNegInf && RowHasNaN(src, n)) r.max = std::numeric_limits<float>::quiet_NaN();
  });
  return r;
}

double ExpSumSegmentAnyImpl(const SegmentIn& in, float shift, float* store,
                            const SegmentPrefetch& hint) {
  double s = 0.0;
  const ExpDiff e = ExpDiff::Make(shift);
  const size_t n = static_cast<size_t>(in.n);
  const RowPrefetch prefetch = ToRowPrefetch(hint);
  WithSegmentLogits(in, [&](const auto& src) {
    s = store != nullptr ? ExpSum<true>(src, n, e, store, prefetch)
                         : ExpSum<false>(src, n, e, nullptr, prefetch);
  });
  return s;
}

double ExpSumRefSegmentAnyImpl(const SegmentIn& in, float nref, float m, float t_min,
                               float* store, const SegmentPrefetch& hint) {
  double s = 0.0;
  const size_t n = static_cast<size_t>(in.n);
  const RowPrefetch prefetch = ToRowPrefetch(hint);
  WithSegmentLogits(in, [&](const auto& src) {
    s = WithRefExp(m, t_min, nref, [&](const auto& exp) {
      return store != nullptr ? ExpSum<true>(src, n, exp, store, prefetch)
                              : ExpSum<false>(src, n, exp, nullptr, prefetch);
    });
  });
  return s;
}

void ExpScaleSegmentAnyImpl(const SegmentIn& in, float shift, float factor,
                            const SegmentOut& out) {
  WithSegmentLogits(in, [&](const auto& src) {
    ExpShiftScaleOut(src, static_cast<size_t>(in.n), shift, factor, Sink(out));
  });
}

void LogStoreSegmentAnyImpl(const SegmentIn& in, float shift, float log_sum,
                            const SegmentOut& out) {
  WithSegmentLogits(in, [&](const auto& src) {
    using Src = std::decay_t<decltype(src)>;
    RunPass(static_cast<size_t>(in.n), LogOutPass<Src, AnyOut>{src, Sink(out), shift, log_sum});
  });
}

// As OnlineSegmentImpl: (m, d) with m the true max.
OnlineState OnlineSegmentAnyImpl(const SegmentIn& in) {
  OnlineState st;
  WithSegmentLogits(in, [&](const auto& src) {
    const OnlineResult r = OnlineScan(src, static_cast<size_t>(in.n));
    if (r.d == 0.0) return;  // all -inf: identity (-inf, 0)
    st.m = r.max;
    if (std::isnan(r.d)) {
      st.d = r.d;
      return;
    }
    st.d = r.ref == r.max ? r.d : r.d * std::exp(static_cast<double>(r.ref) - r.max);
  });
  return st;
}

TwoPassState TwoPassSegmentAnyImpl(const SegmentIn& in) {
  TwoPassState st;
  WithSegmentLogits(in, [&](const auto& src) {
    const TwoPassResult r = TwoPassScan(src, static_cast<size_t>(in.n));
    st.mu = r.mu;
    st.nu = r.nu;
    st.in_range = r.in_range;
  });
  return st;
}

void TwoPassStoreSegmentAnyImpl(const SegmentIn& in, double nu, double inv_mu,
                                const SegmentOut& out) {
  const float inv = static_cast<float>(inv_mu);
  const ExpRef e = ExpRef::Make(static_cast<float>(nu), FlushExtra(inv));
  WithSegmentLogits(in, [&](const auto& src) {
    ExpScaleOut(src, static_cast<size_t>(in.n), e, inv, Sink(out));
  });
}

void ScaleSegmentAnyImpl(const float* exps, int64_t n, float factor, bool flush,
                         const SegmentOut& out) {
  const size_t len = static_cast<size_t>(n);
  if (flush) {
    RunPass(len, ScratchScaleOutPass<true, AnyOut>{exps, Sink(out), factor});
  } else {
    RunPass(len, ScratchScaleOutPass<false, AnyOut>{exps, Sink(out), factor});
  }
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(MinMaxSegmentAnyImpl);
HWY_EXPORT(ExpSumSegmentAnyImpl);
HWY_EXPORT(ExpSumRefSegmentAnyImpl);
HWY_EXPORT(ExpScaleSegmentAnyImpl);
HWY_EXPORT(LogStoreSegmentAnyImpl);
HWY_EXPORT(OnlineSegmentAnyImpl);
HWY_EXPORT(TwoPassSegmentAnyImpl);
HWY_EXPORT(TwoPassStoreSegmentAnyImpl);
HWY_EXPORT(ScaleSegmentAnyImpl);

SegmentRange minmax_segment_any(const SegmentIn& in) noexcept {
  return HWY_DYNAMIC_DISPATCH(MinMaxSegmentAnyImpl)(in);
}
double expsum_segment_any(const SegmentIn& in, float shift, float* store,
                          const SegmentPrefetch& prefetch) noexcept {
  return HWY_DYNAMIC_DISPATCH(ExpSumSegmentAnyImpl)(in, shift, store, prefetch);
}
double expsum_ref_segment_any(const SegmentIn& in, float nref, float m, float t_min,
                              float* store, const SegmentPrefetch& prefetch) noexcept {
  return HWY_DYNAMIC_DISPATCH(ExpSumRefSegmentAnyImpl)(in, nref, m, t_min, store, prefetch);
}
void exp_scale_segment_any(const SegmentIn& in, float shift, float factor,
                           const SegmentOut& out) noexcept {
  HWY_DYNAMIC_DISPATCH(ExpScaleSegmentAnyImpl)(in, shift, factor, out);
}
void log_store_segment_any(const SegmentIn& in, float shift, float log_sum,
                           const SegmentOut& out) noexcept {
  HWY_DYNAMIC_DISPATCH(LogStoreSegmentAnyImpl)(in, shift, log_sum, out);
}
OnlineState online_segment_any(const SegmentIn& in) noexcept {
  return HWY_DYNAMIC_DISPATCH(OnlineSegmentAnyImpl)(in);
}
TwoPassState twopass_segment_any(const SegmentIn& in) noexcept {
  return HWY_DYNAMIC_DISPATCH(TwoPassSegmentAnyImpl)(in);
}
void twopass_store_segment_any(const SegmentIn& in, double nu, double inv_mu,
                               const SegmentOut& out) noexcept {
  HWY_DYNAMIC_DISPATCH(TwoPassStoreSegmentAnyImpl)(in, nu, inv_mu, out);
}
void scale_segment_any(const float* exps, int64_t n, float factor, bool flush,
                       const SegmentOut& out) noexcept {
  HWY_DYNAMIC_DISPATCH(ScaleSegmentAnyImpl)(exps, n, factor, flush, out);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE

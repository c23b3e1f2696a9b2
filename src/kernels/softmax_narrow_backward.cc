// src/kernels/softmax_narrow_backward.cc: softmax_backward and
// log_softmax_backward on rows whose y, dy and dx may each be f32, bf16 or
// f16 (softmax_narrow.h, NarrowBackwardRows).
//
// The math is softmax_backward.cc's, step for step, on the widened y and dy
// (In<S>, narrow-inl.h): the float64 blocked reduction (BlockedDotIn, the
// same vector order and accumulators as BlockedDot), then the elementwise
// gradient (SoftmaxGradFn / SoftmaxGradF64 / LogSoftmaxGrad, the same ops),
// each dx lane rounded once to dx's type (AnyOut). dx may equal dy when
// they have the same type: every vector of dy is read before dx's vector at
// the same index is written. Contract: round(f32 kernel(widen(y),
// widen(dy))), bit for bit (tests/test_softmax_narrow.cc).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_narrow_backward.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/row-inl.h"
#include "kernels/narrow-inl.h"
#include "kernels/softmax_narrow.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace narrow_bwd {

// softmax_backward.cc's BlockedDot: sum a_i * b_i (kProduct) or sum a_i,
// in float64 lanes, 2 accumulators, the same vector order.
template <bool kProduct, class A, class B>
HWY_INLINE double BlockedDotIn(const A& a, const B& b, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  F64Acc acc0, acc1;
  auto add = [&](F64Acc& acc, VF va, VF vb) {
    if (kProduct) {
      acc.AddProduct(d, va, vb);
    } else {
      acc.Add(d, va);
    }
  };
  auto loadb = [&](size_t i) { return kProduct ? b.Load(d, i) : hn::Zero(d); };
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    add(acc0, a.Load(d, i), loadb(i));
    add(acc1, a.Load(d, i + N), loadb(i + N));
  }
  for (; i + N <= n; i += N) add(acc0, a.Load(d, i), loadb(i));
  if (i < n) {
    add(acc1, a.LoadTailZero(d, i, n - i),
        kProduct ? b.LoadTailZero(d, i, n - i) : hn::Zero(d));
  }
  return acc0.Total(d) + acc1.Total(d);
}


// softmax_backward.cc's SoftmaxGradFn: the f32 product unless a lane is at
// risk (overflow, or a tiny product with |scale| > 1), then float64.
struct Grad {
  VF vs;
  double scale;
  bool big;
  static Grad Make(float scale) {
    return Grad{hn::Set(DF(), scale), static_cast<double>(scale), std::fabs(scale) > 1.0f};
  }
  HWY_INLINE hn::Mask<DF> Risk(VF y, VF g, VF p) const {
    const DF d;
    const VF ap = hn::Abs(p);
    auto risk = hn::Gt(ap, hn::Set(d, std::numeric_limits<float>::max()));
    if (big) {
      const auto tiny = hn::Lt(ap, hn::Set(d, std::numeric_limits<float>::min()));
      risk = hn::Or(risk, hn::AndNot(hn::Or(hn::Eq(y, hn::Zero(d)), hn::Eq(g, hn::Zero(d))), tiny));
    }
    return risk;
  }
  HWY_INLINE VF operator()(VF y, VF dy, VF dot) const {
    const DF d;
    const VF g = hn::Sub(dy, dot);
    const VF p = hn::Mul(y, g);
    if (HWY_LIKELY(hn::AllFalse(d, Risk(y, g, p)))) return hn::Mul(p, vs);
    return SoftmaxGradF64(y, g, scale);
  }
};


// softmax_backward.cc's GradStore with typed rows and a rounding sink.
// red64: the reduction in float64; red = its f32 rounding.
template <bool kLog, class Y, class DY>
HWY_INLINE void GradStoreIn(const Y& y, const DY& dy, size_t n, double red64, float scale,
                            const AnyOut& dx) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const float red = static_cast<float>(red64);
  const VF vr = hn::Set(d, red);
  const VF vs = hn::Set(d, scale);
  if (kLog) {
    const LogSoftmaxStep step = LogSoftmaxStep::Make(d, red64, scale);
    auto g = [&](VF vy, VF vdy) { return step(d, vy, vdy); };
    size_t i = 0;
    for (; i + 2 * N <= n; i += 2 * N) {
      const VF g0 = g(y.Load(d, i), dy.Load(d, i));
      const VF g1 = g(y.Load(d, i + N), dy.Load(d, i + N));
      dx.Store(d, g0, i);
      dx.Store(d, g1, i + N);
    }
    for (; i + N <= n; i += N) dx.Store(d, g(y.Load(d, i), dy.Load(d, i)), i);
    if (i < n) {
      dx.StoreTail(d, g(y.LoadTailZero(d, i, n - i), dy.LoadTailZero(d, i, n - i)), i, n - i);
    }
    return;
  }
  const Grad grad = Grad::Make(scale);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF y0 = y.Load(d, i), y1 = y.Load(d, i + N);
    const VF g0 = hn::Sub(dy.Load(d, i), vr), g1 = hn::Sub(dy.Load(d, i + N), vr);
    const VF p0 = hn::Mul(y0, g0), p1 = hn::Mul(y1, g1);
    if (HWY_LIKELY(hn::AllFalse(d, hn::Or(grad.Risk(y0, g0, p0), grad.Risk(y1, g1, p1))))) {
      dx.Store(d, hn::Mul(p0, vs), i);
      dx.Store(d, hn::Mul(p1, vs), i + N);
    } else {
      dx.Store(d, SoftmaxGradF64(y0, g0, grad.scale), i);
      dx.Store(d, SoftmaxGradF64(y1, g1, grad.scale), i + N);
    }
  }
  for (; i + N <= n; i += N) dx.Store(d, grad(y.Load(d, i), dy.Load(d, i), vr), i);
  if (i < n) {
    const VF g = grad(y.LoadTailZero(d, i, n - i), dy.LoadTailZero(d, i, n - i), vr);
    dx.StoreTail(d, g, i, n - i);
  }
}

HWY_INLINE Storage StorageOf(DType t) {
  return t == DType::kBF16 ? Storage::kBF16 : t == DType::kF16 ? Storage::kF16 : Storage::kF32;
}

template <bool kLog, Storage SY, Storage SDY>
HWY_INLINE void GradRowsTyped(const NarrowBackwardRows& r) {
  using Y = In<SY>;
  using DYT = In<SDY>;
  const size_t n = static_cast<size_t>(r.cols);
  const auto* y_base = static_cast<const typename Y::T*>(r.y);
  const auto* dy_base = static_cast<const typename DYT::T*>(r.dy);
  const AnyOut dx_base{r.dx, StorageOf(r.dx_type)};
  for (int64_t row = 0; row < r.rows; ++row) {
    const Y y{y_base + row * r.y_stride};
    const DYT dy{dy_base + row * r.dy_stride};
    const AnyOut dx = dx_base.At(row * r.dx_stride);
    const double reduced = kLog ? BlockedDotIn<false>(dy, dy, n) : BlockedDotIn<true>(dy, y, n);
    GradStoreIn<kLog>(y, dy, n, reduced, r.scale, dx);
  }
}

template <bool kLog, Storage SY>
HWY_INLINE void GradRowsY(const NarrowBackwardRows& r) {
  switch (StorageOf(r.dy_type)) {
    case Storage::kF32: return GradRowsTyped<kLog, SY, Storage::kF32>(r);
    case Storage::kBF16: return GradRowsTyped<kLog, SY, Storage::kBF16>(r);
    case Storage::kF16: return GradRowsTyped<kLog, SY, Storage::kF16>(r);
  }
}

template <bool kLog>
HWY_NOINLINE void GradRows(const NarrowBackwardRows& r) {
  switch (StorageOf(r.y_type)) {
    case Storage::kF32: return GradRowsY<kLog, Storage::kF32>(r);
    case Storage::kBF16: return GradRowsY<kLog, Storage::kBF16>(r);
    case Storage::kF16: return GradRowsY<kLog, Storage::kF16>(r);
  }
}

}  // namespace narrow_bwd

void SoftmaxBackwardRowsNarrowImpl(const NarrowBackwardRows& r) { narrow_bwd::GradRows<false>(r); }
void LogSoftmaxBackwardRowsNarrowImpl(const NarrowBackwardRows& r) {
  narrow_bwd::GradRows<true>(r);
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SoftmaxBackwardRowsNarrowImpl);
HWY_EXPORT(LogSoftmaxBackwardRowsNarrowImpl);

void softmax_backward_rows_narrow(const NarrowBackwardRows& rows) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardRowsNarrowImpl)(rows);
}
void log_softmax_backward_rows_narrow(const NarrowBackwardRows& rows) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxBackwardRowsNarrowImpl)(rows);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE

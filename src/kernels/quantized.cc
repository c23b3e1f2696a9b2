// src/kernels/quantized.cc: the Highway kernels of qlinear_softmax (contracts:
// kernels/quantized.h). The output pass promotes 8-bit inputs to i32 lanes,
// gathers the float table (GatherIndex), multiplies, divides, adds the
// correction and rounds in f32 lanes (IEEE, so every target gives the scalar
// formula's bits), clamps in i32 and demotes with saturation; the tail goes
// through the scalar formula. The max is a lane-wise max and a reduction.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quantized.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/quantized.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

template <typename T>
T RowMax(const T* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  T m = x[0];
  int64_t i = 0;
  if (n >= N) {
    auto acc = hn::LoadU(d, x);
    for (i = N; i + N <= n; i += N) acc = hn::Max(acc, hn::LoadU(d, x + i));
    // Highway 1.0.3 has no 8-bit MaxOfLanes: reduce the lanes in scalar code.
    HWY_ALIGN T lanes[hn::MaxLanes(d)];
    hn::Store(acc, d, lanes);
    m = lanes[0];
    for (int64_t j = 1; j < N; ++j) m = lanes[j] > m ? lanes[j] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

template <typename T>
void RowOutput(const T* HWY_RESTRICT x, int64_t n, const QLinearRowOutput& p, T* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<T, decltype(di)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto shift = hn::Set(di, p.shift);
  const auto yq = hn::Set(df, p.y_quanta);
  const auto sum = hn::Set(df, p.sum);
  const auto delta = hn::Set(df, p.delta);
  const auto limit = hn::Set(df, 2147483648.0f);
  const auto zp = hn::Set(di, p.zero_point);
  const auto lo = hn::Set(di, p.lo);
  const auto hi = hn::Set(di, p.hi);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto k = hn::Add(hn::PromoteTo(di, hn::LoadU(d8, x + i)), shift);
    const auto vt = hn::GatherIndex(df, p.table, k);
    const auto r = hn::Round(hn::Add(hn::Div(hn::Mul(vt, yq), sum), delta));
    const auto fits = hn::Lt(r, limit);
    // Lanes that do not fit are replaced before the conversion (its result
    // there is implementation-defined) and saturate to hi below.
    const auto v = hn::Add(hn::ConvertTo(di, hn::IfThenElseZero(fits, r)), zp);
    const auto c = hn::IfThenElse(hn::RebindMask(di, fits), hn::Min(hn::Max(v, lo), hi), hi);
    hn::StoreU(hn::DemoteTo(d8, c), d8, y + i);
  }
  for (; i < n; ++i) {
    y[i] = static_cast<T>(qlinear_output_value(p.table[x[i] + p.shift], p, p.delta));
  }
}

uint8_t RowMaxU8(const uint8_t* x, int64_t n) { return RowMax(x, n); }
int8_t RowMaxI8(const int8_t* x, int64_t n) { return RowMax(x, n); }
void RowOutputU8(const uint8_t* x, int64_t n, const QLinearRowOutput& p, uint8_t* y) {
  RowOutput(x, n, p, y);
}
void RowOutputI8(const int8_t* x, int64_t n, const QLinearRowOutput& p, int8_t* y) {
  RowOutput(x, n, p, y);
}

}  // namespace
}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {
HWY_EXPORT(RowMaxU8);
HWY_EXPORT(RowMaxI8);
HWY_EXPORT(RowOutputU8);
HWY_EXPORT(RowOutputI8);

uint8_t qlinear_row_max_u8(const uint8_t* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxU8)(x, n); }
int8_t qlinear_row_max_i8(const int8_t* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxI8)(x, n); }
void qlinear_row_output_u8(const uint8_t* x, int64_t n, const QLinearRowOutput& p, uint8_t* y) {
  HWY_DYNAMIC_DISPATCH(RowOutputU8)(x, n, p, y);
}
void qlinear_row_output_i8(const int8_t* x, int64_t n, const QLinearRowOutput& p, int8_t* y) {
  HWY_DYNAMIC_DISPATCH(RowOutputI8)(x, n, p, y);
}
}  // namespace smax::kernels
#endif

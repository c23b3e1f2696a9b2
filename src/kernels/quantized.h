// src/kernels/quantized.h: row kernels of qlinear_softmax
// (include/smax/quantized.h; docs/quantized.md, "qlinear_softmax").
//
// Contracts (x, y: one contiguous row of n u8 / i8 elements; no aliasing):
//  * qlinear_row_max_*: the largest element (n >= 1).
//  * qlinear_row_output_*: for every i, with k_i = x_i + shift (in [0, 255]
//    for every element: shift = 255 - max), t_i = fl(fl(table[k_i] * y_quanta)
//    / sum) + delta (float32, in this order; delta = 0 adds nothing),
//    r_i = nearbyint(t_i) (ties to even); y_i = hi when !(r_i < 2^31)
//    (inf, huge), else clamp(r_i + zero_point, lo, hi). This is ORT's
//    `nearbyintf((vt * Y_scale) / vsum) + y_zp` with its saturation.
// Every SIMD target gives the same bits (IEEE float32 multiply, divide and
// add, round-to-nearest-even), the same as the scalar formula.
#pragma once

#include <cstdint>

namespace smax::kernels {

uint8_t qlinear_row_max_u8(const uint8_t* x, int64_t n);
int8_t qlinear_row_max_i8(const int8_t* x, int64_t n);

struct QLinearRowOutput {
  const float* table;  ///< 256 entries
  int shift;           ///< k_i = x_i + shift
  float y_quanta;      ///< ORT's Y_scale = floor(1 / y_scale)
  float sum;           ///< the row's sequential float sum of table[k_i]
  float delta;         ///< bias correction offset (0: off)
  int zero_point, lo, hi;
};
void qlinear_row_output_u8(const uint8_t* x, int64_t n, const QLinearRowOutput& p, uint8_t* y);
void qlinear_row_output_i8(const int8_t* x, int64_t n, const QLinearRowOutput& p, int8_t* y);

/// The scalar formula of qlinear_row_output for one element (the kernels'
/// tails and the op's bias correction use it).
inline int32_t qlinear_output_value(float vt, const QLinearRowOutput& p, float delta) {
  const float t = (vt * p.y_quanta) / p.sum + delta;
  const float r = __builtin_nearbyintf(t);
  if (!(r < 2147483648.0f)) return p.hi;
  const int64_t v = static_cast<int64_t>(r) + p.zero_point;
  return static_cast<int32_t>(v < p.lo ? p.lo : v > p.hi ? p.hi : v);
}

}  // namespace smax::kernels

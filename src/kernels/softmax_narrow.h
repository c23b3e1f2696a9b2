// src/kernels/softmax_narrow.h: softmax, log_softmax, logsumexp and their
// backward on bf16 / f16 storage (and f32 storage with a narrow partner),
// fused: narrow rows are loaded and widened in registers, the math is the
// f32 kernels' (kernels.h), and each output is rounded once to its type in
// registers and stored narrow. No f32 copy of a row is made in memory.
//
// The contract the tests pin (tests/test_softmax_narrow.cc), bit for bit,
// on every SIMD target:
//
//   narrow kernel(x) == round_to(dst_type, f32 kernel(widen(x)))
//
// with one exception: log_softmax rows into a bf16 / f16 dst whose max
// dominates (near_zero_log_sum below), which are more accurate than that.
//
// where "f32 kernel" is softmax_rows / log_softmax_rows / logsumexp_rows with
// the SAME algorithm (kernels.h), or softmax_backward_rows /
// log_softmax_backward_rows, on the exactly widened operands; rounding is to
// nearest even (core/convert.h). The three-pass reload algorithm stores its
// exps to dst, which a narrow dst cannot hold: for a bf16 / f16 dst it
// recomputes each exp with the exp its sum pass used (the same functor, full
// vectors and tail alike) and applies reload's scale and flush in registers,
// so the values rounded are exactly reload's f32 results. For an f32 dst
// (narrow src) reload stores the exps to dst as the f32 kernel does.
//
// Operand types: src / y / dy / dst / dx in {kF32, kBF16, kF16} (not all
// f32: those go to kernels.h); the additive mask is f32 (ops convert other
// masks). f64 outputs and f64 sources are not handled here. Rows are
// contiguous, 1 <= cols < kSegment (ops send longer rows through the
// segment kernels of kernels/segments_narrow.h, which read and round the
// same way). Strides count elements of each
// operand's own type. dst may equal src only when both have the same type.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::kernels {

struct NarrowRows {
  const void* src = nullptr;
  DType src_type = DType::kF32;
  int64_t src_stride = 0;
  void* dst = nullptr;  ///< logsumexp: dst + r * dst_stride is row r's scalar
  DType dst_type = DType::kF32;
  int64_t dst_stride = 0;
  const float* mask = nullptr;
  int64_t mask_stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  float scale = 1.0f;
  EmptyRow empty_row = EmptyRow::kZero;
  /// Optional: `cols` floats the three-pass reload softmax keeps its exps in
  /// when dst is narrow (one exp per element, as reload into an f32 dst);
  /// nullptr: the last pass recomputes them. The same bits either way.
  float* scratch = nullptr;
};

/// Algorithm must not be kAuto.
void softmax_rows_narrow(const NarrowRows& rows, Algorithm algorithm) noexcept;
void log_softmax_rows_narrow(const NarrowRows& rows, Algorithm algorithm) noexcept;
void logsumexp_rows_narrow(const NarrowRows& rows, Algorithm algorithm) noexcept;

/// log_softmax values near 0 into a narrow dst. The narrow kernels compute
/// log_sum (each output is (t_i - m) - log_sum) as log1p(s1), s1 = the sum
/// of e^(t_i - m) over the terms other than the max, when the usual
/// log(sum) is below kNearZeroLogSumBound: then every bf16 / f16 output is
/// within 1 ulp of its type of the exact value (log(sum)'s absolute error,
/// ~1e-6, is more than that near 0). The f32 kernels (f32 dst) do not.
/// near_zero_log_sum is that log1p(s1) for an f32 row t[0, n) whose finite
/// max m is attained once (the ops' converting path for long / strided
/// rows uses it on the f32 logits row).
inline constexpr float kNearZeroLogSumBound = 0x1p-5f;
float near_zero_log_sum(const float* t, size_t n, float m) noexcept;

struct NarrowBackwardRows {
  const void* y = nullptr;
  DType y_type = DType::kF32;
  int64_t y_stride = 0;
  const void* dy = nullptr;
  DType dy_type = DType::kF32;
  int64_t dy_stride = 0;
  void* dx = nullptr;  ///< may equal dy when dx_type == dy_type
  DType dx_type = DType::kF32;
  int64_t dx_stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  float scale = 1.0f;
};
void softmax_backward_rows_narrow(const NarrowBackwardRows& rows) noexcept;
void log_softmax_backward_rows_narrow(const NarrowBackwardRows& rows) noexcept;

}  // namespace smax::kernels

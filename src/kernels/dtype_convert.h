// src/kernels/dtype_convert.h: contiguous row conversions between f32 and
// the other floating storage types (f64, f16, bf16), SIMD on every target.
//
// Contract (the same results as the scalar definitions in
// src/core/convert.h, bit for bit, on every target; tests/test_dtype_kernels.cc):
//  * widen_row: dst[i] = src[i] as f32 (f16 / bf16 exactly; f64 rounded to
//    nearest even);
//  * narrow_row: dst[i] = src[i] rounded to `dtype` (nearest even; overflow
//    to inf, NaN kept NaN); f64 widens exactly.
// `dtype` kF32 copies (src == dst is allowed then). Pointers need their
// element alignment only; rows of any length n >= 0; otherwise src and dst
// must not overlap. The vector conversions are narrow-inl.h's, shared with
// the fused narrow softmax kernels.
#pragma once

#include <cstdint>

#include "smax/tensor.h"

namespace smax::kernels {

void widen_row(const void* src, DType dtype, int64_t n, float* dst) noexcept;
void narrow_row(const float* src, int64_t n, void* dst, DType dtype) noexcept;

}  // namespace smax::kernels

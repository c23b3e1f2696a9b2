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

/// Whether the AVX-512 targets round f32 -> bf16 with the CPU's
/// vcvtneps2bf16 (AVX512_BF16: Zen 4, Cooper Lake, Sapphire Rapids and
/// later) instead of integer ops. Both give the same bits (narrow-inl.h);
/// on by default where the CPU has the instruction. Tests turn it off to
/// check the integer path on the same target. Returns the previous setting;
/// `on` is ignored (false) on CPUs without the instruction. Not thread-safe
/// against running kernels: set it between calls.
bool set_bf16_instruction(bool on) noexcept;
/// Whether the CPU has AVX512_BF16's vcvtneps2bf16 (x86 only; false elsewhere).
bool cpu_has_bf16_instruction() noexcept;

}  // namespace smax::kernels

// src/core/dense_rows.h: the cheap recognition behind the softmax family's
// short path: operands that are dense row-major f32 tensors, checked without
// building a Geometry (whose ~1 KB of strides, zeroed and copied, cost more
// than the kernel of a 1024-element row).
//
// Contract: dense_f32_numel(view) returns the element count only for a view
// that check_float_view(view) and check_no_self_overlap(view) accept and
// whose bytes are exactly [data, data + 4 * count): dtype f32, rank in
// [0, kMaxRank], every size > 0 with a product (times 4) that fits int64,
// data non-null and 4-byte aligned, the end not wrapping the address space,
// and row-major strides on every dim of size > 1 (the strides of size-1 dims
// are ignored, as validation and geometry ignore them). For anything else,
// valid or not, it returns -1: the caller then takes the general path, whose
// validation raises the error. So a short path built on it never changes
// which calls fail, nor their messages.
#pragma once

#include <cstdint>

#include "smax/tensor.h"

namespace smax::detail {

/// Element count of a valid, non-empty, dense row-major f32 view; else -1.
int64_t dense_f32_numel(const TensorView& view) noexcept;

/// Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) intersect
/// (the test of check_disjoint_or_same).
bool bytes_overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) noexcept;

}  // namespace smax::detail

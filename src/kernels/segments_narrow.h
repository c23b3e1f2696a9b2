// src/kernels/segments_narrow.h: the segment kernels of one long row
// (kernels.h, "Segments of one long row") for rows and outputs of any
// storage type, f32, bf16 or f16: the long-row counterpart of
// softmax_narrow.h. The row is read in its own type and widened in
// registers; stored exps stay f32 (a scratch row the caller owns); each
// output is rounded once to its type in registers. No f32 copy of the row
// is made.
//
// Contract (tests/test_softmax_narrow_ops.cc, on every SIMD target): every
// kernel here computes the f32 segment kernel of the same name in
// kernels.h on the exactly widened row, t = fl(fl(x * scale) + mask), and
// rounds its stored outputs to the sink's type, so a long-row driver built
// from these gives round(f32 driver(widen(x))) bit for bit. Partials
// (ranges, sums, online and two-pass states) are the f32 kernels' own.
//
// Storage types: kF32, kBF16 or kF16 for the row and for the sink (any
// mix). The additive mask is f32, contiguous, nullable.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"
#include "smax/tensor.h"

namespace smax::kernels {

/// One segment of a row: `n` elements of type `type` at `x`, the logits
/// t = fl(fl(x * scale) + mask) (mask: nullable, the segment's own).
struct SegmentIn {
  const void* x = nullptr;
  DType type = DType::kF32;
  const float* mask = nullptr;
  float scale = 1.0f;
  int64_t n = 0;
};
/// Where a segment's outputs go: `p`, of type `type` (its first element).
struct SegmentOut {
  void* p = nullptr;
  DType type = DType::kF32;
};

SegmentRange minmax_segment_any(const SegmentIn& in) noexcept;
/// expsum_segment / expsum_ref_segment; `store` (nullable) is f32.
double expsum_segment_any(const SegmentIn& in, float shift, float* store,
                          const SegmentPrefetch& prefetch = {}) noexcept;
double expsum_ref_segment_any(const SegmentIn& in, float nref, float m, float t_min,
                              float* store, const SegmentPrefetch& prefetch = {}) noexcept;
void exp_scale_segment_any(const SegmentIn& in, float shift, float factor,
                           const SegmentOut& out) noexcept;
void log_store_segment_any(const SegmentIn& in, float shift, float log_sum,
                           const SegmentOut& out) noexcept;
OnlineState online_segment_any(const SegmentIn& in) noexcept;
TwoPassState twopass_segment_any(const SegmentIn& in) noexcept;
void twopass_store_segment_any(const SegmentIn& in, double nu, double inv_mu,
                               const SegmentOut& out) noexcept;
/// out_i = round(exps_i * factor) for f32 exps[0, n) (the stored terms of
/// expsum_*): scale_segment's values (flush = true) or
/// scale_segment_normal's (flush = false), rounded to out's type.
void scale_segment_any(const float* exps, int64_t n, float factor, bool flush,
                       const SegmentOut& out) noexcept;

}  // namespace smax::kernels

// src/core/long_row.h: one contiguous row of any length, split into the fixed
// segment grid of kernels::kSegment so that it can use several threads and
// still give the same bits for any thread count; and the whole-row kernel
// dispatch (rows_kernel, one_row, softmax_row_reload) the drivers share.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::detail {

enum class ForwardOp { kSoftmax, kLogSoftmax, kLogSumExp };

/// Runs the whole-row kernel of `op` on `rows` (any number of rows, no
/// segments): softmax_rows / log_softmax_rows / logsumexp_rows.
void rows_kernel(ForwardOp op, const kernels::Rows& rows, Algorithm algorithm);

/// kernels::Rows for the one contiguous row x[0..n) -> dst (rows = 1; the
/// strides only step between rows, so they stay 0). mask: nullable.
kernels::Rows one_row(const float* x, const float* mask, int64_t n, float scale,
                      EmptyRow empty_row, float* dst);

/// y = softmax(fl(x * scale)) of one contiguous row with the three-pass
/// reload kernel, whatever n (no segments, the calling thread): for rows an
/// op has just gathered or computed, hence in cache. y may equal x.
void softmax_row_reload(const float* x, int64_t n, float scale, EmptyRow empty_row, float* y);

/// Computes `op` for one contiguous row x[0..n) (mask: nullable additive row)
/// into dst (softmax / log_softmax: n values; logsumexp: one value).
/// Rows shorter than kSegment use the whole-row kernel; longer rows go
/// through the segment kernels on up to `threads` threads. dst may equal x.
/// `next_x` (nullable): the row the caller computes next, of the same type
/// and length, which the sum pass of a long row prefetches (a hint).
/// `stream`: a long row's log_softmax store pass uses streaming stores
/// (core/stream_stores.h; the same bits; ignored by other ops and by rows
/// shorter than a segment, which the caller batches instead).
void forward_row(ForwardOp op, Algorithm algorithm, const float* x, const float* mask, int64_t n,
                 float scale, EmptyRow empty_row, float* dst, int threads,
                 const void* next_x = nullptr, bool stream = false);

/// One contiguous row of any storage type (f32, bf16 or f16) for
/// forward_row_any: the logits t = fl(fl(x * scale) + mask) (mask: an f32
/// row, nullable), and where the results go.
struct AnyRowIn {
  const void* x = nullptr;
  DType type = DType::kF32;
  const float* mask = nullptr;
  float scale = 1.0f;
};
struct AnyRowOut {
  void* p = nullptr;  ///< logsumexp: one value
  DType type = DType::kF32;
};

/// forward_row for a row and an output of any storage types (f32 / bf16 /
/// f16, any mix): the fused narrow kernels, no f32 copy of the row
/// (kernels/softmax_narrow.h for n < kSegment, kernels/segments_narrow.h
/// on the segment grid otherwise). Results are round(forward_row on the
/// widened row) bit for bit, with softmax_narrow.h's one exception
/// (log_softmax near 0 into bf16 / f16, more accurate), whatever `threads`.
/// `scratch`: n floats when out.type is not f32 (reload softmax keeps its
/// exps there; log_softmax rows near 0 their logits), else unused. out.p
/// may equal x when the types are equal (in place: every pass that writes
/// out reads x[i] before writing out[i], and every reduction ends before
/// the first write), else must not overlap. Two-pass log_softmax into
/// bf16 / f16 reads the row once more (its (min, max)), to decide whether
/// the row's max dominates (softmax_narrow.h's near-zero refinement).
/// `next_x`: as forward_row's.
void forward_row_any(ForwardOp op, Algorithm algorithm, const AnyRowIn& in, int64_t n,
                     EmptyRow empty_row, const AnyRowOut& out, float* scratch, int threads,
                     const void* next_x = nullptr);

enum class BackwardOp { kSoftmax, kLogSoftmax };

/// Runs the whole-row backward kernel of `op` on `rows` (no segments).
void rows_kernel(BackwardOp op, const kernels::BackwardRows& rows);

/// Backward of one contiguous row (dx may equal dy). `stream`: dx written
/// with streaming stores where it is vector-aligned (core/stream_stores.h);
/// the same bits.
void backward_row(BackwardOp op, const float* y, const float* dy, int64_t n, float scale,
                  float* dx, int threads, bool stream = false);

}  // namespace smax::detail

// src/core/long_row.h: one contiguous row of any length, split into the fixed
// segment grid of kernels::kSegment so that it can use several threads and
// still give the same bits for any thread count; and the whole-row kernel
// dispatch (rows_kernel, one_row, softmax_row_reload) the drivers share.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"
#include "smax/options.h"

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
void forward_row(ForwardOp op, Algorithm algorithm, const float* x, const float* mask, int64_t n,
                 float scale, EmptyRow empty_row, float* dst, int threads);

enum class BackwardOp { kSoftmax, kLogSoftmax };

/// Runs the whole-row backward kernel of `op` on `rows` (no segments).
void rows_kernel(BackwardOp op, const kernels::BackwardRows& rows);

/// Backward of one contiguous row (dx may equal dy).
void backward_row(BackwardOp op, const float* y, const float* dy, int64_t n, float scale,
                  float* dx, int threads);

}  // namespace smax::detail

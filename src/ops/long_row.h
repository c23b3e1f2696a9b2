// src/ops/long_row.h: one contiguous row of any length, split into the fixed
// segment grid of kernels::kSegment so that it can use several threads and
// still give the same bits for any thread count.
#pragma once

#include <cstdint>

#include "smax/options.h"

namespace smax::detail {

enum class ForwardOp { kSoftmax, kLogSoftmax, kLogSumExp };

/// Computes `op` for one contiguous row x[0..n) (mask: nullable additive row)
/// into dst (softmax / log_softmax: n values; logsumexp: one value).
/// Rows shorter than kSegment use the whole-row kernel; longer rows go
/// through the segment kernels on up to `threads` threads. dst may equal x.
void forward_row(ForwardOp op, Algorithm algorithm, const float* x, const float* mask, int64_t n,
                 float scale, EmptyRow empty_row, float* dst, int threads);

enum class BackwardOp { kSoftmax, kLogSoftmax };

/// Backward of one contiguous row (dx may equal dy).
void backward_row(BackwardOp op, const float* y, const float* dy, int64_t n, float scale,
                  float* dx, int threads);

}  // namespace smax::detail

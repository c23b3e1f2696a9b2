// src/ops/quantized/quantized_rows.h: the row driver of the integer
// softmaxes (include/smax/quantized.h), which Rowwise (f32 logits) cannot
// carry.
//
// Contract of run_quantized_rows<In, Out>(op, src, dst, in_dtype, out_dtype,
// options, prepare, row_fn):
//  * validates before any write: src is an `in_dtype` view, dst an
//    `out_dtype` view of src's shape, the axis, the thread count, dst never
//    writes an element twice, dst is exactly src (in place, only when the
//    dtypes match) or shares no byte with it;
//  * calls prepare(n) once (n: the axis length) when there is a row, then
//    reduces the shape to (rows, axis) with core/geometry.h and runs
//    row_fn(const In* x, int64_t n, Out* y) for every row on the fixed task
//    grid (core/execution.h), so any thread count gives the same bits;
//  * rows whose axis is contiguous in src and dst, and that do not alias,
//    are passed in place; other rows are gathered into a contiguous scratch
//    row (allocated before anything is written) and scattered back, so
//    row_fn never sees aliased or strided pointers.
// Zero-size shapes write nothing; rank 0 is shape [1].
// run_quantized_row_blocks<In, Out, kBlock>(..., block_fn) is the same with
// block_fn(const In* const* x, Out* const* y, int count, int64_t n) called
// on up to kBlock consecutive rows of one task at once (count >= 1; rows
// passed in place are grouped, gathered rows come one at a time), for row
// work made of independent per-row chains that gains from running several
// side by side. A row's result must not depend on the rows beside it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "core/execution.h"
#include "core/geometry.h"
#include "core/validate.h"
#include "smax/quantized.h"
#include "smax/tensor.h"

namespace smax::detail {

/// Checks QuantizedOptions::threads; returns the count to run with.
int quantized_threads(const QuantizedOptions& options, const char* op);

template <typename In, typename Out, int kBlock, typename Prepare, typename BlockFn>
void run_quantized_row_blocks(const char* op, const TensorView& src_in, const TensorView& dst_in,
                              DType in_dtype, DType out_dtype, const QuantizedOptions& options,
                              Prepare&& prepare, BlockFn&& block_fn) {
  static_assert(kBlock >= 1, "kBlock >= 1");
  check_view(src_in, op, "src", in_dtype);
  check_view(dst_in, op, "dst", out_dtype);
  const TensorView src = as_rank1_if_scalar(src_in);
  const TensorView dst = as_rank1_if_scalar(dst_in);
  check_same_shape(src, "src", dst, "dst", op);
  const int axis = resolve_axis(options.axis, src.rank, op);
  const int threads = quantized_threads(options, op);
  check_no_self_overlap(dst, "dst", op);
  check_disjoint_or_same(dst, "dst", src, "src", op, in_dtype == out_dtype);
  if (src.numel() == 0) return;
  prepare(src.shape[axis]);  // single-threaded, after validation, before any row

  char* bases[2] = {static_cast<char*>(src.data), static_cast<char*>(dst.data)};
  const int sizes[2] = {static_cast<int>(sizeof(In)), static_cast<int>(sizeof(Out))};
  int64_t strides[2][kMaxRank] = {};
  for (int d = 0; d < src.rank; ++d) {
    strides[0][d] = src.strides[d];
    strides[1][d] = dst.strides[d];
  }
  const Geometry g = make_geometry(src, axis, 2, bases, sizes, strides);
  const int64_t n = g.n;
  const bool aliased = src.data == dst.data;
  const bool in_place_rows = !aliased && (n == 1 || (g.axis_stride[0] == 1 && g.axis_stride[1] == 1));
  if (in_place_rows) {
    for_each_row_task(g, threads, [&](int64_t begin, int64_t end) {
      int64_t off[kMaxOperands];
      const In* x[kBlock];
      Out* y[kBlock];
      for (int64_t row = begin; row < end;) {
        int count = 0;
        for (; count < kBlock && row < end; ++count, ++row) {
          g.row_offsets(row, off);
          x[count] = reinterpret_cast<const In*>(g.at(0, off[0]));
          y[count] = reinterpret_cast<Out*>(g.at(1, off[1]));
        }
        block_fn(static_cast<const In* const*>(x), static_cast<Out* const*>(y), count, n);
      }
    });
    return;
  }
  // Gathered rows: In then Out, each rounded up to whole floats of scratch.
  const int64_t in_floats = (n * static_cast<int64_t>(sizeof(In)) + 3) / 4;
  const int64_t out_floats = (n * static_cast<int64_t>(sizeof(Out)) + 3) / 4;
  const int64_t s0 = g.axis_stride[0], s1 = g.axis_stride[1];
  for_each_gathered_row(g, threads, in_floats + out_floats, [&](int64_t row, int, float* scratch) {
    int64_t off[kMaxOperands];
    g.row_offsets(row, off);
    In* x = reinterpret_cast<In*>(scratch);
    Out* y = reinterpret_cast<Out*>(scratch + in_floats);
    const In* sp = reinterpret_cast<const In*>(g.at(0, off[0]));
    for (int64_t i = 0; i < n; ++i) x[i] = sp[i * s0];
    const In* xs[1] = {x};
    Out* ys[1] = {y};
    block_fn(static_cast<const In* const*>(xs), static_cast<Out* const*>(ys), 1, n);
    Out* dp = reinterpret_cast<Out*>(g.at(1, off[1]));
    for (int64_t i = 0; i < n; ++i) dp[i * s1] = y[i];
  });
}

template <typename In, typename Out, typename Prepare, typename RowFn>
void run_quantized_rows(const char* op, const TensorView& src, const TensorView& dst,
                        DType in_dtype, DType out_dtype, const QuantizedOptions& options,
                        Prepare&& prepare, RowFn&& row_fn) {
  run_quantized_row_blocks<In, Out, 1>(
      op, src, dst, in_dtype, out_dtype, options, prepare,
      [&](const In* const* x, Out* const* y, int /*count*/, int64_t n) { row_fn(x[0], n, y[0]); });
}

}  // namespace smax::detail

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

template <typename In, typename Out, typename Prepare, typename RowFn>
void run_quantized_rows(const char* op, const TensorView& src_in, const TensorView& dst_in,
                        DType in_dtype, DType out_dtype, const QuantizedOptions& options,
                        Prepare&& prepare, RowFn&& row_fn) {
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
      for (int64_t row = begin; row < end; ++row) {
        g.row_offsets(row, off);
        row_fn(reinterpret_cast<const In*>(g.at(0, off[0])), n, reinterpret_cast<Out*>(g.at(1, off[1])));
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
    row_fn(static_cast<const In*>(x), n, y);
    Out* dp = reinterpret_cast<Out*>(g.at(1, off[1]));
    for (int64_t i = 0; i < n; ++i) dp[i * s1] = y[i];
  });
}

}  // namespace smax::detail

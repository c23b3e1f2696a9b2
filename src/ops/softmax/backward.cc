// src/ops/softmax/backward.cc: softmax_backward and log_softmax_backward.
//
// Same structure as forward.cc: validate -> geometry -> rows / columns /
// gather mode -> kernels, on a thread-independent task grid.
// Storage dtypes: y, dy and dx may each be f32, bf16 or f16 (dx also f64);
// the math is f32 on the widened inputs, dx rounded once. All-f32 calls are
// unchanged; otherwise short contiguous rows (dx not f64) run the fused
// narrow kernels (kernels/softmax_narrow.h) and everything else the gather
// mode with conversion (y and dy widened into a per-row scratch, the f32
// row kernel or segments, dx rounded from the scratch). An f64 y or dy
// takes the float64 path instead (ops/softmax/f64.h).
// Dense f32 calls that fit one task skip the geometry (try_short_rows, as
// forward.cc's).
#include <algorithm>

#include "kernels/kernels.h"
#include "kernels/dtype_convert.h"
#include "kernels/softmax_narrow.h"
#include "ops/softmax/f64.h"
#include "core/convert.h"
#include "core/dense_rows.h"
#include "core/execution.h"
#include "core/geometry.h"
#include "core/internal.h"
#include "core/long_row.h"
#include "core/stream_stores.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/runtime.h"
#include "smax/softmax.h"

namespace smax {
namespace detail {
namespace {

constexpr int kY = 0, kDy = 1, kDx = 2;

struct BackwardCall {
  BackwardOp op;
  float scale;
  double scale64;  // double(scale) / double(temperature): the f64 path's multiplier
  int threads;
  DType y_type, dy_type, dx_type;
  Geometry g;
  bool all_f32() const {
    return y_type == DType::kF32 && dy_type == DType::kF32 && dx_type == DType::kF32;
  }
};

BackwardCall prepare(BackwardOp op, const TensorView& y_in, const TensorView& dy_in,
                     const TensorView& dx_in, const SoftmaxOptions& options) {
  const char* name = op == BackwardOp::kSoftmax ? "softmax_backward" : "log_softmax_backward";
  check_float_view(y_in, name, "y");
  check_float_view(dy_in, name, "dy");
  check_float_view(dx_in, name, "dx");
  BackwardCall call{};
  call.y_type = y_in.dtype;
  call.dy_type = dy_in.dtype;
  call.dx_type = dx_in.dtype;
  call.op = op;
  call.scale = check_options(options, name);
  call.scale64 = static_cast<double>(options.scale) / static_cast<double>(options.temperature);
  const TensorView y = as_rank1_if_scalar(y_in);
  const TensorView dy = as_rank1_if_scalar(dy_in);
  const TensorView dx = as_rank1_if_scalar(dx_in);
  const int axis = resolve_axis(options.axis, y_in.rank, name);
  check_same_shape(y, "y", dy, "dy", name);
  check_same_shape(y, "y", dx, "dx", name);
  check_no_self_overlap(dx_in, "dx", name);
  check_disjoint_or_same(dx_in, "dx", dy_in, "dy", name, dx_in.dtype == dy_in.dtype);
  check_disjoint_or_same(dx_in, "dx", y_in, "y", name, false);
  int64_t strides[kMaxOperands][kMaxRank] = {};
  for (int d = 0; d < y.rank; ++d) {
    strides[kY][d] = y.strides[d];
    strides[kDy][d] = dy.strides[d];
    strides[kDx][d] = dx.strides[d];
  }
  char* bases[kMaxOperands] = {static_cast<char*>(y.data), static_cast<char*>(dy.data),
                               static_cast<char*>(dx.data), nullptr};
  const int sizes[kMaxOperands] = {dtype_size(y_in.dtype), dtype_size(dy_in.dtype),
                                   dtype_size(dx_in.dtype), 4};
  call.g = make_geometry(y, axis, 3, bases, sizes, strides);
  call.threads = options.threads > 0 ? options.threads : max_threads();
  return call;
}

// The streaming-store site these calls are measured and decided as.
constexpr StoreSite kSite = StoreSite::kBackward;

// Streaming stores for dx (core/stream_stores.h), by the footprint of the
// call's rows (y + dy + dx), batched or long (segments: every segment of an
// aligned row starts aligned, kSegment being a multiple of 16 floats).
StoreChoice rows_mode_stores(const BackwardCall& c) {
  static_assert(kernels::kSegment % (kStreamAlignBytes / sizeof(float)) == 0);
  // The sweep streams only rows whose dx is vector-aligned (no peel:
  // kernels/softmax_backward.cc, GradStreams): ask only when every row's is.
  if (reinterpret_cast<uintptr_t>(c.g.at(kDx, 0)) % kStreamAlignBytes != 0) {
    return StoreChoice::kRegular;
  }
  for (int b = 0; b < c.g.batch_dims; ++b) {
    if (c.g.batch_stride[kDx][b] % (kStreamAlignBytes / int64_t{sizeof(float)}) != 0) {
      return StoreChoice::kRegular;
    }
  }
  const int64_t numel = c.g.rows * c.g.n;  // fits int64 with 4 bytes each (validated)
  return choose_stores(kSite, numel < INT64_MAX / 12 ? numel * 12 : INT64_MAX);
}

void run_rows_mode(const BackwardCall& c) {
  const Geometry& g = c.g;
  const StoreChoice stores = rows_mode_stores(c);
  for_each_contiguous_row(
      g, c.threads,
      [&](const int64_t* off, int threads, const int64_t* /*next*/) {
        run_with_stores(kSite, stores, 1, g.n, [&](int64_t, int64_t, bool stream) {
          backward_row(c.op, f32_at(g, kY, off[kY]), f32_at(g, kDy, off[kDy]), g.n, c.scale,
                       f32_at(g, kDx, off[kDx]), threads, stream);
        });
      },
      [&](int64_t count, const int64_t* off) {
        kernels::BackwardRows rows;
        rows.y = f32_at(g, kY, off[kY]);
        rows.y_stride = run_stride(g, kY);
        rows.dy = f32_at(g, kDy, off[kDy]);
        rows.dy_stride = run_stride(g, kDy);
        rows.dx = f32_at(g, kDx, off[kDx]);
        rows.dx_stride = run_stride(g, kDx);
        rows.cols = g.n;
        rows.scale = c.scale;
        run_with_stores(kSite, stores, count, g.n, [&](int64_t first, int64_t part, bool stream) {
          kernels::BackwardRows r = rows;
          r.y += first * rows.y_stride;
          r.dy += first * rows.dy_stride;
          r.dx += first * rows.dx_stride;
          r.rows = part;
          r.stream_stores = stream;
          rows_kernel(c.op, r);
        });
      });
}

int column_dim(const BackwardCall& c) {
  for (int b = c.g.batch_dims - 1; b >= 0; --b) {
    if (c.g.batch_stride[kY][b] == 1 && c.g.batch_stride[kDy][b] == 1 &&
        c.g.batch_stride[kDx][b] == 1) {
      return b;
    }
  }
  return -1;
}

void run_columns_mode(const BackwardCall& c, int cdim) {
  for_each_column_block(c.g, cdim, c.threads, [&](const int64_t* off, int64_t j0, int64_t count) {
    kernels::BackwardColumns cols;
    cols.y = f32_at(c.g, kY, off[kY] + j0);
    cols.y_axis_stride = c.g.axis_stride[kY];
    cols.dy = f32_at(c.g, kDy, off[kDy] + j0);
    cols.dy_axis_stride = c.g.axis_stride[kDy];
    cols.dx = f32_at(c.g, kDx, off[kDx] + j0);
    cols.dx_axis_stride = c.g.axis_stride[kDx];
    cols.n = c.g.n;
    cols.inner = count;
    cols.scale = c.scale;
    if (c.op == BackwardOp::kSoftmax) {
      kernels::softmax_backward_columns(cols);
    } else {
      kernels::log_softmax_backward_columns(cols);
    }
  });
}

void run_gather_mode(const BackwardCall& c) {
  const Geometry& g = c.g;
  for_each_gathered_row(g, c.threads, 2 * g.n, [&](int64_t row, int threads, float* y) {
    float* dy = y + g.n;
    int64_t off[kMaxOperands];
    g.row_offsets(row, off);
    const float* ys = f32_at(g, kY, off[kY]);
    const float* dys = f32_at(g, kDy, off[kDy]);
    for (int64_t i = 0; i < g.n; ++i) {
      y[i] = ys[i * g.axis_stride[kY]];
      dy[i] = dys[i * g.axis_stride[kDy]];
    }
    backward_row(c.op, y, dy, g.n, c.scale, dy, threads);
    float* dx = f32_at(g, kDx, off[kDx]);
    for (int64_t i = 0; i < g.n; ++i) dx[i * g.axis_stride[kDx]] = dy[i];
  });
}

// ---- storage dtypes other than f32 ------------------------------------------

void run_narrow_rows_mode(const BackwardCall& c) {
  const Geometry& g = c.g;
  for_each_row_task(g, c.threads, [&](int64_t begin, int64_t end) {
    for_each_run(g, begin, end, [&](int64_t, int64_t count, const int64_t* off) {
      kernels::NarrowBackwardRows rows;
      rows.y = g.at(kY, off[kY]);
      rows.y_type = c.y_type;
      rows.y_stride = run_stride(g, kY);
      rows.dy = g.at(kDy, off[kDy]);
      rows.dy_type = c.dy_type;
      rows.dy_stride = run_stride(g, kDy);
      rows.dx = g.at(kDx, off[kDx]);
      rows.dx_type = c.dx_type;
      rows.dx_stride = run_stride(g, kDx);
      rows.rows = count;
      rows.cols = g.n;
      rows.scale = c.scale;
      if (c.op == BackwardOp::kSoftmax) {
        kernels::softmax_backward_rows_narrow(rows);
      } else {
        kernels::log_softmax_backward_rows_narrow(rows);
      }
    });
  });
}

// Operand k's row (any storage dtype) widened into out.
void gather_any(const BackwardCall& c, int k, DType type, const int64_t* off, float* out) {
  const void* p = c.g.at(k, off[k]);
  if (c.g.axis_stride[k] == 1 || c.g.n == 1) {
    kernels::widen_row(p, type, c.g.n, out);
  } else {
    gather_row_f32(p, type, c.g.axis_stride[k], c.g.n, out);
  }
}

void run_converting_gather_mode(const BackwardCall& c) {
  const Geometry& g = c.g;
  for_each_gathered_row(g, c.threads, 2 * g.n, [&](int64_t row, int threads, float* y) {
    float* dy = y + g.n;
    int64_t off[kMaxOperands];
    g.row_offsets(row, off);
    gather_any(c, kY, c.y_type, off, y);
    gather_any(c, kDy, c.dy_type, off, dy);
    backward_row(c.op, y, dy, g.n, c.scale, dy, threads);
    void* dx = g.at(kDx, off[kDx]);
    if ((g.axis_stride[kDx] == 1 || g.n == 1) && c.dx_type != DType::kF64) {
      kernels::narrow_row(dy, g.n, dx, c.dx_type);
    } else {
      scatter_row_f32(dy, g.n, dx, c.dx_type, g.axis_stride[kDx]);
    }
  });
}

// ---- the short path ------------------------------------------------------------

// forward.cc's try_short_rows for the backward ops: y, dy and dx dense
// row-major f32 of one shape, over the last axis, rows that fit one task of
// the grid. Runs the rows kernel on the calling thread (rows mode's single
// task: the same call, the same bits); returns false, having written
// nothing, for every other call (the general path validates and raises).
bool try_short_rows(BackwardOp op, const TensorView& y, const TensorView& dy,
                    const TensorView& dx, const SoftmaxOptions& options) {
  if (y.rank < 1) return false;
  const int64_t numel = dense_f32_numel(y);
  if (numel <= 0 || dense_f32_numel(dy) != numel || dense_f32_numel(dx) != numel) return false;
  if (options.axis != -1 && options.axis != y.rank - 1) return false;
  if (dy.rank != y.rank || dx.rank != y.rank) return false;
  for (int d = 0; d < y.rank; ++d) {
    if (dy.shape[d] != y.shape[d] || dx.shape[d] != y.shape[d]) return false;
  }
  const int64_t n = y.shape[y.rank - 1];
  const int64_t rows = numel / n;
  if (n >= kernels::kSegment || rows > rows_per_task(n)) return false;
  // check_disjoint_or_same: dx may be exactly dy (both dense, one shape),
  // never overlap y.
  const int64_t bytes = 4 * numel;
  if (dx.data != dy.data && bytes_overlap(dx.data, bytes, dy.data, bytes)) return false;
  if (bytes_overlap(dx.data, bytes, y.data, bytes)) return false;
  kernels::BackwardRows r;
  r.scale = check_options(options, op == BackwardOp::kSoftmax ? "softmax_backward"
                                                              : "log_softmax_backward");
  r.y = static_cast<const float*>(y.data);
  r.y_stride = n;
  r.dy = static_cast<const float*>(dy.data);
  r.dy_stride = n;
  r.dx = static_cast<float*>(dx.data);
  r.dx_stride = n;
  r.rows = rows;
  r.cols = n;
  rows_kernel(op, r);
  return true;
}

void run_backward(BackwardOp op, const TensorView& y, const TensorView& dy, const TensorView& dx,
                  const SoftmaxOptions& options) {
  ensure_runtime_initialized();
  if (try_short_rows(op, y, dy, dx, options)) return;
  const BackwardCall c = prepare(op, y, dy, dx, options);
  if (c.g.rows == 0 || c.g.n == 0) return;
  if (c.y_type == DType::kF64 || c.dy_type == DType::kF64) {  // float64 arithmetic (ops/softmax/f64.h)
    return run_backward_f64(
        F64Backward{op, &c.g, c.y_type, c.dy_type, c.dx_type, c.scale64, c.threads});
  }
  if (!c.all_f32()) {
    const bool contiguous =
        axis_contiguous(c.g, kY) && axis_contiguous(c.g, kDy) && axis_contiguous(c.g, kDx);
    if (contiguous && c.g.n < kernels::kSegment && c.dx_type != DType::kF64) {
      return run_narrow_rows_mode(c);
    }
    return run_converting_gather_mode(c);
  }
  if (axis_contiguous(c.g, kY) && axis_contiguous(c.g, kDy) && axis_contiguous(c.g, kDx)) {
    return run_rows_mode(c);
  }
  const int cdim = column_dim(c);
  if (cdim >= 0) return run_columns_mode(c, cdim);
  run_gather_mode(c);
}

}  // namespace
}  // namespace detail

void softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx,
                      const SoftmaxOptions& options) {
  detail::run_backward(detail::BackwardOp::kSoftmax, y, dy, dx, options);
}
void log_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dx,
                          const SoftmaxOptions& options) {
  detail::run_backward(detail::BackwardOp::kLogSoftmax, y, dy, dx, options);
}

}  // namespace smax

// src/ops/softmax/backward.cc: softmax_backward and log_softmax_backward.
//
// Same structure as forward.cc: validate -> geometry -> rows / columns /
// gather mode -> kernels, on a thread-independent task grid.
#include <algorithm>

#include "kernels/kernels.h"
#include "core/execution.h"
#include "core/geometry.h"
#include "core/internal.h"
#include "core/long_row.h"
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
  int threads;
  Geometry g;
};

BackwardCall prepare(BackwardOp op, const TensorView& y_in, const TensorView& dy_in,
                     const TensorView& dx_in, const SoftmaxOptions& options) {
  const char* name = op == BackwardOp::kSoftmax ? "softmax_backward" : "log_softmax_backward";
  check_view(y_in, name, "y", DType::kF32);
  check_view(dy_in, name, "dy", DType::kF32);
  check_view(dx_in, name, "dx", DType::kF32);
  BackwardCall call{};
  call.op = op;
  call.scale = check_options(options, name);
  const TensorView y = as_rank1_if_scalar(y_in);
  const TensorView dy = as_rank1_if_scalar(dy_in);
  const TensorView dx = as_rank1_if_scalar(dx_in);
  const int axis = resolve_axis(options.axis, y_in.rank, name);
  check_same_shape(y, "y", dy, "dy", name);
  check_same_shape(y, "y", dx, "dx", name);
  check_no_self_overlap(dx_in, "dx", name);
  check_disjoint_or_same(dx_in, "dx", dy_in, "dy", name, true);
  check_disjoint_or_same(dx_in, "dx", y_in, "y", name, false);
  int64_t strides[kMaxOperands][kMaxRank] = {};
  for (int d = 0; d < y.rank; ++d) {
    strides[kY][d] = y.strides[d];
    strides[kDy][d] = dy.strides[d];
    strides[kDx][d] = dx.strides[d];
  }
  char* bases[kMaxOperands] = {static_cast<char*>(y.data), static_cast<char*>(dy.data),
                               static_cast<char*>(dx.data), nullptr};
  const int sizes[kMaxOperands] = {4, 4, 4, 4};
  call.g = make_geometry(y, axis, 3, bases, sizes, strides);
  call.threads = options.threads > 0 ? options.threads : max_threads();
  return call;
}

void run_rows_mode(const BackwardCall& c) {
  const Geometry& g = c.g;
  for_each_contiguous_row(
      g, c.threads,
      [&](const int64_t* off, int threads) {
        backward_row(c.op, f32_at(g, kY, off[kY]), f32_at(g, kDy, off[kDy]), g.n, c.scale,
                     f32_at(g, kDx, off[kDx]), threads);
      },
      [&](int64_t count, const int64_t* off) {
        kernels::BackwardRows rows;
        rows.y = f32_at(g, kY, off[kY]);
        rows.y_stride = run_stride(g, kY);
        rows.dy = f32_at(g, kDy, off[kDy]);
        rows.dy_stride = run_stride(g, kDy);
        rows.dx = f32_at(g, kDx, off[kDx]);
        rows.dx_stride = run_stride(g, kDx);
        rows.rows = count;
        rows.cols = g.n;
        rows.scale = c.scale;
        rows_kernel(c.op, rows);
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

void run_backward(BackwardOp op, const TensorView& y, const TensorView& dy, const TensorView& dx,
                  const SoftmaxOptions& options) {
  ensure_runtime_initialized();
  const BackwardCall c = prepare(op, y, dy, dx, options);
  if (c.g.rows == 0 || c.g.n == 0) return;
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

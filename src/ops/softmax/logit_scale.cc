// src/ops/softmax/logit_scale.cc: logit_scale_gradients (smax/logit_scale.h).
//
// S = sum_i x_i * dx_i over every element (terms with dx_i == 0 left out),
// in float64. The elements are walked as rows of the last dim on the fixed
// task grid (core/execution.h); each row is read in chunks widened to
// float64 and summed with four interleaved accumulators, the rows of a task
// in order, the tasks in order: the order depends on the shape only, so the
// bits do not depend on the thread count.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/convert.h"
#include "core/execution.h"
#include "core/geometry.h"
#include "core/internal.h"
#include "core/validate.h"
#include "smax/logit_scale.h"
#include "smax/runtime.h"

namespace smax {
namespace {

constexpr int64_t kChunk = 256;

/// count elements of a strided row, widened exactly to float64.
void widen(const char* base, DType dt, int64_t stride, int64_t count, double* out) {
  const int size = dtype_size(dt);
  if (dt == DType::kF32) {
    const float* p = reinterpret_cast<const float*>(base);
    for (int64_t j = 0; j < count; ++j) out[j] = static_cast<double>(p[j * stride]);
  } else if (dt == DType::kF64) {
    const double* p = reinterpret_cast<const double*>(base);
    for (int64_t j = 0; j < count; ++j) out[j] = p[j * stride];
  } else {
    for (int64_t j = 0; j < count; ++j) out[j] = detail::load_f64(base + j * stride * size, dt);
  }
}

/// sum of x_j * dx_j over one row (dx_j == 0 left out), chunk by chunk.
double row_dot(const char* x, DType xt, int64_t xs, const char* dx, DType dxt, int64_t dxs,
               int64_t n) {
  double xb[kChunk], db[kChunk];
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t count = n - j0 < kChunk ? n - j0 : kChunk;
    widen(x + j0 * xs * dtype_size(xt), xt, xs, count, xb);
    widen(dx + j0 * dxs * dtype_size(dxt), dxt, dxs, count, db);
    for (int64_t j = 0; j < count; ++j) {
      acc[j & 3] += db[j] != 0.0 ? xb[j] * db[j] : 0.0;
    }
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

}  // namespace

LogitScaleGradients logit_scale_gradients(const TensorView& src_in, const TensorView& dsrc_in,
                                          const SoftmaxOptions& options) {
  using namespace detail;
  const char* op = "logit_scale_gradients";
  check_float_view(src_in, op, "src");
  check_float_view(dsrc_in, op, "dsrc");
  check_options(options, op);
  const TensorView src = as_rank1_if_scalar(src_in);
  const TensorView dsrc = as_rank1_if_scalar(dsrc_in);
  check_same_shape(src, "src", dsrc, "dsrc", op);

  int64_t strides[kMaxOperands][kMaxRank] = {};
  for (int d = 0; d < src.rank; ++d) {
    strides[0][d] = src.strides[d];
    strides[1][d] = dsrc.strides[d];
  }
  char* bases[kMaxOperands] = {static_cast<char*>(src.data), static_cast<char*>(dsrc.data)};
  const int sizes[kMaxOperands] = {dtype_size(src.dtype), dtype_size(dsrc.dtype)};
  const Geometry g = make_geometry(src, src.rank - 1, 2, bases, sizes, strides);
  const int threads = options.threads > 0 ? options.threads : max_threads();

  double s = 0.0;
  if (g.rows > 0 && g.n > 0) {
    const int64_t per_task = rows_per_task(g.n);
    const int64_t tasks = (g.rows + per_task - 1) / per_task;
    std::vector<double> partial(static_cast<size_t>(tasks), 0.0);
    for_each_row_task(g, threads, [&](int64_t begin, int64_t end) {
      double sum = 0.0;
      int64_t off[kMaxOperands];
      for (int64_t row = begin; row < end; ++row) {
        g.row_offsets(row, off);
        sum += row_dot(g.at(0, off[0]), src.dtype, g.axis_stride[0], g.at(1, off[1]),
                       dsrc.dtype, g.axis_stride[1], g.n);
      }
      partial[static_cast<size_t>(begin / per_task)] = sum;
    });
    for (double p : partial) s += p;
  }
  LogitScaleGradients out;
  out.dtemperature = -s / static_cast<double>(options.temperature);
  out.dscale = s / static_cast<double>(options.scale);
  return out;
}

}  // namespace smax

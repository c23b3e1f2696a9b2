// src/ops/softmax/f64.cc: see f64.h.
#include "ops/softmax/f64.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/convert.h"
#include "core/execution.h"
#include "kernels/softmax_f64.h"

namespace smax::detail {
namespace {

constexpr double kNegInfD = -std::numeric_limits<double>::infinity();

// Element i (stride in elements) of a floating operand as double.
inline double load_at(const char* base, DType dt, int64_t i, int64_t stride) {
  return load_f64(base + i * stride * dtype_size(dt), dt);
}

// Reads row `off` of operand k as float64 into `buf`, or returns the
// operand's own memory when it is f64 and contiguous.
const double* row_f64(const Geometry& g, int k, DType dt, const int64_t* off, double* buf) {
  const char* base = g.at(k, off[k]);
  const int64_t s = g.axis_stride[k];
  if (dt == DType::kF64 && (s == 1 || g.n == 1)) return reinterpret_cast<const double*>(base);
  gather_row_f64(base, dt, s, g.n, buf);
  return buf;
}

// Writes n values of `v` to row `off` of operand k (dtype dt), each rounded once.
void store_row(const Geometry& g, int k, DType dt, const int64_t* off, const double* v, int64_t n) {
  char* base = g.at(k, off[k]);
  if (dt == DType::kF64 && (g.axis_stride[k] == 1 || n == 1)) {
    if (reinterpret_cast<const double*>(base) != v) std::memcpy(base, v, n * sizeof(double));
    return;
  }
  scatter_row_f64(v, n, base, dt, g.axis_stride[k]);
}

kernels::F64Op kernel_op(ForwardOp op) {
  switch (op) {
    case ForwardOp::kSoftmax: return kernels::F64Op::kSoftmax;
    case ForwardOp::kLogSoftmax: return kernels::F64Op::kLogSoftmax;
    case ForwardOp::kLogSumExp: return kernels::F64Op::kLogSumExp;
  }
  return kernels::F64Op::kSoftmax;
}

}  // namespace

void run_forward_f64(const F64Forward& c) {
  constexpr int kSrc = 0, kDst = 1, kAdd = 2, kKeep = 3;
  const Geometry& g = *c.g;
  const int64_t n = g.n;
  const bool lse = c.op == ForwardOp::kLogSumExp;
  const bool transform = c.scale != 1.0 || c.has_add_mask || c.has_bool_mask;
  // Scratch per row: the logits and the output (doubles, as pairs of floats).
  ScratchPool pool(std::max(c.threads, 1), 4 * std::max<int64_t>(n, 1));
  for_each_row_task(g, c.threads, [&](int64_t begin, int64_t end) {
    ScratchPool::Lease lease(pool);
    double* t_buf = lease.as<double>();
    double* o_buf = t_buf + std::max<int64_t>(n, 1);
    int64_t off[kMaxOperands];
    for (int64_t row = begin; row < end; ++row) {
      g.row_offsets(row, off);
      const double* t = row_f64(g, kSrc, c.src_type, off, t_buf);
      if (transform) {
        const char* add = c.has_add_mask ? g.at(kAdd, off[kAdd]) : nullptr;
        const auto* keep =
            c.has_bool_mask ? reinterpret_cast<const uint8_t*>(g.at(kKeep, off[kKeep])) : nullptr;
        for (int64_t i = 0; i < n; ++i) {
          double v = t[i] * c.scale;
          if (add) v = v + load_at(add, c.mask_type, i, g.axis_stride[kAdd]);
          if (keep && keep[i * g.axis_stride[kKeep]] == 0) v = kNegInfD;
          t_buf[i] = v;
        }
        t = t_buf;
      }
      const int64_t count = lse ? 1 : n;
      const bool direct_out = c.dst_type == DType::kF64 && (lse || g.axis_stride[kDst] == 1 || n == 1);
      double* out = direct_out ? reinterpret_cast<double*>(g.at(kDst, off[kDst])) : o_buf;
      // The next row of a contiguous float64 src (a prefetch hint).
      const double* next = nullptr;
      if (lse && row + 1 < end && c.src_type == DType::kF64 && g.axis_stride[kSrc] == 1) {
        int64_t off_next[kMaxOperands];
        g.row_offsets(row + 1, off_next);
        next = reinterpret_cast<const double*>(g.at(kSrc, off_next[kSrc]));
      }
      kernels::softmax_row_f64(kernel_op(c.op), t, n, c.empty_row, out, next);
      if (!direct_out) store_row(g, kDst, c.dst_type, off, out, count);
    }
  });
}

void run_backward_f64(const F64Backward& c) {
  constexpr int kY = 0, kDy = 1, kDx = 2;
  const Geometry& g = *c.g;
  const int64_t n = g.n;
  ScratchPool pool(std::max(c.threads, 1), 6 * std::max<int64_t>(n, 1));
  for_each_row_task(g, c.threads, [&](int64_t begin, int64_t end) {
    ScratchPool::Lease lease(pool);
    double* y_buf = lease.as<double>();
    double* dy_buf = y_buf + std::max<int64_t>(n, 1);
    double* dx_buf = dy_buf + std::max<int64_t>(n, 1);
    int64_t off[kMaxOperands];
    for (int64_t row = begin; row < end; ++row) {
      g.row_offsets(row, off);
      const double* y = row_f64(g, kY, c.y_type, off, y_buf);
      const double* dy = row_f64(g, kDy, c.dy_type, off, dy_buf);
      const bool direct_out = c.dx_type == DType::kF64 && (g.axis_stride[kDx] == 1 || n == 1);
      double* dx = direct_out ? reinterpret_cast<double*>(g.at(kDx, off[kDx])) : dx_buf;
      kernels::softmax_backward_row_f64(c.op == BackwardOp::kLogSoftmax, y, dy, n, c.scale, dx);
      if (!direct_out) store_row(g, kDx, c.dx_type, off, dx, n);
    }
  });
}

}  // namespace smax::detail

// src/ops/softmax/forward.cc: softmax, log_softmax and logsumexp.
//
// validate -> geometry (batch dims x reduced axis) -> choose a layout mode ->
// split rows over threads -> kernels. Modes, best first:
//  * rows:    the axis is contiguous in src, dst and the additive mask, and
//             there is no bool mask: batched row kernels on the caller's memory.
//  * columns: the axis is strided but another dim is contiguous in every
//             operand: column kernels vectorised across that dim.
//  * gather:  anything else (bool masks, odd strides): each row's f32 logits
//             t = fl(fl(x*s) + mask) (-inf where the bool mask is 0) are
//             gathered into a contiguous scratch row, the row kernel runs with
//             s = 1 and no mask (so t is exactly what the kernels would form),
//             and the result is scattered.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

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

constexpr int kSrc = 0, kDst = 1, kAddMask = 2, kBoolMask = 3;

struct ForwardCall {
  ForwardOp op;
  const char* name;
  Algorithm algorithm;  // resolved (never kAuto)
  float scale;
  EmptyRow empty_row;
  int threads;
  bool has_add_mask;
  bool has_bool_mask;
  Geometry g;
};

const char* op_name(ForwardOp op) {
  switch (op) {
    case ForwardOp::kSoftmax: return "softmax";
    case ForwardOp::kLogSoftmax: return "log_softmax";
    case ForwardOp::kLogSumExp: return "logsumexp";
  }
  return "?";
}

ForwardCall prepare(ForwardOp op, const TensorView& src_in, const TensorView& dst_in,
                    const SoftmaxOptions& options) {
  const char* name = op_name(op);
  ForwardCall call{};
  call.op = op;
  call.name = name;
  check_view(src_in, name, "src", DType::kF32);
  check_view(dst_in, name, "dst", DType::kF32);
  call.scale = check_options(options, name);
  const TensorView src = as_rank1_if_scalar(src_in);
  const int axis = resolve_axis(options.axis, src_in.rank, name);

  int64_t strides[kMaxOperands][kMaxRank] = {};
  for (int d = 0; d < src.rank; ++d) strides[kSrc][d] = src.strides[d];
  TensorView dst = dst_in;
  if (op == ForwardOp::kLogSumExp) {
    reduced_strides(src, axis, dst_in, "dst", name, strides[kDst]);
  } else {
    dst = as_rank1_if_scalar(dst_in);
    check_same_shape(src, "src", dst, "dst", name);
    for (int d = 0; d < src.rank; ++d) strides[kDst][d] = dst.strides[d];
  }
  check_no_self_overlap(dst_in, "dst", name);
  check_disjoint_or_same(dst_in, "dst", src_in, "src", name, op != ForwardOp::kLogSumExp);

  char* bases[kMaxOperands] = {static_cast<char*>(src.data), static_cast<char*>(dst.data),
                               nullptr, nullptr};
  const int sizes[kMaxOperands] = {4, 4, 4, 1};
  // A mask (when given) becomes operand k: validated, broadcast to src,
  // disjoint from dst.
  auto add_mask = [&](const std::optional<TensorView>& mask, const char* mask_name, DType dtype,
                      int k) {
    if (!mask) return false;
    check_view(*mask, name, mask_name, dtype);
    broadcast_strides(*mask, mask_name, src, name, strides[k]);
    check_disjoint_or_same(dst_in, "dst", *mask, mask_name, name, false);
    bases[k] = static_cast<char*>(mask->data);
    return true;
  };
  call.has_add_mask = add_mask(options.additive_mask, "additive_mask", DType::kF32, kAddMask);
  call.has_bool_mask = add_mask(options.bool_mask, "bool_mask", DType::kBool, kBoolMask);
  call.g = make_geometry(src, axis, kMaxOperands, bases, sizes, strides);
  call.empty_row = options.empty_row;
  call.threads = options.threads > 0 ? options.threads : max_threads();
  call.algorithm = options.algorithm == Algorithm::kAuto ? choose_algorithm(name, call.g.n)
                                                         : options.algorithm;
  return call;
}

bool rows_mode(const ForwardCall& c) {
  return !c.has_bool_mask && axis_contiguous(c.g, kSrc) &&
         (c.op == ForwardOp::kLogSumExp || axis_contiguous(c.g, kDst)) &&
         (!c.has_add_mask || axis_contiguous(c.g, kAddMask));
}

// A batch dim usable by the column kernels, or -1.
int column_dim(const ForwardCall& c) {
  if (c.has_bool_mask) return -1;
  for (int b = c.g.batch_dims - 1; b >= 0; --b) {
    const bool unit = c.g.batch_stride[kSrc][b] == 1 && c.g.batch_stride[kDst][b] == 1 &&
                      (!c.has_add_mask || c.g.batch_stride[kAddMask][b] == 1);
    if (unit) return b;
  }
  return -1;
}

void run_rows_mode(const ForwardCall& c) {
  const Geometry& g = c.g;
  for_each_contiguous_row(
      g, c.threads,
      [&](const int64_t* off, int threads) {
        forward_row(c.op, c.algorithm, f32_at(g, kSrc, off[kSrc]),
                    c.has_add_mask ? f32_at(g, kAddMask, off[kAddMask]) : nullptr, g.n, c.scale,
                    c.empty_row, f32_at(g, kDst, off[kDst]), threads);
      },
      [&](int64_t count, const int64_t* off) {
        kernels::Rows rows;
        rows.src = f32_at(g, kSrc, off[kSrc]);
        rows.src_stride = run_stride(g, kSrc);
        rows.dst = f32_at(g, kDst, off[kDst]);
        rows.dst_stride = run_stride(g, kDst);
        if (c.has_add_mask) {
          rows.mask = f32_at(g, kAddMask, off[kAddMask]);
          rows.mask_stride = run_stride(g, kAddMask);
        }
        rows.rows = count;
        rows.cols = g.n;
        rows.scale = c.scale;
        rows.empty_row = c.empty_row;
        rows_kernel(c.op, rows, c.algorithm);
      });
}

void run_columns_mode(const ForwardCall& c, int cdim) {
  for_each_column_block(c.g, cdim, c.threads, [&](const int64_t* off, int64_t j0, int64_t count) {
    kernels::Columns cols;
    cols.src = f32_at(c.g, kSrc, off[kSrc] + j0);
    cols.src_axis_stride = c.g.axis_stride[kSrc];
    cols.dst = f32_at(c.g, kDst, off[kDst] + j0);
    cols.dst_axis_stride = c.g.axis_stride[kDst];
    if (c.has_add_mask) {
      cols.mask = f32_at(c.g, kAddMask, off[kAddMask] + j0);
      cols.mask_axis_stride = c.g.axis_stride[kAddMask];
    }
    cols.n = c.g.n;
    cols.inner = count;
    cols.scale = c.scale;
    cols.empty_row = c.empty_row;
    switch (c.op) {
      case ForwardOp::kSoftmax: kernels::softmax_columns(cols); break;
      case ForwardOp::kLogSoftmax: kernels::log_softmax_columns(cols); break;
      case ForwardOp::kLogSumExp: kernels::logsumexp_columns(cols); break;
    }
  });
}

// Gathers row logits t = fl(fl(x*s) + mask), -inf where the bool mask is 0.
void gather_logits(const ForwardCall& c, const int64_t* off, float* t) {
  const Geometry& g = c.g;
  const float* x = f32_at(g, kSrc, off[kSrc]);
  const float* add = c.has_add_mask ? f32_at(g, kAddMask, off[kAddMask]) : nullptr;
  const auto* keep = c.has_bool_mask
                         ? reinterpret_cast<const uint8_t*>(g.at(kBoolMask, off[kBoolMask]))
                         : nullptr;
  const int64_t sx = g.axis_stride[kSrc], sa = g.axis_stride[kAddMask],
                sb = g.axis_stride[kBoolMask];
  for (int64_t i = 0; i < g.n; ++i) {
    float v = x[i * sx] * c.scale;
    if (add) v = v + add[i * sa];
    if (keep && keep[i * sb] == 0) v = -std::numeric_limits<float>::infinity();
    t[i] = v;
  }
}

void run_gather_mode(const ForwardCall& c) {
  const Geometry& g = c.g;
  const bool dst_contiguous = c.op == ForwardOp::kLogSumExp || axis_contiguous(c.g, kDst);
  for_each_gathered_row(g, c.threads, g.n, [&](int64_t row, int threads, float* t) {
    int64_t off[kMaxOperands];
    g.row_offsets(row, off);
    gather_logits(c, off, t);
    float* dst = f32_at(g, kDst, off[kDst]);
    float* out = dst_contiguous ? dst : t;
    forward_row(c.op, c.algorithm, t, nullptr, g.n, 1.0f, c.empty_row, out, threads);
    if (!dst_contiguous) {
      const int64_t sd = g.axis_stride[kDst];
      for (int64_t i = 0; i < g.n; ++i) dst[i * sd] = t[i];
    }
  });
}

void run_forward(ForwardOp op, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& options) {
  ensure_runtime_initialized();
  const ForwardCall c = prepare(op, src, dst, options);
  if (c.g.rows == 0) return;
  if (c.g.n == 0) {
    // Empty rows: softmax / log_softmax have nothing to write; the log of
    // an empty sum is -inf.
    if (op == ForwardOp::kLogSumExp) {
      int64_t off[kMaxOperands];
      for (int64_t row = 0; row < c.g.rows; ++row) {
        c.g.row_offsets(row, off);
        *f32_at(c.g, kDst, off[kDst]) = -std::numeric_limits<float>::infinity();
      }
    }
    return;
  }
  if (rows_mode(c)) return run_rows_mode(c);
  const int cdim = column_dim(c);
  if (cdim >= 0) return run_columns_mode(c, cdim);
  run_gather_mode(c);
}

}  // namespace
}  // namespace detail

void softmax(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  detail::run_forward(detail::ForwardOp::kSoftmax, src, dst, options);
}
void log_softmax(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  detail::run_forward(detail::ForwardOp::kLogSoftmax, src, dst, options);
}
void logsumexp(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  detail::run_forward(detail::ForwardOp::kLogSumExp, src, dst, options);
}

}  // namespace smax

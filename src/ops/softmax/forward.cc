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
// Storage dtypes (docs/numerics.md, "bf16 and f16"): src, dst and the
// additive mask may each be f32, bf16 or f16, dst also f64; the math is f32
// on the exactly widened inputs and each output is rounded once. All-f32
// calls take the modes above unchanged. Otherwise rows mode (short rows, f32
// or no mask, dst not f64) runs the fused narrow kernels
// (kernels/softmax_narrow.h); everything else (long rows, other layouts,
// narrow masks, f64 dst) is the gather mode with conversion: each row's f32
// logits are formed in a per-row scratch, the f32 row kernel (segments for
// long rows) runs there, and the result is rounded into dst. Both give
// round(f32 result on the widened inputs), the same bits in every layout,
// except log_softmax rows into bf16 / f16 whose max dominates: both paths
// compute those as (t_i - m) - log1p(s1) (kernels/softmax_narrow.h).
// An f64 src takes the float64 path instead (ops/softmax/f64.h: float64
// kernels, masks of any floating dtype, any dst dtype).
// Before all of it, the short path (try_short_rows): dense f32 src and dst
// over the last axis, no masks, work that fits one task. There, building
// the geometry (a zeroed and copied ~1 KB struct) and asking for the thread
// count cost more than the kernel of a 1024-element row; the short path
// checks what prepare would, runs the same kernel call and gives the same
// bits (docs/design.md, "Short rows").
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

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

constexpr int kSrc = 0, kDst = 1, kAddMask = 2, kBoolMask = 3;

struct ForwardCall {
  ForwardOp op;
  const char* name;
  Algorithm algorithm;  // resolved (never kAuto)
  float scale;
  double scale64;  // double(scale) / double(temperature): the f64 path's multiplier
  EmptyRow empty_row;
  int threads;
  bool has_add_mask;
  bool has_bool_mask;
  DType src_type, dst_type, mask_type;
  Geometry g;

  bool all_f32() const {
    return src_type == DType::kF32 && dst_type == DType::kF32 &&
           (!has_add_mask || mask_type == DType::kF32);
  }
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
  check_float_view(src_in, name, "src");
  check_float_view(dst_in, name, "dst");
  call.src_type = src_in.dtype;
  call.dst_type = dst_in.dtype;
  call.mask_type = DType::kF32;
  call.scale = check_options(options, name);
  call.scale64 = static_cast<double>(options.scale) / static_cast<double>(options.temperature);
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
  check_disjoint_or_same(dst_in, "dst", src_in, "src", name,
                         op != ForwardOp::kLogSumExp && src_in.dtype == dst_in.dtype);

  char* bases[kMaxOperands] = {static_cast<char*>(src.data), static_cast<char*>(dst.data),
                               nullptr, nullptr};
  int sizes[kMaxOperands] = {dtype_size(src_in.dtype), dtype_size(dst_in.dtype), 4, 1};
  // A mask (when given) becomes operand k: validated, broadcast to src,
  // disjoint from dst.
  auto add_mask = [&](const std::optional<TensorView>& mask, const char* mask_name, DType dtype,
                      int k) {
    if (!mask) return false;
    if (dtype == DType::kBool) {
      check_view(*mask, name, mask_name, dtype);
    } else {
      check_float_view(*mask, name, mask_name);
      call.mask_type = mask->dtype;
      sizes[k] = dtype_size(mask->dtype);
    }
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
  call.algorithm = options.algorithm == Algorithm::kAuto
                       ? choose_forward_algorithm(op != ForwardOp::kLogSumExp, call.g.n)
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

// Streaming stores (core/stream_stores.h) for the batched three-pass
// log_softmax kernels and the batched reload softmax kernels (kernels.h,
// Rows::stream_stores, Rows::scratch), by the footprint of the call's rows
// (src + dst). The streaming-store site these calls are measured and
// decided as: softmax and log_softmax each on their own.
StoreSite store_site(const ForwardCall& c) {
  return c.op == ForwardOp::kSoftmax ? StoreSite::kSoftmax : StoreSite::kLogSoftmax;
}

StoreChoice rows_mode_stores(const ForwardCall& c) {
  // log_softmax streams its log pass in both three-pass algorithms, long
  // rows' segments included; softmax streams the scale pass of reload rows
  // shorter than a segment (their exps in a scratch row in cache).
  const bool streams =
      c.op == ForwardOp::kLogSoftmax
          ? c.algorithm == Algorithm::kThreePassReload ||
                c.algorithm == Algorithm::kThreePassRecompute
          : c.op == ForwardOp::kSoftmax && c.algorithm == Algorithm::kThreePassReload &&
                c.g.n < kernels::kSegment;
  // Rows the streamed pass can peel to an aligned vector (else the kernel
  // stores as usual, and a measurement would time regular stores twice).
  const bool peelable = c.g.n >= kStreamMinCols &&
                        reinterpret_cast<uintptr_t>(c.g.at(kDst, 0)) % sizeof(float) == 0;
  if (!streams || !peelable) return StoreChoice::kRegular;
  const int64_t numel = c.g.rows * c.g.n;  // fits int64 with 4 bytes each (validated)
  return choose_stores(store_site(c), numel < INT64_MAX / 8 ? numel * 8 : INT64_MAX);
}

void run_rows_mode(const ForwardCall& c) {
  const Geometry& g = c.g;
  const StoreChoice stores = rows_mode_stores(c);
  const StoreSite site = store_site(c);
  // Streamed softmax keeps its rows' exps in scratch (kernels.h,
  // Rows::scratch; one per thread that can run at once), allocated before
  // anything is written, and 64-byte aligned (the exp pass stores it from
  // element 0).
  const bool scratch_row = c.op == ForwardOp::kSoftmax && stores != StoreChoice::kRegular;
  constexpr int64_t kAlignFloats = kStreamAlignBytes / sizeof(float);
  const int64_t scratch_floats = kernels::softmax_stream_scratch_floats(g.n) + kAlignFloats;
  ScratchPool pool(scratch_row ? std::max(c.threads, 1) : 0, scratch_floats);
  for_each_contiguous_row(
      g, c.threads,
      [&](const int64_t* off, int threads, const int64_t* next) {
        run_with_stores(site, stores, 1, g.n, [&](int64_t, int64_t, bool stream) {
          forward_row(c.op, c.algorithm, f32_at(g, kSrc, off[kSrc]),
                      c.has_add_mask ? f32_at(g, kAddMask, off[kAddMask]) : nullptr, g.n,
                      c.scale, c.empty_row, f32_at(g, kDst, off[kDst]), threads,
                      next ? g.at(kSrc, next[kSrc]) : nullptr, stream);
        });
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
        rows.cols = g.n;
        rows.scale = c.scale;
        rows.empty_row = c.empty_row;
        std::optional<ScratchPool::Lease> lease;
        if (scratch_row) lease.emplace(pool);
        if (lease) {
          // Fault the scratch's pages in first (a store per 4 KiB page): a
          // fresh allocation's first touch would otherwise be charged to
          // the streamed half of a measured call (stream_stores.h) and bias
          // the decision against streaming.
          for (int64_t k = 0; k < scratch_floats; k += 1024) lease->data()[k] = 0.0f;
          const auto address = reinterpret_cast<uintptr_t>(lease->data());
          rows.scratch = lease->data() + (kStreamAlignBytes - address % kStreamAlignBytes) %
                                             kStreamAlignBytes / sizeof(float);
        }
        run_with_stores(site, stores, count, g.n, [&](int64_t first, int64_t part, bool stream) {
          kernels::Rows r = rows;
          r.src += first * rows.src_stride;
          r.dst += first * rows.dst_stride;
          if (r.mask != nullptr) r.mask += first * rows.mask_stride;
          r.rows = part;
          r.stream_stores = stream;
          rows_kernel(c.op, r, c.algorithm);
        });
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

// ---- storage dtypes other than f32 ------------------------------------------

// Rows mode with the fused narrow kernels: short rows, f32 or no additive
// mask, dst f32 / bf16 / f16.
bool narrow_rows_mode(const ForwardCall& c) {
  return rows_mode(c) && c.g.n < kernels::kSegment && c.dst_type != DType::kF64 &&
         (!c.has_add_mask || c.mask_type == DType::kF32);
}

void run_narrow_rows_mode(const ForwardCall& c) {
  const Geometry& g = c.g;
  // Reload softmax into a narrow dst keeps its exps in an f32 row of scratch
  // (in cache: one exp per element instead of two).
  const bool scratch_row = c.op == ForwardOp::kSoftmax && c.dst_type != DType::kF32;
  ScratchPool pool(scratch_row ? std::max(c.threads, 1) : 0, g.n);
  for_each_row_stream(g, c.threads, [&](int64_t begin, int64_t end) {
    std::optional<ScratchPool::Lease> lease;
    if (scratch_row) lease.emplace(pool);
    for_each_run(g, begin, end, [&](int64_t, int64_t count, const int64_t* off) {
      kernels::NarrowRows rows;
      rows.scratch = lease ? lease->data() : nullptr;
      rows.src = g.at(kSrc, off[kSrc]);
      rows.src_type = c.src_type;
      rows.src_stride = run_stride(g, kSrc);
      rows.dst = g.at(kDst, off[kDst]);
      rows.dst_type = c.dst_type;
      rows.dst_stride = run_stride(g, kDst);
      if (c.has_add_mask) {
        rows.mask = f32_at(g, kAddMask, off[kAddMask]);
        rows.mask_stride = run_stride(g, kAddMask);
      }
      rows.rows = count;
      rows.cols = g.n;
      rows.scale = c.scale;
      rows.empty_row = c.empty_row;
      switch (c.op) {
        case ForwardOp::kSoftmax: kernels::softmax_rows_narrow(rows, c.algorithm); break;
        case ForwardOp::kLogSoftmax: kernels::log_softmax_rows_narrow(rows, c.algorithm); break;
        case ForwardOp::kLogSumExp: kernels::logsumexp_rows_narrow(rows, c.algorithm); break;
      }
    });
  });
}

// Rows mode for rows of n >= kSegment with any storage dtypes but f64:
// the segment kernels read the row in its type and round each output once
// (forward_row_any), with no f32 copy of the row; scratch holds a narrow
// dst's reload exps and the logits of log_softmax rows near 0 (4 n bytes:
// in L2 for rows up to ~200K elements on a 1 MB L2, else in the LLC).
bool narrow_long_rows_mode(const ForwardCall& c) {
  return rows_mode(c) && c.g.n >= kernels::kSegment && c.dst_type != DType::kF64 &&
         (!c.has_add_mask || c.mask_type == DType::kF32);
}

void run_narrow_long_rows_mode(const ForwardCall& c) {
  const Geometry& g = c.g;
  // One scratch row per row that can run at once (for_each_long_row).
  // (Two-pass softmax falls back to reload on rows beyond its exact range.)
  const bool scratch_row =
      c.dst_type != DType::kF32 &&
      (c.op == ForwardOp::kLogSoftmax ||
       (c.op == ForwardOp::kSoftmax && (c.algorithm == Algorithm::kThreePassReload ||
                                        c.algorithm == Algorithm::kTwoPass)));
  const int64_t concurrent = g.rows >= c.threads ? std::min<int64_t>(c.threads, g.rows) : 1;
  ScratchPool pool(scratch_row ? static_cast<int>(concurrent) : 0, g.n);
  for_each_long_row(g, c.threads, [&](int64_t row, int threads, int64_t next) {
    std::optional<ScratchPool::Lease> lease;
    if (scratch_row) lease.emplace(pool);
    int64_t off[kMaxOperands], next_off[kMaxOperands];
    g.row_offsets(row, off);
    if (next >= 0) g.row_offsets(next, next_off);
    const AnyRowIn in{g.at(kSrc, off[kSrc]), c.src_type,
                      c.has_add_mask ? f32_at(g, kAddMask, off[kAddMask]) : nullptr, c.scale};
    forward_row_any(c.op, c.algorithm, in, g.n, c.empty_row,
                    AnyRowOut{g.at(kDst, off[kDst]), c.dst_type}, lease ? lease->data() : nullptr,
                    threads, next >= 0 ? g.at(kSrc, next_off[kSrc]) : nullptr);
  });
}

// Row logits of any storage dtype into f32 scratch: t = fl(fl(x*s) + mask),
// -inf where the bool mask is 0 (gather_logits with widening).
void gather_logits_any(const ForwardCall& c, const int64_t* off, float* t) {
  const Geometry& g = c.g;
  const void* x = g.at(kSrc, off[kSrc]);
  if (g.axis_stride[kSrc] == 1 || g.n == 1) {
    kernels::widen_row(x, c.src_type, g.n, t);
  } else {
    gather_row_f32(x, c.src_type, g.axis_stride[kSrc], g.n, t);
  }
  const auto* keep = c.has_bool_mask
                         ? reinterpret_cast<const uint8_t*>(g.at(kBoolMask, off[kBoolMask]))
                         : nullptr;
  const char* add = c.has_add_mask ? g.at(kAddMask, off[kAddMask]) : nullptr;
  const int64_t mask_step = g.axis_stride[kAddMask] * dtype_size(c.mask_type);
  const int64_t sb = g.axis_stride[kBoolMask];
  if (c.scale == 1.0f && add == nullptr && keep == nullptr) return;
  for (int64_t i = 0; i < g.n; ++i) {
    float v = t[i] * c.scale;
    if (add) v = v + load_f32(add + i * mask_step, c.mask_type);
    if (keep && keep[i * sb] == 0) v = -std::numeric_limits<float>::infinity();
    t[i] = v;
  }
}

// log_softmax into a bf16 / f16 dst, a row y of the f32 kernel's results:
// where the row's max logit dominates (an output above
// -kNearZeroLogSumBound), its outputs are recomputed from the logits as
// (t_i - m) - log1p(s1), the narrow kernels' rule (kernels/softmax_narrow.h),
// so values near 0 are within 1 ulp of the narrow type. Other rows are left
// as they are (one scan of y).
void refine_near_zero_log_softmax(const ForwardCall& c, const int64_t* off, float* y) {
  const int64_t n = c.g.n;
  // The row's largest output (SIMD: a scalar loop here cost as much as the
  // whole f32 log_softmax of a 128256-column row).
  const float y_max = kernels::minmax_segment(y, nullptr, n, 1.0f).max;
  if (!(y_max > -kernels::kNearZeroLogSumBound)) return;  // also NaN rows
  gather_logits_any(c, off, y);  // the logits again, in place of y
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = y[i] > m ? y[i] : m;
  const float log_sum = kernels::near_zero_log_sum(y, static_cast<size_t>(n), m);
  for (int64_t i = 0; i < n; ++i) y[i] = (y[i] - m) - log_sum;
}

// Gather mode with conversion: per row, f32 logits in scratch, the f32 row
// kernel (segments for long rows) in place, then dst = round(result).
void run_converting_gather_mode(const ForwardCall& c) {
  const Geometry& g = c.g;
  for_each_gathered_row(g, c.threads, g.n, [&](int64_t row, int threads, float* t) {
    int64_t off[kMaxOperands];
    g.row_offsets(row, off);
    gather_logits_any(c, off, t);
    forward_row(c.op, c.algorithm, t, nullptr, g.n, 1.0f, c.empty_row, t, threads);
    if (c.op == ForwardOp::kLogSoftmax &&
        (c.dst_type == DType::kBF16 || c.dst_type == DType::kF16)) {
      refine_near_zero_log_softmax(c, off, t);
    }
    void* dst = g.at(kDst, off[kDst]);
    if (c.op == ForwardOp::kLogSumExp) {
      store_f32(dst, c.dst_type, t[0]);
    } else if ((g.axis_stride[kDst] == 1 || g.n == 1) && c.dst_type != DType::kF64) {
      kernels::narrow_row(t, g.n, dst, c.dst_type);
    } else {
      scatter_row_f32(t, g.n, dst, c.dst_type, g.axis_stride[kDst]);
    }
  });
}

// ---- the short path ------------------------------------------------------------

// Whether `dst` has src's shape (softmax, log_softmax) or src's shape
// without its last dim or with it of size 1 (logsumexp).
bool dst_shape_fits(ForwardOp op, const TensorView& src, const TensorView& dst) {
  int dims = src.rank;
  if (op == ForwardOp::kLogSumExp) {
    if (dst.rank == src.rank) {
      if (dst.shape[src.rank - 1] != 1) return false;
    } else if (dst.rank != src.rank - 1) {
      return false;
    }
    dims = src.rank - 1;
  } else if (dst.rank != src.rank) {
    return false;
  }
  for (int d = 0; d < dims; ++d) {
    if (dst.shape[d] != src.shape[d]) return false;
  }
  return true;
}

// Calls of dense row-major f32 src and dst, no masks, over the last axis,
// whose rows fit one task of the grid (rows <= rows_per_task(n), n <
// kSegment): what prepare + rows mode would run on the calling thread, the
// rows kernel on all rows at once (the same call, so the same bits), without
// building a Geometry and without asking for the thread count. Returns false,
// having written nothing, for every other call, valid or not
// (core/dense_rows.h): the general path then validates it in full and
// raises its errors. The checks here are prepare's, in its order where they
// can fail (views, then options), so an error is the one prepare raises.
bool try_short_rows(ForwardOp op, const TensorView& src, const TensorView& dst,
                    const SoftmaxOptions& options) {
  if (options.additive_mask || options.bool_mask || src.rank < 1) return false;
  const int64_t src_numel = dense_f32_numel(src);
  const int64_t dst_numel = src_numel > 0 ? dense_f32_numel(dst) : -1;
  if (dst_numel < 0) return false;
  if (options.axis != -1 && options.axis != src.rank - 1) return false;
  if (!dst_shape_fits(op, src, dst)) return false;
  const int64_t n = src.shape[src.rank - 1];
  const int64_t rows = src_numel / n;
  if (n >= kernels::kSegment || rows > rows_per_task(n)) return false;
  // check_disjoint_or_same: exact in-place aliasing (same data, shape and
  // strides: both dense) is allowed for softmax / log_softmax only.
  const bool in_place = op != ForwardOp::kLogSumExp && src.data == dst.data;
  if (!in_place && bytes_overlap(src.data, 4 * src_numel, dst.data, 4 * dst_numel)) return false;
  kernels::Rows r;
  r.scale = check_options(options, op_name(op));  // throws as prepare does
  r.src = static_cast<const float*>(src.data);
  r.src_stride = n;
  r.dst = static_cast<float*>(dst.data);
  r.dst_stride = op == ForwardOp::kLogSumExp ? 1 : n;
  r.rows = rows;
  r.cols = n;
  r.empty_row = options.empty_row;
  const Algorithm algorithm = options.algorithm == Algorithm::kAuto
                                  ? choose_forward_algorithm(op != ForwardOp::kLogSumExp, n)
                                  : options.algorithm;
  rows_kernel(op, r, algorithm);
  return true;
}

void run_forward(ForwardOp op, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& options) {
  ensure_runtime_initialized();
  if (try_short_rows(op, src, dst, options)) return;
  const ForwardCall c = prepare(op, src, dst, options);
  if (c.g.rows == 0) return;
  if (c.g.n == 0) {
    // Empty rows: softmax / log_softmax have nothing to write; the log of
    // an empty sum is -inf.
    if (op == ForwardOp::kLogSumExp) {
      int64_t off[kMaxOperands];
      for (int64_t row = 0; row < c.g.rows; ++row) {
        c.g.row_offsets(row, off);
        store_f32(c.g.at(kDst, off[kDst]), c.dst_type, -std::numeric_limits<float>::infinity());
      }
    }
    return;
  }
  if (c.src_type == DType::kF64) {  // float64 arithmetic (ops/softmax/f64.h)
    return run_forward_f64(F64Forward{op, &c.g, c.src_type, c.dst_type, c.mask_type,
                                      c.has_add_mask, c.has_bool_mask, c.scale64, c.empty_row,
                                      c.threads});
  }
  if (!c.all_f32()) {
    if (narrow_rows_mode(c)) return run_narrow_rows_mode(c);
    if (narrow_long_rows_mode(c)) return run_narrow_long_rows_mode(c);
    return run_converting_gather_mode(c);
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

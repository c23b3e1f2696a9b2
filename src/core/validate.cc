// src/core/validate.cc: argument checks shared by every op (see validate.h).
#include "core/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/errors.h"
#include "smax/error.h"

namespace smax::detail {
namespace {

// Byte offsets of the first and last reachable element relative to data
// (min <= 0 <= max), with overflow checks. Requires numel > 0.
struct ByteSpan {
  int64_t min = 0;
  int64_t max = 0;
};

ByteSpan byte_span(const TensorView& view, const char* op, const char* name) {
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < view.rank; ++d) {
    if (view.shape[d] <= 1) continue;
    int64_t reach = 0;
    const int64_t stride = view.strides[d];
    if (stride == INT64_MIN ||
        __builtin_mul_overflow(stride < 0 ? -stride : stride, view.shape[d] - 1, &reach) ||
        (stride < 0 ? __builtin_sub_overflow(lo, reach, &lo)
                    : __builtin_add_overflow(hi, reach, &hi))) {
      fail(op, std::string(name) + " strides overflow int64 offsets: " + view.describe());
    }
  }
  const int64_t size = dtype_size(view.dtype);
  ByteSpan span;
  // span.min must also be negatable (it is compared with the address below).
  if (__builtin_mul_overflow(lo, size, &span.min) || span.min == INT64_MIN ||
      __builtin_mul_overflow(hi, size, &span.max) ||
      __builtin_add_overflow(span.max, size, &span.max)) {
    fail(op, std::string(name) + " byte offsets overflow int64: " + view.describe());
  }
  return span;
}

}  // namespace

TensorView as_rank1_if_scalar(const TensorView& view) {
  if (view.rank != 0) return view;
  TensorView out = view;
  out.rank = 1;
  out.shape[0] = 1;
  out.strides[0] = 1;
  return out;
}

int64_t count_rows(const TensorView& src_in, int axis) {
  const TensorView src = as_rank1_if_scalar(src_in);
  int64_t rows = 1;
  for (int d = 0; d < src.rank; ++d) {
    if (d != axis) rows *= src.shape[d];
  }
  return rows;
}

void check_float_view(const TensorView& view, const char* op, const char* name) {
  if (!is_floating(view.dtype)) {
    fail(op, std::string(name) + " has dtype " + dtype_name(view.dtype) +
                 ", expected a floating dtype (f32, f64, f16 or bf16)");
  }
  check_view(view, op, name, view.dtype);
}

void check_view(const TensorView& view, const char* op, const char* name, DType dtype) {
  if (view.rank < 0 || view.rank > kMaxRank) {
    fail(op, std::string(name) + " rank " + std::to_string(view.rank) + " is outside [0, " +
                 std::to_string(kMaxRank) + "]");
  }
  if (view.dtype != dtype) {
    fail(op, std::string(name) + " has dtype " + dtype_name(view.dtype) + ", expected " +
                 dtype_name(dtype));
  }
  int64_t numel = 1;
  for (int d = 0; d < view.rank; ++d) {
    if (view.shape[d] < 0) {
      fail(op, std::string(name) + " has negative size " + std::to_string(view.shape[d]) +
                   " in dim " + std::to_string(d));
    }
  }
  // The product of the non-zero sizes must fit int64, whatever the order of
  // the dims: a zero anywhere makes the view empty, but the other sizes are
  // still multiplied together later (batch rows in core/geometry.cc).
  bool empty = false;
  for (int d = 0; d < view.rank; ++d) {
    if (view.shape[d] == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(numel, view.shape[d], &numel)) {
      fail(op, std::string(name) + " element count overflows int64: " + view.describe());
    }
  }
  if (empty) return;  // nothing is read or written; data may be null
  if (view.data == nullptr) {
    fail(op, std::string(name) + " data is null for shape " + view.describe());
  }
  // Elements are read as their C++ type: the data must be aligned to it
  // (every numpy / torch / DLPack array is; a misaligned int64 view was UB).
  if (reinterpret_cast<uintptr_t>(view.data) % static_cast<uintptr_t>(dtype_size(view.dtype)) != 0) {
    fail(op, std::string(name) + " data is not aligned to its " +
                 std::to_string(dtype_size(view.dtype)) + "-byte elements: " + view.describe());
  }
  const ByteSpan span = byte_span(view, op, name);
  const auto address = reinterpret_cast<uintptr_t>(view.data);
  if (address < uintptr_t{0} - static_cast<uintptr_t>(span.min) ||
      address + static_cast<uintptr_t>(span.max) < address) {
    fail(op, std::string(name) + " strides reach outside the address space: " + view.describe());
  }
}

int resolve_axis(int64_t axis, int rank, const char* op) {
  const int effective_rank = std::max(rank, 1);
  if (axis < -effective_rank || axis >= effective_rank) {
    fail(op, "axis " + std::to_string(axis) + " is out of range for rank " +
                 std::to_string(rank));
  }
  return static_cast<int>(axis < 0 ? axis + effective_rank : axis);
}

void check_same_shape(const TensorView& a, const char* a_name, const TensorView& b,
                      const char* b_name, const char* op) {
  bool same = a.rank == b.rank;
  for (int d = 0; same && d < a.rank; ++d) same = a.shape[d] == b.shape[d];
  if (!same) {
    fail(op, std::string(b_name) + " shape " + b.describe() + " does not match " + a_name +
                 " shape " + a.describe());
  }
}

void broadcast_strides(const TensorView& mask, const char* name, const TensorView& target,
                       const char* op, int64_t* out_strides) {
  if (mask.rank > target.rank) {
    fail(op, std::string(name) + " rank " + std::to_string(mask.rank) +
                 " exceeds the source rank " + std::to_string(target.rank));
  }
  const int offset = target.rank - mask.rank;
  for (int d = 0; d < target.rank; ++d) {
    if (d < offset) {
      out_strides[d] = 0;
      continue;
    }
    const int64_t size = mask.shape[d - offset];
    if (size == target.shape[d]) {
      out_strides[d] = target.shape[d] == 1 ? 0 : mask.strides[d - offset];
    } else if (size == 1) {
      out_strides[d] = 0;
    } else {
      fail(op, std::string(name) + " shape " + mask.describe() +
                   " does not broadcast to the source shape " + target.describe());
    }
  }
}

void reduced_strides(const TensorView& src, int axis, const TensorView& out, const char* name,
                     const char* op, int64_t* strides) {
  const bool keepdim = out.rank == src.rank && out.shape[axis] == 1;
  const bool dropped = out.rank == src.rank - 1;
  bool ok = keepdim || dropped;
  for (int d = 0, e = 0; ok && d < src.rank; ++d) {
    if (d == axis) {
      strides[d] = 0;
      if (keepdim) ++e;
      continue;
    }
    ok = out.shape[e] == src.shape[d];
    strides[d] = out.strides[e];
    ++e;
  }
  if (!ok) {
    fail(op, std::string(name) + " shape " + out.describe() + " must be src shape " +
                 src.describe() + " without dim " + std::to_string(axis) +
                 " (or with it of size 1)");
  }
}

void check_no_self_overlap(const TensorView& out, const char* name, const char* op) {
  if (out.numel() == 0) return;
  struct Dim {
    int64_t stride, size;
  };
  Dim dims[kMaxRank];
  int count = 0;
  for (int d = 0; d < out.rank; ++d) {
    if (out.shape[d] <= 1) continue;
    if (out.strides[d] == 0) {
      fail(op, std::string(name) + " has stride 0 in dim " + std::to_string(d) + " of size " +
                   std::to_string(out.shape[d]) + " (it would write one element twice)");
    }
    dims[count++] = {out.strides[d] < 0 ? -out.strides[d] : out.strides[d], out.shape[d]};
  }
  // Insertion sort by |stride| (at most kMaxRank dims).
  for (int i = 1; i < count; ++i) {
    for (int j = i; j > 0 && dims[j - 1].stride > dims[j].stride; --j) std::swap(dims[j - 1], dims[j]);
  }
  int64_t reach = 0;  // largest offset spanned by the smaller dims (checked by byte_span)
  for (int i = 0; i < count; ++i) {
    if (dims[i].stride <= reach) {
      fail(op, std::string(name) + " overlaps itself (strides " + out.describe() +
                   " map two indices to one element)");
    }
    reach += dims[i].stride * (dims[i].size - 1);
  }
}

void check_disjoint_or_same(const TensorView& out, const char* out_name, const TensorView& in,
                            const char* in_name, const char* op, bool allow_alias) {
  if (out.numel() == 0 || in.numel() == 0) return;
  bool same = out.data == in.data && out.rank == in.rank && out.dtype == in.dtype;
  for (int d = 0; same && d < out.rank; ++d) {
    same = out.shape[d] == in.shape[d] && (out.shape[d] == 1 || out.strides[d] == in.strides[d]);
  }
  if (same && allow_alias) return;
  const ByteSpan a = byte_span(out, op, out_name);
  const ByteSpan b = byte_span(in, op, in_name);
  const auto a0 = reinterpret_cast<uintptr_t>(out.data);
  const auto b0 = reinterpret_cast<uintptr_t>(in.data);
  const uintptr_t a_lo = a0 + static_cast<uintptr_t>(a.min), a_hi = a0 + static_cast<uintptr_t>(a.max);
  const uintptr_t b_lo = b0 + static_cast<uintptr_t>(b.min), b_hi = b0 + static_cast<uintptr_t>(b.max);
  if (a_lo < b_hi && b_lo < a_hi) {
    fail(op, std::string(out_name) + " overlaps " + in_name +
                 (allow_alias ? " without being the same view (only exact in-place aliasing "
                                "is supported)"
                              : " (aliasing is not supported here)"));
  }
}

float check_options(const SoftmaxOptions& options, const char* op) {
  if (!(std::isfinite(options.scale) && options.scale > 0.0f)) {
    fail(op, "scale must be finite and > 0, got " + std::to_string(options.scale));
  }
  if (!(std::isfinite(options.temperature) && options.temperature > 0.0f)) {
    fail(op, "temperature must be finite and > 0, got " + std::to_string(options.temperature));
  }
  const float s = options.scale / options.temperature;
  if (!(std::isfinite(s) && s > 0.0f)) {
    fail(op, "scale / temperature = " + std::to_string(options.scale) + " / " +
                 std::to_string(options.temperature) + " is not a finite positive f32");
  }
  check_enum_range(op, options.algorithm, Algorithm::kOnline, "unknown algorithm value ");
  check_enum_range(op, options.empty_row, EmptyRow::kNan, "unknown empty_row value ");
  if (options.threads < 0) {
    fail(op, "threads must be >= 0 (0 = default), got " + std::to_string(options.threads));
  }
  return s;
}

}  // namespace smax::detail

// src/reference/rows.cc: see rows.h. Plain loops over the logical index space.
#include "reference/rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "reference/reference.h"
#include "smax/error.h"

namespace smax::reference {

[[noreturn]] void fail(const char* fn, const std::string& message) {
  throw Error(Status::kInvalidArgument, std::string(fn) + ": " + message);
}

namespace {

// Dense index into a view of `vshape` broadcast to `shape` (right-aligned),
// for the logical multi-index `index` of `shape`.
int64_t broadcast_index(const std::vector<int64_t>& vshape, const std::vector<int64_t>& shape,
                        const std::vector<int64_t>& index) {
  const size_t off = shape.size() - vshape.size();
  int64_t i = 0;
  for (size_t d = 0; d < vshape.size(); ++d) {
    const int64_t k = vshape[d] == 1 ? 0 : index[d + off];
    i = i * vshape[d] + k;
  }
  return i;
}

std::vector<int64_t> shape_of(const TensorView& v) {
  std::vector<int64_t> s(v.shape, v.shape + v.rank);
  if (s.empty()) s.push_back(1);
  return s;
}

void check_broadcast(const char* fn, const char* name, const std::vector<int64_t>& vshape,
                     const std::vector<int64_t>& shape) {
  bool ok = vshape.size() <= shape.size();
  for (size_t d = 0; ok && d < vshape.size(); ++d) {
    const int64_t a = vshape[d], b = shape[d + shape.size() - vshape.size()];
    ok = a == b || a == 1;
  }
  if (!ok) fail(fn, std::string(name) + " does not broadcast to the source shape");
}

}  // namespace

std::vector<double> RefRows::scatter(const std::vector<double>& by_row) const {
  std::vector<double> out(by_row.size());
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = inner == 0 ? 0 : r / inner, j = inner == 0 ? 0 : r % inner;
    for (int64_t k = 0; k < n; ++k) out[static_cast<size_t>((o * n + k) * inner + j)] = by_row[static_cast<size_t>(r * n + k)];
  }
  return out;
}

namespace {
thread_local bool tl_float64 = false;
}  // namespace

bool float64_semantics() noexcept { return tl_float64; }
Float64Semantics::Float64Semantics(bool on) : saved_(tl_float64) { tl_float64 = on; }
Float64Semantics::~Float64Semantics() { tl_float64 = saved_; }

RefRows ref_rows(const char* fn, const TensorView& src, const SoftmaxOptions& options,
                 bool logits) {
  RefRows R;
  R.shape = shape_of(src);
  const int rank = static_cast<int>(R.shape.size());
  const int64_t axis = options.axis < 0 ? options.axis + (src.rank == 0 ? 1 : src.rank) : options.axis;
  if (axis < 0 || axis >= rank) fail(fn, "axis " + std::to_string(options.axis) + " is out of range");
  R.axis = static_cast<int>(axis);
  if (!(std::isfinite(options.scale) && options.scale > 0.0f && std::isfinite(options.temperature) &&
        options.temperature > 0.0f)) {
    fail(fn, "scale and temperature must be finite and > 0");
  }
  const float s = options.scale / options.temperature;
  const bool f64 = float64_semantics();
  const double s64 = static_cast<double>(options.scale) / static_cast<double>(options.temperature);
  R.scale = f64 ? s64 : s;
  const std::vector<double> x = to_dense(src);
  std::vector<double> add, keep;
  std::vector<int64_t> add_shape, keep_shape;
  if (logits && options.additive_mask) {
    add = to_dense(*options.additive_mask);
    add_shape = shape_of(*options.additive_mask);
    if (options.additive_mask->rank == 0) add_shape = {};
    check_broadcast(fn, "additive_mask", add_shape, R.shape);
  }
  if (logits && options.bool_mask) {
    keep = to_dense(*options.bool_mask);
    keep_shape = shape_of(*options.bool_mask);
    if (options.bool_mask->rank == 0) keep_shape = {};
    check_broadcast(fn, "bool_mask", keep_shape, R.shape);
  }
  R.n = R.shape[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= R.shape[static_cast<size_t>(d)];
  for (int d = R.axis + 1; d < rank; ++d) inner *= R.shape[static_cast<size_t>(d)];
  R.rows = outer * inner;
  R.values.assign(static_cast<size_t>(R.rows * R.n), 0.0);
  std::vector<int64_t> index(static_cast<size_t>(rank));
  const int64_t total = outer * R.n * inner;
  for (int64_t i = 0; i < total; ++i) {
    int64_t rem = i;
    for (int d = rank - 1; d >= 0; --d) {
      index[static_cast<size_t>(d)] = rem % R.shape[static_cast<size_t>(d)];
      rem /= R.shape[static_cast<size_t>(d)];
    }
    const int64_t k = index[static_cast<size_t>(axis)];
    const int64_t o = i / (R.n * inner), j = i % inner;
    const int64_t r = o * inner + j;
    double v = x[static_cast<size_t>(i)];
    if (logits && f64) {
      double t = v * s64;
      if (!add.empty()) t += add[static_cast<size_t>(broadcast_index(add_shape, R.shape, index))];
      if (!keep.empty() && keep[static_cast<size_t>(broadcast_index(keep_shape, R.shape, index))] == 0.0) {
        t = -std::numeric_limits<double>::infinity();
      }
      v = t;
    } else if (logits) {
      float t = static_cast<float>(v) * s;
      if (!add.empty()) t = t + static_cast<float>(add[static_cast<size_t>(broadcast_index(add_shape, R.shape, index))]);
      if (!keep.empty() && keep[static_cast<size_t>(broadcast_index(keep_shape, R.shape, index))] == 0.0) {
        t = -std::numeric_limits<float>::infinity();
      }
      v = t;
    }
    R.values[static_cast<size_t>(r * R.n + k)] = v;
  }
  return R;
}

std::vector<char> ref_masked(const char* fn, const TensorView& src, const SoftmaxOptions& options) {
  // The logits of an all-zero source: -inf exactly where a mask hides the entry.
  const TensorView& s = src;
  std::vector<int64_t> shape(s.shape, s.shape + s.rank);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::vector<float> zeros(static_cast<size_t>(std::max<int64_t>(count, 1)), 0.0f);
  const TensorView z = make_view(zeros.data(), DType::kF32, s.rank, shape.data(), nullptr);
  SoftmaxOptions o = options;
  o.scale = 1.0f;
  o.temperature = 1.0f;
  const RefRows R = ref_rows(fn, z, o, true);
  std::vector<char> masked(R.values.size());
  for (size_t i = 0; i < masked.size(); ++i) masked[i] = R.values[i] == -std::numeric_limits<double>::infinity();
  return masked;
}

std::vector<int64_t> i64_dense(const TensorView& view) {
  int64_t count = 1;
  for (int d = 0; d < view.rank; ++d) count *= view.shape[d];
  std::vector<int64_t> out(static_cast<size_t>(count));
  const auto* p = static_cast<const int64_t*>(view.data);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rem = i, off = 0;
    for (int d = view.rank - 1; d >= 0; --d) {
      off += (rem % view.shape[d]) * view.strides[d];
      rem /= view.shape[d];
    }
    out[static_cast<size_t>(i)] = p[off];
  }
  return out;
}

std::vector<double> ref_row_values(const char* fn, const TensorView& view, const RefRows& R) {
  std::vector<int64_t> keepdim = R.shape;
  keepdim[static_cast<size_t>(R.axis)] = 1;
  std::vector<int64_t> vshape(view.shape, view.shape + view.rank);
  check_broadcast(fn, "row operand", vshape, keepdim);
  std::vector<double> dense;
  if (view.dtype == DType::kI64) {
    // to_dense handles f32/bool only.
    for (int64_t v : i64_dense(view)) dense.push_back(static_cast<double>(v));
  } else {
    dense = to_dense(view);
  }
  std::vector<double> out(static_cast<size_t>(R.rows));
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(R.axis) + 1; d < R.shape.size(); ++d) inner *= R.shape[d];
  std::vector<int64_t> index(R.shape.size());
  for (int64_t r = 0; r < R.rows; ++r) {
    int64_t o = r / inner, j = r % inner;
    for (size_t d = R.shape.size(); d-- > 0;) {
      if (static_cast<int>(d) == R.axis) {
        index[d] = 0;
      } else if (static_cast<int>(d) > R.axis) {
        index[d] = j % R.shape[d];
        j /= R.shape[d];
      } else {
        index[d] = o % R.shape[d];
        o /= R.shape[d];
      }
    }
    out[static_cast<size_t>(r)] = dense[static_cast<size_t>(broadcast_index(vshape, keepdim, index))];
  }
  return out;
}

}  // namespace smax::reference

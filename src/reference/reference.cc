// src/reference/reference.cc: float64 oracles for the softmax family.
//
// Deliberately naive: every op walks the logical N-D index space with plain
// loops, gathers one row of the reduced axis into a double vector, and
// evaluates the textbook formula in double. No SIMD, no blocking, no threads.
// The only f32 arithmetic is the computation of the logits, which must be
// the exact f32 values the library feeds its kernels:
//   s = fl(scale / temperature),  t = fl(fl(x * s) + mask)   (f32),
//   t = -inf where the bool mask is 0,
// and everything after the logits is double.
//
// Masks broadcast with NumPy rules (right-aligned, like the library).
// Validation mirrors the public API (include/smax/softmax.h) for the inputs
// the reference sees (it has no dst): it throws smax::Error with
// Status::kInvalidArgument and a message naming the argument.
#include "reference/reference.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/rows.h"
#include "smax/error.h"

namespace smax::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const char* dtype_str(DType d) { return dtype_name(d); }

int dtype_bytes(DType d) { return d == DType::kBool ? 1 : 4; }

/// A validated view with rank >= 1 (rank 0 is treated as shape [1]).
struct View {
  const char* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 1;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int64_t numel = 0;
};

View check_view(const char* fn, const char* arg, const TensorView& v,
                const DType* expected) {
  if (v.rank < 0 || v.rank > kMaxRank) {
    fail(fn, std::string(arg) + " has rank " + std::to_string(v.rank) +
                 ", expected 0.." + std::to_string(kMaxRank));
  }
  if (v.dtype != DType::kF32 && v.dtype != DType::kBool) {
    fail(fn, std::string(arg) + " has an unknown dtype " +
                 std::to_string(static_cast<int>(v.dtype)));
  }
  if (expected != nullptr && v.dtype != *expected) {
    fail(fn, std::string(arg) + " has dtype " + dtype_str(v.dtype) + ", expected " +
                 dtype_str(*expected));
  }
  View out;
  out.data = static_cast<const char*>(v.data);
  out.dtype = v.dtype;
  if (v.rank == 0) {
    out.rank = 1;
    out.shape[0] = 1;
    out.strides[0] = 1;
  } else {
    out.rank = v.rank;
    for (int d = 0; d < v.rank; ++d) {
      out.shape[d] = v.shape[d];
      out.strides[d] = v.strides[d];
    }
  }
  int64_t numel = 1;
  for (int d = 0; d < out.rank; ++d) {
    if (out.shape[d] < 0) {
      fail(fn, std::string(arg) + " shape[" + std::to_string(d) + "] = " +
                   std::to_string(out.shape[d]) + " is negative");
    }
  }
  for (int d = 0; d < out.rank; ++d) {
    if (__builtin_mul_overflow(numel, out.shape[d], &numel)) {
      fail(fn, std::string(arg) + " element count overflows int64");
    }
  }
  out.numel = numel;
  if (numel == 0) return out;
  if (out.data == nullptr) {
    fail(fn, std::string(arg) + " data is null with a non-empty shape");
  }
  // Byte offsets of the first and last element along every dim, summed, must
  // stay inside int64 (both the most positive and the most negative offset).
  const int64_t elem = dtype_bytes(out.dtype);
  int64_t hi = 0, lo = 0;
  for (int d = 0; d < out.rank; ++d) {
    int64_t off = 0;
    if (__builtin_mul_overflow(out.shape[d] - 1, out.strides[d], &off) ||
        __builtin_mul_overflow(off, elem, &off) ||
        __builtin_add_overflow(off > 0 ? hi : lo, off, off > 0 ? &hi : &lo)) {
      fail(fn, std::string(arg) + " strides give byte offsets that overflow int64");
    }
  }
  return out;
}

int64_t normalise_axis(const char* fn, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    fail(fn, "axis " + std::to_string(axis) + " is out of range for rank " +
                 std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

float check_scale(const char* fn, const SoftmaxOptions& o) {
  if (!std::isfinite(o.scale) || !(o.scale > 0.0f)) {
    fail(fn, "scale " + std::to_string(o.scale) + " must be finite and > 0");
  }
  if (!std::isfinite(o.temperature) || !(o.temperature > 0.0f)) {
    fail(fn, "temperature " + std::to_string(o.temperature) + " must be finite and > 0");
  }
  const float s = o.scale / o.temperature;
  if (!std::isfinite(s) || !(s > 0.0f)) {
    fail(fn, "scale / temperature = " + std::to_string(s) + " must be finite and > 0");
  }
  return s;
}

void check_enums(const char* fn, const SoftmaxOptions& o) {
  const int a = static_cast<int>(o.algorithm);
  if (a < static_cast<int>(Algorithm::kAuto) || a > static_cast<int>(Algorithm::kOnline)) {
    fail(fn, "algorithm " + std::to_string(a) + " is not a valid smax::Algorithm");
  }
  const int e = static_cast<int>(o.empty_row);
  if (e != static_cast<int>(EmptyRow::kZero) && e != static_cast<int>(EmptyRow::kNan)) {
    fail(fn, "empty_row " + std::to_string(e) + " is not a valid smax::EmptyRow");
  }
  if (o.threads < 0) fail(fn, "threads " + std::to_string(o.threads) + " is negative");
}

/// Validates a mask and expands it to src's rank (NumPy broadcasting,
/// right-aligned: missing leading dims and dims of size 1 broadcast).
View check_mask(const char* fn, const char* arg, const TensorView& m, DType dtype,
                const View& src) {
  const View v = check_view(fn, arg, m, &dtype);
  const int mask_rank = m.rank == 0 ? 0 : v.rank;
  if (mask_rank > src.rank) {
    fail(fn, std::string(arg) + " has rank " + std::to_string(mask_rank) +
                 ", which does not broadcast to src's rank " + std::to_string(src.rank));
  }
  View out = v;
  out.rank = src.rank;
  const int lead = src.rank - mask_rank;
  for (int d = 0; d < src.rank; ++d) {
    out.shape[d] = d < lead ? 1 : v.shape[d - lead];
    out.strides[d] = d < lead ? 0 : v.strides[d - lead];
    if (out.shape[d] != src.shape[d] && out.shape[d] != 1) {
      fail(fn, std::string(arg) + " shape[" + std::to_string(d - lead) + "] = " +
                   std::to_string(out.shape[d]) + " does not broadcast to src's " +
                   std::to_string(src.shape[d]));
    }
  }
  return out;
}

/// Iteration geometry: (outer, n, inner) over the logical shape, plus the
/// decomposition of (outer, inner) back to multi-indices.
struct Geometry {
  int rank = 1;
  int axis = 0;
  int64_t shape[kMaxRank] = {};
  int64_t outer = 1, n = 1, inner = 1;

  Geometry(const View& v, int ax) : rank(v.rank), axis(ax) {
    for (int d = 0; d < rank; ++d) shape[d] = v.shape[d];
    for (int d = 0; d < axis; ++d) outer *= shape[d];
    n = shape[axis];
    for (int d = axis + 1; d < rank; ++d) inner *= shape[d];
  }
  /// Multi-index of row (o, j), axis entry 0.
  void index(int64_t o, int64_t j, int64_t* idx) const {
    for (int d = rank - 1; d > axis; --d) {
      idx[d] = j % shape[d];
      j /= shape[d];
    }
    idx[axis] = 0;
    for (int d = axis - 1; d >= 0; --d) {
      idx[d] = o % shape[d];
      o /= shape[d];
    }
  }
};

/// Element offset (in elements) of idx in v; dims of size 1 in v broadcast.
int64_t offset(const View& v, const int64_t* idx) {
  int64_t off = 0;
  for (int d = 0; d < v.rank; ++d) {
    if (v.shape[d] != 1) off += idx[d] * v.strides[d];
  }
  return off;
}

float load_f32(const View& v, int64_t off) {
  return reinterpret_cast<const float*>(v.data)[off];
}
uint8_t load_u8(const View& v, int64_t off) {
  return reinterpret_cast<const uint8_t*>(v.data)[off];
}

/// Everything one forward op needs, validated.
struct Forward {
  View src;
  Geometry geo;
  float s = 1.0f;
  bool has_add = false, has_bool = false;
  View add, mask;
  EmptyRow empty_row = EmptyRow::kZero;

  Forward(const char* fn, const TensorView& src_view, const SoftmaxOptions& o)
      : src(check_view(fn, "src", src_view, &kF32)),
        geo(src, static_cast<int>(normalise_axis(fn, o.axis, src.rank))) {
    s = check_scale(fn, o);
    check_enums(fn, o);
    if (o.additive_mask) {
      has_add = true;
      add = check_mask(fn, "additive_mask", *o.additive_mask, DType::kF32, src);
    }
    if (o.bool_mask) {
      has_bool = true;
      mask = check_mask(fn, "bool_mask", *o.bool_mask, DType::kBool, src);
    }
    empty_row = o.empty_row;
  }
  static constexpr DType kF32 = DType::kF32;

  /// The f32 logits of row (o, j), widened to double.
  void logits(int64_t o, int64_t j, std::vector<double>& t) const {
    int64_t idx[kMaxRank];
    geo.index(o, j, idx);
    t.resize(static_cast<size_t>(geo.n));
    for (int64_t k = 0; k < geo.n; ++k) {
      idx[geo.axis] = k;
      const float x = load_f32(src, offset(src, idx));
      float v = x;
      if (s != 1.0f) v = x * s;  // fl(x * s)
      if (has_add) {
        const float m = load_f32(add, offset(add, idx));
        v = v + m;  // fl(fl(x * s) + mask)
      }
      if (has_bool && load_u8(mask, offset(mask, idx)) == 0) {
        v = -std::numeric_limits<float>::infinity();
      }
      t[static_cast<size_t>(k)] = static_cast<double>(v);
    }
  }
};

enum class RowKind { kNormal, kNan, kEmpty };

/// Classifies a row and returns its max and sum exp(t - max) for kNormal.
RowKind row_stats(const std::vector<double>& t, double* max, double* sum) {
  double m = -kInf;
  for (double v : t) {
    if (std::isnan(v) || v == kInf) return RowKind::kNan;
    if (v > m) m = v;
  }
  if (m == -kInf) return RowKind::kEmpty;
  double s = 0.0;
  for (double v : t) s += std::exp(v - m);
  *max = m;
  *sum = s;
  return RowKind::kNormal;
}

enum class Op { kSoftmax, kLogSoftmax, kLogSumExp };

std::vector<double> forward(const char* fn, Op op, const TensorView& src,
                            const SoftmaxOptions& o) {
  const Forward f(fn, src, o);
  const Geometry& g = f.geo;
  std::vector<double> out(
      static_cast<size_t>(op == Op::kLogSumExp ? g.outer * g.inner : g.outer * g.n * g.inner));
  std::vector<double> t;
  for (int64_t oi = 0; oi < g.outer; ++oi) {
    for (int64_t j = 0; j < g.inner; ++j) {
      f.logits(oi, j, t);
      double m = 0.0, sum = 0.0;
      RowKind kind = g.n == 0 ? RowKind::kEmpty : row_stats(t, &m, &sum);
      if (op == Op::kLogSumExp) {
        double v;
        if (g.n == 0) {
          v = -kInf;
        } else if (kind == RowKind::kNan) {
          v = kNaN;
        } else if (kind == RowKind::kEmpty) {
          v = f.empty_row == EmptyRow::kZero ? -kInf : kNaN;
        } else {
          v = m + std::log(sum);
        }
        out[static_cast<size_t>(oi * g.inner + j)] = v;
        continue;
      }
      const double log_sum = kind == RowKind::kNormal ? std::log(sum) : 0.0;
      for (int64_t k = 0; k < g.n; ++k) {
        const double tk = t[static_cast<size_t>(k)];
        double v;
        if (kind == RowKind::kNan) {
          v = kNaN;
        } else if (kind == RowKind::kEmpty) {
          v = f.empty_row == EmptyRow::kNan ? kNaN : (op == Op::kSoftmax ? 0.0 : -kInf);
        } else if (op == Op::kSoftmax) {
          v = std::exp(tk - m) / sum;
        } else {
          v = (tk - m) - log_sum;
        }
        out[static_cast<size_t>((oi * g.n + k) * g.inner + j)] = v;
      }
    }
  }
  return out;
}

enum class Bwd { kSoftmax, kLogSoftmax };

std::vector<double> backward(const char* fn, Bwd op, const TensorView& y_view,
                             const TensorView& dy_view, const SoftmaxOptions& o) {
  constexpr DType kF32 = DType::kF32;
  const View y = check_view(fn, "y", y_view, &kF32);
  const View dy = check_view(fn, "dy", dy_view, &kF32);
  if (y.rank != dy.rank) {
    fail(fn, "dy has rank " + std::to_string(dy.rank) + " but y has rank " +
                 std::to_string(y.rank));
  }
  for (int d = 0; d < y.rank; ++d) {
    if (y.shape[d] != dy.shape[d]) {
      fail(fn, "dy shape[" + std::to_string(d) + "] = " + std::to_string(dy.shape[d]) +
                   " does not match y's " + std::to_string(y.shape[d]));
    }
  }
  const Geometry g(y, static_cast<int>(normalise_axis(fn, o.axis, y.rank)));
  const double s = static_cast<double>(check_scale(fn, o));
  check_enums(fn, o);

  std::vector<double> out(static_cast<size_t>(g.outer * g.n * g.inner));
  std::vector<double> yr(static_cast<size_t>(g.n)), gr(static_cast<size_t>(g.n));
  int64_t idx[kMaxRank];
  for (int64_t oi = 0; oi < g.outer; ++oi) {
    for (int64_t j = 0; j < g.inner; ++j) {
      g.index(oi, j, idx);
      for (int64_t k = 0; k < g.n; ++k) {
        idx[g.axis] = k;
        yr[static_cast<size_t>(k)] = load_f32(y, offset(y, idx));
        gr[static_cast<size_t>(k)] = load_f32(dy, offset(dy, idx));
      }
      double acc = 0.0;  // <dy, y> or sum(dy)
      for (int64_t k = 0; k < g.n; ++k) {
        acc += op == Bwd::kSoftmax ? gr[static_cast<size_t>(k)] * yr[static_cast<size_t>(k)]
                                   : gr[static_cast<size_t>(k)];
      }
      for (int64_t k = 0; k < g.n; ++k) {
        const double yk = yr[static_cast<size_t>(k)], gk = gr[static_cast<size_t>(k)];
        double v;
        if (op == Bwd::kSoftmax) {
          v = s * yk * (gk - acc);
        } else {
          v = yk == -kInf ? 0.0 : s * (gk - std::exp(yk) * acc);
        }
        out[static_cast<size_t>((oi * g.n + k) * g.inner + j)] = v;
      }
    }
  }
  return out;
}

}  // namespace

std::vector<double> softmax(const TensorView& src, const SoftmaxOptions& options) {
  return forward("softmax", Op::kSoftmax, src, options);
}

std::vector<double> log_softmax(const TensorView& src, const SoftmaxOptions& options) {
  return forward("log_softmax", Op::kLogSoftmax, src, options);
}

std::vector<double> logsumexp(const TensorView& src, const SoftmaxOptions& options) {
  return forward("logsumexp", Op::kLogSumExp, src, options);
}

std::vector<double> softmax_backward(const TensorView& y, const TensorView& dy,
                                     const SoftmaxOptions& options) {
  return backward("softmax_backward", Bwd::kSoftmax, y, dy, options);
}

std::vector<double> log_softmax_backward(const TensorView& y, const TensorView& dy,
                                         const SoftmaxOptions& options) {
  return backward("log_softmax_backward", Bwd::kLogSoftmax, y, dy, options);
}

std::vector<double> to_dense(const TensorView& view) {
  const View v = check_view("to_dense", "view", view, nullptr);
  std::vector<double> out(static_cast<size_t>(v.numel));
  if (v.numel == 0) return out;
  int64_t idx[kMaxRank] = {};
  for (int64_t i = 0; i < v.numel; ++i) {
    int64_t rem = i;
    for (int d = v.rank - 1; d >= 0; --d) {
      idx[d] = rem % v.shape[d];
      rem /= v.shape[d];
    }
    int64_t off = 0;
    for (int d = 0; d < v.rank; ++d) off += idx[d] * v.strides[d];
    out[static_cast<size_t>(i)] = v.dtype == DType::kBool
                                      ? (load_u8(v, off) != 0 ? 1.0 : 0.0)
                                      : static_cast<double>(load_f32(v, off));
  }
  return out;
}

}  // namespace smax::reference

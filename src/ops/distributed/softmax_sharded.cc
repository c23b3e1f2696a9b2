// src/ops/distributed/softmax_sharded.cc: the vocabulary-parallel softmax
// family (include/smax/distributed.h): softmax, log_softmax, logsumexp,
// softmax_backward, log_softmax_backward.
//
// A sharded row is the long-row algebra of src/core/long_row.cc with the
// segments on different ranks. Each op: handshake (group.h: local validation
// by Rowwise, the same checks as the single-process op's, then the agreed row
// shape, dtypes, scale, temperature, empty_row), then per chunk of rows
// (sharded_common.h): a local scan of each row into a small record, ONE
// allgather of the chunk's records, a float64 merge in rank order (the same
// arithmetic on every rank), and the local output pass with the global state.
// One rank: the single-process op itself after the handshake (bit-equal).
//
// Bytes per row and rank on the wire (records; f64 logits / operands: the
// float64 path):
//   softmax, log_softmax, logsumexp  8 (f32 max m, f32 sum d of e^(t - m)),
//                                    16 in float64 (m, d as doubles)
//   softmax_backward                 8 (the float64 partial <dy, y>)
//   log_softmax_backward             8 (the float64 partial sum dy)
//
// Arithmetic (f32 path: f32 / bf16 / f16 operands, widened exactly by
// Rowwise, which also applies scale / temperature and both masks): the local
// online state of a row is kernels::online_segment on the segment grid of
// kSegment, merged in float64 in segment order (long_row.cc's
// online_normaliser); the merged state is M = max_k m_k,
// D = sum_k fl32(d_k) e^(m_k - M) in float64, rank order. The output pass
// is the segment kernels' with that state: softmax exp_scale_segment(shift M,
// factor fl32(1 / D)), log_softmax log_store_segment(M, fl32(log D)),
// logsumexp fl32(M + log D). Backward: the local dot_segment / sum_segment
// partials summed in float64 (segment order, then rank order), then
// softmax_backward_segment / log_softmax_backward_segment.
// bf16 / f16 softmax and log_softmax without masks, the class axis
// contiguous: the same kernels' any-type versions (kernels/
// segments_narrow.h) read the row in place and round the output in
// registers (the same bits as widening through Rowwise, without the copies).
// float64 path (any f64 input): kernels::exp_terms_row_f64 gives the local
// (max, compensated sum) and the exact-argument terms; softmax_j =
// term_j * (e^(m_k - M) / D), log_softmax_j = (t_j - M) - log D; backward
// partials are compensated float64 sums, dx as the single-process formula.
//
// Accuracy (tests/test_distributed_softmax.cc checks these against the
// single-process op on the concatenated row and the float64 reference):
// the single-process bound (include/smax/softmax.h) plus the exchange's
// rounding: fl32(d_k) is within 2^-24 relative, so D, hence every softmax
// output, moves by at most 2^-24 relative more (log_softmax / logsumexp by
// 2^-24 absolute more); backward partials travel as exact doubles (no
// added rounding beyond the float64 sum of P values). float64 path: the
// float64 bound (1e-14) holds as is (no f32 rounding on the wire).
// Special values as the single-process ops: NaN or +inf in any shard -> the
// whole row NaN on every rank; every entry of every shard masked ->
// empty_row. Bits do not depend on threads or the run: each row is computed
// by the same code whatever the task, and merged in rank order.
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/compensated.h"
#include "core/convert.h"
#include "core/execution.h"
#include "core/geometry.h"
#include "core/internal.h"
#include "core/long_row.h"
#include "core/rowwise.h"
#include "core/validate.h"
#include "kernels/kernels.h"
#include "kernels/segments_narrow.h"
#include "kernels/softmax_f64.h"
#include "ops/distributed/group.h"
#include "ops/distributed/sharded_common.h"
#include "smax/distributed.h"
#include "smax/runtime.h"
#include "smax/softmax.h"

namespace smax {
namespace detail::dist {
namespace {

using kernels::kSegment;
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

const char* forward_name(ForwardOp op) {
  switch (op) {
    case ForwardOp::kSoftmax: return "softmax";
    case ForwardOp::kLogSoftmax: return "log_softmax";
    case ForwardOp::kLogSumExp: return "logsumexp";
  }
  return "?";
}

void options_agreed(const SoftmaxOptions& o, std::vector<Agreed>& agreed) {
  agreed.push_back({"scale", bits(o.scale)});
  agreed.push_back({"temperature", bits(o.temperature)});
  agreed.push_back({"empty_row", static_cast<int64_t>(o.empty_row)});
  agreed.push_back({"algorithm", static_cast<int64_t>(o.algorithm)});
}

// The local online state of a contiguous f32 row (logits already formed):
// segments of kSegment merged in float64 in order, as long_row.cc does.
// NaN or +inf anywhere: d = NaN.
void local_state_f32(const float* t, int64_t n, float* m_out, double* d_out) {
  float m = -kInfF;
  double d = 0.0;
  bool nan = false;
  for (int64_t off = 0; off < n; off += kSegment) {
    const kernels::OnlineState s = kernels::online_segment(t + off, nullptr,
                                                           std::min(kSegment, n - off), 1.0f);
    if (std::isnan(s.m) || std::isnan(s.d)) {
      nan = true;
      break;
    }
    const float merged = std::max(m, s.m);
    if (merged == -kInfF) continue;
    d = d * std::exp(static_cast<double>(m) - merged) +
        s.d * std::exp(static_cast<double>(s.m) - merged);
    m = merged;
  }
  if (nan || m == kInfF || std::isnan(d)) {
    *m_out = m;
    *d_out = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  *m_out = m;
  *d_out = d;
}

// The merged state of one row from `ranks` records of 2 values (m, d).
struct RowState {
  enum Kind { kFinite, kEmpty, kNaN } kind = kFinite;
  double M = 0.0;
  double D = 0.0;
};
template <class T>
RowState merge_state(const std::vector<T>& all, int64_t chunk_values, int64_t i, int ranks) {
  RowState st;
  double M = -kInfD;
  for (int k = 0; k < ranks; ++k) {
    const T* r = all.data() + k * chunk_values + 2 * i;
    if (std::isnan(r[0]) || std::isnan(r[1]) || r[0] == static_cast<T>(kInfD)) {
      st.kind = RowState::kNaN;
      return st;
    }
    M = std::max(M, static_cast<double>(r[0]));
  }
  if (M == -kInfD) {
    st.kind = RowState::kEmpty;
    return st;
  }
  double D = 0.0;
  for (int k = 0; k < ranks; ++k) {
    const T* r = all.data() + k * chunk_values + 2 * i;
    if (r[0] == static_cast<T>(-kInfD)) continue;
    D += static_cast<double>(r[1]) * std::exp(static_cast<double>(r[0]) - M);
  }
  if (std::isnan(D) || !std::isfinite(D)) st.kind = RowState::kNaN;
  if (D == 0.0) st.kind = RowState::kEmpty;
  st.M = M;
  st.D = D;
  return st;
}

// A row whose value is fixed (NaN or empty) into out (n values) or *lse.
template <class T>
void constant_row(ForwardOp op, bool nan, EmptyRow empty_row, T* out, int64_t n, T* lse) {
  const bool is_nan = nan || empty_row == EmptyRow::kNan;
  const T q = std::numeric_limits<T>::quiet_NaN();
  const T inf = std::numeric_limits<T>::infinity();
  if (op == ForwardOp::kLogSumExp) {
    *lse = is_nan ? q : -inf;
    return;
  }
  const T v = is_nan ? q : (op == ForwardOp::kSoftmax ? T(0) : -inf);
  for (int64_t j = 0; j < n; ++j) out[j] = v;
}

// One rank's part of a forward op, rows in chunks (T: float or double arithmetic).
template <class T>
void forward_sharded(ForwardOp op, const Group& g, Rowwise& scan, Rowwise& store, int64_t rows,
                     EmptyRow empty_row) {
  constexpr bool kF64 = std::is_same_v<T, double>;
  const int64_t chunk = chunk_rows(g, 4 * static_cast<int64_t>(sizeof(T)), rows);
  const int64_t n = g.classes;
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t end = std::min(rows, begin + chunk);
    const int64_t values = 2 * (end - begin);
    std::vector<T> rec(static_cast<size_t>(values), T(0));
    for (int64_t i = 0; i < values; i += 2) rec[i] = -std::numeric_limits<T>::infinity();
    scan.run_rows<T>(begin, end, kF64 ? n : 0, [&](const RowArgsOf<T>& a) {
      T* r = rec.data() + 2 * (a.row - begin);
      if (a.n == 0) {
        r[0] = -std::numeric_limits<T>::infinity();
        r[1] = 0;
        return;
      }
      if constexpr (kF64) {
        const kernels::F64Terms s = kernels::exp_terms_row_f64(a.in[0], a.n, a.scratch);
        r[0] = std::isnan(s.sum) ? std::numeric_limits<double>::quiet_NaN() : s.max;
        r[1] = s.sum;
      } else {
        float m;
        double d;
        local_state_f32(a.in[0], a.n, &m, &d);
        r[0] = m;
        r[1] = static_cast<float>(d);  // the exchange's one rounding
      }
    });
    const std::vector<T> all = allgather_rows(g, rec);
    std::vector<RowState> st(static_cast<size_t>(end - begin));
    for (int64_t i = 0; i < end - begin; ++i) st[i] = merge_state(all, values, i, g.size);
    const int64_t extra = kF64 && op == ForwardOp::kSoftmax ? n : 0;
    store.run_rows<T>(begin, end, extra, [&](const RowArgsOf<T>& a) {
      const RowState& s = st[static_cast<size_t>(a.row - begin)];
      T* out = op == ForwardOp::kLogSumExp ? nullptr : a.out[0];
      T* lse = op == ForwardOp::kLogSumExp ? a.row_out[0] : nullptr;
      if (s.kind != RowState::kFinite) {
        constant_row<T>(op, s.kind == RowState::kNaN, empty_row, out, a.n, lse);
        return;
      }
      const double log_d = std::log(s.D);
      if (op == ForwardOp::kLogSumExp) {
        *lse = static_cast<T>(s.M + log_d);
        return;
      }
      const T* t = a.in[0];
      if constexpr (kF64) {
        if (op == ForwardOp::kSoftmax) {
          if (a.n == 0) return;
          const kernels::F64Terms loc = kernels::exp_terms_row_f64(t, a.n, a.scratch);
          if (loc.sum == 0.0) {  // this shard is fully masked
            for (int64_t j = 0; j < a.n; ++j) out[j] = 0.0;
            return;
          }
          const double c = std::exp(loc.max - s.M) / s.D;
          for (int64_t j = 0; j < a.n; ++j) out[j] = a.scratch[j] * c;
        } else {
          for (int64_t j = 0; j < a.n; ++j) out[j] = (t[j] - s.M) - log_d;
        }
      } else {
        const float shift = static_cast<float>(s.M);  // an f32 value (a rank's max)
        const float factor = static_cast<float>(1.0 / s.D);
        const float log_sum = static_cast<float>(log_d);
        for (int64_t off = 0; off < a.n; off += kSegment) {
          const int64_t len = std::min(kSegment, a.n - off);
          if (op == ForwardOp::kSoftmax) {
            kernels::exp_scale_segment(t + off, nullptr, len, 1.0f, shift, factor, out + off);
          } else {
            kernels::log_store_segment(t + off, nullptr, len, 1.0f, shift, log_sum, out + off);
          }
        }
      }
    });
  }
}

// The direct path of softmax / log_softmax for bf16 / f16 storage (src or
// dst narrow, neither f64), no masks, the class axis contiguous in src and
// dst: the segment kernels of kernels/segments_narrow.h read each row in
// its own type and round the outputs once in registers, so no widened copy
// of the row is made (the Rowwise path gathers it twice). The same
// arithmetic as the Rowwise path (t = fl(x * scale), the f32 kernels'
// partials and outputs): the same bits.
struct DirectRows {
  Geometry g;  // operand 0 src, 1 dst
  DType src_type, dst_type;
  float scale;
  int threads;
  kernels::SegmentIn seg(int64_t row_off, int64_t off, int64_t len) const {
    kernels::SegmentIn in;
    in.x = g.at(0, row_off + off);
    in.type = src_type;
    in.scale = scale;
    in.n = len;
    return in;
  }
  kernels::SegmentOut sink(int64_t row_off, int64_t off) const {
    return {g.at(1, row_off + off), dst_type};
  }
  // fn(row, src offset, dst offset) for rows [begin, end) on the row-task grid.
  template <class Fn>
  void for_rows(int64_t begin, int64_t end, Fn&& fn) const {
    const int64_t per_task = rows_per_task(g.n);
    const int64_t tasks = (end - begin + per_task - 1) / per_task;
    run_parallel(tasks, threads, [&](int64_t task) {
      const int64_t b = begin + task * per_task;
      const int64_t e = std::min(end, b + per_task);
      int64_t off[kMaxOperands];
      for (int64_t row = b; row < e; ++row) {
        g.row_offsets(row, off);
        fn(row, off[0], off[1]);
      }
    });
  }
};

std::optional<DirectRows> direct_rows(ForwardOp op, const TensorView& src_in,
                                      const TensorView& dst_in, const SoftmaxOptions& o,
                                      int axis) {
  auto narrow_or_f32 = [](DType t) {
    return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
  };
  if (op == ForwardOp::kLogSumExp || o.additive_mask || o.bool_mask) return std::nullopt;
  if (!narrow_or_f32(src_in.dtype) || !narrow_or_f32(dst_in.dtype)) return std::nullopt;
  if (src_in.dtype == DType::kF32 && dst_in.dtype == DType::kF32) return std::nullopt;
  const TensorView src = as_rank1_if_scalar(src_in), dst = as_rank1_if_scalar(dst_in);
  int64_t strides[kMaxOperands][kMaxRank] = {};
  for (int d = 0; d < src.rank; ++d) {
    strides[0][d] = src.strides[d];
    strides[1][d] = dst.strides[d];
  }
  char* bases[kMaxOperands] = {static_cast<char*>(src.data), static_cast<char*>(dst.data),
                               nullptr, nullptr};
  const int sizes[kMaxOperands] = {dtype_size(src.dtype), dtype_size(dst.dtype), 4, 4};
  DirectRows d;
  d.g = make_geometry(src, axis, 2, bases, sizes, strides);
  if (d.g.n > 1 && (d.g.axis_stride[0] != 1 || d.g.axis_stride[1] != 1)) return std::nullopt;
  d.src_type = src.dtype;
  d.dst_type = dst.dtype;
  d.scale = check_options(o, forward_name(op));  // validated already: the f32 multiplier
  d.threads = o.threads > 0 ? o.threads : max_threads();
  return d;
}

void forward_direct(ForwardOp op, const Group& grp, const DirectRows& d, int64_t rows,
                    EmptyRow empty_row) {
  const int64_t chunk = chunk_rows(grp, 16, rows);
  const int64_t n = d.g.n;
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t end = std::min(rows, begin + chunk);
    const int64_t values = 2 * (end - begin);
    std::vector<float> rec(static_cast<size_t>(values), 0.0f);
    for (int64_t i = 0; i < values; i += 2) rec[i] = -kInfF;
    d.for_rows(begin, end, [&](int64_t row, int64_t so, int64_t) {
      float m = -kInfF;
      double sum = 0.0;
      bool nan = false;
      for (int64_t off = 0; off < n; off += kSegment) {
        const kernels::OnlineState st =
            kernels::online_segment_any(d.seg(so, off, std::min(kSegment, n - off)));
        if (std::isnan(st.m) || std::isnan(st.d)) {
          nan = true;
          break;
        }
        const float merged = std::max(m, st.m);
        if (merged == -kInfF) continue;
        sum = sum * std::exp(static_cast<double>(m) - merged) +
              st.d * std::exp(static_cast<double>(st.m) - merged);
        m = merged;
      }
      float* r = rec.data() + 2 * (row - begin);
      r[0] = m;
      r[1] = nan || m == kInfF || std::isnan(sum) ? std::numeric_limits<float>::quiet_NaN()
                                                  : static_cast<float>(sum);
    });
    const std::vector<float> all = allgather_rows(grp, rec);
    d.for_rows(begin, end, [&](int64_t row, int64_t so, int64_t dof) {
      const RowState s = merge_state(all, values, row - begin, grp.size);
      if (s.kind != RowState::kFinite) {
        const bool is_nan = s.kind == RowState::kNaN || empty_row == EmptyRow::kNan;
        const float v = is_nan ? std::numeric_limits<float>::quiet_NaN()
                               : (op == ForwardOp::kSoftmax ? 0.0f : -kInfF);
        for (int64_t j = 0; j < n; ++j) store_f32(d.g.at(1, dof + j), d.dst_type, v);
        return;
      }
      const float shift = static_cast<float>(s.M);
      const float factor = static_cast<float>(1.0 / s.D);
      const float log_sum = static_cast<float>(std::log(s.D));
      for (int64_t off = 0; off < n; off += kSegment) {
        const int64_t len = std::min(kSegment, n - off);
        if (op == ForwardOp::kSoftmax) {
          kernels::exp_scale_segment_any(d.seg(so, off, len), shift, factor, d.sink(dof, off));
        } else {
          kernels::log_store_segment_any(d.seg(so, off, len), shift, log_sum, d.sink(dof, off));
        }
      }
    });
  }
}

void run_forward(ForwardOp op, Communicator& comm, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& options) {
  const char* name = forward_name(op);
  std::optional<Rowwise> scan, store;
  std::vector<Agreed> agreed;
  row_shape_agreed(src, options.axis, agreed);
  agreed.push_back({"src dtype", static_cast<int64_t>(src.dtype)});
  agreed.push_back({"dst dtype", static_cast<int64_t>(dst.dtype)});
  options_agreed(options, agreed);
  int64_t rows = 0;
  const Group g = begin(comm, name, agreed, shard_classes(src, options.axis), [&] {
    scan.emplace(name, src, "src", /*src_is_logits=*/true, options);
    store.emplace(name, src, "src", /*src_is_logits=*/true, options);
    if (op == ForwardOp::kLogSumExp) {
      store->add_row_output(dst, "dst");
    } else {
      store->add_output(dst, "dst", /*allow_alias=*/true);
    }
    // Validates every operand now (run_rows finishes the Rowwise; no row runs).
    scan->run_rows<float>(0, 0, 0, [](const RowArgs&) {});
    store->run_rows<float>(0, 0, 0, [](const RowArgs&) {});
    rows = count_rows(as_rank1_if_scalar(src), scan->axis());
  });
  if (g.size == 1) {  // nothing to exchange: the single-process op (bit-equal)
    switch (op) {
      case ForwardOp::kSoftmax: smax::softmax(src, dst, options); break;
      case ForwardOp::kLogSoftmax: smax::log_softmax(src, dst, options); break;
      case ForwardOp::kLogSumExp: smax::logsumexp(src, dst, options); break;
    }
    return;
  }
  if (const auto d = direct_rows(op, src, dst, options, scan->axis())) {
    forward_direct(op, g, *d, rows, options.empty_row);
  } else if (scan->any_input_f64()) {
    forward_sharded<double>(op, g, *scan, *store, rows, options.empty_row);
  } else {
    forward_sharded<float>(op, g, *scan, *store, rows, options.empty_row);
  }
}

// ---- backward ----------------------------------------------------------------

template <class T>
void backward_sharded(BackwardOp op, const Group& g, Rowwise& scan, Rowwise& store,
                      int64_t rows) {
  constexpr bool kF64 = std::is_same_v<T, double>;
  const int64_t chunk = chunk_rows(g, 3 * static_cast<int64_t>(sizeof(T)), rows);
  const bool log = op == BackwardOp::kLogSoftmax;
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t end = std::min(rows, begin + chunk);
    std::vector<double> rec(static_cast<size_t>(end - begin));
    scan.run_rows<T>(begin, end, 0, [&](const RowArgsOf<T>& a) {
      const T* y = a.in[0];
      const T* dy = a.in[1];
      double partial = 0.0;
      if constexpr (kF64) {
        CompensatedSum s;
        for (int64_t j = 0; j < a.n; ++j) s.add(log ? dy[j] : y[j] * dy[j]);
        partial = s.value();
      } else {
        for (int64_t off = 0; off < a.n; off += kSegment) {
          const int64_t len = std::min(kSegment, a.n - off);
          partial += log ? kernels::sum_segment(dy + off, len)
                         : kernels::dot_segment(y + off, dy + off, len);
        }
      }
      rec[static_cast<size_t>(a.row - begin)] = partial;
    });
    const std::vector<double> all = allgather_rows(g, rec);
    const int64_t count = end - begin;
    std::vector<double> total(static_cast<size_t>(count), 0.0);
    for (int k = 0; k < g.size; ++k) {
      for (int64_t i = 0; i < count; ++i) total[i] += all[k * count + i];
    }
    store.run_rows<T>(begin, end, 0, [&](const RowArgsOf<T>& a) {
      const double r = total[static_cast<size_t>(a.row - begin)];
      const T* y = a.in[0];
      const T* dy = a.in[1];
      T* dx = a.out[0];
      if constexpr (kF64) {
        const double s = a.scale;
        for (int64_t j = 0; j < a.n; ++j) {
          if (log) {
            dx[j] = y[j] == -kInfD ? 0.0 : s * (dy[j] - std::exp(y[j]) * r);
          } else {
            dx[j] = s * y[j] * (dy[j] - r);
          }
        }
      } else {
        for (int64_t off = 0; off < a.n; off += kSegment) {
          const int64_t len = std::min(kSegment, a.n - off);
          if (log) {
            kernels::log_softmax_backward_segment(y + off, dy + off, len, r, a.scale, dx + off);
          } else {
            kernels::softmax_backward_segment(y + off, dy + off, len, r, a.scale, dx + off);
          }
        }
      }
    });
  }
}

void run_backward(BackwardOp op, Communicator& comm, const TensorView& y, const TensorView& dy,
                  const TensorView& dx, const SoftmaxOptions& options) {
  const char* name = op == BackwardOp::kSoftmax ? "softmax_backward" : "log_softmax_backward";
  // The backward passes take no masks (y is 0 / -inf where the forward masked).
  SoftmaxOptions o = options;
  o.additive_mask.reset();
  o.bool_mask.reset();
  std::optional<Rowwise> scan, store;
  std::vector<Agreed> agreed;
  row_shape_agreed(y, options.axis, agreed);
  agreed.push_back({"y dtype", static_cast<int64_t>(y.dtype)});
  agreed.push_back({"dy dtype", static_cast<int64_t>(dy.dtype)});
  agreed.push_back({"dx dtype", static_cast<int64_t>(dx.dtype)});
  options_agreed(options, agreed);
  int64_t rows = 0;
  const Group g = begin(comm, name, agreed, shard_classes(y, options.axis), [&] {
    check_options(options, name);
    check_float_view(y, name, "y");
    check_float_view(dy, name, "dy");
    check_float_view(dx, name, "dx");
    check_same_shape(as_rank1_if_scalar(y), "y", as_rank1_if_scalar(dy), "dy", name);
    check_same_shape(as_rank1_if_scalar(y), "y", as_rank1_if_scalar(dx), "dx", name);
    check_no_self_overlap(dx, "dx", name);
    check_disjoint_or_same(dx, "dx", dy, "dy", name, dx.dtype == dy.dtype);
    check_disjoint_or_same(dx, "dx", y, "y", name, false);
    scan.emplace(name, y, "y", /*src_is_logits=*/false, o);
    scan->add_input(dy, "dy");
    store.emplace(name, y, "y", /*src_is_logits=*/false, o);
    store->add_input(dy, "dy");
    store->add_output(dx, "dx", /*allow_alias=*/true);
    scan->run_rows<float>(0, 0, 0, [](const RowArgs&) {});
    store->run_rows<float>(0, 0, 0, [](const RowArgs&) {});
    rows = count_rows(as_rank1_if_scalar(y), scan->axis());
  });
  if (g.size == 1) {
    if (op == BackwardOp::kSoftmax) {
      smax::softmax_backward(y, dy, dx, options);
    } else {
      smax::log_softmax_backward(y, dy, dx, options);
    }
    return;
  }
  if (scan->any_input_f64()) {
    backward_sharded<double>(op, g, *scan, *store, rows);
  } else {
    backward_sharded<float>(op, g, *scan, *store, rows);
  }
}

}  // namespace
}  // namespace detail::dist

namespace distributed {

void softmax(Communicator& comm, const TensorView& src, const TensorView& dst,
             const SoftmaxOptions& options) {
  detail::dist::run_forward(detail::ForwardOp::kSoftmax, comm, src, dst, options);
}
void log_softmax(Communicator& comm, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& options) {
  detail::dist::run_forward(detail::ForwardOp::kLogSoftmax, comm, src, dst, options);
}
void logsumexp(Communicator& comm, const TensorView& src, const TensorView& dst,
               const SoftmaxOptions& options) {
  detail::dist::run_forward(detail::ForwardOp::kLogSumExp, comm, src, dst, options);
}
void softmax_backward(Communicator& comm, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const SoftmaxOptions& options) {
  detail::dist::run_backward(detail::BackwardOp::kSoftmax, comm, y, dy, dx, options);
}
void log_softmax_backward(Communicator& comm, const TensorView& y, const TensorView& dy,
                          const TensorView& dx, const SoftmaxOptions& options) {
  detail::dist::run_backward(detail::BackwardOp::kLogSoftmax, comm, y, dy, dx, options);
}

}  // namespace distributed
}  // namespace smax

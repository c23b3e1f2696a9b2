// src/core/long_row.cc: see long_row.h.
//
// Partial results of the segments are merged in segment order in float64,
// on one thread, after the parallel phase: the only source of
// non-associativity is thus fixed by the segment grid.
#include "core/long_row.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/internal.h"
#include "kernels/kernels.h"
#include "kernels/segments_narrow.h"
#include "kernels/softmax_narrow.h"

namespace smax::detail {
namespace {

using kernels::kSegment;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t segment_count(int64_t n) { return (n + kSegment - 1) / kSegment; }

// Runs fn(offset, length) for every segment, in parallel.
template <typename Fn>
void for_segments(int64_t n, int threads, Fn&& fn) {
  run_parallel(segment_count(n), threads, [&](int64_t k) {
    const int64_t offset = k * kSegment;
    fn(offset, std::min(kSegment, n - offset));
  });
}

// The segment kernels of one row and its output, each of any storage type
// (f32 / bf16 / f16): an f32 row into an f32 output takes the f32 kernels
// (kernels.h), any other mix their counterparts of segments_narrow.h, which
// give the same partials and the same outputs, rounded once.
struct SegmentedRow {
  AnyRowIn in;
  AnyRowOut out;
  const void* next_x = nullptr;  // the next row's x (a prefetch hint), nullable
  bool stream = false;           // f32 log_softmax stores streamed (kernels.h)

  bool f32_in() const { return in.type == DType::kF32; }
  bool f32_io() const { return f32_in() && out.type == DType::kF32; }
  const float* x(int64_t off) const { return static_cast<const float*>(in.x) + off; }
  const float* mask(int64_t off) const { return in.mask ? in.mask + off : nullptr; }
  float* dst(int64_t off) const { return static_cast<float*>(out.p) + off; }
  kernels::SegmentIn seg(int64_t off, int64_t len) const {
    kernels::SegmentIn s;
    s.x = static_cast<const char*>(in.x) + off * static_cast<int64_t>(dtype_size(in.type));
    s.type = in.type;
    s.mask = mask(off);
    s.scale = in.scale;
    s.n = len;
    return s;
  }
  kernels::SegmentOut sink(int64_t off) const {
    return {static_cast<char*>(out.p) + off * static_cast<int64_t>(dtype_size(out.type)),
            out.type};
  }

  kernels::SegmentRange minmax(int64_t off, int64_t len) const {
    return f32_in() ? kernels::minmax_segment(x(off), mask(off), len, in.scale)
                    : kernels::minmax_segment_any(seg(off, len));
  }
  // The exp pass's hints: the next row's segment, and this segment's
  // output when a later pass writes it (`out_written`).
  kernels::SegmentPrefetch prefetch(int64_t off, bool out_written) const {
    kernels::SegmentPrefetch p;
    if (next_x != nullptr) {
      p.next_bytes = dtype_size(in.type);
      p.next = static_cast<const char*>(next_x) + off * static_cast<int64_t>(p.next_bytes);
    }
    if (out_written && !(stream && f32_io())) {  // streamed stores read no line
      p.out = sink(off).p;
      p.out_bytes = dtype_size(out.type);
    }
    return p;
  }
  double expsum(int64_t off, int64_t len, float shift, float* store,
                const kernels::SegmentPrefetch& hint) const {
    return f32_in()
               ? kernels::expsum_segment(x(off), mask(off), len, in.scale, shift, store, hint)
               : kernels::expsum_segment_any(seg(off, len), shift, store, hint);
  }
  double expsum_ref(int64_t off, int64_t len, float nref, float m, float t_min, float* store,
                    const kernels::SegmentPrefetch& hint) const {
    return f32_in() ? kernels::expsum_ref_segment(x(off), mask(off), len, in.scale, nref, m,
                                                  t_min, store, hint)
                    : kernels::expsum_ref_segment_any(seg(off, len), nref, m, t_min, store, hint);
  }
  kernels::OnlineState online(int64_t off, int64_t len) const {
    return f32_in() ? kernels::online_segment(x(off), mask(off), len, in.scale)
                    : kernels::online_segment_any(seg(off, len));
  }
  kernels::TwoPassState twopass(int64_t off, int64_t len) const {
    return f32_in() ? kernels::twopass_segment(x(off), mask(off), len, in.scale)
                    : kernels::twopass_segment_any(seg(off, len));
  }
  void exp_scale(int64_t off, int64_t len, float shift, float factor) const {
    if (f32_io()) {
      kernels::exp_scale_segment(x(off), mask(off), len, in.scale, shift, factor, dst(off));
    } else {
      kernels::exp_scale_segment_any(seg(off, len), shift, factor, sink(off));
    }
  }
  void log_store(int64_t off, int64_t len, float shift, float log_sum) const {
    if (f32_io()) {
      kernels::log_store_segment(x(off), mask(off), len, in.scale, shift, log_sum, dst(off),
                                 stream);
    } else {
      kernels::log_store_segment_any(seg(off, len), shift, log_sum, sink(off));
    }
  }
  void twopass_store(int64_t off, int64_t len, double nu, double inv_mu) const {
    if (f32_io()) {
      kernels::twopass_store_segment(x(off), mask(off), len, in.scale, nu, inv_mu, dst(off));
    } else {
      kernels::twopass_store_segment_any(seg(off, len), nu, inv_mu, sink(off));
    }
  }
  // Stored exps (f32, `exps` = the row's first) scaled by factor into out:
  // in place for an f32 output (exps is then out), rounded otherwise.
  void scale_stored(const float* exps, int64_t off, int64_t len, float factor,
                    bool normal) const {
    if (out.type == DType::kF32) {
      if (normal) {
        kernels::scale_segment_normal(dst(off), len, factor);
      } else {
        kernels::scale_segment(dst(off), len, factor);
      }
    } else {
      kernels::scale_segment_any(exps + off, len, factor, !normal, sink(off));
    }
  }
  void put(float value) const { store_f32(out.p, out.type, value); }
  void fill(int64_t n, float value) const {
    if (out.type == DType::kF32) {
      std::fill(dst(0), dst(n), value);
      return;
    }
    const int64_t size = static_cast<int64_t>(dtype_size(out.type));
    for (int64_t i = 0; i < n; ++i) store_f32(static_cast<char*>(out.p) + i * size, out.type, value);
  }
};

// Writes the result of a row whose value is fixed (NaN row or empty row).
void write_constant_row(ForwardOp op, const SegmentedRow& row, int64_t n, bool is_nan,
                        EmptyRow empty_row) {
  const bool nan = is_nan || empty_row == EmptyRow::kNan;
  switch (op) {
    case ForwardOp::kSoftmax: row.fill(n, nan ? kNaN : 0.0f); break;
    case ForwardOp::kLogSoftmax: row.fill(n, nan ? kNaN : -kInf); break;
    case ForwardOp::kLogSumExp: row.put(nan ? kNaN : -kInf); break;
  }
}

struct Normaliser {
  enum Kind { kFinite, kEmpty, kNaNRow } kind = kFinite;
  float shift = 0.0f;  // the row max (or 0 for two-pass)
  float min = -kInf;   // the row min (three-pass), for softmax_outputs_normal
  double sum = 0.0;    // sum exp(t - shift)
  double stored_sum = 0.0;  // the sum in the units of the stored terms
};

// The row's (min, max) from the segments' ranges; false for a NaN row.
bool row_range(const SegmentedRow& row, int64_t n, int threads, float* m, float* t_min) {
  std::vector<kernels::SegmentRange> ranges(static_cast<size_t>(segment_count(n)));
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    ranges[off / kSegment] = row.minmax(off, len);
  });
  *m = -kInf;
  *t_min = kInf;
  for (const kernels::SegmentRange& r : ranges) {
    if (std::isnan(r.max)) return false;
    *m = std::max(*m, r.max);
    *t_min = std::isnan(r.min) ? r.min : std::min(*t_min, r.min);  // NaN sticks
  }
  return true;
}

// Max pass + sum pass shared by the three-pass algorithms. `store` (f32,
// nullable) gets the exp values (three-pass-reload softmax); the sum pass
// prefetches the next row and, if `out_written` (the last pass writes the
// output, not into `store`), the output.
Normaliser three_pass_normaliser(const SegmentedRow& row, int64_t n, float* store,
                                 bool out_written, int threads) {
  float m = -kInf, t_min = kInf;
  if (!row_range(row, n, threads, &m, &t_min)) return {Normaliser::kNaNRow};
  if (m == kInf) return {Normaliser::kNaNRow};
  if (m == -kInf) return {Normaliser::kEmpty};
  Normaliser result;
  std::vector<double> sums(static_cast<size_t>(segment_count(n)));
  // As the row kernels: reduce t itself against N = round(m log2e) (ExpRef)
  // when the target can do so exactly, else the TwoSum exp of t - m.
  const float nref = kernels::ref_exponent(m);
  const bool use_ref = !std::isnan(nref);
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    float* seg_store = store ? store + off : nullptr;
    const kernels::SegmentPrefetch hint = row.prefetch(off, out_written);
    sums[off / kSegment] = use_ref ? row.expsum_ref(off, len, nref, m, t_min, seg_store, hint)
                                   : row.expsum(off, len, m, seg_store, hint);
  });
  double total = 0.0;
  for (double s : sums) total += s;
  result.shift = m;
  result.min = t_min;
  result.stored_sum = total;
  // sum e^(t - m) = sum e^(t - N ln2) * e^(N ln2 - m), in float64.
  result.sum = use_ref ? total * std::exp(static_cast<double>(nref) * 0.69314718055994530942 -
                                          static_cast<double>(m))
                       : total;
  if (std::isnan(total)) result.kind = Normaliser::kNaNRow;
  return result;
}

Normaliser online_normaliser(const SegmentedRow& row, int64_t n, int threads) {
  std::vector<kernels::OnlineState> states(static_cast<size_t>(segment_count(n)));
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    states[off / kSegment] = row.online(off, len);
  });
  float m = -kInf;
  double d = 0.0;
  for (const auto& s : states) {
    if (std::isnan(s.m) || std::isnan(s.d)) return {Normaliser::kNaNRow};
    const float merged = std::max(m, s.m);
    if (merged == -kInf) continue;
    d = d * std::exp(static_cast<double>(m) - merged) +
        s.d * std::exp(static_cast<double>(s.m) - merged);
    m = merged;
  }
  if (m == kInf) return {Normaliser::kNaNRow};
  if (m == -kInf) return {Normaliser::kEmpty};
  Normaliser result;
  result.shift = m;
  result.sum = d;
  if (!std::isfinite(d)) result.kind = Normaliser::kNaNRow;
  return result;
}

// Two-pass state of the whole row; false when a segment was out of range.
bool twopass_state(const SegmentedRow& row, int64_t n, int threads, double* mu, double* nu) {
  std::vector<kernels::TwoPassState> states(static_cast<size_t>(segment_count(n)));
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    states[off / kSegment] = row.twopass(off, len);
  });
  double m = 0.0, e = -std::numeric_limits<double>::infinity();
  for (const auto& s : states) {
    if (!s.in_range) return false;
    const double merged = std::max(e, s.nu);
    if (std::isnan(s.mu) || std::isnan(s.nu)) {
      m = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    if (merged == -std::numeric_limits<double>::infinity()) continue;
    m = m * std::exp2(e - merged) + s.mu * std::exp2(s.nu - merged);
    e = merged;
  }
  *mu = m;
  *nu = e;
  return true;
}

// log_softmax into a bf16 / f16 output: rows whose f32 outputs would have a
// max above -kNearZeroLogSumBound (y_max = (m - shift) - log_sum) take
// log_sum = log1p(s1) instead (kernels/softmax_narrow.h), computed from the
// f32 logits written to `scratch` (n floats); returns the log_sum to store
// with shift m, or `log_sum` unchanged with `*shift` for other rows.
float near_zero_refinement(const SegmentedRow& row, int64_t n, float m, float* shift,
                           float log_sum, float* scratch, int threads) {
  const float y_max = (m - *shift) - log_sum;
  if (row.out.type == DType::kF32 || !(y_max > -kernels::kNearZeroLogSumBound)) return log_sum;
  const SegmentedRow logits{row.in, AnyRowOut{scratch, DType::kF32}};
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    logits.log_store(off, len, 0.0f, 0.0f);  // (t - 0) - 0 == t
  });
  *shift = m;
  return kernels::near_zero_log_sum(scratch, static_cast<size_t>(n), m);
}

void segmented_forward(ForwardOp op, Algorithm algorithm, const SegmentedRow& row, int64_t n,
                       EmptyRow empty_row, float* scratch, int threads) {
  if (algorithm == Algorithm::kTwoPass) {
    double mu = 0.0, nu = 0.0;
    if (twopass_state(row, n, threads, &mu, &nu)) {
      if (std::isnan(mu) || !std::isfinite(mu)) {
        return write_constant_row(op, row, n, true, empty_row);
      }
      if (mu == 0.0) return write_constant_row(op, row, n, false, empty_row);
      const double lse = nu * 0.69314718055994530942 + std::log(mu);
      if (op == ForwardOp::kSoftmax) {
        const double inv_mu = 1.0 / mu;
        for_segments(n, threads, [&](int64_t off, int64_t len) {
          row.twopass_store(off, len, nu, inv_mu);
        });
      } else if (op == ForwardOp::kLogSoftmax) {
        float hi = static_cast<float>(lse);
        float lo = static_cast<float>(lse - hi);
        if (row.out.type != DType::kF32) {
          float m = -kInf, t_min = kInf;
          if (row_range(row, n, threads, &m, &t_min)) {
            lo = near_zero_refinement(row, n, m, &hi, lo, scratch, threads);
          }
        }
        for_segments(n, threads, [&](int64_t off, int64_t len) { row.log_store(off, len, hi, lo); });
      } else {
        row.put(static_cast<float>(lse));
      }
      return;
    }
    algorithm = Algorithm::kThreePassReload;  // |t| too large for the split
  }

  const bool store_exp = op == ForwardOp::kSoftmax && algorithm == Algorithm::kThreePassReload;
  float* exps = store_exp ? (row.out.type == DType::kF32 ? row.dst(0) : scratch) : nullptr;
  const bool out_written = op != ForwardOp::kLogSumExp && !(exps != nullptr && exps == row.out.p);
  const Normaliser norm = algorithm == Algorithm::kOnline
                              ? online_normaliser(row, n, threads)
                              : three_pass_normaliser(row, n, exps, out_written, threads);
  if (norm.kind != Normaliser::kFinite) {
    return write_constant_row(op, row, n, norm.kind == Normaliser::kNaNRow, empty_row);
  }
  switch (op) {
    case ForwardOp::kSoftmax: {
      if (store_exp) {
        const float factor = static_cast<float>(1.0 / norm.stored_sum);
        const bool normal = kernels::softmax_outputs_normal(norm.min, norm.shift, n);
        for_segments(n, threads, [&](int64_t off, int64_t len) {
          row.scale_stored(exps, off, len, factor, normal);
        });
      } else {
        const float factor = static_cast<float>(1.0 / norm.sum);
        for_segments(n, threads, [&](int64_t off, int64_t len) {
          row.exp_scale(off, len, norm.shift, factor);
        });
      }
      break;
    }
    case ForwardOp::kLogSoftmax: {
      float shift = norm.shift;
      const float log_sum = near_zero_refinement(
          row, n, norm.shift, &shift, static_cast<float>(std::log(norm.sum)), scratch, threads);
      for_segments(n, threads, [&](int64_t off, int64_t len) {
        row.log_store(off, len, shift, log_sum);
      });
      break;
    }
    case ForwardOp::kLogSumExp:
      row.put(static_cast<float>(norm.shift + std::log(norm.sum)));
      break;
  }
}

}  // namespace

void rows_kernel(ForwardOp op, const kernels::Rows& rows, Algorithm algorithm) {
  switch (op) {
    case ForwardOp::kSoftmax: kernels::softmax_rows(rows, algorithm); break;
    case ForwardOp::kLogSoftmax: kernels::log_softmax_rows(rows, algorithm); break;
    case ForwardOp::kLogSumExp: kernels::logsumexp_rows(rows, algorithm); break;
  }
}

kernels::Rows one_row(const float* x, const float* mask, int64_t n, float scale,
                      EmptyRow empty_row, float* dst) {
  kernels::Rows rows;
  rows.src = x;
  rows.dst = dst;
  rows.mask = mask;
  rows.rows = 1;
  rows.cols = n;
  rows.scale = scale;
  rows.empty_row = empty_row;
  return rows;
}

void softmax_row_reload(const float* x, int64_t n, float scale, EmptyRow empty_row, float* y) {
  kernels::softmax_rows(one_row(x, nullptr, n, scale, empty_row, y),
                        Algorithm::kThreePassReload);
}

void forward_row(ForwardOp op, Algorithm algorithm, const float* x, const float* mask, int64_t n,
                 float scale, EmptyRow empty_row, float* dst, int threads, const void* next_x,
                 bool stream) {
  if (n < kSegment) {
    rows_kernel(op, one_row(x, mask, n, scale, empty_row, dst), algorithm);
    return;
  }
  segmented_forward(op, algorithm,
                    SegmentedRow{AnyRowIn{x, DType::kF32, mask, scale}, AnyRowOut{dst, DType::kF32},
                                 next_x, stream},
                    n, empty_row, nullptr, threads);
}

void forward_row_any(ForwardOp op, Algorithm algorithm, const AnyRowIn& in, int64_t n,
                     EmptyRow empty_row, const AnyRowOut& out, float* scratch, int threads,
                     const void* next_x) {
  if (in.type == DType::kF32 && out.type == DType::kF32) {
    forward_row(op, algorithm, static_cast<const float*>(in.x), in.mask, n, in.scale, empty_row,
                static_cast<float*>(out.p), threads, next_x);
    return;
  }
  if (n < kSegment) {
    kernels::NarrowRows rows;
    rows.src = in.x;
    rows.src_type = in.type;
    rows.dst = out.p;
    rows.dst_type = out.type;
    rows.mask = in.mask;
    rows.rows = 1;
    rows.cols = n;
    rows.scale = in.scale;
    rows.empty_row = empty_row;
    rows.scratch = scratch;
    switch (op) {
      case ForwardOp::kSoftmax: kernels::softmax_rows_narrow(rows, algorithm); break;
      case ForwardOp::kLogSoftmax: kernels::log_softmax_rows_narrow(rows, algorithm); break;
      case ForwardOp::kLogSumExp: kernels::logsumexp_rows_narrow(rows, algorithm); break;
    }
    return;
  }
  segmented_forward(op, algorithm, SegmentedRow{in, out, next_x}, n, empty_row, scratch, threads);
}

void rows_kernel(BackwardOp op, const kernels::BackwardRows& rows) {
  if (op == BackwardOp::kSoftmax) {
    kernels::softmax_backward_rows(rows);
  } else {
    kernels::log_softmax_backward_rows(rows);
  }
}

void backward_row(BackwardOp op, const float* y, const float* dy, int64_t n, float scale,
                  float* dx, int threads, bool stream) {
  if (n < kSegment) {
    kernels::BackwardRows rows;
    rows.y = y;
    rows.dy = dy;
    rows.dx = dx;
    rows.rows = 1;
    rows.cols = n;
    rows.scale = scale;
    rows.stream_stores = stream;
    rows_kernel(op, rows);
    return;
  }
  std::vector<double> partial(static_cast<size_t>(segment_count(n)));
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    partial[off / kSegment] = op == BackwardOp::kSoftmax
                                  ? kernels::dot_segment(y + off, dy + off, len)
                                  : kernels::sum_segment(dy + off, len);
  });
  double total = 0.0;
  for (double p : partial) total += p;
  const double reduced = total;
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    if (op == BackwardOp::kSoftmax) {
      kernels::softmax_backward_segment(y + off, dy + off, len, reduced, scale, dx + off, stream);
    } else {
      kernels::log_softmax_backward_segment(y + off, dy + off, len, reduced, scale, dx + off,
                                            stream);
    }
  });
}

}  // namespace smax::detail

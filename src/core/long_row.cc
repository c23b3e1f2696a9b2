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

#include "kernels/kernels.h"
#include "core/internal.h"

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

void fill(float* dst, int64_t n, float value) { std::fill(dst, dst + n, value); }

// Writes the result of a row whose value is fixed (NaN row or empty row).
void write_constant_row(ForwardOp op, float* dst, int64_t n, bool is_nan, EmptyRow empty_row) {
  const bool nan = is_nan || empty_row == EmptyRow::kNan;
  switch (op) {
    case ForwardOp::kSoftmax: fill(dst, n, nan ? kNaN : 0.0f); break;
    case ForwardOp::kLogSoftmax: fill(dst, n, nan ? kNaN : -kInf); break;
    case ForwardOp::kLogSumExp: *dst = nan ? kNaN : -kInf; break;
  }
}

struct Normaliser {
  enum Kind { kFinite, kEmpty, kNaNRow } kind = kFinite;
  float shift = 0.0f;  // the row max (or 0 for two-pass)
  float min = -kInf;   // the row min (three-pass), for softmax_outputs_normal
  double sum = 0.0;    // sum exp(t - shift)
  double stored_sum = 0.0;  // the sum in the units of the stored terms
};

// Max pass + sum pass shared by the three-pass algorithms. `store` gives the
// exp values to dst (three-pass-reload softmax).
Normaliser three_pass_normaliser(const float* x, const float* mask, int64_t n, float scale,
                                 float* store, int threads) {
  std::vector<kernels::SegmentRange> ranges(static_cast<size_t>(segment_count(n)));
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    ranges[off / kSegment] =
        kernels::minmax_segment(x + off, mask ? mask + off : nullptr, len, scale);
  });
  Normaliser result;
  float m = -kInf, t_min = kInf;
  for (const kernels::SegmentRange& r : ranges) {
    if (std::isnan(r.max)) return {Normaliser::kNaNRow};
    m = std::max(m, r.max);
    t_min = std::isnan(r.min) ? r.min : std::min(t_min, r.min);  // NaN sticks
  }
  if (m == kInf) return {Normaliser::kNaNRow};
  if (m == -kInf) return {Normaliser::kEmpty};
  std::vector<double> sums(ranges.size());
  // As the row kernels: reduce t itself against N = round(m log2e) (ExpRef)
  // when the target can do so exactly, else the TwoSum exp of t - m.
  const float nref = kernels::ref_exponent(m);
  const bool use_ref = !std::isnan(nref);
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    const float* seg_mask = mask ? mask + off : nullptr;
    float* seg_store = store ? store + off : nullptr;
    sums[off / kSegment] =
        use_ref ? kernels::expsum_ref_segment(x + off, seg_mask, len, scale, nref, m, t_min,
                                              seg_store)
                : kernels::expsum_segment(x + off, seg_mask, len, scale, m, seg_store);
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

Normaliser online_normaliser(const float* x, const float* mask, int64_t n, float scale,
                             int threads) {
  std::vector<kernels::OnlineState> states(static_cast<size_t>(segment_count(n)));
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    states[off / kSegment] =
        kernels::online_segment(x + off, mask ? mask + off : nullptr, len, scale);
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
bool twopass_state(const float* x, const float* mask, int64_t n, float scale, int threads,
                   double* mu, double* nu) {
  std::vector<kernels::TwoPassState> states(static_cast<size_t>(segment_count(n)));
  for_segments(n, threads, [&](int64_t off, int64_t len) {
    states[off / kSegment] =
        kernels::twopass_segment(x + off, mask ? mask + off : nullptr, len, scale);
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

void segmented_forward(ForwardOp op, Algorithm algorithm, const float* x, const float* mask,
                       int64_t n, float scale, EmptyRow empty_row, float* dst, int threads) {
  auto seg_mask = [&](int64_t off) { return mask ? mask + off : nullptr; };

  if (algorithm == Algorithm::kTwoPass) {
    double mu = 0.0, nu = 0.0;
    if (twopass_state(x, mask, n, scale, threads, &mu, &nu)) {
      if (std::isnan(mu) || !std::isfinite(mu)) return write_constant_row(op, dst, n, true, empty_row);
      if (mu == 0.0) return write_constant_row(op, dst, n, false, empty_row);
      const double lse = nu * 0.69314718055994530942 + std::log(mu);
      if (op == ForwardOp::kSoftmax) {
        const double inv_mu = 1.0 / mu;
        for_segments(n, threads, [&](int64_t off, int64_t len) {
          kernels::twopass_store_segment(x + off, seg_mask(off), len, scale, nu, inv_mu, dst + off);
        });
      } else if (op == ForwardOp::kLogSoftmax) {
        const float hi = static_cast<float>(lse);
        const float lo = static_cast<float>(lse - hi);
        for_segments(n, threads, [&](int64_t off, int64_t len) {
          kernels::log_store_segment(x + off, seg_mask(off), len, scale, hi, lo, dst + off);
        });
      } else {
        *dst = static_cast<float>(lse);
      }
      return;
    }
    algorithm = Algorithm::kThreePassReload;  // |t| too large for the split
  }

  const bool store_exp = op == ForwardOp::kSoftmax && algorithm == Algorithm::kThreePassReload;
  const Normaliser norm = algorithm == Algorithm::kOnline
                              ? online_normaliser(x, mask, n, scale, threads)
                              : three_pass_normaliser(x, mask, n, scale, store_exp ? dst : nullptr,
                                                      threads);
  if (norm.kind != Normaliser::kFinite) {
    return write_constant_row(op, dst, n, norm.kind == Normaliser::kNaNRow, empty_row);
  }
  switch (op) {
    case ForwardOp::kSoftmax: {
      if (store_exp) {
        const float factor = static_cast<float>(1.0 / norm.stored_sum);
        const bool normal = kernels::softmax_outputs_normal(norm.min, norm.shift, n);
        for_segments(n, threads, [&](int64_t off, int64_t len) {
          if (normal) {
            kernels::scale_segment_normal(dst + off, len, factor);
          } else {
            kernels::scale_segment(dst + off, len, factor);
          }
        });
      } else {
        const float factor = static_cast<float>(1.0 / norm.sum);
        for_segments(n, threads, [&](int64_t off, int64_t len) {
          kernels::exp_scale_segment(x + off, seg_mask(off), len, scale, norm.shift, factor,
                                     dst + off);
        });
      }
      break;
    }
    case ForwardOp::kLogSoftmax: {
      const float log_sum = static_cast<float>(std::log(norm.sum));
      for_segments(n, threads, [&](int64_t off, int64_t len) {
        kernels::log_store_segment(x + off, seg_mask(off), len, scale, norm.shift, log_sum,
                                   dst + off);
      });
      break;
    }
    case ForwardOp::kLogSumExp:
      *dst = static_cast<float>(norm.shift + std::log(norm.sum));
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
                 float scale, EmptyRow empty_row, float* dst, int threads) {
  if (n < kSegment) {
    rows_kernel(op, one_row(x, mask, n, scale, empty_row, dst), algorithm);
    return;
  }
  segmented_forward(op, algorithm, x, mask, n, scale, empty_row, dst, threads);
}

void rows_kernel(BackwardOp op, const kernels::BackwardRows& rows) {
  if (op == BackwardOp::kSoftmax) {
    kernels::softmax_backward_rows(rows);
  } else {
    kernels::log_softmax_backward_rows(rows);
  }
}

void backward_row(BackwardOp op, const float* y, const float* dy, int64_t n, float scale,
                  float* dx, int threads) {
  if (n < kSegment) {
    kernels::BackwardRows rows;
    rows.y = y;
    rows.dy = dy;
    rows.dx = dx;
    rows.rows = 1;
    rows.cols = n;
    rows.scale = scale;
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
      kernels::softmax_backward_segment(y + off, dy + off, len, reduced, scale, dx + off);
    } else {
      kernels::log_softmax_backward_segment(y + off, dy + off, len, reduced, scale, dx + off);
    }
  });
}

}  // namespace smax::detail

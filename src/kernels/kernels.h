// src/kernels/kernels.h: the contract between src/ops and the SIMD kernels.
//
// Kernels are written once on Google Highway (src/kernels/*.cc), compiled for
// every target, and dispatched at run time (HWY_DYNAMIC_DISPATCH) once per
// call of these functions. They are noexcept, allocation-free and assume
// validated input (ops validate). All pointers are to f32 unless noted.
//
// Logits. Every forward kernel reads "logits" t_i = fl(fl(x_i * scale) +
// mask_i): `x` is the source row, `scale` > 0 the f32 multiplier
// (scale / temperature, already rounded to f32 by ops), `mask` an optional
// additive f32 row (nullptr = none; -inf = masked). With scale == 1 and no
// mask, t = x exactly. The float64 reference uses the same f32 logits, so
// compute them as a Mul then an Add, never a fused MulAdd (the library is
// built with -ffp-contract=off so the compiler does not fuse them either).
//
// Accuracy every kernel must meet against float64 math on those logits, for
// any n and any data (see include/smax/softmax.h): softmax relative error
// <= 2e-6 for outputs >= 1e-30; log-softmax / logsumexp absolute error
// <= 2e-6 * (1 + |value|). In particular `t - m` must not lose the bits
// that f32 subtraction drops when |t - m| > 16 (use an exact difference, e.g.
// TwoSum, or a Dukhan-style reduction of t itself); sums are blocked: f32
// vector accumulators over short chains (<= 16 adds per lane), then float64
// across blocks, so the error does not grow with n.
//
// exp: magic-bias rounding, hi/lo Cody-Waite reduction, degree-5 minimax
// polynomial, and arguments below ln(FLT_MIN) flushed to exact 0 (so -inf
// logits give exactly 0 and no denormal is produced). NaN propagates.
//
// Special values inside a row (kernels implement these; ops rely on them):
//  - NaN anywhere -> every output of the row NaN (logsumexp NaN).
//  - +inf anywhere -> every output NaN.
//  - all logits -inf (every entry masked) -> `empty_row`:
//      kZero: softmax 0, log_softmax -inf, logsumexp -inf;
//      kNan:  NaN everywhere.
//  - n == 0 is never passed to row kernels (ops handle it).
// Tails use masked loads/stores (or a small stack copy on targets without
// them); no kernel reads or writes outside [p, p + n).
//
// Determinism: for the same inputs and target, results are bitwise identical
// whatever the alignment of the pointers (process tails and blocks on a grid
// relative to the row start, not to the address).
#pragma once

#include <cstdint>
#include <string>

#include "smax/options.h"

namespace smax::kernels {

// ---------------------------------------------------------------------------
// Whole rows, batched: `rows` rows, each contiguous along the row.
// Row r of the source is src + r * src_stride; likewise dst and mask
// (mask_stride 0 = the same mask row for every row). Rows may have any
// length >= 1; ops send rows longer than kSegment through the segment
// kernels below instead, so that long rows split across threads.
// dst may equal src (in place; then src_stride == dst_stride).
// ---------------------------------------------------------------------------
struct Rows {
  const float* src = nullptr;
  int64_t src_stride = 0;
  float* dst = nullptr;  ///< logsumexp: dst + r * dst_stride is row r's scalar
  int64_t dst_stride = 0;
  const float* mask = nullptr;
  int64_t mask_stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  float scale = 1.0f;
  EmptyRow empty_row = EmptyRow::kZero;
  /// Whether the last pass of three-pass log_softmax rows, and of three-pass
  /// reload softmax rows given `scratch`, writes dst with streaming
  /// (non-temporal) stores, for outputs too large to stay in cache
  /// (core/stream_stores.h decides). The bits are the same either way. A row
  /// too short for an aligned peel is stored as usual; other ops ignore it.
  /// The kernel fences its streaming stores before it returns.
  bool stream_stores = false;
  /// Reload softmax with stream_stores: softmax_stream_scratch_floats(cols)
  /// floats, 64-byte aligned, disjoint from src, dst and mask, that receive
  /// the exps (two rows, alternating: the batch is pipelined, a row's
  /// streamed scale pass running inside the next row's exp pass), so that
  /// dst is written once. nullptr: softmax does not stream.
  float* scratch = nullptr;
};
/// Floats of one scratch row of Rows::scratch (a multiple of 256 bytes, so
/// the second row stays aligned) and of the whole scratch.
constexpr int64_t stream_scratch_row_floats(int64_t cols) { return (cols + 63) / 64 * 64; }
constexpr int64_t softmax_stream_scratch_floats(int64_t cols) {
  return 2 * stream_scratch_row_floats(cols);
}

/// Algorithm must not be kAuto (ops resolve it).
void softmax_rows(const Rows& rows, Algorithm algorithm) noexcept;
void log_softmax_rows(const Rows& rows, Algorithm algorithm) noexcept;
void logsumexp_rows(const Rows& rows, Algorithm algorithm) noexcept;

// ---------------------------------------------------------------------------
// Segments of one long row. Ops cut a row of n >= kSegment elements into
// consecutive segments of kSegment (the last one shorter), run a "partial"
// kernel on each (possibly on different threads), merge the partials in
// segment order, then run a "store" kernel on each segment. The segment grid
// does not depend on the thread count, so neither do the results.
// `x`, `mask` (nullable), `dst` point at the segment's first element.
// ---------------------------------------------------------------------------
inline constexpr int64_t kSegment = int64_t{1} << 16;

/// (min_i t_i, max_i t_i) over the segment. max: -inf when all are -inf;
/// NaN when the segment holds NaN and nothing above -inf; otherwise NaN may
/// or may not propagate (callers detect NaN through the sums). min: the min
/// of the non-NaN entries (a NaN may be dropped), used to drop the exp's and
/// the scale's flush; safe with a dropped NaN because any NaN makes the sum
/// NaN and the row a NaN row before the flush matters.
struct SegmentRange {
  float min, max;
};
SegmentRange minmax_segment(const float* x, const float* mask, int64_t n, float scale) noexcept;
/// What a segment's exp pass (compute-bound) may bring into cache for the
/// passes after it, as hints (never read through, never faults): `next`,
/// the same segment of the row the caller computes next (`next_bytes` per
/// element), and `out`, this segment's output that a later pass writes
/// (`out_bytes` per element), prefetched for writing. Null: nothing.
struct SegmentPrefetch {
  const void* next = nullptr;
  size_t next_bytes = 0;
  void* out = nullptr;
  size_t out_bytes = 0;
};

/// sum_i exp(t_i - shift), blocked; if dst != nullptr also stores
/// dst_i = exp(t_i - shift). shift is finite.
double expsum_segment(const float* x, const float* mask, int64_t n, float scale,
                      float shift, float* dst, const SegmentPrefetch& prefetch = {}) noexcept;
/// The reference exponent N = round(m log2e) (f32) with which the active
/// target reduces t itself exactly (ExpRef, exp-inl.h) for a row of max m,
/// or NaN when |m| is beyond that target's exact range (then use
/// expsum_segment).
float ref_exponent(float m) noexcept;
/// sum_i e^(t_i - N ln2) with N = ref_exponent(m) for the row max m (no
/// TwoSum: the row kernels' exp), blocked; if dst != nullptr also stores the
/// terms. The caller converts: sum_i e^(t_i - m) = result * e^(N ln2 - m).
/// t_min (the row's min, or any lower bound) picks the exp as the row
/// kernels do: the table or flush-free exp where no term can be flushed.
double expsum_ref_segment(const float* x, const float* mask, int64_t n, float scale,
                          float nref, float m, float t_min, float* dst,
                          const SegmentPrefetch& prefetch = {}) noexcept;
/// dst_i = exp(t_i - shift) * factor.
void exp_scale_segment(const float* x, const float* mask, int64_t n, float scale,
                       float shift, float factor, float* dst) noexcept;
/// dst_i *= factor (in place); products below FLT_MIN are flushed to 0.
void scale_segment(float* dst, int64_t n, float factor) noexcept;
/// scale_segment without the flush, for softmax rows where
/// softmax_outputs_normal holds (then the same bits, 3 fewer ops a vector).
void scale_segment_normal(float* dst, int64_t n, float factor) noexcept;

/// True if every softmax output of a row with max m, min t_min and n
/// elements is >= FLT_MIN, so scaling its exps by 1 / sum stores no
/// denormal and needs no flush. Each output is >= e^(t_min - m) / n;
/// 0.7 bit_width(n) >= ln n, and a margin of 0.01 in the log (1 %) covers
/// the exp's and the product's roundings. False for t_min = -inf or NaN.
inline bool softmax_outputs_normal(float t_min, float m, int64_t n) {
  constexpr double kLogFltMin = -87.33654475055310898657;  // ln(FLT_MIN)
  const int bits = n > 0 ? 64 - __builtin_clzll(static_cast<unsigned long long>(n)) : 0;
  return static_cast<double>(t_min) - static_cast<double>(m) - 0.7 * bits >=
         kLogFltMin + 0.01;
}
/// dst_i = (t_i - shift) - log_sum   (log-softmax, in that order).
/// `stream`: dst written with streaming stores (as Rows::stream_stores;
/// a segment too short for the aligned peel is stored as usual; fenced).
void log_store_segment(const float* x, const float* mask, int64_t n, float scale,
                       float shift, float log_sum, float* dst, bool stream = false) noexcept;

/// Online normaliser state: the segment's sum is d * e^m (identity: m = -inf,
/// d = 0).
struct OnlineState {
  float m = -__builtin_inff();
  double d = 0.0;
};
OnlineState online_segment(const float* x, const float* mask, int64_t n,
                           float scale) noexcept;

/// Two-pass (Dukhan & Ablavatski) state: the segment's sum is mu * 2^nu
/// (identity: mu = 0, nu = -inf). `in_range` is false when some |t_i| is too
/// large for the (mantissa, exponent) split to be exact; ops then recompute
/// the row with the three-pass algorithm.
struct TwoPassState {
  double mu = 0.0;
  double nu = -__builtin_inf();
  bool in_range = true;
};
TwoPassState twopass_segment(const float* x, const float* mask, int64_t n,
                             float scale) noexcept;
/// dst_i = e^{t_i} / (mu * 2^nu) given the row's merged state.
void twopass_store_segment(const float* x, const float* mask, int64_t n, float scale,
                           double nu, double inv_mu, float* dst) noexcept;

// ---------------------------------------------------------------------------
// Columns: the reduced axis is strided, and `inner` consecutive columns are
// contiguous (unit stride) in src, dst and mask. Element (k, j) (k along the
// axis, j < inner) is at src[k * src_axis_stride + j]. Kernels vectorise
// across j and block j so that n x block stays in cache.
// logsumexp_columns writes dst[j] (unit stride, `inner` values).
// Every Algorithm gives the same results here (the block is in cache; a
// max / exp-sum / scale sweep is used). dst may equal src (in place).
// ---------------------------------------------------------------------------
struct Columns {
  const float* src = nullptr;
  int64_t src_axis_stride = 0;
  float* dst = nullptr;
  int64_t dst_axis_stride = 0;
  const float* mask = nullptr;  ///< nullable; unit stride along inner
  int64_t mask_axis_stride = 0;
  int64_t n = 0;      ///< length of the reduced axis, >= 1
  int64_t inner = 0;  ///< contiguous columns, >= 1
  float scale = 1.0f;
  EmptyRow empty_row = EmptyRow::kZero;
};
void softmax_columns(const Columns& cols) noexcept;
void log_softmax_columns(const Columns& cols) noexcept;
void logsumexp_columns(const Columns& cols) noexcept;

// ---------------------------------------------------------------------------
// Backward. y is the saved forward output, dy the upstream gradient, dx the
// result: exactly dy (the same rows and strides), or overlapping no row of
// y or dy (batched rows read row r+1 while they write row r's dx), and its
// rows do not overlap each other. `scale` is the forward's f32 multiplier.
//   softmax:     dx = scale * y * (dy - <dy, y>)
//   log_softmax: dx = scale * (dy - exp(y) * sum(dy)); dx = 0 where y = -inf
// Dots and sums are blocked like the forward sums.
// ---------------------------------------------------------------------------
struct BackwardRows {
  const float* y = nullptr;
  int64_t y_stride = 0;
  const float* dy = nullptr;
  int64_t dy_stride = 0;
  float* dx = nullptr;
  int64_t dx_stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  float scale = 1.0f;
  /// Whether dx is written with streaming (non-temporal) stores, as
  /// Rows::stream_stores (core/stream_stores.h decides; the same bits
  /// either way); rows whose dx is not aligned to the vector are stored as
  /// usual. The kernel fences its streaming stores before it returns.
  bool stream_stores = false;
};
void softmax_backward_rows(const BackwardRows& rows) noexcept;
void log_softmax_backward_rows(const BackwardRows& rows) noexcept;

double dot_segment(const float* a, const float* b, int64_t n) noexcept;
double sum_segment(const float* a, int64_t n) noexcept;
/// dx = scale * y * (dy - dot), dot the row's float64 reduction (used as f32).
/// `stream`: dx written with streaming stores where dx is vector-aligned
/// (else as usual), fenced before the call returns; the same bits.
void softmax_backward_segment(const float* y, const float* dy, int64_t n, double dot,
                              float scale, float* dx, bool stream = false) noexcept;
/// dx = scale * (dy - exp(y) * sum), 0 where y = -inf; sum the row's float64
/// sum of dy (f32 unless it is beyond f32: then the segment runs in float64).
/// `stream` as above.
void log_softmax_backward_segment(const float* y, const float* dy, int64_t n, double sum,
                                  float scale, float* dx, bool stream = false) noexcept;

struct BackwardColumns {
  const float* y = nullptr;
  int64_t y_axis_stride = 0;
  const float* dy = nullptr;
  int64_t dy_axis_stride = 0;
  float* dx = nullptr;
  int64_t dx_axis_stride = 0;
  int64_t n = 0;
  int64_t inner = 0;
  float scale = 1.0f;
};
void softmax_backward_columns(const BackwardColumns& cols) noexcept;
void log_softmax_backward_columns(const BackwardColumns& cols) noexcept;

// ---------------------------------------------------------------------------
// Introspection.
// ---------------------------------------------------------------------------
/// Name of the kernel family member used for `op` with `algorithm` on the
/// active target, e.g. "f32_softmax_reload__avx2_rr2_p5_u4_acc2".
/// op: "softmax", "log_softmax", "logsumexp", "softmax_backward",
/// "log_softmax_backward", "softmax_columns".
std::string kernel_name(const std::string& op, Algorithm algorithm);

}  // namespace smax::kernels

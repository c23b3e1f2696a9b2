// src/ops/sampling/sampling.cc: softmax_topk, sampling_filter and sample
// (include/smax/sampling.h; the Gumbel ops are in gumbel.cc).
//
// Every op is a Rowwise op (validation, logit transform, gather, fixed task
// grid). Outputs that Rowwise does not model (i64 per-row indices, [.., k]
// top-k outputs) are validated here before Rowwise::run and written through
// offsets computed from the row index (RowOut), so a row function still
// writes only its own row's outputs. An f64 input runs the float64 rows of
// ops/sampling/sampling_f64.h (Rowwise::run_native).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "core/convert.h"
#include "core/enum_names.h"
#include "core/errors.h"
#include "core/execution.h"
#include "core/internal.h"
#include "core/long_row.h"
#include "core/rowwise.h"
#include "ops/sampling/sampling_f64.h"
#include "ops/sampling/sampling_filters.h"
#include "ops/sampling/sampling_rows.h"
#include "ops/sampling/sampling_topk.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/runtime.h"
#include "smax/sampling.h"

namespace smax {
namespace detail {
namespace {

// Smallest candidate buffer of topk_scan. A buffer of 2k (>= 64) compacts
// often at the start of a row, so the k-th best threshold rises quickly and
// few steps take the slow path (measured on 64 x 128256, k = 50, AVX2: cap
// 4096 costs 1.4x the time of cap 1024, which costs ~1.5x cap 2k).
constexpr int64_t kMinCap = 64;
// Nucleus sampling without top-k: candidates of the first scan, and the
// factor by which the candidate set grows when their mass is short of top_p.
constexpr int64_t kTopPFirstK = 1024;
constexpr int64_t kTopPGrowth = 8;
// Nucleus candidates at or below this count are sorted outright.
constexpr int64_t kNucleusSortMax = 64;
// Buckets (equal width in z) of the nucleus candidates' masses.
constexpr int kNucleusBuckets = 2048;
// A kept set larger than this is sampled by masking z and running
// gumbel_argmax (SIMD pruning: ~2 noise evaluations per row) instead of
// evaluating the noise of every kept entry.
constexpr int64_t kPrefixLoopMax = 256;

using kernels::TopkCandidate;

}  // namespace

// ---- top-k (declared in ops/sampling/sampling_topk.h) ----------------------

// The candidate buffer size for k winners in a row of n.
int64_t topk_cap(int64_t k, int64_t n) {
  return std::max(k, std::min(std::max(2 * k, kMinCap), n));
}

// Keeps the best min(k, count) candidates, sorted.
int64_t finish_candidates(TopkCandidate* buf, int64_t count, int64_t k) {
  if (count > k) {
    std::nth_element(buf, buf + (k - 1), buf + count, kernels::topk_better);
    count = k;
  }
  std::sort(buf, buf + count, kernels::topk_better);
  return count;
}

// NaN ranks above everything (then +inf, finite, -inf), ties by index.
bool better_nan_first(const TopkCandidate& a, const TopkCandidate& b) {
  const bool an = std::isnan(a.value), bn = std::isnan(b.value);
  if (an != bn) return an;
  if (an) return a.index < b.index;
  return kernels::topk_better(a, b);
}

// Scalar top-k of a row with NaN / +inf (rare path): the same buffer and
// threshold scheme as topk_scan, with NaN ranked first.
int64_t topk_special(const float* t, int64_t n, int64_t k, TopkCandidate* buf, int64_t cap) {
  int64_t count = 0;
  bool has_kth = false;
  TopkCandidate kth{0.0f, 0};
  for (int64_t i = 0; i < n; ++i) {
    const TopkCandidate c{t[i], i};
    if (has_kth && !better_nan_first(c, kth)) continue;
    buf[count++] = c;
    if (count == cap) {
      std::nth_element(buf, buf + (k - 1), buf + count, better_nan_first);
      count = k;
      kth = buf[k - 1];
      has_kth = true;
    }
  }
  if (count > k) {
    std::nth_element(buf, buf + (k - 1), buf + count, better_nan_first);
    count = k;
  }
  std::sort(buf, buf + count, better_nan_first);
  return count;
}

// The k best of t (sorted) in buf[0..k); returns the scan. Rows with NaN or
// +inf (scan.d NaN) are ranked by topk_special.
kernels::TopkScan topk_row(const float* t, int64_t n, int64_t k, TopkCandidate* buf,
                           int64_t cap) {
  kernels::TopkScan s = kernels::topk_scan(t, n, k, buf, cap);
  if (std::isnan(s.d)) {
    s.count = topk_special(t, n, k, buf, cap);
    return s;
  }
  s.count = finish_candidates(buf, s.count, k);
  // Fewer than k entries above -inf: the -inf ones follow, by index.
  for (int64_t i = 0; s.count < k && i < n; ++i) {
    if (t[i] == -kInfF) buf[s.count++] = TopkCandidate{t[i], i};
  }
  return s;
}

namespace {

// softmax_topk's f32 row.
void topk_row_f32(const RowArgs& a, int64_t k, bool renorm, int64_t cap, const RowOut& p,
                  const RowOut& ix) {
  float* scratch = a.scratch;
  TopkCandidate* buf = carve<TopkCandidate>(scratch, cap);
  const kernels::TopkScan s = topk_row(a.in[0], a.n, k, buf, cap);
  char* pr = p.at<char>(a.row);
  int64_t* id = ix.at<int64_t>(a.row);
  const bool nan_row = std::isnan(s.d);
  const bool empty = !nan_row && s.max == -kInfF;
  double norm = 0.0, shift = 0.0;
  if (renorm && !nan_row && !empty) {
    shift = buf[0].value;
    for (int64_t j = 0; j < k; ++j) norm += std::exp(static_cast<double>(buf[j].value) - shift);
  }
  for (int64_t j = 0; j < k; ++j) {
    const double v = buf[j].value;
    float q;
    if (nan_row || (empty && a.empty_row == EmptyRow::kNan)) {
      q = kNaNF;
    } else if (v == -kInfD) {
      q = 0.0f;
    } else if (renorm) {
      q = static_cast<float>(std::exp(v - shift) / norm);
    } else {
      q = static_cast<float>(std::exp(v - s.ref) / s.d);
    }
    if (std::fabs(q) < std::numeric_limits<float>::min()) q = 0.0f;  // no denormals
    detail::store_f32(pr + j * p.axis_stride * p.elem, p.dtype, q);
    id[j * ix.axis_stride] = buf[j].index;
  }
}

void softmax_topk_impl(const TensorView& src, const TensorView& probs, const TensorView& indices,
                       const SoftmaxTopkOptions& topk, const SoftmaxOptions& options) {
  const char* op = "softmax_topk";
  Rowwise rw(op, src, "src", true, options);
  const int64_t n = rw.src().shape[rw.axis()];
  const int64_t k = topk.k;
  if (k < 0 || k > n) {
    fail(op, "k must be in [0, n = " + std::to_string(n) + "], got " + std::to_string(k));
  }
  const RowOut p = k_output(rw, probs, "probs", DType::kF32, k, src, options, op);
  const RowOut ix = k_output(rw, indices, "indices", DType::kI64, k, src, options, op);
  check_disjoint_or_same(probs, "probs", indices, "indices", op, false);
  if (k == 0) {
    rw.run(0, [](const RowArgs&) {});
    return;
  }
  const bool renorm = topk.renormalize;
  const int64_t cap = topk_cap(k, n);
  // f32 rows: the candidate buffer; float64 rows: n candidates, k probs, k indices.
  const int64_t bytes = std::max<int64_t>(4 * floats_for<TopkCandidate>(cap),
                                          n * int64_t{sizeof(Cand64)} + 16 * k);
  rw.run_native(bytes, [&](const auto& a) {
    if constexpr (kIsF64Row<decltype(a)>) {
      auto* buf = reinterpret_cast<Cand64*>(a.scratch);
      auto* q = reinterpret_cast<double*>(buf + a.n);
      auto* ids = reinterpret_cast<int64_t*>(q + k);
      softmax_topk_row_f64(a.in[0], a.n, k, renorm, a.empty_row, buf, q, ids);
      char* pr = p.at<char>(a.row);
      int64_t* id = ix.at<int64_t>(a.row);
      for (int64_t j = 0; j < k; ++j) {
        detail::store_f64(pr + j * p.axis_stride * p.elem, p.dtype, q[j]);
        id[j * ix.axis_stride] = ids[j];
      }
    } else {
      topk_row_f32(a, k, renorm, cap, p, ix);
    }
  });
}

}  // namespace

// ---- sampling filter ------------------------------------------------------------

void check_sample_options(const SampleOptions& so, const char* op) {
  if (!(std::isfinite(so.temperature) && so.temperature >= 0.0f)) {
    fail(op, "sample temperature must be finite and >= 0, got " + num(so.temperature));
  }
  if (so.top_k < 0) fail(op, "top_k must be >= 0, got " + std::to_string(so.top_k));
  if (!(so.top_p > 0.0f && so.top_p <= 1.0f)) {
    fail(op, "top_p must be in (0, 1], got " + num(so.top_p));
  }
  if (!(so.min_p >= 0.0f && so.min_p <= 1.0f)) {
    fail(op, "min_p must be in [0, 1], got " + num(so.min_p));
  }
  if (so.min_tokens_to_keep < 1) {
    fail(op, "min_tokens_to_keep must be >= 1, got " + std::to_string(so.min_tokens_to_keep));
  }
  if (so.top_k_ties != TopKTies::kExact && so.top_k_ties != TopKTies::kKeep) {
    fail(op, "top_k_ties has unknown value " +
                 std::to_string(static_cast<int32_t>(so.top_k_ties)));
  }
}

namespace {

// What survives the filters in one row.
struct Kept {
  enum Kind { kNone, kNaN, kAll, kPrefix, kGreedy } kind = kNone;
  float value = 0.0f;  // kPrefix: the last kept candidate (value, index):
  int64_t index = 0;   // kept iff z > value || (z == value && i <= index)
  int64_t count = 0;   // kPrefix: the size of the kept set
  bool listed = true;  // kPrefix: buf[0..count) holds the kept set (else use keeps())
  bool keeps(float z, int64_t i) const {
    return z > value || (z == value && i <= index);
  }
};

// Scratch: z (n floats) + candidate buffer of `cap` entries.
struct FilterPlan {
  int64_t cap = 0;
  bool active = false;  // top-k or top-p filters something
  int64_t top_k = 0;    // 0 = off
  bool general = false;  // filter_candidates (sampling_filters.h) decides
};

FilterPlan plan_filter(const SampleOptions& so, int64_t n) {
  FilterPlan f;
  f.top_k = (so.top_k > 0 && so.top_k < n) ? so.top_k : 0;
  f.active = f.top_k > 0 || so.top_p < 1.0f;
  if (uses_general_filter(so)) {
    f.general = f.active = true;
    f.cap = n;  // every visible entry is a candidate
    return f;
  }
  if (!f.active || n == 0) return f;
  f.cap = f.top_k > 0 ? topk_cap(f.top_k, n) : n;  // top-p alone may need every element
  return f;
}

// The nucleus boundary among buf[0..count) (any order), which hold the
// masses after the first `above`: bisection with nth_element (each step
// halves the range and sums the better half; O(count) expected), then the
// last <= kNucleusSortMax candidates sorted and accumulated in order.
// Returns the position pos of the boundary (buf[0..pos] are then exactly
// the candidates kept), or -1 if the target is not reached.
int64_t nucleus_boundary(TopkCandidate* buf, int64_t count, double above, double target,
                         double z0) {
  auto mass = [z0](const TopkCandidate& c) { return std::exp(static_cast<double>(c.value) - z0); };
  // Invariant: buf[0, lo) are better than buf[lo, count) and hold `above`;
  // the boundary lies in [lo, hi).
  int64_t lo = 0, hi = count;
  while (hi - lo > kNucleusSortMax) {
    const int64_t mid = lo + (hi - lo) / 2;
    std::nth_element(buf + lo, buf + mid, buf + hi, kernels::topk_better);
    double m = 0.0;
    for (int64_t j = lo; j <= mid; ++j) m += mass(buf[j]);
    if (above + m >= target) {
      hi = mid + 1;
    } else {
      above += m;
      lo = mid + 1;
    }
  }
  std::sort(buf + lo, buf + hi, kernels::topk_better);
  double cum = above;
  for (int64_t j = lo; j < hi; ++j) {
    cum += mass(buf[j]);
    if (cum >= target) return j;
  }
  return -1;
}

// Nucleus sampling without top-k, one scan plus work on the candidates only.
// From the scan's (max z0, normaliser total = sum_i e^(z_i - z0)), every
// entry with z_i < theta = z0 + log(total) + log((1 - top_p) / (2n)) has
// e^(z_i - z0) < total (1 - top_p) / (2n), so together they hold less than
// total (1 - top_p) / 2: the candidates z_i >= theta hold more than
// total (1 + top_p) / 2 > top_p total, i.e. the nucleus lies inside them.
// The candidates' masses (float64) are summed into kNucleusBuckets buckets
// of equal width in z over [theta, z0] (a monotonic map: a higher bucket
// holds only larger z); the running sum over the buckets, best first, finds
// the bucket of the boundary, and only that bucket's members are ordered
// (nucleus_boundary). Without a usable bucket width (theta not finite, or
// every candidate equal) the whole candidate set goes to nucleus_boundary.
// Returns false (the caller falls back to the widening top-k loop) when
// rounding leaves the candidates' mass short of the target.
bool nucleus_by_threshold(const float* z, int64_t n, double top_p, const kernels::TopkScan& s,
                          TopkCandidate* buf, int64_t* idx, Kept& kept) {
  const double z0 = s.max;
  const double total = s.d * std::exp(s.ref - z0);
  const double target = top_p * total;
  const double th = z0 + std::log(total) + std::log((1.0 - top_p) * 0.5 / static_cast<double>(n));
  float thr = static_cast<float>(th);  // -inf when th < -FLT_MAX: every finite z
  if (static_cast<double>(thr) > th) thr = std::nextafter(thr, -kInfF);
  thr = std::nextafter(thr, -kInfF);  // select_greater is strict: keep z == thr
  int64_t count = 0;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    const int64_t cnt = kernels::select_greater(z + c0, len, thr, idx);
    for (int64_t j = 0; j < cnt; ++j) {
      const int64_t i = c0 + idx[j];
      buf[count++] = TopkCandidate{z[i], i};
    }
  }
  const double span = z0 - static_cast<double>(thr);
  const double inv_width = static_cast<double>(kNucleusBuckets) / span;
  if (count > kNucleusSortMax && std::isfinite(span) && span > 0.0 && std::isfinite(inv_width)) {
    auto bucket = [&](float v) {
      const double b = (z0 - static_cast<double>(v)) * inv_width;
      return b >= kNucleusBuckets - 1 ? kNucleusBuckets - 1 : static_cast<int>(b);
    };
    double bmass[kNucleusBuckets] = {};
    int64_t bcount[kNucleusBuckets] = {};
    for (int64_t j = 0; j < count; ++j) {
      const int b = bucket(buf[j].value);
      bmass[b] += std::exp(static_cast<double>(buf[j].value) - z0);
      ++bcount[b];
    }
    double above = 0.0;
    int64_t before = 0;  // candidates in the better buckets
    for (int b = 0; b < kNucleusBuckets; ++b) {
      if (above + bmass[b] >= target) {
        int64_t m = 0;  // the bucket's members, compacted to the front
        for (int64_t j = 0; j < count; ++j) {
          if (bucket(buf[j].value) == b) buf[m++] = buf[j];
        }
        const int64_t pos = nucleus_boundary(buf, m, above, target, z0);
        if (pos < 0) break;  // rounding: the next bucket would be needed
        kept.kind = Kept::kPrefix;
        kept.value = buf[pos].value;
        kept.index = buf[pos].index;
        kept.count = before + pos + 1;
        kept.listed = false;
        return true;
      }
      above += bmass[b];
      before += bcount[b];
    }
    return false;
  }
  const int64_t pos = nucleus_boundary(buf, count, 0.0, target, z0);
  if (pos < 0) return false;
  kept.kind = Kept::kPrefix;
  kept.value = buf[pos].value;
  kept.index = buf[pos].index;
  kept.count = pos + 1;  // buf[0..pos] is exactly the kept set
  return true;
}

// The f32 rows' use of filter_candidates: the visible entries of z (a row
// with NaN / +inf is a NaN row) go to buf; float64 masses summed in order.
struct PlainSum {
  double s = 0.0;
  void add(double x) { s += x; }
  double value() const { return s; }
};

Kept filter_row_general(const float* z, int64_t n, const SampleOptions& so, TopkCandidate* buf) {
  Kept kept;
  const kernels::MaxScan ms = kernels::max_scan(z, n);
  if (ms.has_nan || ms.max == kInfF) {
    kept.kind = Kept::kNaN;
    return kept;
  }
  if (!(ms.max > -kInfF)) return kept;  // nothing to sample
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (z[i] > -kInfF) buf[count++] = TopkCandidate{z[i], i};
  }
  const auto mass = [](float v, double z0) { return std::exp(static_cast<double>(v) - z0); };
  const int64_t keep = filter_candidates<PlainSum>(buf, count, so, kernels::topk_better, mass);
  const TopkCandidate& last = worst_candidate(buf, keep, kernels::topk_better);
  kept.kind = Kept::kPrefix;
  kept.value = last.value;
  kept.index = last.index;
  kept.count = keep;  // buf[0..keep) is exactly the kept set
  return kept;
}

// Writes z = fl(t / T) to z (T > 0) and decides the kept set.
Kept filter_row(const float* t, int64_t n, const SampleOptions& so, const FilterPlan& plan,
                float* z, TopkCandidate* buf, int64_t* idx) {
  Kept kept;
  if (n == 0) return kept;
  if (so.temperature == 0.0f) {
    const kernels::MaxScan ms = kernels::max_scan(t, n);
    if (ms.has_nan) {
      kept.kind = Kept::kNaN;
    } else if (ms.max > -kInfF) {
      kept.kind = Kept::kGreedy;
      kept.index = kernels::find_first_equal(t, n, ms.max);
    }
    return kept;
  }
  const float T = so.temperature;
  if (T == 1.0f) {
    if (z != t) std::memcpy(z, t, static_cast<size_t>(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) z[i] = t[i] / T;
  }
  if (!plan.active) {
    const kernels::MaxScan ms = kernels::max_scan(z, n);
    if (ms.has_nan || ms.max == kInfF) {
      kept.kind = Kept::kNaN;
    } else if (ms.max > -kInfF) {
      kept.kind = Kept::kAll;
    }
    return kept;
  }
  if (plan.general) return filter_row_general(z, n, so, buf);
  const double top_p = so.top_p;
  if (plan.top_k == 0) {
    // top-p alone: (m, d) and NaN from one scan (k = 1), then the candidates
    // above the threshold only.
    const kernels::TopkScan s = kernels::topk_scan(z, n, 1, buf, topk_cap(1, n));
    if (std::isnan(s.d)) {
      kept.kind = Kept::kNaN;
      return kept;
    }
    if (s.max == -kInfF) return kept;  // nothing to sample
    if (nucleus_by_threshold(z, n, top_p, s, buf, idx, kept)) return kept;
  }
  int64_t K = plan.top_k > 0 ? plan.top_k : std::min<int64_t>(n, kTopPFirstK);
  for (;;) {
    const int64_t cap = plan.top_k > 0 ? plan.cap : topk_cap(K, n);
    const kernels::TopkScan s = kernels::topk_scan(z, n, K, buf, cap);
    if (std::isnan(s.d)) {
      kept.kind = Kept::kNaN;
      return kept;
    }
    if (s.max == -kInfF) return kept;  // nothing to sample
    const int64_t count = finish_candidates(buf, s.count, K);
    const double z0 = buf[0].value;
    int64_t last = count - 1;
    bool complete = true;
    if (top_p < 1.0) {
      double total = 0.0;
      if (plan.top_k > 0) {
        for (int64_t j = 0; j < count; ++j) total += std::exp(static_cast<double>(buf[j].value) - z0);
      } else {
        total = s.d * std::exp(s.ref - z0);
      }
      const double target = top_p * total;
      double cum = 0.0;
      last = -1;
      for (int64_t j = 0; j < count; ++j) {
        cum += std::exp(static_cast<double>(buf[j].value) - z0);
        if (cum >= target) {
          last = j;
          break;
        }
      }
      if (last < 0) {
        // Not reached within the candidates: more are needed unless the
        // buffer already holds every entry above -inf (or top-k bounds it).
        complete = plan.top_k > 0 || count < K || K == n;
        last = count - 1;
      }
    }
    if (complete) {
      kept.kind = Kept::kPrefix;
      kept.value = buf[last].value;
      kept.index = buf[last].index;
      kept.count = last + 1;
      return kept;
    }
    K = std::min(n, kTopPGrowth * K);
  }
}

int64_t filter_floats(const FilterPlan& plan, int64_t n) {
  return n + floats_for<TopkCandidate>(plan.cap) + floats_for<int64_t>(kChunk) + 2 * kChunk;
}

}  // namespace
}  // namespace detail

using detail::Kept;
using detail::RowArgs;
using detail::Rowwise;

namespace {

// sampling_filter's f32 row: dst (a.out[0]) = z where kept, -inf elsewhere.
void filter_row_f32_into(const RowArgs& a, const SampleOptions& sample,
                         const detail::FilterPlan& plan) {
  const int64_t n = a.n;
  float* z = a.out[0];
  float* scratch = a.scratch;
  auto* buf = detail::carve<kernels::TopkCandidate>(scratch, plan.cap);
  int64_t* idx = detail::carve<int64_t>(scratch, detail::kChunk);
  const Kept kept = detail::filter_row(a.in[0], n, sample, plan, z, buf, idx);
  switch (kept.kind) {
    case Kept::kNone: std::fill(z, z + n, -detail::kInfF); break;
    case Kept::kNaN: std::fill(z, z + n, detail::kNaNF); break;
    case Kept::kAll: break;
    case Kept::kGreedy: {
      const float v = a.in[0][kept.index];
      std::fill(z, z + n, -detail::kInfF);
      z[kept.index] = v;
      break;
    }
    case Kept::kPrefix:
      for (int64_t i = 0; i < n; ++i) {
        if (!kept.keeps(z[i], i)) z[i] = -detail::kInfF;
      }
      break;
  }
}

// sampling_filter's float64 row (ops/sampling/sampling_f64.h).
void filter_row_f64_into(const detail::RowArgs64& a, const SampleOptions& sample) {
  using detail::KeptF64;
  const int64_t n = a.n;
  double* z = a.out[0];
  auto* buf = reinterpret_cast<detail::Cand64*>(a.scratch);
  const KeptF64 kept = detail::filter_row_f64(a.in[0], n, sample, z, buf);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  switch (kept.kind) {
    case KeptF64::kNone: std::fill(z, z + n, -kInf); break;
    case KeptF64::kNaN: std::fill(z, z + n, std::numeric_limits<double>::quiet_NaN()); break;
    case KeptF64::kAll: break;
    case KeptF64::kGreedy: {
      const double v = a.in[0][kept.index];
      std::fill(z, z + n, -kInf);
      z[kept.index] = v;
      break;
    }
    case KeptF64::kPrefix:
      for (int64_t i = 0; i < n; ++i) {
        if (!kept.keeps(z[i], i)) z[i] = -kInf;
      }
      break;
  }
}

// sample's float64 row: Gumbel-max over the kept set (pruned over the masked
// row when it is large, exactly as the f32 rows).
int64_t sample_row_f64(const detail::RowArgs64& a, const SampleOptions& sample) {
  using detail::KeptF64;
  const int64_t n = a.n;
  double* z = a.scratch;
  auto* buf = reinterpret_cast<detail::Cand64*>(z + n);
  const KeptF64 kept = detail::filter_row_f64(a.in[0], n, sample, z, buf);
  const auto row = static_cast<uint64_t>(a.row);
  switch (kept.kind) {
    case KeptF64::kNone:
    case KeptF64::kNaN: return -1;
    case KeptF64::kGreedy: return kept.index;
    case KeptF64::kAll: return detail::gumbel_argmax_f64(z, n, sample.seed, row);
    case KeptF64::kPrefix: break;
  }
  if (kept.count > detail::kPrefixLoopMax) {
    for (int64_t i = 0; i < n; ++i) {
      if (!kept.keeps(z[i], i)) z[i] = -std::numeric_limits<double>::infinity();
    }
    return detail::gumbel_argmax_f64(z, n, sample.seed, row);
  }
  double best = -std::numeric_limits<double>::infinity();
  int64_t result = -1;
  for (int64_t j = 0; j < kept.count; ++j) {
    const int64_t i = buf[j].index;
    const double v = buf[j].value + kernels::gumbel(sample.seed, row, static_cast<uint64_t>(i));
    if (v > best || (v == best && i < result)) {
      best = v;
      result = i;
    }
  }
  return result;
}

// sample's f32 row.
int64_t sample_row_f32(const RowArgs& a, const SampleOptions& sample,
                       const detail::FilterPlan& plan) {
  const uint64_t seed = sample.seed;
  const int64_t n = a.n;
  float* scratch = a.scratch;
  float* z = scratch;
  scratch += n;
  auto* buf = detail::carve<kernels::TopkCandidate>(scratch, plan.cap);
  int64_t* idx = detail::carve<int64_t>(scratch, detail::kChunk);
  float* ebuf = scratch;  // kChunk floats
  auto* hbuf = reinterpret_cast<uint32_t*>(scratch + detail::kChunk);  // kChunk words
  const Kept kept = detail::filter_row(a.in[0], n, sample, plan, z, buf, idx);
  const auto row = static_cast<uint64_t>(a.row);
  int64_t result = -1;
  switch (kept.kind) {
    case Kept::kNone:
    case Kept::kNaN: break;
    case Kept::kGreedy: result = kept.index; break;
    case Kept::kAll: result = detail::gumbel_argmax(z, n, seed, row, idx, ebuf, hbuf); break;
    case Kept::kPrefix: {
      if (!kept.listed || kept.count > detail::kPrefixLoopMax) {
        // Large kept set: the same argmax over the masked row, with
        // gumbel_argmax's pruning (exact: the same float64 sums).
        for (int64_t i = 0; i < n; ++i) {
          if (!kept.keeps(z[i], i)) z[i] = -detail::kInfF;
        }
        result = detail::gumbel_argmax(z, n, seed, row, idx, ebuf, hbuf);
        break;
      }
      double best = -detail::kInfD;
      for (int64_t j = 0; j < kept.count; ++j) {
        const int64_t i = buf[j].index;
        const double v = static_cast<double>(buf[j].value) +
                         kernels::gumbel(seed, row, static_cast<uint64_t>(i));
        if (v > best || (v == best && i < result)) {
          best = v;
          result = i;
        }
      }
      break;
    }
  }
  return result;
}

}  // namespace

// ---- softmax_topk ---------------------------------------------------------------

void softmax_topk(const TensorView& src, const TensorView& probs, const TensorView& indices,
                  const SoftmaxTopkOptions& topk, const SoftmaxOptions& options) {
  detail::softmax_topk_impl(src, probs, indices, topk, options);
}

void softmax_topk(const TensorView& src, const TensorView& probs, const TensorView& indices,
                  int64_t k, const SoftmaxOptions& options) {
  SoftmaxTopkOptions topk;
  topk.k = k;
  detail::softmax_topk_impl(src, probs, indices, topk, options);
}

// ---- sampling_filter / sample ---------------------------------------------------

namespace {
constexpr auto kTopKTiesNames = detail::name_table<TopKTies>(
    "parse_top_k_ties", "top_k_ties", {{TopKTies::kExact, "exact"}, {TopKTies::kKeep, "keep"}});
}  // namespace

TopKTies parse_top_k_ties(std::string_view name) { return kTopKTiesNames.parse(name); }
const char* top_k_ties_name(TopKTies ties) noexcept { return kTopKTiesNames.name(ties); }

void sampling_filter(const TensorView& src, const TensorView& dst, const SampleOptions& sample,
                     const SoftmaxOptions& options) {
  const char* op = "sampling_filter";
  Rowwise rw(op, src, "src", true, options);
  detail::check_sample_options(sample, op);
  rw.add_output(dst, "dst");
  const int64_t n_row = rw.src().shape[rw.axis()];
  const detail::FilterPlan plan = detail::plan_filter(sample, n_row);
  // f32 rows: filter_floats; float64 rows: n candidates.
  const int64_t bytes = std::max<int64_t>(4 * detail::filter_floats(plan, n_row),
                                          n_row * int64_t{sizeof(detail::Cand64)});
  rw.run_native(bytes, [&](const auto& a) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      filter_row_f64_into(a, sample);
    } else {
      filter_row_f32_into(a, sample, plan);
    }
  });
}

void sample(const TensorView& src, const TensorView& indices, const SampleOptions& sample,
            const SoftmaxOptions& options) {
  const char* op = "sample";
  Rowwise rw(op, src, "src", true, options);
  detail::check_sample_options(sample, op);
  const detail::RowOut out = detail::index_output(rw, indices, "indices", src, options, op);
  const int64_t n_row = rw.src().shape[rw.axis()];
  const detail::FilterPlan plan = detail::plan_filter(sample, n_row);
  // f32 rows: filter_floats; float64 rows: z and n candidates.
  const int64_t bytes = std::max<int64_t>(4 * detail::filter_floats(plan, n_row),
                                          n_row * int64_t{8 + sizeof(detail::Cand64)});
  rw.run_native(bytes, [&](const auto& a) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      *out.at<int64_t>(a.row) = sample_row_f64(a, sample);
    } else {
      *out.at<int64_t>(a.row) = sample_row_f32(a, sample, plan);
    }
  });
}

}  // namespace smax

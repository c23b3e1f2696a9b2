// src/ops/sparse/sparse_rows.h: per-row solvers shared by the sparse normalisers
// and their losses (src/ops/sparse/sparse.cc, src/ops/sparse/sparse_loss.cc).
//
// A solver takes one contiguous row of logits t (n values, -inf = masked)
// and per-row scratch, and produces the row's distribution p in float64 on
// the candidate set (see include/smax/sparse.h, "Algorithm"):
//   prepare():  max sweep (NaN / +inf / all -inf detection), candidate
//               compaction d_k = t_{idx_k} - m (float64: exact from f32
//               rows, rounded once from f64 rows);
//   solve_*():  the threshold on the candidates, p_k in float64.
// Rows are f32 (Rowwise::run) or f64 (Rowwise::run<double>, the float64
// path of f64 logits: the f64 scan kernels, the same float64 solvers,
// outputs written as doubles); scratch is work_bytes(n) bytes (topk_bytes(n)
// for the top-k softmax).
// None of this throws or allocates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

#include "core/compensated.h"
#include "kernels/kernels.h"
#include "kernels/sparse.h"
#include "smax/options.h"

namespace smax::detail::sparse {

inline constexpr double kNaND = std::numeric_limits<double>::quiet_NaN();
inline constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

/// Scratch bytes per row needed by prepare() (four 8-byte arrays + 64-byte
/// alignment); Rowwise::run_native takes bytes.
inline int64_t work_bytes(int64_t n) { return 32 * n + 128; }

enum class Kind { kOk, kNan, kEmpty };

/// The candidate set and its distribution. Arrays live in the row scratch.
struct Row {
  Kind kind = Kind::kEmpty;
  double m = -std::numeric_limits<double>::infinity();  ///< row max
  int64_t n = 0;          ///< row length
  int64_t count = 0;      ///< candidates
  int64_t* idx = nullptr; ///< candidate indices (ascending)
  double* d = nullptr;    ///< t_idx - m, in (-R, 0]
  double* p = nullptr;    ///< p_k (float64), after a solve
  double* aux = nullptr;  ///< work array
};

/// Largest f32 <= m - r (so that `t >= lo` keeps every t with t - m > -r).
inline float lower_bound_f32(float m, double r) {
  const double target = static_cast<double>(m) - r;
  float lo = static_cast<float>(target);
  if (static_cast<double>(lo) > target) lo = std::nextafter(lo, kNegInfF);
  return lo;
}

/// Max sweep and candidate compaction with radius r (entries with
/// t_i - m > -r); `scratch` holds work_bytes(n) bytes. T = float or double.
template <class T>
inline Row prepare(const T* t, int64_t n, double r, T* scratch) {
  Row row;
  row.n = n;
  auto base = reinterpret_cast<uintptr_t>(scratch);
  base = (base + 63) & ~static_cast<uintptr_t>(63);
  auto* p8 = reinterpret_cast<double*>(base);
  row.idx = reinterpret_cast<int64_t*>(p8);
  row.d = p8 + n;
  row.p = p8 + 2 * n;
  row.aux = p8 + 3 * n;
  if (n == 0) return row;
  if constexpr (std::is_same_v<T, double>) {
    const kernels::SparseScan64 s = kernels::sparse_scan_f64(t, n);
    if (s.has_nan || s.has_pos_inf) {
      row.kind = Kind::kNan;
      return row;
    }
    row.m = s.max;
    if (s.max == -std::numeric_limits<double>::infinity()) return row;  // every entry masked
    row.kind = Kind::kOk;
    row.count = kernels::sparse_candidates_f64(t, n, r, s.max, row.idx, row.d);
  } else {
    const kernels::SparseScan s = kernels::sparse_scan(t, n);
    if (s.has_nan || s.has_pos_inf) {
      row.kind = Kind::kNan;
      return row;
    }
    row.m = s.max;
    if (s.max == kNegInfF) return row;  // every entry masked
    row.kind = Kind::kOk;
    row.count =
        kernels::sparse_candidates(t, n, lower_bound_f32(s.max, r), s.max, row.idx, row.d);
  }
  return row;
}

/// dst[0..n) = v, for f32 (the vector fill) or f64 rows.
inline void fill_row(float* dst, int64_t n, float v) { kernels::sparse_fill(dst, n, v); }
inline void fill_row(double* dst, int64_t n, double v) { std::fill(dst, dst + n, v); }

/// Exact sparsemax threshold on sorted-descending values a[0..c): the
/// k* = max{k : 1 + k a_k > c_k}, tau = (c_k* - 1) / k* (docs/normalizers.md,
/// "sparsemax": the sorting algorithm).
inline double sparsemax_tau_sorted(const double* a, int64_t c) {
  double cum = 0.0, tau = 0.0;
  for (int64_t k = 0; k < c; ++k) {
    cum += a[k];
    if (1.0 + static_cast<double>(k + 1) * a[k] > cum) tau = (cum - 1.0) / static_cast<double>(k + 1);
  }
  return tau;
}

/// sparsemax: Michelot's pivoting on the candidates (tau only grows, the
/// working set only shrinks; each pass is one sum), with a sort of the
/// remaining set after 48 passes (never seen on real data).
inline void solve_sparsemax(Row& r) {
  double* a = r.aux;
  int64_t c = r.count;
  std::memcpy(a, r.d, static_cast<size_t>(c) * sizeof(double));
  double tau = 0.0;
  for (int pass = 0;; ++pass) {
    double sum = 0.0;
    for (int64_t k = 0; k < c; ++k) sum += a[k];
    tau = (sum - 1.0) / static_cast<double>(c);
    int64_t kept = 0;
    for (int64_t k = 0; k < c; ++k) {  // branch-free compaction
      a[kept] = a[k];
      kept += static_cast<int64_t>(a[k] > tau);
    }
    if (kept == c || kept == 0) break;
    c = kept;
    if (pass == 48) {
      std::sort(a, a + c, std::greater<double>());
      tau = sparsemax_tau_sorted(a, c);
      break;
    }
  }
  for (int64_t k = 0; k < r.count; ++k) r.p[k] = std::max(r.d[k] - tau, 0.0);
}

/// 1.5-entmax threshold from the top `K` sorted values z (descending), the
/// exact sort algorithm of docs/normalizers.md ("1.5-entmax (exact)");
/// returns the support size (tau via *tau).
inline int64_t entmax15_support(const double* z, int64_t K, double* tau_out) {
  double c1 = 0.0, c2 = 0.0;
  int64_t support = 0;
  double tau_star = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    c1 += z[k];
    c2 += z[k] * z[k];
    const double kk = static_cast<double>(k + 1);
    const double mu = c1 / kk;
    const double ss = kk * (c2 / kk - mu * mu);
    const double delta = (1.0 - ss) / kk;
    const double tau = mu - std::sqrt(std::max(delta, 0.0));
    if (tau <= z[k]) {
      ++support;
      tau_star = tau;  // the condition holds on a prefix (Peters et al. 2019)
    }
  }
  *tau_out = tau_star;
  return support;
}

/// 1.5-entmax: z = d / 2 (max z = 0, so tau* >= -1). A few Newton steps on
/// h(tau) = sum (z - tau)_+^2 - 1 from tau = -1 first: h is convex and
/// decreasing, so Newton from the left never passes tau* (up to a rounding
/// margin, kept below) and every entry <= tau can be dropped; then the
/// exact sort algorithm on the sorted survivors (a handful: a sort of the
/// whole candidate set cost 4 us per 128-entry row).
inline void solve_entmax15(Row& r) {
  double* a = r.aux;
  int64_t c = r.count;
  for (int64_t k = 0; k < c; ++k) a[k] = 0.5 * r.d[k];
  double tau = -1.0;
  for (int it = 0; it < 4 && c > 1; ++it) {
    double s1 = 0.0, s2 = 0.0;
    for (int64_t k = 0; k < c; ++k) {
      const double v = std::max(a[k] - tau, 0.0);
      s1 += v;
      s2 += v * v;
    }
    if (!(s2 > 1.0)) break;  // tau is (within rounding) tau* already
    const double next = tau + (s2 - 1.0) / (2.0 * s1);
    // Drop what lies below the step, less a margin for the rounding of s1, s2.
    const double cut = next - 1e-9 * (1.0 + std::fabs(next));
    int64_t kept = 0;
    for (int64_t k = 0; k < c; ++k) {  // branch-free compaction
      a[kept] = a[k];
      kept += static_cast<int64_t>(a[k] > cut);
    }
    c = kept;
    tau = next;
  }
  std::sort(a, a + c, std::greater<double>());
  entmax15_support(a, c, &tau);
  for (int64_t k = 0; k < r.count; ++k) {
    const double v = std::max(0.5 * r.d[k] - tau, 0.0);
    r.p[k] = v * v;
  }
}

/// 1.5-entmax of one row straight from the logits (the forward's fast path):
/// one max sweep, then vectorised Newton passes over the whole row that each
/// certify the exact threshold of their support (kernels::entmax15_threshold)
/// and one store pass; no candidate compaction, no sort. Same float64
/// threshold (up to summation order) as solve_entmax15, rounded once.
/// Returns false, writing nothing, for the rows it leaves to the candidate
/// path: rows longer than kEntmax15WholeRowMax (each pass reads the whole
/// row, while the candidate set of a long row stays short: 4096x128 rows
/// 0.40 vs 1.14 us per row, 1000: 1.8 vs 2.8 us, 4096: 6.9 vs 6.5 us,
/// 32000: 59 vs 23 us; thread CPU time, AVX2), NaN / +inf / all -inf rows,
/// and a threshold no pass certified.
inline constexpr int64_t kEntmax15WholeRowMax = 2048;
inline bool entmax15_row_fast(const float* t, int64_t n, float* dst) {
  if (n == 0) return true;
  if (n > kEntmax15WholeRowMax) return false;
  const kernels::SparseScan s = kernels::sparse_scan(t, n);
  if (s.has_nan || s.has_pos_inf || s.max == kNegInfF) return false;
  const double tau = kernels::entmax15_threshold(t, n, s.max);
  if (std::isnan(tau)) return false;
  kernels::entmax15_store(t, n, s.max, tau, dst);
  return true;
}

/// alpha-entmax by the entmax package's bisection, in float64 on the
/// candidates z = (alpha - 1) d (max z = 0). n is the full row length.
inline void solve_bisect(Row& r, double alpha, int n_iter, bool ensure_sum_one) {
  double* z = r.aux;
  const int64_t c = r.count;
  const double am1 = alpha - 1.0;
  for (int64_t k = 0; k < c; ++k) z[k] = am1 * r.d[k];
  const double p = 1.0 / am1;
  double tau_lo = -1.0;  // max z - 1^(alpha-1)
  const double tau_hi = -std::pow(1.0 / static_cast<double>(r.n), am1);
  double dm = tau_hi - tau_lo;
  double tau_m = tau_lo;
  for (int it = 0; it < n_iter; ++it) {
    dm /= 2;
    tau_m = tau_lo + dm;
    if (tau_m == tau_lo) break;  // no later step can move tau (see sparse.h)
    const double f_m = kernels::entmax_pow_sum(z, c, tau_m, p) - 1.0;
    // f is decreasing in tau and f(tau_lo) >= 0 always (the max entry alone
    // gives 1), so test f_m itself: the package's f_m * f_lo >= 0 stalls when
    // f_lo is exactly 0 (a support of one entry) and drifts to tau_hi.
    if (f_m >= 0) tau_lo = tau_m;
  }
  const double sum = kernels::entmax_pow_store(z, c, tau_m, p, r.p);
  if (ensure_sum_one) {
    const double inv = 1.0 / sum;
    for (int64_t k = 0; k < c; ++k) r.p[k] *= inv;
  }
}

/// Writes the row: NaN row, empty-row policy, or zeros + p_k (rounded once
/// to the row's type) at the candidates.
template <class T>
inline void write_row(const Row& r, T* dst, EmptyRow empty_row) {
  if (r.n == 0) return;
  if (r.kind == Kind::kNan || (r.kind == Kind::kEmpty && empty_row == EmptyRow::kNan)) {
    fill_row(dst, r.n, static_cast<T>(kNaND));
    return;
  }
  fill_row(dst, r.n, T(0));
  if (r.kind == Kind::kEmpty) return;
  for (int64_t k = 0; k < r.count; ++k) dst[r.idx[k]] = static_cast<T>(r.p[k]);
}

// ---------------------------------------------------------------------------
// Top-k softmax
// ---------------------------------------------------------------------------

/// Result of a top-k softmax row: dst holds the normalised probabilities;
/// lse = m + log_sum, log_sum = log of the sum over the kept set of
/// e^(t - m), m the row max.
struct TopK {
  Kind kind = Kind::kEmpty;
  double lse = 0.0;
  double m = 0.0, log_sum = 0.0;
};

/// Scratch bytes per row needed by solve_topk (f32: 6n + 32 floats; f64: n
/// doubles).
inline int64_t topk_bytes(int64_t n) { return 24 * n + 128; }

/// The k-th largest value of t (1 <= k < n, no NaN). A sample (the first
/// max(4k, n/16) entries) gives theta0 <= theta (its k-th largest); the
/// vector candidate sweep keeps the entries >= theta0 (about 16k of them on
/// random data; every entry at worst), and the selection runs on those.
inline float kth_largest(const float* t, int64_t n, int64_t k, float m, float* scratch) {
  auto base = reinterpret_cast<uintptr_t>(scratch);
  base = (base + 63) & ~static_cast<uintptr_t>(63);
  auto* idx = reinterpret_cast<int64_t*>(base);
  auto* d = reinterpret_cast<double*>(idx + n);
  auto* v = reinterpret_cast<float*>(d + n);
  const int64_t block = std::min(n, std::max<int64_t>(4 * k, n / 16));
  std::memcpy(v, t, static_cast<size_t>(block) * sizeof(float));
  std::nth_element(v, v + (k - 1), v + block, std::greater<float>());
  const float theta0 = v[k - 1];
  int64_t c = block;
  if (theta0 > kNegInfF && block < n) {
    c = kernels::sparse_candidates(t, n, theta0, m, idx, d);
    // The values themselves: m + d is not t when t is far below m (d is
    // exact only within 2^29 ulps of m; denormals next to m = 6.5 all came
    // back as 0, and the tie count then kept 40 entries for k = 10).
    for (int64_t i = 0; i < c; ++i) v[i] = t[idx[i]];
  } else if (block < n) {  // theta0 = -inf: select on the whole row
    std::memcpy(v, t, static_cast<size_t>(n) * sizeof(float));
    c = n;
  }
  std::nth_element(v, v + (k - 1), v + c, std::greater<float>());
  return v[k - 1];
}

/// Top-k softmax of t into dst (n floats). k >= n keeps every finite entry.
/// force >= 0: that index joins the kept set (if finite). Never throws.
inline TopK solve_topk(const float* t, int64_t n, int64_t k, int64_t force, float* scratch,
                       float* dst) {
  TopK res;
  if (n == 0) return res;
  const kernels::SparseScan s = kernels::sparse_scan(t, n);
  if (s.has_nan || s.has_pos_inf) {
    res.kind = Kind::kNan;
    return res;
  }
  if (s.max == kNegInfF) return res;
  res.kind = Kind::kOk;
  float theta = kNegInfF;
  int64_t ge_end = 0;
  if (k < n) {
    theta = kth_largest(t, n, k, s.max, scratch);
    if (theta > kNegInfF) {
      // Keep every t > theta and the first (k - #{t > theta}) ties.
      const int64_t greater = kernels::count_greater(t, n, theta);
      ge_end = kernels::nth_equal_index(t, n, theta, k - greater) + 1;
    }
  }
  double sum = kernels::topk_exp_store(t, n, theta, ge_end, s.max, dst);
  if (force >= 0 && force < n) {
    const float tf = t[force];
    const bool kept = tf > theta || (tf == theta && force < ge_end);
    if (!kept && tf > kNegInfF) {
      const float e = static_cast<float>(std::exp(static_cast<double>(tf) - s.max));
      dst[force] = e;
      sum += e;
    }
  }
  kernels::scale_segment(dst, n, static_cast<float>(1.0 / sum));
  res.m = s.max;
  res.log_sum = std::log(sum);
  res.lse = static_cast<double>(s.max) + res.log_sum;
  return res;
}

/// Top-k softmax of a float64 row (the f32 solve_topk's contract, with
/// scratch of topk_bytes(n) bytes): the k-th largest by nth_element on a
/// copy, the kept terms e^(t - m) by exp_diff_f64, their Neumaier sum in
/// index order, dst_i = term_i / sum.
inline TopK solve_topk(const double* t, int64_t n, int64_t k, int64_t force, double* scratch,
                       double* dst) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  TopK res;
  if (n == 0) return res;
  const kernels::SparseScan64 s = kernels::sparse_scan_f64(t, n);
  if (s.has_nan || s.has_pos_inf) {
    res.kind = Kind::kNan;
    return res;
  }
  if (s.max == kNegInf) return res;
  res.kind = Kind::kOk;
  double theta = kNegInf;
  int64_t ge_end = 0;
  if (k < n) {
    std::memcpy(scratch, t, static_cast<size_t>(n) * sizeof(double));
    std::nth_element(scratch, scratch + (k - 1), scratch + n, std::greater<double>());
    theta = scratch[k - 1];
    if (theta > kNegInf) {
      // Keep every t > theta and the first (k - #{t > theta}) ties.
      int64_t need = k;
      for (int64_t i = 0; i < n; ++i) need -= static_cast<int64_t>(t[i] > theta);
      for (int64_t i = 0; i < n && need > 0; ++i) {
        if (t[i] == theta && --need == 0) ge_end = i + 1;
      }
    }
  }
  auto kept = [&](int64_t i) { return t[i] > theta || (t[i] == theta && i < ge_end); };
  CompensatedSum terms;
  for (int64_t i = 0; i < n; ++i) {
    const double e = kept(i) && t[i] > kNegInf ? exp_diff_f64(t[i], s.max) : 0.0;
    dst[i] = e;
    terms.add(e);
  }
  if (force >= 0 && force < n && !kept(force) && t[force] > kNegInf) {
    dst[force] = exp_diff_f64(t[force], s.max);
    terms.add(dst[force]);
  }
  const double sum = terms.value();
  for (int64_t i = 0; i < n; ++i) dst[i] /= sum;
  res.m = s.max;
  res.log_sum = std::log(sum);
  res.lse = s.max + res.log_sum;
  return res;
}

/// Writes the special rows of a top-k softmax (NaN / empty policy).
template <class T>
inline void write_topk_special(const TopK& r, int64_t n, T* dst, EmptyRow empty_row) {
  const bool nan = r.kind == Kind::kNan || empty_row == EmptyRow::kNan;
  fill_row(dst, n, nan ? static_cast<T>(kNaND) : T(0));
}

}  // namespace smax::detail::sparse

// src/kernels/sparse.h: row kernels of the sparse normalisers (sparsemax,
// entmax, top-k softmax); see include/smax/sparse.h for the ops.
//
// Written once on Highway (src/kernels/sparse.cc), dispatched at run time.
// noexcept, allocation-free; pointers are to contiguous rows; n >= 0.
// The float64 kernels work on the compacted candidate set of a row (exact
// differences t_i - max), which is short for typical data; the f32 kernels
// sweep whole rows.
#pragma once

#include <cstdint>

namespace smax::kernels {

/// One sweep over a row of logits: the max (-inf for an empty or all -inf
/// row) and whether a NaN or a +inf occurs.
struct SparseScan {
  float max;
  bool has_nan;
  bool has_pos_inf;
};
SparseScan sparse_scan(const float* t, int64_t n) noexcept;

/// Candidates: every i with t_i >= lo and t_i > -inf, in index order:
/// idx[k] = i, d[k] = (double)t_i - (double)m (exact for candidates within
/// 2^29 ulps of m). Returns the count. Vectors without a hit cost one
/// compare; hits are extracted lane by lane.
int64_t sparse_candidates(const float* t, int64_t n, float lo, float m, int64_t* idx,
                          double* d) noexcept;

/// The float64 rows' versions (the float64 path of f64 logits): the sweep
/// (max, NaN, +inf) and the candidates i with fl(t_i - m) >= -r (a
/// superset, by rounding, of t_i - m > -r), d[k] = fl(t_i - m).
struct SparseScan64 {
  double max;
  bool has_nan;
  bool has_pos_inf;
};
SparseScan64 sparse_scan_f64(const double* t, int64_t n) noexcept;
int64_t sparse_candidates_f64(const double* t, int64_t n, double r, double m, int64_t* idx,
                              double* d) noexcept;

/// sum_k max(z_k - tau, 0)^p (float64). p = 1, 2 and 0.5 are exact (no
/// pow); other p use exp(p log v) (Highway contrib, float64).
double entmax_pow_sum(const double* z, int64_t k, double tau, double p) noexcept;
/// out_k = max(z_k - tau, 0)^p, returns their sum.
double entmax_pow_store(const double* z, int64_t k, double tau, double p, double* out) noexcept;

/// Backward statistics over a row of saved outputs y and upstream g:
/// w_i = y_i^(2 - alpha) for y_i > 0, else 0 (alpha = 2: [y_i > 0];
/// alpha = 1.5: sqrt(y_i)); stores w (float64) into w_out. Sums in float64.
/// With `with_alpha`, also <g,y>, <g,S> and H = sum S, S_i = y_i log y_i.
struct EntmaxGradSums {
  double sum_w = 0.0;  ///< sum w
  double gw = 0.0;     ///< <g, w>
  double gy = 0.0;     ///< <g, y>
  double gS = 0.0;     ///< <g, S>
  double H = 0.0;      ///< sum S
  double sum_y = 0.0;  ///< sum y (NaN / inf detection)
};
EntmaxGradSums entmax_grad_sums(const float* y, const float* g, int64_t n, double alpha,
                                bool with_alpha, double* w_out) noexcept;
/// dx_i = scale * (w_i * (g_i - q)), evaluated in float64 and rounded to f32
/// once (no f32 rounding of w or q enters the cancellation g_i - q). dx may
/// equal g.
void entmax_grad_store(const double* w, const float* g, int64_t n, double q, float scale,
                       float* dx) noexcept;
/// The same two for float64 rows (the float64 path of f64 y / dy): y and g
/// read as doubles, dx = s w (g - q) stored as doubles. dx may equal g.
EntmaxGradSums entmax_grad_sums(const double* y, const double* g, int64_t n, double alpha,
                                bool with_alpha, double* w_out) noexcept;
void entmax_grad_store(const double* w, const double* g, int64_t n, double q, double scale,
                       double* dx) noexcept;

/// Top-k exponentials: dst_i = exp(t_i - m) where t_i > theta, or
/// t_i == theta and i < ge_end; 0 elsewhere. Returns the sum (blocked f32
/// chains, float64 across blocks). m finite (the row max); t - m exact
/// (TwoSum), exp of exp-inl.h.
double topk_exp_store(const float* t, int64_t n, float theta, int64_t ge_end, float m,
                      float* dst) noexcept;

/// Number of elements > v.
int64_t count_greater(const float* t, int64_t n, float v) noexcept;
/// Index of the `count`-th (1-based) element equal to v, or n if fewer.
int64_t nth_equal_index(const float* t, int64_t n, float v, int64_t count) noexcept;

/// 1.5-entmax threshold of a whole row, vectorised (no candidate
/// compaction, no sort): t has no NaN / +inf, m = max t finite. Newton
/// passes from tau = -1, each certifying the exact threshold of its
/// support, first in f32 (to find the support), then in float64 on the
/// exact z_i = (t_i - m) / 2 (see sparse.cc). Returns tau* in z units
/// (y_i = max(z_i - tau*, 0)^2), or NaN when no pass certified it (the
/// caller falls back to the sorted algorithm).
double entmax15_threshold(const float* t, int64_t n, float m) noexcept;
/// dst_i = f32(max((t_i - m) / 2 - tau, 0)^2), evaluated in float64.
void entmax15_store(const float* t, int64_t n, float m, double tau, float* dst) noexcept;

/// dst_i = value.
void sparse_fill(float* dst, int64_t n, float value) noexcept;

}  // namespace smax::kernels

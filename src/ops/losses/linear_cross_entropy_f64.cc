// src/ops/losses/linear_cross_entropy_f64.cc: the float64 row steps of the
// linear cross-entropy (the double overloads declared in
// linear_cross_entropy_tiles.h, and settle_f64), run on the tiles of double
// the DGEMM fills when hidden or weight is f64
// (include/smax/linear_cross_entropy.h, "float64").
//
// A tile row holds the logits of classes [v0, v0 + vc) of one token:
//   u_j = (z_j + b_j) * s   in double, s = double(scale) / double(temperature)
//   t_j = softcap tanh(u_j / softcap) (finite u_j, softcap > 0), else u_j
// (the f32 path's order, every step in float64).
//
// Statistics (scan_chunk): per chunk, the float64 softmax kernel's sweep
// (kernels::exp_terms_row_f64: cm = max t, e_j = e^(t_j - cm) from the exact
// two-term t_j - cm, or fl(t_j - cm) in chunks of range below 32, within
// 2^-49; their compensated sum S), merged into the row's
// reference m: the row sums d = sum e^(t_j - m), s1 = sum e^(t_j - m)
// (t_j - m) and the smoothing sums sum w_j t_j, sum w_j are Neumaier sums
// over the chunks (RowStat's *_c compensations, added in by settle_f64 after
// the last chunk); a chunk's S enters as S e^(cm - m) (exp_diff_f64). m
// moves to cm only when cm > m + kRebase: terms stay below e^64 (no
// overflow), and a sum that is rescaled has shrunk by e^-64 before it is
// rescaled again, so d's error (a few ulps) does not grow with the number of
// chunks. L = m + log d. The argmax is the first maximum of u (softcap keeps
// the order and cannot tie distinct entries: cross_entropy's float64 rule).
//
// Gradient (grad_row): cross_entropy_f64's row formula, per chunk,
//   dz_j = s cap'(u_j) (G A p_j - w_j G a / C - [j = y] G (1 - a) w_y),
//   p_j = e^(t_j - cm) e^(cm - L)   (both exact-argument exps)
// 0 for -inf logits and inactive rows; NaN / all-masked rows as the f32
// path. Nothing here depends on the thread count.
#include <cmath>
#include <cstdint>

#include "core/compensated.h"
#include "kernels/softmax_f64.h"
#include "ops/losses/linear_cross_entropy_tiles.h"

namespace smax::detail::lce {
namespace {

// The reference of a row's float64 sums moves only past this margin.
constexpr double kRebase = 64.0;

// sum += x with Neumaier's compensation kept in comp (CompensatedSum's step
// on a RowStat pair).
void add_to(double& sum, double& comp, double x) {
  CompensatedSum c{sum, comp};
  c.add(x);
  sum = c.sum;
  comp = c.comp;
}

double value_of(double sum, double comp) { return CompensatedSum{sum, comp}.value(); }

// t of a chunk: `u` itself without a softcap, else formed into `t`.
const double* capped(const Setup& s, const double* u, int64_t n, double* t) {
  if (!(s.cap > 0.0f)) return u;
  const double cap = static_cast<double>(s.cap);
  for (int64_t j = 0; j < n; ++j) {
    t[j] = std::isfinite(u[j]) ? cap * std::tanh(u[j] / cap) : u[j];
  }
  return t;
}

// Adds a chunk's (cm, S, h = sum e_j (t_j - cm)) to the row's sums in the
// reference m (see the file comment).
void merge_f64(RowStat& st, double cm, double S, double h) {
  if (st.d == 0.0 && st.d_c == 0.0) {  // the first chunk with a finite term
    st.m = cm;
    st.d = S;
    st.s1 = h;
    return;
  }
  if (cm > st.m + kRebase) {  // e^(m - cm) < e^-64: the old sums shrink
    const double f = exp_diff_f64(st.m, cm);
    const double d = value_of(st.d, st.d_c), s1 = value_of(st.s1, st.s1_c);
    const TwoTerm x = two_diff(st.m, cm);
    st.s1 = f * (s1 + x.hi * d + x.lo * d);
    st.d = f * d;
    st.s1_c = st.d_c = 0.0;
    st.m = cm;
  }
  const double f = exp_diff_f64(cm, st.m);  // cm - m <= kRebase
  const TwoTerm x = two_diff(cm, st.m);
  add_to(st.d, st.d_c, f * S);
  add_to(st.s1, st.s1_c, f * (h + x.hi * S + x.lo * S));
}

}  // namespace

void form_logits(const Setup& s, double* row, int64_t vc, int64_t v0) {
  const double* b = s.f64_ops.bias_at(v0);
  const double sc = s.scale64;
  if (b != nullptr) {
    for (int64_t j = 0; j < vc; ++j) row[j] += b[j];
  }
  if (sc != 1.0) {
    for (int64_t j = 0; j < vc; ++j) row[j] *= sc;
  }
}

void scan_chunk(const Setup& s, const double* u, int64_t n, int64_t v0, int64_t gr,
                const StatRequest& req, RowStat& st, double* scratch) {
  if (st.nan || n == 0) return;
  const double* t = capped(s, u, n, scratch);
  double* e = scratch + n;
  const kernels::F64Terms r = kernels::exp_terms_row_f64(t, n, e);
  if (std::isnan(r.sum)) {  // NaN or +inf in the chunk: a NaN row
    st.nan = true;
    return;
  }
  if (req.argmax) {
    for (int64_t j = 0; j < n; ++j) {
      if (u[j] > st.best) {
        st.best = u[j];
        st.arg = v0 + j;
      }
    }
  }
  if (req.sums) {
    const double* w = s.f64_ops.cw(v0);
    for (int64_t j = 0; j < n; ++j) {
      if (t[j] == -kInf) continue;
      const double wj = w != nullptr ? w[j] : 1.0;
      add_to(st.sum_t, st.sum_t_c, wj * t[j]);
      add_to(st.sum_w, st.sum_w_c, wj);
    }
  }
  const int64_t y = s.lr->target(gr);
  if (s.active(gr) && y >= v0 && y < v0 + n) st.ty = t[y - v0];
  if (r.sum == 0.0) return;  // every t_j = -inf
  double h = 0.0;
  if (req.entropy) {
    CompensatedSum hs;
    for (int64_t j = 0; j < n; ++j) {
      if (e[j] != 0.0) hs.add(e[j] * (t[j] - r.max));
    }
    h = hs.value();
  }
  merge_f64(st, r.max, r.sum, h);
}

void settle_f64(RowStat& st) {
  st.d = value_of(st.d, st.d_c);
  st.s1 = value_of(st.s1, st.s1_c);
  st.sum_t = value_of(st.sum_t, st.sum_t_c);
  st.sum_w = value_of(st.sum_w, st.sum_w_c);
  st.d_c = st.s1_c = st.sum_t_c = st.sum_w_c = 0.0;
}

void grad_row(const Setup& s, double* u, int64_t n, int64_t v0, int64_t gr, double L,
              double sum_w, double g, double* scratch) {
  if (special_grad_row(s, u, n, gr, L, g)) return;
  const double* t = capped(s, u, n, scratch);
  double* e = scratch + n;
  const kernels::F64Terms r = kernels::exp_terms_row_f64(t, n, e);
  if (!(r.sum > 0.0)) {
    // Every t_j -inf (0), or NaN / +inf in a chunk of a row whose given
    // lse is finite (NaN entries; -inf ones 0).
    for (int64_t j = 0; j < n; ++j) u[j] = t[j] == -kInf ? 0.0 : kNan;
    return;
  }
  const GradCoeffs c = grad_coeffs(s, gr, L, sum_w);
  const double factor = g * c.A * exp_diff_f64(r.max, L);  // p_j = factor / (g A) * e_j
  const double b = g * s.a / c.C;
  const double target_term = g * (1.0 - s.a) * c.wy;
  const double* w = s.f64_ops.cw(v0);
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) {
      u[j] = 0.0;
      continue;
    }
    const double p = e[j] == 0.0 ? 0.0 : factor * e[j];  // no inf * 0
    double dt = p - (w != nullptr ? w[j] : 1.0) * b;
    if (v0 + j == c.y) dt -= target_term;
    u[j] = s.scale64 * cap_deriv(s, u[j]) * dt;  // u[j] (and t[j]) read before written
  }
}

void accumulate(const double* x, int64_t n, double* acc) {
  for (int64_t j = 0; j < n; ++j) acc[j] += x[j];
}

}  // namespace smax::detail::lce

// smax/sparse.h: sparse normalisers (sparsemax, 1.5-entmax, alpha-entmax by
// bisection, top-k "sparse" softmax), their backward passes and their
// Fenchel-Young / top-k losses. Semantics follow the `entmax` package
// (deep-spin/entmax); docs in docs/normalizers.md ("Sparse normalisers"),
// hand vectors at the end of that family.
//
// Common contract of every function here
// --------------------------------------
// * Layout, axis, masks, scale/temperature, threads, errors: exactly as in
//   smax/softmax.h. The op works on the logits t = fl(fl(x * s) + mask),
//   s = fl(scale / temperature), t = -inf where the bool mask is 0. Backward
//   passes return d/dx, i.e. s times the derivative in t.
// * Aliasing: dst may be exactly src (in place); dsrc may be exactly dy
//   (backward) or src (loss backward). Other overlaps are rejected.
// * Errors: smax::Error (invalid argument) for everything softmax rejects,
//   plus the op parameters (alpha <= 1 or NaN, n_iter < 1, k < 1, ...),
//   before anything is written.
// * Special values: -inf logits and masked entries are never in the support:
//   exact 0 output and exact 0 gradient. NaN anywhere in a row -> NaN row.
//   +inf in a row -> NaN row (as softmax). A row whose entries are all -inf
//   follows options.empty_row (kZero: zeros, kNan: NaNs). n = 0: empty
//   output. n = 1 (finite): exactly 1.
// * Algorithm: no full sort. One vector pass finds the row max m; since the
//   threshold tau >= max(z) - 1 (z = t for sparsemax, t/2 for 1.5-entmax,
//   (alpha-1) t for alpha-entmax), only entries with z_i > max(z) - 1 can be
//   in the support: a second vector pass compacts those candidates as exact
//   float64 differences t_i - m. The threshold is then found on the
//   candidates in float64 (Michelot's pivoting for sparsemax, Newton
//   pruning + the sorted exact algorithm for 1.5-entmax, bisection for
//   alpha-entmax), and the output y_i is rounded to f32 once. entmax15 on
//   rows of up to 2048 entries skips the compaction: vectorised Newton
//   passes over the whole row, each certifying the exact float64 threshold
//   of its support (docs/normalizers.md, "1.5-entmax").
// * Numerics (f32 result vs the float64 reference on the same f32 logits,
//   any n, any thread count; u = 2^-24):
//     sparsemax, entmax15, entmax_bisect:
//       |y - y_ref| <= 2u |y_ref| + A,  A = 1e-16 (64 + n) max(1, p),
//       p = 1/(alpha-1) (sparsemax 1, entmax15 2): the float64 threshold
//       is exact to ~n * 1e-16 and the output is rounded once;
//     sparse_softmax: |y - y_ref| <= 2e-6 |y_ref| + 1e-36 (as softmax),
//       exact 0 outside the kept set;
//     backward (g = dy, w_i the op's gradient weights given with each
//       function, q = <g,w>/sum w, G = sum_j w_j |g_j| / sum w):
//       |dx - ref| <= 2u |ref| + 1e-15 (n + 100 (1 + |2 - alpha|)) s w_i G
//       + 1e-30: dx_i = s w_i (g_i - q) is evaluated in float64 (w and q
//       never rounded to f32) and rounded once; the second term is the
//       float64 error of q (sums of n terms; w = exp((2 - alpha) log y) with
//       |log y| <= 104) times s w_i, which matters only when one w_i
//       dominates sum w by ~1e9 or more (alpha > 2 and tiny y_i)
//       (sparse_softmax_backward: softmax_backward's bound);
//       dalpha: 1e-6 (1 + |ref|) + 4e-16 (n + 16) M, M = sum_i |g_i|
//       ((y_i + p~_i) / (alpha-1)^2 + (|S_i| + p~_i |H|) / |alpha-1|): the
//       float64 evaluation of terms that cancel (uniform y gives dalpha = 0
//       from terms of size |g| / (alpha-1)^2);
//     losses: |loss - ref| <= 1e-6 (1 + |ref|) per row (sparse_softmax and
//       the alpha = 1 route: 2e-6 (1 + |ref|)); loss gradients
//       |dsrc - ref| <= 2u |ref| + |c s| A (sparse_softmax:
//       2e-6 (|ref| + |c s|) + 1e-36: gradients below FLT_MIN may flush to 0), c the
//       row coefficient.
// * float64 (when any floating input is f64: the logits, or y / dy in the
//   backward): the
//   same algorithms on float64 rows, not f32 kernels behind a cast. The
//   logits are formed in double (t = x s + mask, s = double(scale) /
//   double(temperature)), d = fl(t - m) is rounded once, the thresholds,
//   the outputs, the sums of the backward and the losses are float64, and
//   each output is rounded once to its dtype (f32 / f16 / bf16 outputs: the
//   float64 result rounded once). Against a higher-precision reference on the
//   same float64 logits (u64 = 2^-52; A as above):
//     sparsemax, entmax15, entmax_bisect: |y - y_ref| <= u64 |y_ref| + A;
//     sparse_softmax (k < n): |y - y_ref| <= 1e-14 |y_ref| + 1e-300 (the
//       kept terms e^(t - m) from an exact two-term t - m, a compensated
//       sum), exact 0 outside the kept set;
//     backward: |dx - ref| <= u64 |ref| + 1e-15 (n + 750 (1 + |2 - alpha|))
//       s w_i G + 1e-300 (|log y| <= 745 for float64 y); dalpha:
//       1e-14 (1 + |ref|) + 4e-16 (n + 16) M;
//     losses: |loss - ref| <= 1e-14 (1 + |ref|) per row; loss gradients
//       |dsrc - ref| <= u64 |ref| + |c s| A (sparse_softmax:
//       1e-14 (|ref| + |c s|) + 1e-300).
//   tests/test_sparse_f64.cc checks these against long double oracles on
//   every SIMD target.
// * Determinism: bitwise identical for any `threads` (rows are independent
//   and each row is computed by one task in a fixed order).
#pragma once

#include <cstdint>
#include <optional>

#include "smax/loss.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

// ---------------------------------------------------------------------------
// sparsemax (Martins & Astudillo, 2016)
// ---------------------------------------------------------------------------

/// y = [t - tau]_+ with tau such that sum y = 1 (Euclidean projection onto
/// the simplex). Ties are treated alike (equal logits get equal outputs).
void sparsemax(const TensorView& src, const TensorView& dst,
               const SoftmaxOptions& options = {});

/// VJP from the saved output y: on the support S = {y > 0},
/// dx_i = s * (dy_i - mean_S dy); 0 off the support (w_i = [y_i > 0]).
void sparsemax_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                        const SoftmaxOptions& options = {});

/// Sparsemax loss: (1 - |p|^2) / 2 + <p, t> - t_target, p = sparsemax(t)
/// (>= 0; 0 iff p is the one-hot of the target). Gradient p - d_target.
/// A masked target (t = -inf) gives +inf. Reductions and targets: loss.h.
/// All-masked row: empty_row kZero -> loss 0 and gradient 0; kNan -> NaN.
void sparsemax_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                    const LossOptions& loss = {}, const SoftmaxOptions& options = {});
/// dsrc = c_r * s * (p - d_target) per row (c_r from dloss and the
/// reduction, see loss.h); 0 for ignored rows and masked entries.
void sparsemax_loss_backward(const TensorView& src, const TensorView& target,
                             const TensorView& dloss, const TensorView& dsrc,
                             const LossOptions& loss = {}, const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// 1.5-entmax (Peters, Niculae & Martins, 2019), exact
// ---------------------------------------------------------------------------

/// y = [t/2 - tau]_+^2 with sum y = 1 (exact threshold, not bisection).
void entmax15(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options = {});

/// VJP from y: w = sqrt(y), dx = s * w * (dy - <dy,w>/sum w).
void entmax15_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                       const SoftmaxOptions& options = {});

/// (1 - sum p^1.5) / 0.75 + <p, t> - t_target, p = entmax15(t); gradient
/// p - d_target. Special cases as sparsemax_loss.
void entmax15_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                   const LossOptions& loss = {}, const SoftmaxOptions& options = {});
void entmax15_loss_backward(const TensorView& src, const TensorView& target,
                            const TensorView& dloss, const TensorView& dsrc,
                            const LossOptions& loss = {}, const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// alpha-entmax by bisection (Peters et al. 2019; Correia et al. 2019 for the
// alpha gradient), the `entmax.entmax_bisect` algorithm
// ---------------------------------------------------------------------------

struct EntmaxBisectOptions {
  /// alpha > 1 (finite). alpha = 1 is accepted here only as a scalar and
  /// routes to smax::softmax (backward: softmax_backward, masked entries
  /// zeroed as in sparse_softmax_backward). alpha = 2 gives
  /// sparsemax (to the bisection's accuracy).
  float alpha = 1.5f;
  /// Bisection steps (>= 1). As in the entmax package: tau_lo = max z - 1,
  /// dm = (max z - (1/n)^(alpha-1)) - tau_lo, each step halves dm and moves
  /// tau_lo to tau_lo + dm when the mass there is still >= 1; the output is
  /// the point tau_lo + dm of the last step. tau is kept in float64, so 50
  /// steps reach the exact threshold (steps that no longer move tau are
  /// skipped).
  int n_iter = 50;
  /// Divide the result by its sum (as the package; losses always do).
  bool ensure_sum_one = true;
  /// Optional per-row alpha (f32), broadcast to src's shape with the axis
  /// of size 1 (keepdim); overrides `alpha`. Every value must be finite and
  /// > 1 (the softmax route is only for the scalar alpha).
  std::optional<TensorView> alpha_tensor;
};

/// y = [(alpha-1) t - tau]_+^(1/(alpha-1)), tau by bisection (see
/// EntmaxBisectOptions), n = the row length (masked entries included, as
/// the package's `X.shape[dim]`).
void entmax_bisect(const TensorView& src, const TensorView& dst,
                   const EntmaxBisectOptions& params = {}, const SoftmaxOptions& options = {});

/// VJP from y: w_i = y_i^(2-alpha) (0 off the support),
/// dx = s * w * (dy - <dy,w>/sum w). If `dalpha` is given (f32, src's
/// shape without the axis, or keepdim), it receives per row
///   sum_i dy_i [(y_i - p~_i)/(alpha-1)^2 - (S_i - p~_i H)/(alpha-1)],
/// p~ = w / sum w, S_i = y_i log y_i, H = sum S_i (the package's formula;
/// with a scalar alpha, d loss / d alpha is the sum of these). dalpha needs
/// alpha > 1 (error for the scalar alpha = 1 softmax route).
void entmax_bisect_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                            const std::optional<TensorView>& dalpha = std::nullopt,
                            const EntmaxBisectOptions& params = {},
                            const SoftmaxOptions& options = {});

/// (1 - sum p^alpha) / (alpha (alpha-1)) + <p, t> - t_target with
/// p = entmax_bisect(t) normalised (ensure_sum_one is ignored: always on,
/// as the package); gradient p - d_target. alpha = 1 (scalar): the
/// cross-entropy LSE(t) - t_target (the alpha -> 1 limit).
void entmax_bisect_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                        const EntmaxBisectOptions& params = {}, const LossOptions& loss = {},
                        const SoftmaxOptions& options = {});
void entmax_bisect_loss_backward(const TensorView& src, const TensorView& target,
                                 const TensorView& dloss, const TensorView& dsrc,
                                 const EntmaxBisectOptions& params = {},
                                 const LossOptions& loss = {},
                                 const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// sparse softmax: softmax over the k largest logits (top-k softmax)
// ---------------------------------------------------------------------------

/// y_i = exp(t_i - m) / sum_{j in K} exp(t_j - m) for i in K, 0 elsewhere;
/// K = the k largest logits, ties at the k-th value broken by the lowest
/// index (exactly k entries; -inf entries are never kept, so a row with
/// fewer than k finite logits keeps those). k >= n: plain smax::softmax.
/// k < 1: error.
void sparse_softmax(const TensorView& src, const TensorView& dst, int64_t k,
                    const SoftmaxOptions& options = {});

/// VJP from y: softmax's on the kept set, dx = s * y * (dy - <dy, y>)
/// (softmax_backward's kernel and bound; k is not needed). Unlike
/// softmax_backward, which ignores the options' masks, entries masked by
/// them (bool mask 0, additive mask -inf) get exactly 0 whatever y and dy
/// hold there (a raw y with NaN / inf at masked entries, NaN rows and
/// all-masked rows included); without masks the result is exactly
/// softmax_backward's. The same holds for entmax_bisect_backward's
/// alpha = 1 route.
void sparse_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                             const SoftmaxOptions& options = {});

struct SparseSoftmaxLossOptions {
  /// OPEN point (docs/normalizers.md): whether the target joins the kept set
  /// when it is not among the top k. false (default): loss = log sum_{K} exp(t) -
  /// t_target (can be large; the target gets gradient -1). true: the kept
  /// set is K plus the target (k + 1 entries then), so the loss is a
  /// cross-entropy over that set and is >= 0.
  bool force_target = false;
};

/// log sum_{j in K} exp(t_j) - t_target; gradient p - d_target with p the
/// top-k softmax (over K, plus the target when forced).
void sparse_softmax_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                         int64_t k, const SparseSoftmaxLossOptions& params = {},
                         const LossOptions& loss = {}, const SoftmaxOptions& options = {});
void sparse_softmax_loss_backward(const TensorView& src, const TensorView& target,
                                  const TensorView& dloss, const TensorView& dsrc, int64_t k,
                                  const SparseSoftmaxLossOptions& params = {},
                                  const LossOptions& loss = {},
                                  const SoftmaxOptions& options = {});

}  // namespace smax

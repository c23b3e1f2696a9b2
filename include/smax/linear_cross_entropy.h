// smax/linear_cross_entropy.h: fused linear layer + cross-entropy that never
// materialises the [N, V] logits (large-vocabulary LM heads).
//
//   z = hidden · weight^T + bias        hidden [N, D], weight [V, D], bias [V]
//   loss = cross_entropy(z, target)     (include/smax/cross_entropy.h)
//
// Contract of every function here
// -------------------------------
// * Logits. z_rj = fl(GEMM_rj + bias_j) where GEMM is an f32 SGEMM
//   (OpenBLAS; float64 DGEMM when hidden or weight is f64: "float64" at the
//   end of this file), then exactly cross_entropy's order: u = fl(z * s),
//   s = fl(scale / temperature); t = softcap * tanh(u / softcap) when
//   softcap > 0. SoftmaxOptions' masks are rejected (mask vocabulary entries,
//   e.g. padding, with a -inf bias: such a class has probability 0, is left
//   out of the label-smoothing sums and gets exactly 0 gradient).
//   options.axis must be -1 or 1 (the class axis of the logits [N, V]).
// * Targets: i64 class indices [N] (or [N, 1]) with ignore_index; class
//   weights, label smoothing, z-loss (lse_square_scale), softcap, reductions
//   and empty_mean exactly as cross_entropy (CrossEntropyOptions; the same
//   formulas). Probability targets are not supported (rejected).
// * Memory: extra memory is O(N + Nc * Vc) floats, never N * V: the GEMM is
//   computed in tiles of Nc tokens x Vc classes (LinearCrossEntropyOptions),
//   the logits tile is processed while in cache and discarded; per-token
//   state (online max / sum, target logit, smoothing sums) is float64.
//   Auto tiling: the forward, and the backward given the forward's lse:
//   Vc = min(V, 2048), Nc = min(N, max(1, 8M / Vc)) (a 32 MiB tile); the
//   fused call and the backward without lse: Vc = V (the whole vocabulary,
//   so each logit is computed once), Nc = min(32M / V, N / 32) rounded down
//   to a multiple of 16 and >= 16 (a tile of at most 128 MiB and, for
//   N >= 512, at most 1/32 of the logits), while 32M / V >= 16 (V <= 2M),
//   else as the forward. Larger token_chunk values make the GEMMs faster
//   at the cost of memory (4 * token_chunk * V bytes; 8 on the float64
//   path, whose tiles hold doubles on the same grid).
//   Inputs without a unit stride in either dim are copied one tile at a time
//   (Nc x D, Vc x D); outputs without a unit stride along D go through a
//   temporary of their own size.
// * Cost (in GEMMs of 2 N V D flops): forward 1; backward 3 (logits,
//   dhidden += dz · W, dweight = dz^T · H), plus 1 to recompute the row LSE
//   when the vocabulary is tiled and the forward's lse is not given (or
//   label_smoothing > 0); linear_cross_entropy_fused (loss + gradients) 3.
// * Special values: NaN / +inf anywhere in a row of z (e.g. from NaN / inf
//   inputs or an f32 overflow of the GEMM) -> NaN loss and NaN gradient for
//   that row (and, through the GEMMs, NaN in dweight / dbias). A row whose
//   logits are all -inf (or V = 0) follows options.empty_row (kZero: loss 0,
//   zero gradient; kNan: NaN). A target whose logit is -inf gives loss +inf.
// * Errors: throws smax::Error (invalid argument) naming the argument: ranks
//   and shapes (hidden [N, D], weight [V, D], bias [V], target [N], outputs),
//   dtypes, targets outside [0, V) that are not ignore_index, bad options
//   (as cross_entropy, plus negative chunks, masks, axis), outputs that
//   overlap an input or each other, sizes beyond the BLAS int range
//   (Status::kUnsupported). Nothing is written on error.
// * Determinism: the tile grid depends only on the shapes and chunk options,
//   GEMMs are issued in a fixed order, per-token reductions are merged in
//   vocabulary order, bias gradients are summed in float64 in token order.
//   smax's `threads` only split the per-row kernels of a tile, so results
//   are bitwise identical for any `threads`. GEMMs use OpenBLAS's own
//   threads (OPENBLAS_NUM_THREADS / openblas_set_num_threads; smax does not
//   change them). OpenBLAS 0.3.21's SGEMM gives different last bits for
//   different OpenBLAS thread counts (measured), so bitwise reproducibility
//   needs a fixed OPENBLAS_NUM_THREADS; the tests check bitwise equality
//   over smax threads 1 / 2 / 3 at OpenBLAS threads 1 and 2. Results may
//   differ in the last bits between SIMD targets and BLAS builds.
#pragma once

#include <cstdint>
#include <optional>

#include "smax/cross_entropy.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

/// Tiling of linear_cross_entropy (0 = auto, see the top of this file).
/// Extra memory ~ 4 * token_chunk * vocab_chunk bytes (plus a copy of
/// token_chunk x D / vocab_chunk x D inputs when they are not unit-stride).
struct LinearCrossEntropyOptions {
  int64_t token_chunk = 0;  ///< Nc: tokens per tile, >= 0
  int64_t vocab_chunk = 0;  ///< Vc: classes per tile, >= 0
};

/// Loss of cross_entropy(hidden · weight^T + bias, target) without the
/// [N, V] logits. `dst`: [N] for reduction kNone (ignored rows 0), else one
/// element. CrossEntropyOptions' optional outputs (z_loss, lse, entropy,
/// target_logprob, accuracy) are written as cross_entropy writes them.
/// Error vs float64 (the reference computes z in float64 from the same f32
/// inputs; tests/test_linear_cross_entropy*.cc): per row,
///   |loss - ref| <= 4e-6 * M_r + 2 * E_r * (w_y (1 + 2 zs |L|) + a W / C)
/// with M_r cross_entropy's bound, W = sum of class weights, C = V and
///   E_r = s * (D + 3) * 2^-24 * max_j (sum_k |h_rk| |w_jk| + |b_j|)
/// the worst-case error of the f32 logits (SGEMM in any summation order,
/// plus the bias add and the scale); reduced values: the reduction of those
/// plus one f32 rounding. lse: 2e-6 (1 + |L|) + E_r; entropy: 4e-6 (1 + |L|
/// + max|t|) + 3 E_r (1 + max|t|); target_logprob: 2e-6 (1 + |L| + |t_y|)
/// + 2 E_r; accuracy exact unless the top two logits are within 2 E_r.
/// (Measured worst error / bound over the tests: 0.25.)
void linear_cross_entropy(const TensorView& hidden, const TensorView& weight,
                          const TensorView& target, const std::optional<TensorView>& bias,
                          const TensorView& dst, const CrossEntropyOptions& ce = {},
                          const LinearCrossEntropyOptions& lce = {},
                          const SoftmaxOptions& options = {});

/// Gradients of linear_cross_entropy for the upstream gradient `dloss`
/// (dst's shape): with dz_rj = d loss / d z_rj (cross_entropy_backward's
/// formula, chain rule through softcap and s included; 0 for ignored rows and
/// -inf logits),
///   dhidden = dz · weight   [N, D]
///   dweight = dz^T · hidden [V, D]
///   dbias_j = sum_r dz_rj   [V] (optional; may be given without a bias)
/// Every output is overwritten (not accumulated). `ce.lse` is read (not
/// written) when given and label_smoothing == 0: pass the forward's lse to
/// skip the recomputing pass. Error vs float64, elementwise:
///   |dz_rj - ref| <= e_rj = 4e-6 s cap'_j |G_r| (p_j |A_r| + |B_j|)
///                    + 2.5 s |G_r| p_j (|A_r| + 2 zs w_y) E_r
///                    (+ s |G_r| (p_j |A_r| + |B_j|) E_r / softcap)
///   |dhidden_rk - ref| <= sum_j (e_rj + (V + 2) 2^-24 |dz_rj|) |w_jk|
///   |dweight_jk - ref| <= sum_r (e_rj + (N + 2) 2^-24 |dz_rj|) |h_rk|
///   |dbias_j - ref| <= sum_r (e_rj + 2 * 2^-24 |dz_rj|)
/// (A_r, B_j as in cross_entropy_backward; G_r the row's upstream factor;
/// the last terms are the f32 GEMMs' own bounds). Measured worst error /
/// bound over the tests: 0.07. Masked classes (-inf bias) get exactly 0 in
/// dweight and dbias. dhidden, dweight, dbias must not overlap any input or
/// each other.
void linear_cross_entropy_backward(const TensorView& hidden, const TensorView& weight,
                                   const TensorView& target,
                                   const std::optional<TensorView>& bias,
                                   const TensorView& dloss, const TensorView& dhidden,
                                   const TensorView& dweight,
                                   const std::optional<TensorView>& dbias,
                                   const CrossEntropyOptions& ce = {},
                                   const LinearCrossEntropyOptions& lce = {},
                                   const SoftmaxOptions& options = {});

/// Loss and gradients in one call (the training step of an LM head): writes
/// `dst` as linear_cross_entropy and the gradients for the upstream gradient
/// `dloss` as linear_cross_entropy_backward, computing every logit once
/// (3 GEMMs in all instead of 1 + 3 for the two calls). With reduction
/// kMean / kSum, pass dloss = 1 and scale the gradients by the real upstream
/// gradient later (they are linear in it). Of CrossEntropyOptions' optional
/// outputs only `lse` is supported (written). Same bounds as the two calls.
void linear_cross_entropy_fused(const TensorView& hidden, const TensorView& weight,
                                const TensorView& target, const std::optional<TensorView>& bias,
                                const TensorView& dst, const TensorView& dloss,
                                const TensorView& dhidden, const TensorView& dweight,
                                const std::optional<TensorView>& dbias,
                                const CrossEntropyOptions& ce = {},
                                const LinearCrossEntropyOptions& lce = {},
                                const SoftmaxOptions& options = {});

// float64 (hidden or weight f64): the whole computation runs in float64
// arithmetic. The rule: the float64 path runs when hidden or weight is f64;
// every other floating operand (the other of the two, bias, class weights,
// dloss, a given lse) is then read exactly as double, and each output is
// the float64 value rounded once to its view's dtype (store_f64: f64 exact,
// f32 / f16 / bf16 rounded once, no double rounding). Calls where neither is
// f64 run the f32 path above, whatever the other operands' dtypes.
//   z_rj = fl(DGEMM_rj + b_j), u = fl(z * s) with s = double(scale) /
//   double(temperature) (the float options' exact values), t = softcap
//   tanh(u / softcap) in double; DGEMM tiles on the same grid as the f32
//   path (cblas_dgemm on smax's threads, core/gemm.h: dgemm_parallel); per
//   chunk the float64 softmax kernel's exact-argument exp and compensated
//   sum, merged over chunks as compensated sums (linear_cross_entropy_f64.cc);
//   dz in double (cross_entropy_backward's float64 row formula); dhidden
//   and dweight accumulated by DGEMM in double, dbias in double, each
//   rounded once to its output's dtype. The argmax (accuracy) is the first
//   maximum of u. The backward reads a given lse only when it is f64 (an
//   f32 lse would undo the float64 accuracy: it is then validated and the
//   LSE recomputed). Every option, special value, empty shape, error and the
//   determinism above are as on the f32 path (same bits for any `threads`;
//   the fused gradients are the bits of the backward without lse for
//   dloss = 1).
// Error vs exact arithmetic on the (f64-widened) inputs, enforced by
// tests/test_linear_cross_entropy_f64.cc against a long double oracle on
// every SIMD target (1 to 32000 classes, chunks from 1, logits to +-600 and
// near 12345; measured worst error / bound: 0.07): the f32 bounds above
// with 1e-14 in place of 4e-6 / 2e-6 and 2^-53 in place of 2^-24, times
// F = 1 + softcap + (1 + 1 / softcap) max_j |u_rj| with a softcap (the
// float64 tanh's rounding), F = 1 otherwise:
//   E_r = s (D + 3) 2^-53 max_j (sum_k |h_rk| |w_jk| + |b_j|)
// (|z error| <= (D + 3) 2^-53 sum_k |h_rk w_jk| + ...: the DGEMM in any
// summation order, the bias add and the scale);
//   loss: 1e-14 F M_r + 2 E_r (w_y (1 + 2 zs |L|) + a W / C);
//   reduced: the sum (over the mean's denominator) of those plus
//     (N + 2) 2^-53 sum_r |loss_r| (/ denominator);
//   lse: 1e-14 F (1 + |L|) + E_r; target_logprob: 1e-14 F (1 + |L| + |t_y|)
//   + 2 E_r; entropy: 1e-14 F (1 + |L| + max|t| + |H|) + 3 E_r (1 + max|t|);
//   z_loss: 1e-14 F |z| (1 + |L|) / |L| + 2 zs w_y |L| E_r; accuracy exact
//   unless the top two u are within 2 E_r;
//   dz: e_rj = 1e-14 F s cap'_j |G_r| (p_j |A_r| + |B_j|)
//              + 2.5 s |G_r| p_j (|A_r| + 2 zs w_y) E_r
//              (+ s |G_r| (p_j |A_r| + |B_j|) E_r / softcap) + 1e-300,
//   |dhidden_rk - ref| <= sum_j (e_rj + (V + 2) 2^-53 |dz_rj|) |w_jk|,
//   |dweight_jk - ref| <= sum_r (e_rj + (N + 2) 2^-53 |dz_rj|) |h_rk|,
//   |dbias_j - ref| <= sum_r (e_rj + (N + 2) 2^-53 |dz_rj|)
// (B_j includes the target's (1 - a) w_y [j = y]; the 1e-300 is a p_j below
// float64's underflow). Cost: the DGEMMs (N = 512, D = 1024, V = 32000, one
// thread, AVX2: forward 2.3x, fused 1.7x the f32 path's time); tiles of
// doubles (twice the f32 path's extra memory on the same grid).

}  // namespace smax

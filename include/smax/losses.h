// smax/losses.h: every loss of smax. Here: fused cross-entropy (PyTorch
// semantics plus the extras large-vocabulary training uses) and the
// z-losses. Included at the end, from their families' headers: linear
// cross-entropy (smax/linear_cross_entropy.h), the sparse losses
// (sparsemax / entmax / top-k softmax losses, smax/sparse.h) and StableMax
// cross-entropy (smax/normalizers.h). smax/cross_entropy.h, the earlier
// name, includes this file.
//
// Common contract of every function here
// --------------------------------------
// * Logits: `src` f32 of any rank and strides, classes along `options.axis`
//   (SoftmaxOptions). The logit of class j is formed in this order:
//     u_j = fl(x_j * s),  s = fl(scale / temperature)       (scale)
//     c_j = softcap * tanh(u_j / softcap)  when softcap > 0  (softcap)
//     t_j = fl(c_j + additive_mask_j); t_j = -inf where bool_mask_j == 0 (mask)
//   (without softcap exactly SoftmaxOptions' logits). Masks are an smax
//   extension (PyTorch has none): a masked class, or any class whose logit
//   is -inf, has probability 0, is left out of every sum (label smoothing,
//   probability targets) and gets exactly 0 gradient. +-inf u are not
//   softcapped (-inf stays "masked", +inf makes the row NaN).
// * Targets (`target`): either class indices (DType::kI64, src's shape
//   without the class axis, or with it of size 1) with `ignore_index`, or
//   class probabilities (DType::kF32, src's shape; no ignore_index), chosen
//   by the dtype, as in torch.nn.functional.cross_entropy.
// * Reductions (LossOptions, include/smax/loss.h): kNone -> one value per
//   row (targets' shape; ignored rows give 0), kSum, kMean. kMean divides by
//   the sum of w[target] over non-ignored rows (class indices) or by the
//   number of rows (probabilities), as PyTorch does; a zero denominator
//   gives NaN, or 0 with `empty_mean = EmptyMean::kZero`. With counted rows
//   whose weights are all 0 the gradient is PyTorch's too: every element of
//   every non-ignored row is NaN (w_y / sum w = 0 / 0; masked entries stay
//   0), ignored rows 0; with kZero it is 0. (The fused gradient, the
//   backward and the z-losses alike.)
// * Backward: `dloss` has dst's shape; the result is d(loss)/d(src), chain
//   rule through softcap and s included; masked entries and ignored rows get
//   exactly 0. `dsrc` may be exactly `src` (same data and strides: the
//   gradient overwrites the logits in place); any other overlap is rejected.
// * Special values per row: NaN or +inf logits -> NaN loss and NaN gradient
//   (masked entries of the gradient stay exactly 0). A row whose logits are
//   all -inf / masked (or n = 0) follows `options.empty_row`: kZero -> loss
//   0, z-loss 0, lse -inf, entropy 0, target_logprob -inf, accuracy 0 and
//   zero gradient; kNan -> NaN everywhere. A class-index target whose own
//   logit is -inf gives loss +inf (-log 0) and a finite gradient.
// * Errors: throws smax::Error (invalid argument) naming the argument for
//   everything softmax.h rejects, plus targets outside [0, C) that are not
//   ignore_index, a target of the wrong dtype or shape, weight not f32 [C],
//   label_smoothing outside [0, 1] or NaN, lse_square_scale < 0 or not
//   finite, softcap < 0 or not finite, an output of the wrong shape, outputs
//   that overlap each other or an input. Nothing is written on error.
// * Determinism: bitwise identical results for any `threads` (each row is
//   computed by one task; reductions are summed in float64 in row order).
//   Results may differ in the last bits between SIMD targets.
// * Cost: forward reads each logit once (online (max, sum) scan, with the
//   sums that label smoothing, entropy and argmax need fused in); backward
//   reads each logit twice (scan + gradient; the second read hits the cache
//   for rows up to the L2 size) and writes it once. Without label smoothing
//   the backward takes the forward's `lse` (CrossEntropyOptions::lse) and
//   skips the scan. The fused path (CrossEntropyOptions::grad) computes loss
//   and unit gradient in one call: one read and one write of each logit from
//   memory (the gradient pass re-reads the row from cache).
#pragma once

#include <optional>

#include "smax/loss.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

/// Options of cross_entropy / cross_entropy_backward.
struct CrossEntropyOptions {
  /// ignore_index (-100), reduction (mean), class weight, empty_mean.
  LossOptions loss;
  /// PyTorch's label_smoothing a in [0, 1]: the target distribution becomes
  /// (1 - a) * target + a / C (C = number of classes, masked ones included
  /// in C but their share dropped).
  float label_smoothing = 0.0f;
  /// PaLM z-loss coefficient (typically 1e-4): adds lse_square_scale *
  /// LSE(t)^2 to each row's loss (weighted by w[target] like the rest of the
  /// row). >= 0.
  float lse_square_scale = 0.0f;
  /// Logit soft-capping (Gemma 2): t = softcap * tanh(u / softcap), applied
  /// after scale / temperature and before the masks. 0 = off; >= 0.
  float softcap = 0.0f;

  // ---- optional outputs of the forward (f32). Rows use the targets' shape
  // (src's shape without the class axis, or with it of size 1). -------------
  /// The z-loss part of the loss (already included in `dst`), reduced like
  /// the loss (kNone: per row; else one element).
  std::optional<TensorView> z_loss;
  /// Per row: LSE(t). cross_entropy writes it; cross_entropy_backward READS it
  /// when given and label_smoothing == 0, to skip the scan of the logits
  /// (pass the forward's output; a stale value gives a wrong gradient).
  std::optional<TensorView> lse;
  /// Per row: entropy of softmax(t), -sum_j p_j log p_j.
  std::optional<TensorView> entropy;
  /// Per row: log p_target = t_y - LSE(t) (class indices; 0 on ignored rows),
  /// or sum_j q_j (t_j - LSE(t)) for probability targets q (no smoothing).
  std::optional<TensorView> target_logprob;
  /// argmax_j t_j == target (first maximum; for probability targets the
  /// target's argmax) as 1 / 0: per row for kNone (ignored rows 0), else the
  /// unweighted mean over non-ignored rows (kMean) or the count (kSum).
  std::optional<TensorView> accuracy;

  // ---- fused gradient (forward only) ---------------------------------------
  /// When given, cross_entropy also writes d(loss)/d(src) for a unit upstream
  /// gradient (dloss = 1 for kMean / kSum; every dloss_r = 1 for kNone), f32
  /// of src's shape, computed per row right after that row's scan while the
  /// row is still in cache: each logit comes from memory once (one read, one
  /// write in total) instead of three times (forward, backward scan,
  /// backward write). This is the fused loss + gradient of large-vocabulary
  /// trainers (Liger-Kernel; flash-attn's CrossEntropyLoss(inplace_backward)):
  /// the caller multiplies by the real upstream gradient later (a scalar for
  /// kMean / kSum, per row for kNone). `grad` may be exactly `src` (same
  /// data and strides): the logits are then overwritten by their gradient
  /// after the loss is computed; any other overlap with an input or output
  /// is rejected. The bits are exactly those of cross_entropy_backward(src,
  /// target, dloss = 1, dsrc, ce without `lse`, options) (enforced by tests).
  /// cross_entropy_backward and linear_cross_entropy reject it.
  std::optional<TensorView> grad;
};

/// Cross-entropy from logits, per row (w = class weights or 1, a =
/// label_smoothing, C classes, U = classes with t_j > -inf, zs =
/// lse_square_scale, L = LSE(t)):
///   class index y: loss = (1 - a) w_y (L - t_y) + (a / C) sum_{j in U} w_j (L - t_j)
///                          + zs w_y L^2
///   probabilities q: loss = sum_j w_j q'_j (L - t_j) + zs L^2,
///                    q'_j = (1 - a) q_j + a / C (the a / C share over U only)
/// (exactly torch.nn.functional.cross_entropy when zs = 0, softcap = 0 and
/// there are no masks), then reduced (see the top of this file).
/// Error vs float64 (enforced by tests/test_cross_entropy*.cc on every SIMD
/// target, n up to 256000, adversarial rows included; observed <= 0.1 of it):
///   per-row loss: |loss - ref| <= 4e-6 * M_r, M_r = (1 - a) |w_y| (1 + |L| +
///     |t_y|) + (a / C) sum_{j in U} |w_j| (1 + |L| + |t_j|) + 2 zs |w_y| (1 +
///     |L|) |L| (probabilities: sum_j |w_j q_j| (1 + |L| + |t_j|) in the
///     first term, 2 zs (1 + |L|) |L| in the last);
///   reduced loss: 4e-6 * (the same reduction of the M_r) + 2^-23 |value|;
///   z_loss: 4e-6 |z| (1 + |L|) / |L|; lse: 2e-6 (1 + |L|); entropy: 4e-6
///   (1 + |L| + sum_j p_j |t_j| + H); target_logprob: 2e-6 (1 + |L| + |t_y|)
///   (probabilities: max_j |t_j| for |t_y|); accuracy: exact. The argmax is
///   the first maximum of t, or of u with softcap and no additive mask (the
///   cap is monotonic; rounding the capped values to f32 would make ties),
///   or with softcap and an additive mask of the float64 values
///   softcap * tanh(u_j / softcap) + mask_j (the f32 t = fl(c_j + mask_j)
///   ties entries whose capped logits differ in their last bits; the
///   library evaluates the entries within the f32 rounding of the max in
///   float64, as the oracle does).
void cross_entropy(const TensorView& src, const TensorView& target, const TensorView& dst,
                   const CrossEntropyOptions& ce = {}, const SoftmaxOptions& options = {});

/// Gradient of cross_entropy: per row, with G = dloss_r (kNone), dloss (kSum)
/// or dloss / denominator (kMean), p = softmax(t), W_U = sum_{j in U} w_j:
///   class index: dt_j = G (p_j ((1 - a) w_y + (a / C) W_U + 2 zs w_y L)
///                          - (1 - a) w_y [j == y] - (a / C) w_j)
///   probabilities: dt_j = G (p_j (sum_k w_k q''_k + 2 zs L) - w_j q'_j)
///     (q''_k = (1 - a) q_k + [k in U] a / C)
///   dsrc_j = s * (1 - tanh^2(u_j / softcap)) * dt_j  (softcap > 0), s * dt_j
///   otherwise; 0 for masked j and ignored rows.
/// `dsrc` may be exactly `src` (in place). Error vs float64, elementwise:
///   |dsrc_j - ref| <= 4e-6 * s * cap'_j * |G| * (p_j |A| + |B_j| + [j == y] |D|)
///                     * (1 + |u_j| / softcap + 0.02 |L| [f32 lse input]
///                        + 0.03 (|t_j| + |L|) [softcap and an additive mask]) + 1e-30
/// with A the p_j coefficient, B_j the w_j term, D = (1 - a) w_y. The
/// |u_j| / softcap term: cap' = 4 e^(-2|u/cap|) / (1 + e^(-2|u/cap|))^2
/// amplifies the f32 rounding of u / cap by 2 |u / cap|. With the forward's
/// f32 `lse` as input, p_j = e^(t_j - lse) carries lse's rounding (<= 2^-24
/// |L| relative). With softcap and an additive mask, t_j = fl(c_j + mask_j)
/// rounds the capped value to the f32 grid of |t_j| (a mask of 3500 leaves
/// c_j 2^-13 of resolution): against the float64 c_j + mask_j, p_j =
/// e^(t_j - L) is off by up to 2^-24 (|t_j| + |L|) relative, twice that
/// when the f32 tanh puts c_j on the other side of a rounding boundary
/// (fuzz/regressions/losses/cross_entropy_backward_softcap_bound). The
/// gradient of a row whose p_j factor is beyond f32 (|G A| / sum >= 2^126,
/// e.g. 2 zs L with L near FLT_MAX) is evaluated in float64: inf where the
/// float64 value is beyond f32, the other entries finite (p_j = 0 -> 0).
void cross_entropy_backward(const TensorView& src, const TensorView& target,
                            const TensorView& dloss, const TensorView& dsrc,
                            const CrossEntropyOptions& ce = {},
                            const SoftmaxOptions& options = {});

// float64 (cross_entropy and cross_entropy_backward with f64 `src`): the
// whole computation runs in float64 arithmetic (the logits t = x * s + mask
// with s = double(scale) / double(temperature), class weights, probability
// targets and dloss read exactly; an exact-argument float64 exp and
// compensated sums), and each output is the float64 value rounded once to
// its dtype. Error vs exact arithmetic on those inputs (enforced by
// tests/test_cross_entropy_f64.cc against long double on every SIMD target,
// rows to 32000 classes, logits to +-600): the f32 bounds above with 1e-14 in
// place of 4e-6 / 2e-6 and the extra terms dropped, times
// F = 1 + softcap + (1 + 1 / softcap) max_j |u_j| when softcap > 0 (the
// float64 tanh's rounding) and F = 1 otherwise:
//   per-row loss: 1e-14 F M_r; lse: 1e-14 F (1 + |L|); target_logprob:
//   1e-14 F (1 + |L| + |t_y|); entropy: 1e-14 F (1 + |L| + sum_j p_j |t_j| + H);
//   gradient: 1e-14 F s cap'_j |G| (p_j |A| + |B_j| + [j == y] |D|),
// each plus 1e-300 (a p_j below float64's underflow, e^(t_j - m) < 2^-1074,
// is 0). The fused gradient keeps the bits of the backward with dloss = 1;
// the bits do not depend on the thread count. cross_entropy_backward
// recomputes L from the f64 logits: a given `lse` is validated but not read
// (an f32 lse would undo the float64 accuracy). Other operands' dtypes (f32
// loss, bf16 gradient) take the f64 path too: it is chosen by src's dtype.

// ---------------------------------------------------------------------------
// z-losses
// ---------------------------------------------------------------------------

/// PaLM z-loss on its own: per row loss = coefficient * LSE(t)^2 (the
/// auxiliary loss that keeps log Z near 0; coefficient typically 1e-4).
/// Without targets every row counts with weight 1: kMean divides by the
/// number of rows; `loss.weight` must be empty and ignore_index is unused.
/// Error vs float64: |loss - ref| <= 4e-6 * c * |w| * (1 + |L|) * |L| per row.
/// All-masked rows: kZero -> 0, kNan -> NaN. coefficient finite and >= 0.
void z_loss(const TensorView& src, const TensorView& dst, float coefficient,
            const LossOptions& loss = {}, const SoftmaxOptions& options = {});
/// The same over the rows of `target` (i64 class indices): rows whose target
/// is ignore_index are skipped and each row is weighted by w[target] (kMean
/// divides by their sum): exactly the z-loss part of cross_entropy with
/// lse_square_scale = coefficient.
void z_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
            float coefficient, const LossOptions& loss = {}, const SoftmaxOptions& options = {});

/// Gradient: dsrc_j = s * G * 2 c w L softmax(t)_j (0 where masked).
/// Error vs float64: 4e-6 * (|L| + 0.1) * |s G 2 c w p_j| + 1e-30, i.e.
/// 4e-6 |dsrc_j| plus the absolute error of L (~2u, from the f32 exps),
/// which dominates when L = log Z is near 0 (its terms m and log d cancel).
void z_loss_backward(const TensorView& src, const TensorView& dloss, const TensorView& dsrc,
                     float coefficient, const LossOptions& loss = {},
                     const SoftmaxOptions& options = {});
void z_loss_backward(const TensorView& src, const TensorView& target, const TensorView& dloss,
                     const TensorView& dsrc, float coefficient, const LossOptions& loss = {},
                     const SoftmaxOptions& options = {});

/// The Z-loss of de Brebisson & Vincent ("An exploration of softmax
/// alternatives belonging to the spherical loss family", ICLR 2016), a
/// replacement for cross-entropy, per row over the D unmasked logits:
///   z = (t - mean t) / std t (population std), loss = softplus(a (b - z_y)) / a
/// then weighted by w[y], ignore_index and reduced like cross_entropy.
/// a > 0 and b finite, no defaults (the paper tunes both). Masked entries
/// are left out of the mean and std. std = 0 (constant rows, D = 1) gives
/// NaN (z is 0/0); D = 0 follows empty_row. A masked target gives NaN.
/// Error vs float64: |loss - ref| <= 4e-6 * |w_y| (1 + |loss| + |z_y|) per row.
void spherical_z_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                      float a, float b, const LossOptions& loss = {},
                      const SoftmaxOptions& options = {});

/// Gradient: dsrc_k = s * G * (-sigmoid(a (b - z_y)) / std) *
/// ([k == y] - 1/D - z_y z_k / D), 0 where masked.
/// Error vs float64: 4e-6 * s * |G| * |w_y| * sigmoid / std * (1 + |z_y z_k|)
/// elementwise (+1e-30).
void spherical_z_loss_backward(const TensorView& src, const TensorView& target,
                               const TensorView& dloss, const TensorView& dsrc, float a,
                               float b, const LossOptions& loss = {},
                               const SoftmaxOptions& options = {});

// float64 (z_loss, spherical_z_loss and their backward with f64 `src`): the
// row math runs in float64 (src/ops/losses/z_loss_f64.h): the logits
// t = x * s + mask in double (s = double(scale) / double(temperature)),
// L = m + log S from the float64 softmax kernel's exact-argument terms and
// compensated sum (gradient entries with p_j = 0 exactly 0 even when
// s G 2 c w L overflows); the spherical statistics on the row scaled by a
// power of two (|t 2^-e| < 2: no overflow or underflow for any finite
// logits), the mean as an unevaluated pair hi + lo from a Neumaier sum, so
// the deviations t_k - mean keep their relative accuracy however large the
// logits are (rows at 1e4 +- 1e-2), and a compensated sum of their squares. Each output is the float64 value rounded once to its
// dtype. Error vs exact arithmetic on those logits (enforced by
// tests/test_z_loss_f64.cc against long double on every SIMD target):
//   z_loss: 1e-14 c |w| (1 + |L|) |L|; gradient 1e-14 (|L| + 1) |s G 2 c w p_j|;
//   spherical_z_loss: 1e-14 |w_y| (1 + |loss| + |z_y|); gradient
//   1e-14 s |G| |w_y| sigmoid / std (1 + |z_y z_k|); each plus 1e-300.

}  // namespace smax

// The other losses (after the declarations above: linear_cross_entropy.h
// includes this header through cross_entropy.h).
#include "smax/linear_cross_entropy.h"
#include "smax/normalizers.h"
#include "smax/sparse.h"

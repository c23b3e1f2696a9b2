// smax/reweight.h: re-weighting normalisers (docs/normalizers.md,
// "Re-weighting normalisers"):
// SA-Softmax (self-adjust), the sigmoid and softplus (LSSA) normalisers,
// Power-Softmax, probability-domain temperature and logit standardisation,
// each with its backward pass (vector-Jacobian product).
//
// Common contract of every function here
// --------------------------------------
// * Layout, aliasing and errors as in smax/softmax.h: any rank and strides,
//   reduction over `options.axis`; an output may be exactly an input (in
//   place: dst == src, or dsrc == src / dy); any other overlap is rejected.
//   Errors throw smax::Error (invalid argument) naming the op and the
//   argument, and nothing is written (op parameters are checked before any
//   row is touched).
// * Logits: the row function sees t_i = fl(fl(x_i * s) + additive_mask_i),
//   s = fl(options.scale / options.temperature), and t_i = -inf where
//   bool_mask_i == 0 (SoftmaxOptions' semantics). "Visible" entries are
//   those with t_i != -inf. Backward passes return dsrc = s * dL/dt.
// * Special values (every op): masked / -inf entries give exactly 0 output
//   and exactly 0 gradient. NaN anywhere in a row -> NaN row (forward and
//   backward). A row with no visible entry follows options.empty_row (kZero:
//   0 output and 0 gradient; kNan: NaN). n = 0: nothing is written, no error.
//   +inf: per op below. No denormal output is produced by a forward pass
//   (values below FLT_MIN are flushed to 0; covered by the 1e-36 terms).
// * Error bounds: stated per op against a float64 evaluation of the same
//   formula on the same f32 logits t (src/reference/reweight.h); measured on
//   every SIMD target by tests/test_reweight.cc. u = 2^-24.
// * Determinism: a row is computed by one task with a fixed operation order,
//   so results are bitwise identical for any `threads`. They may differ in
//   the last bits between SIMD targets.
#pragma once

#include <cstdint>
#include <optional>

#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

// ---------------------------------------------------------------------------
// SA-Softmax (Self-Adjust Softmax; Zheng et al. 2025, "Self-Adjusting
// Softmax").
// ---------------------------------------------------------------------------
struct SelfAdjustOptions {
  /// false: y = t * softmax(t). true: y = (t - a) / (b - a) * softmax(t),
  /// a = min(min t, 0), b = max(max t, 0) over the visible entries.
  bool normalized = false;
  /// Normalised variant only (an OPEN point, docs/normalizers.md). true (default): the exact
  /// gradient of the forward, with a and b as functions of t (the gradient
  /// of a reaches the first arg-min when min t < 0, that of b the first
  /// arg-max when max t > 0; the clamped value 0 has none) -- what autograd
  /// of a PyTorch implementation gives. false: a and b are treated as
  /// constants (stop-gradient).
  bool grad_through_bounds = true;
};

/// y_i = r_i * p_i, p = softmax(t), r = t (plain) or (t - a) / (b - a)
/// (normalised; r = 0 when b == a, i.e. every visible t is 0).
/// Error: |y - ref| <= 2.2e-6 |ref| + 1e-36 (1 + |r_i|) (the softmax bound of
/// smax/softmax.h on p, then one rounding; r is evaluated in float64).
/// +inf in a row -> NaN row (as softmax). n = 1: y = r_0 (plain t_0;
/// normalised 1 for t_0 > 0, else 0).
void self_adjust_softmax(const TensorView& src, const TensorView& dst,
                         const SelfAdjustOptions& sa = {}, const SoftmaxOptions& options = {});

/// dt_j = p_j (dy_j q_j - <dy, y>), q = 1 + t (plain) or c + r (normalised,
/// c = 1 / (b - a)); with grad_through_bounds the terms
/// c (<dy, y> - <dy, p>) (at the first arg-min, if min t < 0) and
/// -c <dy, y> (at the first arg-max, if max t > 0) are added. Rows with
/// b == a get 0. Recomputes p from src. Error: |dx - ref| <= 2.2e-6 s p_j
/// (|dy_j q_j| + 2 sum_i |dy_i r_i p_i|) (+ 2.2e-6 s c (sum|dy r p| + sum|dy p|)
/// at the arg-min / arg-max) + 1e-36 s (|dy_j q_j| + sum|dy r|) + 1e-30.
void self_adjust_softmax_backward(const TensorView& src, const TensorView& dy,
                                  const TensorView& dsrc, const SelfAdjustOptions& sa = {},
                                  const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Sigmoid attention normaliser (Ramapuram et al. 2024, "Theory, Analysis,
// and Best Practices for Sigmoid Self-Attention").
// ---------------------------------------------------------------------------
struct SigmoidNormalizerOptions {
  /// Fixed bias b (finite). Unset: b = -ln n with n as below.
  std::optional<float> bias;
  /// n for the default bias: > 0 uses this fixed (training) length; 0 uses
  /// the row length (the default, masked entries included), or the
  /// number of visible entries when count_visible is true.
  int64_t n_fixed = 0;
  bool count_visible = false;
};

/// y_i = sigmoid(t_i + b), b = fl(-ln n) rounded to f32 (or the given bias);
/// no row reduction. The sum t + b is used exactly (TwoSum), so the error is
/// |y - ref| <= 2e-6 |ref| + 1e-36 for any t (ref evaluated in float64 on
/// the f32 t and b). +inf -> 1, -inf / masked -> 0. All visible entries
/// masked -> empty_row policy; NaN -> NaN row.
void sigmoid_normalizer(const TensorView& src, const TensorView& dst,
                        const SigmoidNormalizerOptions& sig = {},
                        const SoftmaxOptions& options = {});

/// dx = s * dy * y * (1 - y) from the saved output y (elementwise; dsrc may
/// alias y or dy); masked entries (masks in options) get exactly 0.
/// Error: |dx - ref| <= 2.5e-7 |ref| + 1e-30 (4 roundings).
void sigmoid_normalizer_backward(const TensorView& y, const TensorView& dy,
                                 const TensorView& dsrc, const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Softplus normaliser, LSSA (Gao & Spratling 2025, "Softplus Attention with
// Re-weighting Boosts Length Extrapolation in Large Language Models").
// ---------------------------------------------------------------------------
struct SoftplusNormalizerOptions {
  /// Fixed lambda (finite, > 0). Unset: lambda = log N / log head_dim with N
  /// the row's number of visible entries (the OPEN point of the log base is
  /// moot: the ratio of two logs does not depend on it; natural logs are
  /// used).
  std::optional<float> lambda;
  /// d for the default lambda; must be >= 2 when lambda is unset.
  int64_t head_dim = 0;
  /// Re-weighting (LSSAR): y = l1norm(A^power) with A the softplus
  /// normalisation, computed as softmax(power * log softplus(z)) (that is,
  /// exp(p log A - max) normalised). 1 (default) = no re-weighting; finite, > 0.
  /// The paper's optional offset (OPEN) is not applied.
  float power = 1.0f;
};

/// z_i = fl(lambda_f32 * t_i) (lambda rounded to f32, like `scale`);
/// y_i = softplus(z_i) / sum_j softplus(z_j), softplus(z) = max(z, 0) +
/// log1p(e^-|z|), evaluated scaled by e^(-min(max z, 0)) so that rows of very
/// negative z do not underflow. Error (power 1): |y - ref| <= 2e-6 |ref| +
/// 1e-36. With power p != 1: |y - ref| <= |ref| (2e-6 + 3 u p (1 + |L_i| +
/// sum_j y_j |L_j|)) + 1e-36, L = log softplus(z) (the f32 rounding of L
/// and of p * L). +inf in a row (or z overflowing to +inf) -> NaN row.
/// z = -inf (masked, or lambda * t below -FLT_MAX) has softplus 0 (no mass);
/// a row where every z is -inf (no mass at all: every visible t below
/// -FLT_MAX / lambda) follows options.empty_row like a row with no visible
/// entry (forward and backward; kNan: NaN at every entry).
void softplus_normalizer(const TensorView& src, const TensorView& dst,
                         const SoftplusNormalizerOptions& sp = {},
                         const SoftmaxOptions& options = {});

/// dt_j = lambda * power * y_j * (sigmoid(z_j) / softplus(z_j)) * (dy_j -
/// <dy, y>) (lambda depends on N only: no gradient). Recomputes y from src.
/// Error: |dx - ref| <= s lambda p y_j rho_j (e_j |dy_j - <dy,y>| + 2 sum_i
/// e_i |dy_i y_i|) + 10 u |ref| + 1e-30, e = the forward's relative bound.
void softplus_normalizer_backward(const TensorView& src, const TensorView& dy,
                                  const TensorView& dsrc, const SoftplusNormalizerOptions& sp = {},
                                  const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Power-Softmax (Zimerman et al. 2024, "Power-Softmax: Towards Secure LLM
// Inference over Encrypted Data").
// ---------------------------------------------------------------------------

/// y_i = t_i^p / sum_j t_j^p for an even p > 0 (odd or <= 0 -> error),
/// computed as (t/M)^p with M = max |t| over the visible entries (weights by
/// |t|: -2 outranks 1). A row whose visible entries are all 0 -> uniform
/// 1/N over them (documented choice). +inf in a row -> NaN row.
/// Error: |y - ref| <= |ref| max(2e-6, (2p + 4 log2 p + 6) u) + 1e-36.
void power_softmax(const TensorView& src, const TensorView& dst, int p = 2,
                   const SoftmaxOptions& options = {});

/// dt_j = (p t_j^(p-1) / sum t^p) (dy_j - <dy, y>), computed as
/// p / (M S) * (t_j/M)^(p-1) * (dy_j - <dy, y>), S = sum (t/M)^p. All-zero
/// rows get 0. Error: |dx - ref| <= kappa s p/(M S) |t_j/M|^(p-1)
/// (|dy_j - <dy,y>| + sum_i |dy_i y_i|) + 1e-30, kappa = 2 max(2e-6,
/// (2p + 4 log2 p + 6) u).
void power_softmax_backward(const TensorView& src, const TensorView& dy, const TensorView& dsrc,
                            int p = 2, const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Probability-domain temperature (sharpening / smoothing of a distribution).
// ---------------------------------------------------------------------------

/// y_i = p_i^(1/T) / sum_j p_j^(1/T) = softmax(log p / T), T finite > 0.
/// Evaluated as (p/M)^(1/T) in float64 (M = max p), rounded once.
/// p_i = 0 -> 0 (log 0 = -inf, like a masked entry); a row whose visible
/// entries are all 0 follows empty_row; a negative p_i (other than -inf
/// from masking), +inf or NaN -> NaN row. Masks: a bool mask or an additive
/// mask of 0 / -inf; the row transform t = fl(fl(p s) + mask) is applied to
/// p (y does not depend on s), so a finite negative additive mask makes
/// negative inputs (NaN row). Error: |y - ref| <= 2e-6 |ref| + 1e-36.
void probability_temperature(const TensorView& p_src, const TensorView& dst, float T,
                             const SoftmaxOptions& options = {});

/// Gradient w.r.t. p: dp_j = (1/T) p_j^(1/T - 1) / sum p^(1/T) * (dy_j -
/// <dy, y>) (= y_j (dy_j - <dy,y>) / (T p_j) for p_j > 0). At p_j = 0 the
/// one-sided limit: 0 for T < 1, (dy_j - <dy,y>) / sum p for T == 1, and
/// +-inf (NaN where dy_j == <dy,y>) for T > 1. Recomputes y from p_src.
/// Error: |dx - ref| <= 4e-6 |c_j| (|dy_j - <dy,y>| + sum|dy y|) + 1e-30,
/// c_j = the factor in front of (dy_j - <dy,y>).
void probability_temperature_backward(const TensorView& p_src, const TensorView& dy,
                                      const TensorView& dsrc, float T,
                                      const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Logit standardisation for knowledge distillation (Sun et al. 2024, "Logit
// Standardization in Knowledge Distillation", CVPR).
// ---------------------------------------------------------------------------
struct LogitStandardizationOptions {
  float temperature = 1.0f;  ///< finite, > 0 (divides z^; applied after options' scale)
  float eps = 1e-7f;         ///< finite, >= 0, added to the std
  bool unbiased = true;      ///< std with N - 1 (true) or N in the denominator
};

/// z^ = (t - mean) / (std + eps), y = softmax(z^ / temperature); mean and
/// std over the visible entries (N of them; N = 1 -> std = 0, y = 1).
/// mean and std in float64; v = z^ / T is rounded to f32 once and fed to
/// the library softmax kernel. Error: |y - ref| <= |ref| (2e-6 + 4u (|v_i| +
/// sum_j y_j |v_j|)) + 1e-36 (the f32 rounding of v). +inf -> NaN row.
void logit_standardization(const TensorView& src, const TensorView& dst,
                           const LogitStandardizationOptions& ls = {},
                           const SoftmaxOptions& options = {});

/// Full Jacobian through mean and std: with d = t - mean, k = 1 / (T (std +
/// eps)), h = y (dy - <dy, y>), D = N - 1 (unbiased) or N:
///   dt_j = k (h_j - d_j C),  C = sum_i h_i d_i / ((std + eps) D std)
/// (C = 0 when std = 0). Recomputes y from src. Error: see
/// docs/normalizers.md ("Re-weighting normalisers") (relative to the terms' magnitudes).
void logit_standardization_backward(const TensorView& src, const TensorView& dy,
                                    const TensorView& dsrc,
                                    const LogitStandardizationOptions& ls = {},
                                    const SoftmaxOptions& options = {});

}  // namespace smax

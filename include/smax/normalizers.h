// smax/normalizers.h: the softmax alternatives beyond the sparse family
// (those are in smax/sparse.h), in two parts:
//  * rescaled and rectified softmaxes: SSMax, softpick, clipped softmax,
//    StableMax (+ its cross-entropy) and the Softmax Collapse detector;
//  * re-weighting normalisers: SA-Softmax, the sigmoid and softplus (LSSA)
//    normalisers, Power-Softmax, probability-domain temperature and logit
//    standardisation.
// smax/rescaled.h and smax/reweight.h, their earlier homes, include this file.
//
// ==== Part 1: rescaled and rectified softmaxes (docs/normalizers.md,
// "Rescaled and rectified softmaxes") ====
//
// Common contract of the functions of part 1 (as in smax/softmax.h)
// -------------------------------------------------------------
// * Layout: any rank 0..kMaxRank, any strides (elements), reduction over
//   `options.axis`. `dst`/`dsrc` have the shape of `src`.
// * Logits: the row function sees t_i = fl(fl(x_i * s) + additive_mask_i),
//   s = fl(scale / temperature), t_i = -inf where bool_mask_i == 0. Entries
//   with t_i = -inf are "masked": exactly 0 output and exactly 0 gradient.
//   Backward passes return dsrc = s * d(loss)/dt (the chain rule through s).
// * Aliasing: dst may be exactly src (in place); in backward passes dsrc may
//   be exactly dy (or src). Any other overlap is rejected.
// * Errors: throws smax::Error (invalid argument) naming the op and the
//   argument for every invalid view, shape, option or parameter; nothing is
//   written on error.
// * Special values: NaN anywhere in a row -> NaN row (losses: NaN loss and a
//   NaN gradient row). +inf anywhere in a row -> NaN row. A row whose entries
//   are all masked / -inf follows `options.empty_row` (kZero: zeros, zero
//   gradient; kNan: NaN). n = 0: empty output, no error.
// * Determinism: bitwise identical results for any `threads` (rows are
//   independent and each is computed by one task on a fixed grid). Results
//   may differ in the last bits between SIMD targets.
// * Error bounds are against float64 math on the same f32 logits t, and are
//   the ones enforced by tests/test_rescaled*.cc.
//
// ==== Part 2: re-weighting normalisers (docs/normalizers.md, "Re-weighting
// normalisers"), each with its backward pass (vector-Jacobian product) ====
//
// Common contract of the functions of part 2
// ------------------------------------------
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
#include <string_view>

#include "smax/loss.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

// ============================================================================
// Part 1: rescaled and rectified softmaxes (docs/normalizers.md, "Rescaled and
// rectified softmaxes")
// ============================================================================


// ---------------------------------------------------------------------------
// SSMax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention",
// arXiv:2501.19399): y = softmax((s ln n) t).
// ---------------------------------------------------------------------------

/// Parameters of ssmax / ssmax_backward.
struct SsmaxOptions {
  /// The scaling parameter s (learnable per head in the paper; 0.43 is the
  /// paper's initialisation). Finite, any sign. Ignored when `s_rows` is set.
  float s = 0.43f;
  /// Optional per-row s: f32, broadcast (NumPy rules) to src's shape with the
  /// axis of size 1 (e.g. [heads, 1, 1] for scores [heads, q, k]). Non-finite
  /// values give NaN rows.
  std::optional<TensorView> s_rows;
  /// 0 (default): n = the number of visible entries of the row (t_i > -inf,
  /// i.e. unmasked), as in the paper's attention with masking. > 0: use this
  /// fixed n for every row (e.g. the training context length). Must be >= 0.
  int64_t fixed_n = 0;
};

/// y = softmax(c t) per row, c = fl(s * ln n) (rounded once from float64);
/// the logits of the softmax are u_i = fl(t_i * c) (exactly what softmax
/// does with `scale`), and masked entries stay masked whatever the sign of c.
/// Computed by the library's softmax row kernels (options.algorithm; kAuto =
/// three-pass reload), so softmax's contract holds: relative error <= 2e-6
/// vs float64 softmax of u for outputs >= 1e-30 (absolute <= 1e-36 below).
/// n = 1 visible entry: c = 0 and that entry is exactly 1. c <= 0 (s <= 0)
/// is allowed (c = 0: uniform over the visible entries).
void ssmax(const TensorView& src, const TensorView& dst, const SsmaxOptions& params = {},
           const SoftmaxOptions& options = {});

/// VJP of ssmax given the source `src` (needed for t and n), the saved
/// output `y` and the upstream gradient `dy`:
///   dsrc = sigma * c * y * (dy - <dy, y>)       (sigma = scale/temperature)
///   ds   = ln n * sum_i t_i y_i (dy_i - <dy, y>)  (one value per row)
/// `ds` (optional) is a per-row f32 output with src's shape without the axis
/// (or keepdim): the gradient with respect to each row's s; for a scalar or
/// broadcast s, sum it over the broadcast rows. Entries with y_i = 0 do not
/// contribute to ds (masked t_i = -inf). All-masked rows: dsrc and ds follow
/// empty_row (0 or NaN).
/// Bounds: |dsrc - ref| <= 2e-6 * |sigma c| |y| (|dy| + |<dy,y>|) + 1e-30
///         (plus softmax_backward's dot term 1.02e-6 |sigma c| |y| sum_j
///         |dy_j y_j| where <dy, y> cancels: the same kernel, smax/softmax.h);
///         |ds - ref| <= 2e-6 * ln n * sum_i |t_i y_i| (|dy_i| + |<dy,y>|) + 1e-30
///         (plus the dot term: 1.02e-6 ln n sum_i |t_i y_i| sum_j |dy_j y_j|).
/// dsrc may alias dy.
void ssmax_backward(const TensorView& src, const TensorView& y, const TensorView& dy,
                    const TensorView& dsrc, const SsmaxOptions& params = {},
                    const SoftmaxOptions& options = {}, const TensorView* ds = nullptr);

// ---------------------------------------------------------------------------
// softpick (Zuhri et al. 2025, "Softpick: No Attention Sink, No Massive
// Activations with Rectified Softmax", arXiv:2504.20966).
// ---------------------------------------------------------------------------

struct SoftpickOptions {
  /// Added to the denominator: 0 or a finite value >= FLT_MIN (so that the
  /// reciprocal of the denominator fits f32). 1e-6 by default (the paper's
  /// reference kernels use 1e-6 and 1e-8).
  float eps = 1e-6f;
};

/// y_i = relu(e^t_i - 1) / (sum_{j visible} |e^t_j - 1| + eps), computed in
/// the shifted form relu(e^(t_i - m) - e^-m) / (sum |e^(t_j - m) - e^-m| +
/// eps e^-m) with the shift m = N ln 2, N = round(max t * log2 e) (e^-m is
/// then exactly 2^-N and t - m is reduced exactly; |max t| > 2048 (256
/// without FMA): m = max t and e^-m = 0). Masked entries (t = -inf) are left
/// out of the denominator (smax's choice, and the authors' code's: its
/// reference softpick zeroes |e^t - 1| where t is not finite). Not
/// sum-to-one; a row whose visible entries are all <= 0 gives exactly 0 (and
/// 0 gradient).
/// Bound: with S = sum_vis |e^t_j - 1| + eps, q_j = e^t_j / S, K = sum_vis q_j:
///   |y_j - ref| <= 2e-6 * ((1 + K) |y_j| + q_j) + 1e-36.
/// K ~ 1 unless many t are near 0 (there softpick is ill-conditioned in f32:
/// e^t - 1 cancels).
void softpick(const TensorView& src, const TensorView& dst, const SoftpickOptions& params = {},
              const SoftmaxOptions& options = {});

/// VJP of softpick from the source (y is recomputed):
///   dsrc_j = sigma (e^t_j / S) (1[t_j > 0] dy_j - sgn(t_j) <dy, y>), sgn(0) = -1.
/// Bound: |dsrc - ref| <= 2e-6 sigma q_j ((1 + K)(|dy_j| + |r|) + G) + 1e-30,
/// r = <dy, y>, G = sum_i |dy_i| (y_i + q_i). dsrc may alias dy or src.
/// Masked entries (t = -inf) get exactly 0 and are left out of <dy, y> (and
/// of G), so any dy there (even +-inf or NaN) does not reach the others.
void softpick_backward(const TensorView& src, const TensorView& dy, const TensorView& dsrc,
                       const SoftpickOptions& params = {}, const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Clipped softmax (Bondarenko, Nagel & Blankevoort 2023, "Quantizable
// Transformers: Removing Outliers by Helping Attention Heads Do Nothing",
// arXiv:2306.12929).
// ---------------------------------------------------------------------------

struct ClippedSoftmaxOptions {
  /// Stretch below 0: finite and <= 0. The paper writes gamma = -alpha / T
  /// (T the sequence length); -0.025 by default (its BERT setting).
  float gamma = -0.025f;
  /// Stretch above 1: finite and >= 1 (1 by default, the paper's choice).
  float zeta = 1.0f;
};

/// y_i = clip((zeta - gamma) p_i + gamma, 0, 1), p = softmax(t): entries
/// whose probability is below -gamma / (zeta - gamma) become exactly 0 (a
/// head can attend to nothing without growing its logits). Computed as the
/// library's softmax row, then z_i = (zeta - gamma) p_i + gamma in float64,
/// clipped and rounded once. Special rows as softmax (NaN / +inf -> NaN row;
/// empty rows: policy 0 or NaN); masked entries get exactly 0 (gamma <= 0).
/// Bound, with p the float64 softmax and a = zeta - gamma:
///   |y_i - ref| <= (1 + 2^-23) a (2e-6 p_i + 1e-36) + 2^-24 |ref|.
void clipped_softmax(const TensorView& src, const TensorView& dst,
                     const ClippedSoftmaxOptions& params = {},
                     const SoftmaxOptions& options = {});

/// VJP of clipped_softmax from the source (p is recomputed): with
/// u_i = a dy_i where 0 <= z_i <= 1 (the clip passes the gradient, inclusive
/// at both ends as torch.clamp) and u_i = 0 where clipped,
///   dsrc_j = sigma p_j (u_j - <u, p>).
/// Bound, with e_i = 2e-6 p_i + 1e-36 (softmax's bound), r = <u, p> and
/// E = sum_i |u_i| e_i (the error of r):
///   |dsrc_j - ref| <= sigma (e_j (|u_j| + |r|) + (p_j + e_j) E)
///                     + 2^-24 |ref_j| + 1e-30 + flip_j,
/// flip_j = sigma (p_j + e_j) a sum_i |dy_i| (p_i + [i = j]) over the entries
/// i whose z_i lies within a e_i of 0 or 1 (there f32 and float64 may clip
/// differently). dsrc may alias dy or src. Masked entries get exactly 0 and
/// are left out of <u, p>.
void clipped_softmax_backward(const TensorView& src, const TensorView& dy,
                              const TensorView& dsrc, const ClippedSoftmaxOptions& params = {},
                              const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// StableMax (Prieto et al. 2025, "Grokking at the Edge of Numerical
// Stability", arXiv:2501.04697).
// ---------------------------------------------------------------------------

/// y_i = s(t_i) / sum_j s(t_j), s(x) = x + 1 (x >= 0), 1 / (1 - x) (x < 0).
/// Not shift invariant: the max is never subtracted; per lane one branch of
/// s is selected (IfThenElse), the other is discarded. Masked entries have
/// s(-inf) = 0. The sum is accumulated in float64, so no overflow for any
/// finite t. Bound: relative error <= 1e-6 for outputs >= 1e-30 (absolute
/// <= 1e-36 below; outputs below FLT_MIN are flushed to 0).
void stablemax(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options = {});

/// VJP of stablemax from the source: dsrc_j = sigma (s'_j / sum s)(dy_j - <dy, y>),
/// s' = 1 (t >= 0), 1 / (1 - t)^2 (t < 0).
/// Bound: |dsrc - ref| <= 2e-6 sigma (s'_j / sum s)(|dy_j| + |r| + sum_i |dy_i| y_i)
/// + 1e-30 (r = <dy, y>). dsrc may alias dy or src.
void stablemax_backward(const TensorView& src, const TensorView& dy, const TensorView& dsrc,
                        const SoftmaxOptions& options = {});

/// StableMax cross-entropy: loss_r = -log s(t_target) + log sum_j s(t_j),
/// computed as log1p(sum_{j != target} s(t_j) / s(t_target)) (no
/// cancellation). Targets, ignore_index, class weights and reductions as in
/// smax/loss.h. A masked target gives +inf; an all-masked row gives loss 0
/// (empty_row kZero) or NaN (kNan). Bound (per row, before the reduction):
/// |loss - ref| <= 1e-6 * |ref| + 1e-30.
void stablemax_cross_entropy(const TensorView& src, const TensorView& target,
                             const TensorView& dst, const LossOptions& loss = {},
                             const SoftmaxOptions& options = {});

/// Gradient: dsrc_j = c_r sigma (s'_j / s_j)(y_j - d_jt) = c_r sigma (y_j - d_jt) / (1 + |t_j|)
/// (c_r from `dloss` and the reduction, see loss.h); 1 - y_t is computed as
/// sum_{j != t} s_j / sum s. Ignored rows and masked entries get 0.
/// Bound: |dsrc - ref| <= 2e-6 |c_r sigma| |y_j - d_jt| / (1 + |t_j|) + 1e-30.
void stablemax_cross_entropy_backward(const TensorView& src, const TensorView& target,
                                      const TensorView& dloss, const TensorView& dsrc,
                                      const LossOptions& loss = {},
                                      const SoftmaxOptions& options = {});

// float64 (ssmax, softpick, clipped_softmax, stablemax,
// stablemax_cross_entropy and their backward when any of their floating
// inputs (src, y, dy; not the masks) is f64): the same
// formulas and special rows in float64 arithmetic
// (src/ops/normalizers/rescaled_f64.h): logits t = x s + mask in double
// (s = double(scale) / double(temperature)); SSMax's c = s ln n not rounded
// to f32 and the float64 softmax kernels on u_i = fl(t_i c); softpick's
// |e^t - 1| e^-m as e^(t - m) (-expm1(-t)) (t > 0) or e^-m (-expm1(t)) with
// an exact two-term t - m; StableMax's sums compensated, and taken on
// s 2^-600 when they would overflow float64 (logits near 1e308). Each output
// is the float64 value rounded once to its dtype. Error vs exact arithmetic
// on those logits (enforced by tests/test_rescaled_f64.cc against long
// double on every SIMD target, rows to 32000, logits to +-600 and at
// 12345.678 +- 0.01): the f32 bounds above with 1e-14 in place of 2e-6 /
// 1e-6, 4e-16 in place of 1.02e-6 and 1e-300 in place of 1e-30 / 1e-36:
//   ssmax: relative 1e-14 (softmax's float64 bound on u); dsrc:
//     1e-14 |sigma c| |y| (|dy| + |<dy,y>|) + 4e-16 |sigma c| |y| sum |dy y|;
//     ds: 1e-14 ln n sum_i |t_i y_i| (|dy_i| + |<dy,y>|);
//   softpick: 1e-14 ((1 + K) |y_j| + q_j); dsrc: 1e-14 sigma q_j ((1 + K)
//     (|dy_j| + |r|) + G);
//   clipped_softmax: the f32 bound with e_i = 1e-14 p_i + 1e-300 and 2^-53
//     in place of 2^-24 (the float64 softmax kernel, <u, p> compensated);
//   stablemax: relative 1e-14; dsrc: 1e-14 sigma (s'_j / sum s)(|dy_j| + |r|
//     + sum_i |dy_i| y_i); cross-entropy: 1e-14 |ref|, its gradient
//     1e-14 |c_r sigma| |y_j - d_jt| / (1 + |t_j|);
// each plus 1e-300. As in f32, an SSMax logit u_i = t_i c beyond the range
// of float64 is +inf (a NaN row); the StableMax cross-entropy whose k s_t
// would fall below DBL_MIN takes log(others) - log k - log s_t (the ratio
// is then beyond 2^600). The collapse detector below stays f32: it asks what f32,
// f16 and bf16 arithmetic do.

// ---------------------------------------------------------------------------
// Softmax Collapse detector (Prieto et al. 2025): a row has collapsed when
// its softmax normaliser sum_i exp(t_i - m) (m = max t) rounds to exactly 1
// in the working precision, so that the max entry gets probability exactly
// 1 and its cross-entropy gradient vanishes.
// ---------------------------------------------------------------------------

/// Working precision simulated by softmax_collapse_fraction.
enum class Precision : int {
  kF32 = 0,   ///< the library's f32 kernels (gap ~16.6 for one competitor)
  kF16 = 1,   ///< IEEE binary16 (gap ~7.6)
  kBF16 = 2,  ///< bfloat16 (gap ~5.5)
};

/// "f32" / "f16" / "bf16" (throws smax::Error naming the bad value otherwise).
Precision parse_precision(std::string_view name);
const char* precision_name(Precision precision) noexcept;

/// Fraction of rows that have collapsed in `precision`:
///  * kF32: e_i = the library's f32 exp of the exact difference t_i - m (the
///    max entry gives exactly 1), summed in the library's blocked order
///    (the f32 softmax kernels' ExpSum: f32 lane accumulators, <= 16 adds
///    per lane, float64 across blocks and lanes); collapsed iff that sum
///    rounded to f32 is exactly 1.
///  * kF16 / kBF16: e_i = the same f32 exp rounded to the precision
///    (round-to-nearest-even, with its subnormals and overflow to inf), then
///    summed left to right, every partial sum rounded to the precision;
///    collapsed iff the final sum is exactly 1. (The model of a kernel that
///    computes and accumulates in that precision.)
/// Rows with NaN or +inf, all-masked rows and empty rows (n = 0) are not
/// collapsed; a row with one visible entry always is. Returns collapsed rows
/// / rows (0 when there are no rows). `flags` (optional, f32, src's shape
/// without the axis or keepdim) receives 1 for a collapsed row, else 0.
/// Deterministic (any thread count); the f32 answer depends on the SIMD
/// target's lane count only through the summation order, as the softmax's
/// sum does.
double softmax_collapse_fraction(const TensorView& src, Precision precision = Precision::kF32,
                                 const SoftmaxOptions& options = {},
                                 const TensorView* flags = nullptr);


// ============================================================================
// Part 2: re-weighting normalisers (docs/normalizers.md, "Re-weighting
// normalisers")
// ============================================================================


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

// float64 (every op of part 2 and its backward when any of its floating
// inputs (src, p_src, y, dy; not the masks) is f64): the same formulas and
// special rows in float64 arithmetic (src/ops/normalizers/reweight_f64.h):
// logits t = x s + mask in double (s = double(scale) / double(temperature));
// the quantities the f32 path rounds to f32 stay in double: the sigmoid's
// default bias b = -ln n, softplus's lambda = ln N / ln d and
// z = lambda t, the standardised logits v = ((t - mean) / (std + eps)) / T
// (the mean kept as a two-double pair on a row scaled by a power of two, so
// logits far from 0 keep their deviations); softmaxes by the float64
// softmax kernel, sums and dots compensated, e^(t + b) with an exact
// two-term argument; no flush of tiny values. Rows at the ends of float64's
// range (logits near 1e308 or subnormal) are scaled by powers of two or
// divided in an order that keeps every intermediate finite where the result
// is (tests/test_reweight_f64.cc, ExtremeMagnitudes). Each output is the
// float64 value rounded once to its dtype. Error vs exact arithmetic on those t
// (and the op's double b, lambda, z), u = 2^-53, enforced by
// tests/test_reweight_f64.cc against long double on every SIMD target
// (rows to 32000, logits to +-600 and at 12345.678 +- 0.01):
//   self_adjust_softmax: 1e-14 |ref| + 1e-300 (1 + |r_i|); backward: the f32
//     bound with 1e-14 in place of 2.2e-6 and 1e-300 in place of 1e-36 / 1e-30;
//   sigmoid_normalizer: 1e-14 |ref| + 1e-300; backward: 1e-15 |ref| + 1e-300;
//   softplus_normalizer: power 1: 1e-14 |ref| + 1e-300; power p:
//     |ref| (1e-14 + 4 u p (1 + |L_i| + sum_j y_j |L_j|)) + 1e-300; backward:
//     the f32 bound with that e_j, 10 u in place of 10 u_f32 and 1e-300;
//   power_softmax: |ref| max(1e-14, (2p + 4 log2 p + 6) u) + 1e-300; backward:
//     the f32 bound with kappa = 2 max(1e-14, (2p + 4 log2 p + 6) u);
//   probability_temperature, with a = 1/T, L_i = |ln(p_i / max p)| and
//     Ly = sum_j y_j L_j (the rounding of a moves (p / M)^a by a u L):
//     (1e-14 + 2 a u (2 + L_i + Ly)) |ref| + 1e-300; backward, with
//     e_j = 2e-14 + 4 max(a, 1) u (1 + L_j + Ly): |c_j| (e_j |dy_j - <dy,y>|
//     + 2 sum_i |dy_i| y_i e_i) + 1e-300 (the one-sided limits at p_j = 0
//     exactly);
//   logit_standardization: |ref| (1e-14 + 8 u (|v_i| + sum_j y_j |v_j|)) +
//     1e-300; backward (docs/normalizers.md): s k (dh_j + |d_j| dC + 4 u
//     (|h_j| + |d_j C|)) + 1e-300 with e_i the forward's relative bound.

}  // namespace smax

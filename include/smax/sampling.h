// smax/sampling.h: Gumbel noise, Gumbel-softmax, Gumbel-max, fused
// softmax + top-k, temperature / top-k / top-p / min-p sampling. Soft-NMS
// moved to smax/detection.h (included here, so code that found it here
// still does).
//
// Common contract of the row-wise functions here
// ------------------------------------------------------------------
// * Rows: the reduced axis is `options.axis` of `src` (any rank 0..kMaxRank,
//   any strides). Row r is the r-th row in row-major order over src's other
//   dims. Logits are those of softmax (include/smax/softmax.h):
//   t_i = fl(fl(x_i * s) + additive_mask_i), s = fl(scale / temperature),
//   t_i = -inf where bool_mask_i == 0. -inf logits are "masked": they get
//   probability 0 and are never sampled (unless a row has nothing else).
// * Randomness: the Gumbel noise of element i of row r is
//   g(seed, r, i) = -log(-log U), U in [2^-53, 1 - 2^-53] (never 0 or 1),
//   from Philox4x32-10 (Random123) keyed by the 64-bit seed with the counter
//   (i / 2, r); evaluated in float64 (exact definition: docs and
//   src/kernels/sampling.h). It depends only on (seed, r, i), so results are
//   bitwise identical for any thread count, any layout (strides, axis
//   permutation) and whichever elements a filter keeps; the same seed always
//   gives the same samples.
// * Index outputs are DType::kI64 views. Per-row outputs have src's shape
//   without the axis, or with it of size 1 (keepdim). -1 means "no sample":
//   the row is empty (n = 0), every entry is masked / -inf, or the row holds
//   NaN (or +inf, for which the softmax is undefined) where documented.
// * Errors: smax::Error (invalid argument) naming the argument and value, for
//   everything softmax rejects plus the parameters below; nothing is written
//   on error. Outputs must not overlap inputs, masks or each other unless
//   stated.
// * Determinism: bitwise identical for any `threads` (rows are independent,
//   one task per row); results may differ in the last bits between SIMD
//   targets for probabilities; never for top-k indices, noise or sampled
//   indices, which use exact comparisons and float64 noise (one exception:
//   a top-p cut within 1e-6 of the boundary with top_k off, see
//   sampling_filter).
// * float64 (every op here when an input, src / y_soft / dy / noise, is
//   f64): the same semantics on float64 rows (src/ops/sampling/
//   sampling_f64.h): logits t = x s + mask in double; top-k and the filters
//   compare doubles, z = t / T in double; Gumbel-max and sample take the
//   argmax of t + g (z + g) with t in double (not rounded to f32) and the
//   same float64 noise g(seed, r, i); gumbel_softmax's soft row is the
//   float64 softmax of z = fl(fl(t + g) / tau) (g not rounded to f32) and
//   its backward c y (dy - <dy, y>) with c = s / tau in double; the
//   probabilities and nucleus masses are e^(z - max) with an exact two-term
//   argument, summed with compensation; no flush of tiny values. Error vs
//   exact arithmetic on those values (tests/test_sampling_f64.cc, long
//   double, every SIMD target): softmax_topk's probabilities (both forms)
//   and gumbel_softmax's soft row relative 1e-14 (+ 1e-300);
//   gumbel_softmax_backward softmax_backward's float64 bound
//   (smax/softmax.h); indices and kept sets equal the exact float64
//   decisions (a nucleus boundary within ~1e-15 of top_p aside). Cost: the
//   float64 rows are scalar (top-k by nth_element on the row, the nucleus
//   by a sort of the visible entries, Gumbel-max evaluating the noise of
//   every entry within 41 of the max).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "smax/detection.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

// ---------------------------------------------------------------------------
// Gumbel noise, Gumbel-softmax, Gumbel-max
// ---------------------------------------------------------------------------

/// Writes g(seed, r, i) (rounded once from float64 to f32) to every element
/// of the f32 view `dst`, with rows along `axis`. The same noise that
/// gumbel_softmax / gumbel_max / sample draw for a source of dst's shape.
void gumbel_noise(const TensorView& dst, uint64_t seed, int64_t axis = -1);

struct GumbelSoftmaxOptions {
  float tau = 1.0f;    ///< temperature of the relaxation; finite and > 0
  bool hard = false;   ///< straight-through: dst is one-hot (see below)
  uint64_t seed = 0;   ///< noise seed (ignored when `noise` is given)
  /// Explicit noise g (f32, exactly src's shape) instead
  /// of the seeded noise: for tests, hand vectors (docs/sampling.md) and
  /// replaying a sample.
  std::optional<TensorView> noise;
  /// Optional f32 output (src's shape): the soft sample y. With hard = true
  /// this is what gumbel_softmax_backward needs (straight-through gradient).
  std::optional<TensorView> y_soft;
};

/// Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017):
///   z_i = fl(fl(t_i + fl(g_i)) / tau)   (f32; g_i rounded once to f32),
///   y_i = softmax(z)_i                  (the library softmax of z).
/// hard = false: dst = y. hard = true: dst = one-hot at
///   h = argmax_i ((double) t_i + g_i)   (float64, lowest index on ties:
///   exactly gumbel_max's index for the same seed / noise), y -> y_soft.
/// Error (soft): softmax's bound against float64 softmax of the same f32 z:
///   |y - y_ref| <= 2e-6 * y_ref + 1e-36. The noise itself is exact float64
///   (then one f32 rounding).
/// Special values: masked / -inf logits -> y = 0 (never the hard index). A
/// row with NaN or +inf (in t or the noise) -> NaN row (hard too). All
/// masked -> options.empty_row (kZero: zeros, hard too; kNan: NaN). n = 0:
/// nothing. n = 1: y = 1.
/// Aliasing: dst (and y_soft) may be exactly src (in place); dst and y_soft
/// must not overlap.
void gumbel_softmax(const TensorView& src, const TensorView& dst,
                    const GumbelSoftmaxOptions& gumbel = {},
                    const SoftmaxOptions& options = {});

/// Backward of gumbel_softmax given the saved soft sample y (for hard = true
/// too: the straight-through estimator passes the gradient of the soft
/// sample): dx = c * y * (dy - <dy, y>) with c = fl(fl(scale / temperature)
/// / tau) (f32). Error: |dx - dx_ref| <= 2e-6 * c * |y| * (|dy| + |<dy,y>|)
/// + 1e-30, plus softmax_backward's dot term 1.02e-6 * c * |y| *
/// sum_j |dy_j y_j| when <dy, y> cancels (smax/softmax.h). Masked entries (by
/// options' masks) get exactly 0. dx may alias dy.
void gumbel_softmax_backward(const TensorView& y_soft, const TensorView& dy,
                             const TensorView& dx, float tau = 1.0f,
                             const SoftmaxOptions& options = {});

/// Gumbel-max sampling: indices[r] = argmax_i ((double) t_i + g(seed, r, i))
/// (float64, lowest index on ties), an exact sample of softmax(t) (up to the
/// 2^-53 granularity of U). `indices`: i64, src's shape without the axis
/// (or keepdim). -1 for n = 0, all-masked rows and rows with NaN or +inf.
/// Cost: one SIMD max pass, then per chunk of 1024 entries a SIMD filter
/// (t_i > best - 37, as g <= 36.74), a SIMD Philox and f32 exp giving a
/// log-free bound (an entry whose U <= 1 - 2 e^(t_i - best) cannot win), and
/// the exact float64 noise only for the few entries that pass (about 2 per
/// row). 64 x 128256 on one thread: ~10x the time of softmax.
void gumbel_max(const TensorView& src, const TensorView& indices, uint64_t seed,
                const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Fused softmax + top-k
// ---------------------------------------------------------------------------

struct SoftmaxTopkOptions {
  int64_t k = 1;             ///< 0 <= k <= n (k > n is an error)
  bool renormalize = false;  ///< probabilities over the k winners only
};

/// The k largest logits of each row with their softmax probabilities, in one
/// read of the row: the online normaliser (m, d) and a SIMD threshold filter
/// that keeps the k best candidates; only the k winners are exponentiated
/// for the output.
///   probs:   f32, src's shape with the axis replaced by k;
///   indices: i64, same shape.
/// Order: descending logit, ties by the lower index (torch.topk(sorted=True)
/// with a stable tie rule). probs[j] = softmax(t)[indices[j]] over the FULL
/// row (not renormalised: the k probabilities sum to <= 1), or with
/// renormalize = true e^(t_j - m) / sum over the k winners.
/// Error: as softmax, |p - p_ref| <= 2e-6 * p_ref + 1e-36 (outputs below
/// FLT_MIN are flushed to 0); renormalised: float64 arithmetic on the k
/// winners, |p - p_ref| <= 1e-6 * p_ref + 1e-36.
/// Special values: masked / -inf logits rank last (ascending index) with
/// probability 0. NaN or +inf anywhere -> probs NaN; indices rank NaN above
/// +inf above everything else (like torch.topk). All masked -> indices
/// 0..k-1 and probs per options.empty_row (0 or NaN). n = 0 -> k must be 0.
/// k = 0 -> empty outputs.
/// Aliasing: outputs must not overlap src or each other.
void softmax_topk(const TensorView& src, const TensorView& probs, const TensorView& indices,
                  const SoftmaxTopkOptions& topk, const SoftmaxOptions& options = {});
/// Same with renormalize = false.
void softmax_topk(const TensorView& src, const TensorView& probs, const TensorView& indices,
                  int64_t k, const SoftmaxOptions& options = {});

// ---------------------------------------------------------------------------
// Sampling with temperature, top-k, top-p (nucleus) and min-p
// ---------------------------------------------------------------------------

/// How top-k treats entries tied with the k-th largest z.
enum class TopKTies : int32_t {
  /// Exactly top_k entries: ties at the boundary by the lower index (the
  /// default, and smax's only behaviour before this option, C ABI 0.6).
  kExact = 0,
  /// Every entry equal to the k-th largest z is kept (more than top_k on
  /// ties): Hugging Face transformers' TopKLogitsWarper,
  /// `scores < torch.topk(scores, k)[0][..., -1, None]` removed.
  kKeep = 1,
};

/// "exact" / "keep" (throws smax::Error naming top_k_ties and the bad value).
TopKTies parse_top_k_ties(std::string_view name);
/// "exact" / "keep"; "unknown" for other values.
const char* top_k_ties_name(TopKTies ties) noexcept;

struct SampleOptions {
  /// Sampling temperature T (on top of options.scale / options.temperature):
  /// z_i = fl(t_i / T). T = 0 is greedy: the first index of max t (top_k,
  /// top_p, min_p and the seed are then ignored). Finite and >= 0.
  float temperature = 1.0f;
  /// Keep the max(top_k, min_tokens_to_keep) largest z (ties: top_k_ties).
  /// 0 = off (min_tokens_to_keep then does not turn it on); a count >= the
  /// visible entries keeps everything. >= 0.
  int64_t top_k = 0;
  /// Nucleus: keep the shortest prefix (descending z, ties by lower index)
  /// whose probability mass (softmax over what top-k kept) reaches top_p,
  /// and at least min_tokens_to_keep entries of what top-k kept. 1 = off.
  /// In (0, 1].
  float top_p = 1.0f;
  uint64_t seed = 0;
  /// Min-p (transformers' MinPLogitsWarper), applied after top-p: keep the
  /// entries with p_i >= min_p * p_max, decided exactly as
  ///   fl64(z_i - z_max) >= fl64(log(min_p))   (float64; z_max the row's max)
  /// and at least min_tokens_to_keep entries of what top-p kept (the best,
  /// ties by the lower index). 0 = off; in [0, 1] (NaN is an error);
  /// min_p = 1 keeps the entries equal to the max.
  float min_p = 0.0f;
  /// The floor of every filter (transformers' min_tokens_to_keep): top-k
  /// keeps max(top_k, this), top-p and min-p never cut below
  /// min(this, entries the previous filter kept). >= 1.
  int64_t min_tokens_to_keep = 1;
  /// Ties at the top-k boundary (see TopKTies). kExact or kKeep.
  TopKTies top_k_ties = TopKTies::kExact;
};

/// The filtered, tempered logits that `sample` draws from: dst_i = z_i where
/// element i survives temperature -> top-k -> top-p -> min-p (the order of
/// Hugging Face transformers' logits warpers, GenerationMixin.
/// _get_logits_processor in transformers 5.x), -inf elsewhere. Greedy
/// (T = 0): dst = t at the greedy index, -inf elsewhere.
/// The kept set is always a prefix of the row in the order (descending z,
/// lower index first): each filter cuts that prefix shorter, and the floors
/// of min_tokens_to_keep take the best entries in that order.
/// Differences from transformers: with top_k_ties = kExact (the default)
/// ties at the top-k boundary keep exactly top_k entries (lower index
/// first; kKeep gives transformers' rule); ties cut by the top-p boundary or
/// a min_tokens_to_keep floor go by the lower index (transformers' sorts
/// are unstable there); top-p requires top_p > 0 (transformers accepts 0).
/// Probability masses for top-p are float64 on the kept candidates; the
/// full-row normaliser (top_k off, and none of min_p, min_tokens_to_keep > 1,
/// kKeep set) comes from the SIMD online scan (relative error <= 1e-6), so a
/// row whose cumulative mass lands within 1e-6 of top_p may keep one entry
/// more or less than exact arithmetic would. The top-k and min-p decisions
/// are exact.
/// Special values: NaN or +inf in z (also from overflow of t / T) -> NaN row
/// (greedy: +inf is a valid max; NaN -> NaN row). All masked -> all -inf.
/// dst may be exactly src (in place).
/// Cost: top-k: one scan with a candidate buffer. top_p alone: one scan for
/// (max m, normaliser d); then only the entries with p_i >= (1 - top_p) /
/// (2n) (a threshold on z from m and d; the rest hold < (1 - top_p) / 2 of
/// the mass, so the nucleus lies inside) are collected, and the boundary is
/// found by bisection with nth_element (expected O(candidates)); no full sort
/// and no rescans. (If rounding leaves those candidates short of top_p, e.g.
/// top_p = 1 - 2^-24, the widening top-k loop takes over.)
/// With min_p > 0, min_tokens_to_keep > 1 (and a filter on) or kKeep (and a
/// filter on): the visible entries are collected (n candidates of scratch),
/// top-k is an nth_element, and top-p sorts the top-k set (O(m log m); the
/// whole visible row with top_k off); min-p is one pass.
void sampling_filter(const TensorView& src, const TensorView& dst,
                     const SampleOptions& sample = {}, const SoftmaxOptions& options = {});

/// One sample per row from softmax of sampling_filter's output (the same
/// filters, so the sample always lies in sampling_filter's kept set):
/// indices[r] = argmax over the kept i of ((double) z_i + g(seed, r, i))
/// (Gumbel-max, lowest index on ties). Greedy for T = 0. -1 for empty,
/// all-masked and NaN rows (and +inf rows unless greedy). A kept set of more
/// than 256 entries is sampled over the masked row by the pruned Gumbel-max
/// scan (the noise of ~2 entries per row is evaluated; same result).
/// `indices`: i64, src's shape without the axis (or keepdim).
void sample(const TensorView& src, const TensorView& indices,
            const SampleOptions& sample = {}, const SoftmaxOptions& options = {});

}  // namespace smax

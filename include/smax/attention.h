// smax/attention.h: fused CPU attention with pluggable normalisers
// (docs/attention.md), with PyTorch
// scaled_dot_product_attention (SDPA) semantics and names.
//
//   out[b, h, i, :] = sum_j P[b, h, i, j] * v[b, h / G, j, :],
//   P[b, h, i, :]   = normalizer(t[b, h, i, :]),   G = H / Hkv (GQA),
//   t_ij = mask(alibi(softcap(fl(<q_i, k_j> * scale))))
// in that order (scale -> softcap -> ALiBi / additive mask -> bool mask and
// causal = -inf; the ONNX Attention order). Masked entries (t = -inf) get
// exactly 0 weight and exactly 0 gradient.
//
// Contract of attention / attention_backward
// ------------------------------------------
// * Layout: q [B, H, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv],
//   out [B, H, Lq, Dv], any strides (elements; e.g. a transposed [B, L, H, D]
//   buffer viewed as [B, H, L, D] is used without a copy when the last dim has
//   unit stride; other layouts are gathered per task). H % Hkv == 0.
// * Masks: attn_mask is bool (true / non-zero = attend, SDPA's meaning) or f32
//   (added to the logits), any rank <= 4 broadcast to [B, H, Lq, Lk] (NumPy
//   rules). is_causal keeps j <= i (top-left aligned tril over [Lq, Lk], as
//   SDPA's is_causal; with Lq > Lk the rows i >= Lk see every key).
// * Fully masked query rows (no visible key): options.empty_row, kZero
//   (default) gives out = 0, lse = -inf and zero gradients (SDPA / Flash-
//   Attention); kNan gives NaN (out, lse and the gradients that depend on
//   them). A softmax sink counts as a visible logit: with a sink such a row
//   is out = 0 (weights 0 / e^sink), not empty. With no key at all (Lk = 0)
//   and a sink, out is the empty sum P[:, :0] V = 0 whatever the sink (NaN
//   included), lse the sink's; dq = 0.
// * Special values: a NaN or +inf logit on a visible entry -> NaN output row
//   (after softcap, +inf scores become cap: finite). NaN under a masked entry
//   (bool mask, causal) is ignored. -inf logits are masked.
// * Sizes: Lq, Lk < 2^24 (positions are exact in f32 for ALiBi / causal).
// * Errors: smax::Error (invalid argument) naming the argument for bad views,
//   ranks, shape mismatches (B, D, Lk, Dv, H % Hkv), masks that do not
//   broadcast or have a wrong dtype, non-finite scale / softcap < 0, sinks or
//   lse with a normaliser other than softmax, an output overlapping an input
//   or itself, threads < 0; cache_seqlens outside [0, Lk] or not i32 / i64,
//   block_table entries outside the page pool, the KV cache forms passed to
//   the backward, ungated_out / dgate without a gate, a gate in the backward
//   without ungated_out, a knob gradient (dattn_mask, dsinks, dalibi_slopes,
//   dsigmoid_bias, dssmax_scales) without its input or normaliser (or of
//   the wrong shape), ssmax_scales with another normaliser than ssmax, not
//   [H] or not finite, a non-finite unified_max. Nothing is written on error
//   (out of memory for scratch: Status::kOutOfMemory).
// * Determinism: prefill tasks over (batch, kv head, query chunk) (forward;
//   the chunk count may follow `threads`, but each output element's
//   arithmetic does not depend on the task that computes it) and (batch, kv
//   head) (backward, dk / dv summed in a fixed order): bitwise identical
//   results for any `threads`. The products are smax's own register-tiled
//   kernels (one multiply-add chain per element in a fixed order: fused on
//   targets with FMA, so the bits may differ between SIMD targets).
// * Decoding (softmax with Lq <= 16, or a KV cache form): tasks over
//   (batch, kv head, row chunk, key chunk); with Lq <= 16 the keys split into
//   chunks of 2048 (more per chunk past 256 chunks), otherwise one chunk; the
//   G query heads of a kv head share each read of K and V, and the chunks'
//   (m, d, o) states merge in chunk order (FlashDecoding). Still a fixed
//   grid: the same bits for any `threads`; different bits from the prefill
//   grid, within the same bound.
// * Memory: O(block) scratch per task plus the kv head's packed K^T and V
//   (16-column panels: Lk x 16 ceil(D / 16) + Lk x 16 ceil(Dv / 16) floats):
//   softmax keeps the online (m, d, o) state of a 64-query block over
//   512-key blocks (never Lq x Lk); other normalisers hold a [block_q, Lk]
//   row block (block_q = clamp(2^18 / (Lk + 1), 1, 64)); the backward holds
//   [block_q, Lk] blocks (and their panels), K^T, V^T and K panels, plus
//   dk / dv accumulators of one kv head ([D + Dv, Lk]). The decode grid keeps, when
//   it splits the keys (Lq <= 16), one partial (m, d, o) record per key
//   chunk and query row: |out| x (chunks <= 256) floats. dattn_mask keeps
//   the [B, H, Lq, Lk] logit gradient.
// * Error bounds: see each function and docs/attention.md.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

/// Row normaliser of the attention scores (docs/attention.md, "Normalisers").
enum class AttentionNormalizer : int {
  kSoftmax = 0,    ///< exact softmax (online (m, d, o) merge over key blocks)
  kSigmoid = 1,    ///< sigmoid(t + b), b = sigmoid_bias or -ln(Lk) (sigmoid_bias_mode)
  kSoftpick = 2,   ///< relu(e^t - 1) / (sum_visible |e^t - 1| + eps)
  kSsmax = 3,      ///< softmax((s ln n) t), n = visible keys of the query row
  kStablemax = 4,  ///< s(t) / sum s(t), s = t + 1 (t >= 0), 1 / (1 - t)
  kSoftplus = 5,   ///< softplus(lambda t) / sum, lambda = ln(visible) / ln(D)
  kPower = 6,      ///< Power-Softmax t^p / sum t^p, p = power_p (even)
};

/// "softmax", "sigmoid", "softpick", "ssmax", "stablemax", "softplus", "power".
AttentionNormalizer parse_attention_normalizer(std::string_view name);
const char* attention_normalizer_name(AttentionNormalizer n) noexcept;

/// Where the default sigmoid bias (sigmoid_bias = NaN) takes its n from,
/// b = -ln(n). (Values mirror the C ABI, whose 0 means "the library's
/// default", i.e. kPerSequence.)
enum class SigmoidBiasMode : int {
  /// n = Lk, one b = -ln(Lk) per call for every query row, whatever the
  /// masks (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices
  /// for Sigmoid Self-Attention", b = -ln n with n the sequence length, as
  /// apple/ml-sigmoid-attention passes it). The default.
  kPerSequence = 1,
  /// n = the number of visible keys of each query row (masked and causal-
  /// hidden keys excluded; under is_causal row i has n = min(i + 1, Lk)
  /// minus masked keys, so row 0 gets b = 0). The earlier default.
  kPerRowVisible = 2,
};

struct AttentionOptions {
  /// Multiplies <q, k>. NaN (default) = 1 / sqrt(D) (SDPA's default; D = 0:
  /// 1). Otherwise finite (any sign, like SDPA's `scale`).
  float scale = std::numeric_limits<float>::quiet_NaN();
  /// SDPA's is_causal: mask j > i (top-left aligned).
  bool is_causal = false;
  /// Bool (non-zero = attend) or f32 additive, broadcastable to [B, H, Lq, Lk].
  std::optional<TensorView> attn_mask;
  /// > 0: t = softcap * tanh(t / softcap) after scaling (Gemma 2). 0 = off.
  float softcap = 0.0f;
  /// Optional f32 [H]: a per-head sink logit that joins the softmax
  /// denominator without an output column (gpt-oss style). Softmax only. Not
  /// scaled, capped or masked. Its gradient: dsinks (backward).
  std::optional<TensorView> sinks;
  /// Optional f32 [H] or [B, H]: ALiBi slopes; adds -slope * |i - j| to the
  /// logits (= slope * (j - i) on the causal side, Press et al.'s bias; the
  /// symmetric form off it, as FlashAttention's non-causal ALiBi).
  std::optional<TensorView> alibi_slopes;
  AttentionNormalizer normalizer = AttentionNormalizer::kSoftmax;
  /// kSigmoid: b (finite). NaN (default) = fl(-ln n) rounded to f32, with n
  /// chosen by sigmoid_bias_mode (default: n = Lk for every row). A fully
  /// masked row is empty either way (empty_row).
  float sigmoid_bias = std::numeric_limits<float>::quiet_NaN();
  /// kSigmoid with sigmoid_bias NaN: kPerSequence (default, b = -ln Lk for
  /// every row) or kPerRowVisible (b = -ln(visible keys of the row)).
  /// Ignored otherwise (but validated).
  SigmoidBiasMode sigmoid_bias_mode = SigmoidBiasMode::kPerSequence;
  /// kSoftpick: eps of the denominator (0 or >= FLT_MIN; default 1e-6 as softpick's).
  float softpick_eps = 1e-6f;
  /// kSsmax: s (0.43 = the paper's initialisation); n = visible keys per row.
  float ssmax_s = 0.43f;
  /// kPower: the even power p >= 2 (Zimerman et al. 2024 use 2); validated
  /// whatever the normaliser. y_j = t_j^p / sum_visible t^p
  /// (smax::power_softmax: an all-zero row is uniform over its visible keys).
  int power_p = 2;
  /// kSsmax: optional [H] (any floating dtype, finite): a learnable s per
  /// head (head h uses ssmax_scales[h] in place of ssmax_s). Its gradient:
  /// dssmax_scales (backward).
  std::optional<TensorView> ssmax_scales;
  /// Optional output f32 [B, H, Lq] (softmax only): log of the denominator,
  /// m + log d (sink included). -inf for empty rows (kZero), NaN for NaN rows.
  /// attention_backward's optional input: that forward's lse, used with
  /// backward_from_lse (see attention_backward).
  std::optional<TensorView> lse;
  /// attention_backward, softmax: start from options.lse, which must be the
  /// forward's lse, and from `out`, the forward's output (FlashAttention-2's
  /// backward, docs/attention.md). false (default): lse is not read by the
  /// backward. smax.torch.attention sets it for the lse it saved.
  bool backward_from_lse = false;
  EmptyRow empty_row = EmptyRow::kZero;
  int threads = 0;  ///< 0 = smax::max_threads(); results do not depend on it
  /// KV cache (decoding, forward only; docs/attention.md "Decoding with a KV
  /// cache"): optional i32 / i64 [B], the number of valid keys of each
  /// sequence, 0 <= cache_seqlens[b] <= Lk (the cache's capacity). Keys
  /// j >= cache_seqlens[b] are never read. The Lq queries are the last Lq
  /// tokens of their sequence: query i sits at position
  /// cache_seqlens[b] - Lq + i, which is_causal (keys j <= position: bottom-
  /// right aligned, as flash_attn_with_kvcache) and ALiBi (|position - j|)
  /// use. Without it every sequence has Lk keys and query i sits at i.
  std::optional<TensorView> cache_seqlens;
  /// Paged KV cache (vLLM's block table): optional i32 / i64 [B, max_pages];
  /// k and v are then pools of pages [num_pages, Hkv, page_size, D / Dv]
  /// (any strides: a [num_pages, page_size, Hkv, D] buffer viewed with its
  /// strides permuted), and key j of sequence b is row j % page_size of
  /// page block_table[b, j / page_size]. Lk = max_pages * page_size. The
  /// entries of the pages a sequence uses (all max_pages, or
  /// ceil(cache_seqlens[b] / page_size) with cache_seqlens) must lie in
  /// [0, num_pages); the others are not read.
  std::optional<TensorView> block_table;
  /// Decode driver only (softmax, Lq <= 16 or a KV cache form): FlashDecoding++'s
  /// unified max (Hong et al. 2024). NaN (default) = off. A finite value phi
  /// expected to be >= every logit: each row starts its online state at m =
  /// phi, so while the logits stay below phi no partial output is rescaled
  /// and the key chunks merge at one reference. Exact whatever phi is: a
  /// logit above phi raises the running max as usual, and a key chunk in
  /// which some row's logits all stay more than 64 below phi (where
  /// e^(t - phi) could underflow) is recomputed from m = -inf. Same bound as
  /// without it (the bits may differ).
  float unified_max = std::numeric_limits<float>::quiet_NaN();
  /// Gated attention (Qiu et al. 2025, "Gated Attention for Large Language
  /// Models"; Qwen3-Next): out = sigmoid(gate) * attention(q, k, v). Optional,
  /// any floating dtype, broadcast to [B, H, Lq, Dv] (NumPy rules):
  /// [B, H, Lq, Dv] is the element-wise gate, [B, H, Lq, 1] the head-wise one.
  /// Each output is fl(a * s) with a the ungated f32 result and s =
  /// sigmoid(g) in f32 (within 3 ulp; 0 below ~e^-103): the bound is the
  /// ungated one times s plus 4 u |a s|. Backward: the gradient flows through
  /// the gate to q, k, v (dout * s, one more rounding) and, with dgate, to
  /// the gate (dout a s (1 - s), each term within 8 u, summed in float64).
  std::optional<TensorView> gate;
  /// With a gate. attention(): optional output [B, H, Lq, Dv], the output
  /// before the gate (written when given: what the backward needs).
  /// attention_backward(): required input, that saved ungated output (the
  /// gate's gradient is dout * a * sigmoid'(g); recomputing a would cost one
  /// more P V product).
  std::optional<TensorView> ungated_out;
  /// attention_backward() with a gate: optional output of the gate's shape,
  /// the gate's gradient (summed, in a fixed order, over the dims the gate
  /// broadcasts over).
  std::optional<TensorView> dgate;
  /// attention_backward(): optional outputs, the gradients of the learnable
  /// knobs (each in its input's shape, summed in float64 in a fixed order
  /// over the dims the input broadcasts over; docs/attention.md "Gradients
  /// of masks, sinks, ALiBi slopes and the sigmoid bias"):
  /// dattn_mask for a floating attn_mask (the gradient of the logit it is
  /// added to; 0 at masked keys, NaN across a NaN row; needs an f32
  /// [B, H, Lq, Lk] scratch and a float64 one of the mask's size),
  /// dsinks [H], dalibi_slopes (the slopes' shape) and dsigmoid_bias (one
  /// element, [] or [1]; kSigmoid only: the gradient with respect to b,
  /// sum over the visible logits of dL/dt).
  std::optional<TensorView> dattn_mask;
  /// attention_backward() with kSsmax: optional output, the gradient with
  /// respect to s: [H] (the shape of ssmax_scales) when ssmax_scales is
  /// given, else one element ([] or [1], for the scalar ssmax_s). Per row,
  /// dL/ds = ln(n) sum_j t_j g_j over the visible logits t (g = the softmax
  /// VJP of the row at s ln(n) t), summed in float64 in a fixed order.
  std::optional<TensorView> dssmax_scales;
  std::optional<TensorView> dsinks;
  std::optional<TensorView> dalibi_slopes;
  std::optional<TensorView> dsigmoid_bias;
};

/// float64: when q, k or v is f64 (attention_backward: q, k, v, out or
/// dout), both functions run in float64 arithmetic
/// (src/ops/attention/attention_f64.cc): every operand read exactly in its
/// dtype (masks, sinks, ALiBi slopes, ssmax_scales, the gate included),
/// scalar options as their float values widened (the default scale
/// 1/sqrt(D) and sigmoid bias -ln n computed in double), logits formed in
/// double in the order above, the library's row ops on float64 rows, the
/// products by DGEMM, every output (out, lse, ungated_out, dq, dk, dv and
/// the knob gradients) rounded once from double to its dtype. One row
/// driver serves every case (KV cache forms included: the decode grid and
/// unified_max are f32 performance features; unified_max is ignored).
/// Empty, NaN and fully masked rows as in f32; bitwise identical results
/// for any `threads`. Bound (tests/test_attention_f64.cc, every SIMD target,
/// against a long double oracle): the f32 bounds below with u = 2^-53, the
/// row op's 2e-6 (softmax's 0) replaced by 1e-14 (power: max(1e-14,
/// (2p + 4 log2 p + 6) u)), L_acc = Lk and Delta_i = max over visible j of
/// (D + 2) u |scale| sum_d |q_id k_jd| + 2 u |t_ij| + 4 u softcap:
///   |out_ic - ref_ic| <= (sens_i Delta_i + 1e-14 + (Lk + 16) u) W_ic + 1e-300;
///   backward |d - ref| <= (1e-14 + 2 (Lq + Lk + D + Dv) u
///                          + 4 max_i Delta_i) mag + 1e-300,
/// with the gate's factor as in f32 (ungated bound times sigmoid(g) plus
/// 4 u |out|; dgate within 16 u of dout a sigmoid'(g) per term). Measured
/// worst error / bound 0.04 (forward) and 0.25 (backward).
///
/// Forward. out may not overlap q, k, v, the masks or itself.
/// Bound (softmax; tested per SIMD target against a float64 evaluation from
/// the same f32 inputs): |out_ic - ref_ic| <= (2 Delta_i + (L_acc + 16) u)
/// * sum_j P_ij |v_jc| + 1e-30, u = 2^-24, where Delta_i = max over visible j
/// of (D + 2) u |scale| sum_d |q_id k_jd| + 2 u |t_ij| bounds the error of the
/// f32 logits (f32 dot products, scale, bias), and L_acc = 512 + Lk / 512
/// (the P V accumulation over one key block and the block merges). The other
/// normalisers meet the same form with their own sensitivity in place of 2
/// and, for softpick, P_ij + e^t_ij / S in place of P_ij; Power-Softmax with
/// P_ij + (p/2)(|t_ij|^(p-1) / S_i + P_ij sum_k |t_ik|^(p-1) / S_i),
/// S_i = sum_k |t_ik|^p (no finite bound for a row whose largest |logit| is
/// below 2^-100, all zeros included: the output depends on the logits'
/// ratios, which f32 underflow or any rounding of zeros can change)
/// and its row bound kappa(p) = max(2e-6, (2p + 4 log2 p + 6) u) added
/// (docs/attention.md).
void attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const AttentionOptions& options = {});

/// Backward: given q, k, v, the saved forward output `out` and the upstream
/// gradient `dout` (both [B, H, Lq, Dv]), writes dq [B, H, Lq, D], dk
/// [B, Hkv, Lk, D], dv [B, Hkv, Lk, Dv] (overwritten, not accumulated).
/// P is recomputed per query block from q and k:
///   dV = P^T dO, dP = dO V^T, dT = normaliser VJP (softmax: P (dP - <dP, P>)),
///   dS = dT * softcap'(.), dQ = scale dS K, dK = scale dS^T Q.
/// Softmax with options.backward_from_lse, options.lse (f32, the forward's
/// lse) and an f32 `out` (with a gate: ungated_out): FlashAttention-2's
/// backward, P = e^(t - lse) and <dP, P> = <dO, out> (out = P V), in tiles
/// of 64 queries x 128 keys that stay in cache; lse and out must be that
/// forward's (other values give other gradients, as in FlashAttention). A
/// (batch, kv head) whose q or k has a non-finite entry, or whose lse is
/// NaN / +inf, takes the full-row backward above; so does every call with a
/// non-f32 lse or out (<dO, out> would carry their rounding), D = 0, Dv = 0
/// or scale = 0, and the float64 path. Otherwise `out` is validated but
/// only used through the recomputed P.
/// GQA: dk / dv sum over the G query heads of each kv head, in head order.
/// Masked entries contribute exactly 0. Outputs may not overlap inputs or
/// each other. A fully masked query row gives dq = 0 and no dk / dv share
/// (kZero; kNan: NaN in dq and, through P^T dO, in dk / dv of its kv head).
/// The masks', sinks', ALiBi slopes' and sigmoid bias's gradients: the
/// optional outputs dattn_mask, dsinks, dalibi_slopes, dsigmoid_bias.
/// Bound (tested per SIMD target), elementwise, for dq, dk and dv:
///   |d - ref| <= (2e-6 + 2 (Lq + Lk + D + Dv) u + 4 max_i Delta_i) * mag + 1e-30,
/// Delta_i as in attention(); mag = the float64 chain-rule sum with every
/// term replaced by its absolute value, where the row VJP term dT_ij becomes
/// |dT_ij| + w_ij (A_ij + sum_l |P_il| A_il), A_ij = sum_c |dout_ic v_jc|
/// (w = P scaled by max(1, |s ln n|, lambda); softpick: P + e^t / S; power:
/// P + p |t|^(p-1) / S, and 2e-6 becomes max(2e-6, 2 kappa(p))), the
/// softcap factor f = 1 - tanh^2 becomes f + 1/4 (its absolute f32 error,
/// <= 8 u, is not relative to f) and dv's P_ij becomes w_ij: the size of
/// what rounding can perturb. (Measured worst error / bound: 0.05.) From
/// lse, 2 (Lq + Lk + D + Dv) u gains 2 e u, e =
/// reference::attention_backward_lse_extra: the forward's row error in
/// <dO, out> ((L_acc + 16) u) and lse's rounding in P.
void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& dout, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv,
                        const AttentionOptions& options = {});

}  // namespace smax

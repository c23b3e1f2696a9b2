// src/kernels/attention.h: row kernels of fused attention (include/smax/attention.h):
// the score -> logit transform (scale, softcap, ALiBi, masks, causal limit),
// one step of the online (m, d) softmax over a key block, and the softcap
// chain rule. See src/kernels/attention.cc for the implementation notes.
//
// Contract (like kernels.h): one contiguous row of n >= 0 f32 values, noexcept,
// allocation-free, dispatched once per call, no read or write outside
// [p, p + n). Ops validate everything before calling.
#pragma once

#include <cstdint>
#include <limits>

namespace smax::kernels {

/// How raw dot products s_j = <q_i, k_j> become logits t_j.
struct AttentionLogits {
  float scale = 1.0f;            ///< t = fl(s * scale)
  float softcap = 0.0f;          ///< > 0: t = fl(cap * tanh(t / cap))
  float alibi_slope = 0.0f;      ///< != 0: t += fl(-slope * |i - j|)
  float alibi_i_minus_j0 = 0.0f; ///< i - j0 (as float, exact below 2^24)
  const float* add = nullptr;    ///< contiguous additive row (nullptr: none), added last
  const uint8_t* keep = nullptr; ///< contiguous bool row, 0 = masked (t = -inf)
  int64_t limit = -1;            ///< >= 0: entries j >= limit are masked (causal)
};

/// In place: s_j -> t_j as described by `p` (order: scale -> softcap ->
/// ALiBi -> additive mask -> bool mask / causal limit = -inf).
void attention_logits_row(float* s, int64_t n, const AttentionLogits& p) noexcept;

/// The result of one online-softmax step over a block of logits.
struct OnlineStep {
  float m = 0.0f;      ///< new running max M = max(m_old, max_j t_j) (-inf: nothing visible yet)
  float alpha = 1.0f;  ///< e^(m_old - M): factor for the old (d, o); 1 when M = -inf
  double sum = 0.0;    ///< sum_j p_j, p_j = e^(t_j - M) (exact difference), float64
  bool bad = false;    ///< some t_j is NaN or +inf (the row's output is NaN)
  float block_max = -std::numeric_limits<float>::infinity();  ///< max_j t_j (NaN ignored)
};
/// In place: s -> t (attention_logits_row's transform, the same t) -> p,
/// one online step with running max m_old, in two passes over the block
/// (t and the max; then p and the sum).
OnlineStep attention_logits_online_step(float* s, int64_t n, const AttentionLogits& p,
                                        float m_old) noexcept;

/// o_j *= a (n entries).
void attention_scale_row(float* o, int64_t n, float a) noexcept;

/// The backward from a saved lse (FlashAttention-2), in place over a row of
/// logits: t_j -> p_j = e^(t_j - lse) (the online step's exp, with the exact
/// difference; -inf and differences below ~-87 give 0). lse finite.
void attention_exp_shift_row(float* t, int64_t n, float lse) noexcept;
/// In place over dP: dp_j -> p_j (dp_j - delta), the softmax VJP with
/// delta = <dO, O> = sum_j p_j dp_j given (one rounding each for the
/// difference and the product).
void attention_softmax_grad_row(const float* p, float* dp, int64_t n, float delta) noexcept;

/// dt_j *= 1 - tanh(fl(s_j * scale) / cap)^2 (the softcap chain rule), in place;
/// dt_j = 0 stays exactly 0 whatever s_j (NaN scores under a mask); NaN stays NaN.
void attention_softcap_grad_row(const float* s, float* dt, int64_t n, float scale,
                                float cap) noexcept;

/// Gated attention (kernels/attention.cc): s = sigmoid(g) in f32 from t =
/// e^-|g| (Highway's Exp): 1 / (1 + t) for g >= 0, t / (1 + t) otherwise,
/// within 3 ulp of sigmoid(g) where it is a normal f32 (0 below ~e^-103);
/// NaN stays NaN. out may alias a / d.
/// out_j = a_j * s_j.
void attention_gate_row(const float* a, const float* g, float* out, int64_t n) noexcept;
/// out_j = d_j * a_j * s'_j, s' = s (1 - s) computed as t / (1 + t)^2 (the
/// gate's gradient; within 6 ulp, no cancellation where s is near 1).
void attention_gate_grad_row(const float* d, const float* a, const float* g, float* out,
                             int64_t n) noexcept;

/// Rows the decoding products prefetch while they run (the operand of the
/// next product: the value rows during the scores, the next key rows during
/// P V), spread evenly over the work; rows = nullptr: none. A hint only:
/// prefetches never fault and change no result.
struct PrefetchRows {
  const float* const* rows = nullptr;
  int64_t n = 0, cols = 0;
};

/// Decoding products (kernels/attention_decode.cc), for a few query rows and
/// key / value rows given by pointer (in place in a cache or its pages):
/// s[r * lds + j] = sum_c q[r * ldq + c] k[j][c] (r < rows, j < n, c < D;
/// D = 0: 0), in an order fixed by the shapes.
void attention_decode_scores(const float* q, int64_t rows, int64_t ldq, const float* const* k,
                             int64_t n, int64_t D, float* s, int64_t lds,
                             const PrefetchRows& prefetch = {}) noexcept;
/// o[r * ldo + c] += sum_j p[r * ldp + j] v[j][c] (r < rows, c < Dv, keys
/// j = 0 .. n - 1 added in order).
void attention_decode_accumulate(const float* p, int64_t rows, int64_t ldp, const float* const* v,
                                 int64_t n, int64_t Dv, float* o, int64_t ldo,
                                 const PrefetchRows& prefetch = {}) noexcept;

/// Prefill products (kernels/attention_tiles.cc). A K x N matrix B in
/// panels: panel p holds columns [16 p, 16 p + 16) at bp + p * panel_stride,
/// element (k, c) at [k * 16 + c - 16 p] (rows k < K; the last panel's
/// columns past N are read, never stored: keep them finite, e.g. 0 with
/// attention_pack_pad).
constexpr int64_t kAttentionPanel = 16;
/// C[M x N] (row-major, ldc) = A B, or C + A B with accumulate, where A(r, k)
/// = a[r * ars + k * acs] (any strides: row-major, or a transposed view) and
/// B is in panels. Each element of C is one multiply-add chain over k = 0 ..
/// K - 1 in order from 0, then (accumulate) added to C, whatever the tiling
/// (fused multiply-adds on targets with FMA; SSE4 / SSSE3 round the product
/// and the sum separately, so the bits may differ between targets).
void attention_gemm_panels(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars,
                           int64_t acs, const float* bp, int64_t panel_stride, float* c,
                           int64_t ldc, bool accumulate) noexcept;
/// Packs row k of B (n values) into panels; and column c of B (K values).
void attention_pack_row(const float* row, int64_t n, int64_t k, float* dst,
                        int64_t panel_stride) noexcept;
/// Zeroes columns [n, 16 ceil(n / 16)) of rows [0, K) of the panel that
/// holds column n - 1 (the columns a product reads past N; none when 16
/// divides n).
void attention_pack_pad(float* dst, int64_t K, int64_t n, int64_t panel_stride) noexcept;
/// Packs rows [0, rows) x columns [0, n) of the row-major m (ld) as B (K =
/// rows), padded (attention_pack_pad).
void attention_pack_rows(const float* m, int64_t ld, int64_t rows, int64_t n, float* dst,
                         int64_t panel_stride) noexcept;
void attention_pack_column(const float* col, int64_t K, int64_t c, float* dst,
                           int64_t panel_stride) noexcept;

}  // namespace smax::kernels

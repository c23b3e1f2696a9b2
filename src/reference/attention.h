// src/reference/attention.h: float64 oracle of smax::attention /
// attention_backward (include/smax/attention.h). Naive loops: scores as
// float64 dot products of the f32 inputs, the normaliser row in float64,
// P V, and the backward by the chain rule. Also takes float64 inputs directly
// (for finite-difference checks of the reference itself).
#pragma once

#include <cstdint>
#include <vector>

#include "smax/attention.h"

namespace smax::reference {

/// A dense float64 attention problem (row-major [B, H(kv), L, D] arrays;
/// masks expanded to [B, H, Lq, Lk]).
struct AttentionProblem {
  int64_t B = 0, H = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
  std::vector<double> q, k, v;
  std::vector<double> add;     ///< additive mask [B, H, Lq, Lk] (empty: none)
  std::vector<uint8_t> keep;   ///< bool mask [B, H, Lq, Lk] (empty: none)
  std::vector<double> sinks;   ///< [H] (empty: none)
  std::vector<double> alibi;   ///< [B, H] (empty: none)
  std::vector<double> gate;    ///< [B, H, Lq, Dv] (empty: none): out = sigmoid(gate) * a
  std::vector<double> ssmax;   ///< [H] per-head SSMax s (empty: o.ssmax_s for every head)
  /// [B] keys of each sequence (options.cache_seqlens; empty: Lk for all).
  /// Keys j >= seqlens[b] are masked; query i sits at seqlens[b] - Lq + i.
  std::vector<int64_t> seqlens;
  double scale = 1.0;          ///< resolved (NaN option -> 1/sqrt(D))
  AttentionOptions o;          ///< normaliser, causal, softcap, params, empty_row
};

/// Reads the views (any strides) and options into a dense problem. A paged
/// KV cache (options.block_table) is read into logical [B, Hkv, Lk, D]
/// arrays (pages a sequence does not use: 0, masked by seqlens).
AttentionProblem attention_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const AttentionOptions& options);

struct AttentionResult {
  std::vector<double> out;  ///< [B, H, Lq, Dv] (gated when there is a gate)
  std::vector<double> ungated;  ///< [B, H, Lq, Dv]: a, the output before the gate
  std::vector<double> lse;  ///< [B, H, Lq] (softmax)
  std::vector<double> P;    ///< [B, H, Lq, Lk] normalised weights
  std::vector<double> T;    ///< [B, H, Lq, Lk] logits (-inf = masked)
};
AttentionResult attention_forward(const AttentionProblem& p);

struct AttentionGrads {
  std::vector<double> dq, dk, dv;
  /// Magnitudes for elementwise error bounds: the same sums with every term
  /// replaced by its absolute value, where the row VJP term dT_ij becomes
  /// |dT_ij| + w_ij (A_ij + sum_l |P_il| A_il), A_ij = sum_c |dO_ic v_jc| (w = c P, c = max(1, |ssmax c|,
  /// softplus lambda); softpick: w = P + e^t / S), i.e. the size of what
  /// rounding can perturb.
  std::vector<double> dq_mag, dk_mag, dv_mag;
  /// With a gate: dout * a * sigmoid'(gate) per element of [B, H, Lq, Dv]
  /// (not yet summed over the dims the gate broadcasts over) and its
  /// magnitude |dout a| sigmoid'(gate).
  std::vector<double> dgate, dgate_mag;
  /// dL/dt for every logit [B, H, Lq, Lk] (the gradient of the final logit,
  /// which an additive mask, ALiBi and the sigmoid bias are added to; 0 at
  /// masked keys) and its magnitude |dt| + w (A + sum_l |P_l| A_l) (as in
  /// dq_mag, before the scale); the sink column's dL/dt and magnitude per
  /// row [B, H, Lq] (softmax with sinks).
  std::vector<double> dt, dt_mag, dsink, dsink_mag;
  /// kSsmax: dL/ds per row [B, H, Lq] (ln(n) sum_j t_j g_j over the visible
  /// logits, g the softmax VJP at s ln(n) t) and its magnitude
  /// |ln n| sum_j y_j (|t_j| + 1) max(1, |s ln n|) (|dP_j - <dP, y>| + A_j +
  /// sum_l y_l A_l) (the t_j and dP rounding it can see, as dt_mag).
  std::vector<double> dssmax, dssmax_mag;
};
/// dout dense [B, H, Lq, Dv] (the gradient of the gated output when there is
/// a gate: the chain goes through sigmoid(gate)).
AttentionGrads attention_backward(const AttentionProblem& p, const std::vector<double>& dout);

// ---- error bounds (src/reference/bounds_attention.cc) -------------------------------------
// The forward bound of include/smax/attention.h, per output element of
// query row `row` (linear over [B, H, Lq]) and value column c:
//   |out_ic - ref_ic| <= E_i W_ic + 1e-30,  E_i = sens_i Delta_i + e_norm + (L_acc + 16) u,
//   W_ic = sum_j w_ij |v_jc|,
// Delta_i = max_j vis [(D + 2) u |scale| sum_d |q_id k_jd| + 2 u |t_ij| + 4 u cap]
// (the error of the f32 logits), sens_i = 2 (softmax, stablemax, softpick,
// power), 2 |c| (ssmax, c = s ln n), 1 (sigmoid), 2 lambda + 2 (softplus);
// e_norm = the row op's relative bound (0 softmax, kappa(p) power, 2e-6
// others); L_acc = 512 + Lk / 512 (softmax), Lk (others); w_ij = |P_ij|,
// plus e^(t_j - m) / S (softpick) or (p/2)(|t_j|^(p-1) / S + P_ij sum_k
// |t_k|^(p-1) / S) with S = sum |t|^p (power; infinite for a row whose
// largest |t| is below 2^-100, zeros included).

/// Delta_i of query row `row`; dot_max (optional) receives max_j sum_d |q k|.
double attention_row_delta(const AttentionProblem& p, const AttentionResult& r, int64_t row,
                           double* dot_max = nullptr);
/// sens_i (the per-head SSMax s when p.ssmax is given).
double attention_sensitivity(const AttentionProblem& p, const AttentionResult& r, int64_t row);
/// e_norm of the problem's normaliser.
double attention_norm_error(const AttentionProblem& p);
/// Power-Softmax's kappa(p) = max(2e-6, (2p + 4 log2 p + 6) u) (smax::power_softmax).
double attention_power_kappa(int p);
/// The weights w_ij of row `row` into w[0, Lk).
void attention_bound_weights(const AttentionProblem& p, const AttentionResult& r, int64_t row,
                             double* w);
/// E_i of row `row`.
double attention_row_error(const AttentionProblem& p, const AttentionResult& r, int64_t row);
/// E_i W_ic + 1e-30 for every output element [B, H, Lq, Dv].
std::vector<double> attention_forward_bounds(const AttentionProblem& p, const AttentionResult& r);
/// The backward's relative bound, times the reference magnitudes (dq_mag,
/// dk_mag, dv_mag, ...): base + 2 (Lq + Lk + D + Dv + extra) u + 4 max_i
/// Delta_i, base = 2e-6 (power: max(2e-6, 2 kappa(p))); `extra` counts
/// roundings a caller adds (the gate's 2).
double attention_backward_rel(const AttentionProblem& p, const AttentionResult& r,
                              int64_t extra = 0);
/// The `extra` of attention_backward_rel for the softmax backward from a
/// saved lse (options.lse given to attention_backward; FlashAttention-2's):
/// delta_i = <dO_i, O_i> from the rounded output carries the forward's row
/// error E_i = 2 Delta_i + (L_acc + 16) u (the 2 Delta_i within 4 max
/// Delta), and P = e^(t - lse) the rounding of lse (|lse| <= max |t| +
/// max |sink| + ln(Lk + 1); max |t| within Delta): ceil((L_acc + 16) / 2) +
/// ceil((max |sink| + ln(Lk + 2) + 4) / 2), over the finite sinks, at most
/// 1e15.
int64_t attention_backward_lse_extra(const AttentionProblem& p);

}  // namespace smax::reference

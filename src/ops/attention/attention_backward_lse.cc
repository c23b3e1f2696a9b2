// src/ops/attention/attention_backward_lse.cc: the softmax backward from the
// forward's lse and output (FlashAttention-2's backward, Dao 2023), in tiles.
//
// With options.lse, P needs no normalisation pass: p_ij = e^(t_ij - lse_i),
// and the softmax VJP's row term is delta_i = <dO_i, O_i> (sum_j p_ij dp_ij =
// sum_j p_ij <dO_i, v_j> = <dO_i, O_i>). So the backward runs on tiles of
// kTileQ queries x kTileK keys that stay in L1 / L2, where the full-row
// driver (attention_backward.cc) keeps [64, Lk] rows of T, P, dP and dT,
// which leave L2 once Lk passes a few thousand keys.
//
// Per task (batch, kv head), key blocks outer: for each key block j, its
// dK^T / dV^T columns stay hot while every (query head g, query block i) of
// the task passes:
//   S = Q_i K_j^T -> t (the logit transform) -> P = e^(t - lse)
//   dV_j^T += dO_i^T P;   dP = dO_i V_j^T;   dT = P (dP - delta)
//   (knob gradients from dT; softcap chain rule; dT *= scale)
//   dQ_i += dT K_j;       dK_j^T += Q_i^T dT
// all with kernels::attention_gemm_panels on the panels the task packed
// once. dQ_i sums its key blocks in order, dK_j / dV_j their (g, i) in
// order: the bits depend on the shapes only, never on the thread count.
//
// Accuracy: P from an f32 lse moves by up to |lse| u relative (within the
// 4 max Delta term of the backward bound); delta from the rounded output
// carries the forward's error, (2 Delta_i + (L_acc + 16) u) sum_j P_ij A_ij,
// which reference::attention_backward_lse_extra adds to the bound
// (docs/attention.md, "Error bounds").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "ops/attention/attention_backward_tiles.h"
#include "ops/attention/attention_internal.h"

namespace smax::detail::attn {
namespace {

constexpr int64_t kTileQ = 64;   // queries per tile
constexpr int64_t kTileK = 128;  // keys per tile (a multiple of the panel width)

// The f32 value of element (b, h, i) of a [B, H, Lq(, ...)] view's row start.
float lse_at(const TensorView& lse, int64_t b, int64_t h, int64_t i) {
  const auto* p = static_cast<const float*>(lse.data);
  return p[b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]];
}

// One task's scratch: its q, dO, dQ, lse and delta rows [G, Lq] and the
// tiles (allocated per task: a few MB at most per task, freed after it).
struct LseScratch {
  std::vector<float> q, dout, dq, lse, delta, t, dp, raw, add, pt, pp;
  std::vector<uint8_t> keep;
};

}  // namespace

bool backward_lse_applies(const Setup& s, const TensorView& out) {
  if (s.norm != AttentionNormalizer::kSoftmax || !s.o.lse) return false;
  const TensorView& o = s.has_gate ? *s.o.ungated_out : out;
  return s.o.lse->dtype == DType::kF32 && o.dtype == DType::kF32 && s.D > 0 && s.Dv > 0 &&
         s.scale != 0.0f;
}

bool backward_lse_task(const Setup& s, const TensorView& out, const TensorView& dout,
                       const TensorView& dq, int64_t b, int64_t hk, const TaskPanels& panels,
                       float* dK, float* dV, int64_t ld, KnobGrads& kg) {
  const int64_t G = s.G, Lq = s.Lq, D = s.D, Dv = s.Dv;
  const TensorView& lse = *s.o.lse;
  const TensorView& o_view = s.has_gate ? *s.o.ungated_out : out;
  LseScratch w;
  // Qualify first: finite lse (-inf: a row without a visible key) and q.
  w.lse.resize(static_cast<size_t>(G * Lq));
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = 0; i < Lq; ++i) {
      const float x = lse_at(lse, b, hk * G + g, i);
      if (std::isnan(x) || x == kInff) return false;
      w.lse[static_cast<size_t>(g * Lq + i)] = x;
    }
  }
  w.q.resize(static_cast<size_t>(G * Lq * D));
  std::vector<Mat> Q(static_cast<size_t>(G)), dO(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) {
    Q[g] = s.q_rows(b, hk * G + g, 0, Lq, w.q.data() + g * Lq * D);
    if (!all_finite(Q[g], Lq, D)) return false;
  }
  // dO (gated: dout * sigmoid(gate)), delta_i = <dO_i, O_i> in float64.
  w.dout.resize(static_cast<size_t>(G * Lq * Dv));
  w.delta.resize(static_cast<size_t>(G * Lq));
  std::vector<float> orow(static_cast<size_t>(Dv));
  for (int64_t g = 0; g < G; ++g) {
    const int64_t h = hk * G + g;
    float* buf = w.dout.data() + g * Lq * Dv;
    dO[g] = s.has_gate ? gated_dout(s, dout, b, h, 0, Lq, buf)
                       : matrix(s.mat_base(dout, b, h), dout.dtype, dout.strides[2],
                                dout.strides[3], 0, Lq, Dv, buf);
    const char* obase = s.mat_base(o_view, b, h);
    for (int64_t i = 0; i < Lq; ++i) {
      gather_row_f32(obase + i * o_view.strides[2] * dtype_size(o_view.dtype), o_view.dtype,
                     o_view.strides[3], Dv, orow.data());
      const float* d = dO[g].p + i * dO[g].ld;
      double acc = 0;
      for (int64_t c = 0; c < Dv; ++c) acc += static_cast<double>(d[c]) * orow[c];
      w.delta[static_cast<size_t>(g * Lq + i)] = static_cast<float>(acc);
    }
  }
  const int64_t tq = std::min(kTileQ, Lq), tk = kTileK;
  w.dq.assign(static_cast<size_t>(G * Lq * D), 0.0f);
  w.t.resize(static_cast<size_t>(tq * tk));
  w.dp.resize(static_cast<size_t>(tq * tk));
  if (s.cap > 0.0f) w.raw.resize(static_cast<size_t>(tq * tk));
  w.add.resize(static_cast<size_t>(tk));
  w.keep.resize(static_cast<size_t>(tk));
  const int64_t pstride = tq * kernels::kAttentionPanel;  // K = tq rows per panel
  const int64_t pfloats = pstride * (tk / kernels::kAttentionPanel);
  w.pt.resize(static_cast<size_t>(pfloats));
  w.pp.resize(static_cast<size_t>(pfloats));
  float* T = w.t.data();
  float* dT = w.dp.data();
  const bool knobs = kg.any();
  for (int64_t j0 = 0; j0 < s.Lk; j0 += tk) {
    const int64_t panel = j0 / kernels::kAttentionPanel;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = hk * G + g;
      const size_t at = static_cast<size_t>(b * s.H + h);
      for (int64_t i0 = 0; i0 < Lq; i0 += tq) {
        const int64_t bq = std::min(tq, Lq - i0);
        const int64_t kend = s.key_end(b, i0, bq);
        if (kend <= j0) continue;  // causal: no row of the block sees these keys
        const int64_t n = std::min(tk, kend - j0);
        const float* q = Q[g].p + i0 * Q[g].ld;
        const float* d_o = dO[g].p + i0 * dO[g].ld;
        const float* lse_r = w.lse.data() + g * Lq + i0;
        const float* delta_r = w.delta.data() + g * Lq + i0;
        kernels::attention_gemm_panels(bq, n, D, q, Q[g].ld, 1,
                                       panels.kt + panel * panels.kt_stride, panels.kt_stride,
                                       T, tk, false);
        if (s.cap > 0.0f) {
          for (int64_t r = 0; r < bq; ++r) {
            std::memcpy(w.raw.data() + r * n, T + r * tk, n * sizeof(float));
          }
        }
        for (int64_t r = 0; r < bq; ++r) {
          float* t = T + r * tk;
          if (lse_r[r] == kNegInff) {  // no visible key in the row (and no sink)
            std::fill(t, t + n, 0.0f);
            continue;
          }
          kernels::attention_logits_row(
              t, n, s.logits(b, h, i0 + r, j0, n, w.add.data(), w.keep.data()));
          kernels::attention_exp_shift_row(t, n, lse_r[r]);
        }
        // dV_j^T += dO_i^T P (P packed as the right operand, K = bq).
        kernels::attention_pack_rows(T, tk, bq, n, w.pp.data(), pstride);
        kernels::attention_gemm_panels(Dv, n, bq, d_o, 1, dO[g].ld, w.pp.data(), pstride,
                                       dV + j0, ld, true);
        // dP = dO_i V_j^T, then dT = P (dP - delta) in place.
        kernels::attention_gemm_panels(bq, n, Dv, d_o, dO[g].ld, 1,
                                       panels.vt + panel * panels.vt_stride, panels.vt_stride,
                                       dT, tk, false);
        for (int64_t r = 0; r < bq; ++r) {
          kernels::attention_softmax_grad_row(T + r * tk, dT + r * tk, n, delta_r[r]);
        }
        if (knobs) {
          // dT is the gradient of the final logit t_ij (which the additive
          // mask and -slope |i - j| are added to).
          for (int64_t r = 0; r < bq; ++r) {
            const float* dt = dT + r * tk;
            const int64_t i = i0 + r;
            if (!kg.alibi.empty()) {
              double dist = 0;
              for (int64_t j = 0; j < n; ++j) {
                dist -= static_cast<double>(dt[j]) * static_cast<double>(std::abs(i - (j0 + j)));
              }
              kg.alibi[at] += dist;
            }
            if (!kg.logits.empty()) {
              std::memcpy(kg.logits.data() + (at * static_cast<size_t>(Lq) + i) * s.Lk + j0, dt,
                          static_cast<size_t>(n) * sizeof(float));
            }
          }
        }
        if (s.cap > 0.0f) {
          for (int64_t r = 0; r < bq; ++r) {
            kernels::attention_softcap_grad_row(w.raw.data() + r * n, dT + r * tk, n, s.scale,
                                                s.cap);
          }
        }
        if (s.scale != 1.0f) {
          for (int64_t r = 0; r < bq; ++r) kernels::attention_scale_row(dT + r * tk, n, s.scale);
        }
        // dQ_i += dT K_j (K's rows j0.. of its panels); dK_j^T += Q_i^T dT.
        kernels::attention_gemm_panels(bq, D, n, dT, tk, 1,
                                       panels.kr + j0 * kernels::kAttentionPanel, panels.kr_stride,
                                       w.dq.data() + (g * Lq + i0) * D, D, true);
        kernels::attention_pack_rows(dT, tk, bq, n, w.pt.data(), pstride);
        kernels::attention_gemm_panels(D, n, bq, q, 1, Q[g].ld, w.pt.data(), pstride, dK + j0, ld,
                                       true);
      }
    }
  }
  // The sink's logit gradient: p_sink (0 - delta), p_sink = e^(sink - lse).
  for (int64_t g = 0; g < G && !kg.sink.empty(); ++g) {
    const int64_t h = hk * G + g;
    const size_t at = static_cast<size_t>(b * s.H + h);
    for (int64_t i = 0; i < Lq; ++i) {
      const float l = w.lse[static_cast<size_t>(g * Lq + i)];
      if (l == kNegInff) continue;
      const double ps = std::exp(static_cast<double>(s.sink(h)) - l);
      kg.sink[at] -= ps * static_cast<double>(w.delta[static_cast<size_t>(g * Lq + i)]);
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    char* base = s.mat_base(dq, b, hk * G + g);
    for (int64_t i = 0; i < Lq; ++i) {
      scatter_row_f32(w.dq.data() + (g * Lq + i) * D, D,
                      base + i * dq.strides[2] * dtype_size(dq.dtype), dq.dtype, dq.strides[3]);
    }
  }
  return true;
}

}  // namespace smax::detail::attn

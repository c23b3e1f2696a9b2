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
// Per task (batch, kv head), for each query head g and query block i (in
// order), over the key blocks j up to the block's causal limit:
//   S = Q_i K_j^T -> t (the logit transform) -> P = e^(t - lse)
//   dV_j^T += dO_i^T P;   dP = dO_i V_j^T;   dT = P (dP - delta)
//   (knob gradients from dT; softcap chain rule; dT *= scale)
//   dQ_i += dT K_j;       dK_j^T += Q_i^T dT
// all with kernels::attention_gemm_panels on the panels the task packed
// once. dQ_i (a tile) sums its key blocks in order and is stored after
// them; dK^T / dV^T (the task's [D, Lk] accumulators) sum their (g, i) in
// order: the bits depend on the shapes only, never on the thread count.
// (The first version ran key blocks outer, keeping dK_j / dV_j hot instead
// of dQ_i: within the noise of this order on the shapes measured, 1 thread,
// B 1, H 8, L 4096, D 64 and L 2048, D 128, and it needs a [G, Lq, D] dQ
// accumulator per task, ~48 MB at G 4, L 8192, D 128, where this order
// needs tiles only.)
//
// Accuracy: P from an f32 lse moves by up to |lse| u relative (within the
// 4 max Delta term of the backward bound); delta from the rounded output
// carries the forward's error, (2 Delta_i + (L_acc + 16) u) sum_j P_ij A_ij,
// which reference::attention_backward_lse_extra adds to the bound
// (docs/attention.md, "Error bounds").
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "ops/attention/attention_backward_tiles.h"
#include "ops/attention/attention_internal.h"

namespace smax::detail::attn {
namespace {

constexpr int64_t kTileQ = 64;   // queries per tile
constexpr int64_t kTileK = 128;  // keys per tile (a multiple of the panel width)

// The f32 value of element (b, h, i) of lse [B, H, Lq].
float lse_at(const TensorView& lse, int64_t b, int64_t h, int64_t i) {
  const auto* p = static_cast<const float*>(lse.data);
  return p[b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]];
}

// The pieces of a task's scratch, in carve order (floats).
struct LseLayout {
  int64_t tq, q, o, dq, rows, tile, panels, add, keep;
  explicit LseLayout(const Setup& s) {
    tq = std::max<int64_t>(std::min(kTileQ, s.Lq), 1);
    q = tq * std::max<int64_t>(s.D, 1);
    o = tq * std::max<int64_t>(s.Dv, 1);
    dq = q;
    rows = tq;                                    // lse, delta, a row of out: each
    tile = tq * kTileK;                           // T / P, dP / dT, the raw scores
    panels = tq * kTileK;                         // dT and P packed (K = tq rows)
    add = kTileK;
    keep = kTileK / 4 + 1;
  }
  int64_t total(int64_t Dv) const {
    return q + o + dq + 2 * rows + std::max<int64_t>(Dv, 1) + 3 * tile + 2 * panels + add + keep;
  }
};

}  // namespace

bool backward_lse_applies(const Setup& s, const TensorView& out) {
  if (s.norm != AttentionNormalizer::kSoftmax || !s.o.lse || !s.o.backward_from_lse) return false;
  const TensorView& o = s.has_gate ? *s.o.ungated_out : out;
  return s.o.lse->dtype == DType::kF32 && o.dtype == DType::kF32 && s.D > 0 && s.Dv > 0 &&
         s.scale != 0.0f;
}

int64_t backward_lse_scratch_floats(const Setup& s) { return LseLayout(s).total(s.Dv); }

bool backward_lse_task(const Setup& s, const TensorView& out, const TensorView& dout,
                       const TensorView& dq, int64_t b, int64_t hk, const Mat& K,
                       const TaskPanels& panels, float* dK, float* dV, int64_t ld, KnobGrads& kg,
                       float* scratch) {
  const int64_t G = s.G, Lq = s.Lq, D = s.D, Dv = s.Dv;
  const TensorView& lse = *s.o.lse;
  const TensorView& o_view = s.has_gate ? *s.o.ungated_out : out;
  // Qualify first, before anything is written: finite k, q and lse (-inf:
  // a row without a visible key; NaN / +inf: a NaN row).
  if (!all_finite(K, s.Lk, D)) return false;
  const LseLayout L(s);
  Carve c(scratch);
  float* qbuf = c.take(L.q);
  float* obuf = c.take(L.o);
  float* dQ = c.take(L.dq);
  float* lse_r = c.take(L.rows);
  float* delta_r = c.take(L.rows);
  float* orow = c.take(std::max<int64_t>(Dv, 1));
  float* T = c.take(L.tile);
  float* dT = c.take(L.tile);
  float* raw = c.take(L.tile);
  float* pt = c.take(L.panels);
  float* pp = c.take(L.panels);
  float* addbuf = c.take(L.add);
  uint8_t* keepbuf = c.take_bytes_rest();
  const int64_t tq = L.tq, tk = kTileK;
  const int64_t pstride = tq * kernels::kAttentionPanel;  // K = tq rows per panel
  for (int64_t g = 0; g < G; ++g) {
    const int64_t h = hk * G + g;
    for (int64_t i = 0; i < Lq; ++i) {
      const float x = lse_at(lse, b, h, i);
      if (std::isnan(x) || x == kInff) return false;
    }
    for (int64_t i0 = 0; i0 < Lq; i0 += tq) {
      const int64_t bq = std::min(tq, Lq - i0);
      if (!all_finite(s.q_rows(b, h, i0, bq, qbuf), bq, D)) return false;
    }
  }
  const bool knobs = kg.any();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t h = hk * G + g;
    const size_t at = static_cast<size_t>(b * s.H + h);
    char* dq_base = s.mat_base(dq, b, h);
    const char* o_base = s.mat_base(o_view, b, h);
    for (int64_t i0 = 0; i0 < Lq; i0 += tq) {
      const int64_t bq = std::min(tq, Lq - i0);
      const Mat Q = s.q_rows(b, h, i0, bq, qbuf);
      const Mat dO = s.has_gate ? gated_dout(s, dout, b, h, i0, bq, obuf)
                                : matrix(s.mat_base(dout, b, h), dout.dtype, dout.strides[2],
                                         dout.strides[3], i0, bq, Dv, obuf);
      // lse and delta_i = <dO_i, O_i> (float64) of the block's rows.
      for (int64_t r = 0; r < bq; ++r) {
        lse_r[r] = lse_at(lse, b, h, i0 + r);
        gather_row_f32(o_base + (i0 + r) * o_view.strides[2] * dtype_size(o_view.dtype),
                       o_view.dtype, o_view.strides[3], Dv, orow);
        const float* d = dO.p + r * dO.ld;
        double acc = 0;
        for (int64_t cc = 0; cc < Dv; ++cc) acc += static_cast<double>(d[cc]) * orow[cc];
        delta_r[r] = static_cast<float>(acc);
      }
      std::fill(dQ, dQ + bq * D, 0.0f);
      const int64_t kend = s.key_end(b, i0, bq);
      for (int64_t j0 = 0; j0 < kend; j0 += tk) {
        const int64_t n = std::min(tk, kend - j0);
        const int64_t panel = j0 / kernels::kAttentionPanel;
        kernels::attention_gemm_panels(bq, n, D, Q.p, Q.ld, 1,
                                       panels.kt + panel * panels.kt_stride, panels.kt_stride,
                                       T, tk, false);
        if (s.cap > 0.0f) {
          for (int64_t r = 0; r < bq; ++r) {
            std::memcpy(raw + r * n, T + r * tk, n * sizeof(float));
          }
        }
        for (int64_t r = 0; r < bq; ++r) {
          float* t = T + r * tk;
          if (lse_r[r] == kNegInff) {  // no visible key in the row (and no sink)
            std::fill(t, t + n, 0.0f);
            continue;
          }
          kernels::attention_logits_row(t, n, s.logits(b, h, i0 + r, j0, n, addbuf, keepbuf));
          kernels::attention_exp_shift_row(t, n, lse_r[r]);
        }
        // dV_j^T += dO_i^T P (P packed as the right operand, K = bq).
        kernels::attention_pack_rows(T, tk, bq, n, pp, pstride);
        kernels::attention_gemm_panels(Dv, n, bq, dO.p, 1, dO.ld, pp, pstride, dV + j0, ld, true);
        // dP = dO_i V_j^T, then dT = P (dP - delta) in place.
        kernels::attention_gemm_panels(bq, n, Dv, dO.p, dO.ld, 1,
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
            kernels::attention_softcap_grad_row(raw + r * n, dT + r * tk, n, s.scale, s.cap);
          }
        }
        if (s.scale != 1.0f) {
          for (int64_t r = 0; r < bq; ++r) kernels::attention_scale_row(dT + r * tk, n, s.scale);
        }
        // dQ_i += dT K_j (K's rows j0.. of its panels); dK_j^T += Q_i^T dT.
        kernels::attention_gemm_panels(bq, D, n, dT, tk, 1,
                                       panels.kr + j0 * kernels::kAttentionPanel, panels.kr_stride,
                                       dQ, D, true);
        kernels::attention_pack_rows(dT, tk, bq, n, pt, pstride);
        kernels::attention_gemm_panels(D, n, bq, Q.p, 1, Q.ld, pt, pstride, dK + j0, ld, true);
      }
      // The sink's logit gradient: p_sink (0 - delta), p_sink = e^(sink - lse).
      for (int64_t r = 0; r < bq && !kg.sink.empty(); ++r) {
        if (lse_r[r] == kNegInff) continue;
        const double ps = std::exp(static_cast<double>(s.sink(h)) - lse_r[r]);
        kg.sink[at] -= ps * static_cast<double>(delta_r[r]);
      }
      for (int64_t r = 0; r < bq; ++r) {
        scatter_row_f32(dQ + r * D, D, dq_base + (i0 + r) * dq.strides[2] * dtype_size(dq.dtype),
                        dq.dtype, dq.strides[3]);
      }
    }
  }
  return true;
}

}  // namespace smax::detail::attn

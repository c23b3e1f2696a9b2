// src/ops/attention/attention_backward.cc: the backward driver of the fused attention
// (attention_internal.h has the design): per (batch, kv head) task, P
// recomputed for the full key row, the normaliser's row VJP, dq / dk / dv by
// panel products (kernels::attention_gemm_panels) in a fixed order (bitwise
// identical for any thread count).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "ops/attention/attention_backward_tiles.h"
#include "ops/attention/attention_internal.h"

namespace smax::detail::attn {

Mat gated_dout(const Setup& s, const TensorView& dout, int64_t b, int64_t h, int64_t i0,
               int64_t bq, float* buf) {
  const int64_t ld = std::max<int64_t>(s.Dv, 1);
  const char* base = s.mat_base(dout, b, h);
  for (int64_t r = 0; r < bq && s.Dv > 0; ++r) {
    float* row = buf + r * ld;
    gather_row_f32(base + (i0 + r) * dout.strides[2] * dtype_size(dout.dtype), dout.dtype,
                   dout.strides[3], s.Dv, row);
    thread_local std::vector<float> g;
    g.resize(static_cast<size_t>(s.Dv));
    s.gate_row(b, h, i0 + r, g.data());
    kernels::attention_gate_row(row, g.data(), row, s.Dv);
  }
  return Mat{buf, ld};
}

namespace {

// A K x N right operand of kernels::attention_gemm_panels: panels of 16
// columns, each K rows of 16 floats.
struct PanelMatrix {
  int64_t stride = 0, floats = 0;
  PanelMatrix(int64_t K, int64_t N) {
    const int64_t w = kernels::kAttentionPanel;
    stride = std::max<int64_t>(K, 1) * w;
    floats = std::max<int64_t>((N + w - 1) / w, 1) * stride;
  }
};

// The backward's panels: K^T (D x Lk), V^T (Dv x Lk) and K (Lk x D) per
// task; dT and P (bq x Lk) per query block, the right operands of
// dK^T += Q^T dT and dV^T += dO^T P (dk and dv are summed transposed, so
// that the small Q and dO blocks are the broadcast operand).
struct BackwardPanels {
  PanelMatrix kt, vt, kr, dtp, pp;
  BackwardPanels(const Setup& s, int64_t bq)
      : kt(s.D, s.Lk), vt(s.Dv, s.Lk), kr(s.Lk, s.D), dtp(bq, s.Lk), pp(bq, s.Lk) {}
  int64_t floats() const { return kt.floats + vt.floats + kr.floats + dtp.floats + pp.floats; }
};

}  // namespace

template <typename T>
void store_reduced(const std::vector<T>& full, const int64_t* full_shape, int n,
                   const TensorView& out, bool exact) {
  int64_t osh[4] = {1, 1, 1, 1};
  for (int d = 0; d < out.rank; ++d) osh[n - out.rank + d] = out.shape[d];
  int64_t on = 1;
  for (int d = 0; d < n; ++d) on *= osh[d];
  std::vector<double> acc(static_cast<size_t>(std::max<int64_t>(on, 1)), 0.0);
  int64_t fn = 1;
  for (int d = 0; d < n; ++d) fn *= full_shape[d];
  // Walk full in row-major order with an odometer over its index, moving the
  // output index by each dim's stride in out (0 where out broadcasts).
  int64_t ostride[4] = {0, 0, 0, 0}, x[4] = {0, 0, 0, 0};
  int64_t mul = 1;
  for (int d = n - 1; d >= 0; --d) {
    ostride[d] = osh[d] == 1 ? 0 : mul;
    mul *= osh[d];
  }
  int64_t idx = 0;
  for (int64_t e = 0; e < fn; ++e) {
    acc[static_cast<size_t>(idx)] += static_cast<double>(full[static_cast<size_t>(e)]);
    for (int d = n - 1; d >= 0; --d) {
      idx += ostride[d];
      if (++x[d] < full_shape[d]) break;
      idx -= ostride[d] * full_shape[d];
      x[d] = 0;
    }
  }
  const int64_t size = dtype_size(out.dtype);
  for (int64_t e = 0; e < on; ++e) {
    int64_t rem = e, off = 0;
    for (int d = out.rank - 1; d >= 0; --d) {
      off += (rem % out.shape[d]) * out.strides[d];
      rem /= out.shape[d];
    }
    char* at = static_cast<char*>(out.data) + off * size;
    if (exact) {
      store_f64(at, out.dtype, acc[static_cast<size_t>(e)]);
    } else {
      store_f32(at, out.dtype, static_cast<float>(acc[static_cast<size_t>(e)]));
    }
  }
}

template void store_reduced(const std::vector<float>&, const int64_t*, int, const TensorView&,
                            bool);
template void store_reduced(const std::vector<double>&, const int64_t*, int, const TensorView&,
                            bool);

namespace {

// dgate (T = float: the f32 path; double: the float64 path): the
// per-element terms dout * a * s (1 - s) over [B, H, Lq, Dv] (each row
// written by one task; f32: kernels::attention_gate_grad_row; double:
// s (1 - s) = t / (1 + t)^2, t = e^-|g|), then summed over the gate's
// broadcast dims (float64 results rounded once).
template <typename T>
void gate_backward_in(const Setup& s, const TensorView& dout, const TensorView& dgate) {
  constexpr bool kF64 = std::is_same_v<T, double>;
  const auto gather = [&](const char* p, DType dt, int64_t stride, T* row) {
    if constexpr (kF64) {
      gather_row_f64(p, dt, stride, s.Dv, row);
    } else {
      gather_row_f32(p, dt, stride, s.Dv, row);
    }
  };
  const TensorView& a = *s.o.ungated_out;
  const int64_t full[4] = {s.B, s.H, s.Lq, s.Dv};
  // An element-wise gate (dgate has out's shape, right-aligned): every term
  // is its own sum, stored from the task as store_reduced would store it
  // (one term, rounded once to dgate's dtype), without the [B, H, Lq, Dv]
  // scratch and store_reduced's per-element walk.
  bool direct = dgate.rank >= 1 && dgate.rank <= 4;
  for (int d = 0; d < 4 && direct; ++d) {
    const int od = d - (4 - dgate.rank);  // dgate's dim for full dim d (< 0: none, extent 1)
    direct = (od < 0 ? 1 : dgate.shape[od]) == full[d];
  }
  std::vector<T> terms(direct ? 0 : static_cast<size_t>(s.B * s.H * s.Lq * s.Dv));
  if (s.Dv > 0) {  // views without elements may have null data
    detail::run_parallel(s.B * s.H * s.Lq, s.threads, [&](int64_t r) {
      const int64_t b = r / (s.H * s.Lq), h = (r / s.Lq) % s.H, i = r % s.Lq;
      thread_local std::vector<T> buf;
      buf.resize(static_cast<size_t>(3 * s.Dv));
      T* ar = buf.data();
      T* gr = ar + s.Dv;
      T* dr = direct ? gr + s.Dv : terms.data() + r * s.Dv;
      gather(s.mat_base(dout, b, h) + i * dout.strides[2] * dtype_size(dout.dtype), dout.dtype,
             dout.strides[3], dr);
      gather(s.mat_base(a, b, h) + i * a.strides[2] * dtype_size(a.dtype), a.dtype, a.strides[3],
             ar);
      const int64_t off = b * s.gs[0] + h * s.gs[1] + i * s.gs[2];
      gather(s.gate_data + off * dtype_size(s.gate_dtype), s.gate_dtype, s.gs[3], gr);
      if constexpr (kF64) {
        for (int64_t c = 0; c < s.Dv; ++c) {
          const double t = std::exp(-std::fabs(gr[c]));
          dr[c] = dr[c] * ar[c] * (t / ((1.0 + t) * (1.0 + t)));
        }
      } else {
        kernels::attention_gate_grad_row(dr, ar, gr, dr, s.Dv);
      }
      if (!direct) return;
      // + 0: a -0 term stored as +0, as store_reduced's 0 + term gives.
      for (int64_t c = 0; c < s.Dv; ++c) dr[c] += T(0);
      const int64_t index[3] = {b, h, i};
      int64_t at = 0;  // the row's offset in dgate (elements); dims of extent 1 add 0
      for (int d = 0; d + 1 < dgate.rank; ++d) at += index[3 - (dgate.rank - 1) + d] * dgate.strides[d];
      char* row = static_cast<char*>(dgate.data) + at * dtype_size(dgate.dtype);
      const int64_t stride = dgate.strides[dgate.rank - 1];
      if constexpr (kF64) {
        scatter_row_f64(dr, s.Dv, row, dgate.dtype, stride);
      } else {
        scatter_row_f32(dr, s.Dv, row, dgate.dtype, stride);
      }
    });
  }
  if (direct) return;
  store_reduced(terms, full, 4, dgate, kF64);
}

}  // namespace

void gate_backward(const Setup& s, const TensorView& dout, const TensorView& dgate) {
  gate_backward_in<float>(s, dout, dgate);
}
void gate_backward_f64(const Setup& s, const TensorView& dout, const TensorView& dgate) {
  gate_backward_in<double>(s, dout, dgate);
}

void backward(const Setup& s, const TensorView& out, const TensorView& dout, const TensorView& dq,
              const TensorView& dk, const TensorView& dv) {
  const int64_t bqn = s.row_block();
  const int64_t nqb = (s.Lq + bqn - 1) / bqn;
  const bool sink = s.sinks != nullptr;
  const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
  const int64_t Lkn = std::max<int64_t>(s.Lk, 1);
  const int64_t wmax = Lkn + 1;
  const int64_t qf = bqn * Dn, kf = s.Lk * Dn, vf = s.Lk * Dvn, of = bqn * Dvn;
  const int64_t tf = bqn * wmax;
  const int64_t dqf = bqn * std::max(Dn, Dvn), dkf = Dn * Lkn, dvf = Dvn * Lkn, mf = Lkn;
  const int64_t keepf = Lkn / 4 + 1;
  const BackwardPanels pl(s, bqn);
  const bool lse_path = backward_lse_applies(s, out);
  const int64_t lsef = lse_path ? backward_lse_scratch_floats(s) : 0;
  const int64_t total =
      qf + kf + vf + of + 5 * tf + dqf + dkf + dvf + mf + pl.floats() + lsef + keepf;
  const float empty_grad = s.o.empty_row == EmptyRow::kNan && !sink ? kNaNf : 0.0f;
  KnobGrads kg;
  const size_t bh = static_cast<size_t>(s.B * s.H);
  if (s.o.dsinks) kg.sink.assign(bh, 0.0);
  if (s.o.dalibi_slopes) kg.alibi.assign(bh, 0.0);
  if (s.o.dsigmoid_bias) kg.bias.assign(bh, 0.0);
  if (s.o.dssmax_scales) kg.ssmax.assign(bh, 0.0);
  if (s.o.dattn_mask) {
    // dattn_mask reduces the logits' gradient over the mask's broadcast
    // dims: the whole [B, H, Lq, Lk] is kept (as SDPA's math path does).
    const int64_t per = s.Lq * s.Lk;  // < 2^48
    if (bh > 0 && per > 0 && static_cast<int64_t>(bh) > (int64_t{1} << 40) / per) {
      throw Error(Status::kOutOfMemory,
                  std::string(s.op) + ": dattn_mask needs a [B, H, Lq, Lk] f32 scratch of " +
                      std::to_string(static_cast<double>(bh) * static_cast<double>(per) * 4) +
                      " bytes");
    }
    kg.logits.assign(bh * static_cast<size_t>(per), 0.0f);
  }
  run_tasks(s, s.B * s.Hkv, total, [&](int64_t task, float* buf) {
    const int64_t hk = task % s.Hkv, b = task / s.Hkv;
    Carve c(buf);
    float* qbuf = c.take(qf);
    float* kbuf = c.take(kf);
    float* vbuf = c.take(vf);
    float* obuf = c.take(of);
    float* T = c.take(tf);
    float* P = c.take(tf);
    float* dP = c.take(tf);
    float* dT = c.take(tf);
    float* Sraw = c.take(tf);
    float* dQ = c.take(dqf);
    float* dK = c.take(dkf);
    float* dV = c.take(dvf);
    float* addbuf = c.take(mf);
    float* kt = c.take(pl.kt.floats);
    float* vt = c.take(pl.vt.floats);
    float* kr = c.take(pl.kr.floats);
    float* dtp = c.take(pl.dtp.floats);
    float* pp = c.take(pl.pp.floats);
    float* lse_scratch = c.take(lsef);
    uint8_t* keepbuf = c.take_bytes_rest();
    // dK^T [D, Lk] and dV^T [Dv, Lk] (leading dimension Lkn).
    std::fill(dK, dK + dkf, 0.0f);
    std::fill(dV, dV + dvf, 0.0f);
    const Mat K = s.k_rows(b, hk, s.Lk, kbuf);
    const Mat V = s.v_rows(b, hk, s.Lk, vbuf);
    // K^T, V^T (the scores' and dP's right operands) and K (dQ's) in panels,
    // once for the task's G heads and all their query blocks.
    for (int64_t j = 0; j < s.Lk; ++j) {
      if (s.D > 0) kernels::attention_pack_column(K.p + j * K.ld, s.D, j, kt, pl.kt.stride);
      if (s.Dv > 0) kernels::attention_pack_column(V.p + j * V.ld, s.Dv, j, vt, pl.vt.stride);
    }
    // The columns the products read past Lk (K^T, V^T); K's rows (padded).
    kernels::attention_pack_pad(kt, s.D, s.Lk, pl.kt.stride);
    kernels::attention_pack_pad(vt, s.Dv, s.Lk, pl.vt.stride);
    if (s.D > 0) kernels::attention_pack_rows(K.p, K.ld, s.Lk, s.D, kr, pl.kr.stride);
    // Non-finite k (q) entries under masked scores (dT = 0) must add 0 to dq
    // (dk), as in the forward, where their scores are masked: those products
    // go through gemm_skip_zero, as does scale = 0 (whose alpha = 0 keeps a
    // NaN weight NaN).
    const bool k_finite = s.scale != 0.0f && all_finite(K, s.Lk, s.D);
    // The softmax from the forward's lse, in tiles (attention_backward_lse.cc),
    // when the task qualifies; else P for the full key row below.
    const bool from_lse =
        lse_path &&
        backward_lse_task(s, out, dout, dq, b, hk, K,
                          TaskPanels{kt, vt, kr, pl.kt.stride, pl.vt.stride, pl.kr.stride}, dK, dV,
                          Lkn, kg, lse_scratch);
    for (int64_t g = 0; g < s.G && !from_lse; ++g) {
      const int64_t h = hk * s.G + g;
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * bqn, bq = std::min(bqn, s.Lq - i0);
        const int64_t kend = s.key_end(b, i0, bq);
        const int64_t w = kend + (sink ? 1 : 0);
        char* dqb = s.mat_base(dq, b, h);
        if (kend == 0) {
          for (int64_t r = 0; r < bq && s.D > 0; ++r) {
            for (int64_t c = 0; c < s.D; ++c) dQ[c] = empty_grad;
            scatter_row_f32(dQ, s.D, dqb + (i0 + r) * dq.strides[2] * dtype_size(dq.dtype),
                            dq.dtype, dq.strides[3]);
          }
          continue;
        }
        const Mat Q = s.q_rows(b, h, i0, bq, qbuf);
        const Mat dO = s.has_gate ? gated_dout(s, dout, b, h, i0, bq, obuf)
                                  : matrix(s.mat_base(dout, b, h), dout.dtype, dout.strides[2],
                                           dout.strides[3], i0, bq, s.Dv, obuf);
        kernels::attention_gemm_panels(bq, kend, s.D, Q.p, Q.ld, 1, kt, pl.kt.stride, T, w, false);
        if (s.cap > 0.0f) {
          for (int64_t r = 0; r < bq; ++r) std::memcpy(Sraw + r * kend, T + r * w, kend * sizeof(float));
        }
        for (int64_t r = 0; r < bq; ++r) {
          kernels::attention_logits_row(T + r * w, kend,
                                        s.logits(b, h, i0 + r, 0, kend, addbuf, keepbuf));
          if (sink) T[r * w + kend] = s.sink(h);
        }
        std::memcpy(P, T, bq * w * sizeof(float));
        normalize_rows(s, h, P, bq, w, s.Lk);
        // NaN rows (a NaN / +inf logit, or an empty row with kNan): NaN output.
        bool nan_rows[kBlockQ];
        const bool any_nan_row = find_nan_rows(P, bq, w, nan_rows);
        if (any_nan_row && kend < s.Lk) {
          // A NaN row is NaN at every key, also at the causally skipped keys
          // [kend, Lk): its NaN reaches their dk / dv through P^T dO and
          // dS^T Q, as without causal.
          for (int64_t c = 0; c < s.D; ++c) std::fill(dK + c * Lkn + kend, dK + c * Lkn + s.Lk, kNaNf);
          for (int64_t c = 0; c < s.Dv; ++c) std::fill(dV + c * Lkn + kend, dV + c * Lkn + s.Lk, kNaNf);
        }
        kernels::attention_gemm_panels(bq, kend, s.Dv, dO.p, dO.ld, 1, vt, pl.vt.stride, dP, w,
                                       false);
        if (sink) {
          for (int64_t r = 0; r < bq; ++r) dP[r * w + kend] = 0.0f;
        }
        normalize_backward_rows(s, h, T, P, dP, dT, bq, w);
        // A NaN row has NaN gradient at every key, masked ones included, for
        // every normaliser (ssmax_backward keeps 0 at masked entries; the
        // others propagate y = NaN): consistent NaN dk / dv.
        for (int64_t r = 0; r < bq && any_nan_row; ++r) {
          if (nan_rows[r]) std::fill(dT + r * w, dT + r * w + w, kNaNf);
        }
        if (kg.any()) {
          // dT is the gradient of the final logit t_ij, which the additive
          // mask, -slope |i - j| and the sigmoid bias are added to.
          const size_t at = static_cast<size_t>(b * s.H + h);
          for (int64_t r = 0; r < bq; ++r) {
            const float* dt = dT + r * w;
            const int64_t i = i0 + r;
            if (!kg.sink.empty()) kg.sink[at] += dt[kend];
            double sum = 0, dist = 0;
            for (int64_t j = 0; j < kend; ++j) {
              sum += dt[j];
              dist -= static_cast<double>(dt[j]) * static_cast<double>(std::abs(i - j));
            }
            if (!kg.bias.empty()) kg.bias[at] += sum;
            if (!kg.ssmax.empty()) {
              kg.ssmax[at] += ssmax_row_grad(T + r * w, P + r * w, dP + r * w, kend, nan_rows[r]);
            }
            if (!kg.alibi.empty()) kg.alibi[at] += dist;
            if (!kg.logits.empty()) {
              std::memcpy(kg.logits.data() + (at * static_cast<size_t>(s.Lq) + i) * s.Lk, dt,
                          static_cast<size_t>(kend) * sizeof(float));
            }
          }
        }
        if (s.cap > 0.0f) {
          for (int64_t r = 0; r < bq; ++r) {
            kernels::attention_softcap_grad_row(Sraw + r * kend, dT + r * w, kend, s.scale, s.cap);
          }
        }
        // dQ = scale dT K; dK += scale dT^T Q; dV += P^T dO. The scale is
        // applied to dT once (then the products need none), except for 0:
        // gemm_skip_zero's alpha = 0 keeps a NaN weight NaN.
        float alpha = s.scale;
        if (s.scale != 0.0f && s.scale != 1.0f) {
          for (int64_t r = 0; r < bq; ++r) kernels::attention_scale_row(dT + r * w, kend, s.scale);
          alpha = 1.0f;
        }
        if (k_finite) {
          kernels::attention_gemm_panels(bq, s.D, kend, dT, w, 1, kr, pl.kr.stride, dQ, Dn, false);
        } else {
          gemm_skip_zero<float>(false, bq, s.D, kend, alpha, dT, w, K.p, K.ld, 0.0f, dQ, Dn);
        }
        for (int64_t r = 0; r < bq && s.D > 0; ++r) {
          scatter_row_f32(dQ + r * Dn, s.D, dqb + (i0 + r) * dq.strides[2] * dtype_size(dq.dtype),
                          dq.dtype, dq.strides[3]);
        }
        if (s.scale != 0.0f && all_finite(Q, bq, s.D)) {
          kernels::attention_pack_rows(dT, w, bq, kend, dtp, pl.dtp.stride);
          kernels::attention_gemm_panels(s.D, kend, bq, Q.p, 1, Q.ld, dtp, pl.dtp.stride, dK, Lkn,
                                         true);
        } else {
          // Products with a zero weight dT skipped (gemm_skip_zero), into a
          // [kend, D] block, then added to dK^T.
          thread_local std::vector<float> blk;
          blk.assign(static_cast<size_t>(kend * Dn), 0.0f);
          gemm_skip_zero<float>(true, kend, s.D, bq, alpha, dT, w, Q.p, Q.ld, 0.0f, blk.data(), Dn);
          for (int64_t j = 0; j < kend; ++j) {
            for (int64_t c = 0; c < s.D; ++c) dK[c * Lkn + j] += blk[static_cast<size_t>(j * Dn + c)];
          }
        }
        kernels::attention_pack_rows(P, w, bq, kend, pp, pl.pp.stride);
        kernels::attention_gemm_panels(s.Dv, kend, bq, dO.p, 1, dO.ld, pp, pl.pp.stride, dV, Lkn,
                                       true);
      }
    }
    char* dkb = s.mat_base(dk, b, hk);
    char* dvb = s.mat_base(dv, b, hk);
    float* row = dQ;  // free now; >= max(D, Dv) floats
    for (int64_t j = 0; j < s.Lk; ++j) {
      if (s.D > 0) {
        for (int64_t c = 0; c < s.D; ++c) row[c] = dK[c * Lkn + j];
        scatter_row_f32(row, s.D, dkb + j * dk.strides[2] * dtype_size(dk.dtype), dk.dtype,
                        dk.strides[3]);
      }
      if (s.Dv > 0) {
        for (int64_t c = 0; c < s.Dv; ++c) row[c] = dV[c * Lkn + j];
        scatter_row_f32(row, s.Dv, dvb + j * dv.strides[2] * dtype_size(dv.dtype), dv.dtype,
                        dv.strides[3]);
      }
    }
  });
  const int64_t bh_shape[2] = {s.B, s.H};
  if (s.o.dsinks) store_reduced(kg.sink, bh_shape, 2, *s.o.dsinks);
  if (s.o.dalibi_slopes) store_reduced(kg.alibi, bh_shape, 2, *s.o.dalibi_slopes);
  if (s.o.dsigmoid_bias) store_reduced(kg.bias, bh_shape, 2, *s.o.dsigmoid_bias);
  if (s.o.dssmax_scales) store_reduced(kg.ssmax, bh_shape, 2, *s.o.dssmax_scales);
  if (s.o.dattn_mask) {
    const int64_t full[4] = {s.B, s.H, s.Lq, s.Lk};
    store_reduced(kg.logits, full, 4, *s.o.dattn_mask);
  }
}

}  // namespace smax::detail::attn

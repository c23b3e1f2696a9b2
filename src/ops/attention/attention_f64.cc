// src/ops/attention/attention_f64.cc: the fused attention's float64 path
// (attention() when q, k or v is f64; attention_backward() when q, k, v, out
// or dout is f64). The f32 drivers' contracts in double arithmetic:
//  * Operands are read exactly in their dtypes (q, k, v, dout, the additive
//    mask, the gate, sinks, ALiBi slopes, ssmax_scales); scalar options are
//    their float values widened; the default scale 1/sqrt(D) and the
//    sigmoid bias -ln n are computed in double.
//  * One row driver for every normaliser and every form (KV cache and paged
//    cache included; the f32 path's decode grid and unified_max are
//    performance features of f32 softmax): tasks over (batch, kv head, query
//    block of Setup::row_block() rows); a task gathers its kv head's keys
//    and values (up to the block's causal limit, through the block table)
//    into double [keys, D] / [keys, Dv], then per query head of the kv head:
//    T = Q K^T (DGEMM), t = ((softcap of) scale s) - slope |pos - j| + mask,
//    then -inf for bool-masked / causal keys (the documented order), a sink
//    column for softmax, the library's row op on f64 views (its float64
//    path), the lse (m + log d over the row and sink) and O = P V (DGEMM),
//    gated (out = sigmoid(g) a) in double. Each output rounded once.
//  * Backward: tasks over (batch, kv head) as in f32; P recomputed per
//    query block, dP = dO V^T, dT = the row op's float64 VJP, the softcap
//    chain rule, dQ = scale dT K, dK += scale dT^T Q, dV += P^T dO in double
//    (DGEMM, a fixed order: the bits do not depend on the thread count),
//    and the knob gradients (dattn_mask, dsinks, dalibi_slopes,
//    dsigmoid_bias, dssmax_scales) summed in double; dgate: gate_backward_f64
//    (attention_backward.cc, the f32 one's template in double).
// Empty rows (no visible key) and NaN rows follow the f32 contract
// (include/smax/attention.h); the bound is its "float64" paragraph.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/attention/attention_internal.h"

namespace smax::detail::attn {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kInf = std::numeric_limits<double>::infinity();

// sigmoid(g) in double (no overflow: e^-|g|); NaN stays NaN.
double sigmoid64(double g) {
  const double t = std::exp(-std::fabs(g));
  return g >= 0.0 ? 1.0 / (1.0 + t) : t / (1.0 + t);
}

double scale64(const Setup& s) {
  if (!std::isnan(s.o.scale)) return static_cast<double>(s.o.scale);
  return s.D > 0 ? 1.0 / std::sqrt(static_cast<double>(s.D)) : 1.0;
}

char* row_ptr(const TensorView& t, int64_t b, int64_t h, int64_t i) {
  return static_cast<char*>(t.data) +
         (b * t.strides[0] + h * t.strides[1] + i * t.strides[2]) * dtype_size(t.dtype);
}

// Rows [i0, i0 + rows) of head (b, h) of a [B, H, L, cols] view, as double,
// into dst (ld = max(cols, 1)).
void gather_rows(const TensorView& t, int64_t b, int64_t h, int64_t i0, int64_t rows,
                 int64_t cols, double* dst) {
  if (cols <= 0 || rows <= 0 || t.data == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) {
    gather_row_f64(row_ptr(t, b, h, i0 + r), t.dtype, t.strides[3], cols, dst + r * cols);
  }
}

// Keys (or values) [0, n) of kv head hk of sequence b (through the block
// table for a paged cache), as double, into dst ([n, cols]).
void gather_keys(const Setup& s, const TensorView& t, int64_t b, int64_t hk, int64_t n,
                 int64_t cols, double* dst) {
  if (cols <= 0 || t.data == nullptr) return;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot = s.paged ? s.pages[b * s.max_pages + j / s.page_size] : b;
    const int64_t row = s.paged ? j % s.page_size : j;
    gather_row_f64(row_ptr(t, slot, hk, row), t.dtype, t.strides[3], cols, dst + j * cols);
  }
}

// Row i (position pos) of head (b, h): s_j (scores <q_i, k_j>) -> the logits
// t_j in place, j < n: scale, softcap, ALiBi, additive mask, then -inf for
// bool-masked and causally hidden keys.
void logits_row(const Setup& s, double scale, int64_t b, int64_t h, int64_t i, int64_t pos,
                double* t, int64_t n) {
  const double cap = s.cap;
  const double slope = s.alibi_f64.empty() ? 0.0 : s.alibi_f64[static_cast<size_t>(b * s.H + h)];
  const int64_t off = b * s.ms[0] + h * s.ms[1] + i * s.ms[2];
  const int64_t msize = s.has_mask ? dtype_size(s.mask_dtype) : 0;
  for (int64_t j = 0; j < n; ++j) {
    double x = scale * t[j];
    if (cap > 0.0) x = cap * std::tanh(x / cap);
    if (slope != 0.0) x += -(slope * static_cast<double>(std::abs(pos - j)));
    if (s.has_mask) {
      const char* m = s.mask_data + (off + j * s.ms[3]) * msize;
      if (s.mask_bool) {
        if (*reinterpret_cast<const uint8_t*>(m) == 0) x = kNegInf;
      } else {
        x += load_f64(m, s.mask_dtype);
      }
    }
    if (s.o.is_causal && j > pos) x = kNegInf;
    t[j] = x;
  }
}

// The logits of rows [i0, i0 + bq) of head (b, h) into T ([bq, w], w = kend
// + 1 with a sink: the sink's logit in the last column): T = Q K^T (copied
// into raw, [bq, w], when raw is not null), then logits_row.
void block_logits(const Setup& s, double scale, int64_t b, int64_t h, int64_t i0, int64_t bq,
                  int64_t kend, const double* Q, const double* K, double* T, int64_t w,
                  double* raw = nullptr) {
  const int64_t Dn = std::max<int64_t>(s.D, 1);
  dgemm(bq, kend, s.D, 1.0, GemmOperand64{Q, Dn, false}, GemmOperand64{K, Dn, true}, 0.0, T, w);
  if (raw != nullptr) std::copy(T, T + bq * w, raw);
  for (int64_t r = 0; r < bq; ++r) {
    logits_row(s, scale, b, h, i0 + r, s.query_position(b, i0 + r), T + r * w, kend);
    if (!s.sinks_f64.empty()) T[r * w + kend] = s.sinks_f64[static_cast<size_t>(h)];
  }
}

// Stores row (b, h, i) of out from the double row a (Dv values): a itself,
// or with a gate ungated_out = a and out = sigmoid(g) a, each rounded once.
void store_out_row(const Setup& s, const TensorView& out, int64_t b, int64_t h, int64_t i,
                   double* a, double* gbuf) {
  if (s.Dv <= 0) return;
  if (s.has_gate) {
    if (s.o.ungated_out) {
      const TensorView& u = *s.o.ungated_out;
      scatter_row_f64(a, s.Dv, row_ptr(u, b, h, i), u.dtype, u.strides[3]);
    }
    const int64_t off = b * s.gs[0] + h * s.gs[1] + i * s.gs[2];
    gather_row_f64(s.gate_data + off * dtype_size(s.gate_dtype), s.gate_dtype, s.gs[3], s.Dv,
                   gbuf);
    for (int64_t c = 0; c < s.Dv; ++c) a[c] *= sigmoid64(gbuf[c]);
  }
  scatter_row_f64(a, s.Dv, row_ptr(out, b, h, i), out.dtype, out.strides[3]);
}

// log sum_j e^(t_j) over a row (sink included): m + log d; NaN for a NaN or
// +inf logit, `empty` when nothing is visible.
double row_lse(const double* t, int64_t n, double empty) {
  double m = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    if (std::isnan(t[j]) || t[j] == kInf) return kNaN;
    m = std::max(m, t[j]);
  }
  if (m == kNegInf) return empty;
  double d = 0;
  for (int64_t j = 0; j < n; ++j) d += std::exp(t[j] - m);
  return m + std::log(d);
}

bool all_finite64(const double* m, int64_t rows, int64_t cols) {
  for (int64_t e = 0; e < rows * cols; ++e) {
    if (!std::isfinite(m[e])) return false;
  }
  return true;
}

}  // namespace

void forward_f64(const Setup& s, const TensorView& out) {
  const int64_t bqn = s.row_block();
  const int64_t nqb = (s.Lq + bqn - 1) / bqn;
  const bool sink = !s.sinks_f64.empty();
  const bool softmax = s.norm == AttentionNormalizer::kSoftmax;
  const double scale = scale64(s);
  const double empty = s.o.empty_row == EmptyRow::kNan ? kNaN : 0.0;
  const double empty_lse = s.o.empty_row == EmptyRow::kNan ? kNaN : kNegInf;
  const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
  run_tasks(s, s.B * s.Hkv * nqb, 1, [&](int64_t task, float*) {
    const int64_t qb = task % nqb, hk = (task / nqb) % s.Hkv, b = task / nqb / s.Hkv;
    const int64_t i0 = qb * bqn, bq = std::min(bqn, s.Lq - i0);
    const int64_t kend = s.key_end(b, i0, bq);
    const int64_t w = kend + (sink ? 1 : 0);
    // The thread's scratch, reused across its tasks (every element is
    // written before it is read): K [kend, D], V [kend, Dv], Q, O, T [bq, w],
    // a gate row, and per row `fill`: -1 when P V is the output, else the
    // value of every output element (the empty sum 0 with a sink and no key,
    // the empty_row policy, NaN for a softmax row with a NaN / +inf logit).
    thread_local std::vector<double> scratch;
    const int64_t kn = std::max<int64_t>(kend, 1);
    const int64_t wn = std::max<int64_t>(w, 1);
    scratch.resize(static_cast<size_t>(kn * (Dn + Dvn) + bq * (Dn + Dvn + wn + 1) + Dvn));
    double* K = scratch.data();
    double* V = K + kn * Dn;
    double* Q = V + kn * Dvn;
    double* O = Q + bq * Dn;
    double* T = O + bq * Dvn;
    double* fill = T + bq * wn;
    double* g = fill + bq;
    gather_keys(s, s.k, b, hk, kend, s.D, K);
    gather_keys(s, s.v, b, hk, kend, s.Dv, V);
    for (int64_t gi = 0; gi < s.G; ++gi) {
      const int64_t h = hk * s.G + gi;
      gather_rows(s.q, b, h, i0, bq, s.D, Q);
      block_logits(s, scale, b, h, i0, bq, kend, Q, K, T, w);
      for (int64_t r = 0; r < bq; ++r) {
        const double* t = T + r * w;
        bool visible = false, bad = false;
        for (int64_t j = 0; j < w; ++j) {
          visible = visible || t[j] != kNegInf;
          bad = bad || std::isnan(t[j]) || t[j] == kInf;
        }
        fill[r] = kend == 0       ? (sink ? 0.0 : empty)
                  : softmax && bad ? kNaN
                  : !visible && !bad ? empty
                                     : -1.0;
        if (s.o.lse) {
          const TensorView& l = *s.o.lse;
          store_f64(static_cast<char*>(l.data) +
                        (b * l.strides[0] + h * l.strides[1] + (i0 + r) * l.strides[2]) *
                            dtype_size(l.dtype),
                    l.dtype, row_lse(t, w, empty_lse));
        }
      }
      if (w > 0) normalize_rows(s, h, T, bq, w, s.keys(b));
      if (kend > 0 && s.Dv > 0) {
        dgemm(bq, s.Dv, kend, 1.0, GemmOperand64{T, w, false}, GemmOperand64{V, Dvn, false}, 0.0,
              O, Dvn);
      }
      for (int64_t r = 0; r < bq; ++r) {
        double* o = O + r * Dvn;
        if (!(fill[r] == -1.0)) std::fill(o, o + Dvn, fill[r]);
        store_out_row(s, out, b, h, i0 + r, o, g);
      }
    }
  }, /*with_blas=*/true);
}

void backward_f64(const Setup& s, const TensorView& dout, const TensorView& dq,
                  const TensorView& dk, const TensorView& dv) {
  const int64_t bqn = s.row_block();
  const int64_t nqb = (s.Lq + bqn - 1) / bqn;
  const bool sink = !s.sinks_f64.empty();
  const double scale = scale64(s);
  const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
  const int64_t Lkn = std::max<int64_t>(s.Lk, 1);
  const double empty_grad = s.o.empty_row == EmptyRow::kNan && !sink ? kNaN : 0.0;
  const size_t bh = static_cast<size_t>(s.B * s.H);
  std::vector<double> ksink, kalibi, kbias, kssmax, klogits;  // [B * H]; [B, H, Lq, Lk]
  if (s.o.dsinks) ksink.assign(bh, 0.0);
  if (s.o.dalibi_slopes) kalibi.assign(bh, 0.0);
  if (s.o.dsigmoid_bias) kbias.assign(bh, 0.0);
  if (s.o.dssmax_scales) kssmax.assign(bh, 0.0);
  if (s.o.dattn_mask) {
    const int64_t per = s.Lq * s.Lk;
    if (bh > 0 && per > 0 && static_cast<int64_t>(bh) > (int64_t{1} << 39) / per) {
      throw Error(Status::kOutOfMemory,
                  std::string(s.op) + ": dattn_mask needs a [B, H, Lq, Lk] f64 scratch of " +
                      std::to_string(static_cast<double>(bh) * static_cast<double>(per) * 8) +
                      " bytes");
    }
    klogits.assign(bh * static_cast<size_t>(per), 0.0);
  }
  const bool knobs = !ksink.empty() || !kalibi.empty() || !kbias.empty() || !kssmax.empty() ||
                     !klogits.empty();
  run_tasks(s, s.B * s.Hkv, 1, [&](int64_t task, float*) {
    const int64_t hk = task % s.Hkv, b = task / s.Hkv;
    const int64_t wmax = Lkn + 1;
    std::vector<double> K(static_cast<size_t>(Lkn * Dn)), V(static_cast<size_t>(Lkn * Dvn));
    std::vector<double> dK(K.size(), 0.0), dV(V.size(), 0.0);
    std::vector<double> Q(static_cast<size_t>(bqn * Dn)), dO(static_cast<size_t>(bqn * Dvn));
    std::vector<double> dQ(static_cast<size_t>(bqn * Dn)), g(Dvn);
    std::vector<double> T(static_cast<size_t>(bqn * wmax)), P(T.size()), dP(T.size()),
        dT(T.size()), Sraw(s.cap > 0.0f ? T.size() : 0), blk;
    gather_keys(s, s.k, b, hk, s.Lk, s.D, K.data());
    gather_keys(s, s.v, b, hk, s.Lk, s.Dv, V.data());
    const bool k_finite = scale != 0.0 && all_finite64(K.data(), s.Lk, Dn);
    for (int64_t gi = 0; gi < s.G; ++gi) {
      const int64_t h = hk * s.G + gi;
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * bqn, bq = std::min(bqn, s.Lq - i0);
        const int64_t kend = s.key_end(b, i0, bq);
        const int64_t w = kend + (sink ? 1 : 0);
        if (kend == 0) {
          std::fill(dQ.begin(), dQ.end(), empty_grad);
          for (int64_t r = 0; r < bq && s.D > 0; ++r) {
            scatter_row_f64(dQ.data(), s.D, row_ptr(dq, b, h, i0 + r), dq.dtype, dq.strides[3]);
          }
          continue;
        }
        gather_rows(s.q, b, h, i0, bq, s.D, Q.data());
        gather_rows(dout, b, h, i0, bq, s.Dv, dO.data());
        for (int64_t r = 0; r < bq && s.has_gate && s.Dv > 0; ++r) {
          // The ungated output's upstream gradient: dout * sigmoid(g).
          const int64_t off = b * s.gs[0] + h * s.gs[1] + (i0 + r) * s.gs[2];
          gather_row_f64(s.gate_data + off * dtype_size(s.gate_dtype), s.gate_dtype, s.gs[3],
                         s.Dv, g.data());
          for (int64_t c = 0; c < s.Dv; ++c) dO[r * Dvn + c] *= sigmoid64(g[c]);
        }
        block_logits(s, scale, b, h, i0, bq, kend, Q.data(), K.data(), T.data(), w,
                     s.cap > 0.0f ? Sraw.data() : nullptr);
        std::copy(T.begin(), T.begin() + bq * w, P.begin());
        normalize_rows(s, h, P.data(), bq, w, s.Lk);
        bool nan_rows[kBlockQ];
        const bool any_nan = find_nan_rows(P.data(), bq, w, nan_rows);
        if (any_nan && kend < s.Lk) {
          // A NaN row is NaN at every key, the causally skipped ones too.
          std::fill(dK.begin() + kend * Dn, dK.begin() + s.Lk * Dn, kNaN);
          std::fill(dV.begin() + kend * Dvn, dV.begin() + s.Lk * Dvn, kNaN);
        }
        if (s.Dv > 0) {
          dgemm(bq, kend, s.Dv, 1.0, GemmOperand64{dO.data(), Dvn, false},
                GemmOperand64{V.data(), Dvn, true}, 0.0, dP.data(), w);
        } else {
          std::fill(dP.begin(), dP.begin() + bq * w, 0.0);  // Dv = 0: dP = 0
        }
        if (sink) {
          for (int64_t r = 0; r < bq; ++r) dP[r * w + kend] = 0.0;
        }
        normalize_backward_rows(s, h, T.data(), P.data(), dP.data(), dT.data(), bq, w);
        for (int64_t r = 0; r < bq; ++r) {
          if (nan_rows[r]) std::fill(dT.begin() + r * w, dT.begin() + (r + 1) * w, kNaN);
        }
        if (knobs) {
          const size_t at = static_cast<size_t>(b * s.H + h);
          for (int64_t r = 0; r < bq; ++r) {
            const double* dt = dT.data() + r * w;
            const int64_t i = i0 + r;
            if (!ksink.empty()) ksink[at] += dt[kend];
            double sum = 0, dist = 0;
            for (int64_t j = 0; j < kend; ++j) {
              sum += dt[j];
              dist -= dt[j] * static_cast<double>(std::abs(i - j));
            }
            if (!kbias.empty()) kbias[at] += sum;
            if (!kalibi.empty()) kalibi[at] += dist;
            if (!kssmax.empty()) {
              kssmax[at] += ssmax_row_grad(T.data() + r * w, P.data() + r * w, dP.data() + r * w,
                                           kend, nan_rows[r]);
            }
            if (!klogits.empty()) {
              std::copy(dt, dt + kend, klogits.begin() + (at * s.Lq + i) * s.Lk);
            }
          }
        }
        if (s.cap > 0.0f) {
          // dt *= 1 - tanh(scale s / cap)^2; dt = 0 stays 0 (a NaN score under a mask).
          const double cap = s.cap;
          for (int64_t r = 0; r < bq; ++r) {
            for (int64_t j = 0; j < kend; ++j) {
              double& dt = dT[r * w + j];
              if (dt == 0.0) continue;
              const double th = std::tanh(scale * Sraw[r * w + j] / cap);
              dt *= (1.0 - th) * (1.0 + th);
            }
          }
        }
        // dQ = scale dT K; dK += scale dT^T Q; dV += P^T dO. The scale goes
        // into dT once, except 0 (gemm_skip_zero's alpha = 0 keeps NaN).
        double alpha = scale;
        if (scale != 0.0 && scale != 1.0) {
          for (int64_t r = 0; r < bq; ++r) {
            for (int64_t j = 0; j < kend; ++j) dT[r * w + j] *= scale;
          }
          alpha = 1.0;
        }
        if (s.D > 0) {
          if (k_finite) {
            dgemm(bq, s.D, kend, 1.0, GemmOperand64{dT.data(), w, false},
                  GemmOperand64{K.data(), Dn, false}, 0.0, dQ.data(), Dn);
          } else {
            gemm_skip_zero<double>(false, bq, s.D, kend, alpha, dT.data(), w, K.data(), Dn, 0.0,
                                   dQ.data(), Dn);
          }
          for (int64_t r = 0; r < bq; ++r) {
            scatter_row_f64(dQ.data() + r * Dn, s.D, row_ptr(dq, b, h, i0 + r), dq.dtype,
                            dq.strides[3]);
          }
          if (scale != 0.0 && all_finite64(Q.data(), bq, Dn)) {
            dgemm(kend, s.D, bq, 1.0, GemmOperand64{dT.data(), w, true},
                  GemmOperand64{Q.data(), Dn, false}, 1.0, dK.data(), Dn);
          } else {
            blk.assign(static_cast<size_t>(kend * Dn), 0.0);
            gemm_skip_zero<double>(true, kend, s.D, bq, alpha, dT.data(), w, Q.data(), Dn, 0.0,
                                   blk.data(), Dn);
            for (int64_t e = 0; e < kend * Dn; ++e) dK[e] += blk[e];
          }
        }
        if (s.Dv > 0) {
          dgemm(kend, s.Dv, bq, 1.0, GemmOperand64{P.data(), w, true},
                GemmOperand64{dO.data(), Dvn, false}, 1.0, dV.data(), Dvn);
        }
      }
    }
    for (int64_t j = 0; j < s.Lk; ++j) {
      if (s.D > 0) {
        scatter_row_f64(dK.data() + j * Dn, s.D, row_ptr(dk, b, hk, j), dk.dtype, dk.strides[3]);
      }
      if (s.Dv > 0) {
        scatter_row_f64(dV.data() + j * Dvn, s.Dv, row_ptr(dv, b, hk, j), dv.dtype,
                        dv.strides[3]);
      }
    }
  }, /*with_blas=*/true);
  const int64_t bh_shape[2] = {s.B, s.H};
  if (s.o.dsinks) store_reduced(ksink, bh_shape, 2, *s.o.dsinks, true);
  if (s.o.dalibi_slopes) store_reduced(kalibi, bh_shape, 2, *s.o.dalibi_slopes, true);
  if (s.o.dsigmoid_bias) store_reduced(kbias, bh_shape, 2, *s.o.dsigmoid_bias, true);
  if (s.o.dssmax_scales) store_reduced(kssmax, bh_shape, 2, *s.o.dssmax_scales, true);
  if (s.o.dattn_mask) {
    const int64_t full[4] = {s.B, s.H, s.Lq, s.Lk};
    store_reduced(klogits, full, 4, *s.o.dattn_mask, true);
  }
}

}  // namespace smax::detail::attn

// src/ops/attention/attention_forward.cc: the forward drivers of the fused attention
// (attention_internal.h has the design): online softmax over key blocks,
// and the full-key-row path of the other normalisers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "ops/attention/attention_internal.h"

namespace smax::detail::attn {
namespace {

// Stores row (b, h, i) of out: a_c = fl(o[c] * factor) (or `fill` for
// every element), gated when there is a gate (fl(a * sigmoid(g)), f32:
// kernels::attention_gate_row), and a itself into ungated_out when given.
void store_row(const Setup& s, const TensorView& out, int64_t b, int64_t h, int64_t i,
               const float* o, int64_t n, double factor, float fill, bool use_fill) {
  if (n <= 0) return;  // Dv = 0: out may have null data
  thread_local std::vector<float> a, g;
  a.resize(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    // f32 first (the f32 output's bits), then rounded once more only for a
    // narrow output: the value is an f32 result by contract.
    a[c] = use_fill ? fill : static_cast<float>(static_cast<double>(o[c]) * factor);
  }
  auto row_of = [&](const TensorView& t) {
    return static_cast<char*>(t.data) +
           (b * t.strides[0] + h * t.strides[1] + i * t.strides[2]) * dtype_size(t.dtype);
  };
  if (s.has_gate) {
    if (s.o.ungated_out) {
      const TensorView& u = *s.o.ungated_out;
      scatter_row_f32(a.data(), n, row_of(u), u.dtype, u.strides[3]);
    }
    g.resize(static_cast<size_t>(n));
    s.gate_row(b, h, i, g.data());
    kernels::attention_gate_row(a.data(), g.data(), a.data(), n);
  }
  scatter_row_f32(a.data(), n, row_of(out), out.dtype, out.strides[3]);
}

void store_lse(const Setup& s, int64_t b, int64_t h, int64_t i, float value) {
  if (!s.o.lse) return;
  const TensorView& l = *s.o.lse;
  store_f32(static_cast<char*>(l.data) +
                (b * l.strides[0] + h * l.strides[1] + i * l.strides[2]) * dtype_size(l.dtype),
            l.dtype, value);
}

}  // namespace

void finish_row(const Setup& s, const TensorView& out, int64_t b, int64_t h, int64_t i, float* o,
                double dd, float M, bool nan, bool no_keys) {
  const float empty = s.o.empty_row == EmptyRow::kNan ? kNaNf : 0.0f;
  const float empty_lse = s.o.empty_row == EmptyRow::kNan ? kNaNf : kNegInff;
  if (s.sinks != nullptr) {
    const float sk = s.sink(h);
    if (std::isnan(sk) || sk == std::numeric_limits<float>::infinity()) {
      nan = true;
    } else if (sk != kNegInff) {
      const float M2 = std::max(M, sk);
      if (M != kNegInff && M2 != M) {
        const double a = std::exp(static_cast<double>(M) - M2);
        kernels::attention_scale_row(o, s.Dv, static_cast<float>(a));
        dd *= static_cast<float>(a);
      }
      dd += std::exp(static_cast<double>(sk) - M2);
      M = M2;
    }
  }
  if (no_keys && s.sinks != nullptr) {
    // No key at all (Lk = 0): the output is the empty sum P[:, :0] V,
    // exactly 0 whatever the sink (SDPA with a sink column); the lse is
    // the sink's (NaN for a NaN sink, the empty policy for -inf).
    store_row(s, out, b, h, i, o, s.Dv, 0.0, 0.0f, true);
    store_lse(s, b, h, i,
              nan ? kNaNf
                  : dd > 0.0 ? static_cast<float>(static_cast<double>(M) + std::log(dd))
                             : empty_lse);
  } else if (nan) {
    store_row(s, out, b, h, i, o, s.Dv, 0.0, kNaNf, true);
    store_lse(s, b, h, i, kNaNf);
  } else if (!(dd > 0.0)) {
    store_row(s, out, b, h, i, o, s.Dv, 0.0, empty, true);
    store_lse(s, b, h, i, empty_lse);
  } else {
    store_row(s, out, b, h, i, o, s.Dv, 1.0 / dd, 0.0f, false);
    store_lse(s, b, h, i, static_cast<float>(static_cast<double>(M) + std::log(dd)));
  }
}

namespace {

// K^T and V of one kv head in the panels of the prefill products
// (kernels::attention_gemm_panels), for keys [0, n): K^T is D x n (panel p:
// keys [16 p, 16 p + 16), D rows of 16), V is n x Dv (panel p: value
// columns [16 p, 16 p + 16), n rows of 16).
struct KvPanels {
  int64_t kt_stride, kt_floats, v_stride, v_floats;
  KvPanels(const Setup& s, int64_t n) {
    const int64_t w = kernels::kAttentionPanel;
    kt_stride = std::max<int64_t>(s.D, 1) * w;
    kt_floats = std::max<int64_t>((n + w - 1) / w, 1) * kt_stride;
    v_stride = std::max<int64_t>(n, 1) * w;
    v_floats = std::max<int64_t>((s.Dv + w - 1) / w, 1) * v_stride;
  }
};

// Keys per batch of pack_kv's row gathers.
constexpr int64_t kPackRows = 64;

// Packs keys / values [0, n) of kv head (b, hk) of sequence b (in place in
// the cache or its pages, any dtype and strides, widened to f32) into kt /
// vp; rowbuf: kPackRows x max(D, Dv) floats of scratch.
void pack_kv(const Setup& s, const KvPanels& L, int64_t b, int64_t hk, int64_t n, float* kt,
             float* vp, float* rowbuf) {
  const float* rows[kPackRows];
  for (int64_t j0 = 0; j0 < n; j0 += kPackRows) {
    const int64_t m = std::min(kPackRows, n - j0);
    if (s.D > 0) {
      s.cache_rows(s.k, b, hk, j0, m, s.D, rowbuf, rows);
      for (int64_t j = 0; j < m; ++j) {
        kernels::attention_pack_column(rows[j], s.D, j0 + j, kt, L.kt_stride);
      }
    }
    if (s.Dv > 0) {
      s.cache_rows(s.v, b, hk, j0, m, s.Dv, rowbuf, rows);
      for (int64_t j = 0; j < m; ++j) {
        kernels::attention_pack_row(rows[j], s.Dv, j0 + j, vp, L.v_stride);
      }
    }
  }
  // The columns the products read past n (keys of K^T) and past Dv (V):
  // zero, not whatever the scratch held.
  kernels::attention_pack_pad(kt, s.D, n, L.kt_stride);
  kernels::attention_pack_pad(vp, n, s.Dv, L.v_stride);
}

// The forward grid: tasks over (b, kv head, query chunk); a task packs its
// kv head's K^T and V once (keys up to its last block's causal limit) and
// runs the G query heads' blocks qb = chunk, chunk + chunks, ... of `block`
// rows (interleaved, so causal chunks cost alike). A row's arithmetic does
// not depend on the task that computes it, so the chunk count may follow the
// thread count (more tasks than B x Hkv when those are few).
struct ForwardGrid {
  int64_t block, nqb, chunks;
  ForwardGrid(const Setup& s, int64_t block_rows) : block(block_rows) {
    nqb = (s.Lq + block - 1) / block;
    const int64_t heads = std::max<int64_t>(s.B * s.Hkv, 1);
    const int64_t want = (4 * std::max(s.threads, 1) + heads - 1) / heads;
    chunks = std::clamp<int64_t>(want, 1, std::max<int64_t>(nqb, 1));
  }
  int64_t tasks(const Setup& s) const { return s.B * s.Hkv * chunks; }
  // The keys the task's blocks see (the last block's causal limit).
  int64_t task_keys(const Setup& s, int64_t b, int64_t chunk) const {
    const int64_t last = chunk + (nqb - 1 - chunk) / chunks * chunks;
    const int64_t i0 = last * block;
    return s.key_end(b, i0, std::min(block, s.Lq - i0));
  }
  // The (sequence, kv head, chunk) of forward task `task`.
  struct Task {
    int64_t b, hk, chunk;
  };
  Task task(const Setup& s, int64_t t) const {
    return {t / chunks / s.Hkv, (t / chunks) % s.Hkv, t % chunks};
  }
  // Runs fn(h, i0, bq) for each of the task's query blocks.
  template <typename Fn>
  void each_block(const Setup& s, int64_t hk, int64_t chunk, Fn&& fn) const {
    for (int64_t g = 0; g < s.G; ++g) {
      for (int64_t qb = chunk; qb < nqb; qb += chunks) {
        fn(hk * s.G + g, qb * block, std::min(block, s.Lq - qb * block));
      }
    }
  }
};

// One prefill task's scratch: its query block, the kv head's panels, the
// pack gathers, the scores [rows x width], the output block and a gathered
// mask row.
struct PrefillScratch {
  float *q, *kt, *vp, *rowbuf, *S, *O, *add;
  uint8_t* keep;
};
struct PrefillLayout {
  KvPanels panels;
  int64_t qf, rowf, sf, of, mf, keepf;
  PrefillLayout(const Setup& s, int64_t rows, int64_t width) : panels(s, s.Lk) {
    const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
    qf = rows * Dn;
    rowf = kPackRows * std::max(Dn, Dvn);
    sf = rows * width;
    of = rows * Dvn;
    mf = width;
    keepf = width / 4 + 1;
  }
  int64_t total() const {
    return qf + panels.kt_floats + panels.v_floats + rowf + sf + of + mf + keepf;
  }
  PrefillScratch carve(float* buf) const {
    Carve c(buf);
    PrefillScratch f{};
    f.q = c.take(qf);
    f.kt = c.take(panels.kt_floats);
    f.vp = c.take(panels.v_floats);
    f.rowbuf = c.take(rowf);
    f.S = c.take(sf);
    f.O = c.take(of);
    f.add = c.take(mf);
    f.keep = c.take_bytes_rest();
    return f;
  }
};

// Runs the prefill grid: per task, packs its kv head's K^T and V into the
// task's scratch, then calls block(f, b, h, i0, bq) for each of its query
// blocks (f: the task's scratch).
template <typename Fn>
void run_prefill(const Setup& s, const ForwardGrid& grid, const PrefillLayout& layout,
                 Fn&& block) {
  run_tasks(s, grid.tasks(s), layout.total(), [&](int64_t task, float* buf) {
    const ForwardGrid::Task t = grid.task(s, task);
    if (t.chunk >= grid.nqb) return;
    const PrefillScratch f = layout.carve(buf);
    pack_kv(s, layout.panels, t.b, t.hk, grid.task_keys(s, t.b, t.chunk), f.kt, f.vp, f.rowbuf);
    grid.each_block(s, t.hk, t.chunk,
                    [&](int64_t h, int64_t i0, int64_t bq) { block(f, t.b, h, i0, bq); });
  });
}

}  // namespace

void forward_softmax(const Setup& s, const TensorView& out) {
  const ForwardGrid grid(s, kPrefillBlockQ);
  const int64_t bk_max = std::min<int64_t>(kBlockK, std::max<int64_t>(s.Lk, 1));
  const int64_t Dvn = std::max<int64_t>(s.Dv, 1);
  const PrefillLayout layout(s, kPrefillBlockQ, bk_max);
  const KvPanels& panels = layout.panels;
  run_prefill(s, grid, layout, [&](const PrefillScratch& f, int64_t b, int64_t h, int64_t i0,
                                   int64_t bq) {
    float m[kPrefillBlockQ];
    double d[kPrefillBlockQ];
    bool bad[kPrefillBlockQ];
    const int64_t kend = s.key_end(b, i0, bq);
    const Mat Q = s.q_rows(b, h, i0, bq, f.q);
    for (int64_t r = 0; r < bq; ++r) {
      m[r] = kNegInff;
      d[r] = 0.0;
      bad[r] = false;
    }
    std::fill(f.O, f.O + bq * Dvn, 0.0f);
    for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
      const int64_t bk = std::min(kBlockK, kend - j0);
      kernels::attention_gemm_panels(bq, bk, s.D, Q.p, Q.ld, 1,
                                     f.kt + j0 / kernels::kAttentionPanel * panels.kt_stride,
                                     panels.kt_stride, f.S, bk, false);
      for (int64_t r = 0; r < bq; ++r) {
        const kernels::OnlineStep st = kernels::attention_logits_online_step(
            f.S + r * bk, bk, s.logits(b, h, i0 + r, j0, bk, f.add, f.keep), m[r]);
        bad[r] = bad[r] || st.bad;
        if (st.alpha != 1.0f) kernels::attention_scale_row(f.O + r * Dvn, s.Dv, st.alpha);
        d[r] = d[r] * static_cast<double>(st.alpha) + st.sum;
        m[r] = st.m;
      }
      kernels::attention_gemm_panels(bq, s.Dv, bk, f.S, bk, 1,
                                     f.vp + j0 * kernels::kAttentionPanel, panels.v_stride, f.O,
                                     Dvn, true);
    }
    for (int64_t r = 0; r < bq; ++r) {
      finish_row(s, out, b, h, i0 + r, f.O + r * Dvn, d[r], m[r], bad[r], kend == 0);
    }
  });
}

void forward_rows(const Setup& s, const TensorView& out) {
  // The full key row of each query block ([bq, kend] scores), then the
  // library's row op on it (normalize_rows) and O = P V.
  const int64_t bqn = s.row_block();
  const ForwardGrid grid(s, bqn);
  const int64_t Dvn = std::max<int64_t>(s.Dv, 1);
  const PrefillLayout layout(s, bqn, std::max<int64_t>(s.Lk, 1));
  const KvPanels& panels = layout.panels;
  const float empty = s.o.empty_row == EmptyRow::kNan ? kNaNf : 0.0f;
  run_prefill(s, grid, layout, [&](const PrefillScratch& f, int64_t b, int64_t h, int64_t i0,
                                   int64_t bq) {
    const int64_t kend = s.key_end(b, i0, bq);
    if (kend == 0) {
      for (int64_t r = 0; r < bq; ++r) store_row(s, out, b, h, i0 + r, f.O, s.Dv, 0.0, empty, true);
      return;
    }
    const Mat Q = s.q_rows(b, h, i0, bq, f.q);
    kernels::attention_gemm_panels(bq, kend, s.D, Q.p, Q.ld, 1, f.kt, panels.kt_stride, f.S, kend,
                                   false);
    for (int64_t r = 0; r < bq; ++r) {
      const int64_t i = i0 + r;
      kernels::attention_logits_row(
          f.S + r * kend, kend,
          s.logits_at(b, h, i, s.query_position(b, i), 0, kend, f.add, f.keep));
    }
    normalize_rows(s, h, f.S, bq, kend, s.keys(b));
    kernels::attention_gemm_panels(bq, s.Dv, kend, f.S, kend, 1, f.vp, panels.v_stride, f.O, Dvn,
                                   false);
    for (int64_t r = 0; r < bq; ++r) {
      store_row(s, out, b, h, i0 + r, f.O + r * Dvn, s.Dv, 1.0, 0.0f, false);
    }
  });
}

}  // namespace smax::detail::attn

// src/ops/attention/attention_decode.cc: the forward driver for few query rows
// against many keys (decoding with a KV cache; FlashDecoding, Dao et al. 2023).
//
// The prefill driver (attention_forward.cc) runs one task per (batch, head,
// 64-query block): with Lq = 1 that is one task per head, each streaming its
// kv head's K and V once per query head, so grouped-query attention reads K
// and V G times and a single long row cannot use a second thread. Here:
//
// * Rows: the G query heads of one kv head and their Lq query rows form one
//   block of R = G Lq rows (in chunks of kDecodeRows), so each key and value
//   row is read from memory once for all of them.
// * Keys: split into chunks of kDecodeSplitKeys keys; one task per (batch, kv
//   head, row chunk, key chunk). A task keeps the online (m, d, o) state of
//   its rows over its keys, in blocks of kDecodeBlockK: scores, the logit
//   transform, one online step, P V. The two products are the in-place
//   kernels of kernels/attention_decode.cc, which take key and value rows by
//   pointer (straight from the cache or its pages, with the next operand
//   prefetched into L2 while each runs). OpenBLAS SGEMM, which the row chunks
//   above 16 rows used before, packs K and V on every call: the kernels beat
//   it at every row count up to kDecodeRows (measured on a Zen 4 core: G Lq
//   = 32 rows 13.7 against 19 ms, 64 rows 12.8 against 16.5 ms, a 512-query
//   KV cache prefill 96 against 112 ms).
// * Merge: per row, the partial records of its key chunks, in chunk order:
//   M = max m_c, d = sum d_c e^(m_c - M), o = sum o_c e^(m_c - M); then the
//   sink, the empty / NaN policies and the stores exactly as in the prefill
//   driver (finish_row in attention_internal.h).
// The grid depends on the shapes only, so the bits do not depend on the
// thread count; they differ from the prefill driver's (another summation
// order) within the same bound: the chunk merges are block merges of the
// prefill driver's bound (L_acc counts one rounding per key block).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "ops/attention/attention_internal.h"

namespace smax::detail::attn {
namespace {

// One task's scratch: its query rows, a gathered key / value block, the
// scores and a gathered mask row.
struct DecodeLayout {
  int64_t qf, kf, vf, sf, mf, of, keepf;
  DecodeLayout(const Setup& s, int64_t rows, int64_t bk) {
    const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
    of = rows * Dvn;  // the rows' partial output when there is one key chunk
    qf = rows * Dn;
    kf = bk * Dn;
    vf = bk * Dvn;
    sf = rows * bk;
    mf = bk;
    keepf = bk / 4 + 1;
  }
  int64_t total() const { return qf + kf + vf + sf + mf + of + keepf; }
};

// The grid: tasks over (b, hk, row chunk rc, key chunk c), c fastest.
struct DecodeGrid {
  int64_t R = 0;       // rows per kv head: G * Lq (row r: head hk G + r / Lq, query r % Lq)
  int64_t rows = 0;    // rows per chunk
  int64_t nrc = 0;     // row chunks
  int64_t chunk = 0;   // keys per key chunk
  int64_t nkc = 0;     // key chunks
  int64_t tasks() const { return nkc * nrc; }
};

DecodeGrid decode_grid(const Setup& s) {
  DecodeGrid g;
  g.R = s.G * s.Lq;
  g.rows = std::min<int64_t>(std::max<int64_t>(g.R, 1), kDecodeRows);
  g.nrc = (g.R + g.rows - 1) / g.rows;
  const int64_t cap = std::max<int64_t>(s.key_capacity(), 1);
  if (s.Lq <= kDecodeMaxLq) {
    // Chunks of kDecodeSplitKeys keys, at most kDecodeMaxChunks of them (the
    // partial records scale with the chunk count), a whole number of blocks.
    const int64_t want = std::max(kDecodeSplitKeys, (cap + kDecodeMaxChunks - 1) / kDecodeMaxChunks);
    g.chunk = (want + kDecodeBlockK - 1) / kDecodeBlockK * kDecodeBlockK;
  } else {
    g.chunk = cap;  // many query rows (a KV cache form): rows give the parallelism
  }
  g.nkc = (cap + g.chunk - 1) / g.chunk;
  return g;
}

// Partial state of every (b, hk, row chunk, key chunk, row): o (Dvn floats),
// m, d and the NaN flag. Only with more than one key chunk: one chunk
// finishes its rows in the task.
struct Partials {
  int64_t Dvn = 1, rows = 1;
  std::vector<float> o, m;
  std::vector<double> d;
  std::vector<uint8_t> bad;
  Partials(int64_t records, int64_t rows_, int64_t Dvn_) : Dvn(Dvn_), rows(rows_) {
    o.assign(static_cast<size_t>(records * rows * Dvn), 0.0f);
    m.assign(static_cast<size_t>(records * rows), kNegInff);
    d.assign(static_cast<size_t>(records * rows), 0.0);
    bad.assign(static_cast<size_t>(records * rows), 0);
  }
  size_t at(int64_t record, int64_t r) const { return static_cast<size_t>(record * rows + r); }
};

// Row pointers of one key block (kernels/attention_decode.cc).
struct BlockRows {
  const float* k[kDecodeBlockK];
  const float* v[kDecodeBlockK];
  const float* next_k[kDecodeBlockK];
};

// The logit transform and one online step of each of the nr rows of a key
// block [j0, j0 + bk) (scores S [nr, bk] -> weights in place), updating
// (m, d, bad) and rescaling the rows' partial outputs O; top[r]: the
// largest logit row r has seen (for the unified max's range check).
void online_rows(const Setup& s, int64_t b, int64_t hk, int64_t r0, int64_t nr, int64_t j0,
                 int64_t bk, float* S, float* O, int64_t Dvn, float* m, double* d, uint8_t* bad,
                 float* top, float* addbuf, uint8_t* keepbuf) {
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t h = hk * s.G + (r0 + r) / s.Lq, i = (r0 + r) % s.Lq;
    const kernels::OnlineStep st = kernels::attention_logits_online_step(
        S + r * bk, bk, s.logits_at(b, h, i, s.query_position(b, i), j0, bk, addbuf, keepbuf),
        m[r]);
    top[r] = std::max(top[r], st.block_max);
    bad[r] = bad[r] || st.bad;
    if (st.alpha != 1.0f) kernels::attention_scale_row(O + r * Dvn, s.Dv, st.alpha);
    d[r] = d[r] * static_cast<double>(st.alpha) + st.sum;
    m[r] = st.m;
  }
}

}  // namespace

void forward_decode(const Setup& s, const TensorView& out) {
  if (s.B == 0 || s.H == 0 || s.Lq == 0) return;
  const DecodeGrid grid = decode_grid(s);
  const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
  const int64_t bk_max = std::min<int64_t>(kDecodeBlockK, std::max<int64_t>(s.key_capacity(), 1));
  const DecodeLayout layout(s, grid.rows, bk_max);
  const int64_t heads = s.B * s.Hkv;
  const bool split = grid.nkc > 1;
  Partials part(split ? heads * grid.tasks() : 0, grid.rows, Dvn);
  run_tasks(s, heads * grid.tasks(), layout.total(), [&](int64_t task, float* buf) {
    const int64_t kc = task % grid.nkc, rc = (task / grid.nkc) % grid.nrc;
    const int64_t bhk = task / grid.tasks(), hk = bhk % s.Hkv, b = bhk / s.Hkv;
    const int64_t r0 = rc * grid.rows, nr = std::min(grid.rows, grid.R - r0);
    const int64_t keys = s.keys(b);
    const int64_t c0 = kc * grid.chunk;
    // Keys this chunk can show to any of its rows (causal rows see fewer).
    int64_t c1 = std::min(c0 + grid.chunk, keys);
    if (s.o.is_causal) {
      int64_t last = -1;
      for (int64_t r = r0; r < r0 + nr; ++r) last = std::max(last, s.query_position(b, r % s.Lq));
      c1 = std::min(c1, last + 1);
    }
    Carve cv(buf);
    float* Q = cv.take(layout.qf);
    float* kbuf = cv.take(layout.kf);
    float* vbuf = cv.take(layout.vf);
    float* S = cv.take(layout.sf);
    float* addbuf = cv.take(layout.mf);
    float* Olocal = cv.take(layout.of);
    uint8_t* keepbuf = cv.take_bytes_rest();
    float mlocal[kDecodeRows];
    double dlocal[kDecodeRows];
    uint8_t badlocal[kDecodeRows];
    const int64_t record = bhk * grid.tasks() + rc * grid.nkc + kc;
    float* O = split ? part.o.data() + part.at(record, 0) * Dvn : Olocal;
    float* m = split ? part.m.data() + part.at(record, 0) : mlocal;
    double* d = split ? part.d.data() + part.at(record, 0) : dlocal;
    uint8_t* bad = split ? part.bad.data() + part.at(record, 0) : badlocal;
    for (int64_t r = 0; r < nr; ++r) {
      m[r] = kNegInff;
      d[r] = 0.0;
      bad[r] = 0;
    }
    std::fill(O, O + nr * Dvn, 0.0f);
    // One key chunk: the task finishes its rows (no merge).
    auto finish = [&] {
      if (split) return;
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t h = hk * s.G + (r0 + r) / s.Lq, i = (r0 + r) % s.Lq;
        finish_row(s, out, b, h, i, O + r * Dvn, d[r], m[r], bad[r] != 0, keys == 0);
      }
    };
    if (c1 <= c0) {  // nothing visible: the state stays (m = -inf, d = 0, o = 0)
      finish();
      return;
    }
    BlockRows rows;
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t h = hk * s.G + (r0 + r) / s.Lq, i = (r0 + r) % s.Lq;
      const TensorView& q = s.q;
      if (s.D > 0) {
        gather_row_f32(static_cast<const char*>(q.data) +
                           (b * q.strides[0] + h * q.strides[1] + i * q.strides[2]) *
                               dtype_size(q.dtype),
                       q.dtype, q.strides[3], s.D, Q + r * Dn);
      }
    }
    const bool k_direct = Setup::rows_in_place(s.k, s.D), v_direct = Setup::rows_in_place(s.v, s.Dv);
    float top[kDecodeRows];
    auto run_chunk_blocks = [&] {
      for (int64_t j0 = c0; j0 < c1;) {
        const int64_t bk = std::min(kDecodeBlockK, c1 - j0);
        // Key and value rows by pointer (in place, pages included, or
        // widened into kbuf / vbuf); the next operand's rows are prefetched
        // while each product runs (the value rows during the scores, the
        // next block's key rows during P V), so the memory stream does not
        // stop between the two.
        s.cache_rows(s.k, b, hk, j0, bk, s.D, kbuf, rows.k);
        s.cache_rows(s.v, b, hk, j0, bk, s.Dv, vbuf, rows.v);
        const int64_t nk = std::min(kDecodeBlockK, c1 - j0 - bk);
        if (k_direct && nk > 0) s.cache_rows(s.k, b, hk, j0 + bk, nk, s.D, nullptr, rows.next_k);
        kernels::PrefetchRows pv, pk;
        if (v_direct) pv = {rows.v, bk, s.Dv};
        if (k_direct && nk > 0) pk = {rows.next_k, nk, s.D};
        kernels::attention_decode_scores(Q, nr, Dn, rows.k, bk, s.D, S, bk, pv);
        online_rows(s, b, hk, r0, nr, j0, bk, S, O, Dvn, m, d, bad, top, addbuf, keepbuf);
        kernels::attention_decode_accumulate(S, nr, bk, rows.v, bk, s.Dv, O, Dvn, pk);
        j0 += bk;
      }
    };
    // FlashDecoding++'s unified max: start every row at m = phi (no
    // rescaling while the logits stay below it). A row that sees keys but
    // none within kUnifiedMaxSlack of phi may have lost e^(t - phi) to
    // underflow: the chunk is then redone exactly, from m = -inf.
    const bool unified = !std::isnan(s.o.unified_max);
    for (int pass = unified ? 0 : 1; pass < 2; ++pass) {
      const float m0 = pass == 0 ? s.o.unified_max : kNegInff;
      for (int64_t r = 0; r < nr; ++r) {
        m[r] = m0;
        d[r] = 0.0;
        bad[r] = 0;
        top[r] = kNegInff;
      }
      std::fill(O, O + nr * Dvn, 0.0f);
      run_chunk_blocks();
      if (pass == 0) {
        bool far = false;
        for (int64_t r = 0; r < nr; ++r) {
          far = far || (top[r] > kNegInff && top[r] < s.o.unified_max - kUnifiedMaxSlack &&
                        bad[r] == 0);
        }
        if (!far) break;
      }
    }
    finish();
  });
  if (!split) return;
  // Merge the key chunks of each row, in chunk order.
  run_tasks(s, heads * grid.nrc, Dvn, [&](int64_t task, float* o) {
    const int64_t rc = task % grid.nrc, bhk = task / grid.nrc;
    const int64_t hk = bhk % s.Hkv, b = bhk / s.Hkv;
    const int64_t r0 = rc * grid.rows, nr = std::min(grid.rows, grid.R - r0);
    const int64_t first = bhk * grid.tasks() + rc * grid.nkc;
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t h = hk * s.G + (r0 + r) / s.Lq, i = (r0 + r) % s.Lq;
      float M = kNegInff;
      bool nan = false;
      for (int64_t c = 0; c < grid.nkc; ++c) {
        const size_t at = part.at(first + c, r);
        M = std::max(M, part.m[at]);
        nan = nan || part.bad[at] != 0;
      }
      std::fill(o, o + Dvn, 0.0f);
      double dd = 0.0;
      if (M != kNegInff) {
        for (int64_t c = 0; c < grid.nkc; ++c) {
          const size_t at = part.at(first + c, r);
          if (part.m[at] == kNegInff) continue;  // no visible key in this chunk
          const float a = part.m[at] == M ? 1.0f
                                          : static_cast<float>(std::exp(
                                                static_cast<double>(part.m[at]) - M));
          const float* oc = part.o.data() + at * Dvn;
          for (int64_t col = 0; col < s.Dv; ++col) o[col] += a * oc[col];
          dd += part.d[at] * static_cast<double>(a);
        }
      }
      finish_row(s, out, b, h, i, o, dd, M, nan, s.keys(b) == 0);
    }
  });
}

}  // namespace smax::detail::attn

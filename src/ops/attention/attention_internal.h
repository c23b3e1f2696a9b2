// src/ops/attention/attention_internal.h: what the fused attention's translation units
// share (src/ops/attention/attention.cc: API, validation, GEMM and row-op helpers;
// attention_forward.cc; attention_decode.cc; attention_backward.cc). Not a
// public header.
//
// Forward (prefill): tasks over (batch, kv head, query chunk). A task packs
// its kv head's K^T and V once into 16-column panels and runs the G query
// heads' blocks of its chunk; the products are the register-tiled Highway
// kernel kernels::attention_gemm_panels (kernels/attention_tiles.cc), the
// logit transform and the online softmax step the Highway kernels of
// kernels/attention.cc. Softmax keeps the (m, d, o) state of each query row
// over key blocks of kBlockK; other normalisers compute the full key row of
// a query block and call the library's row op (softpick, sigmoid_normalizer,
// ssmax, stablemax, softplus_normalizer) on it with threads = 1, so masks,
// NaN and empty rows behave exactly as in those ops.
// Decode (softmax with Lq <= kDecodeMaxLq, or a KV cache form):
// attention_decode.cc.
// Backward: tasks over (batch, kv head); each packs K^T, V^T and K once,
// loops over its G query heads and their query blocks in a fixed order,
// recomputes P for the full key row, and accumulates dk^T / dv^T in
// task-local buffers, so the sums never depend on the thread count. Row
// VJPs are the library's backward ops.
#pragma once

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "core/convert.h"
#include "core/execution.h"
#include "core/gemm.h"
#include "smax/attention.h"
#include "smax/error.h"
#include "smax/softmax.h"
#include "smax/tensor.h"

namespace smax::detail::attn {

using detail::ScratchPool;
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInff = -std::numeric_limits<float>::infinity();
constexpr float kInff = std::numeric_limits<float>::infinity();
constexpr int64_t kBlockQ = 64;    // query rows per task (row driver, backward)
// Query rows per block of the softmax prefill driver (scores [64 x 512]
// stay in L2; measured against 60, 96 and 120 rows, 256-key blocks).
constexpr int64_t kPrefillBlockQ = 64;
constexpr int64_t kBlockK = 512;   // keys per online step (softmax forward)
constexpr int64_t kRowBlockFloats = int64_t{1} << 18;  // [block_q, Lk] scratch target
// Decode driver (attention_decode.cc): used for the softmax normaliser when
// Lq <= kDecodeMaxLq or a KV cache form is given; rows per task and keys per
// key chunk (a fixed grid: the bits do not depend on the thread count).
constexpr int64_t kDecodeMaxLq = 16;
constexpr int64_t kDecodeRows = 64;
constexpr int64_t kDecodeSplitKeys = 2048;
constexpr int64_t kDecodeMaxChunks = 256;  // chunks grow past 2048 keys beyond this
constexpr int64_t kDecodeBlockK = 128;
// AttentionOptions::unified_max: a key chunk in which some row saw keys but
// none within this of phi is recomputed exactly (e^(t - phi) keeps f32's
// range and precision down to t - phi ~ -87).
constexpr float kUnifiedMaxSlack = 64.0f;

// A matrix operand for SGEMM: rows with leading dimension ld, unit column stride.
struct Mat {
  const float* p = nullptr;
  int64_t ld = 1;
};

// Rows [r0, r0 + rows) x cols of a 2-D strided slice (base, row stride rs,
// column stride cs, in elements of `dtype`): direct when the slice is f32,
// its columns are contiguous and ld fits SGEMM, else gathered into buf
// (contiguous f32, ld = max(cols, 1); other storage dtypes convert there,
// one block at a time: the GEMMs run in f32).
Mat matrix(const char* base, DType dtype, int64_t rs, int64_t cs, int64_t r0, int64_t rows,
           int64_t cols, float* buf);

// True when the rows x cols matrix M (leading dimension ld) is all finite.
bool all_finite(const Mat& M, int64_t rows, int64_t cols);

// C[M x N] (ldc) = alpha A B + beta C (A: M x K, lda; B: K x N, ldb), or with
// a_t: A^T where A is stored K x M. Terms whose weight alpha * a is exactly 0
// are skipped, so a non-finite B entry under a masked score adds 0, not
// 0 * inf = NaN, while a NaN weight stays NaN even with alpha = 0 (SGEMM
// skips the product when alpha = 0). The path for non-finite inputs and
// alpha = 0 (SGEMM / DGEMM otherwise); sums in T (float or double) in a
// fixed order.
template <typename T>
void gemm_skip_zero(bool a_t, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                    const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    for (int64_t n = 0; n < N; ++n) c[n] = beta == T(0) ? T(0) : beta * c[n];
    for (int64_t k = 0; k < K; ++k) {
      const T a = a_t ? A[k * lda + i] : A[i * lda + k];
      const T w = alpha * a;
      if (w == T(0)) continue;
      const T* b = B + k * ldb;
      for (int64_t n = 0; n < N; ++n) c[n] += w * b[n];
    }
  }
}

/// m[0 .. n) with element stride `stride` as a contiguous row: m itself
/// when stride == 1, else copied into buf (n elements) and buf returned.
template <typename T>
const T* contiguous(const T* m, int64_t n, int64_t stride, T* buf) {
  if (stride == 1) return m;
  for (int64_t j = 0; j < n; ++j) buf[j] = m[j * stride];
  return buf;
}

struct Setup {
  const char* op = nullptr;
  int64_t B = 0, H = 0, Hkv = 0, G = 1, Lq = 0, Lk = 0, D = 0, Dv = 0;
  TensorView q, k, v;
  float scale = 1.0f;
  float cap = 0.0f;
  // attn_mask broadcast to [B, H, Lq, Lk].
  bool has_mask = false;
  bool mask_bool = false;
  DType mask_dtype = DType::kF32;  // additive masks: any floating dtype
  const char* mask_data = nullptr;
  int64_t ms[4] = {0, 0, 0, 0};
  // sinks [H] and alibi slopes broadcast to [B, H], as f32 copies
  // (whatever their storage dtype and strides).
  std::vector<float> sinks_f32;
  const float* sinks = nullptr;  // sinks_f32.data() when sinks are given
  std::vector<float> alibi_f32;  // [B * H]
  const float* alibi = nullptr;
  std::vector<float> ssmax_f32;  // [H] per-head s (ssmax_scales), f32 copies
  // The same three read exactly (the float64 path, attention_f64.cc):
  // sinks [H] (empty: none), alibi [B * H] (empty: none), ssmax_scales [H].
  std::vector<double> sinks_f64, alibi_f64, ssmax_f64;
  // SSMax's s of head h: ssmax_scales[h] when given, else ssmax_s.
  float ssmax_at(int64_t h) const { return ssmax_f32.empty() ? o.ssmax_s : ssmax_f32[h]; }
  AttentionNormalizer norm = AttentionNormalizer::kSoftmax;
  AttentionOptions o;
  int threads = 1;
  // KV cache forms (AttentionOptions::cache_seqlens / block_table). Lk is
  // the cache's capacity (Lmax, or pages per sequence x page size).
  std::vector<int64_t> seqlens;  // [B] keys of each sequence; empty: Lk for all
  bool paged = false;            // k / v are [num_pages, Hkv, page_size, D]
  int64_t page_size = 0;
  int64_t max_pages = 0;         // block_table columns
  std::vector<int64_t> pages;    // [B * max_pages] page of each (sequence, page slot)
  // Gate (AttentionOptions::gate) broadcast to [B, H, Lq, Dv].
  bool has_gate = false;
  DType gate_dtype = DType::kF32;
  const char* gate_data = nullptr;
  int64_t gs[4] = {0, 0, 0, 0};
  // The gate's row (b, h, i) as Dv f32 values (broadcast and widened).
  void gate_row(int64_t b, int64_t h, int64_t i, float* buf) const {
    const int64_t off = b * gs[0] + h * gs[1] + i * gs[2];
    gather_row_f32(gate_data + off * dtype_size(gate_dtype), gate_dtype, gs[3], Dv, buf);
  }

  // Null stays null: a view without elements (Lk = 0, D = 0...) may have
  // null data, and no address may be formed from it (UB).
  static char* mat_base(const TensorView& t, int64_t b, int64_t h) {
    if (t.data == nullptr) return nullptr;
    return static_cast<char*>(t.data) + (b * t.strides[0] + h * t.strides[1]) * dtype_size(t.dtype);
  }
  // Query rows [i0, i0 + bq) of head (b, h); keys / values [0, n) of kv head
  // (b, hk): direct views when SGEMM can read them, else gathered into buf.
  Mat q_rows(int64_t b, int64_t h, int64_t i0, int64_t bq, float* buf) const {
    return matrix(mat_base(q, b, h), q.dtype, q.strides[2], q.strides[3], i0, bq, D, buf);
  }
  // Keys of sequence b (cache_seqlens[b], else Lk) and the cache capacity.
  int64_t keys(int64_t b) const { return seqlens.empty() ? Lk : seqlens[b]; }
  int64_t key_capacity() const { return Lk; }
  // Position of query row i of sequence b among its keys: i (SDPA's
  // top-left alignment) without cache_seqlens; keys(b) - Lq + i with them
  // (the new tokens are the last Lq keys: bottom-right alignment, as
  // flash_attn_with_kvcache). is_causal shows keys j <= position; ALiBi
  // uses |position - j|.
  int64_t query_position(int64_t b, int64_t i) const {
    return seqlens.empty() ? i : seqlens[b] - Lq + i;
  }
  // Pointers rows[0 .. n) to rows [j0, j0 + n) of k (or v: cols = D or Dv)
  // of kv head hk of sequence b: into the cache (or its pages) when
  // rows_in_place(t, cols), else to their f32 copies gathered into buf
  // ([n, cols]; buf may be null when the rows are in place).
  static bool rows_in_place(const TensorView& t, int64_t cols) {
    return t.dtype == DType::kF32 && (t.strides[3] == 1 || cols <= 1);
  }
  void cache_rows(const TensorView& t, int64_t b, int64_t hk, int64_t j0, int64_t n, int64_t cols,
                  float* buf, const float** rows) const {
    const bool direct = rows_in_place(t, cols);
    if (direct && !paged && cols > 0 && t.data != nullptr) {
      // The common case (a contiguous cache of f32 rows): one base, a stride
      // (this runs once per key block of the decode loop).
      const float* first = reinterpret_cast<const float*>(mat_base(t, b, hk)) + j0 * t.strides[2];
      for (int64_t j = 0; j < n; ++j) rows[j] = first + j * t.strides[2];
      return;
    }
    const int64_t size = dtype_size(t.dtype), need = std::max<int64_t>(cols, 1);
    for (int64_t j = j0; j < j0 + n; ++j) {
      const int64_t slot = paged ? pages[b * max_pages + j / page_size] : b;
      const int64_t row = paged ? j % page_size : j;
      const char* base = mat_base(t, slot, hk);
      float* copy = buf == nullptr ? nullptr : buf + (j - j0) * need;
      if (base == nullptr || cols <= 0) {
        rows[j - j0] = copy;  // nothing to read (D = 0)
      } else if (direct) {
        rows[j - j0] = reinterpret_cast<const float*>(base) + row * t.strides[2];
      } else {
        gather_row_f32(base + row * t.strides[2] * size, t.dtype, t.strides[3], cols, copy);
        rows[j - j0] = copy;
      }
    }
  }
  Mat k_rows(int64_t b, int64_t hk, int64_t n, float* buf) const {
    return matrix(mat_base(k, b, hk), k.dtype, k.strides[2], k.strides[3], 0, n, D, buf);
  }
  Mat v_rows(int64_t b, int64_t hk, int64_t n, float* buf) const {
    return matrix(mat_base(v, b, hk), v.dtype, v.strides[2], v.strides[3], 0, n, Dv, buf);
  }
  float sink(int64_t h) const { return sinks[h]; }
  float slope(int64_t b, int64_t h) const { return alibi == nullptr ? 0.0f : alibi[b * H + h]; }
  // Logit parameters of row i for keys [j0, j0 + n); may gather the mask
  // row into addbuf / keepbuf.
  kernels::AttentionLogits logits(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                                  float* addbuf, uint8_t* keepbuf) const {
    return logits_at(b, h, i, i, j0, n, addbuf, keepbuf);
  }
  // The same for query row i at position pos (query_position): the mask is
  // indexed by row i, the causal limit and ALiBi use pos.
  kernels::AttentionLogits logits_at(int64_t b, int64_t h, int64_t i, int64_t pos, int64_t j0,
                                     int64_t n, float* addbuf, uint8_t* keepbuf) const {
    kernels::AttentionLogits p;
    p.scale = scale;
    p.softcap = cap;
    p.alibi_slope = slope(b, h);
    p.alibi_i_minus_j0 = static_cast<float>(pos - j0);
    if (o.is_causal) p.limit = std::max<int64_t>(pos + 1 - j0, 0);
    if (has_mask) {
      const int64_t off = b * ms[0] + h * ms[1] + i * ms[2] + j0 * ms[3];
      if (mask_bool) {
        p.keep = contiguous(reinterpret_cast<const uint8_t*>(mask_data) + off, n, ms[3], keepbuf);
      } else if (mask_dtype == DType::kF32) {
        p.add = contiguous(reinterpret_cast<const float*>(mask_data) + off, n, ms[3], addbuf);
      } else {
        gather_row_f32(mask_data + off * dtype_size(mask_dtype), mask_dtype, ms[3], n, addbuf);
        p.add = addbuf;
      }
    }
    return p;
  }
  // Keys visible to query block [i0, i0 + bq) of sequence b (the causal
  // limit of its last row, at most keys(b)).
  int64_t key_end(int64_t b, int64_t i0, int64_t bq) const {
    if (!o.is_causal) return keys(b);
    return std::clamp<int64_t>(query_position(b, i0 + bq - 1) + 1, 0, keys(b));
  }
  int64_t row_block() const {
    return std::clamp<int64_t>(kRowBlockFloats / std::max<int64_t>(Lk + 1, 1), 1, kBlockQ);
  }
};

// Hands out consecutive pieces of one task's scratch buffer; callers size
// the buffer as the sum of the pieces they take, in the same order.
class Carve {
 public:
  explicit Carve(float* base) : p_(base) {}
  float* take(int64_t floats) {
    float* r = p_;
    p_ += floats;
    return r;
  }
  uint8_t* take_bytes_rest() { return reinterpret_cast<uint8_t*>(p_); }

 private:
  float* p_;
};

SoftmaxOptions row_options(const Setup& s);

// P = normaliser(T) for rows of T ([rows, n], ld = n, contiguous), in place,
// of head h. keys: the sequence's key count (keys(b)), the n of sigmoid's
// default per-sequence bias. T = float (the row ops' f32 kernels) or double
// (their float64 paths; ssmax_scales then exact).
template <typename T>
void normalize_rows(const Setup& s, int64_t h, T* t, int64_t rows, int64_t n, int64_t keys);

// dT = VJP of the normaliser (head h) at logits T (output P) with upstream dP.
template <typename T>
void normalize_backward_rows(const Setup& s, int64_t h, const T* t, const T* p, const T* dp,
                             T* dt, int64_t rows, int64_t n);

// One row's dL/ds of SSMax (y = softmax(s ln(n) t) over the n visible
// logits): ln(n) sum_j t_j g_j, g = y (dy - <dy, y>) the softmax VJP at the
// scaled logits, in float64 over the visible entries (t = -inf: masked, not
// a term); NaN for a NaN row, 0 for a row without a visible key.
template <typename T>
double ssmax_row_grad(const T* t, const T* y, const T* dy, int64_t n, bool nan_row) {
  if (nan_row) return std::numeric_limits<double>::quiet_NaN();
  double dot = 0;
  int64_t visible = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -std::numeric_limits<T>::infinity()) continue;
    ++visible;
    dot += static_cast<double>(y[j]) * static_cast<double>(dy[j]);
  }
  if (visible == 0) return 0.0;
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -std::numeric_limits<T>::infinity()) continue;
    sum += static_cast<double>(t[j]) * static_cast<double>(y[j]) *
           (static_cast<double>(dy[j]) - dot);
  }
  return std::log(static_cast<double>(visible)) * sum;
}

// nan_rows[r] = row r of P ([bq, w], ld = w) holds a NaN (a NaN / +inf
// logit, or an empty row with kNan: the row's gradient is NaN); returns
// whether any row does.
template <typename T>
bool find_nan_rows(const T* P, int64_t bq, int64_t w, bool* nan_rows) {
  bool any = false;
  for (int64_t r = 0; r < bq; ++r) {
    bool nan = false;
    for (int64_t j = 0; j < w && !nan; ++j) nan = std::isnan(P[r * w + j]);
    nan_rows[r] = nan;
    any = any || nan;
  }
  return any;
}

// out (rank <= n, broadcast right-aligned against full_shape[0 .. n)) =
// the sum of `full` (dense, row-major over full_shape) over the dims out
// broadcasts over, in float64, in row-major order of full; stored through
// out's strides, rounded to f32 first (the f32 path's contract) or, with
// exact, once from the float64 sum to out's dtype (the float64 path).
template <typename T>
void store_reduced(const std::vector<T>& full, const int64_t* full_shape, int n,
                   const TensorView& out, bool exact = false);

// Runs the tasks; row ops called inside may only fail on allocation.
// with_blas: the tasks call SGEMM / DGEMM (the float64 path),
// which must then run on each task's own thread (BlasOnCallingThread; not
// free: it changes OpenBLAS's thread count and back, so the drivers that
// use only smax's own products skip it).
template <typename Fn>
void run_tasks(const Setup& s, int64_t tasks, int64_t scratch_floats, Fn&& fn,
               bool with_blas = false) {
  if (tasks <= 0) return;
  const int buffers = static_cast<int>(std::min<int64_t>(tasks, std::max(s.threads, 1)));
  ScratchPool pool(buffers, std::max<int64_t>(scratch_floats, 1));
  std::optional<BlasOnCallingThread> one_pool;  // each task's GEMMs run on its own thread
  if (with_blas) one_pool.emplace();
  std::atomic<bool> failed{false};
  detail::run_parallel(tasks, s.threads, [&](int64_t task) {
    ScratchPool::Lease lease(pool);
    try {
      fn(task, lease.data());
    } catch (...) {
      failed = true;
    }
  });
  if (failed) {
    throw Error(Status::kOutOfMemory,
                std::string(s.op) + ": a row operation failed (out of memory); outputs are "
                                    "partially written");
  }
}

// The end of a softmax row, shared by the forward drivers: o (Dv floats,
// scratch: scaled in place) holds sum_j e^(t_j - M) v_j and dd = sum_j
// e^(t_j - M) over the row's visible keys (M = -inf, dd = 0: none); nan: a
// NaN / +inf logit was seen; no_keys: the sequence has no key at all.
// Applies the sink, the empty_row / NaN policies and stores out (and lse).
void finish_row(const Setup& s, const TensorView& out, int64_t b, int64_t h, int64_t i, float* o,
                double dd, float M, bool nan, bool no_keys);

// The drivers (attention_forward.cc, attention_decode.cc, attention_backward.cc).
void forward_softmax(const Setup& s, const TensorView& out);
void forward_decode(const Setup& s, const TensorView& out);
void forward_rows(const Setup& s, const TensorView& out);
// out: the forward's output (read by the softmax backward from options.lse,
// attention_backward_lse.cc).
void backward(const Setup& s, const TensorView& out, const TensorView& dout, const TensorView& dq,
              const TensorView& dk, const TensorView& dv);
// The float64 path (attention_f64.cc): forward and backward when the
// inputs are f64 (the dispatch in attention.cc).
void forward_f64(const Setup& s, const TensorView& out);
void backward_f64(const Setup& s, const TensorView& dout, const TensorView& dq,
                  const TensorView& dk, const TensorView& dv);
// dgate = sum over the gate's broadcast dims of dout * a * s (1 - s), s =
// sigmoid(gate), a = options.ungated_out (attention_backward.cc); _f64: in
// double, rounded once (the float64 path).
void gate_backward(const Setup& s, const TensorView& dout, const TensorView& dgate);
void gate_backward_f64(const Setup& s, const TensorView& dout, const TensorView& dgate);

}  // namespace smax::detail::attn

// src/ops/attention.cc: fused attention forward / backward
// (include/smax/attention.h).
//
// Forward: tasks over (batch, head, query block), a fixed grid. Scores come
// from OpenBLAS SGEMM on [block_q, D] x [D, block_k]; the logit transform and
// the online softmax step are Highway kernels (kernels/attention.cc). Softmax
// keeps the (m, d, o) state of each query row over key blocks of 128; other
// normalisers compute the full key row of a query block and call the
// library's row op (softpick, sigmoid_normalizer, ssmax, stablemax,
// softplus_normalizer) on it with threads = 1, so masks, NaN and empty rows
// behave exactly as in those ops.
// Backward: tasks over (batch, kv head); each loops over its G query heads
// and their query blocks in a fixed order, recomputes P for the full key row,
// and accumulates dk / dv in task-local buffers, so the sums never depend on
// the thread count. Row VJPs are the library's backward ops.
#include "smax/attention.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "kernels/attention.h"
#include "ops/execution.h"
#include "ops/internal.h"
#include "ops/validate.h"
#include "smax/error.h"
#include "smax/reweight.h"
#include "smax/rescaled.h"
#include "smax/runtime.h"
#include "smax/softmax.h"

namespace smax {
namespace {

using detail::ScratchPool;

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInff = -std::numeric_limits<float>::infinity();
constexpr int64_t kBlockQ = 64;    // query rows per task
constexpr int64_t kBlockK = 512;   // keys per online step (softmax forward)
constexpr int64_t kRowBlockFloats = int64_t{1} << 18;  // [block_q, Lk] scratch target

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw Error(Status::kInvalidArgument, std::string(op) + ": " + message);
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

// A matrix operand for SGEMM: rows with leading dimension ld, unit column stride.
struct Mat {
  const float* p = nullptr;
  int64_t ld = 1;
};

// Rows [r0, r0 + rows) x cols of a 2-D strided slice (base, row stride rs,
// column stride cs): direct when the columns are contiguous and ld fits
// SGEMM, else gathered into buf (contiguous, ld = max(cols, 1)).
Mat matrix(const float* base, int64_t rs, int64_t cs, int64_t r0, int64_t rows, int64_t cols,
           float* buf) {
  const int64_t need = std::max<int64_t>(cols, 1);
  if ((cs == 1 || cols <= 1) && rs >= need && rs <= INT_MAX) return Mat{base + r0 * rs, rs};
  if (rows == 1 && (cs == 1 || cols <= 1)) return Mat{base + r0 * rs, need};
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = base + (r0 + i) * rs;
    for (int64_t c = 0; c < cols; ++c) buf[i * need + c] = s[c * cs];
  }
  return Mat{buf, need};
}

// C[M x N] (ldc) = alpha op(A) op(B) + beta C.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (beta == 0.0f) {
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

// True when the rows x cols matrix M (leading dimension ld) is all finite.
bool all_finite(const Mat& M, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* p = M.p + i * M.ld;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(p[c])) return false;
    }
  }
  return true;
}

// C[M x N] (ldc) = alpha A B + beta C (A: M x K, lda; B: K x N, ldb), or with
// a_t: A^T where A is stored K x M. Terms whose weight alpha * a is exactly 0
// are skipped, so a non-finite B entry under a masked score adds 0, not
// 0 * inf = NaN, while a NaN weight stays NaN even with alpha = 0 (SGEMM
// skips the product when alpha = 0). The path for non-finite inputs and
// alpha = 0 (SGEMM otherwise); sums in float in a fixed order.
void gemm_skip_zero(bool a_t, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int64_t n = 0; n < N; ++n) c[n] = beta == 0.0f ? 0.0f : beta * c[n];
    for (int64_t k = 0; k < K; ++k) {
      const float a = a_t ? A[k * lda + i] : A[i * lda + k];
      const float w = alpha * a;
      if (w == 0.0f) continue;
      const float* b = B + k * ldb;
      for (int64_t n = 0; n < N; ++n) c[n] += w * b[n];
    }
  }
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
  const char* mask_data = nullptr;
  int64_t ms[4] = {0, 0, 0, 0};
  // sinks broadcast to [H]; alibi to [B, H].
  const float* sinks = nullptr;
  int64_t sink_stride = 0;
  const float* alibi = nullptr;
  int64_t as[2] = {0, 0};
  AttentionNormalizer norm = AttentionNormalizer::kSoftmax;
  AttentionOptions o;
  int threads = 1;

  float* mat_base(const TensorView& t, int64_t b, int64_t h) const {
    return static_cast<float*>(t.data) + b * t.strides[0] + h * t.strides[1];
  }
  float sink(int64_t h) const { return sinks[h * sink_stride]; }
  float slope(int64_t b, int64_t h) const {
    return alibi == nullptr ? 0.0f : alibi[b * as[0] + h * as[1]];
  }
  // Logit parameters of row i for keys [j0, j0 + n); may gather the mask
  // row into addbuf / keepbuf.
  kernels::AttentionLogits logits(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                                  float* addbuf, uint8_t* keepbuf) const {
    kernels::AttentionLogits p;
    p.scale = scale;
    p.softcap = cap;
    p.alibi_slope = slope(b, h);
    p.alibi_i_minus_j0 = static_cast<float>(i - j0);
    if (o.is_causal) p.limit = std::max<int64_t>(i + 1 - j0, 0);
    if (has_mask) {
      const int64_t off = b * ms[0] + h * ms[1] + i * ms[2] + j0 * ms[3];
      if (mask_bool) {
        const uint8_t* m = reinterpret_cast<const uint8_t*>(mask_data) + off;
        if (ms[3] == 1) {
          p.keep = m;
        } else {
          for (int64_t j = 0; j < n; ++j) keepbuf[j] = m[j * ms[3]];
          p.keep = keepbuf;
        }
      } else {
        const float* m = reinterpret_cast<const float*>(mask_data) + off;
        if (ms[3] == 1) {
          p.add = m;
        } else {
          for (int64_t j = 0; j < n; ++j) addbuf[j] = m[j * ms[3]];
          p.add = addbuf;
        }
      }
    }
    return p;
  }
  // Keys visible to query block [i0, i0 + bq).
  int64_t key_end(int64_t i0, int64_t bq) const {
    return o.is_causal ? std::min(Lk, i0 + bq) : Lk;
  }
  int64_t row_block() const {
    return std::clamp<int64_t>(kRowBlockFloats / std::max<int64_t>(Lk + 1, 1), 1, kBlockQ);
  }
};

void check_rank4(const TensorView& t, const char* op, const char* name) {
  detail::check_view(t, op, name, DType::kF32);
  if (t.rank != 4) fail(op, std::string(name) + " must be 4-D [B, H, L, D], got " + t.describe());
}

TensorView shape_view(std::initializer_list<int64_t> shape) {
  TensorView t;
  t.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t x : shape) t.shape[d++] = x;
  return t;
}

Setup prepare(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
              const TensorView& out, const AttentionOptions& o) {
  Setup s;
  s.op = op;
  s.o = o;
  check_rank4(q, op, "q");
  check_rank4(k, op, "k");
  check_rank4(v, op, "v");
  check_rank4(out, op, "out");
  s.B = q.shape[0];
  s.H = q.shape[1];
  s.Lq = q.shape[2];
  s.D = q.shape[3];
  s.Hkv = k.shape[1];
  s.Lk = k.shape[2];
  s.Dv = v.shape[3];
  if (k.shape[0] != s.B || v.shape[0] != s.B) {
    fail(op, "batch sizes differ: q " + q.describe() + ", k " + k.describe() + ", v " +
                 v.describe());
  }
  if (k.shape[3] != s.D) fail(op, "k head dim must equal q's (" + std::to_string(s.D) + "), got " + k.describe());
  if (v.shape[1] != s.Hkv || v.shape[2] != s.Lk) {
    fail(op, "v must be [B, Hkv, Lk, Dv] with k's Hkv and Lk, got k " + k.describe() +
                 ", v " + v.describe());
  }
  if (s.Hkv == 0 ? s.H != 0 : s.H % s.Hkv != 0) {
    fail(op, "q heads (" + std::to_string(s.H) + ") must be a multiple of k/v heads (" +
                 std::to_string(s.Hkv) + ")");
  }
  s.G = s.Hkv > 0 ? s.H / s.Hkv : 1;
  if (out.shape[0] != s.B || out.shape[1] != s.H || out.shape[2] != s.Lq ||
      out.shape[3] != s.Dv) {
    fail(op, "out must be [B, H, Lq, Dv] = [" + std::to_string(s.B) + ", " +
                 std::to_string(s.H) + ", " + std::to_string(s.Lq) + ", " +
                 std::to_string(s.Dv) + "], got " + out.describe());
  }
  if (s.Lk >= (int64_t{1} << 24) || s.Lq >= (int64_t{1} << 24) || s.D > INT_MAX ||
      s.Dv > INT_MAX) {
    fail(op, "sequence lengths must be < 2^24 and head dims < 2^31, got q " + q.describe() +
                 ", k " + k.describe());
  }
  s.q = q;
  s.k = k;
  s.v = v;
  // Options.
  if (std::isnan(o.scale)) {
    s.scale = s.D > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D))) : 1.0f;
  } else if (!std::isfinite(o.scale)) {
    fail(op, "scale must be finite (NaN = 1/sqrt(D)), got " + num(o.scale));
  } else {
    s.scale = o.scale;
  }
  if (!(o.softcap >= 0.0f) || !std::isfinite(o.softcap)) {
    fail(op, "softcap must be finite and >= 0 (0 = off), got " + num(o.softcap));
  }
  s.cap = o.softcap;
  const int ni = static_cast<int>(o.normalizer);
  if (ni < 0 || ni > static_cast<int>(AttentionNormalizer::kSoftplus)) {
    fail(op, "normalizer has an unknown value " + std::to_string(ni));
  }
  s.norm = o.normalizer;
  if (o.empty_row != EmptyRow::kZero && o.empty_row != EmptyRow::kNan) {
    fail(op, "empty_row has an unknown value " + std::to_string(static_cast<int>(o.empty_row)));
  }
  if (o.threads < 0) fail(op, "threads must be >= 0 (0 = default), got " + std::to_string(o.threads));
  s.threads = o.threads > 0 ? o.threads : max_threads();
  const bool softmax = s.norm == AttentionNormalizer::kSoftmax;
  if (!std::isnan(o.sigmoid_bias) && !std::isfinite(o.sigmoid_bias)) {
    fail(op, "sigmoid_bias must be finite (NaN = -ln n), got " + num(o.sigmoid_bias));
  }
  if (!std::isfinite(o.softpick_eps) || o.softpick_eps < 0.0f ||
      (o.softpick_eps > 0.0f && o.softpick_eps < FLT_MIN)) {
    fail(op, "softpick_eps must be 0 or finite and >= FLT_MIN, got " + num(o.softpick_eps));
  }
  if (!std::isfinite(o.ssmax_s)) fail(op, "ssmax_s must be finite, got " + num(o.ssmax_s));
  if (s.norm == AttentionNormalizer::kSoftplus && s.D < 2) {
    fail(op, "the softplus normalizer needs head dim D >= 2 (lambda = ln N / ln D), got D = " +
                 std::to_string(s.D));
  }
  const TensorView scores = shape_view({s.B, s.H, s.Lq, s.Lk});
  if (o.attn_mask) {
    const TensorView& m = *o.attn_mask;
    if (m.dtype != DType::kF32 && m.dtype != DType::kBool) {
      fail(op, "attn_mask must be bool or f32, got " + m.describe());
    }
    detail::check_view(m, op, "attn_mask", m.dtype);
    const TensorView m1 = detail::as_rank1_if_scalar(m);
    detail::broadcast_strides(m1, "attn_mask", scores, op, s.ms);
    s.has_mask = true;
    s.mask_bool = m.dtype == DType::kBool;
    s.mask_data = static_cast<const char*>(m.data);
  }
  if (o.sinks) {
    if (!softmax) fail(op, "sinks are supported with the softmax normalizer only");
    detail::check_view(*o.sinks, op, "sinks", DType::kF32);
    if (o.sinks->rank != 1 || o.sinks->shape[0] != s.H) {
      fail(op, "sinks must be [H] = [" + std::to_string(s.H) + "], got " + o.sinks->describe());
    }
    s.sinks = static_cast<const float*>(o.sinks->data);
    s.sink_stride = o.sinks->strides[0];
  }
  if (o.alibi_slopes) {
    detail::check_view(*o.alibi_slopes, op, "alibi_slopes", DType::kF32);
    if (o.alibi_slopes->rank < 1 || o.alibi_slopes->rank > 2 ||
        o.alibi_slopes->shape[o.alibi_slopes->rank - 1] != s.H) {
      fail(op, "alibi_slopes must be [H] or [B, H] with H = " + std::to_string(s.H) + ", got " +
                   o.alibi_slopes->describe());
    }
    detail::broadcast_strides(*o.alibi_slopes, "alibi_slopes", shape_view({s.B, s.H}), op, s.as);
    s.alibi = static_cast<const float*>(o.alibi_slopes->data);
  }
  if (o.lse) {
    if (!softmax) fail(op, "lse is available with the softmax normalizer only");
    detail::check_view(*o.lse, op, "lse", DType::kF32);
    if (o.lse->rank != 3 || o.lse->shape[0] != s.B || o.lse->shape[1] != s.H ||
        o.lse->shape[2] != s.Lq) {
      fail(op, "lse must be [B, H, Lq], got " + o.lse->describe());
    }
  }
  return s;
}

std::vector<std::pair<const TensorView*, const char*>> input_list(const Setup& s) {
  std::vector<std::pair<const TensorView*, const char*>> v = {
      {&s.q, "q"}, {&s.k, "k"}, {&s.v, "v"}};
  if (s.o.attn_mask) v.push_back({&*s.o.attn_mask, "attn_mask"});
  if (s.o.sinks) v.push_back({&*s.o.sinks, "sinks"});
  if (s.o.alibi_slopes) v.push_back({&*s.o.alibi_slopes, "alibi_slopes"});
  return v;
}

void check_out_vs(const Setup& s, const TensorView& out, const char* name,
                  const std::vector<std::pair<const TensorView*, const char*>>& inputs) {
  detail::check_no_self_overlap(out, name, s.op);
  for (const auto& [in, in_name] : inputs) {
    detail::check_disjoint_or_same(out, name, *in, in_name, s.op, false);
  }
}

SoftmaxOptions row_options(const Setup& s) {
  SoftmaxOptions so;
  so.threads = 1;
  so.empty_row = s.o.empty_row;
  return so;
}

// P = normaliser(T) for rows of T ([rows, n], ld = n, contiguous), in place.
void normalize_rows(const Setup& s, float* t, int64_t rows, int64_t n) {
  const TensorView tv = make_view(t, {rows, n});
  const SoftmaxOptions so = row_options(s);
  switch (s.norm) {
    case AttentionNormalizer::kSoftmax:
      softmax(tv, tv, so);
      break;
    case AttentionNormalizer::kSigmoid: {
      SigmoidNormalizerOptions sig;
      if (!std::isnan(s.o.sigmoid_bias)) sig.bias = s.o.sigmoid_bias;
      sig.count_visible = true;
      sigmoid_normalizer(tv, tv, sig, so);
      break;
    }
    case AttentionNormalizer::kSoftpick: {
      SoftpickOptions sp;
      sp.eps = s.o.softpick_eps;
      softpick(tv, tv, sp, so);
      break;
    }
    case AttentionNormalizer::kSsmax: {
      SsmaxOptions ss;
      ss.s = s.o.ssmax_s;
      ssmax(tv, tv, ss, so);
      break;
    }
    case AttentionNormalizer::kStablemax:
      stablemax(tv, tv, so);
      break;
    case AttentionNormalizer::kSoftplus: {
      SoftplusNormalizerOptions sp;
      sp.head_dim = s.D;
      softplus_normalizer(tv, tv, sp, so);
      break;
    }
  }
}

// dT = VJP of the normaliser at logits T (output P) with upstream dP.
void normalize_backward_rows(const Setup& s, const float* t, const float* p, const float* dp,
                             float* dt, int64_t rows, int64_t n) {
  const TensorView tv = make_view(t, {rows, n});
  const TensorView pv = make_view(p, {rows, n});
  const TensorView gv = make_view(dp, {rows, n});
  const TensorView dv = make_view(dt, {rows, n});
  const SoftmaxOptions so = row_options(s);
  switch (s.norm) {
    case AttentionNormalizer::kSoftmax:
      softmax_backward(pv, gv, dv, so);
      break;
    case AttentionNormalizer::kSigmoid: {
      // Masked entries: y = 0 there, so dy y (1 - y) = 0.
      sigmoid_normalizer_backward(pv, gv, dv, so);
      break;
    }
    case AttentionNormalizer::kSoftpick: {
      SoftpickOptions sp;
      sp.eps = s.o.softpick_eps;
      softpick_backward(tv, gv, dv, sp, so);
      break;
    }
    case AttentionNormalizer::kSsmax: {
      SsmaxOptions ss;
      ss.s = s.o.ssmax_s;
      ssmax_backward(tv, pv, gv, dv, ss, so);
      break;
    }
    case AttentionNormalizer::kStablemax:
      stablemax_backward(tv, gv, dv, so);
      break;
    case AttentionNormalizer::kSoftplus: {
      SoftplusNormalizerOptions sp;
      sp.head_dim = s.D;
      softplus_normalizer_backward(tv, gv, dv, sp, so);
      break;
    }
  }
}

// Runs the tasks; row ops called inside may only fail on allocation.
template <typename Fn>
void run_tasks(const Setup& s, int64_t tasks, int64_t scratch_floats, Fn&& fn) {
  if (tasks <= 0) return;
  const int buffers = static_cast<int>(std::min<int64_t>(tasks, std::max(s.threads, 1)));
  ScratchPool pool(buffers, std::max<int64_t>(scratch_floats, 1));
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

// ---- forward ---------------------------------------------------------------------

void store_row(const TensorView& out, int64_t b, int64_t h, int64_t i, const float* o,
               int64_t n, double factor, float fill, bool use_fill) {
  float* p = static_cast<float*>(out.data) + b * out.strides[0] + h * out.strides[1] +
             i * out.strides[2];
  for (int64_t c = 0; c < n; ++c) {
    p[c * out.strides[3]] =
        use_fill ? fill : static_cast<float>(static_cast<double>(o[c]) * factor);
  }
}

void store_lse(const Setup& s, int64_t b, int64_t h, int64_t i, float value) {
  if (!s.o.lse) return;
  const TensorView& l = *s.o.lse;
  static_cast<float*>(l.data)[b * l.strides[0] + h * l.strides[1] + i * l.strides[2]] = value;
}

void forward_softmax(const Setup& s, const TensorView& out) {
  const int64_t nqb = (s.Lq + kBlockQ - 1) / kBlockQ;
  const int64_t bk_max = std::min<int64_t>(kBlockK, std::max<int64_t>(s.Lk, 1));
  const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
  const int64_t qf = kBlockQ * Dn, kf = s.Lk * Dn, vf = s.Lk * Dvn;
  const int64_t sf = kBlockQ * bk_max, of = kBlockQ * Dvn, mf = bk_max, keepf = bk_max / 4 + 1;
  const int64_t total = qf + kf + vf + sf + of + mf + keepf;
  const float empty = s.o.empty_row == EmptyRow::kNan ? kNaNf : 0.0f;
  const float empty_lse = s.o.empty_row == EmptyRow::kNan ? kNaNf : kNegInff;
  run_tasks(s, s.B * s.H * nqb, total, [&](int64_t task, float* buf) {
    const int64_t qb = task % nqb, bh = task / nqb, h = bh % s.H, b = bh / s.H;
    const int64_t hk = h / s.G;
    const int64_t i0 = qb * kBlockQ, bq = std::min(kBlockQ, s.Lq - i0);
    float* qbuf = buf;
    float* kbuf = qbuf + qf;
    float* vbuf = kbuf + kf;
    float* S = vbuf + vf;
    float* O = S + sf;
    float* addbuf = O + of;
    uint8_t* keepbuf = reinterpret_cast<uint8_t*>(addbuf + mf);
    const int64_t kend = s.key_end(i0, bq);
    const Mat Q = matrix(s.mat_base(s.q, b, h), s.q.strides[2], s.q.strides[3], i0, bq, s.D, qbuf);
    const Mat K = matrix(s.mat_base(s.k, b, hk), s.k.strides[2], s.k.strides[3], 0, kend, s.D, kbuf);
    const Mat V = matrix(s.mat_base(s.v, b, hk), s.v.strides[2], s.v.strides[3], 0, kend, s.Dv, vbuf);
    float m[kBlockQ];
    double d[kBlockQ];
    bool bad[kBlockQ];
    for (int64_t r = 0; r < bq; ++r) {
      m[r] = kNegInff;
      d[r] = 0.0;
      bad[r] = false;
    }
    std::fill(O, O + bq * Dvn, 0.0f);
    for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
      const int64_t bk = std::min(kBlockK, kend - j0);
      gemm(false, true, bq, bk, s.D, 1.0f, Q.p, Q.ld, K.p + j0 * K.ld, K.ld, 0.0f, S, bk);
      for (int64_t r = 0; r < bq; ++r) {
        float* t = S + r * bk;
        kernels::attention_logits_row(t, bk, s.logits(b, h, i0 + r, j0, bk, addbuf, keepbuf));
        const kernels::OnlineStep st = kernels::attention_online_step(t, bk, m[r]);
        bad[r] = bad[r] || st.bad;
        if (st.alpha != 1.0f) kernels::attention_scale_row(O + r * Dvn, s.Dv, st.alpha);
        d[r] = d[r] * static_cast<double>(st.alpha) + st.sum;
        m[r] = st.m;
      }
      gemm(false, false, bq, s.Dv, bk, 1.0f, S, bk, V.p + j0 * V.ld, V.ld, 1.0f, O, Dvn);
    }
    for (int64_t r = 0; r < bq; ++r) {
      const int64_t i = i0 + r;
      float* o = O + r * Dvn;
      double dd = d[r];
      float M = m[r];
      bool nan = bad[r];
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
      if (kend == 0 && s.sinks != nullptr) {
        // No key at all (Lk = 0): the output is the empty sum P[:, :0] V,
        // exactly 0 whatever the sink (SDPA with a sink column); the lse is
        // the sink's (NaN for a NaN sink, the empty policy for -inf).
        store_row(out, b, h, i, o, s.Dv, 0.0, 0.0f, true);
        store_lse(s, b, h, i,
                  nan ? kNaNf
                      : dd > 0.0 ? static_cast<float>(static_cast<double>(M) + std::log(dd))
                                 : empty_lse);
      } else if (nan) {
        store_row(out, b, h, i, o, s.Dv, 0.0, kNaNf, true);
        store_lse(s, b, h, i, kNaNf);
      } else if (!(dd > 0.0)) {
        store_row(out, b, h, i, o, s.Dv, 0.0, empty, true);
        store_lse(s, b, h, i, empty_lse);
      } else {
        store_row(out, b, h, i, o, s.Dv, 1.0 / dd, 0.0f, false);
        store_lse(s, b, h, i, static_cast<float>(static_cast<double>(M) + std::log(dd)));
      }
    }
  });
}

void forward_rows(const Setup& s, const TensorView& out) {
  const int64_t bqn = s.row_block();
  const int64_t nqb = (s.Lq + bqn - 1) / bqn;
  const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
  const int64_t Lkn = std::max<int64_t>(s.Lk, 1);
  const int64_t qf = bqn * Dn, kf = s.Lk * Dn, vf = s.Lk * Dvn, sf = bqn * Lkn, of = bqn * Dvn,
                mf = Lkn, keepf = Lkn / 4 + 1;
  const float empty = s.o.empty_row == EmptyRow::kNan ? kNaNf : 0.0f;
  run_tasks(s, s.B * s.H * nqb, qf + kf + vf + sf + of + mf + keepf,
            [&](int64_t task, float* buf) {
    const int64_t qb = task % nqb, bh = task / nqb, h = bh % s.H, b = bh / s.H;
    const int64_t hk = h / s.G;
    const int64_t i0 = qb * bqn, bq = std::min(bqn, s.Lq - i0);
    float* qbuf = buf;
    float* kbuf = qbuf + qf;
    float* vbuf = kbuf + kf;
    float* S = vbuf + vf;
    float* O = S + sf;
    float* addbuf = O + of;
    uint8_t* keepbuf = reinterpret_cast<uint8_t*>(addbuf + mf);
    const int64_t kend = s.key_end(i0, bq);
    if (kend == 0) {
      for (int64_t r = 0; r < bq; ++r) store_row(out, b, h, i0 + r, O, s.Dv, 0.0, empty, true);
      return;
    }
    const Mat Q = matrix(s.mat_base(s.q, b, h), s.q.strides[2], s.q.strides[3], i0, bq, s.D, qbuf);
    const Mat K = matrix(s.mat_base(s.k, b, hk), s.k.strides[2], s.k.strides[3], 0, kend, s.D, kbuf);
    const Mat V = matrix(s.mat_base(s.v, b, hk), s.v.strides[2], s.v.strides[3], 0, kend, s.Dv, vbuf);
    gemm(false, true, bq, kend, s.D, 1.0f, Q.p, Q.ld, K.p, K.ld, 0.0f, S, kend);
    for (int64_t r = 0; r < bq; ++r) {
      kernels::attention_logits_row(S + r * kend, kend,
                                    s.logits(b, h, i0 + r, 0, kend, addbuf, keepbuf));
    }
    normalize_rows(s, S, bq, kend);
    gemm(false, false, bq, s.Dv, kend, 1.0f, S, kend, V.p, V.ld, 0.0f, O, Dvn);
    for (int64_t r = 0; r < bq; ++r) store_row(out, b, h, i0 + r, O + r * Dvn, s.Dv, 1.0, 0.0f, false);
  });
}

// ---- backward --------------------------------------------------------------------

void backward(const Setup& s, const TensorView& dout, const TensorView& dq, const TensorView& dk,
              const TensorView& dv) {
  const int64_t bqn = s.row_block();
  const int64_t nqb = (s.Lq + bqn - 1) / bqn;
  const bool sink = s.sinks != nullptr;
  const int64_t Dn = std::max<int64_t>(s.D, 1), Dvn = std::max<int64_t>(s.Dv, 1);
  const int64_t Lkn = std::max<int64_t>(s.Lk, 1);
  const int64_t wmax = Lkn + 1;
  const int64_t qf = bqn * Dn, kf = s.Lk * Dn, vf = s.Lk * Dvn, of = bqn * Dvn;
  const int64_t tf = bqn * wmax;
  const int64_t dqf = bqn * Dn, dkf = s.Lk * Dn, dvf = s.Lk * Dvn, mf = Lkn, keepf = Lkn / 4 + 1;
  const int64_t total = qf + kf + vf + of + 5 * tf + dqf + dkf + dvf + mf + keepf;
  const float empty_grad = s.o.empty_row == EmptyRow::kNan && !sink ? kNaNf : 0.0f;
  run_tasks(s, s.B * s.Hkv, total, [&](int64_t task, float* buf) {
    const int64_t hk = task % s.Hkv, b = task / s.Hkv;
    float* qbuf = buf;
    float* kbuf = qbuf + qf;
    float* vbuf = kbuf + kf;
    float* obuf = vbuf + vf;
    float* T = obuf + of;
    float* P = T + tf;
    float* dP = P + tf;
    float* dT = dP + tf;
    float* Sraw = dT + tf;
    float* dQ = Sraw + tf;
    float* dK = dQ + dqf;
    float* dV = dK + dkf;
    float* addbuf = dV + dvf;
    uint8_t* keepbuf = reinterpret_cast<uint8_t*>(addbuf + mf);
    std::fill(dK, dK + s.Lk * Dn, 0.0f);
    std::fill(dV, dV + s.Lk * Dvn, 0.0f);
    const Mat K = matrix(s.mat_base(s.k, b, hk), s.k.strides[2], s.k.strides[3], 0, s.Lk, s.D, kbuf);
    const Mat V = matrix(s.mat_base(s.v, b, hk), s.v.strides[2], s.v.strides[3], 0, s.Lk, s.Dv, vbuf);
    // Non-finite k (q) entries under masked scores (dT = 0) must add 0 to dq
    // (dk), as in the forward, where their scores are masked.
    // scale = 0: SGEMM would not propagate NaN gradients (alpha = 0 skips A B).
    const bool k_finite = s.scale != 0.0f && all_finite(K, s.Lk, s.D);
    for (int64_t g = 0; g < s.G; ++g) {
      const int64_t h = hk * s.G + g;
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * bqn, bq = std::min(bqn, s.Lq - i0);
        const int64_t kend = s.key_end(i0, bq);
        const int64_t w = kend + (sink ? 1 : 0);
        float* dqb = static_cast<float*>(dq.data) + b * dq.strides[0] + h * dq.strides[1];
        if (kend == 0) {
          for (int64_t r = 0; r < bq; ++r) {
            for (int64_t c = 0; c < s.D; ++c) dqb[(i0 + r) * dq.strides[2] + c * dq.strides[3]] = empty_grad;
          }
          continue;
        }
        const Mat Q = matrix(s.mat_base(s.q, b, h), s.q.strides[2], s.q.strides[3], i0, bq, s.D, qbuf);
        const Mat dO = matrix(static_cast<const float*>(dout.data) + b * dout.strides[0] + h * dout.strides[1],
                              dout.strides[2], dout.strides[3], i0, bq, s.Dv, obuf);
        gemm(false, true, bq, kend, s.D, 1.0f, Q.p, Q.ld, K.p, K.ld, 0.0f, T, w);
        if (s.cap > 0.0f) {
          for (int64_t r = 0; r < bq; ++r) std::memcpy(Sraw + r * kend, T + r * w, kend * sizeof(float));
        }
        for (int64_t r = 0; r < bq; ++r) {
          kernels::attention_logits_row(T + r * w, kend,
                                        s.logits(b, h, i0 + r, 0, kend, addbuf, keepbuf));
          if (sink) T[r * w + kend] = s.sink(h);
        }
        std::memcpy(P, T, bq * w * sizeof(float));
        normalize_rows(s, P, bq, w);
        // NaN rows (a NaN / +inf logit, or an empty row with kNan): NaN output.
        bool nan_rows[kBlockQ];
        bool any_nan_row = false;
        for (int64_t r = 0; r < bq; ++r) {
          bool nan = false;
          for (int64_t j = 0; j < w && !nan; ++j) nan = std::isnan(P[r * w + j]);
          nan_rows[r] = nan;
          any_nan_row = any_nan_row || nan;
        }
        if (any_nan_row && kend < s.Lk) {
          // A NaN row is NaN at every key, also at the causally skipped keys
          // [kend, Lk): its NaN reaches their dk / dv through P^T dO and
          // dS^T Q, as without causal.
          for (int64_t j = kend; j < s.Lk; ++j) {
            std::fill(dK + j * Dn, dK + j * Dn + s.D, kNaNf);
            std::fill(dV + j * Dvn, dV + j * Dvn + s.Dv, kNaNf);
          }
        }
        gemm(false, true, bq, kend, s.Dv, 1.0f, dO.p, dO.ld, V.p, V.ld, 0.0f, dP, w);
        if (sink) {
          for (int64_t r = 0; r < bq; ++r) dP[r * w + kend] = 0.0f;
        }
        normalize_backward_rows(s, T, P, dP, dT, bq, w);
        // A NaN row has NaN gradient at every key, masked ones included, for
        // every normaliser (ssmax_backward keeps 0 at masked entries; the
        // others propagate y = NaN): consistent NaN dk / dv.
        for (int64_t r = 0; r < bq && any_nan_row; ++r) {
          if (nan_rows[r]) std::fill(dT + r * w, dT + r * w + w, kNaNf);
        }
        if (s.cap > 0.0f) {
          for (int64_t r = 0; r < bq; ++r) {
            kernels::attention_softcap_grad_row(Sraw + r * kend, dT + r * w, kend, s.scale, s.cap);
          }
        }
        // dQ = scale dT K; dK += scale dT^T Q; dV += P^T dO.
        if (k_finite) {
          gemm(false, false, bq, s.D, kend, s.scale, dT, w, K.p, K.ld, 0.0f, dQ, Dn);
        } else {
          gemm_skip_zero(false, bq, s.D, kend, s.scale, dT, w, K.p, K.ld, 0.0f, dQ, Dn);
        }
        for (int64_t r = 0; r < bq; ++r) {
          for (int64_t c = 0; c < s.D; ++c) dqb[(i0 + r) * dq.strides[2] + c * dq.strides[3]] = dQ[r * Dn + c];
        }
        if (s.scale != 0.0f && all_finite(Q, bq, s.D)) {
          gemm(true, false, kend, s.D, bq, s.scale, dT, w, Q.p, Q.ld, 1.0f, dK, Dn);
        } else {
          gemm_skip_zero(true, kend, s.D, bq, s.scale, dT, w, Q.p, Q.ld, 1.0f, dK, Dn);
        }
        gemm(true, false, kend, s.Dv, bq, 1.0f, P, w, dO.p, dO.ld, 1.0f, dV, Dvn);
      }
    }
    float* dkb = static_cast<float*>(dk.data) + b * dk.strides[0] + hk * dk.strides[1];
    float* dvb = static_cast<float*>(dv.data) + b * dv.strides[0] + hk * dv.strides[1];
    for (int64_t j = 0; j < s.Lk; ++j) {
      for (int64_t c = 0; c < s.D; ++c) dkb[j * dk.strides[2] + c * dk.strides[3]] = dK[j * Dn + c];
      for (int64_t c = 0; c < s.Dv; ++c) dvb[j * dv.strides[2] + c * dv.strides[3]] = dV[j * Dvn + c];
    }
  });
}

}  // namespace

AttentionNormalizer parse_attention_normalizer(std::string_view name) {
  if (name == "softmax") return AttentionNormalizer::kSoftmax;
  if (name == "sigmoid") return AttentionNormalizer::kSigmoid;
  if (name == "softpick") return AttentionNormalizer::kSoftpick;
  if (name == "ssmax") return AttentionNormalizer::kSsmax;
  if (name == "stablemax") return AttentionNormalizer::kStablemax;
  if (name == "softplus") return AttentionNormalizer::kSoftplus;
  throw Error(Status::kInvalidArgument,
              "attention: normalizer must be one of softmax, sigmoid, softpick, ssmax, "
              "stablemax, softplus, got '" + std::string(name) + "'");
}

const char* attention_normalizer_name(AttentionNormalizer n) noexcept {
  switch (n) {
    case AttentionNormalizer::kSoftmax: return "softmax";
    case AttentionNormalizer::kSigmoid: return "sigmoid";
    case AttentionNormalizer::kSoftpick: return "softpick";
    case AttentionNormalizer::kSsmax: return "ssmax";
    case AttentionNormalizer::kStablemax: return "stablemax";
    case AttentionNormalizer::kSoftplus: return "softplus";
  }
  return "unknown";
}

void attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const AttentionOptions& options) {
  detail::ensure_runtime_initialized();
  const Setup s = prepare("attention", q, k, v, out, options);
  const auto inputs = input_list(s);
  check_out_vs(s, out, "out", inputs);
  if (options.lse) {
    check_out_vs(s, *options.lse, "lse", inputs);
    detail::check_disjoint_or_same(*options.lse, "lse", out, "out", s.op, false);
  }
  if (s.norm == AttentionNormalizer::kSoftmax) {
    forward_softmax(s, out);
  } else {
    forward_rows(s, out);
  }
}

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& dout, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv,
                        const AttentionOptions& options) {
  detail::ensure_runtime_initialized();
  const char* op = "attention_backward";
  const Setup s = prepare(op, q, k, v, out, options);
  check_rank4(dout, op, "dout");
  detail::check_same_shape(dout, "dout", out, "out", op);
  check_rank4(dq, op, "dq");
  detail::check_same_shape(dq, "dq", q, "q", op);
  check_rank4(dk, op, "dk");
  detail::check_same_shape(dk, "dk", k, "k", op);
  check_rank4(dv, op, "dv");
  detail::check_same_shape(dv, "dv", v, "v", op);
  auto inputs = input_list(s);
  inputs.push_back({&out, "out"});
  inputs.push_back({&dout, "dout"});
  check_out_vs(s, dq, "dq", inputs);
  check_out_vs(s, dk, "dk", inputs);
  check_out_vs(s, dv, "dv", inputs);
  detail::check_disjoint_or_same(dq, "dq", dk, "dk", op, false);
  detail::check_disjoint_or_same(dq, "dq", dv, "dv", op, false);
  detail::check_disjoint_or_same(dk, "dk", dv, "dv", op, false);
  if (s.Hkv == 0 || s.B == 0) return;
  backward(s, dout, dq, dk, dv);
}

}  // namespace smax

// src/ops/attention/attention.cc: the fused attention's public entry points
// (include/smax/attention.h): argument validation into a Setup, and the
// operand / row-op helpers the drivers share (attention_internal.h; the
// drivers are in attention_forward.cc and attention_backward.cc).
#include "smax/attention.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <type_traits>

#include "ops/attention/attention_internal.h"
#include "core/enum_names.h"
#include "core/errors.h"
#include "core/internal.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/reweight.h"
#include "smax/rescaled.h"
#include "smax/runtime.h"
#include "smax/softmax.h"

namespace smax {
namespace detail::attn {

// Rows [r0, r0 + rows) x cols of a 2-D strided slice (base, row stride rs,
// column stride cs): direct when the columns are contiguous and ld fits
// SGEMM, else gathered into buf (contiguous, ld = max(cols, 1)).
Mat matrix(const char* base_bytes, DType dtype, int64_t rs, int64_t cs, int64_t r0, int64_t rows,
           int64_t cols, float* buf) {
  const int64_t need = std::max<int64_t>(cols, 1);
  // An empty view (no elements: cols or rows 0) may have null data; no
  // address is formed from it (UB) and nothing is read.
  if (base_bytes == nullptr) return Mat{buf, need};
  if (dtype == DType::kF32) {
    const auto* base = reinterpret_cast<const float*>(base_bytes);
    if (rows <= 0 || cols <= 0) return Mat{base, need};
    if ((cs == 1 || cols <= 1) && rs >= need && rs <= INT_MAX) return Mat{base + r0 * rs, rs};
    if (rows == 1 && (cs == 1 || cols <= 1)) return Mat{base + r0 * rs, need};
  } else if (rows <= 0 || cols <= 0) {
    return Mat{buf, need};
  }
  const int64_t size = dtype_size(dtype);
  for (int64_t i = 0; i < rows; ++i) {
    gather_row_f32(base_bytes + (r0 + i) * rs * size, dtype, cs, cols, buf + i * need);
  }
  return Mat{buf, need};
}

// True when the rows x cols matrix M (leading dimension ld) is all finite.
bool all_finite(const Mat& M, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return true;
  for (int64_t i = 0; i < rows; ++i) {
    const float* p = M.p + i * M.ld;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(p[c])) return false;
    }
  }
  return true;
}

SoftmaxOptions row_options(const Setup& s) {
  SoftmaxOptions so;
  so.threads = 1;
  so.empty_row = s.o.empty_row;
  return so;
}

namespace {
// A contiguous [rows, n] view of f32 or f64 scratch (T = float or double).
template <typename T>
TensorView rows_view(const T* p, int64_t rows, int64_t n) {
  const int64_t shape[2] = {rows, n};
  return make_view(const_cast<T*>(p), std::is_same_v<T, double> ? DType::kF64 : DType::kF32, 2,
                   shape, nullptr);
}

// SSMax's parameters of head h: the float64 path passes a per-head s given
// in ssmax_scales exactly (an f64 [1, 1] s_rows; `exact` holds it).
template <typename T>
SsmaxOptions ssmax_options(const Setup& s, int64_t h, double* exact) {
  SsmaxOptions ss;
  ss.s = s.ssmax_at(h);
  if constexpr (std::is_same_v<T, double>) {
    if (!s.ssmax_f64.empty()) {
      static constexpr int64_t kOne[2] = {1, 1};
      *exact = s.ssmax_f64[static_cast<size_t>(h)];
      ss.s_rows = make_view(exact, DType::kF64, 2, kOne, nullptr);
    }
  }
  return ss;
}
}  // namespace

// P = normaliser(T) for rows of T ([rows, n], ld = n, contiguous), in place.
template <typename T>
void normalize_rows(const Setup& s, int64_t h, T* t, int64_t rows, int64_t n, int64_t keys) {
  const TensorView tv = rows_view(t, rows, n);
  const SoftmaxOptions so = row_options(s);
  switch (s.norm) {
    case AttentionNormalizer::kSoftmax:
      softmax(tv, tv, so);
      break;
    case AttentionNormalizer::kSigmoid: {
      SigmoidNormalizerOptions sig;
      if (!std::isnan(s.o.sigmoid_bias)) {
        sig.bias = s.o.sigmoid_bias;
      } else if (s.o.sigmoid_bias_mode == SigmoidBiasMode::kPerSequence) {
        // One b = fl(-ln Lk) for every row (n is the sequence's key count,
        // cache_seqlens[b] with a KV cache, not the row block's width n,
        // which the causal forward truncates). 0 keys: no row has a
        // visible key.
        sig.n_fixed = keys;
      } else {
        sig.count_visible = true;
      }
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
      double exact = 0;
      ssmax(tv, tv, ssmax_options<T>(s, h, &exact), so);
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
    case AttentionNormalizer::kPower:
      power_softmax(tv, tv, s.o.power_p, so);
      break;
  }
}

// dT = VJP of the normaliser at logits T (output P) with upstream dP.
template <typename T>
void normalize_backward_rows(const Setup& s, int64_t h, const T* t, const T* p, const T* dp,
                             T* dt, int64_t rows, int64_t n) {
  const TensorView tv = rows_view(t, rows, n);
  const TensorView pv = rows_view(p, rows, n);
  const TensorView gv = rows_view(dp, rows, n);
  const TensorView dv = rows_view(dt, rows, n);
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
      double exact = 0;
      ssmax_backward(tv, pv, gv, dv, ssmax_options<T>(s, h, &exact), so);
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
    case AttentionNormalizer::kPower:
      power_softmax_backward(tv, gv, dv, s.o.power_p, so);
      break;
  }
}

template void normalize_rows(const Setup&, int64_t, float*, int64_t, int64_t, int64_t);
template void normalize_rows(const Setup&, int64_t, double*, int64_t, int64_t, int64_t);
template void normalize_backward_rows(const Setup&, int64_t, const float*, const float*,
                                      const float*, float*, int64_t, int64_t);
template void normalize_backward_rows(const Setup&, int64_t, const double*, const double*,
                                      const double*, double*, int64_t, int64_t);

}  // namespace detail::attn

namespace {

using detail::attn::Setup;

using detail::fail;
using detail::num;

void check_rank4(const TensorView& t, const char* op, const char* name) {
  detail::check_float_view(t, op, name);
  if (t.rank != 4) fail(op, std::string(name) + " must be 4-D [B, H, L, D], got " + t.describe());
}

TensorView shape_view(std::initializer_list<int64_t> shape) {
  TensorView t;
  t.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t x : shape) t.shape[d++] = x;
  return t;
}

// Reads an i32 / i64 index view (rank `rank`, any strides) element by
// element; `at` is the element offset (in elements).
int64_t load_index(const TensorView& t, int64_t at) {
  const char* p = static_cast<const char*>(t.data) + at * dtype_size(t.dtype);
  if (t.dtype == DType::kI32) {
    int32_t x;
    std::memcpy(&x, p, sizeof(x));
    return x;
  }
  int64_t x;
  std::memcpy(&x, p, sizeof(x));
  return x;
}

void check_index_view(const TensorView& t, const char* op, const char* name) {
  if (t.dtype != DType::kI32 && t.dtype != DType::kI64) {
    fail(op, std::string(name) + " must be i32 or i64, got " + t.describe());
  }
  detail::check_view(t, op, name, t.dtype);
}

// The KV cache forms (AttentionOptions::cache_seqlens / block_table): fills
// s.seqlens, s.paged / page_size / max_pages / pages, and s.Lk (the
// capacity) for a paged cache. k / v shapes are already checked.
void read_kv_cache(Setup& s, const AttentionOptions& o) {
  const char* op = s.op;
  if (o.block_table) {
    const TensorView& bt = *o.block_table;
    check_index_view(bt, op, "block_table");
    if (bt.rank != 2 || bt.shape[0] != s.B) {
      fail(op, "block_table must be [B, max_pages] with B = " + std::to_string(s.B) + ", got " +
                   bt.describe());
    }
    s.paged = true;
    s.page_size = s.Lk;  // k is [num_pages, Hkv, page_size, D]
    s.max_pages = bt.shape[1];
    if (s.page_size == 0 && s.max_pages > 0) {
      fail(op, "k and v pages hold no key (page_size = 0), got k " + s.k.describe());
    }
    if (s.page_size > 0 && s.max_pages > ((int64_t{1} << 24) - 1) / s.page_size) {
      fail(op, "block_table columns x page_size must be < 2^24 keys, got block_table " +
                   bt.describe() + ", k " + s.k.describe());
    }
    s.Lk = s.max_pages * s.page_size;
  }
  if (o.cache_seqlens) {
    const TensorView& sl = *o.cache_seqlens;
    check_index_view(sl, op, "cache_seqlens");
    if (sl.rank != 1 || sl.shape[0] != s.B) {
      fail(op, "cache_seqlens must be [B] with B = " + std::to_string(s.B) + ", got " +
                   sl.describe());
    }
    s.seqlens.resize(static_cast<size_t>(s.B));
    for (int64_t b = 0; b < s.B; ++b) {
      const int64_t n = load_index(sl, b * sl.strides[0]);
      if (n < 0 || n > s.Lk) {
        fail(op, "cache_seqlens[" + std::to_string(b) + "] = " + std::to_string(n) +
                     " is outside [0, Lk = " + std::to_string(s.Lk) + "] (the cache's capacity)");
      }
      s.seqlens[static_cast<size_t>(b)] = n;
    }
  }
  if (s.paged) {
    const TensorView& bt = *o.block_table;
    const int64_t num_pages = s.k.shape[0];
    s.pages.assign(static_cast<size_t>(s.B * s.max_pages), -1);
    for (int64_t b = 0; b < s.B; ++b) {
      const int64_t used = (s.keys(b) + s.page_size - 1) / std::max<int64_t>(s.page_size, 1);
      for (int64_t c = 0; c < used; ++c) {
        const int64_t page = load_index(bt, b * bt.strides[0] + c * bt.strides[1]);
        if (page < 0 || page >= num_pages) {
          fail(op, "block_table[" + std::to_string(b) + ", " + std::to_string(c) + "] = " +
                       std::to_string(page) + " is not a page of k / v (num_pages = " +
                       std::to_string(num_pages) + ")");
        }
        s.pages[static_cast<size_t>(b * s.max_pages + c)] = page;
      }
    }
  }
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
  const bool paged = o.block_table.has_value();
  if (paged ? k.shape[0] != v.shape[0] : (k.shape[0] != s.B || v.shape[0] != s.B)) {
    fail(op, paged ? "k and v must hold the same number of pages (block_table given: k, v are "
                     "[num_pages, Hkv, page_size, D]), got k " + k.describe() + ", v " +
                         v.describe()
                   : "batch sizes differ: q " + q.describe() + ", k " + k.describe() + ", v " +
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
  s.q = q;
  s.k = k;
  s.v = v;
  if (paged || o.cache_seqlens) read_kv_cache(s, o);
  if (s.Lk >= (int64_t{1} << 24) || s.Lq >= (int64_t{1} << 24) || s.D > INT_MAX ||
      s.Dv > INT_MAX) {
    fail(op, "sequence lengths must be < 2^24 and head dims < 2^31, got q " + q.describe() +
                 ", k " + k.describe());
  }
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
  detail::check_enum_range(op, o.normalizer, AttentionNormalizer::kPower,
                           "normalizer has an unknown value ");
  s.norm = o.normalizer;
  detail::check_enum_range(op, o.empty_row, EmptyRow::kNan, "empty_row has an unknown value ");
  if (o.threads < 0) fail(op, "threads must be >= 0 (0 = default), got " + std::to_string(o.threads));
  s.threads = o.threads > 0 ? o.threads : max_threads();
  const bool softmax = s.norm == AttentionNormalizer::kSoftmax;
  if (!std::isnan(o.sigmoid_bias) && !std::isfinite(o.sigmoid_bias)) {
    fail(op, "sigmoid_bias must be finite (NaN = -ln n), got " + num(o.sigmoid_bias));
  }
  if (o.sigmoid_bias_mode != SigmoidBiasMode::kPerSequence &&
      o.sigmoid_bias_mode != SigmoidBiasMode::kPerRowVisible) {
    fail(op, "sigmoid_bias_mode has an unknown value " +
                 std::to_string(static_cast<int>(o.sigmoid_bias_mode)));
  }
  if (!std::isfinite(o.softpick_eps) || o.softpick_eps < 0.0f ||
      (o.softpick_eps > 0.0f && o.softpick_eps < FLT_MIN)) {
    fail(op, "softpick_eps must be 0 or finite and >= FLT_MIN, got " + num(o.softpick_eps));
  }
  if (!std::isfinite(o.ssmax_s)) fail(op, "ssmax_s must be finite, got " + num(o.ssmax_s));
  if (o.power_p < 2 || o.power_p % 2 != 0) {
    fail(op, "power_p must be an even integer >= 2, got " + std::to_string(o.power_p));
  }
  if (!std::isnan(o.unified_max) && !std::isfinite(o.unified_max)) {
    fail(op, "unified_max must be finite (NaN = off), got " + num(o.unified_max));
  }
  if (s.norm == AttentionNormalizer::kSoftplus && s.D < 2) {
    fail(op, "the softplus normalizer needs head dim D >= 2 (lambda = ln N / ln D), got D = " +
                 std::to_string(s.D));
  }
  const TensorView scores = shape_view({s.B, s.H, s.Lq, s.Lk});
  if (o.attn_mask) {
    const TensorView& m = *o.attn_mask;
    if (!is_floating(m.dtype) && m.dtype != DType::kBool) {
      fail(op, "attn_mask must be bool or floating (f32, f64, f16, bf16), got " + m.describe());
    }
    detail::check_view(m, op, "attn_mask", m.dtype);
    s.mask_dtype = m.dtype;
    const TensorView m1 = detail::as_rank1_if_scalar(m);
    detail::broadcast_strides(m1, "attn_mask", scores, op, s.ms);
    s.has_mask = true;
    s.mask_bool = m.dtype == DType::kBool;
    s.mask_data = static_cast<const char*>(m.data);
  }
  if (o.sinks) {
    if (!softmax) fail(op, "sinks are supported with the softmax normalizer only");
    detail::check_float_view(*o.sinks, op, "sinks");
    if (o.sinks->rank != 1 || o.sinks->shape[0] != s.H) {
      fail(op, "sinks must be [H] = [" + std::to_string(s.H) + "], got " + o.sinks->describe());
    }
    s.sinks_f32.resize(static_cast<size_t>(std::max<int64_t>(s.H, 1)));
    if (s.H > 0) {
      detail::gather_row_f32(o.sinks->data, o.sinks->dtype, o.sinks->strides[0], s.H,
                             s.sinks_f32.data());
      s.sinks_f64.resize(static_cast<size_t>(s.H));
      detail::gather_row_f64(o.sinks->data, o.sinks->dtype, o.sinks->strides[0], s.H,
                             s.sinks_f64.data());
    }
    s.sinks = s.sinks_f32.data();
  }
  if (o.ssmax_scales) {
    if (s.norm != AttentionNormalizer::kSsmax) {
      fail(op, "ssmax_scales are supported with the ssmax normalizer only");
    }
    detail::check_float_view(*o.ssmax_scales, op, "ssmax_scales");
    if (o.ssmax_scales->rank != 1 || o.ssmax_scales->shape[0] != s.H) {
      fail(op, "ssmax_scales must be [H] = [" + std::to_string(s.H) + "], got " +
                   o.ssmax_scales->describe());
    }
    s.ssmax_f32.resize(static_cast<size_t>(std::max<int64_t>(s.H, 1)));
    if (s.H > 0) {
      detail::gather_row_f32(o.ssmax_scales->data, o.ssmax_scales->dtype,
                             o.ssmax_scales->strides[0], s.H, s.ssmax_f32.data());
      s.ssmax_f64.resize(static_cast<size_t>(s.H));
      detail::gather_row_f64(o.ssmax_scales->data, o.ssmax_scales->dtype,
                             o.ssmax_scales->strides[0], s.H, s.ssmax_f64.data());
    }
    for (int64_t h = 0; h < s.H; ++h) {
      if (!std::isfinite(s.ssmax_f32[h])) {
        fail(op, "ssmax_scales must be finite, got " + num(s.ssmax_f32[h]) + " at head " +
                     std::to_string(h));
      }
    }
  }
  if (o.alibi_slopes) {
    detail::check_float_view(*o.alibi_slopes, op, "alibi_slopes");
    if (o.alibi_slopes->rank < 1 || o.alibi_slopes->rank > 2 ||
        o.alibi_slopes->shape[o.alibi_slopes->rank - 1] != s.H) {
      fail(op, "alibi_slopes must be [H] or [B, H] with H = " + std::to_string(s.H) + ", got " +
                   o.alibi_slopes->describe());
    }
    int64_t as[2] = {0, 0};
    detail::broadcast_strides(*o.alibi_slopes, "alibi_slopes", shape_view({s.B, s.H}), op, as);
    s.alibi_f32.resize(static_cast<size_t>(std::max<int64_t>(s.B * s.H, 1)));
    s.alibi_f64.resize(s.alibi_f32.size());
    const auto* ap = static_cast<const char*>(o.alibi_slopes->data);
    const int64_t asize = dtype_size(o.alibi_slopes->dtype);
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t h = 0; h < s.H; ++h) {
        const double slope =
            detail::load_f64(ap + (b * as[0] + h * as[1]) * asize, o.alibi_slopes->dtype);
        s.alibi_f32[static_cast<size_t>(b * s.H + h)] = static_cast<float>(slope);
        s.alibi_f64[static_cast<size_t>(b * s.H + h)] = slope;
      }
    }
    s.alibi = s.alibi_f32.data();
  }
  if (o.gate) {
    const TensorView& g = *o.gate;
    detail::check_float_view(g, op, "gate");
    s.gate_dtype = g.dtype;
    detail::broadcast_strides(detail::as_rank1_if_scalar(g), "gate",
                              shape_view({s.B, s.H, s.Lq, s.Dv}), op, s.gs);
    s.has_gate = true;
    s.gate_data = static_cast<const char*>(g.data);
  }
  if ((o.ungated_out || o.dgate) && !o.gate) {
    fail(op, "ungated_out and dgate belong to a gate (AttentionOptions::gate), and none is given");
  }
  if (o.ungated_out) {
    check_rank4(*o.ungated_out, op, "ungated_out");
    const TensorView& u = *o.ungated_out;
    if (u.shape[0] != s.B || u.shape[1] != s.H || u.shape[2] != s.Lq || u.shape[3] != s.Dv) {
      fail(op, "ungated_out must be [B, H, Lq, Dv] like out, got " + u.describe());
    }
  }
  if (o.dgate) {
    detail::check_float_view(*o.dgate, op, "dgate");
    detail::check_same_shape(*o.dgate, "dgate", *o.gate, "gate", op);
  }
  if (o.lse) {
    if (!softmax) fail(op, "lse is available with the softmax normalizer only");
    detail::check_float_view(*o.lse, op, "lse");
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
  if (s.o.ssmax_scales) v.push_back({&*s.o.ssmax_scales, "ssmax_scales"});
  if (s.o.alibi_slopes) v.push_back({&*s.o.alibi_slopes, "alibi_slopes"});
  if (s.o.cache_seqlens) v.push_back({&*s.o.cache_seqlens, "cache_seqlens"});
  if (s.o.block_table) v.push_back({&*s.o.block_table, "block_table"});
  if (s.o.gate) v.push_back({&*s.o.gate, "gate"});
  return v;
}

void check_out_vs(const Setup& s, const TensorView& out, const char* name,
                  const std::vector<std::pair<const TensorView*, const char*>>& inputs) {
  detail::check_no_self_overlap(out, name, s.op);
  for (const auto& [in, in_name] : inputs) {
    detail::check_disjoint_or_same(out, name, *in, in_name, s.op, false);
  }
}

}  // namespace

namespace {
constexpr auto kNormalizerNames = detail::name_table<AttentionNormalizer>(
    "parse_attention_normalizer", "attention normalizer",
    {{AttentionNormalizer::kSoftmax, "softmax"},
     {AttentionNormalizer::kSigmoid, "sigmoid"},
     {AttentionNormalizer::kSoftpick, "softpick"},
     {AttentionNormalizer::kSsmax, "ssmax"},
     {AttentionNormalizer::kStablemax, "stablemax"},
     {AttentionNormalizer::kSoftplus, "softplus"},
     {AttentionNormalizer::kPower, "power"}});
}  // namespace

AttentionNormalizer parse_attention_normalizer(std::string_view name) {
  return kNormalizerNames.parse(name);
}
const char* attention_normalizer_name(AttentionNormalizer n) noexcept {
  return kNormalizerNames.name(n);
}

namespace {
void run_forward(const detail::attn::Setup& s, const TensorView& out);
}  // namespace

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
  if (options.ungated_out) {
    check_out_vs(s, *options.ungated_out, "ungated_out", inputs);
    detail::check_disjoint_or_same(*options.ungated_out, "ungated_out", out, "out", s.op, false);
    if (options.lse) {
      detail::check_disjoint_or_same(*options.ungated_out, "ungated_out", *options.lse, "lse",
                                     s.op, false);
    }
  }
  try {
    // float64 arithmetic when q, k or v is f64 (attention_f64.cc).
    if (q.dtype == DType::kF64 || k.dtype == DType::kF64 || v.dtype == DType::kF64) {
      detail::attn::forward_f64(s, out);
    } else {
      run_forward(s, out);
    }
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, std::string(s.op) + ": out of memory for scratch");
  }
}

namespace {
void run_forward(const detail::attn::Setup& s, const TensorView& out) {
  const bool kv_cache = s.paged || !s.seqlens.empty();
  if (s.norm == AttentionNormalizer::kSoftmax && (s.Lq <= detail::attn::kDecodeMaxLq || kv_cache)) {
    detail::attn::forward_decode(s, out);
  } else if (s.norm == AttentionNormalizer::kSoftmax) {
    detail::attn::forward_softmax(s, out);
  } else {
    detail::attn::forward_rows(s, out);
  }
}
}  // namespace

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& dout, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv,
                        const AttentionOptions& options) {
  detail::ensure_runtime_initialized();
  const char* op = "attention_backward";
  if (options.cache_seqlens || options.block_table) {
    fail(op, "cache_seqlens and block_table (the KV cache forms) are forward-only (inference); "
             "for training pass k and v as [B, Hkv, Lk, D] with masks");
  }
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
  if (options.backward_from_lse && !options.lse) {
    fail(op, "backward_from_lse needs options.lse, the forward's lse");
  }
  if (options.lse) inputs.push_back({&*options.lse, "lse"});
  // The learnable knobs' gradients (optional outputs).
  const auto knob = [&](const std::optional<TensorView>& d, const char* name, bool ok,
                        const char* why) {
    if (!d) return;
    if (!ok) fail(op, std::string(name) + " needs " + why);
    detail::check_float_view(*d, op, name);
  };
  knob(options.dattn_mask, "dattn_mask",
       options.attn_mask && is_floating(options.attn_mask->dtype), "a floating attn_mask");
  if (options.dattn_mask) {
    detail::check_same_shape(*options.dattn_mask, "dattn_mask", *options.attn_mask, "attn_mask", op);
  }
  knob(options.dsinks, "dsinks", options.sinks.has_value(), "sinks");
  if (options.dsinks) detail::check_same_shape(*options.dsinks, "dsinks", *options.sinks, "sinks", op);
  knob(options.dalibi_slopes, "dalibi_slopes", options.alibi_slopes.has_value(), "alibi_slopes");
  if (options.dalibi_slopes) {
    detail::check_same_shape(*options.dalibi_slopes, "dalibi_slopes", *options.alibi_slopes,
                             "alibi_slopes", op);
  }
  knob(options.dsigmoid_bias, "dsigmoid_bias", s.norm == AttentionNormalizer::kSigmoid,
       "the sigmoid normalizer");
  if (options.dsigmoid_bias) {
    const TensorView& d = *options.dsigmoid_bias;
    if (d.rank > 1 || (d.rank == 1 && d.shape[0] != 1)) {
      fail(op, "dsigmoid_bias must hold one element ([] or [1]), got " + d.describe());
    }
  }
  knob(options.dssmax_scales, "dssmax_scales", s.norm == AttentionNormalizer::kSsmax,
       "the ssmax normalizer");
  if (options.dssmax_scales) {
    const TensorView& d = *options.dssmax_scales;
    if (options.ssmax_scales) {
      detail::check_same_shape(d, "dssmax_scales", *options.ssmax_scales, "ssmax_scales", op);
    } else if (d.rank > 1 || (d.rank == 1 && d.shape[0] != 1)) {
      fail(op, "dssmax_scales without ssmax_scales (the scalar ssmax_s) must hold one element "
               "([] or [1]), got " + d.describe());
    }
  }
  if (s.has_gate && !options.ungated_out) {
    fail(op, "a gate needs ungated_out, the forward's output before the gate (the gate's "
             "gradient is dout * a * sigmoid'(gate))");
  }
  if (options.ungated_out) inputs.push_back({&*options.ungated_out, "ungated_out"});
  check_out_vs(s, dq, "dq", inputs);
  check_out_vs(s, dk, "dk", inputs);
  check_out_vs(s, dv, "dv", inputs);
  detail::check_disjoint_or_same(dq, "dq", dk, "dk", op, false);
  detail::check_disjoint_or_same(dq, "dq", dv, "dv", op, false);
  detail::check_disjoint_or_same(dk, "dk", dv, "dv", op, false);
  if (options.dgate) {
    check_out_vs(s, *options.dgate, "dgate", inputs);
    for (const auto& [t, name] : {std::pair<const TensorView*, const char*>{&dq, "dq"},
                                  {&dk, "dk"}, {&dv, "dv"}}) {
      detail::check_disjoint_or_same(*options.dgate, "dgate", *t, name, op, false);
    }
  }
  {
    // Every gradient output, disjoint from the inputs and from each other.
    std::vector<std::pair<const TensorView*, const char*>> outs = {
        {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}};
    if (options.dgate) outs.push_back({&*options.dgate, "dgate"});
    for (const auto& [t, name] : {std::pair<const std::optional<TensorView>*, const char*>{
                                      &options.dattn_mask, "dattn_mask"},
                                  {&options.dsinks, "dsinks"},
                                  {&options.dalibi_slopes, "dalibi_slopes"},
                                  {&options.dsigmoid_bias, "dsigmoid_bias"},
                                  {&options.dssmax_scales, "dssmax_scales"}}) {
      if (!*t) continue;
      check_out_vs(s, **t, name, inputs);
      for (const auto& [o2, n2] : outs) detail::check_disjoint_or_same(**t, name, *o2, n2, op, false);
      outs.push_back({&**t, name});
    }
  }
  try {
    // B = 0 or Hkv = 0: no task; the knobs' gradients are 0. dgate last:
    // backward() can still fail on its scratch before writing anything.
    // float64 arithmetic when q, k, v, out or dout is f64 (attention_f64.cc).
    const bool f64 = q.dtype == DType::kF64 || k.dtype == DType::kF64 ||
                     v.dtype == DType::kF64 || out.dtype == DType::kF64 ||
                     dout.dtype == DType::kF64;
    if (f64) {
      detail::attn::backward_f64(s, dout, dq, dk, dv);
      if (options.dgate) detail::attn::gate_backward_f64(s, dout, *options.dgate);
    } else {
      detail::attn::backward(s, out, dout, dq, dk, dv);
      if (options.dgate) detail::attn::gate_backward(s, dout, *options.dgate);
    }
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, std::string(op) + ": out of memory for scratch");
  }
}

}  // namespace smax

// fuzz/harness_attention_internal.h: what the two parts of the attention
// harness (harness_attention.h) share: constants, the guarded strided
// buffers, the decoded case and the functions each part defines.
//
//   harness_attention_inputs.cc  input values, the guarded buffers, the
//                                rows whose f32 evaluation may overflow
//   harness_attention.cc         the call, the checks and the entry points of
//                                harness_attention.h (decoding included)
//
// Internal to fuzz/: nothing here is a contract of the library.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "harness_attention.h"
#include "operands.h"
#include "reference/attention.h"
#include "smax/attention.h"
#include "smax/c/smax.h"
#include "smax/error.h"
#include "smax/runtime.h"
#include "smax/tensor.h"

namespace smax_fuzz {
namespace attention_internal {

using smax::AttentionNormalizer;
using smax::AttentionOptions;
using smax::DType;
using smax::TensorView;
namespace ref = smax::reference;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

constexpr double kU = 1.0 / 16777216.0;  // 2^-24
constexpr double kNegInfD = -std::numeric_limits<double>::infinity();
constexpr int64_t kGuard = 8;
constexpr uint8_t kSentinelByte = 0xA5;

constexpr double kOverflowRisk = 1e30;  // f32 overflow possible where float64 is finite

// A buffer (guards + padding filled with a sentinel) holding one strided view.
struct Buf {
  std::vector<unsigned char> bytes;
  std::vector<char> is_elem;  // per element slot of the buffer
  TensorView view;
  int esize = 4;
  std::string layout;
};

// Visits every element (logical row-major order) with its slot index.
template <typename Fn>
void for_each_elem(const Buf& b, Fn&& fn) {
  const TensorView& v = b.view;
  Layout l;
  for (int d = 0; d < v.rank; ++d) {  // (assign() from the arrays: a gcc -Wnonnull false alarm)
    l.shape.push_back(v.shape[d]);
    l.strides.push_back(v.strides[d]);
  }
  const int64_t base = (static_cast<const unsigned char*>(v.data) - b.bytes.data()) / b.esize;
  int64_t e = 0;
  for (int64_t off : offsets_of(l)) fn(e++, base + off);
}

struct Case {
  bool backward = false, capi = false;
  int64_t B = 1, H = 1, Hkv = 1, Lq = 1, Lk = 1, D = 1, Dv = 1;
  AttentionOptions o;
  int mask_kind = 0;  // 0 none, 1 bool, 2 f32
  std::vector<int64_t> mask_shape, alibi_shape;
  bool sinks = false, lse = false;
  int corruption = -1;  // -1 none
  // Forward only: 0 none, 1 cache_seqlens, 2 paged (block_table, with
  // seqlens when paged_seqlens); page: keys per page; pages: the pool size.
  int kv_cache = 0;
  bool paged_seqlens = false, index_i32 = false;
  int64_t page = 0, max_pages = 0, pages = 0;
  int gate = 0;  // 0 none, 1 element-wise [B, H, Lq, Dv], 2 head-wise [B, H, Lq, 1]
  bool ssmax_scales = false;
  std::string target;
  uint8_t special = 0;
  std::string describe() const {
    std::ostringstream s;
    s << (backward ? "attention_backward" : "attention") << (capi ? " (C ABI)" : "")
      << " B=" << B << " H=" << H << " Hkv=" << Hkv << " Lq=" << Lq << " Lk=" << Lk
      << " D=" << D << " Dv=" << Dv << " normalizer=" << static_cast<int>(o.normalizer)
      << " causal=" << o.is_causal << " scale=" << o.scale << " softcap=" << o.softcap
      << " mask=" << mask_kind << " [";
    for (int64_t d : mask_shape) s << d << ",";
    s << "] sinks=" << sinks << " alibi=" << alibi_shape.size() << " lse=" << lse
      << " empty_row=" << static_cast<int>(o.empty_row) << " threads=" << o.threads
      << " sigmoid_bias=" << o.sigmoid_bias
      << " sigmoid_bias_mode=" << static_cast<int>(o.sigmoid_bias_mode)
      << " softpick_eps=" << o.softpick_eps << " ssmax_s=" << o.ssmax_s
      << " power_p=" << o.power_p << " kv_cache=" << kv_cache << " page=" << page
      << " max_pages=" << max_pages << " pages=" << pages << " gate=" << gate
      << " ssmax_scales=" << ssmax_scales << " unified_max=" << o.unified_max
      << " corruption=" << corruption << " target=" << target << " special=" << static_cast<int>(special);
    return s.str();
  }
};

// Corruptions (each must be rejected).
enum Corruption : int {
  kKHeadDim, kHeadsNotMultiple, kOutShape, kQRank3, kOverflowSize, kOutAliasesQ,
  kOutSelfOverlap, kMaskDtype, kMaskShape, kQDtype, kNullData, kBadScale, kBadSoftcap,
  kBadNormalizer, kBadEmptyRow, kBadThreads, kSinksNonSoftmax, kLseNonSoftmax, kBadEps,
  kBadSsmaxS, kBadSigmoidBias, kSinksShape, kAlibiShape, kLseShape, kLseAliasesOut,
  kDqAliasesQ, kDkAliasesDv, kDoutShape, kBatchMismatch, kBadPowerP, kKvCacheBackward,
  kSeqlenTooLong, kPageOutOfPool, kGateShape, kGateBackwardNoUngated, kSsmaxScalesShape,
  kCorruptionCount
};

struct Operands {
  Buf q, k, v, out, lse, dout, dq, dk, dv, mask, sinks, alibi;
  // The KV cache forms (forward), the gate and SSMax's per-head s.
  Buf seqlens, table, gate, ungated, dgate, ssmax, dssmax;
};

// ---- harness_attention_inputs.cc -------------------------------------------------------------

float value(Reader& r, uint8_t special);
float value_v(Reader& r, uint8_t special, bool nonfinite);
void make_buf(Buf& b, const std::vector<int64_t>& shape, DType dtype, int code, Reader& r);
float* fslot(Buf& b, int64_t off);
float fget(const Buf& b, int64_t off);
std::vector<float> dense(const Buf& b);
bool same_special(double got, double want);
std::vector<char> risky_rows(const ref::AttentionProblem& p, const ref::AttentionResult& r,
                             bool v_nonfinite, double vmax);

// ---- harness_attention.cc --------------------------------------------------------------------

extern AttentionStats g_stats;
extern std::function<void()> g_dump;
[[noreturn]] void violation(const Case& c, const std::string& what);
std::string call(const Case& c, Operands& ops, const AttentionOptions& o0, int* status);
std::vector<Buf*> all_bufs(Operands& ops);
void check_guards(const Case& c, const Buf& b, const char* name);
void check_element(const Case& c, const char* what, int64_t i, double got, double want,
                   double bound);

}  // namespace attention_internal
}  // namespace smax_fuzz

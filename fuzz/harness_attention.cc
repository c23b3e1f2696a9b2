// fuzz/harness_attention.cc: see harness_attention.h (the call, the checks
// and the entry points; input values and buffers:
// harness_attention_inputs.cc, what the parts share:
// harness_attention_internal.h).
#include "harness_attention.h"
#include "harness_attention_internal.h"

#include "check.h"
#include "op_table.h"

namespace smax_fuzz {
namespace attention_internal {

AttentionStats g_stats;

// Set while a case runs: prints the operands (SMAX_FUZZ_DUMP=1).
std::function<void()> g_dump;

[[noreturn]] void violation(const Case& c, const std::string& what) {
  std::fprintf(stderr, "smax fuzz attention violation: %s\n  case: %s\n", what.c_str(),
               c.describe().c_str());
  const char* dump = std::getenv("SMAX_FUZZ_DUMP");
  if (g_dump && dump != nullptr && dump[0] == '1') g_dump();
  std::fflush(stderr);
  std::abort();
}

// Runs the op on `ops` with options `o` (views from the buffers); returns the
// error message or "" on success; `status` gets the smax::Status / C status.
std::string call(const Case& c, Operands& ops, const AttentionOptions& o0, int* status) {
  AttentionOptions o = o0;
  if (c.mask_kind) o.attn_mask = ops.mask.view;
  if (c.sinks) o.sinks = ops.sinks.view;
  if (!c.alibi_shape.empty()) o.alibi_slopes = ops.alibi.view;
  if (c.kv_cache == 1 || (c.kv_cache == 2 && c.paged_seqlens)) o.cache_seqlens = ops.seqlens.view;
  if (c.kv_cache == 2) o.block_table = ops.table.view;
  if (c.gate) {
    o.gate = ops.gate.view;
    if (!c.backward || c.corruption != kGateBackwardNoUngated) o.ungated_out = ops.ungated.view;
    if (c.backward) o.dgate = ops.dgate.view;
  }
  if (c.ssmax_scales) {
    o.ssmax_scales = ops.ssmax.view;
    if (c.backward) o.dssmax_scales = ops.dssmax.view;
  }
  // The backward takes the forward's lse (computed before the call under
  // test, with out): the softmax backward from it.
  if (c.lse) o.lse = ops.lse.view;
  o.backward_from_lse = c.lse && c.backward;  // (the C ABI has no such field: it ignores lse)
  *status = 0;
  if (c.capi) {
    smax_tensor seqlens = smax_cli::c_tensor(ops.seqlens.view),
                table = smax_cli::c_tensor(ops.table.view), gate = smax_cli::c_tensor(ops.gate.view),
                ungated = smax_cli::c_tensor(ops.ungated.view),
                dgate = smax_cli::c_tensor(ops.dgate.view), ssmax = smax_cli::c_tensor(ops.ssmax.view),
                dssmax = smax_cli::c_tensor(ops.dssmax.view);
    smax_tensor q = smax_cli::c_tensor(ops.q.view), k = smax_cli::c_tensor(ops.k.view), v = smax_cli::c_tensor(ops.v.view),
                out = smax_cli::c_tensor(ops.out.view), dout = smax_cli::c_tensor(ops.dout.view), dq = smax_cli::c_tensor(ops.dq.view),
                dk = smax_cli::c_tensor(ops.dk.view), dv = smax_cli::c_tensor(ops.dv.view), mask = smax_cli::c_tensor(ops.mask.view),
                sinks = smax_cli::c_tensor(ops.sinks.view), alibi = smax_cli::c_tensor(ops.alibi.view),
                lse = smax_cli::c_tensor(ops.lse.view);
    smax_attention_options co;
    smax_attention_options_init(&co);
    co.normalizer = static_cast<int32_t>(o.normalizer);
    co.scale = o.scale;
    co.is_causal = o.is_causal ? 1 : 0;
    co.attn_mask = o.attn_mask ? &mask : nullptr;
    co.softcap = o.softcap;
    co.sinks = o.sinks ? &sinks : nullptr;
    co.alibi_slopes = o.alibi_slopes ? &alibi : nullptr;
    co.sigmoid_bias = o.sigmoid_bias;
    co.sigmoid_bias_mode = static_cast<int32_t>(o.sigmoid_bias_mode);
    co.softpick_eps = o.softpick_eps;
    co.ssmax_s = o.ssmax_s;
    co.power_p = o.power_p;
    co.cache_seqlens = o.cache_seqlens ? &seqlens : nullptr;
    co.block_table = o.block_table ? &table : nullptr;
    co.gate = o.gate ? &gate : nullptr;
    co.ungated_out = o.ungated_out ? &ungated : nullptr;
    co.dgate = o.dgate ? &dgate : nullptr;
    co.ssmax_scales = o.ssmax_scales ? &ssmax : nullptr;
    co.dssmax_scales = o.dssmax_scales ? &dssmax : nullptr;
    co.has_unified_max = std::isnan(o.unified_max) ? 0 : 1;
    co.unified_max = std::isnan(o.unified_max) ? 0.0f : o.unified_max;
    co.lse = o.lse ? &lse : nullptr;
    co.empty_row = static_cast<int32_t>(o.empty_row);
    co.threads = o.threads;
    const smax_status s =
        c.backward ? smax_attention_backward(&q, &k, &v, &out, &dout, &dq, &dk, &dv, &co)
                   : smax_attention(&q, &k, &v, &out, &co);
    *status = static_cast<int>(s);
    return s == SMAX_STATUS_OK ? std::string() : std::string(smax_last_error());
  }
  try {
    if (c.backward) {
      smax::attention_backward(ops.q.view, ops.k.view, ops.v.view, ops.out.view, ops.dout.view,
                               ops.dq.view, ops.dk.view, ops.dv.view, o);
    } else {
      smax::attention(ops.q.view, ops.k.view, ops.v.view, ops.out.view, o);
    }
  } catch (const smax::Error& e) {
    *status = static_cast<int>(e.status());
    return std::string(e.what()).empty() ? std::string("(empty message)") : std::string(e.what());
  }
  return std::string();
}

std::vector<Buf*> all_bufs(Operands& ops) {
  return {&ops.q,     &ops.k,     &ops.v,    &ops.out,     &ops.lse,   &ops.dout,
          &ops.dq,    &ops.dk,    &ops.dv,   &ops.mask,    &ops.sinks, &ops.alibi,
          &ops.seqlens, &ops.table, &ops.gate, &ops.ungated, &ops.dgate, &ops.ssmax,
          &ops.dssmax};
}

void check_guards(const Case& c, const Buf& b, const char* name) {
  for (size_t i = 0; i < b.is_elem.size(); ++i) {
    if (b.is_elem[i]) continue;
    for (int e = 0; e < b.esize; ++e) {
      if (b.bytes[i * b.esize + e] != kSentinelByte) {
        violation(c, std::string("write outside ") + name + " (slot " + std::to_string(i) +
                         ", layout " + b.layout + ")");
      }
    }
  }
}

void check_element(const Case& c, const char* what, int64_t i, double got, double want,
                   double bound) {
  if (!same_special(got, want)) {
    violation(c, std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(got) +
                     ", reference " + std::to_string(want) + " (special values differ)");
  }
  if (std::isfinite(want) && !(std::abs(got - want) <= bound)) {
    char msg[256];
    std::snprintf(msg, sizeof msg, "%s[%lld] = %.9g, reference %.17g, |err| %.3g > bound %.3g",
                  what, static_cast<long long>(i), got, want, std::abs(got - want), bound);
    violation(c, msg);
  }
}

void count_checked(const Case& c) {
  ++g_stats.checked;
  g_stats.kv_cache += c.kv_cache != 0;
  g_stats.paged += c.kv_cache == 2;
  g_stats.gate += c.gate != 0;
  g_stats.ssmax_scales += c.ssmax_scales;
  g_stats.unified_max += !std::isnan(c.o.unified_max);
  g_stats.power += c.o.normalizer == AttentionNormalizer::kPower;
}

}  // namespace attention_internal

using namespace attention_internal;

const AttentionStats& attention_stats() { return g_stats; }

void run_attention_one(const uint8_t* data, size_t size) {
  ++g_stats.runs;
  struct ClearDump {
    ~ClearDump() { g_dump = nullptr; }
  } clear_dump;
  Reader r(data, size);
  Case c;
  const uint8_t f0 = r.u8();
  c.backward = f0 & 1;
  c.capi = (f0 >> 1) & 1;
  const bool corrupt = ((f0 >> 2) & 7) == 0;  // 1 in 8 inputs
  c.Hkv = 1 + r.u8() % 3;
  const int64_t G = 1 + r.u8() % 3;
  c.H = G * c.Hkv;
  c.B = 1 + r.u8() % 2;
  const uint8_t lq = r.u8(), lk = r.u8();
  c.Lq = (lq & 0x80) ? (lq & 0x7f) % 70 : lq % 12;
  c.Lk = (lk & 0x80) ? 500 + (lk & 0x7f) % 60 : lk % 20;  // > 512: two key blocks
  c.D = r.u8() % 65;
  c.Dv = r.u8() % 65;
  if (r.u8() % 8 == 0) c.Lq = 0;
  // Bound the work of the float64 oracle.
  while (c.B * c.H * std::max<int64_t>(c.Lq, 1) * std::max<int64_t>(c.Lk, 1) *
             (c.D + c.Dv + 2) > 400000) {
    if (c.D > 8) c.D /= 2;
    if (c.Dv > 8) c.Dv /= 2;
    if (c.Lq > 4) c.Lq /= 2;
    else if (c.B > 1) c.B = 1;
    else if (c.Hkv * G > 1 && c.H > c.Hkv) c.H = c.Hkv;
    else c.Lk = std::max<int64_t>(c.Lk / 2, 1);
  }
  const uint8_t f1 = r.u8();
  c.o.normalizer = static_cast<AttentionNormalizer>(f1 % 7);
  c.o.is_causal = (f1 >> 3) & 1;
  c.lse = ((f1 >> 4) & 1) && c.o.normalizer == AttentionNormalizer::kSoftmax;
  c.sinks = ((f1 >> 5) & 1) && c.o.normalizer == AttentionNormalizer::kSoftmax;
  c.o.empty_row = (f1 >> 6) & 1 ? smax::EmptyRow::kNan : smax::EmptyRow::kZero;
  const uint8_t f2 = r.u8();
  switch (f2 % 8) {
    case 0: case 1: case 2: break;  // default NaN = 1/sqrt(D)
    case 3: c.o.scale = 1.0f; break;
    case 4: c.o.scale = -0.5f; break;
    case 5: c.o.scale = 0.0f; break;
    case 6: c.o.scale = static_cast<float>(static_cast<int8_t>(r.u8())) / 8.0f; break;
    default: c.o.scale = 1e-3f; break;
  }
  switch ((f2 >> 3) % 6) {
    case 0: c.o.softcap = 5.0f; break;
    case 1: c.o.softcap = 0.5f; break;
    case 2: c.o.softcap = 50.0f; break;
    default: break;
  }
  const uint8_t f3 = r.u8();
  c.mask_kind = f3 % 3;
  if (c.mask_kind) {
    const int rank = (f3 >> 2) % 5;
    const int64_t full[4] = {c.B, c.H, c.Lq, c.Lk};
    const uint8_t bits = r.u8();
    for (int d = 4 - rank; d < 4; ++d) c.mask_shape.push_back((bits >> d) & 1 ? full[d] : 1);
  }
  const uint8_t f4 = r.u8();
  if (f4 & 1) {
    c.alibi_shape = (f4 & 2) ? std::vector<int64_t>{c.B, c.H} : std::vector<int64_t>{c.H};
  }
  c.o.threads = (f4 >> 2) % 4;
  if (c.o.normalizer == AttentionNormalizer::kSigmoid && ((f4 >> 4) & 1)) {
    c.o.sigmoid_bias = static_cast<float>(static_cast<int8_t>(r.u8())) / 16.0f;
  }
  if (c.o.normalizer == AttentionNormalizer::kSigmoid && ((f4 >> 5) & 1)) {
    c.o.sigmoid_bias_mode = smax::SigmoidBiasMode::kPerRowVisible;
  }
  if (c.o.normalizer == AttentionNormalizer::kSoftpick && ((f4 >> 4) & 1)) {
    c.o.softpick_eps = (f4 & 0x20) ? 0.0f : FLT_MIN;
  }
  if (c.o.normalizer == AttentionNormalizer::kSsmax && ((f4 >> 4) & 1)) {
    c.o.ssmax_s = static_cast<float>(static_cast<int8_t>(r.u8())) / 64.0f;
  }
  if (c.o.normalizer == AttentionNormalizer::kPower && ((f4 >> 4) & 1)) {
    c.o.power_p = 2 + 2 * (r.u8() % 4);  // 2, 4, 6, 8
  }
  if (c.o.normalizer == AttentionNormalizer::kSoftplus && c.D < 2) c.D = 2;
  c.special = (f4 & 0xC0) == 0 ? static_cast<uint8_t>(r.u8() % 64) : 0;
  // The KV cache forms (forward only), the gate, the unified max, SSMax's
  // per-head s.
  const uint8_t f5 = r.u8();
  c.index_i32 = (f5 >> 6) & 1;
  if (!c.backward && (f5 & 3) >= 2) c.kv_cache = (f5 & 3) - 1;
  if ((f5 >> 2) & 1) c.gate = 1 + ((f5 >> 3) & 1);
  if (((f5 >> 4) & 1) && c.o.normalizer == AttentionNormalizer::kSoftmax) {
    c.o.unified_max = static_cast<float>(static_cast<int8_t>(r.u8())) / 8.0f;
  }
  c.ssmax_scales = ((f5 >> 5) & 1) && c.o.normalizer == AttentionNormalizer::kSsmax;
  const uint8_t f6 = r.u8();
  c.paged_seqlens = (f5 >> 7) & 1;
  const int64_t page_pick = int64_t{1} << (f6 % 5);  // 1 .. 16 keys per page
  const int64_t spare_pages = (f6 >> 3) % 3;
  // Lift the previous input's cap first: supported_targets() is after the
  // cap, so the choice below would depend on the input run before.
  smax::set_max_target("");
  const std::vector<std::string> targets = smax::supported_targets();
  c.target = targets[r.u8() % targets.size()];
  if (corrupt) c.corruption = r.u8() % kCorruptionCount;

  // Corruptions that change the shapes or options before allocation.
  int64_t qH = c.H, kD = c.D, outDv = c.Dv, kHkv = c.Hkv, kB = c.B;
  bool q_rank3 = false;
  switch (c.corruption) {
    case kKHeadDim: kD = c.D + 1; break;
    case kHeadsNotMultiple: kHkv = c.H + 1; break;
    case kOutShape: outDv = c.Dv + 1; break;
    case kQRank3: q_rank3 = true; break;
    case kBatchMismatch: kB = c.B + 1; break;
    case kOutAliasesQ: c.Dv = c.D; outDv = c.D; break;
    case kDkAliasesDv: c.Dv = c.D; outDv = c.D; break;
    case kDqAliasesQ: break;
    case kBadScale: c.o.scale = (r.u8() & 1) ? kInf : -kInf; break;
    case kBadSoftcap: c.o.softcap = (r.u8() & 1) ? -1.0f : kNaN; break;
    case kBadNormalizer: c.o.normalizer = static_cast<AttentionNormalizer>(7 + r.u8() % 3); break;
    case kBadEmptyRow: c.o.empty_row = static_cast<smax::EmptyRow>(2 + r.u8() % 3); break;
    case kBadThreads: c.o.threads = -1 - r.u8() % 3; break;
    case kSinksNonSoftmax:
      c.o.normalizer = static_cast<AttentionNormalizer>(1 + r.u8() % 6);
      c.sinks = true;
      c.lse = false;
      break;
    case kLseNonSoftmax:
      c.o.normalizer = static_cast<AttentionNormalizer>(1 + r.u8() % 6);
      c.lse = true;
      c.sinks = false;
      break;
    case kBadEps: c.o.softpick_eps = (r.u8() & 1) ? 1e-40f : -1.0f; break;
    case kBadSsmaxS: c.o.ssmax_s = kInf; break;
    case kBadSigmoidBias: c.o.sigmoid_bias = -kInf; break;
    case kBadPowerP: c.o.power_p = (r.u8() & 1) ? 3 : -2; break;  // (0 is the C ABI default)
    case kKvCacheBackward: c.kv_cache = c.backward ? 1 : c.kv_cache; break;
    case kSeqlenTooLong: case kPageOutOfPool:
      if (!c.backward) c.kv_cache = c.corruption == kSeqlenTooLong ? 1 : 2;
      if (c.corruption == kPageOutOfPool) c.paged_seqlens = false;
      break;
    case kGateShape: c.gate = 1; break;
    case kGateBackwardNoUngated: c.gate = c.gate ? c.gate : 1; break;
    case kSsmaxScalesShape:
      c.o.normalizer = AttentionNormalizer::kSsmax;
      c.ssmax_scales = true;
      c.lse = c.sinks = false;
      break;
    default: break;
  }
  if (c.o.normalizer == AttentionNormalizer::kSoftplus && c.D < 2) {
    c.D = 2;
    if (kD < 2) kD = 2;
  }
  // Corruptions that need the other kind of call: a certain error instead.
  const bool needs_forward = c.corruption == kSeqlenTooLong || c.corruption == kPageOutOfPool;
  const bool needs_backward = c.corruption == kKvCacheBackward ||
                              c.corruption == kGateBackwardNoUngated;
  if ((needs_forward && c.backward) || (needs_backward && !c.backward)) {
    c.corruption = kBadThreads;
    c.o.threads = -1;
  }
  if (c.corruption == kBatchMismatch && c.kv_cache == 2) c.kv_cache = 1;  // k's dim 0: pages
  if (c.kv_cache == 2) {
    c.page = page_pick;
    c.max_pages = (c.Lk + c.page - 1) / c.page;
    const int64_t old_lk = c.Lk;
    c.Lk = c.max_pages * c.page;  // the capacity of max_pages pages
    if (!c.mask_shape.empty() && c.mask_shape.back() == old_lk) c.mask_shape.back() = c.Lk;
    c.pages = c.B * c.max_pages + spare_pages;
    if (c.corruption == kPageOutOfPool && c.max_pages == 0) {
      c.corruption = kBadThreads;
      c.o.threads = -1;
    }
  }
  // The backward's lse is an input: a wrong shape or a non-softmax
  // normaliser is rejected as in the forward; "aliases out" is the
  // forward's (an output), so the backward tests another error.
  if (c.corruption == kLseAliasesOut && c.backward) {
    c.corruption = kBadThreads;
    c.o.threads = -1;
  }
  if ((c.corruption == kDqAliasesQ || c.corruption == kDkAliasesDv ||
       c.corruption == kDoutShape) && !c.backward) {
    c.corruption = kOutSelfOverlap;
  }
  if (c.corruption == kLseShape || c.corruption == kLseAliasesOut) {
    c.o.normalizer = AttentionNormalizer::kSoftmax;
    c.lse = true;
  }
  if (c.corruption == kSinksShape) {
    c.o.normalizer = AttentionNormalizer::kSoftmax;
    c.sinks = true;
  }
  if (c.corruption == kAlibiShape && c.alibi_shape.empty()) c.alibi_shape = {c.H};

  // Allocation and values.
  Operands ops;
  auto layout = [&] { return static_cast<int>(r.u8() % 6); };
  if (q_rank3) {
    make_buf(ops.q, {c.B * c.H, c.Lq, c.D}, DType::kF32, layout(), r);
  } else {
    make_buf(ops.q, {c.B, qH, c.Lq, c.D}, c.corruption == kQDtype ? DType::kBool : DType::kF32,
             layout(), r);
  }
  if (c.kv_cache == 2) {  // pools of pages [pages, Hkv, page, D]
    make_buf(ops.k, {c.pages, kHkv, c.page, kD}, DType::kF32, layout(), r);
    make_buf(ops.v, {c.pages, c.Hkv, c.page, c.Dv}, DType::kF32, layout(), r);
  } else {
    make_buf(ops.k, {kB, kHkv, c.Lk, kD}, DType::kF32, layout(), r);
    make_buf(ops.v, {c.B, c.Hkv, c.Lk, c.Dv}, DType::kF32, layout(), r);
  }
  make_buf(ops.out, {c.B, c.H, c.Lq, outDv}, DType::kF32, layout(), r);
  make_buf(ops.lse, {c.B, c.H, c.corruption == kLseShape ? c.Lq + 1 : c.Lq}, DType::kF32,
           layout(), r);
  make_buf(ops.dout, {c.B, c.H, c.corruption == kDoutShape ? c.Lq + 1 : c.Lq, c.Dv}, DType::kF32,
           layout(), r);
  make_buf(ops.dq, {c.B, c.H, c.Lq, c.D}, DType::kF32, layout(), r);
  make_buf(ops.dk, {c.B, c.Hkv, c.Lk, c.D}, DType::kF32, layout(), r);
  make_buf(ops.dv, {c.B, c.Hkv, c.Lk, c.Dv}, DType::kF32, layout(), r);
  if (c.mask_kind) {
    std::vector<int64_t> ms = c.mask_shape;
    if (c.corruption == kMaskShape) ms.insert(ms.begin(), 1), ms.back() = c.Lk + 2;
    const DType mt = c.corruption == kMaskDtype ? DType::kI64
                     : c.mask_kind == 1         ? DType::kBool
                                                : DType::kF32;
    make_buf(ops.mask, ms, mt, layout(), r);
  } else if (c.corruption == kMaskShape || c.corruption == kMaskDtype) {
    c.mask_kind = 1;
    make_buf(ops.mask, {c.Lk + 3}, c.corruption == kMaskDtype ? DType::kI64 : DType::kBool,
             layout(), r);
  } else {
    make_buf(ops.mask, {1}, DType::kF32, 0, r);
  }
  make_buf(ops.sinks, {c.corruption == kSinksShape ? c.H + 1 : c.H}, DType::kF32, layout(), r);
  if (c.corruption == kAlibiShape) {
    make_buf(ops.alibi, {c.B, c.H + 1}, DType::kF32, layout(), r);
  } else {
    make_buf(ops.alibi, c.alibi_shape.empty() ? std::vector<int64_t>{1} : c.alibi_shape,
             DType::kF32, layout(), r);
  }
  const DType it = c.index_i32 ? DType::kI32 : DType::kI64;
  make_buf(ops.seqlens, {c.B}, it, layout(), r);
  make_buf(ops.table, {c.B, c.max_pages}, it, layout(), r);
  const std::vector<int64_t> gshape = {c.B, c.H, c.Lq,
                                       c.gate == 2 ? 1 : c.Dv + (c.corruption == kGateShape ? 2 : 0)};
  make_buf(ops.gate, gshape, DType::kF32, layout(), r);
  make_buf(ops.ungated, {c.B, c.H, c.Lq, c.Dv}, DType::kF32, layout(), r);
  make_buf(ops.dgate, gshape, DType::kF32, layout(), r);
  make_buf(ops.ssmax, {c.corruption == kSsmaxScalesShape ? c.H + 1 : c.H}, DType::kF32, layout(), r);
  make_buf(ops.dssmax, {c.H}, DType::kF32, layout(), r);
  auto fill_f = [&](Buf& b, auto&& gen) {
    if (b.view.dtype != DType::kF32) {
      for_each_elem(b, [&](int64_t, int64_t off) { b.bytes[off * b.esize] = r.u8() & 1; });
      return;
    }
    for_each_elem(b, [&](int64_t, int64_t off) { *fslot(b, off) = gen(); });
  };
  const uint8_t sp = c.special;
  fill_f(ops.q, [&] { return value(r, sp); });
  fill_f(ops.k, [&] { return value(r, sp); });
  const bool v_allow_nonfinite = (f0 >> 5) == 7;  // 1 in 8 inputs
  fill_f(ops.v, [&] { return value_v(r, static_cast<uint8_t>(sp / 2), v_allow_nonfinite); });
  fill_f(ops.dout, [&] { return static_cast<float>(static_cast<int8_t>(r.u8())) / 32.0f; });
  if (c.mask_kind == 1 || ops.mask.view.dtype != DType::kF32) {
    // Mostly keep (3 of 4), sometimes a whole mask of zeros (empty rows).
    const bool none = r.u8() % 16 == 0;
    for_each_elem(ops.mask, [&](int64_t, int64_t off) {
      for (int e = 0; e < ops.mask.esize; ++e) ops.mask.bytes[off * ops.mask.esize + e] = 0;
      ops.mask.bytes[off * ops.mask.esize] = none ? 0 : (r.u8() % 4 != 0);
    });
  } else if (c.mask_kind == 2) {
    fill_f(ops.mask, [&] {
      const uint8_t k = r.u8();
      return k % 5 == 0 ? -kInf : value(r, static_cast<uint8_t>(sp / 2));
    });
  }
  fill_f(ops.sinks, [&] { return value(r, static_cast<uint8_t>(sp / 2)); });
  fill_f(ops.alibi, [&] { return static_cast<float>(r.u8()) / 64.0f; });
  fill_f(ops.gate, [&] { return static_cast<float>(static_cast<int8_t>(r.u8())) / 16.0f; });
  fill_f(ops.ssmax, [&] { return static_cast<float>(static_cast<int8_t>(r.u8())) / 64.0f; });
  // Integer operands: seqlens in [0, Lk] (often Lk), the block table a
  // shuffled assignment of the pool's pages; entries a sequence does not use
  // (past ceil(seqlens / page)) hold values outside the pool, never read.
  auto put_index = [&](Buf& b, int64_t off, int64_t value) {
    if (b.view.dtype == DType::kI32) {
      const int32_t x = static_cast<int32_t>(value);
      std::memcpy(b.bytes.data() + off * 4, &x, 4);
    } else {
      std::memcpy(b.bytes.data() + off * 8, &value, 8);
    }
  };
  std::vector<int64_t> lens(static_cast<size_t>(c.B), c.Lk);
  for (int64_t b = 0; b < c.B; ++b) {
    const uint8_t x = r.u8();
    if (x & 1) lens[static_cast<size_t>(b)] = static_cast<int64_t>(x >> 1) % (c.Lk + 1);
  }
  if (c.corruption == kSeqlenTooLong) lens[0] = c.Lk + 1;
  for_each_elem(ops.seqlens, [&](int64_t e, int64_t off) {
    put_index(ops.seqlens, off, lens[static_cast<size_t>(e)]);
  });
  std::vector<int64_t> perm(static_cast<size_t>(c.pages));
  for (int64_t i = 0; i < c.pages; ++i) perm[static_cast<size_t>(i)] = i;
  for (int64_t i = c.pages - 1; i > 0; --i) {
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(r.u8() % (i + 1))]);
  }
  for_each_elem(ops.table, [&](int64_t e, int64_t off) {
    const int64_t b = e / std::max<int64_t>(c.max_pages, 1), m = e % std::max<int64_t>(c.max_pages, 1);
    const int64_t used = c.paged_seqlens ? (lens[static_cast<size_t>(b)] + c.page - 1) / c.page
                                         : c.max_pages;
    int64_t value = m < used ? perm[static_cast<size_t>(e)] : (e % 2 ? -1 : c.pages + 7);
    if (c.corruption == kPageOutOfPool && e == 0) value = c.pages;
    put_index(ops.table, off, value);
  });

  // Aliasing / view corruptions after allocation.
  Operands& o = ops;
  switch (c.corruption) {
    case kOverflowSize: {
      Buf& b = (r.u8() & 1) ? o.q : o.out;
      b.view.shape[2] = int64_t{1} << 62;
      b.view.shape[3] = std::max<int64_t>(b.view.shape[3], 4);
      if (b.view.shape[0] == 0 || b.view.shape[1] == 0) b.view.shape[0] = b.view.shape[1] = 1;
      break;
    }
    case kOutAliasesQ:
      if (!c.backward) o.out.view = o.q.view;
      else o.dq.view = o.q.view;
      break;
    case kOutSelfOverlap: {
      Buf& b = c.backward ? o.dq : o.out;
      b.view.shape[2] = std::max<int64_t>(b.view.shape[2], 2);
      b.view.strides[2] = 0;
      // Keep the other operands consistent with the grown shape.
      if (b.view.shape[2] != c.Lq) c.corruption = kOutShape;
      break;
    }
    case kNullData: {
      Buf& b = (r.u8() & 1) ? o.k : o.q;
      b.view.data = nullptr;
      break;
    }
    case kLseAliasesOut:
      // lse[b, h, i] = out[b, h, i, 0]: every lse element is an out element
      // (a certain overlap, never outside out's buffer).
      if (c.Dv > 0) {
        o.lse.view.data = o.out.view.data;
        for (int d = 0; d < 3; ++d) o.lse.view.strides[d] = o.out.view.strides[d];
      } else {
        c.corruption = kBadThreads;
        c.o.threads = -1;
      }
      break;
    case kDqAliasesQ:
      o.dq.view = o.q.view;
      break;
    case kDkAliasesDv:
      o.dk.view = o.dv.view;
      break;
    default:
      break;
  }

  // Is the rejection certain? Some corruptions are no-ops on empty tensors.
  auto numel = [](const TensorView& v) {
    int64_t n = 1;
    for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
    return n;
  };
  bool expect_reject = c.corruption >= 0;
  bool grey = false;
  if (c.corruption == kOutAliasesQ || c.corruption == kDqAliasesQ) {
    grey = numel(o.q.view) == 0;
  } else if (c.corruption == kDkAliasesDv) {
    grey = numel(o.dv.view) == 0;
  } else if (c.corruption == kLseAliasesOut) {
    grey = numel(o.lse.view) == 0 || numel(o.out.view) == 0;
  } else if (c.corruption == kOutSelfOverlap) {
    grey = true;  // 0-sized dims may make the overlap empty
    const TensorView& v = c.backward ? o.dq.view : o.out.view;
    grey = numel(v) == 0;
  } else if (c.corruption == kNullData) {
    grey = numel(o.q.view) == 0 || numel(o.k.view) == 0;
  } else if (c.corruption == kBadSigmoidBias || c.corruption == kBadEps ||
             c.corruption == kBadSsmaxS || c.corruption == kBadPowerP) {
    expect_reject = true;  // options are validated whatever the normaliser
  } else if (c.corruption == kMaskShape) {
    grey = false;
  }

  g_dump = [&] {
    const char* names[] = {"q", "k", "v", "mask", "sinks", "alibi", "dout"};
    Buf* bs[] = {&o.q, &o.k, &o.v, &o.mask, &o.sinks, &o.alibi, &o.dout};
    for (int i = 0; i < 7; ++i) {
      if (bs[i]->view.dtype != DType::kF32 || bs[i]->view.data == nullptr) continue;
      std::fprintf(stderr, "  %s (%s):", names[i], bs[i]->layout.c_str());
      for (float x : dense(*bs[i])) std::fprintf(stderr, " %.9g", x);
      std::fprintf(stderr, "\n");
    }
  };
  smax::set_max_target(c.target);

  // The backward with a gate reads the forward's ungated output, and with
  // lse the forward's lse and out: computed here by the forward (into out,
  // ungated_out and lse, which the backward only reads), before the call
  // under test.
  if (c.backward && (c.gate || c.lse)) {
    Case fc = c;
    fc.backward = false;
    fc.capi = false;
    int st = 0;
    call(fc, o, c.o, &st);  // errors: the backward call below rejects too
  }

  // Snapshot every buffer; run.
  std::vector<Buf*> bufs = all_bufs(o);
  std::vector<std::vector<unsigned char>> before;
  for (Buf* b : bufs) before.push_back(b->bytes);
  int status = 0;
  const std::string err = call(c, o, c.o, &status);
  const char* opname = c.backward ? "attention_backward" : "attention";
  if (!err.empty()) {
    ++g_stats.rejected;
    if (!expect_reject && !grey) violation(c, "valid call rejected: " + err);
    if (grey) ++g_stats.grey;
    if (status != static_cast<int>(smax::Status::kInvalidArgument)) {
      violation(c, "rejected with status " + std::to_string(status) + ": " + err);
    }
    if (err.find(opname) == std::string::npos && err.find("attention") == std::string::npos) {
      violation(c, "error message does not name the op: " + err);
    }
    for (size_t i = 0; i < bufs.size(); ++i) {
      if (bufs[i]->bytes != before[i]) violation(c, "rejected call changed memory: " + err);
    }
    smax::set_max_target("");
    return;
  }
  if (expect_reject && !grey) violation(c, "invalid call accepted");
  ++g_stats.accepted;
  // Inputs unchanged, outputs' guards intact.
  std::vector<Buf*> outputs =
      c.backward ? std::vector<Buf*>{&o.dq, &o.dk, &o.dv}
                 : (c.lse ? std::vector<Buf*>{&o.out, &o.lse} : std::vector<Buf*>{&o.out});
  if (c.gate) outputs.push_back(c.backward ? &o.dgate : &o.ungated);
  if (c.ssmax_scales && c.backward) outputs.push_back(&o.dssmax);
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (std::find(outputs.begin(), outputs.end(), bufs[i]) != outputs.end()) continue;
    if (bufs[i]->bytes != before[i]) violation(c, "an input buffer changed");
  }
  static const char* const kNames[] = {"q",       "k",     "v",     "out",     "lse",
                                       "dout",    "dq",    "dk",    "dv",      "mask",
                                       "sinks",   "alibi", "seqlens", "block_table", "gate",
                                       "ungated_out", "dgate", "ssmax_scales", "dssmax_scales"};
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (std::find(outputs.begin(), outputs.end(), bufs[i]) != outputs.end()) {
      check_guards(c, *bufs[i], kNames[i]);
    }
  }
  if (grey) {
    smax::set_max_target("");
    return;
  }

  // Same bits with threads = 1.
  {
    std::vector<std::vector<float>> got;
    for (Buf* b : outputs) got.push_back(dense(*b));
    AttentionOptions o1 = c.o;
    o1.threads = 1;
    int st = 0;
    const std::string e1 = call(c, o, o1, &st);
    if (!e1.empty()) violation(c, "threads = 1 rejected: " + e1);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::vector<float> again = dense(*outputs[i]);
      for (size_t j = 0; j < again.size(); ++j) {
        const bool same = std::memcmp(&again[j], &got[i][j], 4) == 0 ||
                          (std::isnan(again[j]) && std::isnan(got[i][j]));
        if (!same) {
          violation(c, "threads = " + std::to_string(c.o.threads) +
                           " differs from threads = 1 at element " + std::to_string(j));
        }
      }
    }
  }

  // Against the float64 oracle.
  AttentionOptions ro = c.o;
  if (c.mask_kind) ro.attn_mask = o.mask.view;
  if (c.sinks) ro.sinks = o.sinks.view;
  if (!c.alibi_shape.empty()) ro.alibi_slopes = o.alibi.view;
  if (c.kv_cache == 1 || (c.kv_cache == 2 && c.paged_seqlens)) ro.cache_seqlens = o.seqlens.view;
  if (c.kv_cache == 2) ro.block_table = o.table.view;
  if (c.gate) ro.gate = o.gate.view;
  if (c.ssmax_scales) ro.ssmax_scales = o.ssmax.view;
  const auto p = ref::attention_problem(o.q.view, o.k.view, o.v.view, ro);
  const auto fr = ref::attention_forward(p);
  bool v_nonfinite = false;
  double vmax = 0;
  for (double x : p.v) {
    if (!std::isfinite(x)) v_nonfinite = true;
    else vmax = std::max(vmax, std::abs(x));
  }
  const std::vector<char> risky = risky_rows(p, fr, v_nonfinite, vmax);
  const int64_t rows = p.B * p.H * p.Lq;
  int64_t n_risky = 0;
  for (char x : risky) n_risky += x;
  g_stats.unchecked_rows += n_risky;
  const int64_t Gq = p.Hkv > 0 ? p.H / p.Hkv : 1;
  if (!c.backward) {
    const std::vector<float> out = dense(o.out);
    const std::vector<float> ungated = c.gate ? dense(o.ungated) : std::vector<float>();
    std::vector<double> w(static_cast<size_t>(p.Lk));
    for (int64_t row = 0; row < rows; ++row) {
      if (risky[static_cast<size_t>(row)]) continue;
      const int64_t bh = row / p.Lq, b = bh / p.H, h = bh % p.H;
      const double* V = p.v.data() + (b * p.Hkv + h / Gq) * p.Lk * p.Dv;
      ref::attention_bound_weights(p, fr, row, w.data());
      const double E = ref::attention_row_error(p, fr, row);
      for (int64_t cc = 0; cc < p.Dv; ++cc) {
        double W = 0;
        for (int64_t j = 0; j < p.Lk; ++j) W += w[j] * std::abs(V[j * p.Dv + cc]);
        const int64_t idx = row * p.Dv + cc;
        const size_t e = static_cast<size_t>(idx);
        const double bound = E * W + 1e-30;
        if (!c.gate) {
          check_element(c, "out", idx, out[e], fr.out[e], bound);
          continue;
        }
        // out = fl(a s), s = sigmoid(g) within 3 ulp: s * a's bound + 4 u |a s|.
        const double sg = 1.0 / (1.0 + std::exp(-p.gate[e]));
        check_element(c, "out", idx, out[e], fr.out[e],
                      sg * bound + 4 * kU * std::abs(fr.ungated[e] * sg) + 1e-30);
        check_element(c, "ungated_out", idx, ungated[e], fr.ungated[e], bound);
      }
      if (c.lse) {
        const std::vector<float> l = dense(o.lse);
        const double want = fr.lse[static_cast<size_t>(row)];
        // lse = m + log d: abs error <= Delta + (Lk + 8) u (|lse| + 1) (the f32 sum and log).
        const double bound = ref::attention_row_delta(p, fr, row) +
                             (static_cast<double>(p.Lk) + 8) * kU * (std::abs(want) + 1);
        check_element(c, "lse", row, l[static_cast<size_t>(row)], want, bound);
      }
    }
    count_checked(c);
  } else {
    if (n_risky == 0) {
      std::vector<double> g;
      for (float x : dense(o.dout)) g.push_back(x);
      const auto want = ref::attention_backward(p, g);
      const int64_t extra =
          (c.gate ? 2 : 0) + (c.lse ? ref::attention_backward_lse_extra(p) : 0);
      const double rel = ref::attention_backward_rel(p, fr, extra);
      auto grad = [&](const char* what, const Buf& b, const std::vector<double>& w,
                      const std::vector<double>& mag) {
        const std::vector<float> got = dense(b);
        for (size_t i = 0; i < w.size(); ++i) {
          if (mag[i] > kOverflowRisk) continue;
          check_element(c, what, static_cast<int64_t>(i), got[i], w[i], rel * mag[i] + 1e-30);
        }
      };
      grad("dq", o.dq, want.dq, want.dq_mag);
      grad("dk", o.dk, want.dk, want.dk_mag);
      grad("dv", o.dv, want.dv, want.dv_mag);
      const int64_t rows_bh = p.B * p.H * p.Lq;
      if (c.gate) {
        // dgate = sum over the gate's broadcast columns of dout a s (1 - s):
        // a's forward bound through |dout| s (1 - s), 8 u per term, the
        // final rounding.
        const std::vector<float> got = dense(o.dgate);
        const std::vector<double> abound = ref::attention_forward_bounds(p, fr);
        for (int64_t row = 0; row < rows_bh; ++row) {
          double sum = 0, err = 0;
          for (int64_t cc = 0; cc < p.Dv; ++cc) {
            const size_t e = static_cast<size_t>(row * p.Dv + cc);
            const double sg = 1.0 / (1.0 + std::exp(-p.gate[e]));
            sum += want.dgate[e];
            const double f = std::abs(g[e]) * sg * (1 - sg);  // 0 * an infinite bound: 0
            err += (f == 0.0 ? 0.0 : f * abound[e]) + 8 * kU * want.dgate_mag[e];
            if (c.gate == 1) {
              check_element(c, "dgate", static_cast<int64_t>(e), got[e], sum,
                            err + kU * std::abs(sum) + 1e-30);
              sum = err = 0;
            }
          }
          if (c.gate == 2) {
            check_element(c, "dgate", row, got[static_cast<size_t>(row)], sum,
                          err + kU * std::abs(sum) + 1e-30);
          }
        }
      }
      if (c.ssmax_scales) {
        // dssmax_scales[h] = the rows' dL/ds of head h, summed over b and i.
        const std::vector<float> got = dense(o.dssmax);
        for (int64_t h = 0; h < p.H; ++h) {
          double sum = 0, mag = 0;
          for (int64_t b = 0; b < p.B; ++b) {
            for (int64_t i = 0; i < p.Lq; ++i) {
              const size_t e = static_cast<size_t>((b * p.H + h) * p.Lq + i);
              sum += want.dssmax[e];
              mag += want.dssmax_mag[e];
            }
          }
          if (mag > kOverflowRisk) continue;
          check_element(c, "dssmax_scales", h, got[static_cast<size_t>(h)], sum,
                        rel * mag + kU * std::abs(sum) + 1e-30);
        }
      }
      count_checked(c);
    }
  }
  smax::set_max_target("");
}

}  // namespace smax_fuzz

// src/c_api/smax_c_attention.cc: C ABI of the fused attention
// (include/smax/attention.h): smax_attention, smax_attention_backward, the
// options struct and the normaliser names.
#include <cstddef>
#include <string>
#include <type_traits>

#include "c_api_internal.h"
#include "smax/attention.h"
#include "smax/c/smax.h"
#include "smax/error.h"

using namespace smax::capi;

static_assert(static_cast<int>(SMAX_ATTENTION_SOFTMAX) ==
                      static_cast<int>(smax::AttentionNormalizer::kSoftmax) &&
                  static_cast<int>(SMAX_ATTENTION_SIGMOID) ==
                      static_cast<int>(smax::AttentionNormalizer::kSigmoid) &&
                  static_cast<int>(SMAX_ATTENTION_SOFTPICK) ==
                      static_cast<int>(smax::AttentionNormalizer::kSoftpick) &&
                  static_cast<int>(SMAX_ATTENTION_SSMAX) ==
                      static_cast<int>(smax::AttentionNormalizer::kSsmax) &&
                  static_cast<int>(SMAX_ATTENTION_STABLEMAX) ==
                      static_cast<int>(smax::AttentionNormalizer::kStablemax) &&
                  static_cast<int>(SMAX_ATTENTION_SOFTPLUS) ==
                      static_cast<int>(smax::AttentionNormalizer::kSoftplus) &&
                  static_cast<int>(SMAX_ATTENTION_POWER) ==
                      static_cast<int>(smax::AttentionNormalizer::kPower),
              "attention normaliser values must mirror smax::AttentionNormalizer");

static_assert(static_cast<int>(SMAX_SIGMOID_BIAS_PER_ROW_VISIBLE) ==
                      static_cast<int>(smax::SigmoidBiasMode::kPerRowVisible) &&
                  static_cast<int>(SMAX_SIGMOID_BIAS_PER_SEQUENCE) ==
                      static_cast<int>(smax::SigmoidBiasMode::kPerSequence),
              "sigmoid bias modes must mirror smax::SigmoidBiasMode");

// The fields added after version 1 (sigmoid_bias_mode, reserved0) fill the
// struct to a multiple of its alignment, version 0.3's nine pointers follow
// them, then has_unified_max and unified_max, then version 0.4's two
// pointers, then version 0.5's power_p and reserved1: no implicit padding.
static_assert(offsetof(smax_attention_options, reserved1) + sizeof(int32_t) ==
                      sizeof(smax_attention_options) &&
                  offsetof(smax_attention_options, power_p) ==
                      offsetof(smax_attention_options, dssmax_scales) + sizeof(void*) &&
                  offsetof(smax_attention_options, ssmax_scales) ==
                      offsetof(smax_attention_options, unified_max) + sizeof(float) &&
                  offsetof(smax_attention_options, has_unified_max) ==
                      offsetof(smax_attention_options, dsigmoid_bias) + sizeof(void*) &&
                  offsetof(smax_attention_options, cache_seqlens) ==
                      offsetof(smax_attention_options, reserved0) + sizeof(int32_t),
              "smax_attention_options must have no padding");

static_assert(offsetof(smax_attention_options, struct_size) == 0 &&
                  std::is_same_v<decltype(smax_attention_options::struct_size), uint32_t> &&
                  std::is_standard_layout_v<smax_attention_options>,
              "struct_size must be the first member (uint32_t) of smax_attention_options");

namespace {

// The size of version 0.1's struct (before sigmoid_bias_mode): the smallest
// struct_size accepted; fields past struct_size take their defaults.
constexpr size_t kAttentionOptionsV1Size = offsetof(smax_attention_options, sigmoid_bias_mode);

smax::AttentionOptions to_attention(const smax_attention_options* p, const char* op) {
  smax::AttentionOptions out;
  if (checked(p, op, "params", "smax_attention_options", kAttentionOptionsV1Size) == nullptr) {
    return out;
  }
  // Fields past the caller's struct_size are absent (a version 0.1 caller).
  const auto has = [p](size_t offset) { return p->struct_size >= offset + sizeof(int32_t); };
  if (p->normalizer < SMAX_ATTENTION_SOFTMAX || p->normalizer > SMAX_ATTENTION_POWER) {
    fail(std::string(op) + ": params.normalizer has unknown value " +
         std::to_string(p->normalizer));
  }
  out.normalizer = static_cast<smax::AttentionNormalizer>(p->normalizer);
  out.scale = p->scale;
  out.is_causal = to_bool(p->is_causal, op, "params.is_causal");
  out.attn_mask = to_optional_view(p->attn_mask, op, "params.attn_mask");
  out.softcap = p->softcap;
  out.sinks = to_optional_view(p->sinks, op, "params.sinks");
  out.alibi_slopes = to_optional_view(p->alibi_slopes, op, "params.alibi_slopes");
  out.sigmoid_bias = p->sigmoid_bias;
  out.softpick_eps = p->softpick_eps;
  out.ssmax_s = p->ssmax_s;
  out.lse = to_optional_view(p->lse, op, "params.lse");
  if (p->empty_row != SMAX_EMPTY_ROW_ZERO && p->empty_row != SMAX_EMPTY_ROW_NAN) {
    fail(std::string(op) + ": params.empty_row has unknown value " +
         std::to_string(p->empty_row));
  }
  out.empty_row = static_cast<smax::EmptyRow>(p->empty_row);
  out.threads = p->threads;
  const int32_t mode = has(offsetof(smax_attention_options, sigmoid_bias_mode))
                           ? p->sigmoid_bias_mode
                           : SMAX_SIGMOID_BIAS_DEFAULT;
  if (mode < SMAX_SIGMOID_BIAS_DEFAULT || mode > SMAX_SIGMOID_BIAS_PER_ROW_VISIBLE) {
    fail(std::string(op) + ": params.sigmoid_bias_mode has unknown value " +
         std::to_string(mode));
  }
  if (mode != SMAX_SIGMOID_BIAS_DEFAULT) {
    out.sigmoid_bias_mode = static_cast<smax::SigmoidBiasMode>(mode);
  }
  const auto has_ptr = [p](size_t offset) { return p->struct_size >= offset + sizeof(void*); };
  if (has_ptr(offsetof(smax_attention_options, cache_seqlens))) {
    out.cache_seqlens = to_optional_view(p->cache_seqlens, op, "params.cache_seqlens");
  }
  if (has_ptr(offsetof(smax_attention_options, block_table))) {
    out.block_table = to_optional_view(p->block_table, op, "params.block_table");
  }
  if (has_ptr(offsetof(smax_attention_options, gate))) {
    out.gate = to_optional_view(p->gate, op, "params.gate");
  }
  if (has_ptr(offsetof(smax_attention_options, ungated_out))) {
    out.ungated_out = to_optional_view(p->ungated_out, op, "params.ungated_out");
  }
  if (has_ptr(offsetof(smax_attention_options, dgate))) {
    out.dgate = to_optional_view(p->dgate, op, "params.dgate");
  }
  if (has_ptr(offsetof(smax_attention_options, dattn_mask))) {
    out.dattn_mask = to_optional_view(p->dattn_mask, op, "params.dattn_mask");
  }
  if (has_ptr(offsetof(smax_attention_options, dsinks))) {
    out.dsinks = to_optional_view(p->dsinks, op, "params.dsinks");
  }
  if (has_ptr(offsetof(smax_attention_options, dalibi_slopes))) {
    out.dalibi_slopes = to_optional_view(p->dalibi_slopes, op, "params.dalibi_slopes");
  }
  if (has_ptr(offsetof(smax_attention_options, dsigmoid_bias))) {
    out.dsigmoid_bias = to_optional_view(p->dsigmoid_bias, op, "params.dsigmoid_bias");
  }
  if (has(offsetof(smax_attention_options, unified_max))) {
    const bool on = to_bool(p->has_unified_max, op, "params.has_unified_max");
    if (on) out.unified_max = p->unified_max;  // the C++ op checks it is finite
  }
  if (has_ptr(offsetof(smax_attention_options, ssmax_scales))) {
    out.ssmax_scales = to_optional_view(p->ssmax_scales, op, "params.ssmax_scales");
  }
  if (has_ptr(offsetof(smax_attention_options, dssmax_scales))) {
    out.dssmax_scales = to_optional_view(p->dssmax_scales, op, "params.dssmax_scales");
  }
  if (has(offsetof(smax_attention_options, power_p)) && p->power_p != 0) {
    out.power_p = p->power_p;  // the C++ op checks it is even and >= 2
  }
  if (has(offsetof(smax_attention_options, reserved1)) && p->reserved1 != 0) {
    throw smax::Error(smax::Status::kUnsupported,
                      std::string(op) + ": params.reserved1 is non-zero (a field of a newer "
                                        "smax_attention_options that this library does not know)");
  }
  if (has(offsetof(smax_attention_options, reserved0)) && p->reserved0 != 0) {
    throw smax::Error(smax::Status::kUnsupported,
                      std::string(op) + ": params.reserved0 is non-zero (a field of a newer "
                                        "smax_attention_options that this library does not know)");
  }
  return out;
}

}  // namespace

extern "C" {

void smax_attention_options_init(smax_attention_options* options) {
  smax::capi::init_struct<smax::AttentionOptions>(
      options, [](smax_attention_options& o, const smax::AttentionOptions& d) {
        o.normalizer = static_cast<int32_t>(d.normalizer);
        o.scale = d.scale;
        o.is_causal = d.is_causal ? 1 : 0;
        o.softcap = d.softcap;
        o.sigmoid_bias = d.sigmoid_bias;
        o.softpick_eps = d.softpick_eps;
        o.ssmax_s = d.ssmax_s;
        o.empty_row = static_cast<int32_t>(d.empty_row);
        o.threads = d.threads;
        o.sigmoid_bias_mode = SMAX_SIGMOID_BIAS_DEFAULT;  // d.sigmoid_bias_mode (unset)
        o.has_unified_max = 0;  // d.unified_max is NaN: off
        o.unified_max = 0.0f;
        o.power_p = d.power_p;
      });
}

const char* smax_attention_normalizer_name(int32_t normalizer) {
  if (normalizer < SMAX_ATTENTION_SOFTMAX || normalizer > SMAX_ATTENTION_POWER) {
    return "unknown";
  }
  return smax::attention_normalizer_name(static_cast<smax::AttentionNormalizer>(normalizer));
}

smax_status smax_attention_normalizer_parse(const char* name, int32_t* normalizer) {
  const char* op = "attention_normalizer_parse";
  return guarded([&] {
    if (name == nullptr) fail(std::string(op) + ": name is NULL");
    if (normalizer == nullptr) fail(std::string(op) + ": normalizer is NULL");
    *normalizer = static_cast<int32_t>(smax::parse_attention_normalizer(name));
  });
}

smax_status smax_attention(const smax_tensor* q, const smax_tensor* k, const smax_tensor* v,
                           const smax_tensor* out, const smax_attention_options* params) {
  return call("attention", &smax::attention, Tensor{q, "q"}, Tensor{k, "k"}, Tensor{v, "v"},
              Tensor{out, "out"}, with(to_attention, params));
}

smax_status smax_attention_backward(const smax_tensor* q, const smax_tensor* k,
                                    const smax_tensor* v, const smax_tensor* out,
                                    const smax_tensor* dout, const smax_tensor* dq,
                                    const smax_tensor* dk, const smax_tensor* dv,
                                    const smax_attention_options* params) {
  return call("attention_backward", &smax::attention_backward, Tensor{q, "q"}, Tensor{k, "k"},
              Tensor{v, "v"}, Tensor{out, "out"}, Tensor{dout, "dout"}, Tensor{dq, "dq"},
              Tensor{dk, "dk"}, Tensor{dv, "dv"}, with(to_attention, params));
}

}  // extern "C"

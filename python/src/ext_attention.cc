// python/src/ext_attention.cc: bindings of attention / attention_backward
// (smax/attention.h). Conventions: ext_common.h. The options `ao` are a
// smax._smax.AttentionOptions (PyAttentionOptions), scale / sigmoid_bias NaN
// for "default" and sigmoid_bias_mode "per_sequence" or "per_row_visible".
// Every floating operand (q, k, v, out, dout, dq, dk, dv, lse, an additive
// attn_mask, sinks, alibi_slopes) may be float32, float64, float16 or
// bfloat16, each on its own: the library computes in f32 and rounds each
// output once (docs/dtypes.md).
#include "ext_common.h"
#include "smax/attention.h"

namespace smax_py __attribute__((visibility("hidden"))) {

namespace {

struct AttnArgs {
  std::optional<In> mask, sinks, alibi, ssmax;
  smax::AttentionOptions o;
};

AttnArgs attn_options(const char* op, const std::optional<In>& mask,
                      const PyAttentionOptions& ao) {
  AttnArgs a;
  a.mask = mask;
  if (mask) {
    if (is_byte_mask(mask->dtype())) {
      a.o.attn_mask = to_view(*mask, op, "attn_mask", Want::kBool);
    } else if (is_float(mask->dtype())) {
      a.o.attn_mask = flt(*mask, op, "attn_mask");
    } else {
      throw nb::type_error((pre(op) + "attn_mask has dtype " +
                            dtype_label(mask->dtype()) +
                            ", expected bool (attend where true) or a floating dtype (additive: " +
                            kFloatDtypes + ")")
                               .c_str());
    }
  }
  a.o.is_causal = ao.is_causal;
  a.o.scale = static_cast<float>(ao.scale);
  a.o.softcap = static_cast<float>(ao.softcap);
  if (ao.sinks) {
    a.sinks = ao.sinks;
    a.o.sinks = flt(*a.sinks, op, "sinks");
  }
  if (ao.alibi_slopes) {
    a.alibi = ao.alibi_slopes;
    a.o.alibi_slopes = flt(*a.alibi, op, "alibi_slopes");
  }
  a.o.normalizer = smax::parse_attention_normalizer(ao.normalizer);
  a.o.sigmoid_bias = static_cast<float>(ao.sigmoid_bias);
  a.o.softpick_eps = static_cast<float>(ao.softpick_eps);
  a.o.ssmax_s = static_cast<float>(ao.ssmax_s);
  a.o.power_p = ao.power_p;
  a.o.unified_max = static_cast<float>(ao.unified_max);
  if (ao.ssmax_scales) {
    a.ssmax = ao.ssmax_scales;
    a.o.ssmax_scales = flt(*a.ssmax, op, "ssmax_scales");
  }
  a.o.empty_row = smax::parse_empty_row(ao.empty_row);
  if (ao.threads < 0) {
    throw nb::value_error((pre(op) + "threads must be >= 0 (0 = default), got " +
                           std::to_string(ao.threads))
                              .c_str());
  }
  a.o.threads = ao.threads;
  const std::string& mode = ao.sigmoid_bias_mode;
  if (mode == "per_sequence") {
    a.o.sigmoid_bias_mode = smax::SigmoidBiasMode::kPerSequence;
  } else if (mode == "per_row_visible") {
    a.o.sigmoid_bias_mode = smax::SigmoidBiasMode::kPerRowVisible;
  } else {
    throw nb::value_error((pre(op) +
                           "sigmoid_bias_mode must be 'per_sequence' or 'per_row_visible', got '" +
                           mode + "'")
                              .c_str());
  }
  return a;
}

}  // namespace

void def_attention(nb::module_& m) {
  m.def(
      "attention",
      [](const In& q, const In& k, const In& v, const Out& out, const std::optional<In>& mask,
         const std::optional<Out>& lse, const PyAttentionOptions& ao,
         const std::optional<In>& cache_seqlens, const std::optional<In>& block_table,
         const std::optional<In>& gate, const std::optional<Out>& ungated_out) {
        const char* op = "attention";
        AttnArgs a = attn_options(op, mask, ao);
        const auto qv = flt(q, op, "q");
        const auto kv = flt(k, op, "k");
        const auto vv = flt(v, op, "v");
        const auto ov = flto(out, op, "out");
        a.o.lse = opt_flto(lse, op, "lse");
        if (cache_seqlens) a.o.cache_seqlens = to_view(*cache_seqlens, op, "cache_seqlens", Want::kIndex);
        if (block_table) a.o.block_table = to_view(*block_table, op, "block_table", Want::kIndex);
        if (gate) a.o.gate = flt(*gate, op, "gate");
        a.o.ungated_out = opt_flto(ungated_out, op, "ungated_out");
        nb::gil_scoped_release r;
        smax::attention(qv, kv, vv, ov, a.o);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("attn_mask").none(),
      nb::arg("lse").none(), nb::arg("ao"), nb::arg("cache_seqlens").none() = nb::none(),
      nb::arg("block_table").none() = nb::none(), nb::arg("gate").none() = nb::none(),
      nb::arg("ungated_out").none() = nb::none());
  m.def(
      "attention_backward",
      [](const In& q, const In& k, const In& v, const In& out, const In& dout, const Out& dq,
         const Out& dk, const Out& dv, const std::optional<In>& mask,
         const PyAttentionOptions& ao, const std::optional<In>& gate,
         const std::optional<In>& ungated_out, const std::optional<Out>& dgate,
         const std::optional<Out>& dattn_mask, const std::optional<Out>& dsinks,
         const std::optional<Out>& dalibi_slopes, const std::optional<Out>& dsigmoid_bias,
         const std::optional<Out>& dssmax_scales, const std::optional<In>& lse) {
        const char* op = "attention_backward";
        AttnArgs a = attn_options(op, mask, ao);
        // The forward's lse (softmax): the backward from it (FlashAttention-2's).
        if (lse) {
          a.o.lse = flt(*lse, op, "lse");
          a.o.backward_from_lse = true;
        }
        if (gate) a.o.gate = flt(*gate, op, "gate");
        if (ungated_out) a.o.ungated_out = flt(*ungated_out, op, "ungated_out");
        a.o.dgate = opt_flto(dgate, op, "dgate");
        a.o.dattn_mask = opt_flto(dattn_mask, op, "dattn_mask");
        a.o.dsinks = opt_flto(dsinks, op, "dsinks");
        a.o.dalibi_slopes = opt_flto(dalibi_slopes, op, "dalibi_slopes");
        a.o.dsigmoid_bias = opt_flto(dsigmoid_bias, op, "dsigmoid_bias");
        a.o.dssmax_scales = opt_flto(dssmax_scales, op, "dssmax_scales");
        const auto qv = flt(q, op, "q");
        const auto kv = flt(k, op, "k");
        const auto vv = flt(v, op, "v");
        const auto ov = flt(out, op, "out");
        const auto gv = flt(dout, op, "dout");
        const auto dqv = flto(dq, op, "dq");
        const auto dkv = flto(dk, op, "dk");
        const auto dvv = flto(dv, op, "dv");
        nb::gil_scoped_release r;
        smax::attention_backward(qv, kv, vv, ov, gv, dqv, dkv, dvv, a.o);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("dout"), nb::arg("dq"),
      nb::arg("dk"), nb::arg("dv"), nb::arg("attn_mask").none(), nb::arg("ao"),
      nb::arg("gate").none() = nb::none(), nb::arg("ungated_out").none() = nb::none(),
      nb::arg("dgate").none() = nb::none(), nb::arg("dattn_mask").none() = nb::none(),
      nb::arg("dsinks").none() = nb::none(), nb::arg("dalibi_slopes").none() = nb::none(),
      nb::arg("dsigmoid_bias").none() = nb::none(),
      nb::arg("dssmax_scales").none() = nb::none(), nb::arg("lse").none() = nb::none());
}

}  // namespace smax_py

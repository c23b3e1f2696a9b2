// python/src/ext_attention.cc: bindings of attention / attention_backward
// (smax/attention.h). Conventions: ext_common.h. The options tuple is
//   ao = (is_causal, scale, softcap, sinks, alibi_slopes, normalizer,
//         sigmoid_bias, softpick_eps, ssmax_s, empty_row, threads,
//         sigmoid_bias_mode)
// with scale / sigmoid_bias NaN for "default" and sigmoid_bias_mode
// "per_sequence" or "per_row_visible".
#include "ext_common.h"
#include "smax/attention.h"

namespace smax_py __attribute__((visibility("hidden"))) {

namespace {

struct AttnArgs {
  std::optional<In> mask, sinks, alibi;
  smax::AttentionOptions o;
};

AttnArgs attn_options(const char* op, const std::optional<In>& mask, const nb::tuple& ao) {
  if (ao.size() != 12) throw nb::type_error((pre(op) + "bad options tuple").c_str());
  AttnArgs a;
  a.mask = mask;
  if (mask) {
    if (is_byte_mask(mask->dtype())) {
      a.o.attn_mask = to_view(*mask, op, "attn_mask", smax::DType::kBool);
    } else if (is_f32(mask->dtype())) {
      a.o.attn_mask = to_view(*mask, op, "attn_mask", smax::DType::kF32);
    } else {
      throw nb::type_error((pre(op) + "attn_mask has dtype " +
                            dtype_label(mask->dtype()) +
                            ", expected bool (attend where true) or float32 (additive)")
                               .c_str());
    }
  }
  a.o.is_causal = nb::cast<bool>(ao[0]);
  a.o.scale = static_cast<float>(nb::cast<double>(ao[1]));
  a.o.softcap = static_cast<float>(nb::cast<double>(ao[2]));
  if (!ao[3].is_none()) {
    a.sinks = nb::cast<In>(ao[3]);
    a.o.sinks = f32(*a.sinks, op, "sinks");
  }
  if (!ao[4].is_none()) {
    a.alibi = nb::cast<In>(ao[4]);
    a.o.alibi_slopes = f32(*a.alibi, op, "alibi_slopes");
  }
  a.o.normalizer = smax::parse_attention_normalizer(nb::cast<std::string>(ao[5]));
  a.o.sigmoid_bias = static_cast<float>(nb::cast<double>(ao[6]));
  a.o.softpick_eps = static_cast<float>(nb::cast<double>(ao[7]));
  a.o.ssmax_s = static_cast<float>(nb::cast<double>(ao[8]));
  a.o.empty_row = smax::parse_empty_row(nb::cast<std::string>(ao[9]));
  const int threads = nb::cast<int>(ao[10]);
  if (threads < 0) {
    throw nb::value_error((pre(op) + "threads must be >= 0 (0 = default), got " +
                           std::to_string(threads))
                              .c_str());
  }
  a.o.threads = threads;
  const std::string mode = nb::cast<std::string>(ao[11]);
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
         const std::optional<Out>& lse, const nb::tuple& ao) {
        const char* op = "attention";
        AttnArgs a = attn_options(op, mask, ao);
        const auto qv = f32(q, op, "q");
        const auto kv = f32(k, op, "k");
        const auto vv = f32(v, op, "v");
        const auto ov = f32o(out, op, "out");
        a.o.lse = opt_f32o(lse, op, "lse");
        nb::gil_scoped_release r;
        smax::attention(qv, kv, vv, ov, a.o);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("attn_mask").none(),
      nb::arg("lse").none(), nb::arg("ao"));
  m.def(
      "attention_backward",
      [](const In& q, const In& k, const In& v, const In& out, const In& dout, const Out& dq,
         const Out& dk, const Out& dv, const std::optional<In>& mask, const nb::tuple& ao) {
        const char* op = "attention_backward";
        const AttnArgs a = attn_options(op, mask, ao);
        const auto qv = f32(q, op, "q");
        const auto kv = f32(k, op, "k");
        const auto vv = f32(v, op, "v");
        const auto ov = f32(out, op, "out");
        const auto gv = f32(dout, op, "dout");
        const auto dqv = f32o(dq, op, "dq");
        const auto dkv = f32o(dk, op, "dk");
        const auto dvv = f32o(dv, op, "dv");
        nb::gil_scoped_release r;
        smax::attention_backward(qv, kv, vv, ov, gv, dqv, dkv, dvv, a.o);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("dout"), nb::arg("dq"),
      nb::arg("dk"), nb::arg("dv"), nb::arg("attn_mask").none(), nb::arg("ao"));
}

}  // namespace smax_py

// src/c_api/smax_c_quantized.cc: C ABI of the integer softmaxes
// (include/smax/quantized.h): int_softmax, shiftmax, qlinear_softmax and
// their options structs (converted here, validated by the C++ ops).
#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/quantized.h"

using namespace smax::capi;

namespace {

smax::QuantizedOptions to_quantized(const smax_quantized_options* p, const char* op) {
  return from_struct<smax::QuantizedOptions>(p, op, "options", "smax_quantized_options",
                                             [](const auto& c, auto& o) {
                                               o.axis = c.axis;
                                               o.threads = c.threads;
                                             });
}

smax::IntSoftmaxOptions to_int_softmax(const smax_int_softmax_options* p, const char* op) {
  return from_struct<smax::IntSoftmaxOptions>(p, op, "params", "smax_int_softmax_options",
                                              [](const auto& c, auto& o) {
                                                o.scaling_factor = c.scaling_factor;
                                                o.output_bit = c.output_bit;
                                              });
}

smax::ShiftmaxOptions to_shiftmax(const smax_shiftmax_options* p, const char* op) {
  return from_struct<smax::ShiftmaxOptions>(p, op, "params", "smax_shiftmax_options",
                                            [](const auto& c, auto& o) {
                                              o.scaling_factor = c.scaling_factor;
                                              o.output_bit = c.output_bit;
                                            });
}

smax::QLinearSoftmaxOptions to_qlinear(const smax_qlinear_softmax_options* p, const char* op) {
  return from_struct<smax::QLinearSoftmaxOptions>(
      p, op, "params", "smax_qlinear_softmax_options", [op](const auto& c, auto& o) {
        o.x_scale = c.x_scale;
        o.x_zero_point = c.x_zero_point;
        o.y_scale = c.y_scale;
        o.y_zero_point = c.y_zero_point;
        o.bias_correction = to_bool(c.bias_correction, op, "bias_correction");
      });
}

}  // namespace

extern "C" {

void smax_quantized_options_init(smax_quantized_options* options) {
  init_struct<smax::QuantizedOptions>(options, [](auto& o, const auto& d) {
    o.axis = d.axis;
    o.threads = d.threads;
  });
}
void smax_int_softmax_options_init(smax_int_softmax_options* options) {
  init_struct<smax::IntSoftmaxOptions>(options, [](auto& o, const auto& d) {
    o.scaling_factor = d.scaling_factor;
    o.output_bit = d.output_bit;
  });
}
void smax_shiftmax_options_init(smax_shiftmax_options* options) {
  init_struct<smax::ShiftmaxOptions>(options, [](auto& o, const auto& d) {
    o.scaling_factor = d.scaling_factor;
    o.output_bit = d.output_bit;
  });
}
void smax_qlinear_softmax_options_init(smax_qlinear_softmax_options* options) {
  init_struct<smax::QLinearSoftmaxOptions>(options, [](auto& o, const auto& d) {
    o.x_scale = d.x_scale;
    o.x_zero_point = d.x_zero_point;
    o.y_scale = d.y_scale;
    o.y_zero_point = d.y_zero_point;
    o.bias_correction = d.bias_correction ? 1 : 0;
  });
}

smax_status smax_int_softmax(const smax_tensor* src, const smax_tensor* dst,
                             const smax_int_softmax_options* params,
                             const smax_quantized_options* options) {
  return call("int_softmax", &smax::int_softmax, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_int_softmax, params), with(to_quantized, options));
}
smax_status smax_shiftmax(const smax_tensor* src, const smax_tensor* dst,
                          const smax_shiftmax_options* params,
                          const smax_quantized_options* options) {
  return call("shiftmax", &smax::shiftmax, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_shiftmax, params), with(to_quantized, options));
}
smax_status smax_qlinear_softmax(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_qlinear_softmax_options* params,
                                 const smax_quantized_options* options) {
  return call("qlinear_softmax", &smax::qlinear_softmax, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_qlinear, params), with(to_quantized, options));
}

}  // extern "C"

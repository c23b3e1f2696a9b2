// src/c_api/smax_c_reweight.cc: C ABI of the re-weighting normalisers
// (include/smax/reweight.h): SA-Softmax, the sigmoid and softplus (LSSA)
// normalisers, Power-Softmax, probability-domain temperature and logit
// standardisation, with their backward passes.
#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/reweight.h"

using namespace smax::capi;

namespace {

smax::SelfAdjustOptions to_self_adjust(const smax_self_adjust_options* p, const char* op) {
  return from_struct<smax::SelfAdjustOptions>(
      p, op, "params", "smax_self_adjust_options", [op](const auto& c, auto& o) {
        o.normalized = to_bool(c.normalized, op, "params.normalized");
        o.grad_through_bounds = to_bool(c.grad_through_bounds, op, "params.grad_through_bounds");
      });
}

smax::SigmoidNormalizerOptions to_sigmoid(const smax_sigmoid_normalizer_options* p,
                                          const char* op) {
  return from_struct<smax::SigmoidNormalizerOptions>(
      p, op, "params", "smax_sigmoid_normalizer_options", [op](const auto& c, auto& o) {
        if (to_bool(c.has_bias, op, "params.has_bias")) o.bias = c.bias;
        o.count_visible = to_bool(c.count_visible, op, "params.count_visible");
        o.n_fixed = c.n_fixed;
      });
}

smax::SoftplusNormalizerOptions to_softplus(const smax_softplus_normalizer_options* p,
                                            const char* op) {
  return from_struct<smax::SoftplusNormalizerOptions>(
      p, op, "params", "smax_softplus_normalizer_options", [op](const auto& c, auto& o) {
        if (to_bool(c.has_lambda, op, "params.has_lambda")) o.lambda = c.lambda;
        o.power = c.power;
        o.head_dim = c.head_dim;
      });
}

smax::LogitStandardizationOptions to_standardization(
    const smax_logit_standardization_options* p, const char* op) {
  return from_struct<smax::LogitStandardizationOptions>(
      p, op, "params", "smax_logit_standardization_options", [op](const auto& c, auto& o) {
        o.temperature = c.temperature;
        o.eps = c.eps;
        o.unbiased = to_bool(c.unbiased, op, "params.unbiased");
      });
}

}  // namespace

extern "C" {

void smax_self_adjust_options_init(smax_self_adjust_options* options) {
  init_struct<smax::SelfAdjustOptions>(options, [](auto& o, const auto& d) {
    o.normalized = d.normalized ? 1 : 0;
    o.grad_through_bounds = d.grad_through_bounds ? 1 : 0;
  });
}

void smax_sigmoid_normalizer_options_init(smax_sigmoid_normalizer_options* options) {
  init_struct<smax::SigmoidNormalizerOptions>(options, [](auto& o, const auto& d) {
    o.has_bias = d.bias.has_value() ? 1 : 0;
    o.bias = d.bias.value_or(0.0f);
    o.count_visible = d.count_visible ? 1 : 0;
    o.n_fixed = d.n_fixed;
  });
}

void smax_softplus_normalizer_options_init(smax_softplus_normalizer_options* options) {
  init_struct<smax::SoftplusNormalizerOptions>(options, [](auto& o, const auto& d) {
    o.has_lambda = d.lambda.has_value() ? 1 : 0;
    o.lambda = d.lambda.value_or(0.0f);
    o.power = d.power;
    o.head_dim = d.head_dim;
  });
}

void smax_logit_standardization_options_init(smax_logit_standardization_options* options) {
  init_struct<smax::LogitStandardizationOptions>(options, [](auto& o, const auto& d) {
    o.temperature = d.temperature;
    o.eps = d.eps;
    o.unbiased = d.unbiased ? 1 : 0;
  });
}

// ---- SA-Softmax ------------------------------------------------------------------

smax_status smax_self_adjust_softmax(const smax_tensor* src, const smax_tensor* dst,
                                     const smax_self_adjust_options* params,
                                     const smax_softmax_options* options) {
  return call("self_adjust_softmax", &smax::self_adjust_softmax, Tensor{src, "src"},
              Tensor{dst, "dst"}, with(to_self_adjust, params), options);
}
smax_status smax_self_adjust_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                              const smax_tensor* dsrc,
                                              const smax_self_adjust_options* params,
                                              const smax_softmax_options* options) {
  return call("self_adjust_softmax_backward", &smax::self_adjust_softmax_backward,
              Tensor{src, "src"}, Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"},
              with(to_self_adjust, params), options);
}

// ---- sigmoid normaliser ----------------------------------------------------------

smax_status smax_sigmoid_normalizer(const smax_tensor* src, const smax_tensor* dst,
                                    const smax_sigmoid_normalizer_options* params,
                                    const smax_softmax_options* options) {
  return call("sigmoid_normalizer", &smax::sigmoid_normalizer, Tensor{src, "src"},
              Tensor{dst, "dst"}, with(to_sigmoid, params), options);
}
smax_status smax_sigmoid_normalizer_backward(const smax_tensor* y, const smax_tensor* dy,
                                             const smax_tensor* dsrc,
                                             const smax_softmax_options* options) {
  return call("sigmoid_normalizer_backward", &smax::sigmoid_normalizer_backward, Tensor{y, "y"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, options);
}

// ---- softplus normaliser (LSSA) --------------------------------------------------

smax_status smax_softplus_normalizer(const smax_tensor* src, const smax_tensor* dst,
                                     const smax_softplus_normalizer_options* params,
                                     const smax_softmax_options* options) {
  return call("softplus_normalizer", &smax::softplus_normalizer, Tensor{src, "src"},
              Tensor{dst, "dst"}, with(to_softplus, params), options);
}
smax_status smax_softplus_normalizer_backward(const smax_tensor* src, const smax_tensor* dy,
                                              const smax_tensor* dsrc,
                                              const smax_softplus_normalizer_options* params,
                                              const smax_softmax_options* options) {
  return call("softplus_normalizer_backward", &smax::softplus_normalizer_backward,
              Tensor{src, "src"}, Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"},
              with(to_softplus, params), options);
}

// ---- Power-Softmax ---------------------------------------------------------------

smax_status smax_power_softmax(const smax_tensor* src, const smax_tensor* dst, int32_t p,
                               const smax_softmax_options* options) {
  return call("power_softmax", &smax::power_softmax, Tensor{src, "src"}, Tensor{dst, "dst"}, p,
              options);
}
smax_status smax_power_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                        const smax_tensor* dsrc, int32_t p,
                                        const smax_softmax_options* options) {
  return call("power_softmax_backward", &smax::power_softmax_backward, Tensor{src, "src"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, p, options);
}

// ---- probability-domain temperature ------------------------------------------------

smax_status smax_probability_temperature(const smax_tensor* p_src, const smax_tensor* dst,
                                         float T, const smax_softmax_options* options) {
  return call("probability_temperature", &smax::probability_temperature,
              Tensor{p_src, "p_src"}, Tensor{dst, "dst"}, T, options);
}
smax_status smax_probability_temperature_backward(const smax_tensor* p_src,
                                                  const smax_tensor* dy,
                                                  const smax_tensor* dsrc, float T,
                                                  const smax_softmax_options* options) {
  return call("probability_temperature_backward", &smax::probability_temperature_backward,
              Tensor{p_src, "p_src"}, Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, T, options);
}

// ---- logit standardisation ---------------------------------------------------------

smax_status smax_logit_standardization(const smax_tensor* src, const smax_tensor* dst,
                                       const smax_logit_standardization_options* params,
                                       const smax_softmax_options* options) {
  return call("logit_standardization", &smax::logit_standardization, Tensor{src, "src"},
              Tensor{dst, "dst"}, with(to_standardization, params), options);
}
smax_status smax_logit_standardization_backward(
    const smax_tensor* src, const smax_tensor* dy, const smax_tensor* dsrc,
    const smax_logit_standardization_options* params, const smax_softmax_options* options) {
  return call("logit_standardization_backward", &smax::logit_standardization_backward,
              Tensor{src, "src"}, Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"},
              with(to_standardization, params), options);
}

}  // extern "C"

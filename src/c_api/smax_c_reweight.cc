// src/c_api/smax_c_reweight.cc: C ABI of the re-weighting normalisers
// (include/smax/reweight.h): SA-Softmax, the sigmoid and softplus (LSSA)
// normalisers, Power-Softmax, probability-domain temperature and logit
// standardisation, with their backward passes.
#include <cstring>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/reweight.h"

using smax::capi::checked;
using smax::capi::guarded;
using smax::capi::to_bool;
using smax::capi::to_options;
using smax::capi::to_view;

namespace {

smax::SelfAdjustOptions to_self_adjust(const smax_self_adjust_options* p, const char* op) {
  smax::SelfAdjustOptions out;
  if (checked(p, op, "params", "smax_self_adjust_options") == nullptr) return out;
  out.normalized = to_bool(p->normalized, op, "params.normalized");
  out.grad_through_bounds = to_bool(p->grad_through_bounds, op, "params.grad_through_bounds");
  return out;
}

smax::SigmoidNormalizerOptions to_sigmoid(const smax_sigmoid_normalizer_options* p,
                                          const char* op) {
  smax::SigmoidNormalizerOptions out;
  if (checked(p, op, "params", "smax_sigmoid_normalizer_options") == nullptr) return out;
  if (to_bool(p->has_bias, op, "params.has_bias")) out.bias = p->bias;
  out.count_visible = to_bool(p->count_visible, op, "params.count_visible");
  out.n_fixed = p->n_fixed;
  return out;
}

smax::SoftplusNormalizerOptions to_softplus(const smax_softplus_normalizer_options* p,
                                            const char* op) {
  smax::SoftplusNormalizerOptions out;
  if (checked(p, op, "params", "smax_softplus_normalizer_options") == nullptr) return out;
  if (to_bool(p->has_lambda, op, "params.has_lambda")) out.lambda = p->lambda;
  out.power = p->power;
  out.head_dim = p->head_dim;
  return out;
}

smax::LogitStandardizationOptions to_standardization(
    const smax_logit_standardization_options* p, const char* op) {
  smax::LogitStandardizationOptions out;
  if (checked(p, op, "params", "smax_logit_standardization_options") == nullptr) return out;
  out.temperature = p->temperature;
  out.eps = p->eps;
  out.unbiased = to_bool(p->unbiased, op, "params.unbiased");
  return out;
}

// op(src, dst, params, options) and op(src, dy, dsrc, params, options) for the
// ops whose parameters come in a struct.
template <typename Params, typename CParams, typename Convert, typename Fn>
smax_status forward_with(const char* op, Fn fn, Convert convert, const smax_tensor* src,
                         const smax_tensor* dst, const CParams* params,
                         const smax_softmax_options* options) noexcept {
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    const Params p = convert(params, op);
    fn(s, d, p, to_options(options, op));
  });
}

template <typename Params, typename CParams, typename Convert, typename Fn>
smax_status backward_with(const char* op, Fn fn, Convert convert, const smax_tensor* src,
                          const smax_tensor* dy, const smax_tensor* dsrc, const CParams* params,
                          const smax_softmax_options* options) noexcept {
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const Params p = convert(params, op);
    fn(s, vdy, d, p, to_options(options, op));
  });
}

}  // namespace

extern "C" {

void smax_self_adjust_options_init(smax_self_adjust_options* options) {
  if (options == nullptr) return;
  const smax::SelfAdjustOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->normalized = d.normalized ? 1 : 0;
  options->grad_through_bounds = d.grad_through_bounds ? 1 : 0;
}

void smax_sigmoid_normalizer_options_init(smax_sigmoid_normalizer_options* options) {
  if (options == nullptr) return;
  const smax::SigmoidNormalizerOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->has_bias = d.bias.has_value() ? 1 : 0;
  options->bias = d.bias.value_or(0.0f);
  options->count_visible = d.count_visible ? 1 : 0;
  options->n_fixed = d.n_fixed;
}

void smax_softplus_normalizer_options_init(smax_softplus_normalizer_options* options) {
  if (options == nullptr) return;
  const smax::SoftplusNormalizerOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->has_lambda = d.lambda.has_value() ? 1 : 0;
  options->lambda = d.lambda.value_or(0.0f);
  options->power = d.power;
  options->head_dim = d.head_dim;
}

void smax_logit_standardization_options_init(smax_logit_standardization_options* options) {
  if (options == nullptr) return;
  const smax::LogitStandardizationOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->temperature = d.temperature;
  options->eps = d.eps;
  options->unbiased = d.unbiased ? 1 : 0;
}

// ---- SA-Softmax ------------------------------------------------------------------

smax_status smax_self_adjust_softmax(const smax_tensor* src, const smax_tensor* dst,
                                     const smax_self_adjust_options* params,
                                     const smax_softmax_options* options) {
  return forward_with<smax::SelfAdjustOptions>("self_adjust_softmax", &smax::self_adjust_softmax,
                                               &to_self_adjust, src, dst, params, options);
}
smax_status smax_self_adjust_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                              const smax_tensor* dsrc,
                                              const smax_self_adjust_options* params,
                                              const smax_softmax_options* options) {
  return backward_with<smax::SelfAdjustOptions>("self_adjust_softmax_backward",
                                                &smax::self_adjust_softmax_backward,
                                                &to_self_adjust, src, dy, dsrc, params, options);
}

// ---- sigmoid normaliser ----------------------------------------------------------

smax_status smax_sigmoid_normalizer(const smax_tensor* src, const smax_tensor* dst,
                                    const smax_sigmoid_normalizer_options* params,
                                    const smax_softmax_options* options) {
  return forward_with<smax::SigmoidNormalizerOptions>("sigmoid_normalizer",
                                                      &smax::sigmoid_normalizer, &to_sigmoid,
                                                      src, dst, params, options);
}
smax_status smax_sigmoid_normalizer_backward(const smax_tensor* y, const smax_tensor* dy,
                                             const smax_tensor* dsrc,
                                             const smax_softmax_options* options) {
  return smax::capi::ternary_op(&smax::sigmoid_normalizer_backward, "sigmoid_normalizer_backward",
                                y, "y", dy, "dy", dsrc, "dsrc", options);
}

// ---- softplus normaliser (LSSA) --------------------------------------------------

smax_status smax_softplus_normalizer(const smax_tensor* src, const smax_tensor* dst,
                                     const smax_softplus_normalizer_options* params,
                                     const smax_softmax_options* options) {
  return forward_with<smax::SoftplusNormalizerOptions>("softplus_normalizer",
                                                       &smax::softplus_normalizer, &to_softplus,
                                                       src, dst, params, options);
}
smax_status smax_softplus_normalizer_backward(const smax_tensor* src, const smax_tensor* dy,
                                              const smax_tensor* dsrc,
                                              const smax_softplus_normalizer_options* params,
                                              const smax_softmax_options* options) {
  return backward_with<smax::SoftplusNormalizerOptions>(
      "softplus_normalizer_backward", &smax::softplus_normalizer_backward, &to_softplus, src, dy,
      dsrc, params, options);
}

// ---- Power-Softmax ---------------------------------------------------------------

smax_status smax_power_softmax(const smax_tensor* src, const smax_tensor* dst, int32_t p,
                               const smax_softmax_options* options) {
  const char* op = "power_softmax";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    smax::power_softmax(s, d, p, to_options(options, op));
  });
}
smax_status smax_power_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                        const smax_tensor* dsrc, int32_t p,
                                        const smax_softmax_options* options) {
  const char* op = "power_softmax_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    smax::power_softmax_backward(s, vdy, d, p, to_options(options, op));
  });
}

// ---- probability-domain temperature ------------------------------------------------

smax_status smax_probability_temperature(const smax_tensor* p_src, const smax_tensor* dst,
                                         float T, const smax_softmax_options* options) {
  const char* op = "probability_temperature";
  return guarded([&] {
    const smax::TensorView s = to_view(p_src, op, "p_src");
    const smax::TensorView d = to_view(dst, op, "dst");
    smax::probability_temperature(s, d, T, to_options(options, op));
  });
}
smax_status smax_probability_temperature_backward(const smax_tensor* p_src,
                                                  const smax_tensor* dy,
                                                  const smax_tensor* dsrc, float T,
                                                  const smax_softmax_options* options) {
  const char* op = "probability_temperature_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(p_src, op, "p_src");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    smax::probability_temperature_backward(s, vdy, d, T, to_options(options, op));
  });
}

// ---- logit standardisation ---------------------------------------------------------

smax_status smax_logit_standardization(const smax_tensor* src, const smax_tensor* dst,
                                       const smax_logit_standardization_options* params,
                                       const smax_softmax_options* options) {
  return forward_with<smax::LogitStandardizationOptions>(
      "logit_standardization", &smax::logit_standardization, &to_standardization, src, dst,
      params, options);
}
smax_status smax_logit_standardization_backward(
    const smax_tensor* src, const smax_tensor* dy, const smax_tensor* dsrc,
    const smax_logit_standardization_options* params, const smax_softmax_options* options) {
  return backward_with<smax::LogitStandardizationOptions>(
      "logit_standardization_backward", &smax::logit_standardization_backward,
      &to_standardization, src, dy, dsrc, params, options);
}

}  // extern "C"

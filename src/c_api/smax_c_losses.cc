// src/c_api/smax_c_losses.cc: C ABI of the fused losses
// (include/smax/cross_entropy.h, include/smax/linear_cross_entropy.h):
// cross-entropy, the PaLM and spherical z-losses, and the fused linear +
// cross-entropy.
#include <optional>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/cross_entropy.h"
#include "smax/linear_cross_entropy.h"

using namespace smax::capi;
using smax::TensorView;

namespace {

// The C cross-entropy options plus the separately passed loss options.
smax::CrossEntropyOptions to_ce(const smax_cross_entropy_options* p,
                                const smax_loss_options* loss, const char* op) {
  smax::CrossEntropyOptions out = from_struct<smax::CrossEntropyOptions>(
      p, op, "ce", "smax_cross_entropy_options", [op](const auto& c, auto& o) {
        o.label_smoothing = c.label_smoothing;
        o.lse_square_scale = c.lse_square_scale;
        o.softcap = c.softcap;
        o.z_loss = to_optional_view(c.z_loss, op, "ce.z_loss");
        o.lse = to_optional_view(c.lse, op, "ce.lse");
        o.entropy = to_optional_view(c.entropy, op, "ce.entropy");
        o.target_logprob = to_optional_view(c.target_logprob, op, "ce.target_logprob");
        o.accuracy = to_optional_view(c.accuracy, op, "ce.accuracy");
        o.grad = to_optional_view(c.grad, op, "ce.grad");
      });
  out.loss = to_loss(loss, op);
  return out;
}

smax::LinearCrossEntropyOptions to_lce(const smax_linear_cross_entropy_options* p,
                                       const char* op) {
  return from_struct<smax::LinearCrossEntropyOptions>(
      p, op, "lce", "smax_linear_cross_entropy_options", [](const auto& c, auto& o) {
        o.token_chunk = c.token_chunk;
        o.vocab_chunk = c.vocab_chunk;
      });
}

// z_loss and its backward pass without or with a target (overloads in C++).
void z_loss_any(const TensorView& src, const std::optional<TensorView>& target,
                const TensorView& dst, float coefficient, const smax::LossOptions& loss,
                const smax::SoftmaxOptions& options) {
  if (target) {
    smax::z_loss(src, *target, dst, coefficient, loss, options);
  } else {
    smax::z_loss(src, dst, coefficient, loss, options);
  }
}

void z_loss_backward_any(const TensorView& src, const std::optional<TensorView>& target,
                         const TensorView& dloss, const TensorView& dsrc, float coefficient,
                         const smax::LossOptions& loss, const smax::SoftmaxOptions& options) {
  if (target) {
    smax::z_loss_backward(src, *target, dloss, dsrc, coefficient, loss, options);
  } else {
    smax::z_loss_backward(src, dloss, dsrc, coefficient, loss, options);
  }
}

}  // namespace

extern "C" {

void smax_cross_entropy_options_init(smax_cross_entropy_options* options) {
  init_struct<smax::CrossEntropyOptions>(options, [](auto& o, const auto& d) {
    o.label_smoothing = d.label_smoothing;
    o.lse_square_scale = d.lse_square_scale;
    o.softcap = d.softcap;
  });
}

void smax_linear_cross_entropy_options_init(smax_linear_cross_entropy_options* options) {
  init_struct<smax::LinearCrossEntropyOptions>(options, [](auto& o, const auto& d) {
    o.token_chunk = d.token_chunk;
    o.vocab_chunk = d.vocab_chunk;
  });
}

// ---- cross-entropy -------------------------------------------------------------------

smax_status smax_cross_entropy(const smax_tensor* src, const smax_tensor* target,
                               const smax_tensor* dst, const smax_cross_entropy_options* ce,
                               const smax_loss_options* loss,
                               const smax_softmax_options* options) {
  return call("cross_entropy", &smax::cross_entropy, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dst, "dst"}, with(to_ce, ce, loss), options);
}

smax_status smax_cross_entropy_backward(const smax_tensor* src, const smax_tensor* target,
                                        const smax_tensor* dloss, const smax_tensor* dsrc,
                                        const smax_cross_entropy_options* ce,
                                        const smax_loss_options* loss,
                                        const smax_softmax_options* options) {
  return call("cross_entropy_backward", &smax::cross_entropy_backward, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dloss, "dloss"}, Tensor{dsrc, "dsrc"},
              with(to_ce, ce, loss), options);
}

// ---- z-losses ------------------------------------------------------------------------

smax_status smax_z_loss(const smax_tensor* src, const smax_tensor* target,
                        const smax_tensor* dst, float coefficient,
                        const smax_loss_options* loss, const smax_softmax_options* options) {
  return call("z_loss", &z_loss_any, Tensor{src, "src"}, OptionalTensor{target, "target"},
              Tensor{dst, "dst"}, coefficient, loss, options);
}

smax_status smax_z_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                 const smax_tensor* dloss, const smax_tensor* dsrc,
                                 float coefficient, const smax_loss_options* loss,
                                 const smax_softmax_options* options) {
  return call("z_loss_backward", &z_loss_backward_any, Tensor{src, "src"},
              OptionalTensor{target, "target"}, Tensor{dloss, "dloss"}, Tensor{dsrc, "dsrc"},
              coefficient, loss, options);
}

smax_status smax_spherical_z_loss(const smax_tensor* src, const smax_tensor* target,
                                  const smax_tensor* dst, float a, float b,
                                  const smax_loss_options* loss,
                                  const smax_softmax_options* options) {
  return call("spherical_z_loss", &smax::spherical_z_loss, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dst, "dst"}, a, b, loss, options);
}

smax_status smax_spherical_z_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                           const smax_tensor* dloss, const smax_tensor* dsrc,
                                           float a, float b, const smax_loss_options* loss,
                                           const smax_softmax_options* options) {
  return call("spherical_z_loss_backward", &smax::spherical_z_loss_backward, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dloss, "dloss"}, Tensor{dsrc, "dsrc"}, a, b, loss,
              options);
}

// ---- fused linear + cross-entropy --------------------------------------------------------

smax_status smax_linear_cross_entropy(const smax_tensor* hidden, const smax_tensor* weight,
                                      const smax_tensor* target, const smax_tensor* bias,
                                      const smax_tensor* dst,
                                      const smax_cross_entropy_options* ce,
                                      const smax_linear_cross_entropy_options* lce,
                                      const smax_loss_options* loss,
                                      const smax_softmax_options* options) {
  return call("linear_cross_entropy", &smax::linear_cross_entropy, Tensor{hidden, "hidden"},
              Tensor{weight, "weight"}, Tensor{target, "target"}, OptionalTensor{bias, "bias"},
              Tensor{dst, "dst"}, with(to_ce, ce, loss), with(to_lce, lce), options);
}

smax_status smax_linear_cross_entropy_backward(
    const smax_tensor* hidden, const smax_tensor* weight, const smax_tensor* target,
    const smax_tensor* bias, const smax_tensor* dloss, const smax_tensor* dhidden,
    const smax_tensor* dweight, const smax_tensor* dbias, const smax_cross_entropy_options* ce,
    const smax_linear_cross_entropy_options* lce, const smax_loss_options* loss,
    const smax_softmax_options* options) {
  return call("linear_cross_entropy_backward", &smax::linear_cross_entropy_backward,
              Tensor{hidden, "hidden"}, Tensor{weight, "weight"}, Tensor{target, "target"},
              OptionalTensor{bias, "bias"}, Tensor{dloss, "dloss"}, Tensor{dhidden, "dhidden"},
              Tensor{dweight, "dweight"}, OptionalTensor{dbias, "dbias"}, with(to_ce, ce, loss),
              with(to_lce, lce), options);
}

smax_status smax_linear_cross_entropy_fused(
    const smax_tensor* hidden, const smax_tensor* weight, const smax_tensor* target,
    const smax_tensor* bias, const smax_tensor* dst, const smax_tensor* dloss,
    const smax_tensor* dhidden, const smax_tensor* dweight, const smax_tensor* dbias,
    const smax_cross_entropy_options* ce, const smax_linear_cross_entropy_options* lce,
    const smax_loss_options* loss, const smax_softmax_options* options) {
  return call("linear_cross_entropy_fused", &smax::linear_cross_entropy_fused,
              Tensor{hidden, "hidden"}, Tensor{weight, "weight"}, Tensor{target, "target"},
              OptionalTensor{bias, "bias"}, Tensor{dst, "dst"}, Tensor{dloss, "dloss"},
              Tensor{dhidden, "dhidden"}, Tensor{dweight, "dweight"},
              OptionalTensor{dbias, "dbias"}, with(to_ce, ce, loss), with(to_lce, lce), options);
}

}  // extern "C"

// src/c_api/smax_c_losses.cc: C ABI of the fused losses
// (include/smax/cross_entropy.h, include/smax/linear_cross_entropy.h):
// cross-entropy, the PaLM and spherical z-losses, and the fused linear +
// cross-entropy.
#include <cstring>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/cross_entropy.h"
#include "smax/linear_cross_entropy.h"

using smax::capi::checked;
using smax::capi::guarded;
using smax::capi::to_loss;
using smax::capi::to_optional_view;
using smax::capi::to_options;
using smax::capi::to_view;

namespace {

// The C cross-entropy options plus the separately passed loss options.
smax::CrossEntropyOptions to_ce(const smax_cross_entropy_options* p,
                                const smax_loss_options* loss, const char* op) {
  smax::CrossEntropyOptions out;
  if (checked(p, op, "ce", "smax_cross_entropy_options") != nullptr) {
    out.label_smoothing = p->label_smoothing;
    out.lse_square_scale = p->lse_square_scale;
    out.softcap = p->softcap;
    out.z_loss = to_optional_view(p->z_loss, op, "ce.z_loss");
    out.lse = to_optional_view(p->lse, op, "ce.lse");
    out.entropy = to_optional_view(p->entropy, op, "ce.entropy");
    out.target_logprob = to_optional_view(p->target_logprob, op, "ce.target_logprob");
    out.accuracy = to_optional_view(p->accuracy, op, "ce.accuracy");
    out.grad = to_optional_view(p->grad, op, "ce.grad");
  }
  out.loss = to_loss(loss, op);
  return out;
}

smax::LinearCrossEntropyOptions to_lce(const smax_linear_cross_entropy_options* p,
                                       const char* op) {
  smax::LinearCrossEntropyOptions out;
  if (checked(p, op, "lce", "smax_linear_cross_entropy_options") == nullptr) return out;
  out.token_chunk = p->token_chunk;
  out.vocab_chunk = p->vocab_chunk;
  return out;
}

}  // namespace

extern "C" {

void smax_cross_entropy_options_init(smax_cross_entropy_options* options) {
  if (options == nullptr) return;
  const smax::CrossEntropyOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->label_smoothing = d.label_smoothing;
  options->lse_square_scale = d.lse_square_scale;
  options->softcap = d.softcap;
  options->z_loss = nullptr;
  options->lse = nullptr;
  options->entropy = nullptr;
  options->target_logprob = nullptr;
  options->accuracy = nullptr;
  options->grad = nullptr;
}

void smax_linear_cross_entropy_options_init(smax_linear_cross_entropy_options* options) {
  if (options == nullptr) return;
  const smax::LinearCrossEntropyOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->token_chunk = d.token_chunk;
  options->vocab_chunk = d.vocab_chunk;
}

// ---- cross-entropy -------------------------------------------------------------------

smax_status smax_cross_entropy(const smax_tensor* src, const smax_tensor* target,
                               const smax_tensor* dst, const smax_cross_entropy_options* ce,
                               const smax_loss_options* loss,
                               const smax_softmax_options* options) {
  const char* op = "cross_entropy";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::CrossEntropyOptions c = to_ce(ce, loss, op);
    smax::cross_entropy(s, t, d, c, to_options(options, op));
  });
}

smax_status smax_cross_entropy_backward(const smax_tensor* src, const smax_tensor* target,
                                        const smax_tensor* dloss, const smax_tensor* dsrc,
                                        const smax_cross_entropy_options* ce,
                                        const smax_loss_options* loss,
                                        const smax_softmax_options* options) {
  const char* op = "cross_entropy_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView l = to_view(dloss, op, "dloss");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const smax::CrossEntropyOptions c = to_ce(ce, loss, op);
    smax::cross_entropy_backward(s, t, l, d, c, to_options(options, op));
  });
}

// ---- z-losses ------------------------------------------------------------------------

smax_status smax_z_loss(const smax_tensor* src, const smax_tensor* target,
                        const smax_tensor* dst, float coefficient,
                        const smax_loss_options* loss, const smax_softmax_options* options) {
  const char* op = "z_loss";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const std::optional<smax::TensorView> t = to_optional_view(target, op, "target");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::LossOptions lo = to_loss(loss, op);
    const smax::SoftmaxOptions o = to_options(options, op);
    if (t) {
      smax::z_loss(s, *t, d, coefficient, lo, o);
    } else {
      smax::z_loss(s, d, coefficient, lo, o);
    }
  });
}

smax_status smax_z_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                 const smax_tensor* dloss, const smax_tensor* dsrc,
                                 float coefficient, const smax_loss_options* loss,
                                 const smax_softmax_options* options) {
  const char* op = "z_loss_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const std::optional<smax::TensorView> t = to_optional_view(target, op, "target");
    const smax::TensorView l = to_view(dloss, op, "dloss");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const smax::LossOptions lo = to_loss(loss, op);
    const smax::SoftmaxOptions o = to_options(options, op);
    if (t) {
      smax::z_loss_backward(s, *t, l, d, coefficient, lo, o);
    } else {
      smax::z_loss_backward(s, l, d, coefficient, lo, o);
    }
  });
}

smax_status smax_spherical_z_loss(const smax_tensor* src, const smax_tensor* target,
                                  const smax_tensor* dst, float a, float b,
                                  const smax_loss_options* loss,
                                  const smax_softmax_options* options) {
  const char* op = "spherical_z_loss";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::LossOptions lo = to_loss(loss, op);
    smax::spherical_z_loss(s, t, d, a, b, lo, to_options(options, op));
  });
}

smax_status smax_spherical_z_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                           const smax_tensor* dloss, const smax_tensor* dsrc,
                                           float a, float b, const smax_loss_options* loss,
                                           const smax_softmax_options* options) {
  const char* op = "spherical_z_loss_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView l = to_view(dloss, op, "dloss");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const smax::LossOptions lo = to_loss(loss, op);
    smax::spherical_z_loss_backward(s, t, l, d, a, b, lo, to_options(options, op));
  });
}

// ---- fused linear + cross-entropy --------------------------------------------------------

smax_status smax_linear_cross_entropy(const smax_tensor* hidden, const smax_tensor* weight,
                                      const smax_tensor* target, const smax_tensor* bias,
                                      const smax_tensor* dst,
                                      const smax_cross_entropy_options* ce,
                                      const smax_linear_cross_entropy_options* lce,
                                      const smax_loss_options* loss,
                                      const smax_softmax_options* options) {
  const char* op = "linear_cross_entropy";
  return guarded([&] {
    const smax::TensorView h = to_view(hidden, op, "hidden");
    const smax::TensorView w = to_view(weight, op, "weight");
    const smax::TensorView t = to_view(target, op, "target");
    const std::optional<smax::TensorView> b = to_optional_view(bias, op, "bias");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::CrossEntropyOptions c = to_ce(ce, loss, op);
    const smax::LinearCrossEntropyOptions l = to_lce(lce, op);
    smax::linear_cross_entropy(h, w, t, b, d, c, l, to_options(options, op));
  });
}

smax_status smax_linear_cross_entropy_backward(
    const smax_tensor* hidden, const smax_tensor* weight, const smax_tensor* target,
    const smax_tensor* bias, const smax_tensor* dloss, const smax_tensor* dhidden,
    const smax_tensor* dweight, const smax_tensor* dbias, const smax_cross_entropy_options* ce,
    const smax_linear_cross_entropy_options* lce, const smax_loss_options* loss,
    const smax_softmax_options* options) {
  const char* op = "linear_cross_entropy_backward";
  return guarded([&] {
    const smax::TensorView h = to_view(hidden, op, "hidden");
    const smax::TensorView w = to_view(weight, op, "weight");
    const smax::TensorView t = to_view(target, op, "target");
    const std::optional<smax::TensorView> b = to_optional_view(bias, op, "bias");
    const smax::TensorView dl = to_view(dloss, op, "dloss");
    const smax::TensorView dh = to_view(dhidden, op, "dhidden");
    const smax::TensorView dw = to_view(dweight, op, "dweight");
    const std::optional<smax::TensorView> db = to_optional_view(dbias, op, "dbias");
    const smax::CrossEntropyOptions c = to_ce(ce, loss, op);
    const smax::LinearCrossEntropyOptions l = to_lce(lce, op);
    smax::linear_cross_entropy_backward(h, w, t, b, dl, dh, dw, db, c, l,
                                        to_options(options, op));
  });
}

smax_status smax_linear_cross_entropy_fused(
    const smax_tensor* hidden, const smax_tensor* weight, const smax_tensor* target,
    const smax_tensor* bias, const smax_tensor* dst, const smax_tensor* dloss,
    const smax_tensor* dhidden, const smax_tensor* dweight, const smax_tensor* dbias,
    const smax_cross_entropy_options* ce, const smax_linear_cross_entropy_options* lce,
    const smax_loss_options* loss, const smax_softmax_options* options) {
  const char* op = "linear_cross_entropy_fused";
  return guarded([&] {
    const smax::TensorView h = to_view(hidden, op, "hidden");
    const smax::TensorView w = to_view(weight, op, "weight");
    const smax::TensorView t = to_view(target, op, "target");
    const std::optional<smax::TensorView> b = to_optional_view(bias, op, "bias");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::TensorView dl = to_view(dloss, op, "dloss");
    const smax::TensorView dh = to_view(dhidden, op, "dhidden");
    const smax::TensorView dw = to_view(dweight, op, "dweight");
    const std::optional<smax::TensorView> db = to_optional_view(dbias, op, "dbias");
    const smax::CrossEntropyOptions c = to_ce(ce, loss, op);
    const smax::LinearCrossEntropyOptions l = to_lce(lce, op);
    smax::linear_cross_entropy_fused(h, w, t, b, d, dl, dh, dw, db, c, l,
                                     to_options(options, op));
  });
}

}  // extern "C"

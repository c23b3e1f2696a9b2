// src/c_api/smax_c_rescaled.cc: C ABI of the rescaled and rectified
// softmaxes (include/smax/rescaled.h): SSMax, softpick, clipped softmax, StableMax (+ its
// cross-entropy) and the Softmax Collapse detector.
#include <cstring>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/rescaled.h"

using smax::capi::checked;
using smax::capi::fail;
using smax::capi::guarded;
using smax::capi::to_optional_view;
using smax::capi::to_options;
using smax::capi::to_view;

static_assert(static_cast<int>(SMAX_PRECISION_BF16) == static_cast<int>(smax::Precision::kBF16) &&
                  static_cast<int>(SMAX_PRECISION_F16) == static_cast<int>(smax::Precision::kF16),
              "precision values must mirror smax::Precision");

namespace {

smax::SsmaxOptions to_ssmax(const smax_ssmax_options* p, const char* op) {
  smax::SsmaxOptions out;
  if (checked(p, op, "params", "smax_ssmax_options") == nullptr) return out;
  out.s = p->s;
  out.fixed_n = p->fixed_n;
  out.s_rows = to_optional_view(p->s_rows, op, "params.s_rows");
  return out;
}

smax::SoftpickOptions to_softpick(const smax_softpick_options* p, const char* op) {
  smax::SoftpickOptions out;
  if (checked(p, op, "params", "smax_softpick_options") == nullptr) return out;
  out.eps = p->eps;
  return out;
}

smax::ClippedSoftmaxOptions to_clipped(const smax_clipped_softmax_options* p, const char* op) {
  smax::ClippedSoftmaxOptions out;
  if (checked(p, op, "params", "smax_clipped_softmax_options") == nullptr) return out;
  out.gamma = p->gamma;
  out.zeta = p->zeta;
  return out;
}

}  // namespace

extern "C" {

void smax_ssmax_options_init(smax_ssmax_options* options) {
  if (options == nullptr) return;
  const smax::SsmaxOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->s = d.s;
  options->fixed_n = d.fixed_n;
  options->s_rows = nullptr;
}

void smax_softpick_options_init(smax_softpick_options* options) {
  if (options == nullptr) return;
  const smax::SoftpickOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->eps = d.eps;
}

void smax_clipped_softmax_options_init(smax_clipped_softmax_options* options) {
  if (options == nullptr) return;
  const smax::ClippedSoftmaxOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->gamma = d.gamma;
  options->zeta = d.zeta;
}

// ---- SSMax -------------------------------------------------------------------

smax_status smax_ssmax(const smax_tensor* src, const smax_tensor* dst,
                       const smax_ssmax_options* params, const smax_softmax_options* options) {
  const char* op = "ssmax";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::SsmaxOptions p = to_ssmax(params, op);
    smax::ssmax(s, d, p, to_options(options, op));
  });
}
smax_status smax_ssmax_backward(const smax_tensor* src, const smax_tensor* y,
                                const smax_tensor* dy, const smax_tensor* dsrc,
                                const smax_tensor* ds, const smax_ssmax_options* params,
                                const smax_softmax_options* options) {
  const char* op = "ssmax_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView vy = to_view(y, op, "y");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const std::optional<smax::TensorView> vds = to_optional_view(ds, op, "ds");
    const smax::SsmaxOptions p = to_ssmax(params, op);
    smax::ssmax_backward(s, vy, vdy, d, p, to_options(options, op), vds ? &*vds : nullptr);
  });
}

// ---- softpick ----------------------------------------------------------------

smax_status smax_softpick(const smax_tensor* src, const smax_tensor* dst,
                          const smax_softpick_options* params,
                          const smax_softmax_options* options) {
  const char* op = "softpick";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::SoftpickOptions p = to_softpick(params, op);
    smax::softpick(s, d, p, to_options(options, op));
  });
}
smax_status smax_softpick_backward(const smax_tensor* src, const smax_tensor* dy,
                                   const smax_tensor* dsrc, const smax_softpick_options* params,
                                   const smax_softmax_options* options) {
  const char* op = "softpick_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const smax::SoftpickOptions p = to_softpick(params, op);
    smax::softpick_backward(s, vdy, d, p, to_options(options, op));
  });
}

// ---- clipped softmax -----------------------------------------------------------

smax_status smax_clipped_softmax(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_clipped_softmax_options* params,
                                 const smax_softmax_options* options) {
  const char* op = "clipped_softmax";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::ClippedSoftmaxOptions p = to_clipped(params, op);
    smax::clipped_softmax(s, d, p, to_options(options, op));
  });
}
smax_status smax_clipped_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                          const smax_tensor* dsrc,
                                          const smax_clipped_softmax_options* params,
                                          const smax_softmax_options* options) {
  const char* op = "clipped_softmax_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const smax::ClippedSoftmaxOptions p = to_clipped(params, op);
    smax::clipped_softmax_backward(s, vdy, d, p, to_options(options, op));
  });
}

// ---- StableMax ---------------------------------------------------------------

smax_status smax_stablemax(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options) {
  return smax::capi::unary_op(&smax::stablemax, "stablemax", src, "src", dst, "dst", options);
}
smax_status smax_stablemax_backward(const smax_tensor* src, const smax_tensor* dy,
                                    const smax_tensor* dsrc, const smax_softmax_options* options) {
  return smax::capi::ternary_op(&smax::stablemax_backward, "stablemax_backward", src, "src", dy,
                                "dy", dsrc, "dsrc", options);
}
smax_status smax_stablemax_cross_entropy(const smax_tensor* src, const smax_tensor* target,
                                         const smax_tensor* dst, const smax_loss_options* loss,
                                         const smax_softmax_options* options) {
  return smax::capi::loss_op(&smax::stablemax_cross_entropy, "stablemax_cross_entropy", src,
                             target, dst, loss, options);
}
smax_status smax_stablemax_cross_entropy_backward(const smax_tensor* src,
                                                  const smax_tensor* target,
                                                  const smax_tensor* dloss,
                                                  const smax_tensor* dsrc,
                                                  const smax_loss_options* loss,
                                                  const smax_softmax_options* options) {
  return smax::capi::loss_backward_op(&smax::stablemax_cross_entropy_backward,
                                      "stablemax_cross_entropy_backward", src, target, dloss,
                                      dsrc, loss, options);
}

// ---- Softmax Collapse detector ---------------------------------------------------

smax_status smax_softmax_collapse_fraction(const smax_tensor* src, const smax_tensor* flags,
                                           int32_t precision,
                                           const smax_softmax_options* options,
                                           double* fraction) {
  const char* op = "softmax_collapse_fraction";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const std::optional<smax::TensorView> f = to_optional_view(flags, op, "flags");
    if (precision < SMAX_PRECISION_F32 || precision > SMAX_PRECISION_BF16) {
      fail(std::string(op) + ": precision has unknown value " + std::to_string(precision));
    }
    const double result = smax::softmax_collapse_fraction(
        s, static_cast<smax::Precision>(precision), to_options(options, op), f ? &*f : nullptr);
    if (fraction != nullptr) *fraction = result;
  });
}

}  // extern "C"

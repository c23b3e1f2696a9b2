// src/c_api/smax_c_rescaled.cc: C ABI of the rescaled and rectified
// softmaxes (include/smax/rescaled.h): SSMax, softpick, clipped softmax, StableMax (+ its
// cross-entropy) and the Softmax Collapse detector.
#include <optional>
#include <string>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/rescaled.h"

using namespace smax::capi;
using smax::TensorView;

static_assert(static_cast<int>(SMAX_PRECISION_BF16) == static_cast<int>(smax::Precision::kBF16) &&
                  static_cast<int>(SMAX_PRECISION_F16) == static_cast<int>(smax::Precision::kF16),
              "precision values must mirror smax::Precision");

namespace {

smax::SsmaxOptions to_ssmax(const smax_ssmax_options* p, const char* op) {
  return from_struct<smax::SsmaxOptions>(p, op, "params", "smax_ssmax_options",
                                         [op](const auto& c, auto& o) {
                                           o.s = c.s;
                                           o.fixed_n = c.fixed_n;
                                           o.s_rows = to_optional_view(c.s_rows, op,
                                                                       "params.s_rows");
                                         });
}

smax::SoftpickOptions to_softpick(const smax_softpick_options* p, const char* op) {
  return from_struct<smax::SoftpickOptions>(p, op, "params", "smax_softpick_options",
                                            [](const auto& c, auto& o) { o.eps = c.eps; });
}

smax::ClippedSoftmaxOptions to_clipped(const smax_clipped_softmax_options* p, const char* op) {
  return from_struct<smax::ClippedSoftmaxOptions>(p, op, "params", "smax_clipped_softmax_options",
                                                  [](const auto& c, auto& o) {
                                                    o.gamma = c.gamma;
                                                    o.zeta = c.zeta;
                                                  });
}

// ssmax_backward with its optional ds output as a pointer (null = not wanted).
void ssmax_backward_ds(const TensorView& src, const TensorView& y, const TensorView& dy,
                       const TensorView& dsrc, const std::optional<TensorView>& ds,
                       const smax::SsmaxOptions& params, const smax::SoftmaxOptions& options) {
  smax::ssmax_backward(src, y, dy, dsrc, params, options, ds ? &*ds : nullptr);
}

}  // namespace

extern "C" {

void smax_ssmax_options_init(smax_ssmax_options* options) {
  init_struct<smax::SsmaxOptions>(options, [](auto& o, const auto& d) {
    o.s = d.s;
    o.fixed_n = d.fixed_n;
  });
}

void smax_softpick_options_init(smax_softpick_options* options) {
  init_struct<smax::SoftpickOptions>(options, [](auto& o, const auto& d) { o.eps = d.eps; });
}

void smax_clipped_softmax_options_init(smax_clipped_softmax_options* options) {
  init_struct<smax::ClippedSoftmaxOptions>(options, [](auto& o, const auto& d) {
    o.gamma = d.gamma;
    o.zeta = d.zeta;
  });
}

// ---- SSMax -------------------------------------------------------------------

smax_status smax_ssmax(const smax_tensor* src, const smax_tensor* dst,
                       const smax_ssmax_options* params, const smax_softmax_options* options) {
  return call("ssmax", &smax::ssmax, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_ssmax, params), options);
}
smax_status smax_ssmax_backward(const smax_tensor* src, const smax_tensor* y,
                                const smax_tensor* dy, const smax_tensor* dsrc,
                                const smax_tensor* ds, const smax_ssmax_options* params,
                                const smax_softmax_options* options) {
  return call("ssmax_backward", &ssmax_backward_ds, Tensor{src, "src"}, Tensor{y, "y"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, OptionalTensor{ds, "ds"},
              with(to_ssmax, params), options);
}

// ---- softpick ----------------------------------------------------------------

smax_status smax_softpick(const smax_tensor* src, const smax_tensor* dst,
                          const smax_softpick_options* params,
                          const smax_softmax_options* options) {
  return call("softpick", &smax::softpick, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_softpick, params), options);
}
smax_status smax_softpick_backward(const smax_tensor* src, const smax_tensor* dy,
                                   const smax_tensor* dsrc, const smax_softpick_options* params,
                                   const smax_softmax_options* options) {
  return call("softpick_backward", &smax::softpick_backward, Tensor{src, "src"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, with(to_softpick, params), options);
}

// ---- clipped softmax -----------------------------------------------------------

smax_status smax_clipped_softmax(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_clipped_softmax_options* params,
                                 const smax_softmax_options* options) {
  return call("clipped_softmax", &smax::clipped_softmax, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_clipped, params), options);
}
smax_status smax_clipped_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                          const smax_tensor* dsrc,
                                          const smax_clipped_softmax_options* params,
                                          const smax_softmax_options* options) {
  return call("clipped_softmax_backward", &smax::clipped_softmax_backward, Tensor{src, "src"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, with(to_clipped, params), options);
}

// ---- StableMax ---------------------------------------------------------------

smax_status smax_stablemax(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options) {
  return call("stablemax", &smax::stablemax, Tensor{src, "src"}, Tensor{dst, "dst"}, options);
}
smax_status smax_stablemax_backward(const smax_tensor* src, const smax_tensor* dy,
                                    const smax_tensor* dsrc, const smax_softmax_options* options) {
  return call("stablemax_backward", &smax::stablemax_backward, Tensor{src, "src"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, options);
}
smax_status smax_stablemax_cross_entropy(const smax_tensor* src, const smax_tensor* target,
                                         const smax_tensor* dst, const smax_loss_options* loss,
                                         const smax_softmax_options* options) {
  return call("stablemax_cross_entropy", &smax::stablemax_cross_entropy, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dst, "dst"}, loss, options);
}
smax_status smax_stablemax_cross_entropy_backward(const smax_tensor* src,
                                                  const smax_tensor* target,
                                                  const smax_tensor* dloss,
                                                  const smax_tensor* dsrc,
                                                  const smax_loss_options* loss,
                                                  const smax_softmax_options* options) {
  return call("stablemax_cross_entropy_backward", &smax::stablemax_cross_entropy_backward,
              Tensor{src, "src"}, Tensor{target, "target"}, Tensor{dloss, "dloss"},
              Tensor{dsrc, "dsrc"}, loss, options);
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

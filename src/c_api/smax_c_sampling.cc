// src/c_api/smax_c_sampling.cc: C ABI of include/smax/sampling.h: Gumbel
// noise, Gumbel-softmax, Gumbel-max, fused softmax + top-k, temperature /
// top-k / top-p sampling and Soft-NMS.
#include <cstring>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/sampling.h"

using smax::capi::checked;
using smax::capi::fail;
using smax::capi::guarded;
using smax::capi::to_bool;
using smax::capi::to_optional_view;
using smax::capi::to_options;
using smax::capi::to_view;

static_assert(static_cast<int>(SMAX_SOFT_NMS_GAUSSIAN) ==
                      static_cast<int>(smax::SoftNmsMethod::kGaussian) &&
                  static_cast<int>(SMAX_SOFT_NMS_LINEAR) ==
                      static_cast<int>(smax::SoftNmsMethod::kLinear),
              "soft-NMS method values must mirror smax::SoftNmsMethod");

namespace {

smax::GumbelSoftmaxOptions to_gumbel(const smax_gumbel_softmax_options* p, const char* op) {
  smax::GumbelSoftmaxOptions out;
  if (checked(p, op, "params", "smax_gumbel_softmax_options") == nullptr) return out;
  out.tau = p->tau;
  out.hard = to_bool(p->hard, op, "params.hard");
  out.seed = p->seed;
  out.noise = to_optional_view(p->noise, op, "params.noise");
  out.y_soft = to_optional_view(p->y_soft, op, "params.y_soft");
  return out;
}

smax::SampleOptions to_sample(const smax_sample_options* p, const char* op) {
  smax::SampleOptions out;
  if (checked(p, op, "params", "smax_sample_options") == nullptr) return out;
  out.temperature = p->temperature;
  out.top_k = p->top_k;
  out.top_p = p->top_p;
  out.seed = p->seed;
  return out;
}

smax::SoftNmsOptions to_soft_nms(const smax_soft_nms_options* p, const char* op) {
  smax::SoftNmsOptions out;
  if (checked(p, op, "params", "smax_soft_nms_options") == nullptr) return out;
  if (p->method < SMAX_SOFT_NMS_HARD || p->method > SMAX_SOFT_NMS_GAUSSIAN) {
    fail(std::string(op) + ": params.method has unknown value " + std::to_string(p->method));
  }
  out.method = static_cast<smax::SoftNmsMethod>(p->method);
  out.sigma = p->sigma;
  out.iou_threshold = p->iou_threshold;
  out.score_threshold = p->score_threshold;
  out.plus_one = to_bool(p->plus_one, op, "params.plus_one");
  return out;
}

}  // namespace

extern "C" {

void smax_gumbel_softmax_options_init(smax_gumbel_softmax_options* options) {
  if (options == nullptr) return;
  const smax::GumbelSoftmaxOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->tau = d.tau;
  options->hard = d.hard ? 1 : 0;
  options->seed = d.seed;
  options->noise = nullptr;
  options->y_soft = nullptr;
}

void smax_softmax_topk_options_init(smax_softmax_topk_options* options) {
  if (options == nullptr) return;
  const smax::SoftmaxTopkOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->renormalize = d.renormalize ? 1 : 0;
}

void smax_sample_options_init(smax_sample_options* options) {
  if (options == nullptr) return;
  const smax::SampleOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->temperature = d.temperature;
  options->top_p = d.top_p;
  options->top_k = d.top_k;
  options->seed = d.seed;
}

void smax_soft_nms_options_init(smax_soft_nms_options* options) {
  if (options == nullptr) return;
  const smax::SoftNmsOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->method = static_cast<int32_t>(d.method);
  options->sigma = d.sigma;
  options->iou_threshold = d.iou_threshold;
  options->score_threshold = d.score_threshold;
  options->plus_one = d.plus_one ? 1 : 0;
}

// ---- Gumbel ----------------------------------------------------------------------

smax_status smax_gumbel_noise(const smax_tensor* dst, uint64_t seed, int64_t axis) {
  const char* op = "gumbel_noise";
  return guarded([&] { smax::gumbel_noise(to_view(dst, op, "dst"), seed, axis); });
}

smax_status smax_gumbel_softmax(const smax_tensor* src, const smax_tensor* dst,
                                const smax_gumbel_softmax_options* params,
                                const smax_softmax_options* options) {
  const char* op = "gumbel_softmax";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::GumbelSoftmaxOptions p = to_gumbel(params, op);
    smax::gumbel_softmax(s, d, p, to_options(options, op));
  });
}

smax_status smax_gumbel_softmax_backward(const smax_tensor* y_soft, const smax_tensor* dy,
                                         const smax_tensor* dx, float tau,
                                         const smax_softmax_options* options) {
  const char* op = "gumbel_softmax_backward";
  return guarded([&] {
    const smax::TensorView y = to_view(y_soft, op, "y_soft");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView vdx = to_view(dx, op, "dx");
    smax::gumbel_softmax_backward(y, vdy, vdx, tau, to_options(options, op));
  });
}

smax_status smax_gumbel_max(const smax_tensor* src, const smax_tensor* indices, uint64_t seed,
                            const smax_softmax_options* options) {
  const char* op = "gumbel_max";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView i = to_view(indices, op, "indices");
    smax::gumbel_max(s, i, seed, to_options(options, op));
  });
}

// ---- softmax + top-k ---------------------------------------------------------------

smax_status smax_softmax_topk(const smax_tensor* src, const smax_tensor* probs,
                              const smax_tensor* indices, int64_t k,
                              const smax_softmax_topk_options* params,
                              const smax_softmax_options* options) {
  const char* op = "softmax_topk";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView p = to_view(probs, op, "probs");
    const smax::TensorView i = to_view(indices, op, "indices");
    smax::SoftmaxTopkOptions topk;
    topk.k = k;
    if (checked(params, op, "params", "smax_softmax_topk_options") != nullptr) {
      topk.renormalize = to_bool(params->renormalize, op, "params.renormalize");
    }
    smax::softmax_topk(s, p, i, topk, to_options(options, op));
  });
}

// ---- sampling ----------------------------------------------------------------------

smax_status smax_sampling_filter(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_sample_options* params,
                                 const smax_softmax_options* options) {
  const char* op = "sampling_filter";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::SampleOptions p = to_sample(params, op);
    smax::sampling_filter(s, d, p, to_options(options, op));
  });
}

smax_status smax_sample(const smax_tensor* src, const smax_tensor* indices,
                        const smax_sample_options* params, const smax_softmax_options* options) {
  const char* op = "sample";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView i = to_view(indices, op, "indices");
    const smax::SampleOptions p = to_sample(params, op);
    smax::sample(s, i, p, to_options(options, op));
  });
}

// ---- Soft-NMS ----------------------------------------------------------------------

smax_status smax_soft_nms(const smax_tensor* boxes, const smax_tensor* scores,
                          const smax_tensor* indices, const smax_tensor* kept_scores,
                          const smax_soft_nms_options* params, int64_t* count) {
  const char* op = "soft_nms";
  return guarded([&] {
    const smax::TensorView b = to_view(boxes, op, "boxes");
    const smax::TensorView s = to_view(scores, op, "scores");
    const smax::TensorView i = to_view(indices, op, "indices");
    const smax::TensorView k = to_view(kept_scores, op, "kept_scores");
    const smax::SoftNmsOptions p = to_soft_nms(params, op);
    const int64_t n = smax::soft_nms(b, s, i, k, p);
    if (count != nullptr) *count = n;
  });
}

}  // extern "C"

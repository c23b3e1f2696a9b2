// src/c_api/smax_c_sampling.cc: C ABI of include/smax/sampling.h: Gumbel
// noise, Gumbel-softmax, Gumbel-max, fused softmax + top-k, temperature /
// top-k / top-p sampling and Soft-NMS.
#include <cstddef>
#include <string>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/error.h"
#include "smax/sampling.h"

using namespace smax::capi;

static_assert(static_cast<int>(SMAX_SOFT_NMS_GAUSSIAN) ==
                      static_cast<int>(smax::SoftNmsMethod::kGaussian) &&
                  static_cast<int>(SMAX_SOFT_NMS_LINEAR) ==
                      static_cast<int>(smax::SoftNmsMethod::kLinear),
              "soft-NMS method values must mirror smax::SoftNmsMethod");

static_assert(static_cast<int>(SMAX_TOP_K_TIES_EXACT) ==
                      static_cast<int>(smax::TopKTies::kExact) &&
                  static_cast<int>(SMAX_TOP_K_TIES_KEEP) ==
                      static_cast<int>(smax::TopKTies::kKeep),
              "top-k tie values must mirror smax::TopKTies");
static_assert(offsetof(smax_sample_options, min_p) == 32 &&
                  offsetof(smax_sample_options, reserved0) + sizeof(int32_t) ==
                      sizeof(smax_sample_options) &&
                  sizeof(smax_sample_options) == 48,
              "smax_sample_options: version 0.6's fields follow 0.5's 32 bytes, no padding");

namespace {

// The size of version 0.5's struct (before min_p): the smallest struct_size
// accepted; the later fields then take their defaults.
constexpr size_t kSampleOptionsV05Size = offsetof(smax_sample_options, min_p);

smax::GumbelSoftmaxOptions to_gumbel(const smax_gumbel_softmax_options* p, const char* op) {
  return from_struct<smax::GumbelSoftmaxOptions>(
      p, op, "params", "smax_gumbel_softmax_options", [op](const auto& c, auto& o) {
        o.tau = c.tau;
        o.hard = to_bool(c.hard, op, "params.hard");
        o.seed = c.seed;
        o.noise = to_optional_view(c.noise, op, "params.noise");
        o.y_soft = to_optional_view(c.y_soft, op, "params.y_soft");
      });
}

// k is an argument of its own in C, a field of SoftmaxTopkOptions in C++.
smax::SoftmaxTopkOptions to_topk(const smax_softmax_topk_options* p, int64_t k, const char* op) {
  smax::SoftmaxTopkOptions out = from_struct<smax::SoftmaxTopkOptions>(
      p, op, "params", "smax_softmax_topk_options", [op](const auto& c, auto& o) {
        o.renormalize = to_bool(c.renormalize, op, "params.renormalize");
      });
  out.k = k;
  return out;
}

smax::SampleOptions to_sample(const smax_sample_options* p, const char* op) {
  return from_struct<smax::SampleOptions>(
      p, op, "params", "smax_sample_options",
      [op](const auto& c, auto& o) {
        o.temperature = c.temperature;
        o.top_k = c.top_k;
        o.top_p = c.top_p;
        o.seed = c.seed;
        if (c.struct_size < sizeof(smax_sample_options)) return;  // a 0.5 caller
        o.min_p = c.min_p;
        // 0 = the default (all-zero bytes keep 0.5's behaviour); the C++ op
        // rejects negative values, naming min_tokens_to_keep.
        if (c.min_tokens_to_keep != 0) o.min_tokens_to_keep = c.min_tokens_to_keep;
        // Unknown values: the C++ op's error ("top_k_ties has unknown value").
        o.top_k_ties = static_cast<smax::TopKTies>(c.top_k_ties);
        if (c.reserved0 != 0) {
          throw smax::Error(smax::Status::kUnsupported,
                            std::string(op) +
                                ": params.reserved0 is non-zero (a field of a newer "
                                "smax_sample_options that this library does not know)");
        }
      },
      kSampleOptionsV05Size);
}

smax::SoftNmsOptions to_soft_nms(const smax_soft_nms_options* p, const char* op) {
  return from_struct<smax::SoftNmsOptions>(
      p, op, "params", "smax_soft_nms_options", [op](const auto& c, auto& o) {
        if (c.method < SMAX_SOFT_NMS_HARD || c.method > SMAX_SOFT_NMS_GAUSSIAN) {
          fail(std::string(op) + ": params.method has unknown value " +
               std::to_string(c.method));
        }
        o.method = static_cast<smax::SoftNmsMethod>(c.method);
        o.sigma = c.sigma;
        o.iou_threshold = c.iou_threshold;
        o.score_threshold = c.score_threshold;
        o.plus_one = to_bool(c.plus_one, op, "params.plus_one");
      });
}

}  // namespace

extern "C" {

void smax_gumbel_softmax_options_init(smax_gumbel_softmax_options* options) {
  init_struct<smax::GumbelSoftmaxOptions>(options, [](auto& o, const auto& d) {
    o.tau = d.tau;
    o.hard = d.hard ? 1 : 0;
    o.seed = d.seed;
  });
}

void smax_softmax_topk_options_init(smax_softmax_topk_options* options) {
  init_struct<smax::SoftmaxTopkOptions>(
      options, [](auto& o, const auto& d) { o.renormalize = d.renormalize ? 1 : 0; });
}

void smax_sample_options_init(smax_sample_options* options) {
  init_struct<smax::SampleOptions>(options, [](auto& o, const auto& d) {
    o.temperature = d.temperature;
    o.top_p = d.top_p;
    o.top_k = d.top_k;
    o.seed = d.seed;
    o.min_p = d.min_p;
    o.min_tokens_to_keep = static_cast<int32_t>(d.min_tokens_to_keep);
    o.top_k_ties = static_cast<int32_t>(d.top_k_ties);
  });
}

void smax_soft_nms_options_init(smax_soft_nms_options* options) {
  init_struct<smax::SoftNmsOptions>(options, [](auto& o, const auto& d) {
    o.method = static_cast<int32_t>(d.method);
    o.sigma = d.sigma;
    o.iou_threshold = d.iou_threshold;
    o.score_threshold = d.score_threshold;
    o.plus_one = d.plus_one ? 1 : 0;
  });
}

// ---- Gumbel ----------------------------------------------------------------------

smax_status smax_gumbel_noise(const smax_tensor* dst, uint64_t seed, int64_t axis) {
  return call("gumbel_noise", &smax::gumbel_noise, Tensor{dst, "dst"}, seed, axis);
}

smax_status smax_gumbel_softmax(const smax_tensor* src, const smax_tensor* dst,
                                const smax_gumbel_softmax_options* params,
                                const smax_softmax_options* options) {
  return call("gumbel_softmax", &smax::gumbel_softmax, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_gumbel, params), options);
}

smax_status smax_gumbel_softmax_backward(const smax_tensor* y_soft, const smax_tensor* dy,
                                         const smax_tensor* dx, float tau,
                                         const smax_softmax_options* options) {
  return call("gumbel_softmax_backward", &smax::gumbel_softmax_backward,
              Tensor{y_soft, "y_soft"}, Tensor{dy, "dy"}, Tensor{dx, "dx"}, tau, options);
}

smax_status smax_gumbel_max(const smax_tensor* src, const smax_tensor* indices, uint64_t seed,
                            const smax_softmax_options* options) {
  return call("gumbel_max", &smax::gumbel_max, Tensor{src, "src"}, Tensor{indices, "indices"},
              seed, options);
}

// ---- softmax + top-k ---------------------------------------------------------------

smax_status smax_softmax_topk(const smax_tensor* src, const smax_tensor* probs,
                              const smax_tensor* indices, int64_t k,
                              const smax_softmax_topk_options* params,
                              const smax_softmax_options* options) {
  return call(
      "softmax_topk", [](const auto&... a) { smax::softmax_topk(a...); }, Tensor{src, "src"},
      Tensor{probs, "probs"}, Tensor{indices, "indices"}, with(to_topk, params, k), options);
}

// ---- sampling ----------------------------------------------------------------------

smax_status smax_sampling_filter(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_sample_options* params,
                                 const smax_softmax_options* options) {
  return call("sampling_filter", &smax::sampling_filter, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_sample, params), options);
}

smax_status smax_sample(const smax_tensor* src, const smax_tensor* indices,
                        const smax_sample_options* params, const smax_softmax_options* options) {
  return call("sample", &smax::sample, Tensor{src, "src"}, Tensor{indices, "indices"},
              with(to_sample, params), options);
}

// ---- Soft-NMS ----------------------------------------------------------------------

smax_status smax_soft_nms(const smax_tensor* boxes, const smax_tensor* scores,
                          const smax_tensor* indices, const smax_tensor* kept_scores,
                          const smax_soft_nms_options* params, int64_t* count) {
  return call(
      "soft_nms",
      [count](const auto&... a) {
        const int64_t n = smax::soft_nms(a...);
        if (count != nullptr) *count = n;
      },
      Tensor{boxes, "boxes"}, Tensor{scores, "scores"}, Tensor{indices, "indices"},
      Tensor{kept_scores, "kept_scores"}, with(to_soft_nms, params));
}

}  // extern "C"

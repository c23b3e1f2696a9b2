// src/c_api/smax_c_sparse.cc: C ABI of the sparse normalisers
// (include/smax/sparse.h): sparsemax, 1.5-entmax, alpha-entmax by bisection,
// top-k sparse softmax, their backward passes and losses.
#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/sparse.h"

using namespace smax::capi;

namespace {

smax::EntmaxBisectOptions to_bisect(const smax_entmax_bisect_options* p, const char* op) {
  return from_struct<smax::EntmaxBisectOptions>(
      p, op, "params", "smax_entmax_bisect_options", [op](const auto& c, auto& o) {
        o.alpha = c.alpha;
        o.n_iter = c.n_iter;
        o.ensure_sum_one = to_bool(c.ensure_sum_one, op, "params.ensure_sum_one");
        o.alpha_tensor = to_optional_view(c.alpha_tensor, op, "params.alpha_tensor");
      });
}

smax::SparseSoftmaxLossOptions to_sparse_loss(const smax_sparse_softmax_loss_options* p,
                                              const char* op) {
  return from_struct<smax::SparseSoftmaxLossOptions>(
      p, op, "params", "smax_sparse_softmax_loss_options", [op](const auto& c, auto& o) {
        o.force_target = to_bool(c.force_target, op, "params.force_target");
      });
}

}  // namespace

extern "C" {

void smax_entmax_bisect_options_init(smax_entmax_bisect_options* options) {
  init_struct<smax::EntmaxBisectOptions>(options, [](auto& o, const auto& d) {
    o.alpha = d.alpha;
    o.n_iter = d.n_iter;
    o.ensure_sum_one = d.ensure_sum_one ? 1 : 0;
  });
}

void smax_sparse_softmax_loss_options_init(smax_sparse_softmax_loss_options* options) {
  init_struct<smax::SparseSoftmaxLossOptions>(
      options, [](auto& o, const auto& d) { o.force_target = d.force_target ? 1 : 0; });
}

// ---- sparsemax ---------------------------------------------------------------

smax_status smax_sparsemax(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options) {
  return call("sparsemax", &smax::sparsemax, Tensor{src, "src"}, Tensor{dst, "dst"}, options);
}
smax_status smax_sparsemax_backward(const smax_tensor* y, const smax_tensor* dy,
                                    const smax_tensor* dsrc, const smax_softmax_options* options) {
  return call("sparsemax_backward", &smax::sparsemax_backward, Tensor{y, "y"}, Tensor{dy, "dy"},
              Tensor{dsrc, "dsrc"}, options);
}
smax_status smax_sparsemax_loss(const smax_tensor* src, const smax_tensor* target,
                                const smax_tensor* dst, const smax_loss_options* loss,
                                const smax_softmax_options* options) {
  return call("sparsemax_loss", &smax::sparsemax_loss, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dst, "dst"}, loss, options);
}
smax_status smax_sparsemax_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                         const smax_tensor* dloss, const smax_tensor* dsrc,
                                         const smax_loss_options* loss,
                                         const smax_softmax_options* options) {
  return call("sparsemax_loss_backward", &smax::sparsemax_loss_backward, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dloss, "dloss"}, Tensor{dsrc, "dsrc"}, loss,
              options);
}

// ---- 1.5-entmax --------------------------------------------------------------

smax_status smax_entmax15(const smax_tensor* src, const smax_tensor* dst,
                          const smax_softmax_options* options) {
  return call("entmax15", &smax::entmax15, Tensor{src, "src"}, Tensor{dst, "dst"}, options);
}
smax_status smax_entmax15_backward(const smax_tensor* y, const smax_tensor* dy,
                                   const smax_tensor* dsrc, const smax_softmax_options* options) {
  return call("entmax15_backward", &smax::entmax15_backward, Tensor{y, "y"}, Tensor{dy, "dy"},
              Tensor{dsrc, "dsrc"}, options);
}
smax_status smax_entmax15_loss(const smax_tensor* src, const smax_tensor* target,
                               const smax_tensor* dst, const smax_loss_options* loss,
                               const smax_softmax_options* options) {
  return call("entmax15_loss", &smax::entmax15_loss, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dst, "dst"}, loss, options);
}
smax_status smax_entmax15_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                        const smax_tensor* dloss, const smax_tensor* dsrc,
                                        const smax_loss_options* loss,
                                        const smax_softmax_options* options) {
  return call("entmax15_loss_backward", &smax::entmax15_loss_backward, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dloss, "dloss"}, Tensor{dsrc, "dsrc"}, loss,
              options);
}

// ---- alpha-entmax by bisection ---------------------------------------------------

smax_status smax_entmax_bisect(const smax_tensor* src, const smax_tensor* dst,
                               const smax_entmax_bisect_options* params,
                               const smax_softmax_options* options) {
  return call("entmax_bisect", &smax::entmax_bisect, Tensor{src, "src"}, Tensor{dst, "dst"},
              with(to_bisect, params), options);
}
smax_status smax_entmax_bisect_backward(const smax_tensor* y, const smax_tensor* dy,
                                        const smax_tensor* dsrc, const smax_tensor* dalpha,
                                        const smax_entmax_bisect_options* params,
                                        const smax_softmax_options* options) {
  return call("entmax_bisect_backward", &smax::entmax_bisect_backward, Tensor{y, "y"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, OptionalTensor{dalpha, "dalpha"},
              with(to_bisect, params), options);
}
smax_status smax_entmax_bisect_loss(const smax_tensor* src, const smax_tensor* target,
                                    const smax_tensor* dst,
                                    const smax_entmax_bisect_options* params,
                                    const smax_loss_options* loss,
                                    const smax_softmax_options* options) {
  return call("entmax_bisect_loss", &smax::entmax_bisect_loss, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dst, "dst"}, with(to_bisect, params), loss,
              options);
}
smax_status smax_entmax_bisect_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                             const smax_tensor* dloss, const smax_tensor* dsrc,
                                             const smax_entmax_bisect_options* params,
                                             const smax_loss_options* loss,
                                             const smax_softmax_options* options) {
  return call("entmax_bisect_loss_backward", &smax::entmax_bisect_loss_backward,
              Tensor{src, "src"}, Tensor{target, "target"}, Tensor{dloss, "dloss"},
              Tensor{dsrc, "dsrc"}, with(to_bisect, params), loss, options);
}

// ---- top-k sparse softmax ----------------------------------------------------------

smax_status smax_sparse_softmax(const smax_tensor* src, const smax_tensor* dst, int64_t k,
                                const smax_softmax_options* options) {
  return call("sparse_softmax", &smax::sparse_softmax, Tensor{src, "src"}, Tensor{dst, "dst"}, k,
              options);
}
smax_status smax_sparse_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                         const smax_tensor* dsrc,
                                         const smax_softmax_options* options) {
  return call("sparse_softmax_backward", &smax::sparse_softmax_backward, Tensor{y, "y"},
              Tensor{dy, "dy"}, Tensor{dsrc, "dsrc"}, options);
}
smax_status smax_sparse_softmax_loss(const smax_tensor* src, const smax_tensor* target,
                                     const smax_tensor* dst, int64_t k,
                                     const smax_sparse_softmax_loss_options* params,
                                     const smax_loss_options* loss,
                                     const smax_softmax_options* options) {
  return call("sparse_softmax_loss", &smax::sparse_softmax_loss, Tensor{src, "src"},
              Tensor{target, "target"}, Tensor{dst, "dst"}, k, with(to_sparse_loss, params), loss,
              options);
}
smax_status smax_sparse_softmax_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                              const smax_tensor* dloss, const smax_tensor* dsrc,
                                              int64_t k,
                                              const smax_sparse_softmax_loss_options* params,
                                              const smax_loss_options* loss,
                                              const smax_softmax_options* options) {
  return call("sparse_softmax_loss_backward", &smax::sparse_softmax_loss_backward,
              Tensor{src, "src"}, Tensor{target, "target"}, Tensor{dloss, "dloss"},
              Tensor{dsrc, "dsrc"}, k, with(to_sparse_loss, params), loss, options);
}

}  // extern "C"

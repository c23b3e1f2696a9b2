// src/c_api/smax_c_sparse.cc: C ABI of the sparse normalisers
// (include/smax/sparse.h): sparsemax, 1.5-entmax, alpha-entmax by bisection,
// top-k sparse softmax, their backward passes and losses.
#include <cstring>

#include "c_api_internal.h"
#include "smax/c/smax.h"
#include "smax/sparse.h"

using smax::capi::checked;
using smax::capi::guarded;
using smax::capi::to_bool;
using smax::capi::to_loss;
using smax::capi::to_optional_view;
using smax::capi::to_options;
using smax::capi::to_view;

namespace {

smax::EntmaxBisectOptions to_bisect(const smax_entmax_bisect_options* p, const char* op) {
  smax::EntmaxBisectOptions out;
  if (checked(p, op, "params", "smax_entmax_bisect_options") == nullptr) return out;
  out.alpha = p->alpha;
  out.n_iter = p->n_iter;
  out.ensure_sum_one = to_bool(p->ensure_sum_one, op, "params.ensure_sum_one");
  out.alpha_tensor = to_optional_view(p->alpha_tensor, op, "params.alpha_tensor");
  return out;
}

smax::SparseSoftmaxLossOptions to_sparse_loss(const smax_sparse_softmax_loss_options* p,
                                              const char* op) {
  smax::SparseSoftmaxLossOptions out;
  if (checked(p, op, "params", "smax_sparse_softmax_loss_options") == nullptr) return out;
  out.force_target = to_bool(p->force_target, op, "params.force_target");
  return out;
}

}  // namespace

extern "C" {

void smax_entmax_bisect_options_init(smax_entmax_bisect_options* options) {
  if (options == nullptr) return;
  const smax::EntmaxBisectOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->alpha = d.alpha;
  options->n_iter = d.n_iter;
  options->ensure_sum_one = d.ensure_sum_one ? 1 : 0;
  options->alpha_tensor = nullptr;
}

void smax_sparse_softmax_loss_options_init(smax_sparse_softmax_loss_options* options) {
  if (options == nullptr) return;
  const smax::SparseSoftmaxLossOptions d;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->force_target = d.force_target ? 1 : 0;
}

// ---- sparsemax ---------------------------------------------------------------

smax_status smax_sparsemax(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options) {
  return smax::capi::unary_op(&smax::sparsemax, "sparsemax", src, "src", dst, "dst", options);
}
smax_status smax_sparsemax_backward(const smax_tensor* y, const smax_tensor* dy,
                                    const smax_tensor* dsrc, const smax_softmax_options* options) {
  return smax::capi::ternary_op(&smax::sparsemax_backward, "sparsemax_backward", y, "y", dy,
                                "dy", dsrc, "dsrc", options);
}
smax_status smax_sparsemax_loss(const smax_tensor* src, const smax_tensor* target,
                                const smax_tensor* dst, const smax_loss_options* loss,
                                const smax_softmax_options* options) {
  return smax::capi::loss_op(&smax::sparsemax_loss, "sparsemax_loss", src, target, dst, loss,
                             options);
}
smax_status smax_sparsemax_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                         const smax_tensor* dloss, const smax_tensor* dsrc,
                                         const smax_loss_options* loss,
                                         const smax_softmax_options* options) {
  return smax::capi::loss_backward_op(&smax::sparsemax_loss_backward, "sparsemax_loss_backward",
                                      src, target, dloss, dsrc, loss, options);
}

// ---- 1.5-entmax --------------------------------------------------------------

smax_status smax_entmax15(const smax_tensor* src, const smax_tensor* dst,
                          const smax_softmax_options* options) {
  return smax::capi::unary_op(&smax::entmax15, "entmax15", src, "src", dst, "dst", options);
}
smax_status smax_entmax15_backward(const smax_tensor* y, const smax_tensor* dy,
                                   const smax_tensor* dsrc, const smax_softmax_options* options) {
  return smax::capi::ternary_op(&smax::entmax15_backward, "entmax15_backward", y, "y", dy, "dy",
                                dsrc, "dsrc", options);
}
smax_status smax_entmax15_loss(const smax_tensor* src, const smax_tensor* target,
                               const smax_tensor* dst, const smax_loss_options* loss,
                               const smax_softmax_options* options) {
  return smax::capi::loss_op(&smax::entmax15_loss, "entmax15_loss", src, target, dst, loss,
                             options);
}
smax_status smax_entmax15_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                        const smax_tensor* dloss, const smax_tensor* dsrc,
                                        const smax_loss_options* loss,
                                        const smax_softmax_options* options) {
  return smax::capi::loss_backward_op(&smax::entmax15_loss_backward, "entmax15_loss_backward",
                                      src, target, dloss, dsrc, loss, options);
}

// ---- alpha-entmax by bisection ---------------------------------------------------

smax_status smax_entmax_bisect(const smax_tensor* src, const smax_tensor* dst,
                               const smax_entmax_bisect_options* params,
                               const smax_softmax_options* options) {
  const char* op = "entmax_bisect";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::EntmaxBisectOptions p = to_bisect(params, op);
    smax::entmax_bisect(s, d, p, to_options(options, op));
  });
}
smax_status smax_entmax_bisect_backward(const smax_tensor* y, const smax_tensor* dy,
                                        const smax_tensor* dsrc, const smax_tensor* dalpha,
                                        const smax_entmax_bisect_options* params,
                                        const smax_softmax_options* options) {
  const char* op = "entmax_bisect_backward";
  return guarded([&] {
    const smax::TensorView vy = to_view(y, op, "y");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView vd = to_view(dsrc, op, "dsrc");
    const std::optional<smax::TensorView> va = to_optional_view(dalpha, op, "dalpha");
    const smax::EntmaxBisectOptions p = to_bisect(params, op);
    smax::entmax_bisect_backward(vy, vdy, vd, va, p, to_options(options, op));
  });
}
smax_status smax_entmax_bisect_loss(const smax_tensor* src, const smax_tensor* target,
                                    const smax_tensor* dst,
                                    const smax_entmax_bisect_options* params,
                                    const smax_loss_options* loss,
                                    const smax_softmax_options* options) {
  const char* op = "entmax_bisect_loss";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::EntmaxBisectOptions p = to_bisect(params, op);
    const smax::LossOptions lo = to_loss(loss, op);
    smax::entmax_bisect_loss(s, t, d, p, lo, to_options(options, op));
  });
}
smax_status smax_entmax_bisect_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                             const smax_tensor* dloss, const smax_tensor* dsrc,
                                             const smax_entmax_bisect_options* params,
                                             const smax_loss_options* loss,
                                             const smax_softmax_options* options) {
  const char* op = "entmax_bisect_loss_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView l = to_view(dloss, op, "dloss");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const smax::EntmaxBisectOptions p = to_bisect(params, op);
    const smax::LossOptions lo = to_loss(loss, op);
    smax::entmax_bisect_loss_backward(s, t, l, d, p, lo, to_options(options, op));
  });
}

// ---- top-k sparse softmax ----------------------------------------------------------

smax_status smax_sparse_softmax(const smax_tensor* src, const smax_tensor* dst, int64_t k,
                                const smax_softmax_options* options) {
  const char* op = "sparse_softmax";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    smax::sparse_softmax(s, d, k, to_options(options, op));
  });
}
smax_status smax_sparse_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                         const smax_tensor* dsrc,
                                         const smax_softmax_options* options) {
  return smax::capi::ternary_op(&smax::sparse_softmax_backward, "sparse_softmax_backward", y,
                                "y", dy, "dy", dsrc, "dsrc", options);
}
smax_status smax_sparse_softmax_loss(const smax_tensor* src, const smax_tensor* target,
                                     const smax_tensor* dst, int64_t k,
                                     const smax_sparse_softmax_loss_options* params,
                                     const smax_loss_options* loss,
                                     const smax_softmax_options* options) {
  const char* op = "sparse_softmax_loss";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView d = to_view(dst, op, "dst");
    const smax::SparseSoftmaxLossOptions p = to_sparse_loss(params, op);
    const smax::LossOptions lo = to_loss(loss, op);
    smax::sparse_softmax_loss(s, t, d, k, p, lo, to_options(options, op));
  });
}
smax_status smax_sparse_softmax_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                              const smax_tensor* dloss, const smax_tensor* dsrc,
                                              int64_t k,
                                              const smax_sparse_softmax_loss_options* params,
                                              const smax_loss_options* loss,
                                              const smax_softmax_options* options) {
  const char* op = "sparse_softmax_loss_backward";
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView t = to_view(target, op, "target");
    const smax::TensorView l = to_view(dloss, op, "dloss");
    const smax::TensorView d = to_view(dsrc, op, "dsrc");
    const smax::SparseSoftmaxLossOptions p = to_sparse_loss(params, op);
    const smax::LossOptions lo = to_loss(loss, op);
    smax::sparse_softmax_loss_backward(s, t, l, d, k, p, lo, to_options(options, op));
  });
}

}  // extern "C"

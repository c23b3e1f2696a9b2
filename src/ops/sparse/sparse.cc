// src/ops/sparse/sparse.cc: sparsemax, 1.5-entmax, alpha-entmax (bisection) and
// top-k sparse softmax, forward and backward (include/smax/sparse.h).
// Row solvers: src/ops/sparse/sparse_rows.h; kernels: src/kernels/sparse.cc.
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/sparse.h"
#include "core/long_row.h"
#include "core/rowwise.h"
#include "ops/sparse/sparse_rows.h"
#include "ops/sparse/sparse_shared.h"
#include "smax/error.h"
#include "smax/softmax.h"
#include "smax/sparse.h"

namespace smax {
namespace {

using detail::RowArgs;
using detail::Rowwise;
using detail::BackwardRowwise;
using detail::ForwardRowwise;
namespace sp = detail::sparse;

// Forward of the candidate-set normalisers: `radius` R of the candidate
// window on t - m, `solve` the threshold step.
template <class Solve>
void candidate_forward(Rowwise& rw, double radius, Solve&& solve) {
  rw.run(sp::work_floats(detail::row_length(rw)), [&](const RowArgs& a) {
    sp::Row row = sp::prepare(a.in[0], a.n, radius, a.scratch);
    if (row.kind == sp::Kind::kOk) solve(row, a);
    sp::write_row(row, a.out[0], a.empty_row);
  });
}

// Backward from y: w_i = y_i^(2 - alpha), dx = s w (g - <g,w>/sum w).
// alpha per row through `alpha_of`; dalpha (row output 0) if `with_alpha`.
template <class AlphaOf>
void entmax_family_backward(Rowwise& rw, bool with_alpha, AlphaOf&& alpha_of) {
  rw.zero_masked_outputs();
  // Scratch: the float64 weights w (2 floats each), 64-byte aligned.
  rw.run(2 * detail::row_length(rw) + 16, [&](const RowArgs& a) {
    const int64_t n = a.n;
    const double alpha = alpha_of(a);
    float dalpha = 0.0f;
    if (n > 0) {
      auto base = reinterpret_cast<uintptr_t>(a.scratch);
      base = (base + 63) & ~static_cast<uintptr_t>(63);
      auto* w = reinterpret_cast<double*>(base);
      const kernels::EntmaxGradSums s =
          kernels::entmax_grad_sums(a.in[0], a.in[1], n, alpha, with_alpha, w);
      if (!std::isfinite(s.sum_y)) {  // NaN (or non-finite) saved output: NaN row
        kernels::sparse_fill(a.out[0], n, sp::kNaNF);
        dalpha = sp::kNaNF;
      } else if (s.sum_w == 0.0) {  // empty row (kZero policy): no gradient
        kernels::sparse_fill(a.out[0], n, 0.0f);
      } else {
        // q stays float64: rounded to f32 it cost up to |q| u w_i in dx_i,
        // far more than |dx_i| when one large w_i dominates q (alpha > 2).
        const double q = s.gw / s.sum_w;
        kernels::entmax_grad_store(w, a.in[1], n, q, a.scale, a.out[0]);
        if (with_alpha) {
          const double am1 = alpha - 1.0;
          const double gpt = s.gw / s.sum_w;  // <g, p~>
          const double v = (s.gy - gpt) / (am1 * am1) - (s.gS - gpt * s.H) / am1;
          dalpha = static_cast<float>(v);
        }
      }
    }
    if (with_alpha) *a.row_out[0] = dalpha;
  });
}

// softmax_backward (dx = s y (dy - <dy, y>)) with the contract of this
// header: entries masked by the options' masks (bool mask 0, additive mask
// -inf) get exactly 0, whatever y and dy hold there (a raw y, NaN rows,
// all-masked rows). softmax_backward itself ignores the masks (its y is 0
// there), so with masks the same row kernel runs on the Rowwise driver,
// which validates the masks and zeroes the masked outputs; without masks it
// is exactly softmax_backward (same bits).
void masked_softmax_backward(const char* op, const TensorView& y, const TensorView& dy,
                             const TensorView& dsrc, const SoftmaxOptions& options) {
  if (!options.additive_mask && !options.bool_mask) {
    softmax_backward(y, dy, dsrc, options);
    return;
  }
  BackwardRowwise rw(op, y, "y", false, dy, dsrc, options);
  rw.zero_masked_outputs();
  rw.run(0, [&](const RowArgs& a) {
    if (a.n == 0) return;
    detail::backward_row(detail::BackwardOp::kSoftmax, a.in[0], a.in[1], a.n, a.scale, a.out[0],
                         1);
  });
}

}  // namespace

// ---- sparsemax ---------------------------------------------------------------

void sparsemax(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  ForwardRowwise rw("sparsemax", src, dst, options);
  candidate_forward(rw, 1.0, [](sp::Row& row, const RowArgs&) { sp::solve_sparsemax(row); });
}

void sparsemax_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                        const SoftmaxOptions& options) {
  BackwardRowwise rw("sparsemax_backward", y, "y", false, dy, dsrc, options);
  entmax_family_backward(rw, false, [](const RowArgs&) { return 2.0; });
}

// ---- 1.5-entmax --------------------------------------------------------------

void entmax15(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  ForwardRowwise rw("entmax15", src, dst, options);
  rw.run(sp::work_floats(detail::row_length(rw)), [&](const RowArgs& a) {
    if (sp::entmax15_row_fast(a.in[0], a.n, a.out[0])) return;
    sp::Row row = sp::prepare(a.in[0], a.n, 2.0, a.scratch);
    if (row.kind == sp::Kind::kOk) sp::solve_entmax15(row);
    sp::write_row(row, a.out[0], a.empty_row);
  });
}

void entmax15_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                       const SoftmaxOptions& options) {
  BackwardRowwise rw("entmax15_backward", y, "y", false, dy, dsrc, options);
  entmax_family_backward(rw, false, [](const RowArgs&) { return 1.5; });
}

// ---- alpha-entmax ------------------------------------------------------------

void entmax_bisect(const TensorView& src, const TensorView& dst,
                   const EntmaxBisectOptions& params, const SoftmaxOptions& options) {
  const char* op = "entmax_bisect";
  detail::check_bisect_params(op, params);
  if (!params.alpha_tensor && params.alpha == 1.0f) {
    softmax(src, dst, options);
    return;
  }
  ForwardRowwise rw(op, src, dst, options);
  const bool per_row = params.alpha_tensor.has_value();
  if (per_row) {
    rw.add_row_input(*params.alpha_tensor, "alpha_tensor", DType::kF32);
    detail::check_alpha_tensor(op, *params.alpha_tensor);
  }
  const double scalar_alpha = params.alpha;
  rw.run(sp::work_floats(detail::row_length(rw)), [&](const RowArgs& a) {
    const double alpha = per_row ? static_cast<double>(a.row_in[0]) : scalar_alpha;
    sp::Row row = sp::prepare(a.in[0], a.n, 1.0 / (alpha - 1.0), a.scratch);
    if (row.kind == sp::Kind::kOk) sp::solve_bisect(row, alpha, params.n_iter, params.ensure_sum_one);
    sp::write_row(row, a.out[0], a.empty_row);
  });
}

void entmax_bisect_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                            const std::optional<TensorView>& dalpha,
                            const EntmaxBisectOptions& params, const SoftmaxOptions& options) {
  const char* op = "entmax_bisect_backward";
  detail::check_bisect_params(op, params);
  if (!params.alpha_tensor && params.alpha == 1.0f) {
    if (dalpha) {
      throw Error(Status::kInvalidArgument,
                  std::string(op) + ": dalpha needs alpha > 1, got alpha 1 (the softmax route)");
    }
    masked_softmax_backward(op, y, dy, dsrc, options);
    return;
  }
  BackwardRowwise rw(op, y, "y", false, dy, dsrc, options);
  const bool per_row = params.alpha_tensor.has_value();
  if (dalpha) rw.add_row_output(*dalpha, "dalpha");
  if (per_row) {
    rw.add_row_input(*params.alpha_tensor, "alpha_tensor", DType::kF32);
    detail::check_alpha_tensor(op, *params.alpha_tensor);
  }
  const double scalar_alpha = params.alpha;
  entmax_family_backward(rw, dalpha.has_value(), [&](const RowArgs& a) {
    return per_row ? static_cast<double>(a.row_in[0]) : scalar_alpha;
  });
}

// ---- top-k sparse softmax ------------------------------------------------------

void sparse_softmax(const TensorView& src, const TensorView& dst, int64_t k,
                    const SoftmaxOptions& options) {
  const char* op = "sparse_softmax";
  detail::check_k(op, k);
  ForwardRowwise rw(op, src, dst, options);
  if (k >= detail::row_length(rw)) {
    softmax(src, dst, options);
    return;
  }
  rw.run(sp::topk_floats(detail::row_length(rw)), [&](const RowArgs& a) {
    const sp::TopK r = sp::solve_topk(a.in[0], a.n, k, -1, a.scratch, a.out[0]);
    if (r.kind != sp::Kind::kOk && a.n > 0) sp::write_topk_special(r, a.n, a.out[0], a.empty_row);
  });
}

void sparse_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                             const SoftmaxOptions& options) {
  masked_softmax_backward("sparse_softmax_backward", y, dy, dsrc, options);
}

}  // namespace smax

// src/ops/sparse/sparse.cc: sparsemax, 1.5-entmax, alpha-entmax (bisection) and
// top-k sparse softmax, forward and backward (include/smax/sparse.h).
// Row solvers: src/ops/sparse/sparse_rows.h; kernels: src/kernels/sparse.cc.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/softmax_f64.h"
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

using detail::Rowwise;
using detail::BackwardRowwise;
using detail::ForwardRowwise;
namespace sp = detail::sparse;

// Forward of the candidate-set normalisers: `radius` R of the candidate
// window on t - m, `solve` the threshold step. float64 rows for f64 logits
// (Rowwise::run_native), f32 rows otherwise.
template <class Solve>
void candidate_forward(Rowwise& rw, double radius, Solve&& solve) {
  rw.run_native(sp::work_bytes(rw.row_length()), [&](const auto& a) {
    sp::Row row = sp::prepare(a.in[0], a.n, radius, a.scratch);
    if (row.kind == sp::Kind::kOk) solve(row, a);
    sp::write_row(row, a.out[0], a.empty_row);
  });
}

// Backward from y: w_i = y_i^(2 - alpha), dx = s w (g - <g,w>/sum w).
// alpha per row through `alpha_of`; dalpha (row output 0) if `with_alpha`.
// float64 rows when y or dy is f64 (the same float64 sums, on doubles).
template <class AlphaOf>
void entmax_family_backward(Rowwise& rw, bool with_alpha, AlphaOf&& alpha_of) {
  rw.zero_masked_outputs();
  // Scratch: the float64 weights w, 64-byte aligned.
  rw.run_native(8 * rw.row_length() + 64, [&](const auto& a) {
    using T = detail::RowValue<decltype(a)>;
    const int64_t n = a.n;
    const double alpha = alpha_of(a);
    T dalpha = 0;
    if (n > 0) {
      auto base = reinterpret_cast<uintptr_t>(a.scratch);
      base = (base + 63) & ~static_cast<uintptr_t>(63);
      auto* w = reinterpret_cast<double*>(base);
      const kernels::EntmaxGradSums s =
          kernels::entmax_grad_sums(a.in[0], a.in[1], n, alpha, with_alpha, w);
      if (!std::isfinite(s.sum_y)) {  // NaN (or non-finite) saved output: NaN row
        sp::fill_row(a.out[0], n, static_cast<T>(sp::kNaND));
        dalpha = static_cast<T>(sp::kNaND);
      } else if (s.sum_w == 0.0) {  // empty row (kZero policy): no gradient
        sp::fill_row(a.out[0], n, T(0));
      } else {
        // q stays float64: rounded to f32 it cost up to |q| u w_i in dx_i,
        // far more than |dx_i| when one large w_i dominates q (alpha > 2).
        const double q = s.gw / s.sum_w;
        kernels::entmax_grad_store(w, a.in[1], n, q, a.scale, a.out[0]);
        if (with_alpha) {
          const double am1 = alpha - 1.0;
          const double gpt = s.gw / s.sum_w;  // <g, p~>
          const double v = (s.gy - gpt) / (am1 * am1) - (s.gS - gpt * s.H) / am1;
          dalpha = static_cast<T>(v);
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
  rw.run_native(0, [&](const auto& a) {
    if (a.n == 0) return;
    if constexpr (std::is_same_v<detail::RowValue<decltype(a)>, double>) {
      kernels::softmax_backward_row_f64(false, a.in[0], a.in[1], a.n, a.scale, a.out[0]);
    } else {
      detail::backward_row(detail::BackwardOp::kSoftmax, a.in[0], a.in[1], a.n, a.scale,
                           a.out[0], 1);
    }
  });
}

}  // namespace

// ---- sparsemax ---------------------------------------------------------------

void sparsemax(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  ForwardRowwise rw("sparsemax", src, dst, options);
  candidate_forward(rw, 1.0, [](sp::Row& row, const auto&) { sp::solve_sparsemax(row); });
}

void sparsemax_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                        const SoftmaxOptions& options) {
  BackwardRowwise rw("sparsemax_backward", y, "y", false, dy, dsrc, options);
  entmax_family_backward(rw, false, [](const auto&) { return 2.0; });
}

// ---- 1.5-entmax --------------------------------------------------------------

void entmax15(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  ForwardRowwise rw("entmax15", src, dst, options);
  rw.run_native(sp::work_bytes(rw.row_length()), [&](const auto& a) {
    // The whole-row fast path is f32 (f64 rows take the candidate path).
    if constexpr (std::is_same_v<detail::RowValue<decltype(a)>, float>) {
      if (sp::entmax15_row_fast(a.in[0], a.n, a.out[0])) return;
    }
    sp::Row row = sp::prepare(a.in[0], a.n, 2.0, a.scratch);
    if (row.kind == sp::Kind::kOk) sp::solve_entmax15(row);
    sp::write_row(row, a.out[0], a.empty_row);
  });
}

void entmax15_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                       const SoftmaxOptions& options) {
  BackwardRowwise rw("entmax15_backward", y, "y", false, dy, dsrc, options);
  entmax_family_backward(rw, false, [](const auto&) { return 1.5; });
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
  rw.run_native(sp::work_bytes(rw.row_length()), [&](const auto& a) {
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
  entmax_family_backward(rw, dalpha.has_value(), [&](const auto& a) {
    return per_row ? static_cast<double>(a.row_in[0]) : scalar_alpha;
  });
}

// ---- top-k sparse softmax ------------------------------------------------------

void sparse_softmax(const TensorView& src, const TensorView& dst, int64_t k,
                    const SoftmaxOptions& options) {
  const char* op = "sparse_softmax";
  detail::check_k(op, k);
  ForwardRowwise rw(op, src, dst, options);
  if (k >= rw.row_length()) {
    softmax(src, dst, options);
    return;
  }
  rw.run_native(sp::topk_bytes(rw.row_length()), [&](const auto& a) {
    const sp::TopK r = sp::solve_topk(a.in[0], a.n, k, -1, a.scratch, a.out[0]);
    if (r.kind != sp::Kind::kOk && a.n > 0) sp::write_topk_special(r, a.n, a.out[0], a.empty_row);
  });
}

void sparse_softmax_backward(const TensorView& y, const TensorView& dy, const TensorView& dsrc,
                             const SoftmaxOptions& options) {
  masked_softmax_backward("sparse_softmax_backward", y, dy, dsrc, options);
}

}  // namespace smax

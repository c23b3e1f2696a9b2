// src/reference/sparse.h: float64 oracles of the sparse normalisers
// (include/smax/sparse.h). Slow and obviously correct: full sorts of the
// finite logits, the closed forms of docs/normalizers.md ("Sparse
// normalisers"), the entmax package's bisection
// loop, plain double loops. Every oracle first shifts the row by its max
// (all these maps are shift-invariant), so huge logits do not cancel.
//
// Row-level functions take the logits of one row as doubles (-inf = masked;
// NaN or +inf anywhere -> NaN row; all -inf -> empty_row policy) and are
// what the finite-difference tests differentiate. Tensor-level functions
// take the same views and options as the library (ref_rows) and return the
// dense logical output.
#pragma once

#include <cstdint>
#include <vector>

#include "smax/loss.h"
#include "smax/options.h"
#include "smax/sparse.h"
#include "smax/tensor.h"

namespace smax::reference {

// ---- rows ---------------------------------------------------------------------
std::vector<double> sparsemax_row(const std::vector<double>& t, EmptyRow e = EmptyRow::kZero);
std::vector<double> entmax15_row(const std::vector<double>& t, EmptyRow e = EmptyRow::kZero);
/// The package's bisection in double (alpha > 1); alpha == 1: softmax.
std::vector<double> entmax_bisect_row(const std::vector<double>& t, double alpha, int n_iter,
                                      bool ensure_sum_one, EmptyRow e = EmptyRow::kZero);
/// Softmax over the k largest finite logits (ties: lowest index first),
/// plus index `force` when >= 0 and finite.
std::vector<double> sparse_softmax_row(const std::vector<double>& t, int64_t k,
                                       int64_t force = -1, EmptyRow e = EmptyRow::kZero);
/// VJP from y: w = y^(2-alpha) on y > 0, dx = s w (g - <g,w>/sum w); NaN y
/// -> NaN row; sum w == 0 -> zeros. dalpha (nullable): the package formula.
std::vector<double> entmax_vjp_row(const std::vector<double>& y, const std::vector<double>& g,
                                   double alpha, double s, double* dalpha = nullptr);

// ---- tensors --------------------------------------------------------------------
std::vector<double> sparsemax(const TensorView& src, const SoftmaxOptions& options = {});
std::vector<double> entmax15(const TensorView& src, const SoftmaxOptions& options = {});
std::vector<double> entmax_bisect(const TensorView& src, const EntmaxBisectOptions& params = {},
                                  const SoftmaxOptions& options = {});
std::vector<double> sparse_softmax(const TensorView& src, int64_t k,
                                   const SoftmaxOptions& options = {});

/// alpha = 2: sparsemax_backward; 1.5: entmax15_backward; else entmax_bisect
/// (per-row alpha from params.alpha_tensor); dalpha (nullable) gets one
/// value per row (rows in RowArgs order).
std::vector<double> entmax_backward(const TensorView& y, const TensorView& dy, double alpha,
                                    const SoftmaxOptions& options = {},
                                    const EntmaxBisectOptions* params = nullptr,
                                    std::vector<double>* dalpha = nullptr);

/// Which loss a loss oracle computes.
struct SparseLossSpec {
  enum Which { kSparsemax, kEntmax15, kBisect, kTopK } which = kSparsemax;
  EntmaxBisectOptions bisect;  ///< kBisect
  int64_t k = 1;               ///< kTopK
  bool force_target = false;   ///< kTopK
};
/// The loss output's dense contents (kNone: one per row; else 1 value).
/// `target`: i64, src's shape without the axis or keepdim.
std::vector<double> sparse_loss(const SparseLossSpec& spec, const TensorView& src,
                                const TensorView& target, const LossOptions& loss = {},
                                const SoftmaxOptions& options = {});
/// dsrc (dense, src's logical shape) for upstream `dloss`.
std::vector<double> sparse_loss_backward(const SparseLossSpec& spec, const TensorView& src,
                                         const TensorView& target, const TensorView& dloss,
                                         const LossOptions& loss = {},
                                         const SoftmaxOptions& options = {});

}  // namespace smax::reference

// src/reference/linear_cross_entropy.h: float64 oracle of
// linear_cross_entropy and its backward (include/smax/linear_cross_entropy.h).
//
// Obviously correct and slow: materialises the [N, V] logits in double,
//   z_rj = sum_k h_rk w_jk + b_j   (float64 from the f32 inputs, no rounding)
//   u = z * s (s the library's f32 scale / temperature), t = softcap *
//   tanh(u / softcap) (finite u only), then cross_entropy's formulas in
// double (include/smax/cross_entropy.h), and the gradients
//   dz_rj = s cap'(u_rj) G_r (p_j A_r - B_rj), dhidden = dz W,
//   dweight = dz^T H, dbias = sum_r dz_r.
// The library's logits are f32 GEMM results, so comparisons need the GEMM
// error term of the header's bounds (E_r there).
//
// `Problem` is the same computation on plain double arrays, so tests can
// take float64 finite differences of the oracle itself.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "smax/cross_entropy.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::reference {

struct LceProblem {
  int64_t N = 0, D = 0, V = 0;
  std::vector<double> h;  ///< N x D row-major
  std::vector<double> w;  ///< V x D row-major
  std::vector<double> b;  ///< V, or empty (no bias)
  std::vector<int64_t> target;    ///< N
  std::vector<double> class_w;    ///< V, or empty (all 1)
  double s = 1.0, cap = 0.0, a = 0.0, zs = 0.0;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::kMean;
  EmptyMean empty_mean = EmptyMean::kNan;
  EmptyRow empty_row = EmptyRow::kZero;
};

struct LceResult {
  // Forward. Per-row values have N entries.
  std::vector<double> row_loss;  ///< fully weighted loss of each row (0 when ignored)
  double loss = 0.0;             ///< reduced loss (kMean / kSum)
  std::vector<double> z_rows;    ///< z-loss part per row
  double z_loss = 0.0;           ///< reduced z-loss
  std::vector<double> lse, entropy, target_logprob, accuracy;
  double accuracy_reduced = 0.0;
  std::vector<double> logits;    ///< t, N x V
  // Backward (when an upstream gradient was given).
  std::vector<double> G;         ///< per-row upstream factor
  std::vector<double> dz;        ///< N x V
  std::vector<double> dhidden;   ///< N x D
  std::vector<double> dweight;   ///< V x D
  std::vector<double> dbias;     ///< V
};

/// Solves `p`; with `dloss` (N values for kNone, else one) also the gradients.
LceResult lce_solve(const LceProblem& p, const std::vector<double>* dloss = nullptr);

/// The problem of a library call (f32 views widened to double).
LceProblem lce_problem(const TensorView& hidden, const TensorView& weight,
                       const TensorView& target, const std::optional<TensorView>& bias,
                       const CrossEntropyOptions& ce = {}, const SoftmaxOptions& options = {});

/// Oracle of linear_cross_entropy(_backward): `dloss` nullable (forward only).
LceResult linear_cross_entropy(const TensorView& hidden, const TensorView& weight,
                               const TensorView& target, const std::optional<TensorView>& bias,
                               const CrossEntropyOptions& ce = {},
                               const SoftmaxOptions& options = {},
                               const TensorView* dloss = nullptr);

}  // namespace smax::reference

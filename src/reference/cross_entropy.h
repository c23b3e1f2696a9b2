// src/reference/cross_entropy.h: float64 oracles of cross_entropy, the PaLM
// z-loss and the spherical Z-loss (include/smax/cross_entropy.h), forward
// and backward. Plain loops over the rows that ref_rows() gives; every
// formula written out as in the header, the special-value rules included.
//
// Logits: u = the f32 logits of SoftmaxOptions without the additive mask
// when softcap > 0 (scale, bool mask), then t = softcap * tanh(u / softcap)
// in double (u = +-inf kept) plus the mask value in double; without softcap
// exactly SoftmaxOptions' f32 logits.
//
// Besides values, the oracles return error scales (`*_mag`): the sums of
// the magnitudes of the terms that make up each value, which the tests
// multiply by the documented relative bounds.
#pragma once

#include <vector>

#include "reference/rows.h"
#include "smax/cross_entropy.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::reference {

struct LossRef {
  /// Per row (row-major over src's non-axis dims): the fully weighted loss
  /// (0 for ignored rows) and its error scale.
  std::vector<double> rows, rows_mag;
  std::vector<char> active;
  double denominator = 0.0;  ///< kMean divisor
  Reduction reduction = Reduction::kMean;
  EmptyMean empty_mean = EmptyMean::kNan;
  /// The reduced value (kSum / kMean) of `values` with this reduction.
  double reduce(const std::vector<double>& values) const;
  double reduce_with(const std::vector<double>& values, double denominator) const;
};

struct CrossEntropyRef {
  LossRef loss;
  std::vector<double> z;  ///< per row z-loss part (weighted; 0 ignored)
  std::vector<double> lse, entropy, target_logprob, accuracy;  ///< per row
  std::vector<double> lse_mag, entropy_mag, target_logprob_mag;
  std::vector<double> t_max;  ///< per row max |t_j| over unmasked j (bounds)
};

CrossEntropyRef cross_entropy(const TensorView& src, const TensorView& target,
                              const CrossEntropyOptions& ce = {},
                              const SoftmaxOptions& options = {});

/// Gradient in src's dense logical layout, and its elementwise error scale
/// s * cap'_j * |G| * (p_j |A| + |B_j| + [j == y] |D|).
/// cross_entropy_backward with softcap and an additive mask also gives
/// t_round = 0.03 (|t_j| + |L|) per element (0 elsewhere; empty for the other
/// oracles): the f32 rounding of t_j = fl(c_j + mask_j) and of L in units of
/// the 4e-6 bound (this oracle evaluates t in float64), added to the bound's
/// (1 + |u_j| / softcap) factor (smax/cross_entropy.h).
struct GradRef {
  std::vector<double> dsrc, mag;
  std::vector<double> t_round;  ///< per entry: the rounding of t (softcap + additive mask); empty = 0
};
/// cross_entropy's logits t by row (RefRows order): u = x s under the bool
/// mask, then softcap tanh(u / softcap) + additive mask when softcap > 0
/// (the bool mask wins over the mask's value), else x s + mask.
RefRows cross_entropy_logits(const char* fn, const TensorView& src, double softcap,
                             const SoftmaxOptions& options);

GradRef cross_entropy_backward(const TensorView& src, const TensorView& target,
                               const TensorView& dloss, const CrossEntropyOptions& ce = {},
                               const SoftmaxOptions& options = {});

/// PaLM z-loss; `target` nullable (then every row counts with weight 1).
LossRef z_loss(const TensorView& src, const TensorView* target, double coefficient,
               const LossOptions& loss = {}, const SoftmaxOptions& options = {});
GradRef z_loss_backward(const TensorView& src, const TensorView* target, const TensorView& dloss,
                        double coefficient, const LossOptions& loss = {},
                        const SoftmaxOptions& options = {});

LossRef spherical_z_loss(const TensorView& src, const TensorView& target, double a, double b,
                         const LossOptions& loss = {}, const SoftmaxOptions& options = {});
GradRef spherical_z_loss_backward(const TensorView& src, const TensorView& target,
                                  const TensorView& dloss, double a, double b,
                                  const LossOptions& loss = {},
                                  const SoftmaxOptions& options = {});

}  // namespace smax::reference

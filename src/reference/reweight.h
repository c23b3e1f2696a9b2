// src/reference/reweight.h: float64 oracles of the re-weighting normalisers
// (include/smax/reweight.h).
//
// Two levels:
//  * row functions on double rows (t = the row's logits, -inf = masked),
//    used by the tensor-level oracles and by finite-difference tests (they
//    can be perturbed in double). Backward row functions return dL/dt (or
//    dL/dz for softplus), without the chain factor s = scale / temperature.
//  * tensor-level oracles with the library's semantics (strided views,
//    axis, masks, scale, empty_row, the op's own f32 roundings: the sigmoid
//    bias b = fl(-ln n) and the softplus lambda and z = fl(lambda * t) are
//    formed in f32 exactly like the op, everything else in double); they
//    return dense row-major vectors in src's logical shape.
// Special values exactly as documented in include/smax/reweight.h.
#pragma once

#include <cstdint>
#include <vector>

#include "smax/options.h"
#include "smax/reweight.h"
#include "smax/tensor.h"

namespace smax::reference {

using Row = std::vector<double>;

// ---- row level -------------------------------------------------------------------
/// softmax(v) in double, -inf entries 0: exp(v_i - max) / sum, summed in
/// index order. For rows with a finite maximum (callers handle NaN, +inf and
/// all -inf rows first; such a row gives NaN here).
Row softmax_finite_row(const Row& v);

/// Moments of the visible entries (those != -inf; NaN counts) of t, as the
/// logit-standardisation oracle and its bounds form them: N = the count,
/// mu = (sum in index order) / N, D = N - 1 (unbiased) or N, sigma =
/// sqrt(sum (t - mu)^2 / D) for N > 1, else 0. N must be >= 1.
struct VisibleMoments {
  int64_t N = 0;
  double mu = 0.0, sigma = 0.0, D = 0.0;
};
VisibleMoments visible_moments(const Row& t, bool unbiased);

Row sa_row(const Row& t, bool normalized, EmptyRow empty);
Row sa_backward_row(const Row& t, const Row& g, bool normalized, bool grad_through_bounds,
                    EmptyRow empty);
Row sigmoid_norm_row(const Row& t, double bias, EmptyRow empty);
/// y of softplus normalisation of z (already lambda * t) with re-weighting power.
Row softplus_norm_row(const Row& z, double power, EmptyRow empty);
/// dL/dz.
Row softplus_norm_backward_row(const Row& z, const Row& g, double power, EmptyRow empty);
/// log softplus(z), accurate for any z (-inf -> -inf).
double log_softplus(double z);
Row power_row(const Row& t, int p, EmptyRow empty);
Row power_backward_row(const Row& t, const Row& g, int p, EmptyRow empty);
Row prob_temperature_row(const Row& t, double T, EmptyRow empty);
Row prob_temperature_backward_row(const Row& t, const Row& g, double T, EmptyRow empty);
Row standardization_row(const Row& t, const LogitStandardizationOptions& ls, EmptyRow empty);
Row standardization_backward_row(const Row& t, const Row& g,
                                 const LogitStandardizationOptions& ls, EmptyRow empty);

// ---- tensor level -------------------------------------------------------------------
std::vector<double> self_adjust_softmax(const TensorView& src, const SelfAdjustOptions& sa,
                                        const SoftmaxOptions& options = {});
std::vector<double> self_adjust_softmax_backward(const TensorView& src, const TensorView& dy,
                                                 const SelfAdjustOptions& sa,
                                                 const SoftmaxOptions& options = {});
std::vector<double> sigmoid_normalizer(const TensorView& src,
                                       const SigmoidNormalizerOptions& sig,
                                       const SoftmaxOptions& options = {});
/// dx = s dy y (1 - y), 0 where masked.
std::vector<double> sigmoid_normalizer_backward(const TensorView& y, const TensorView& dy,
                                                const SoftmaxOptions& options = {});
std::vector<double> softplus_normalizer(const TensorView& src,
                                        const SoftplusNormalizerOptions& sp,
                                        const SoftmaxOptions& options = {});
std::vector<double> softplus_normalizer_backward(const TensorView& src, const TensorView& dy,
                                                 const SoftplusNormalizerOptions& sp,
                                                 const SoftmaxOptions& options = {});
/// The f32 z = fl(lambda_f32 * t) the op forms (dense logical layout); for
/// error bounds in tests.
std::vector<double> softplus_z(const TensorView& src, const SoftplusNormalizerOptions& sp,
                               const SoftmaxOptions& options = {});
std::vector<double> power_softmax(const TensorView& src, int p,
                                  const SoftmaxOptions& options = {});
std::vector<double> power_softmax_backward(const TensorView& src, const TensorView& dy, int p,
                                           const SoftmaxOptions& options = {});
std::vector<double> probability_temperature(const TensorView& p_src, float T,
                                            const SoftmaxOptions& options = {});
std::vector<double> probability_temperature_backward(const TensorView& p_src,
                                                     const TensorView& dy, float T,
                                                     const SoftmaxOptions& options = {});
std::vector<double> logit_standardization(const TensorView& src,
                                          const LogitStandardizationOptions& ls,
                                          const SoftmaxOptions& options = {});
std::vector<double> logit_standardization_backward(const TensorView& src, const TensorView& dy,
                                                   const LogitStandardizationOptions& ls,
                                                   const SoftmaxOptions& options = {});

}  // namespace smax::reference

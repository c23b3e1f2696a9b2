// src/reference/rescaled.h: float64 oracles of the rescaled / rectified
// softmaxes (include/smax/rescaled.h): SSMax, softpick, clipped softmax,
// StableMax (+ its cross-entropy) and the Softmax Collapse detector.
//
// Two layers:
//  * row functions on std::vector<double> rows of logits t (-inf = masked):
//    plain double loops, also used by the finite-difference tests;
//  * view functions with the library's semantics (ref_rows: the f32 logits
//    the library forms, axis, masks, empty_row), returning dense row-major
//    vectors in the logical output shape (per-row results in row order).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "smax/loss.h"
#include "smax/options.h"
#include "smax/rescaled.h"
#include "smax/tensor.h"

namespace smax::reference {

using Row = std::vector<double>;

// ---- rows ---------------------------------------------------------------------------

/// softmax of a double row: NaN or +inf -> NaN row, all -inf -> policy.
Row softmax_row(const Row& u, EmptyRow policy);

/// SSMax factor c = s ln n (rounded to f32 when `f32_factor`, as the op).
double ssmax_factor(double s, int64_t n, bool f32_factor);
/// n of a row: fixed_n, or the number of entries != -inf.
int64_t ssmax_n(const Row& t, int64_t fixed_n);
/// softmax(c t) with -inf kept masked and +inf -> NaN; with `f32_logits` the
/// products are rounded to f32 (u = fl(t c), the op's logits), else exact.
Row ssmax_row(const Row& t, double s, int64_t fixed_n, EmptyRow policy, bool f32_factor,
              bool f32_logits);
/// dx = sigma c y (g - <g,y>), *ds = ln n sum_{y_i != 0} t_i y_i (g_i - <g,y>).
Row ssmax_vjp_row(const Row& t, const Row& y, const Row& g, double s, int64_t fixed_n,
                  double sigma, EmptyRow policy, bool f32_factor, double* ds);

/// Softpick of a row and the quantities of its error bound.
struct SoftpickRow {
  Row y;
  Row q;         ///< e^t_j / S (0 where masked)
  double K = 0;  ///< sum q
};
SoftpickRow softpick_row(const Row& t, double eps, EmptyRow policy);
Row softpick_vjp_row(const Row& t, const Row& g, double eps, double sigma, EmptyRow policy);

/// clip((zeta - gamma) p + gamma, 0, 1), p = softmax_row(t) (NaN stays NaN).
Row clipped_softmax_row(const Row& t, double gamma, double zeta, EmptyRow policy);
/// dx = sigma p (u - <u, p>), u_i = (zeta - gamma) g_i where 0 <= z_i <= 1, else 0.
Row clipped_softmax_vjp_row(const Row& t, const Row& g, double gamma, double zeta, double sigma,
                            EmptyRow policy);
/// The documented bounds of one row (smax/rescaled.h, clipped_softmax and
/// clipped_softmax_backward), per element; `g` is dy's row, `sigma` the f32
/// scale / temperature. Used by the tests, the fuzz harness and the CLI.
Row clipped_softmax_bound_row(const Row& t, double gamma, double zeta, EmptyRow policy);
Row clipped_softmax_vjp_bound_row(const Row& t, const Row& g, double gamma, double zeta,
                                  double sigma, EmptyRow policy);

double stable_s(double t);
double stable_ds(double t);
Row stablemax_row(const Row& t, EmptyRow policy);
Row stablemax_vjp_row(const Row& t, const Row& g, double sigma, EmptyRow policy);
/// -log s(t_target) + log sum s (NaN / empty / masked target as the op).
double stablemax_ce_row(const Row& t, int64_t target, EmptyRow policy);
/// coef * d loss / dt.
Row stablemax_ce_grad_row(const Row& t, int64_t target, double coef, EmptyRow policy);

/// Softmax Collapse of one row in `precision`, simulating the kernel's
/// summation order (f32: `lanes` lanes, see softmax_collapse_fraction), with
/// every exp taken as exp(t - m) in float64 rounded to f32 and then moved
/// by `perturb` * 4 ulp (perturb -1, 0 or +1) before any further rounding.
bool collapse_row(const Row& t, Precision precision, int lanes, int perturb);
/// The f32 lane count of a SIMD target named as smax::active_target() names
/// it (the summation order softmax_collapse_fraction's f32 answer depends
/// on): 16 (AVX3 / AVX-512), 8 (AVX2), 4 (SSE*, EMU128), 1 (SCALAR); 0 when
/// the name is not one of those.
int f32_lanes_of_target(std::string_view target);
/// Round-to-nearest-even of a non-negative double to f16 / bf16.
double round_to(double v, Precision precision);

// ---- views ---------------------------------------------------------------------------

std::vector<double> ssmax(const TensorView& src, const SsmaxOptions& params,
                          const SoftmaxOptions& options = {});
/// dsrc from the f32 src, y, dy; `ds` (if not null) receives one value per row.
std::vector<double> ssmax_backward(const TensorView& src, const TensorView& y,
                                   const TensorView& dy, const SsmaxOptions& params,
                                   const SoftmaxOptions& options = {},
                                   std::vector<double>* ds = nullptr);
std::vector<double> softpick(const TensorView& src, const SoftpickOptions& params,
                             const SoftmaxOptions& options = {});
std::vector<double> softpick_backward(const TensorView& src, const TensorView& dy,
                                      const SoftpickOptions& params,
                                      const SoftmaxOptions& options = {});
std::vector<double> clipped_softmax(const TensorView& src, const ClippedSoftmaxOptions& params,
                                    const SoftmaxOptions& options = {});
std::vector<double> clipped_softmax_backward(const TensorView& src, const TensorView& dy,
                                             const ClippedSoftmaxOptions& params,
                                             const SoftmaxOptions& options = {});
std::vector<double> stablemax(const TensorView& src, const SoftmaxOptions& options = {});
std::vector<double> stablemax_backward(const TensorView& src, const TensorView& dy,
                                       const SoftmaxOptions& options = {});
/// kNone: one weighted loss per row (0 for ignored rows); else one value.
std::vector<double> stablemax_cross_entropy(const TensorView& src, const TensorView& target,
                                            const LossOptions& loss = {},
                                            const SoftmaxOptions& options = {});
std::vector<double> stablemax_cross_entropy_backward(const TensorView& src,
                                                     const TensorView& target,
                                                     const TensorView& dloss,
                                                     const LossOptions& loss = {},
                                                     const SoftmaxOptions& options = {});
/// Per row: 1 collapsed, 0 not, -1 undecidable at the f32 exp's accuracy
/// (the perturbed simulations disagree; the kernel may answer either way).
std::vector<int> softmax_collapse_flags(const TensorView& src, Precision precision,
                                        const SoftmaxOptions& options, int lanes);

}  // namespace smax::reference

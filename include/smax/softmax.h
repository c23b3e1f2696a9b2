// smax/softmax.h: exact softmax, log-softmax, logsumexp and their backward.
//
// Common contract of every function here
// --------------------------------------
// * Layout: any rank 0..kMaxRank, any strides (elements), reduction over
//   `options.axis` (negative allowed). `dst` has the shape of `src` (for
//   logsumexp: `src`'s shape without the axis, or with the axis as size 1).
// * Aliasing: `dst` may be exactly `src` (same data pointer and strides,
//   in place). Any other overlap between an output and an input, or an
//   output that overlaps itself (zero stride), is rejected.
// * Errors: throws smax::Error (invalid argument) naming the argument for
//   null data with a non-empty shape, negative sizes, element counts or byte
//   offsets that overflow int64, axis out of range, shape mismatch between
//   src / dst / masks, scale or temperature not finite and > 0, an unknown
//   enum value, a wrong dtype. Nothing is written to an output on error.
// * Numerics (f32, float64 reference, any row length n, any thread count):
//     softmax:        max relative error <= 2e-6 on outputs >= 1e-30
//                     (smaller outputs: absolute error <= 1e-36);
//     log_softmax, logsumexp: max absolute error <= 2e-6 * (1 + |value|);
//     backward:       |dx - dx_ref| <= 2e-6 * (|y| * (|dy| + |<dy,y>|)) + 1e-30
//                     elementwise (scaled by `scale/temperature`), plus
//                     1.02e-6 * |y| * sum_j |dy_j y_j| where <dy, y> cancels
//                     (the error of the dot's f32 products; at most
//                     1.02e-6 |y| max|dy| for a softmax output y).
//   Sums are blocked (f32 vector accumulators, at most 16 adds per lane per
//   block of 32 vectors, then float64 across blocks), so the error does not
//   grow with n. Backward dots and sums accumulate in float64.
// * Special values: NaN anywhere in a row -> NaN row. +inf in a row -> NaN
//   row. -inf logits and masked entries give exactly 0 (log_softmax: -inf)
//   and exactly 0 gradient. A row whose entries are all masked or -inf
//   follows `options.empty_row`. n = 0: empty output, no error (logsumexp of
//   an empty row is -inf). n = 1: exactly softmax 1, log_softmax 0,
//   logsumexp t_0 (for every algorithm).
//   exp underflow is flushed to exact 0: no denormal is ever produced.
// * Storage dtypes: every operand (src, dst, additive_mask; y, dy, dx) may
//   be f32, f64, bf16 or f16, independently.
//   - src (backward: y or dy) f64: float64 arithmetic (float64 kernels; the
//     multiplier is double(scale) / double(temperature), masks widened):
//     softmax relative error <= 1e-14 for outputs >= 1e-300 (absolute
//     <= 1e-300 below), log_softmax / logsumexp absolute <= 1e-14 (1 + |v|),
//     backward |dx - ref| <= 1e-14 |s| |y| (|dy| + |<dy,y>|)
//     + 4e-16 |s| |y| sum_j |y_j dy_j| (softmax) and
//     1e-14 |s| (|dy| + e^y sum_j |dy_j|) (log_softmax), for any n; outputs
//     of another dtype are that result rounded once (docs/numerics.md,
//     "float64").
//   - otherwise the math is f32 on the exactly widened inputs and each
//     output is rounded once to its type (nearest even): the f32 result,
//     same algorithm, rounded. So bf16 / f16 outputs are within the f32
//     bounds above plus half an ulp of their type; f32 outputs from narrow
//     inputs meet the f32 bounds (docs/numerics.md, "bf16 and f16"). One
//     exception, more accurate: log_softmax rows into bf16 / f16 whose max
//     dominates (log sum < 2^-5) are (t_i - m) - log1p(sum of the other
//     terms), within 1 ulp of the type, values near 0 included.
//   Other dtypes are errors naming them.
// * Determinism: bitwise identical results for any `threads` and any
//   parallel_for pool (work is split on a data-independent grid and partial
//   results are merged in a fixed order). Results may differ in the last bits
//   between algorithms and between SIMD targets.
#pragma once

#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

/// y_i = exp(t_i - m) / sum_j exp(t_j - m), m = max_j t_j, per row of `axis`.
void softmax(const TensorView& src, const TensorView& dst,
             const SoftmaxOptions& options = {});

/// y_i = (t_i - m) - log(sum_j exp(t_j - m)), in that order.
void log_softmax(const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& options = {});

/// One value per row: m + log(sum_j exp(t_j - m)). `dst` has `src`'s shape
/// without `axis` (or with `axis` of size 1).
void logsumexp(const TensorView& src, const TensorView& dst,
               const SoftmaxOptions& options = {});

/// Vector-Jacobian product of softmax: dx = s * y * (dy - <dy, y>),
/// s = scale / temperature, given the saved output `y` and upstream `dy`.
/// `dx` may alias `dy` (in place). Masks are not needed: masked entries
/// have y = 0 and get dx = 0.
void softmax_backward(const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const SoftmaxOptions& options = {});

/// Vector-Jacobian product of log_softmax: dx = s * (dy - exp(y) * sum(dy)),
/// except dx = 0 where y = -inf (masked or -inf logits). `dx` may alias `dy`.
void log_softmax_backward(const TensorView& y, const TensorView& dy,
                          const TensorView& dx,
                          const SoftmaxOptions& options = {});

}  // namespace smax

// src/reference/reference.h: float64 oracles for the softmax family.
//
// Slow and obviously correct: plain loops over the N-D index space in double.
// Never dispatched by the library; used by tests, `smax run --check` and the
// benchmarks' sanity checks.
//
// Semantics are exactly those of include/smax/softmax.h, on the same inputs
// (strided views, axis, masks, scale/temperature, empty_row policy):
//  - the logits are the f32 values the library computes, t = fl(fl(x * s) +
//    mask), s = fl(scale / temperature) (t = x exactly when s == 1 and there
//    is no mask), and t = -inf where the bool mask is 0; they are then
//    widened to double and every later step is in double;
//  - special values: NaN or +inf in a row -> NaN row; all -inf -> empty_row
//    policy; n == 0 -> empty (logsumexp -inf).
// Results are dense row-major vectors in the *logical* output shape (src's
// shape; for logsumexp src's shape without the axis), whatever the strides of
// the inputs. Throws smax::Error for inputs the library would reject.
#pragma once

#include <vector>

#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::reference {

std::vector<double> softmax(const TensorView& src, const SoftmaxOptions& options = {});
std::vector<double> log_softmax(const TensorView& src, const SoftmaxOptions& options = {});
std::vector<double> logsumexp(const TensorView& src, const SoftmaxOptions& options = {});

/// dx = s * y * (dy - <dy, y>) in double from the given (f32) y and dy.
std::vector<double> softmax_backward(const TensorView& y, const TensorView& dy,
                                     const SoftmaxOptions& options = {});
/// dx = s * (dy - exp(y) * sum(dy)), 0 where y == -inf.
std::vector<double> log_softmax_backward(const TensorView& y, const TensorView& dy,
                                         const SoftmaxOptions& options = {});

/// Dense row-major copy of a view's logical contents, widened to double
/// (bool views give 0/1). Handy for tests and --check.
std::vector<double> to_dense(const TensorView& view);

}  // namespace smax::reference

// smax/logit_scale.h: gradients of the logit scale and temperature.
//
// Every op whose options are SoftmaxOptions reads its logits as
//   t_i = x_i * scale / temperature + additive_mask_i
// (t_i = -inf where the bool mask is 0), and x enters the op only through
// t. So once an op's backward pass has given dsrc_i = d loss / d x_i, the
// gradients of the two scalars follow from x and dsrc alone, whatever the op
// (softmax, log_softmax, logsumexp, every normaliser, every loss):
//
//   S            = sum_i x_i * dsrc_i      (terms with dsrc_i == 0 left out)
//   dtemperature = -S / temperature
//   dscale       =  S / scale
//
// (d t_i / d T = -x_i * scale / T^2 and d loss / d t_i = dsrc_i * T / scale.)
// Terms with dsrc_i == 0 are left out so that masked entries and -inf
// logits, whose gradient is exactly 0, add nothing even where x_i is
// infinite or NaN (torch, which multiplies, gives NaN there). An infinite or
// NaN x_i with a non-zero gradient makes the result infinite or NaN.
//
// The sum runs over every element of src, whatever the op's axis, in
// float64, in a fixed order (rows of the last dim in fixed blocks, blocks in
// row order): the same bits for any thread count. Bound: |error of S| <=
// (n + 1) 2^-53 sum |x_i dsrc_i| to first order, n the element count (each
// product is exact for f32 / f16 / bf16 operands and rounded once for f64
// ones; n - 1 float64 additions), far below the error of dsrc itself. The
// forward ops round scale / temperature to f32 (f64 inputs: their quotient
// to f64); the formulas above use the exact quotient: a relative difference
// of at most 2^-24.
//
// Errors (smax::Error, kInvalidArgument): src or dsrc not a valid floating
// view (f32, f64, f16, bf16, each independently), different shapes, scale
// or temperature not finite and > 0, threads < 0. Nothing is written on
// error.
#pragma once

#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {

struct LogitScaleGradients {
  double dscale = 0.0;        ///< d loss / d scale
  double dtemperature = 0.0;  ///< d loss / d temperature
};

/// d loss / d scale and d loss / d temperature of an op called with
/// `options` on input `src`, given its input gradient `dsrc` (from the op's
/// backward). Uses options.scale, temperature and threads; the options are
/// validated as every op validates them (so a bad algorithm or empty_row
/// value, or a scale / temperature whose quotient is not a finite f32, is an
/// error too); the axis and the masks are not read.
LogitScaleGradients logit_scale_gradients(const TensorView& src, const TensorView& dsrc,
                                          const SoftmaxOptions& options = {});

}  // namespace smax

// smax/quantized.h: integer softmaxes, forward only (integer ops have no
// gradient). Formulas, the reference implementations each one matches bit
// for bit and the hand vectors: docs/quantized.md.
//
//   int_softmax       I-BERT's integer-only softmax (Kim et al. 2021), as
//                     HuggingFace transformers' IntSoftmax computes it:
//                     i32 in (values x_int, real value x_int * scaling_factor),
//                     i32 out (real value out / 2^output_bit).
//   shiftmax          I-ViT's Shiftmax (Li & Gu 2023), as the authors'
//                     IntSoftmax computes it: i32 in, i32 out (real value
//                     out / 2^(output_bit - 1)).
//   qlinear_softmax   ONNX Runtime's com.microsoft QLinearSoftmax (opset-13
//                     axis semantics) for u8 or i8: dst has src's dtype.
//
// Every op reduces one axis of any rank, any strides (dst may be exactly src:
// in place; any other overlap is rejected), runs on the fixed task grid (the
// same bits on any thread count) and checks every argument before writing
// anything: a wrong dtype, a scale that is not finite and > 0, a zero point
// outside the dtype's range, a bad axis, an output_bit out of range or
// overlapping views throw smax::Error (kInvalidArgument).
//
// Numerics: exact. Each op is integer arithmetic plus a few float32 steps
// that are part of its definition (the constants from the scale; ORT's
// float lookup table, sum and division), so the output is one fixed integer
// per element; src/reference/quantized.h holds the scalar oracle the tests
// compare with (bound 0).
#pragma once

#include <cstdint>

#include "smax/tensor.h"

namespace smax {

/// What the integer softmaxes share: the reduced axis and the thread count.
struct QuantizedOptions {
  int64_t axis = -1;  ///< the reduced axis (negative counts from the end)
  int threads = 0;    ///< 0 = smax::max_threads(); results do not depend on it
};

/// int_softmax's parameters (HuggingFace IntSoftmax(output_bit)).
struct IntSoftmaxOptions {
  /// Real value of one input step: x = x_int * scaling_factor. Finite, > 0
  /// and small enough for the i-exp constants: 1 <= floor(c / s^2) <= 2^48
  /// (about 2.4e-7 <= s <= 1.67; c = 1 / 0.35815147).
  float scaling_factor = 1.0f / 64;
  /// Output bits: out in [0, 2^output_bit], real value out / 2^output_bit.
  /// 1 ... 30.
  int output_bit = 8;
};

/// I-BERT integer softmax over `axis` of `src` (i32) into `dst` (i32, src's
/// shape). docs/quantized.md, "int_softmax".
void int_softmax(const TensorView& src, const TensorView& dst,
                 const IntSoftmaxOptions& params = {}, const QuantizedOptions& options = {});

/// shiftmax's parameters (I-ViT IntSoftmax(output_bit), n = 15).
struct ShiftmaxOptions {
  /// Real value of one input step. Finite, > 0 and >= 2^-16 (so that
  /// floor(-1 / s) >= -2^16 and every intermediate fits 64 bits).
  float scaling_factor = 1.0f / 64;
  /// Output bits: out in [0, 2^(output_bit - 1)), real value
  /// out / 2^(output_bit - 1). 1 ... 31.
  int output_bit = 8;
};

/// I-ViT Shiftmax over `axis` of `src` (i32) into `dst` (i32, src's shape).
/// docs/quantized.md, "shiftmax".
void shiftmax(const TensorView& src, const TensorView& dst, const ShiftmaxOptions& params = {},
              const QuantizedOptions& options = {});

/// qlinear_softmax's quantisation parameters (ORT's inputs x_scale,
/// x_zero_point, y_scale, y_zero_point) and smax's bias-correction option.
struct QLinearSoftmaxOptions {
  float x_scale = 1.0f / 16;  ///< finite, > 0
  int x_zero_point = 0;       ///< in the dtype's range (it cancels out, as in ORT)
  float y_scale = 1.0f / 256; ///< finite, > 0
  int y_zero_point = 0;       ///< in the dtype's range (u8: 0 ... 255, i8: -128 ... 127)
  /// Softmax bias correction (Pandey et al. 2023), off by default (ORT's
  /// bits). On: each row's rounding deficit (the exact quantised mass
  /// floor(1 / y_scale) minus the sum of the rounded outputs) is spread
  /// evenly over the row before rounding, so the row sums of the
  /// dequantised outputs stay near 1 (docs/quantized.md, "Bias correction").
  bool bias_correction = false;
};

/// ORT com.microsoft QLinearSoftmax over `axis` of `src` (u8 or i8) into
/// `dst` (src's dtype and shape), bit for bit (opset-13 semantics: one axis).
/// docs/quantized.md, "qlinear_softmax".
void qlinear_softmax(const TensorView& src, const TensorView& dst,
                     const QLinearSoftmaxOptions& params = {},
                     const QuantizedOptions& options = {});

}  // namespace smax

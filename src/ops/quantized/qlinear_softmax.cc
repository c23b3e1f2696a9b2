// src/ops/quantized/qlinear_softmax.cc: qlinear_softmax (include/smax/quantized.h),
// ONNX Runtime's com.microsoft QLinearSoftmax bit for bit (docs/quantized.md,
// "qlinear_softmax"): the 256-entry float exp table built from x_scale and
// the row length, per row the max (Highway), the sequential float sum of the
// table entries in element order (ORT's order: a float sum is not
// associative, so it stays one scalar chain per row), then the vectorised
// output pass (kernels/quantized.h). Parameters are checked before any write.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/errors.h"
#include "kernels/quantized.h"
#include "ops/quantized/quantized_rows.h"
#include "smax/quantized.h"

namespace smax {
namespace {

using detail::fail;
using detail::num;

void check_scale(const char* op, const char* name, float v) {
  if (!(std::isfinite(v) && v > 0.0f)) fail(op, std::string(name) + " must be finite and > 0, got " + num(v));
}

void check_zero_point(const char* op, const char* name, int v, int lo, int hi, DType dtype) {
  if (v < lo || v > hi) {
    fail(op, std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "] for " + dtype_name(dtype) + ", got " + std::to_string(v));
  }
}

// ORT's QlinearBuildLookupTableUint32 with EXP_OUT_DTYPE = float, indexed by
// k = 255 - (max - x): table[k] = fl32(exp((k - 255 + bit_shift) x_scale)),
// bit_shift = max(0, ln(fl32(FLT_MAX / n)) - 5) / x_scale. (ORT indexes i8
// rows by uint8(127 - max + x) with the table rotated by 128: the same entry.)
void build_table(float x_scale, int64_t n, float* table) {
  const float ratio = std::numeric_limits<float>::max() / static_cast<float>(static_cast<size_t>(n));
  double bit_shift = std::log(static_cast<double>(ratio));
  bit_shift = std::max(0.0, bit_shift - 5.0) / static_cast<double>(x_scale);
  for (int k = 0; k < 256; ++k) {
    table[k] = static_cast<float>(std::exp((static_cast<double>(k) - 255 + bit_shift) *
                                           static_cast<double>(x_scale)));
  }
}

template <typename T>
void qlinear_rows(const char* op, const TensorView& src, const TensorView& dst, DType dtype,
                  const QLinearSoftmaxOptions& p, const QuantizedOptions& options) {
  constexpr int kLo = std::numeric_limits<T>::min(), kHi = std::numeric_limits<T>::max();
  check_zero_point(op, "x_zero_point", p.x_zero_point, kLo, kHi, dtype);
  check_zero_point(op, "y_zero_point", p.y_zero_point, kLo, kHi, dtype);
  const float y_quanta = std::floor(1.0f / p.y_scale);
  // The table depends on the row length only: built once, before the rows run.
  float table[256];
  auto prepare = [&](int64_t n) { build_table(p.x_scale, n, table); };
  detail::run_quantized_rows<T, T>(op, src, dst, dtype, dtype, options, prepare, [&](const T* x, int64_t n, T* y) {
    kernels::QLinearRowOutput o;
    o.table = table;
    o.y_quanta = y_quanta;
    o.zero_point = p.y_zero_point;
    o.lo = kLo;
    o.hi = kHi;
    o.delta = 0.0f;
    T m;
    if constexpr (std::is_same_v<T, uint8_t>) {
      m = kernels::qlinear_row_max_u8(x, n);
    } else {
      m = kernels::qlinear_row_max_i8(x, n);
    }
    o.shift = 255 - static_cast<int>(m);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += table[x[i] + o.shift];
    o.sum = sum;
    if (p.bias_correction) {
      double rounded = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        rounded += static_cast<double>(
            __builtin_nearbyintf((table[x[i] + o.shift] * y_quanta) / sum));
      }
      const double deficit = static_cast<double>(y_quanta) - rounded;
      if (std::isfinite(deficit)) o.delta = static_cast<float>(deficit / static_cast<double>(n));
    }
    if constexpr (std::is_same_v<T, uint8_t>) {
      kernels::qlinear_row_output_u8(x, n, o, y);
    } else {
      kernels::qlinear_row_output_i8(x, n, o, y);
    }
  });
}

}  // namespace

void qlinear_softmax(const TensorView& src, const TensorView& dst, const QLinearSoftmaxOptions& params,
                     const QuantizedOptions& options) {
  const char* op = "qlinear_softmax";
  check_scale(op, "x_scale", params.x_scale);
  check_scale(op, "y_scale", params.y_scale);
  if (src.dtype == DType::kU8) {
    qlinear_rows<uint8_t>(op, src, dst, DType::kU8, params, options);
  } else if (src.dtype == DType::kI8) {
    qlinear_rows<int8_t>(op, src, dst, DType::kI8, params, options);
  } else {
    fail(op, std::string("src must be u8 or i8, got ") +
                 (static_cast<int>(src.dtype) >= 0 && src.dtype <= kLastDType ? dtype_name(src.dtype) : "an unknown dtype"));
  }
}

}  // namespace smax

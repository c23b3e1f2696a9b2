// src/ops/quantized/qlinear_softmax.cc: qlinear_softmax (include/smax/quantized.h),
// ONNX Runtime's com.microsoft QLinearSoftmax bit for bit (docs/quantized.md,
// "qlinear_softmax"): the 256-entry float exp table built from x_scale and
// the row length, per row the max (Highway), the sequential float sum of the
// table entries in element order (ORT's order: a float sum is not
// associative, so it stays one scalar chain per row; four rows' chains run
// interleaved), then the vectorised
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

constexpr int kRowsAtOnce = 4;

// o[k].sum = table[x[k][0] + shift] + table[x[k][1] + shift] + ... in float,
// left to right (ORT's order), for the count rows of a block.
template <typename T>
void sequential_sums(const float* table, const T* const* x, kernels::QLinearRowOutput* o,
                     int count, int64_t n) {
  if (count == kRowsAtOnce) {
    const T *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
    const int h0 = o[0].shift, h1 = o[1].shift, h2 = o[2].shift, h3 = o[3].shift;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      s0 += table[x0[i] + h0];
      s1 += table[x1[i] + h1];
      s2 += table[x2[i] + h2];
      s3 += table[x3[i] + h3];
    }
    o[0].sum = s0;
    o[1].sum = s1;
    o[2].sum = s2;
    o[3].sum = s3;
    return;
  }
  for (int k = 0; k < count; ++k) {
    const int h = o[k].shift;
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += table[x[k][i] + h];
    o[k].sum = s;
  }
}

// The bias correction's delta: (y_quanta - sum of the rounded outputs) / n.
template <typename T>
float bias_correction(const float* table, const T* x, int64_t n, const kernels::QLinearRowOutput& o) {
  double rounded = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    rounded += static_cast<double>(__builtin_nearbyintf((table[x[i] + o.shift] * o.y_quanta) / o.sum));
  }
  const double deficit = static_cast<double>(o.y_quanta) - rounded;
  return std::isfinite(deficit) ? static_cast<float>(deficit / static_cast<double>(n)) : 0.0f;
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
  // Rows in blocks of kRowsAtOnce: each row's sum is one sequential float
  // chain (ORT's bits), so a row alone runs at the add's latency; the
  // chains of the block's rows are interleaved (each in its own order).
  detail::run_quantized_row_blocks<T, T, kRowsAtOnce>(
      op, src, dst, dtype, dtype, options, prepare,
      [&](const T* const* x, T* const* y, int count, int64_t n) {
        kernels::QLinearRowOutput o[kRowsAtOnce];
        for (int k = 0; k < count; ++k) {
          T m;
          if constexpr (std::is_same_v<T, uint8_t>) {
            m = kernels::qlinear_row_max_u8(x[k], n);
          } else {
            m = kernels::qlinear_row_max_i8(x[k], n);
          }
          o[k].table = table;
          o[k].y_quanta = y_quanta;
          o[k].zero_point = p.y_zero_point;
          o[k].lo = kLo;
          o[k].hi = kHi;
          o[k].delta = 0.0f;
          o[k].shift = 255 - static_cast<int>(m);
        }
        sequential_sums(table, x, o, count, n);
        for (int k = 0; k < count; ++k) {
          if (p.bias_correction) o[k].delta = bias_correction(table, x[k], n, o[k]);
          if constexpr (std::is_same_v<T, uint8_t>) {
            kernels::qlinear_row_output_u8(x[k], n, o[k], y[k]);
          } else {
            kernels::qlinear_row_output_i8(x[k], n, o[k], y[k]);
          }
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

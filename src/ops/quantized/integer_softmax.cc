// src/ops/quantized/integer_softmax.cc: int_softmax (I-BERT, as HuggingFace
// transformers' IntSoftmax computes it) and shiftmax (I-ViT's Shiftmax, as
// the authors' IntSoftmax computes it), include/smax/quantized.h. The
// formulas and every rounding choice: docs/quantized.md. The constants that
// the references form in float32 from the scaling factor (torch's float32
// division of a Python float by a float32 tensor) are formed the same way
// here; everything after them is exact integer arithmetic (int64, and
// 128-bit for I-BERT's requantisation product). Parameters are checked
// before any write; rows run through quantized_rows.h.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/errors.h"
#include "ops/quantized/quantized_rows.h"
#include "smax/quantized.h"
#include "smax/runtime.h"

namespace smax {
namespace detail {

int quantized_threads(const QuantizedOptions& options, const char* op) {
  if (options.threads < 0) {
    fail(op, "threads must be >= 0 (0 = default), got " + std::to_string(options.threads));
  }
  return options.threads == 0 ? max_threads() : options.threads;
}

}  // namespace detail

namespace {

using detail::fail;
using detail::num;

int64_t row_max(const int32_t* x, int64_t n) {
  int32_t m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// ---- I-BERT ----------------------------------------------------------------------

// HF IntSoftmax's constants: x0 = -0.6931 (-ln 2), coef = [0.35815147,
// 0.96963238 / 0.35815147, 1 / 0.35815147], const = 30, QuantAct(16).
struct IBertConstants {
  int64_t x0, b, c;
};

IBertConstants ibert_constants(float s) {
  const float c1 = static_cast<float>(0.96963238 / 0.35815147);
  const float c2 = static_cast<float>(1.0 / 0.35815147);
  IBertConstants k;
  k.x0 = static_cast<int64_t>(std::floor(-0.6931f / s));
  k.b = static_cast<int64_t>(std::floor(c1 / s));
  const double c = std::floor(static_cast<double>(c2 / (s * s)));
  k.c = c >= 1.0 && c <= 281474976710656.0 ? static_cast<int64_t>(c) : 0;
  return k;
}

// round(num / den) with ties to even (torch.round), num >= 0, den > 0.
int64_t round_half_even(unsigned __int128 num, unsigned __int128 den) {
  const unsigned __int128 q = num / den, r = num % den;
  const unsigned __int128 twice = 2 * r;
  const bool up = twice > den || (twice == den && (q & 1) != 0);
  return static_cast<int64_t>(q + (up ? 1 : 0));
}

// The 16-bit exponential of one element, v = x_i - max <= 0.
int64_t ibert_exp16(const IBertConstants& k, int64_t v) {
  if (v < 30 * k.x0) v = 30 * k.x0;
  const int64_t q = v / k.x0;  // both <= 0: the quotient is >= 0, truncation = floor
  const int64_t r = v - k.x0 * q;
  const int64_t z = (r + k.b) * r + k.c;
  if (z <= 0) return 0;
  // exp_int = z 2^(30 - q), requantised to 16 bits against the largest
  // exponential c 2^30: round(z 32767 / (c 2^q)), clamped to 32767.
  const int64_t e = round_half_even(static_cast<unsigned __int128>(z) * 32767u,
                                    static_cast<unsigned __int128>(k.c) << q);
  return e > 32767 ? 32767 : e;
}

// Two passes (the sum, then the outputs) recompute the exponential, so no
// scratch is needed.
void ibert_row(const IBertConstants& k, int output_bit, const int32_t* x, int64_t n, int32_t* y) {
  const int64_t m = row_max(x, n);
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += ibert_exp16(k, static_cast<int64_t>(x[i]) - m);
  const int64_t factor = (int64_t{1} << 32) / sum;  // sum >= 32767: the max gives 32767
  const int shift = 32 - output_bit;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<int32_t>((ibert_exp16(k, static_cast<int64_t>(x[i]) - m) * factor) >> shift);
  }
}

// ---- I-ViT -----------------------------------------------------------------------

constexpr int kShiftN = 15;  // I-ViT IntSoftmax's n

// ShiftExp of one element, v = x_i - max <= 0.
int64_t shift_exp(int64_t x0, int64_t v) {
  v = v + (v >> 1) - (v >> 4);  // x log2(e) ~ x + x/2 - x/16, floors (v <= 0)
  if (v < kShiftN * x0) v = kShiftN * x0;
  const int64_t q = v / x0;
  const int64_t r = v - x0 * q;
  const int64_t w = r - 2 * x0;  // 2 (r/2 - x0) > 0
  return q < kShiftN ? w << (kShiftN - q - 1) : w >> 1;  // floor(w 2^(n-q-1))
}

void shiftmax_row(int64_t x0, int output_bit, const int32_t* x, int64_t n, int32_t* y) {
  const int64_t m = row_max(x, n);
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += shift_exp(x0, static_cast<int64_t>(x[i]) - m);
  if (sum > 2147483647) sum = 2147483647;
  const int64_t factor = 2147483647 / sum;
  const int shift = 31 - output_bit + 1;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<int32_t>((shift_exp(x0, static_cast<int64_t>(x[i]) - m) * factor) >> shift);
  }
}

}  // namespace

void int_softmax(const TensorView& src, const TensorView& dst, const IntSoftmaxOptions& params,
                 const QuantizedOptions& options) {
  const char* op = "int_softmax";
  const float s = params.scaling_factor;
  if (!(std::isfinite(s) && s > 0.0f)) fail(op, "scaling_factor must be finite and > 0, got " + num(s));
  const IBertConstants k = ibert_constants(s);
  if (k.c == 0) {
    fail(op, "scaling_factor must give 1 <= floor(c / s^2) <= 2^48 (c = 1 / 0.35815147; about "
             "2.4e-7 <= s <= 1.67), got " + num(s));
  }
  if (params.output_bit < 1 || params.output_bit > 30) {
    fail(op, "output_bit must be in [1, 30], got " + std::to_string(params.output_bit));
  }
  const int ob = params.output_bit;
  detail::run_quantized_rows<int32_t, int32_t>(
      op, src, dst, DType::kI32, DType::kI32, options, [](int64_t) {},
      [&](const int32_t* x, int64_t n, int32_t* y) { ibert_row(k, ob, x, n, y); });
}

void shiftmax(const TensorView& src, const TensorView& dst, const ShiftmaxOptions& params,
              const QuantizedOptions& options) {
  const char* op = "shiftmax";
  const float s = params.scaling_factor;
  if (!(std::isfinite(s) && s >= 1.0f / 65536)) {
    fail(op, "scaling_factor must be finite and >= 2^-16, got " + num(s));
  }
  if (params.output_bit < 1 || params.output_bit > 31) {
    fail(op, "output_bit must be in [1, 31], got " + std::to_string(params.output_bit));
  }
  const int64_t x0 = static_cast<int64_t>(std::floor(-1.0f / s));
  const int ob = params.output_bit;
  detail::run_quantized_rows<int32_t, int32_t>(
      op, src, dst, DType::kI32, DType::kI32, options, [](int64_t) {},
      [&](const int32_t* x, int64_t n, int32_t* y) { shiftmax_row(x0, ob, x, n, y); });
}

}  // namespace smax

// src/reference/quantized.cc: the scalar oracles of reference/quantized.h,
// transcribed from the reference implementations (docs/quantized.md): HF
// transformers' IntSoftmax with its QuantAct(16) calibrated to the largest
// exponential, I-ViT's IntSoftmax, ORT's QlinearSoftmaxCPU. Integer steps are exact
// (int64, __int128 where a product needs it).
#include "reference/quantized.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace smax::reference {

std::vector<int32_t> int_softmax_row(const std::vector<int32_t>& x, const IntSoftmaxOptions& p) {
  const float s = p.scaling_factor;
  const double coef0 = 0.35815147, coef1 = 0.96963238 / coef0, coef2 = 1.0 / coef0;
  // torch: a Python float over a float32 tensor divides in float32.
  const int64_t x0 = static_cast<int64_t>(std::floor(static_cast<float>(-0.6931) / s));
  const int64_t b = static_cast<int64_t>(std::floor(static_cast<float>(coef1) / s));
  const int64_t c = static_cast<int64_t>(std::floor(static_cast<float>(coef2) / (s * s)));
  const int64_t m = *std::max_element(x.begin(), x.end());
  std::vector<int64_t> e(x.size());
  int64_t sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t xi = std::max<int64_t>(int64_t{x[i]} - m, 30 * x0);  // int_exp's clamp
    const int64_t q = xi / x0;                                         // floor(x / x0) >= 0
    const int64_t r = xi - x0 * q;
    const int64_t z = std::max<int64_t>((r + b) * r + c, 0);           // int_polynomial
    // exp_int = z 2^(30 - q); QuantAct(16) with range [0, c 2^30]:
    // round(exp_int 32767 / (c 2^30)), ties to even, clamped to 32767.
    const unsigned __int128 num = static_cast<unsigned __int128>(z) * 32767u;
    const unsigned __int128 den = static_cast<unsigned __int128>(c) << q;
    int64_t v = static_cast<int64_t>(num / den);
    const unsigned __int128 rem2 = 2 * (num % den);
    if (rem2 > den || (rem2 == den && (v % 2) == 1)) ++v;
    e[i] = std::min<int64_t>(v, 32767);
    sum += e[i];
  }
  const int64_t factor = (int64_t{1} << 32) / sum;  // floor(2^max_bit / sum)
  std::vector<int32_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = static_cast<int32_t>(e[i] * factor / (int64_t{1} << (32 - p.output_bit)));
  }
  return y;
}

std::vector<int32_t> shiftmax_row(const std::vector<int32_t>& x, const ShiftmaxOptions& p) {
  const int n = 15;
  const int64_t x0 = static_cast<int64_t>(std::floor(-1.0f / p.scaling_factor));
  const int64_t m = *std::max_element(x.begin(), x.end());
  auto floor_div = [](int64_t a, int64_t d) {  // floor(a / d), d > 0
    return a >= 0 ? a / d : -((-a + d - 1) / d);
  };
  std::vector<int64_t> e(x.size());
  int64_t sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t xi = int64_t{x[i]} - m;
    xi = xi + floor_div(xi, 2) - floor_div(xi, 16);
    xi = std::max<int64_t>(xi, n * x0);
    const int64_t q = xi / x0;
    const int64_t r = xi - x0 * q;
    // floor((r / 2 - x0) 2^(n - q)) = floor((r - 2 x0) 2^(n - q) / 2)
    const int64_t twice = (r - 2 * x0) * (int64_t{1} << (n - q));
    e[i] = std::max<int64_t>(floor_div(twice, 2), 0);
    sum += e[i];
  }
  sum = std::min<int64_t>(sum, 2147483647);
  const int64_t factor = 2147483647 / sum;
  std::vector<int32_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = static_cast<int32_t>(e[i] * factor / (int64_t{1} << (31 - p.output_bit + 1)));
  }
  return y;
}

std::vector<int32_t> qlinear_softmax_row(const std::vector<int32_t>& x, bool is_signed,
                                         const QLinearSoftmaxOptions& p) {
  const size_t n = x.size();
  // QlinearBuildLookupTableUint32 (EXP_OUT_DTYPE float, reserve_bit 5).
  double bit_shift = std::log(static_cast<double>(std::numeric_limits<float>::max() / static_cast<float>(n)));
  bit_shift = std::max(0.0, bit_shift - 5) / p.x_scale;
  float table[256];
  for (int32_t i = 0; i < 256; i++) {
    const double v = std::exp((static_cast<double>(i) - 255 + bit_shift) * static_cast<double>(p.x_scale));
    table[static_cast<uint8_t>(is_signed ? i - 128 : i)] = static_cast<float>(v);
  }
  const float y_scale = std::floor(1.0F / p.y_scale);
  const int32_t xmax = *std::max_element(x.begin(), x.end());
  auto entry = [&](int32_t xi) {
    return is_signed ? table[static_cast<uint8_t>(127 - xmax + xi)] : table[255 - xmax + xi];
  };
  float vsum = 0;
  for (int32_t xi : x) vsum += entry(xi);
  const int lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  float delta = 0;
  if (p.bias_correction) {
    double rounded = 0;
    for (int32_t xi : x) rounded += std::nearbyint((entry(xi) * y_scale) / vsum);
    const double deficit = static_cast<double>(y_scale) - rounded;
    if (std::isfinite(deficit)) delta = static_cast<float>(deficit / static_cast<double>(n));
  }
  std::vector<int32_t> y(n);
  for (size_t i = 0; i < n; ++i) {
    const float r = std::nearbyint((entry(x[i]) * y_scale) / vsum + delta);
    if (!(r < 2147483648.0f)) {  // inf or beyond int32: ORT's build saturates
      y[i] = hi;
      continue;
    }
    const int64_t v = static_cast<int64_t>(r) + p.y_zero_point;
    y[i] = static_cast<int32_t>(std::clamp<int64_t>(v, lo, hi));
  }
  return y;
}

}  // namespace smax::reference

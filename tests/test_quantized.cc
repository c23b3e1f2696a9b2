// tests/test_quantized.cc: the integer softmaxes (include/smax/quantized.h)
// against their scalar oracles (src/reference/quantized.h) and by hand:
// hand vectors (docs/quantized.md, "Hand vectors"), every SIMD target,
// strided axes, in place, thread-count bits, the bias correction's effect on
// row sums, and the errors (nothing written on error).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/quantized.h"
#include "smax/error.h"
#include "smax/quantized.h"
#include "smax/runtime.h"

namespace {

template <typename T>
smax::TensorView view_of(std::vector<T>& v, smax::DType dtype, std::vector<int64_t> shape,
                         std::vector<int64_t> strides = {}) {
  return smax::make_view(v.data(), dtype, static_cast<int>(shape.size()), shape.data(),
                         strides.empty() ? nullptr : strides.data());
}

std::vector<int32_t> random_i32(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(Quantized, HandVectors) {
  // docs/quantized.md, "Hand vectors".
  std::vector<int32_t> x = {0, -64, -128, 0};
  std::vector<int32_t> y(4);
  smax::int_softmax(view_of(x, smax::DType::kI32, {4}), view_of(y, smax::DType::kI32, {4}));
  EXPECT_EQ(y, (std::vector<int32_t>{101, 37, 14, 101}));
  smax::shiftmax(view_of(x, smax::DType::kI32, {4}), view_of(y, smax::DType::kI32, {4}));
  EXPECT_EQ(y, (std::vector<int32_t>{50, 19, 7, 50}));
  std::vector<uint8_t> q = {40, 24, 8, 40}, qy(4);
  smax::qlinear_softmax(view_of(q, smax::DType::kU8, {4}), view_of(qy, smax::DType::kU8, {4}));
  EXPECT_EQ(qy, (std::vector<uint8_t>{102, 38, 14, 102}));
}

TEST(Quantized, IntOpsMatchOracleOnEveryTarget) {
  for (const std::string& target : smax::supported_targets()) {
    smax::set_max_target(target);
    for (int64_t n : {1, 3, 17, 64, 1000}) {
      for (float s : {1.0f / 64, 0.1f, 0.003f}) {
        std::vector<int32_t> x = random_i32(static_cast<size_t>(5 * n), -3000, 3000, static_cast<uint32_t>(n));
        std::vector<int32_t> y(x.size()), ys(x.size());
        smax::IntSoftmaxOptions ip;
        ip.scaling_factor = s;
        smax::ShiftmaxOptions sp;
        sp.scaling_factor = s;
        smax::int_softmax(view_of(x, smax::DType::kI32, {5, n}), view_of(y, smax::DType::kI32, {5, n}), ip);
        smax::shiftmax(view_of(x, smax::DType::kI32, {5, n}), view_of(ys, smax::DType::kI32, {5, n}), sp);
        for (int64_t r = 0; r < 5; ++r) {
          const std::vector<int32_t> row(x.begin() + r * n, x.begin() + (r + 1) * n);
          const auto ref_i = smax::reference::int_softmax_row(row, ip);
          const auto ref_s = smax::reference::shiftmax_row(row, sp);
          ASSERT_EQ(std::vector<int32_t>(y.begin() + r * n, y.begin() + (r + 1) * n), ref_i) << target << " n=" << n;
          ASSERT_EQ(std::vector<int32_t>(ys.begin() + r * n, ys.begin() + (r + 1) * n), ref_s) << target << " n=" << n;
        }
      }
    }
  }
  smax::set_max_target("");
}

template <typename T>
void check_qlinear(smax::DType dtype, const std::string& target) {
  const bool is_signed = dtype == smax::DType::kI8;
  for (int64_t n : {1, 2, 7, 33, 256, 1000}) {
    for (bool bc : {false, true}) {
      std::vector<int32_t> xi = random_i32(static_cast<size_t>(4 * n), is_signed ? -128 : 0, is_signed ? 127 : 255,
                                           static_cast<uint32_t>(n + 7));
      std::vector<T> x(xi.begin(), xi.end()), y(x.size());
      smax::QLinearSoftmaxOptions p;
      p.x_scale = 0.05f;
      p.y_scale = 1.0f / 256;
      p.y_zero_point = is_signed ? -128 : 0;
      p.bias_correction = bc;
      smax::qlinear_softmax(view_of(x, dtype, {4, n}), view_of(y, dtype, {4, n}), p);
      for (int64_t r = 0; r < 4; ++r) {
        const std::vector<int32_t> row(xi.begin() + r * n, xi.begin() + (r + 1) * n);
        const auto ref = smax::reference::qlinear_softmax_row(row, is_signed, p);
        const std::vector<int32_t> got(y.begin() + r * n, y.begin() + (r + 1) * n);
        ASSERT_EQ(got, ref) << target << " n=" << n << " bias_correction=" << bc;
      }
    }
  }
}

TEST(Quantized, QLinearMatchesOracleOnEveryTarget) {
  for (const std::string& target : smax::supported_targets()) {
    smax::set_max_target(target);
    check_qlinear<uint8_t>(smax::DType::kU8, target);
    check_qlinear<int8_t>(smax::DType::kI8, target);
  }
  smax::set_max_target("");
}

TEST(Quantized, StridedAxisInPlaceAndThreads) {
  // [6, 50] viewed along axis 0 (strided), against the transposed contiguous call.
  std::vector<uint8_t> x(300);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>((i * 37) % 251);
  std::vector<uint8_t> xt(300), yt(300), y(300);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 50; ++c) xt[static_cast<size_t>(c * 6 + r)] = x[static_cast<size_t>(r * 50 + c)];
  smax::QuantizedOptions axis0;
  axis0.axis = 0;
  smax::qlinear_softmax(view_of(x, smax::DType::kU8, {6, 50}), view_of(y, smax::DType::kU8, {6, 50}), {}, axis0);
  smax::qlinear_softmax(view_of(xt, smax::DType::kU8, {50, 6}), view_of(yt, smax::DType::kU8, {50, 6}));
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 50; ++c) ASSERT_EQ(y[static_cast<size_t>(r * 50 + c)], yt[static_cast<size_t>(c * 6 + r)]);
  // In place gives the out-of-place bits.
  std::vector<uint8_t> inplace = x;
  smax::qlinear_softmax(view_of(inplace, smax::DType::kU8, {6, 50}), view_of(inplace, smax::DType::kU8, {6, 50}), {}, axis0);
  EXPECT_EQ(inplace, y);
  // Thread counts: the same bits.
  std::vector<int32_t> xi = random_i32(64 * 3000, -5000, 5000, 3), a(xi.size()), b(xi.size());
  smax::QuantizedOptions one, many;
  one.threads = 1;
  many.threads = 4;
  smax::int_softmax(view_of(xi, smax::DType::kI32, {64, 3000}), view_of(a, smax::DType::kI32, {64, 3000}), {}, one);
  smax::int_softmax(view_of(xi, smax::DType::kI32, {64, 3000}), view_of(b, smax::DType::kI32, {64, 3000}), {}, many);
  EXPECT_EQ(a, b);
}

TEST(Quantized, BiasCorrectionShrinksRowSumBias) {
  // Peaked-free rows of many similar values: most outputs round to small
  // integers and the sum of the dequantised row drifts from 1.
  const int64_t rows = 200, n = 300;
  std::vector<int32_t> xi = random_i32(static_cast<size_t>(rows * n), 100, 140, 11);
  std::vector<uint8_t> x(xi.begin(), xi.end()), plain(x.size()), corrected(x.size());
  smax::QLinearSoftmaxOptions p;
  p.x_scale = 0.05f;
  p.y_scale = 1.0f / 256;
  smax::qlinear_softmax(view_of(x, smax::DType::kU8, {rows, n}), view_of(plain, smax::DType::kU8, {rows, n}), p);
  p.bias_correction = true;
  smax::qlinear_softmax(view_of(x, smax::DType::kU8, {rows, n}), view_of(corrected, smax::DType::kU8, {rows, n}), p);
  auto mean_bias = [&](const std::vector<uint8_t>& y) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += y[static_cast<size_t>(r * n + i)] / 256.0;
      total += s - 1.0;
    }
    return total / rows;
  };
  const double before = mean_bias(plain), after = mean_bias(corrected);
  EXPECT_GT(std::fabs(before), 0.02) << "the uncorrected rows should be biased here";
  EXPECT_LT(std::fabs(after), std::fabs(before) / 2) << "before " << before << " after " << after;
}

template <typename Fn>
void expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected: " << needle;
  } catch (const smax::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Quantized, ErrorsWriteNothing) {
  std::vector<int32_t> x = {1, 2, 3, 4}, y(4, -7);
  std::vector<uint8_t> q = {1, 2, 3, 4}, qy(4, 77);
  std::vector<float> f(4);
  const auto X = view_of(x, smax::DType::kI32, {4});
  const auto Y = view_of(y, smax::DType::kI32, {4});
  smax::IntSoftmaxOptions ip;
  ip.scaling_factor = NAN;
  expect_error([&] { smax::int_softmax(X, Y, ip); }, "scaling_factor must be finite");
  ip.scaling_factor = 5.0f;
  expect_error([&] { smax::int_softmax(X, Y, ip); }, "floor(c / s^2)");
  ip = {};
  ip.output_bit = 31;
  expect_error([&] { smax::int_softmax(X, Y, ip); }, "output_bit must be in [1, 30]");
  expect_error([&] { smax::int_softmax(view_of(f, smax::DType::kF32, {4}), Y); }, "int_softmax");
  smax::QuantizedOptions bad_axis;
  bad_axis.axis = 3;
  expect_error([&] { smax::shiftmax(X, Y, {}, bad_axis); }, "shiftmax");
  smax::ShiftmaxOptions sp;
  sp.scaling_factor = 1e-6f;
  expect_error([&] { smax::shiftmax(X, Y, sp); }, "scaling_factor must be finite and >= 2^-16");
  expect_error([&] { smax::int_softmax(X, view_of(x, smax::DType::kI32, {2}, {2})); }, "int_softmax");
  EXPECT_EQ(y, (std::vector<int32_t>(4, -7)));
  const auto Q = view_of(q, smax::DType::kU8, {4});
  const auto QY = view_of(qy, smax::DType::kU8, {4});
  smax::QLinearSoftmaxOptions p;
  p.y_zero_point = 256;
  expect_error([&] { smax::qlinear_softmax(Q, QY, p); }, "y_zero_point must be in [0, 255] for u8");
  p = {};
  p.x_scale = 0.0f;
  expect_error([&] { smax::qlinear_softmax(Q, QY, p); }, "x_scale must be finite and > 0");
  p = {};
  p.y_zero_point = -1;
  expect_error([&] { smax::qlinear_softmax(Q, QY, p); }, "y_zero_point");
  expect_error([&] { smax::qlinear_softmax(X, Y); }, "src must be u8 or i8, got i32");
  expect_error([&] { smax::qlinear_softmax(Q, view_of(x, smax::DType::kI32, {4})); }, "dst");
  // Partial overlap (dst shifted by one byte) is rejected.
  std::vector<uint8_t> big(8, 5);
  expect_error([&] {
    smax::qlinear_softmax(view_of(big, smax::DType::kU8, {4}),
                          smax::make_view(big.data() + 1, smax::DType::kU8, 1, std::vector<int64_t>{4}.data(), nullptr));
  }, "qlinear_softmax");
  EXPECT_EQ(qy, (std::vector<uint8_t>(4, 77)));
}

}  // namespace

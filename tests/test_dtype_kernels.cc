// tests/test_dtype_kernels.cc: the SIMD row conversions of
// src/kernels/dtype_convert.h give the scalar definitions' bits
// (src/core/convert.h) on every SIMD target: every f16 / bf16 value widened,
// f32 values around every narrow value and tie, overflow, subnormals, NaN
// narrowed, f64 both ways; every row length 0..70 (tails) and unaligned
// starts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/convert.h"
#include "kernels/dtype_convert.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::DType;

std::vector<float> probes() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    for (float x : {smax::detail::f16_to_f32(static_cast<uint16_t>(h)),
                    smax::detail::bf16_to_f32(static_cast<uint16_t>(h))}) {
      v.push_back(x);
      v.push_back(std::nextafter(x, -std::numeric_limits<float>::infinity()));
      v.push_back(std::nextafter(x, std::numeric_limits<float>::infinity()));
    }
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class DtypeKernels : public TargetTest {};

TEST_P(DtypeKernels, WideningMatchesScalarForEveryValue) {
  std::vector<uint16_t> all(0x10000 + 3);
  for (uint32_t h = 0; h < all.size(); ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> out(all.size());
  for (DType dt : {DType::kF16, DType::kBF16}) {
    smax::kernels::widen_row(all.data() + 1, dt, 0x10000, out.data());
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float want = dt == DType::kF16 ? smax::detail::f16_to_f32(all[h + 1])
                                           : smax::detail::bf16_to_f32(all[h + 1]);
      if (std::isnan(want)) {  // NaN stays NaN (targets may quiet a signalling NaN)
        ASSERT_TRUE(std::isnan(out[h])) << smax::dtype_name(dt) << " " << h;
        continue;
      }
      ASSERT_EQ(bits(out[h]), bits(want)) << smax::dtype_name(dt) << " " << h;
    }
  }
}

TEST_P(DtypeKernels, NarrowingMatchesScalar) {
  const std::vector<float> v = probes();
  std::vector<uint16_t> h(v.size());
  for (DType dt : {DType::kF16, DType::kBF16}) {
    smax::kernels::narrow_row(v.data(), static_cast<int64_t>(v.size()), h.data(), dt);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t want =
          dt == DType::kF16 ? smax::detail::f32_to_f16(v[i]) : smax::detail::f32_to_bf16(v[i]);
      if (std::isnan(v[i])) {  // NaN stays NaN (payload bits may differ by target)
        const float back = dt == DType::kF16 ? smax::detail::f16_to_f32(h[i])
                                             : smax::detail::bf16_to_f32(h[i]);
        ASSERT_TRUE(std::isnan(back)) << smax::dtype_name(dt) << " " << i << " x bits " << std::hex
                                      << bits(v[i]) << " -> " << h[i];
        continue;
      }
      ASSERT_EQ(h[i], want) << smax::dtype_name(dt) << " x = " << v[i];
    }
  }
}

TEST_P(DtypeKernels, F64BothWaysAndEveryTail) {
  std::mt19937 rng(4);
  std::normal_distribution<double> normal(0.0, 1e3);
  for (int64_t n = 0; n <= 70; ++n) {
    for (int64_t offset = 0; offset < 3; ++offset) {
      std::vector<double> d(static_cast<size_t>(n + offset + 1));
      for (double& x : d) x = normal(rng);
      std::vector<float> f(static_cast<size_t>(n + offset + 1), -1.0f);
      smax::kernels::widen_row(d.data() + offset, DType::kF64, n, f.data() + offset);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(f[static_cast<size_t>(offset + i)], static_cast<float>(d[static_cast<size_t>(offset + i)]));
      }
      ASSERT_EQ(f[static_cast<size_t>(offset + n)], -1.0f) << "wrote past the row";
      std::vector<double> back(static_cast<size_t>(n + offset + 1), -1.0);
      smax::kernels::narrow_row(f.data() + offset, n, back.data() + offset, DType::kF64);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(back[static_cast<size_t>(offset + i)], static_cast<double>(f[static_cast<size_t>(offset + i)]));
      }
      ASSERT_EQ(back[static_cast<size_t>(offset + n)], -1.0) << "wrote past the row";
      // Narrow tails too.
      std::vector<uint16_t> h(static_cast<size_t>(n + offset + 1), 0xabcd);
      smax::kernels::narrow_row(f.data() + offset, n, h.data() + offset, DType::kBF16);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(h[static_cast<size_t>(offset + i)], smax::detail::f32_to_bf16(f[static_cast<size_t>(offset + i)]));
      }
      ASSERT_EQ(h[static_cast<size_t>(offset + n)], 0xabcd) << "wrote past the row";
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(DtypeKernels);

}  // namespace
}  // namespace smax_test

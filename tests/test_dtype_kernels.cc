// tests/test_dtype_kernels.cc: the f64 row conversions of
// src/kernels/dtype_convert.h (f64 -> f32 rounds to nearest even, f32 -> f64
// exact) on every SIMD target, every row length 0..70 (tails) with
// unaligned starts, nothing written past the row; and bf16 tails the same
// way. The bf16 / f16 conversions themselves: tests/test_narrow_convert.cc.
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

class DtypeKernels : public TargetTest {};

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

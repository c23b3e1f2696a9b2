// tests/test_attention_tiles.cc: the panel product of attention
// (kernels::attention_gemm_panels, src/kernels/attention_tiles.cc) and its
// packing helpers, on every SIMD target:
//  * values: every C element within (K + 2) u (sum_k |a b| + |C0|) of the
//    float64 product (an FMA chain of K terms, plus one addition to C with
//    accumulate), for row counts across the tile sizes (1..14, 33, 130),
//    column counts across the 16-column panels (1, 15, 16, 17, 40), K = 0,
//    1, 7, 64, 129, A row-major and column-wise (a transposed view), ldc > N;
//  * bits: a row of C is the same whether computed alone or in a block, and
//    the same for A row-major and A transposed (one FMA chain per element in
//    k order, whatever the tiling or loop order) - what the attention
//    drivers' thread-count determinism rests on;
//  * packing: pack_rows, pack_row and pack_column write the same panels,
//    and pack_rows zeroes the columns past N that the products read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "test_util.h"

namespace {

using smax::kernels::attention_gemm_panels;
using smax::kernels::attention_pack_column;
using smax::kernels::attention_pack_row;
using smax::kernels::attention_pack_rows;
using smax::kernels::kAttentionPanel;

class AttentionTiles : public smax_test::TargetTest {};

constexpr double kU = 1.0 / (1 << 24);

struct Problem {
  int64_t M, N, K;
  std::vector<float> a, at, b, panels, c0;  // a [M, K], at = a^T [K, M], b [K, N]
  int64_t stride = 0;                       // panel stride (K x 16)
  Problem(int64_t m, int64_t n, int64_t k, smax_test::Rng& rng) : M(m), N(n), K(k) {
    a.resize(static_cast<size_t>(std::max<int64_t>(M * K, 1)));
    at.resize(a.size());
    b.resize(static_cast<size_t>(std::max<int64_t>(K * N, 1)));
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < K; ++j) {
        a[i * K + j] = static_cast<float>(rng.normal());
        at[j * M + i] = a[i * K + j];
      }
    }
    for (auto& x : b) x = static_cast<float>(rng.normal());
    stride = std::max<int64_t>(K, 1) * kAttentionPanel;
    const int64_t np = (N + kAttentionPanel - 1) / kAttentionPanel;
    panels.assign(static_cast<size_t>(std::max<int64_t>(np, 1) * stride), 0.0f);
    attention_pack_rows(b.data(), N, K, N, panels.data(), stride);
    c0.resize(static_cast<size_t>(M * (N + 3)));
    for (auto& x : c0) x = static_cast<float>(rng.normal());
  }
  // C = (accumulate ? c0 : 0) + A B, ldc = N + 3; A row-major or transposed.
  std::vector<float> run(bool accumulate, bool transposed) const {
    std::vector<float> c = c0;
    const int64_t ldc = N + 3;
    if (transposed) {
      attention_gemm_panels(M, N, K, at.data(), 1, M, panels.data(), stride, c.data(), ldc,
                            accumulate);
    } else {
      attention_gemm_panels(M, N, K, a.data(), K, 1, panels.data(), stride, c.data(), ldc,
                            accumulate);
    }
    return c;
  }
};

TEST_P(AttentionTiles, ValuesWithinTheChainBound) {
  smax_test::Rng rng(11);
  for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 33, 130}) {
    for (int64_t N : {1, 15, 16, 17, 40}) {
      for (int64_t K : {0, 1, 7, 64, 129}) {
        const Problem p(M, N, K, rng);
        for (bool acc : {false, true}) {
          for (bool tr : {false, true}) {
            const std::vector<float> c = p.run(acc, tr);
            const int64_t ldc = N + 3;
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                const float got = c[i * ldc + j];
                if (j >= N) {  // past N: never written
                  ASSERT_EQ(got, p.c0[i * ldc + j]) << M << "x" << N << "x" << K;
                  continue;
                }
                double ref = acc ? p.c0[i * ldc + j] : 0.0, mag = acc ? std::fabs(ref) : 0.0;
                for (int64_t k = 0; k < K; ++k) {
                  const double t = static_cast<double>(p.a[i * K + k]) * p.b[k * N + j];
                  ref += t;
                  mag += std::fabs(t);
                }
                ASSERT_LE(std::fabs(got - ref), (K + 2) * kU * mag + 1e-30)
                    << M << "x" << N << "x" << K << " acc " << acc << " transposed " << tr
                    << " at (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(AttentionTiles, RowBitsDoNotDependOnTheBlock) {
  smax_test::Rng rng(12);
  for (int64_t M : {7, 13, 33}) {
    for (int64_t N : {17, 40}) {
      const int64_t K = 65;
      const Problem p(M, N, K, rng);
      const int64_t ldc = N + 3;
      for (bool acc : {false, true}) {
        const std::vector<float> block = p.run(acc, false);
        EXPECT_EQ(block, p.run(acc, true)) << "A transposed, " << M << "x" << N;
        for (int64_t i = 0; i < M; ++i) {
          std::vector<float> row(p.c0.begin() + i * ldc, p.c0.begin() + (i + 1) * ldc);
          attention_gemm_panels(1, N, K, p.a.data() + i * K, K, 1, p.panels.data(), p.stride,
                                row.data(), ldc, acc);
          ASSERT_EQ(0, std::memcmp(row.data(), block.data() + i * ldc, N * sizeof(float)))
              << "row " << i << " of " << M << "x" << N << " acc " << acc;
        }
      }
    }
  }
}

TEST_P(AttentionTiles, PackingHelpersAgree) {
  smax_test::Rng rng(13);
  const int64_t K = 9, N = 37, ld = 41;
  std::vector<float> m(static_cast<size_t>(K * ld));
  for (auto& x : m) x = static_cast<float>(rng.normal());
  const int64_t stride = K * kAttentionPanel, np = (N + kAttentionPanel - 1) / kAttentionPanel;
  std::vector<float> rows(static_cast<size_t>(np * stride), 0.0f), row = rows, col = rows;
  // pack_rows pads the last panel's columns past N with 0 (scratch may hold NaN).
  std::fill(rows.begin(), rows.end(), NAN);
  attention_pack_rows(m.data(), ld, K, N, rows.data(), stride);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t c = N; c < np * kAttentionPanel; ++c) {
      ASSERT_EQ(rows[(c / kAttentionPanel) * stride + k * kAttentionPanel + c % kAttentionPanel],
                0.0f);
    }
  }
  for (int64_t k = 0; k < K; ++k) attention_pack_row(m.data() + k * ld, N, k, row.data(), stride);
  std::vector<float> column(static_cast<size_t>(K));
  for (int64_t j = 0; j < N; ++j) {
    for (int64_t k = 0; k < K; ++k) column[k] = m[k * ld + j];
    attention_pack_column(column.data(), K, j, col.data(), stride);
  }
  EXPECT_EQ(rows, row);
  EXPECT_EQ(rows, col);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t j = 0; j < N; ++j) {
      ASSERT_EQ(rows[(j / kAttentionPanel) * stride + k * kAttentionPanel + j % kAttentionPanel],
                m[k * ld + j]);
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(AttentionTiles);

}  // namespace

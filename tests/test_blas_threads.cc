// tests/test_blas_threads.cc: one thread pool at a time (src/core/gemm.h).
//
// OpenBLAS must not start its own threads inside smax's: every SGEMM smax
// issues runs on the thread that calls it, whatever OpenBLAS's own thread
// count is, and that count is the caller's again when the op returns. Before
// this rule, attention and linear cross-entropy ran 16-25x slower at the
// default thread count than at one thread on a 2-core machine (the figures
// and the benchmark: docs/benchmarking.md, "Threads").
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "core/gemm.h"
#include "smax/attention.h"
#include "smax/linear_cross_entropy.h"
#include "smax/tensor.h"

namespace {

// Restores OpenBLAS's thread count on exit from a test.
class BlasThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = openblas_get_num_threads();
    openblas_set_num_threads(4);  // as on a 4-core machine, whatever this one has
    smax::detail::reset_blas_threads_seen();
  }
  void TearDown() override { openblas_set_num_threads(saved_); }
  int saved_ = 1;
};

std::vector<float> ramp(size_t n, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = step * static_cast<float>(static_cast<int>(i % 13) - 6);
  return v;
}

// The float64 attention (q, k, v in f64) calls DGEMM inside its tasks; the
// f32 paths (prefill, decode, backward) use smax's own products only.
void run_attention(int threads, bool backward) {
  const int64_t B = 1, H = 4, L = 96, D = 32;
  const size_t n = static_cast<size_t>(B * H * L * D);
  std::vector<double> q(n), k(n), v(n), out(n);
  {
    const std::vector<float> qf = ramp(n, 0.03f), kf = ramp(n, 0.02f), vf = ramp(n, 0.05f);
    for (size_t i = 0; i < n; ++i) {
      q[i] = qf[i];
      k[i] = kf[i];
      v[i] = vf[i];
    }
  }
  smax::AttentionOptions o;
  o.threads = threads;
  o.is_causal = true;
  const int64_t shape[4] = {B, H, L, D};
  auto view = [&](std::vector<double>& x) {
    return smax::make_view(x.data(), smax::DType::kF64, 4, shape, nullptr);
  };
  smax::attention(view(q), view(k), view(v), view(out), o);
  if (!backward) return;
  std::vector<double> dout(n), dq(n), dk(n), dv(n);
  for (size_t i = 0; i < n; ++i) dout[i] = 0.01 * static_cast<double>(static_cast<int>(i % 13) - 6);
  smax::attention_backward(view(q), view(k), view(v), view(out), view(dout), view(dq), view(dk),
                           view(dv), o);
}

void run_linear_ce(int threads, bool backward) {
  const int64_t N = 64, D = 48, V = 700;
  std::vector<float> h = ramp(N * D, 0.02f), w = ramp(V * D, 0.01f);
  std::vector<int64_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = (i * 37) % V;
  float loss = 0.0f, dloss = 1.0f;
  smax::SoftmaxOptions so;
  so.threads = threads;
  smax::LinearCrossEntropyOptions lce;
  lce.token_chunk = 32;  // several tiles
  lce.vocab_chunk = 256;
  const auto hv = smax::make_view(h.data(), {N, D});
  const auto wv = smax::make_view(w.data(), {V, D});
  const auto tv = smax::make_index_view(t.data(), {N});
  smax::linear_cross_entropy(hv, wv, tv, std::nullopt, smax::make_view(&loss, {}), {}, lce, so);
  if (!backward) return;
  std::vector<float> dh(N * D), dw(V * D);
  smax::linear_cross_entropy_backward(
      hv, wv, tv, std::nullopt, smax::make_view(&dloss, {}), smax::make_view(dh.data(), {N, D}),
      smax::make_view(dw.data(), {V, D}), std::nullopt, {}, lce, so);
}

TEST_F(BlasThreads, AttentionGemmsRunOnTheCallingThread) {
  for (int threads : {1, 2, 3}) {
    run_attention(threads, /*backward=*/true);
    EXPECT_EQ(smax::detail::blas_threads_seen_max(), 1) << "threads " << threads;
    EXPECT_EQ(openblas_get_num_threads(), 4) << "the caller's OpenBLAS setting is restored";
  }
}

TEST_F(BlasThreads, LinearCrossEntropyGemmsRunOnTheCallingThread) {
  for (int threads : {1, 2, 3}) {
    run_linear_ce(threads, /*backward=*/true);
    EXPECT_EQ(smax::detail::blas_threads_seen_max(), 1) << "threads " << threads;
    EXPECT_EQ(openblas_get_num_threads(), 4);
  }
}

// Several user threads calling smax at once: the count is 1 while any op is
// in flight and the caller's again when the last returns.
TEST_F(BlasThreads, ConcurrentCallersRestoreTheCount) {
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([i] {
      for (int r = 0; r < 3; ++r) {
        if (i % 2 == 0) {
          run_attention(2, /*backward=*/false);
        } else {
          run_linear_ce(2, /*backward=*/false);
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(smax::detail::blas_threads_seen_max(), 1);
  EXPECT_EQ(openblas_get_num_threads(), 4);
}

// The split GEMM gives the same bits for every thread count, split by rows
// (M >= N) or by columns, with and without transposed operands.
class SplitGemm : public BlasThreads, public ::testing::WithParamInterface<int> {};

TEST_P(SplitGemm, ThreadCountInvariantAndWithinTheDotProductBound) {
  const bool tall = GetParam() % 2 == 0, ta = GetParam() >= 2;
  const int64_t M = tall ? 700 : 150, N = tall ? 150 : 700, K = 129;
  std::vector<float> a = ramp(M * K, 0.013f), b = ramp(K * N, 0.007f);
  std::vector<float> c1(M * N), c3(M * N);
  // A stored M x K (lda K), or K x M (lda M) and transposed; B as the
  // transposed case's partner: N x K (ldb K) transposed.
  const smax::detail::GemmOperand A{a.data(), ta ? M : K, ta};
  const smax::detail::GemmOperand Bop{b.data(), ta ? K : N, ta};
  smax::detail::sgemm_parallel(1, M, N, K, 1.0f, A, Bop, 0.0f, c1.data(), N);
  smax::detail::sgemm_parallel(3, M, N, K, 1.0f, A, Bop, 0.0f, c3.data(), N);
  EXPECT_EQ(c1, c3);
  auto at = [&](int64_t i, int64_t k) { return ta ? a[k * M + i] : a[i * K + k]; };
  auto bt = [&](int64_t k, int64_t j) { return ta ? b[j * K + k] : b[k * N + j]; };
  // And each entry is within the f32 dot-product bound of a float64 sum.
  for (int64_t i = 0; i < M; i += 37) {
    for (int64_t j = 0; j < N; j += 11) {
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        ref += static_cast<double>(at(i, k)) * bt(k, j);
        mag += std::abs(static_cast<double>(at(i, k)) * bt(k, j));
      }
      EXPECT_NEAR(c1[i * N + j], ref, (K + 2) * 0x1p-24 * mag + 1e-30) << i << "," << j;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, SplitGemm, ::testing::Values(0, 1, 2, 3));

}  // namespace

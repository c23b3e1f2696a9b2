// src/core/gemm.cc: the SGEMM / DGEMM wrappers and the OpenBLAS thread guard (gemm.h).
#include "core/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/internal.h"

namespace smax::detail {
namespace {

std::mutex g_blas_mutex;
int g_blas_users = 0;          // live BlasOnCallingThread objects
int g_blas_saved_threads = 0;  // the caller's OpenBLAS thread count
std::atomic<int> g_blas_seen_max{0};

void note_blas_threads() {
  const int now = openblas_get_num_threads();
  int seen = g_blas_seen_max.load(std::memory_order_relaxed);
  while (now > seen &&
         !g_blas_seen_max.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

BlasOnCallingThread::BlasOnCallingThread() {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  if (g_blas_users++ == 0) {
    g_blas_saved_threads = openblas_get_num_threads();
    if (g_blas_saved_threads != 1) openblas_set_num_threads(1);
  }
}

BlasOnCallingThread::~BlasOnCallingThread() {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  if (--g_blas_users == 0 && g_blas_saved_threads != 1) {
    openblas_set_num_threads(g_blas_saved_threads);
  }
}

int blas_threads_seen_max() { return g_blas_seen_max.load(std::memory_order_relaxed); }
void reset_blas_threads_seen() { g_blas_seen_max.store(0, std::memory_order_relaxed); }

namespace {

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
               const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha,
               const double* a, int lda, const double* b, int ldb, double beta, double* c,
               int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

// C = alpha op(A) op(B) + beta C on the calling thread (sgemm / dgemm).
template <class T>
void gemm_on_thread(int64_t M, int64_t N, int64_t K, T alpha, const GemmOperandT<T>& a,
                    const GemmOperandT<T>& b, T beta, T* c, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (beta == T(0)) {
      for (int64_t i = 0; i < M; ++i) std::fill(c + i * ldc, c + i * ldc + N, T(0));
    }
    return;
  }
  note_blas_threads();
  blas_gemm(a.trans ? CblasTrans : CblasNoTrans, b.trans ? CblasTrans : CblasNoTrans,
            static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, a.p,
            static_cast<int>(a.ld), b.p, static_cast<int>(b.ld), beta, c, static_cast<int>(ldc));
}

// The product split over smax's pool (sgemm_parallel / dgemm_parallel).
template <class T>
void gemm_split(int threads, int64_t M, int64_t N, int64_t K, T alpha, const GemmOperandT<T>& a,
                const GemmOperandT<T>& b, T beta, T* c, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  // Split the larger of M and N: each block re-packs the other operand's
  // panel, so blocks are >= 128 wide (packing then costs a few percent of
  // the block's multiply-adds) and there are at most 32 of them. Products
  // under ~2^22 multiply-adds are one block: a task would cost more than
  // it saves.
  const bool split_rows = M >= N;
  const int64_t extent = split_rows ? M : N;
  const double work = static_cast<double>(M) * static_cast<double>(N) *
                      static_cast<double>(std::max<int64_t>(K, 1));
  int64_t block = extent;
  if (work >= 4194304.0) {
    block = std::max<int64_t>(128, (extent + 31) / 32);
    block = std::min<int64_t>((block + 15) / 16 * 16, extent);
  }
  const int64_t blocks = (extent + block - 1) / block;
  if (blocks == 1) {
    gemm_on_thread(M, N, K, alpha, a, b, beta, c, ldc);
    return;
  }
  run_parallel(blocks, threads, [&](int64_t t) {
    const int64_t x0 = t * block, len = std::min(block, extent - x0);
    if (split_rows) {
      // Rows [x0, x0 + len) of op(A) and of C.
      const GemmOperandT<T> ar{a.trans ? a.p + x0 : a.p + x0 * a.ld, a.ld, a.trans};
      gemm_on_thread(len, N, K, alpha, ar, b, beta, c + x0 * ldc, ldc);
    } else {
      // Columns [x0, x0 + len) of op(B) and of C.
      const GemmOperandT<T> bc{b.trans ? b.p + x0 * b.ld : b.p + x0, b.ld, b.trans};
      gemm_on_thread(M, len, K, alpha, a, bc, beta, c + x0, ldc);
    }
  });
}

}  // namespace

void sgemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a, const GemmOperand& b,
           float beta, float* c, int64_t ldc) {
  gemm_on_thread(M, N, K, alpha, a, b, beta, c, ldc);
}

void sgemm_parallel(int threads, int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a,
                    const GemmOperand& b, float beta, float* c, int64_t ldc) {
  gemm_split(threads, M, N, K, alpha, a, b, beta, c, ldc);
}

void dgemm(int64_t M, int64_t N, int64_t K, double alpha, const GemmOperand64& a,
           const GemmOperand64& b, double beta, double* c, int64_t ldc) {
  gemm_on_thread(M, N, K, alpha, a, b, beta, c, ldc);
}

void dgemm_parallel(int threads, int64_t M, int64_t N, int64_t K, double alpha,
                    const GemmOperand64& a, const GemmOperand64& b, double beta, double* c,
                    int64_t ldc) {
  gemm_split(threads, M, N, K, alpha, a, b, beta, c, ldc);
}

}  // namespace smax::detail

// src/core/gemm.h: smax's GEMM wrappers (OpenBLAS, Debian libopenblas-dev:
// SGEMM, and DGEMM for the float64 paths) and the rule that keeps one thread
// pool at a time.
//
// The rule: every GEMM smax calls runs on the calling thread. OpenBLAS would
// otherwise start its own threads inside smax's OpenMP threads (or beside
// OpenMP workers spinning after a parallel region), and on a small machine
// the two pools fight for the cores: attention and linear cross-entropy ran
// 16-25x slower at the default thread count than at one thread. smax
// parallelises a large GEMM itself instead, by splitting C into row or column
// blocks over its own task grid (sgemm_parallel / dgemm_parallel), which also keeps the bits
// independent of the thread count (the grid depends on the shape only).
//
// OpenBLAS 0.3.21 has one process-wide thread count. BlasOnCallingThread
// sets it to 1 while any smax op that calls BLAS is running and restores the
// caller's value when the last such op returns (reference counted, so
// concurrent smax calls from several user threads are safe). An application
// calling OpenBLAS itself, from another thread, while an smax op runs gets
// single-threaded GEMMs for that time, and a thread count it sets during
// that time is replaced by the one saved at entry when the last op returns
// (docs/design.md).
#pragma once

#include <cstdint>

namespace smax::detail {

/// A GEMM operand: element (i, k) is p[i * ld + k], or p[k * ld + i] with
/// trans (a column-major view).
template <class T>
struct GemmOperandT {
  const T* p = nullptr;
  int64_t ld = 1;
  bool trans = false;
};
using GemmOperand = GemmOperandT<float>;
using GemmOperand64 = GemmOperandT<double>;

/// C[M x N] (row-major, ldc) = alpha op(A)[M x K] op(B)[K x N] + beta C, on
/// the calling thread. K = 0: C = 0 when beta = 0 (else unchanged), like
/// BLAS's contract but without reading A or B. Dimensions and leading
/// dimensions must fit int (callers gather operands that do not).
void sgemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a, const GemmOperand& b,
           float beta, float* c, int64_t ldc);

/// The same product split into blocks of rows or of columns of C (whichever
/// dimension is larger; a fixed grid that depends on M, N and K only), run
/// over smax's pool with `threads` threads. Same bits for any thread count.
void sgemm_parallel(int threads, int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a,
                    const GemmOperand& b, float beta, float* c, int64_t ldc);

/// sgemm and sgemm_parallel in float64 (cblas_dgemm; the same contract, the
/// same split grid, so the same bits for any thread count).
void dgemm(int64_t M, int64_t N, int64_t K, double alpha, const GemmOperand64& a,
           const GemmOperand64& b, double beta, double* c, int64_t ldc);
void dgemm_parallel(int threads, int64_t M, int64_t N, int64_t K, double alpha,
                    const GemmOperand64& a, const GemmOperand64& b, double beta, double* c,
                    int64_t ldc);

/// While alive, OpenBLAS runs single-threaded (see the file comment).
class BlasOnCallingThread {
 public:
  BlasOnCallingThread();
  ~BlasOnCallingThread();
  BlasOnCallingThread(const BlasOnCallingThread&) = delete;
  BlasOnCallingThread& operator=(const BlasOnCallingThread&) = delete;
};

/// Test seam: the largest OpenBLAS thread count any sgemm / dgemm call has seen since
/// the last reset (tests assert it is 1 inside parallel regions).
int blas_threads_seen_max();
void reset_blas_threads_seen();

}  // namespace smax::detail

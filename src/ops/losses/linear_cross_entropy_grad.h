// src/ops/losses/linear_cross_entropy_grad.h: the gradient GEMMs of the
// linear cross-entropy backward (linear_cross_entropy_backward.cc) and of its
// vocabulary-parallel form (ops/distributed/linear_cross_entropy_sharded.cc):
// where the GEMMs write (GradTargets, OutMatrix: the output itself or a
// temporary of T rounded into it once) and the tail of a gradient tile
// (dbias column sums, dhidden (+)= dz . W_v, dweight_v (+)= dz^T . H_c).
// Internal to src/ops; in namespace smax::detail::lce.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/losses/linear_cross_entropy_tiles.h"

namespace smax::detail::lce {

// Where the gradient GEMMs write (the outputs or temporaries of T).
template <class T>
struct GradTargets {
  T* dh = nullptr;
  int64_t dh_ld = 1, dh_rs = 1;  // leading dimension, row step
  T* dw = nullptr;
  int64_t dw_ld = 1, dw_rs = 1;
  double* db = nullptr;          // float64 column sums (nullable)
};

// After a tile holds dz: dbias_v += column sums, dhidden_c (+)= dz · W_v,
// dweight_v (+)= dz^T · H_c.
template <class T>
void grad_tile_tail(const Setup& s, Work<T>& w, const GemmOperandT<T>& hc,
                    const GemmOperandT<T>& wv, int64_t n0, int64_t nc, int64_t v0, int64_t vc,
                    const GradTargets<T>& t) {
  if (t.db != nullptr) {
    // Columns split over tasks; each column summed in token order (float64).
    const int64_t block = 256;
    const int64_t blocks = (vc + block - 1) / block;
    run_parallel(blocks, s.threads, [&](int64_t b) {
      const int64_t j0 = b * block, cnt = std::min(block, vc - j0);
      for (int64_t r = 0; r < nc; ++r) accumulate(w.tile.data() + r * vc + j0, cnt, t.db + v0 + j0);
    });
  }
  if (s.D == 0) return;  // dhidden / dweight have no elements (and may be null)
  const GemmOperandT<T> dz{w.tile.data(), vc, false};
  // dhidden: B(k = class, j = unit) = W[v0 + k, j] (wv as is).
  gemm(s.threads, nc, s.D, vc, dz, wv, v0 == 0 ? T(0) : T(1), t.dh + n0 * t.dh_rs, t.dh_ld);
  // dweight: A(i = class, k = token) = dz[k, i].
  gemm(s.threads, vc, s.D, nc, transposed(dz), hc, n0 == 0 ? T(0) : T(1), t.dw + v0 * t.dw_rs,
       t.dw_ld);
}

// An output matrix [rows, D] for the gradient GEMMs of T: the view itself
// when it is T with a unit stride along D, else a temporary rounded into it
// at the end (write).
template <class T>
struct OutMatrix {
  Layout l;
  std::vector<T> tmp;
  OutMatrix(const char* op, const TensorView& v, int64_t rows, int64_t D)
      : l(layout_of(v, false)) {
    if (v.dtype != kDTypeOf<T>) l.direct = false;
    if (!l.direct) tmp = alloc<T>(op, rows * D);
  }
  T* data(const TensorView& v) { return l.direct ? static_cast<T*>(v.data) : tmp.data(); }
  int64_t ld(int64_t D) const { return l.direct ? l.ld : std::max<int64_t>(D, 1); }
  int64_t row_step(const TensorView& v, int64_t D) const { return l.direct ? v.strides[0] : ld(D); }
  // Rounds the temporary once into the view.
  void write(const TensorView& v, int64_t rows, int64_t D) const {
    if (l.direct || D == 0) return;
    auto* out = static_cast<char*>(v.data);
    const int64_t size = dtype_size(v.dtype);
    const int64_t tld = std::max<int64_t>(D, 1);
    for (int64_t r = 0; r < rows; ++r) {
      scatter_row(tmp.data() + r * tld, D, out + r * v.strides[0] * size, v.dtype, v.strides[1]);
    }
  }
};

}  // namespace smax::detail::lce

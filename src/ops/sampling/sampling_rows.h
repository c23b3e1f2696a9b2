// src/ops/sampling/sampling_rows.h: the pieces the sampling ops (sampling.cc: softmax_topk,
// sampling_filter, sample; gumbel.cc: gumbel_noise, gumbel_softmax, gumbel_max)
// share: outputs that Rowwise does not model (RowOut: per-row i64 indices,
// [.., k] top-k outputs), aligned scratch carving, and the Gumbel-max argmax
// of one row. Internal to src/ops.
#pragma once

#include <cstdint>
#include <limits>

#include "core/rowwise.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax {
namespace detail {

inline constexpr float kInfF = std::numeric_limits<float>::infinity();
inline constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();
inline constexpr double kInfD = std::numeric_limits<double>::infinity();
// Candidate indices examined per select_greater call in gumbel_argmax.
inline constexpr int64_t kChunk = 1024;

// An output addressed by (row, j): element j along the axis of an output of
// src's shape with the axis replaced by `len` (len 1 for per-row outputs).
struct RowOut {
  char* base = nullptr;
  DType dtype = DType::kF32;  // element type (floating outputs: any floating dtype)
  int elem = 0;
  int rank = 0;
  int axis = 0;
  int64_t shape[kMaxRank] = {};    // src's shape (the axis entry unused)
  int64_t strides[kMaxRank] = {};  // output strides in src's index space
  int64_t axis_stride = 0;

  int64_t offset(int64_t row) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      if (d == axis) continue;
      off += (row % shape[d]) * strides[d];
      row /= shape[d];
    }
    return off;
  }
  template <typename T>
  T* at(int64_t row) const {
    return reinterpret_cast<T*>(base + offset(row) * elem);
  }
};

// Rejects an output that overlaps src or a mask.
void check_against_inputs(const TensorView& out, const char* name, const TensorView& src,
                          const SoftmaxOptions& options, const char* op);
// Per-row i64 output: src's shape without the axis (or keepdim).
RowOut index_output(const Rowwise& rw, const TensorView& out, const char* name,
                    const TensorView& src_in, const SoftmaxOptions& options, const char* op);
// [.., k] output: src's shape with the axis of length k.
RowOut k_output(const Rowwise& rw, const TensorView& out_in, const char* name, DType dtype,
                int64_t k, const TensorView& src_in, const SoftmaxOptions& options,
                const char* op);

// Aligned pointer of `count` T inside float scratch (the caller reserved
// count * sizeof(T) / 4 + 4 floats).
template <typename T>
T* carve(float*& scratch, int64_t count) {
  auto p = reinterpret_cast<uintptr_t>(scratch);
  p = (p + 15) & ~uintptr_t{15};
  T* out = reinterpret_cast<T*>(p);
  scratch = reinterpret_cast<float*>(out + count);
  return out;
}
template <typename T>
int64_t floats_for(int64_t count) {
  return count * static_cast<int64_t>(sizeof(T) / sizeof(float)) + 4;
}

// argmax_i ((double) t_i + g(seed, row, offset + i)), lowest index on ties;
// -1 for empty, all -inf, NaN or +inf rows (see sampling_rows.cc for the
// pruning). `offset`: the noise index of t[0] (a shard's first global class
// in the vocabulary-parallel sample; 0 otherwise). idx: kChunk entries,
// ebuf: kChunk floats, hbuf: kChunk words of scratch (kChunk + 2 when offset
// is odd).
int64_t gumbel_argmax(const float* t, int64_t n, uint64_t seed, uint64_t row, int64_t* idx,
                      float* ebuf, uint32_t* hbuf, uint64_t offset = 0);
// The softmax algorithm of a row of n entries (kAuto resolved).
Algorithm softmax_algorithm(const SoftmaxOptions& o, int64_t n);

}  // namespace detail
}  // namespace smax

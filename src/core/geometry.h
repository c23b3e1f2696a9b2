// src/core/geometry.h: an op's operands reduced to (batch dims, reduced axis).
//
// Every op sees its operands in the index space of the source: the reduced
// axis of length n, and "batch" dims that enumerate rows. Batch dims of size
// 1 are dropped and neighbours that are contiguous in every operand are
// merged, so a contiguous [B, H, S, S] softmax over the last axis becomes one
// batch dim of B*H*S rows.
#pragma once

#include <cstdint>

#include "smax/tensor.h"

namespace smax::detail {

/// Most operands one op call may have (inputs, outputs, masks, per-row
/// operands; see core/rowwise.h).
inline constexpr int kMaxOperands = 12;

struct Geometry {
  int operands = 0;
  char* base[kMaxOperands] = {};    ///< data pointer of each operand (may be null)
  int elem_size[kMaxOperands] = {};
  int64_t n = 0;                    ///< length of the reduced axis
  int64_t axis_stride[kMaxOperands] = {};
  int batch_dims = 0;               ///< after dropping size-1 dims and merging
  int64_t batch_size[kMaxRank] = {};
  int64_t batch_stride[kMaxOperands][kMaxRank] = {};
  int64_t rows = 1;                 ///< product of batch_size

  /// Element offsets of row `row` (linear, row-major over the batch dims).
  void row_offsets(int64_t row, int64_t* offsets) const {
    for (int k = 0; k < operands; ++k) offsets[k] = 0;
    for (int d = batch_dims - 1; d >= 0; --d) {
      const int64_t i = row % batch_size[d];
      row /= batch_size[d];
      for (int k = 0; k < operands; ++k) offsets[k] += i * batch_stride[k][d];
    }
  }
  /// Address of element `offset` of operand k.
  char* at(int k, int64_t offset) const { return base[k] + offset * elem_size[k]; }
};

/// Builds the geometry of `count` operands that all live in `src_shape`'s
/// index space; strides[k] are operand k's strides over those dims (0 where
/// broadcast or absent). `axis` is the reduced dim.
Geometry make_geometry(const TensorView& src_shape, int axis, int count, char* const* bases,
                       const int* elem_sizes, const int64_t (*strides)[kMaxRank]);

}  // namespace smax::detail

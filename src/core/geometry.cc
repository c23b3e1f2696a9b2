// src/core/geometry.cc: see geometry.h.
#include "core/geometry.h"

namespace smax::detail {

Geometry make_geometry(const TensorView& src_shape, int axis, int count, char* const* bases,
                       const int* elem_sizes, const int64_t (*strides)[kMaxRank]) {
  Geometry g;
  g.operands = count;
  for (int k = 0; k < count; ++k) {
    g.base[k] = bases[k];
    g.elem_size[k] = elem_sizes[k];
    g.axis_stride[k] = strides[k][axis];
  }
  g.n = src_shape.shape[axis];
  // Keep batch dims of size > 1, outermost first.
  for (int d = 0; d < src_shape.rank; ++d) {
    if (d == axis || src_shape.shape[d] == 1) continue;
    const int b = g.batch_dims++;
    g.batch_size[b] = src_shape.shape[d];
    for (int k = 0; k < count; ++k) g.batch_stride[k][b] = strides[k][d];
  }
  // Merge dim b into dim b+1 when every operand is contiguous across them.
  int out = 0;
  for (int b = 0; b < g.batch_dims; ++b) {
    if (out > 0) {
      const int prev = out - 1;
      bool mergeable = true;
      for (int k = 0; k < count && mergeable; ++k) {
        mergeable = g.batch_stride[k][prev] == g.batch_stride[k][b] * g.batch_size[b];
      }
      if (mergeable) {
        g.batch_size[prev] *= g.batch_size[b];
        for (int k = 0; k < count; ++k) g.batch_stride[k][prev] = g.batch_stride[k][b];
        continue;
      }
    }
    g.batch_size[out] = g.batch_size[b];
    for (int k = 0; k < count; ++k) g.batch_stride[k][out] = g.batch_stride[k][b];
    ++out;
  }
  g.batch_dims = out;
  g.rows = 1;
  for (int b = 0; b < g.batch_dims; ++b) g.rows *= g.batch_size[b];
  return g;
}

}  // namespace smax::detail

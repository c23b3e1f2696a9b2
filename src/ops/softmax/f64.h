// src/ops/softmax/f64.h: the float64 path of the softmax family (an f64 src,
// or an f64 y / dy in backward), run by forward.cc / backward.cc after
// their validation and geometry (the same operand order: forward src 0,
// dst 1, additive mask 2, bool mask 3; backward y 0, dy 1, dx 2).
//
// Every row is computed in float64 by kernels/softmax_f64.h: rows that are
// f64 and contiguous (and, forward, have no mask and scale 1) are read in
// place; others are gathered into a float64 scratch row (logits
// t = x * s + mask in double, -inf where the bool mask is 0; a non-f64
// operand widened exactly). Outputs that are f64 and contiguous are written
// in place; others are scattered from a float64 row, each value rounded
// once to its dtype (f32 by the cast, f16 / bf16 through round-to-odd).
// Rows are independent tasks on the fixed grid: the same bits for any
// thread count.
#pragma once

#include "core/geometry.h"
#include "core/long_row.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::detail {

struct F64Forward {
  ForwardOp op;
  const Geometry* g;
  DType src_type, dst_type, mask_type;
  bool has_add_mask, has_bool_mask;
  double scale;  // double(scale) / double(temperature)
  EmptyRow empty_row;
  int threads;
};
void run_forward_f64(const F64Forward& c);

struct F64Backward {
  BackwardOp op;
  const Geometry* g;
  DType y_type, dy_type, dx_type;
  double scale;
  int threads;
};
void run_backward_f64(const F64Backward& c);

}  // namespace smax::detail

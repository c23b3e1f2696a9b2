// src/core/validate.h: argument checks shared by every op.
//
// Every check throws smax::Error(kInvalidArgument) with a message of the form
// "<op>: <argument> <what is wrong>" before anything is written.
#pragma once

#include <cstdint>
#include <string>

#include "core/errors.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::detail {

/// Fails with "<op>: <message><value>" unless the enum `value` is one of
/// [0, last] as an int (out-of-range values arrive through casts: the C
/// ABI, Python, fuzzing). `message` is the op's own wording, e.g.
/// "reduction has unknown value ".
template <typename Enum>
void check_enum_range(const char* op, Enum value, Enum last, const char* message) {
  const int v = static_cast<int>(value);
  if (v < 0 || v > static_cast<int>(last)) fail(op, message + std::to_string(v));
}

/// Checks rank, sizes (>= 0, element count fits int64), dtype, null data
/// with a non-empty shape, and that every byte offset reachable through the
/// strides fits int64 and does not wrap the address space.
void check_view(const TensorView& view, const char* op, const char* name, DType dtype);

/// check_view for an operand that may have any floating storage dtype (f32,
/// f64, f16, bf16): the error names the dtype and the accepted ones.
void check_float_view(const TensorView& view, const char* op, const char* name);

/// Resolves a possibly negative axis against `rank` (rank 0 behaves as rank 1).
int resolve_axis(int64_t axis, int rank, const char* op);

/// Requires a.shape == b.shape.
void check_same_shape(const TensorView& a, const char* a_name, const TensorView& b,
                      const char* b_name, const char* op);

/// Requires `mask` to broadcast to `shape` (NumPy rules, right-aligned) and
/// returns its strides expanded to `rank` dims (0 where broadcast).
void broadcast_strides(const TensorView& mask, const char* name, const TensorView& target,
                       const char* op, int64_t* out_strides);

/// Requires `out` to have src's shape without dim `axis` (dropped) or with it
/// of size 1 (keepdim), and writes out's strides expanded to src's index
/// space (0 along `axis`) to `strides`.
void reduced_strides(const TensorView& src, int axis, const TensorView& out, const char* name,
                     const char* op, int64_t* strides);

/// Requires an output that never writes one element twice (no zero stride on
/// a dim of size > 1, no self-overlap).
void check_no_self_overlap(const TensorView& out, const char* name, const char* op);

/// Requires `out` to be exactly `in` (same data, shape, strides) or to share
/// no byte with it. `allow_alias` false rejects exact aliasing too.
void check_disjoint_or_same(const TensorView& out, const char* out_name,
                            const TensorView& in, const char* in_name, const char* op,
                            bool allow_alias);

/// Checks scale, temperature, their f32 quotient, enum values and threads;
/// returns the f32 multiplier s = scale / temperature.
float check_options(const SoftmaxOptions& options, const char* op);

/// `view` with rank 0 turned into shape [1].
TensorView as_rank1_if_scalar(const TensorView& view);

/// Rows of `src` over `axis`: the product of the other dims (rank 0: 1).
int64_t count_rows(const TensorView& src, int axis);

}  // namespace smax::detail

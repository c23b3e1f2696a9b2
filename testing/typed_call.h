// testing/typed_call.h: an op-table call (op_table.h) with its floating
// operands in another storage dtype (f64, f16, bf16), for `smax run --dtype`
// and the dtype tests that walk the op list.
//
// make_typed_call rounds the instance's generated inputs (x, the saved y,
// dy) to `dtype` *in place*, so the f32 call of the instance and the typed
// call see the same values and the float64 oracle run on the f32 call is the
// exact result for the typed call too. Class targets, masks and class
// weights stay as they are (i64 / f32); outputs (`out`) get `dtype`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op_table.h"
#include "smax/tensor.h"

namespace smax_cli {

struct TypedCall {
  smax::DType dtype = smax::DType::kF32;
  std::vector<unsigned char> x, y, dy, out;  ///< storage of the typed views
  ExtCall call;                              ///< the instance's call with typed views
};

/// False for the integer ops (smax/quantized.h, op list group "quantized"):
/// their inputs and outputs are integers, so f64 / f16 / bf16 views do not
/// apply to them.
bool takes_floating_dtypes(const ExtOp& op);
/// True for the ops that compute in float64 when given f64 inputs (every
/// table op but the collapse detector and the integer softmaxes;
/// docs/dtypes.md): their oracle then runs under
/// reference::Float64Semantics (test_dtypes, `smax run --check`, fuzz).
bool has_float64_path(const std::string& op_name);

/// --dtype of an integer op (takes_floating_dtypes false): qlinear_softmax
/// takes u8 (its default) or i8 (the same as --param signed=true, which it
/// sets in `params`); int_softmax and shiftmax take i32 only. An empty
/// `text` changes nothing; anything else is a UsageError naming --dtype.
void apply_integer_dtype(const ExtOp& op, const std::string& text,
                         std::map<std::string, double>& params);

/// "f32", "f64", "f16", "bf16" -> the dtype (UsageError otherwise, naming --dtype).
smax::DType parse_float_dtype(const std::string& text);

/// Rounds data[0..n) to `dtype` in place and returns the same values
/// stored in `dtype` (n elements, at least one element's bytes).
std::vector<unsigned char> round_to_dtype(float* data, size_t n, smax::DType dtype);

/// Element i of `bytes` (dtype) widened to double, for i < n.
std::vector<double> widen_all(const std::vector<unsigned char>& bytes, smax::DType dtype, size_t n);

/// Rounds inst's x / y / dy to `dtype` in place and returns the typed call.
std::unique_ptr<TypedCall> make_typed_call(ExtInstance& inst, smax::DType dtype);

/// The typed call's `out`, widened to double (exactly), `count` elements.
std::vector<double> typed_output(const TypedCall& t, int64_t count);

/// Half the spacing of `dtype`'s values at magnitude |v| (its rounding error
/// bound there): 2^-25 |v|-ish for f32, 2^-9 for bf16, 2^-12 for f16 (with
/// their subnormal floors); 0 for f64 and non-finite v.
double half_ulp(smax::DType dtype, double v);

}  // namespace smax_cli

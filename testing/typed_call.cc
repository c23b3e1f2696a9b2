// testing/typed_call.cc: see typed_call.h.
#include "typed_call.h"

#include <cmath>
#include <cstring>
#include <string>

#include "args.h"
#include "core/convert.h"
#include "smax/runtime.h"

namespace smax_cli {
namespace {

std::vector<unsigned char> round_and_store(std::vector<float>& v, smax::DType dtype) {
  return round_to_dtype(v.data(), v.size(), dtype);
}

smax::TensorView retyped(const smax::TensorView& v, smax::DType dtype, void* data) {
  smax::TensorView t = v;
  t.dtype = dtype;
  t.data = data;
  return t;
}

}  // namespace

bool has_float64_path(const std::string& op_name) {
  return op_name != "softmax_collapse_fraction" && op_name != "int_softmax" &&
         op_name != "shiftmax" && op_name != "qlinear_softmax";
}

std::vector<unsigned char> round_to_dtype(float* data, size_t n, smax::DType dtype) {
  const size_t size = static_cast<size_t>(smax::dtype_size(dtype));
  std::vector<unsigned char> bytes(std::max<size_t>(n, 1) * size);
  for (size_t i = 0; i < n; ++i) {
    data[i] = smax::detail::round_to(dtype, data[i]);
    smax::detail::store_f32(bytes.data() + i * size, dtype, data[i]);
  }
  return bytes;
}

std::vector<double> widen_all(const std::vector<unsigned char>& bytes, smax::DType dtype, size_t n) {
  std::vector<double> v(n);
  const size_t size = static_cast<size_t>(smax::dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) v[i] = smax::detail::load_f64(bytes.data() + i * size, dtype);
  return v;
}

bool takes_floating_dtypes(const ExtOp& op) {
  const smax::OpInfo* info = smax::find_op(op.name);
  return info == nullptr || std::string(info->group) != "quantized";
}

void apply_integer_dtype(const ExtOp& op, const std::string& text,
                         std::map<std::string, double>& params) {
  if (text.empty()) return;
  if (params.count("signed") != 0) {  // qlinear_softmax: u8 or i8
    if (text != "u8" && text != "i8") {
      throw UsageError("--dtype: op " + op.name + " takes u8 or i8, got '" + text + "'");
    }
    const bool want_signed = text == "i8";
    if (params["signed"] != 0 && !want_signed) {
      throw UsageError("--dtype u8 contradicts --param signed=true (op " + op.name + ")");
    }
    params["signed"] = want_signed ? 1 : 0;
    return;
  }
  if (text != "i32") {
    throw UsageError("--dtype: op " + op.name + " takes i32 only, got '" + text + "'");
  }
}

smax::DType parse_float_dtype(const std::string& text) {
  if (text == "f32") return smax::DType::kF32;
  if (text == "f64") return smax::DType::kF64;
  if (text == "f16") return smax::DType::kF16;
  if (text == "bf16") return smax::DType::kBF16;
  throw UsageError("--dtype: expected f32, f64, f16 or bf16, got '" + text + "'");
}

std::unique_ptr<TypedCall> make_typed_call(ExtInstance& inst, smax::DType dtype) {
  auto t = std::make_unique<TypedCall>();
  t->dtype = dtype;
  t->call = inst.call;
  t->x = round_and_store(inst.x, dtype);
  t->call.x = retyped(inst.call.x, dtype, t->x.data());
  if (!inst.y.empty()) {
    t->y = round_and_store(inst.y, dtype);
    t->call.y = retyped(inst.call.y, dtype, t->y.data());
  }
  if (!inst.dy.empty()) {
    t->dy = round_and_store(inst.dy, dtype);
    t->call.dy = retyped(inst.call.dy, dtype, t->dy.data());
  }
  t->out.assign(std::max<size_t>(inst.out.size(), 1) * static_cast<size_t>(smax::dtype_size(dtype)),
                0);
  t->call.out = retyped(inst.call.out, dtype, t->out.data());
  return t;
}

std::vector<double> typed_output(const TypedCall& t, int64_t count) {
  return widen_all(t.out, t.dtype, static_cast<size_t>(count));
}

double half_ulp(smax::DType dtype, double v) {
  if (!std::isfinite(v)) return 0.0;
  int mantissa_bits = 0, min_exp = 0;  // bits after the point; exponent of the smallest normal
  switch (dtype) {
    case smax::DType::kF32: mantissa_bits = 23; min_exp = -126; break;
    case smax::DType::kF16: mantissa_bits = 10; min_exp = -14; break;
    case smax::DType::kBF16: mantissa_bits = 7; min_exp = -126; break;
    default: return 0.0;
  }
  int e = 0;
  std::frexp(std::fabs(v), &e);  // |v| in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, min_exp);
  return std::ldexp(0.5, exponent - mantissa_bits);
}

}  // namespace smax_cli

// testing/table_quantized.cc: the integer softmaxes of smax/quantized.h in
// `smax run`'s table (int_softmax, shiftmax, qlinear_softmax).
//
// The table generates f32 inputs; these ops take integers, so each entry
// quantises x first, as a model would before calling them: i32 ops take
// x_int = round(x / scaling_factor) (saturated to i32, NaN -> 0), and
// qlinear_softmax takes clamp(round(x / x_scale) + x_zero_point) in u8, or i8
// with --param signed=true. The op writes integers into a scratch tensor,
// which is copied to `out` as f32 values (exact: |value| < 2^24 for the
// default output_bit; in general up to 2^31, which f32 rounds), only after
// the call succeeded, so nothing is written on error. The oracle
// (src/reference/quantized.h) runs on the same integers, row by row along
// the axis, and the bound is 0 (exact): `smax run --op NAME --check`.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "op_table.h"
#include "reference/quantized.h"
#include "smax/quantized.h"

namespace smax_cli {
namespace {

namespace ref = smax::reference;

smax::QuantizedOptions quantized_of(const ExtCall& c) {
  smax::QuantizedOptions o;
  o.axis = c.options.axis;
  o.threads = c.options.threads;
  return o;
}
smax_quantized_options c_quantized(const ExtCall& c) {
  smax_quantized_options o = c_defaults(smax_quantized_options_init);
  o.axis = c.options.axis;
  o.threads = c.options.threads;
  return o;
}

// The inputs as integers (x is the contiguous f32 tensor make_instance made).
std::vector<int32_t> quantise(const ExtCall& c, double step, int64_t zero_point, int64_t lo, int64_t hi) {
  const smax::TensorView& x = c.x;
  const int64_t count = x.numel();
  std::vector<int32_t> q(static_cast<size_t>(count));
  const float* p = static_cast<const float*>(x.data);
  for (int64_t i = 0; i < count; ++i) {
    const double v = std::nearbyint(static_cast<double>(p[i]) / step);
    const double z = std::isnan(v) ? 0.0 : v + static_cast<double>(zero_point);
    q[static_cast<size_t>(i)] = static_cast<int32_t>(z < lo ? lo : z > hi ? hi : z);
  }
  return q;
}

// One run of an integer op: the integer input in `Elem`, the output scratch,
// and their views (x's shape, contiguous).
template <typename Elem>
struct IntCall {
  std::vector<Elem> in, out;
  smax::TensorView src, dst;
  smax_tensor c_src, c_dst;
  IntCall(const ExtCall& c, const std::vector<int32_t>& values, smax::DType dtype)
      : in(values.begin(), values.end()), out(values.size()) {
    src = smax::make_view(in.data(), dtype, c.x.rank, c.x.shape, nullptr);
    dst = smax::make_view(out.data(), dtype, c.x.rank, c.x.shape, nullptr);
    c_src = c_tensor(src);
    c_dst = c_tensor(dst);
  }
  void store(const ExtCall& c) const {  // after success only
    float* o = static_cast<float*>(c.out.data);
    for (size_t i = 0; i < out.size(); ++i) o[i] = static_cast<float>(out[i]);
  }
};

// Rows of the contiguous x along the call's axis through `row_fn`, in the
// output's logical order.
template <typename RowFn>
std::vector<double> reference_rows(const ExtCall& c, const std::vector<int32_t>& q, RowFn&& row_fn) {
  const int rank = c.x.rank == 0 ? 1 : c.x.rank;
  const int axis = static_cast<int>(c.options.axis < 0 ? c.options.axis + rank : c.options.axis);
  int64_t outer = 1, n = c.x.rank == 0 ? 1 : c.x.shape[axis], inner = 1;
  for (int d = 0; d < axis; ++d) outer *= c.x.shape[d];
  for (int d = axis + 1; d < c.x.rank; ++d) inner *= c.x.shape[d];
  std::vector<double> out(q.size());
  std::vector<int32_t> row(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      if (n == 0) continue;
      for (int64_t k = 0; k < n; ++k) row[static_cast<size_t>(k)] = q[static_cast<size_t>((o * n + k) * inner + i)];
      const std::vector<int32_t> y = row_fn(row);
      for (int64_t k = 0; k < n; ++k) out[static_cast<size_t>((o * n + k) * inner + i)] = y[static_cast<size_t>(k)];
    }
  }
  return out;
}

constexpr double kI32Lo = std::numeric_limits<int32_t>::min(), kI32Hi = std::numeric_limits<int32_t>::max();

smax::IntSoftmaxOptions int_softmax_of(const ExtCall& c) {
  smax::IntSoftmaxOptions o;
  o.scaling_factor = static_cast<float>(c.param("scaling_factor"));
  o.output_bit = static_cast<int>(c.param("output_bit"));
  return o;
}
smax::ShiftmaxOptions shiftmax_of(const ExtCall& c) {
  smax::ShiftmaxOptions o;
  o.scaling_factor = static_cast<float>(c.param("scaling_factor"));
  o.output_bit = static_cast<int>(c.param("output_bit"));
  return o;
}
smax::QLinearSoftmaxOptions qlinear_of(const ExtCall& c) {
  smax::QLinearSoftmaxOptions o;
  o.x_scale = static_cast<float>(c.param("x_scale"));
  o.x_zero_point = static_cast<int>(c.param("x_zero_point"));
  o.y_scale = static_cast<float>(c.param("y_scale"));
  o.y_zero_point = static_cast<int>(c.param("y_zero_point"));
  o.bias_correction = c.param("bias_correction") != 0;
  return o;
}
bool is_signed(const ExtCall& c) { return c.param("signed") != 0; }

// The integer inputs of each op. A scale that is not finite and > 0 is
// passed as 1 here (quantising with it is meaningless); the op rejects it.
double usable(double step) { return std::isfinite(step) && step > 0 ? step : 1.0; }
std::vector<int32_t> i32_input(const ExtCall& c) {
  return quantise(c, usable(c.param("scaling_factor")), 0, static_cast<int64_t>(kI32Lo), static_cast<int64_t>(kI32Hi));
}
std::vector<int32_t> q8_input(const ExtCall& c) {
  const bool s = is_signed(c);
  const int64_t zp = static_cast<int64_t>(c.param("x_zero_point"));
  return quantise(c, usable(c.param("x_scale")), zp, s ? -128 : 0, s ? 127 : 255);
}

const std::vector<ExtParam> kIntParams = {
    ExtParam{"scaling_factor", 1.0 / 64, "real value of one input step"}.fuzzed({1.0 / 64, 0.1, 1e-3},
                                                                               {0.0, -1.0, NAN, 5.0}),
    ExtParam{"output_bit", 8, "output bits", ParamType::kInt}.fuzzed({8, 4, 16}, {0, 40})};
const std::vector<ExtParam> kShiftParams = {
    ExtParam{"scaling_factor", 1.0 / 64, "real value of one input step"}.fuzzed({1.0 / 64, 0.1, 1e-3},
                                                                               {0.0, -1.0, NAN, 1e-6}),
    ExtParam{"output_bit", 8, "output bits", ParamType::kInt}.fuzzed({8, 4, 16}, {0, 32})};
const std::vector<ExtParam> kQLinearParams = {
    ExtParam{"x_scale", 1.0 / 16, "input scale"}.fuzzed({1.0 / 16, 0.3}, {0.0, NAN}),
    ExtParam{"x_zero_point", 0, "input zero point", ParamType::kInt}.fuzzed({0, 100}, {300, -200}),
    ExtParam{"y_scale", 1.0 / 256, "output scale"}.fuzzed({1.0 / 256, 0.01}, {0.0, -1.0}),
    ExtParam{"y_zero_point", 0, "output zero point", ParamType::kInt}.fuzzed({0, 10}, {256, -129}),
    ExtParam{"signed", 0, "i8 instead of u8", ParamType::kBool}.fuzzed({0, 1}, {}),
    ExtParam{"bias_correction", 0, "softmax bias correction", ParamType::kBool}.fuzzed({0, 1}, {})};

// Exact ops: every element's bound is 0 (op_bounds starts from 0).
void exact(ref::BoundRows&) {}

}  // namespace

void add_quantized_ops(std::vector<ExtOp>& ops) {
  const size_t first = ops.size();
  ops.push_back({"int_softmax", "I-BERT integer softmax (i32 -> i32, out / 2^output_bit)",
                 OutShape::kSame, false, false, false, kIntParams, nullptr,
                 [](const ExtCall& c) {
                   IntCall<int32_t> k(c, i32_input(c), smax::DType::kI32);
                   smax::int_softmax(k.src, k.dst, int_softmax_of(c), quantized_of(c));
                   k.store(c);
                 },
                 [](const ExtCall& c) {
                   const smax::IntSoftmaxOptions p = int_softmax_of(c);
                   return reference_rows(c, i32_input(c), [&](const std::vector<int32_t>& r) {
                     return ref::int_softmax_row(r, p);
                   });
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall&) {
    IntCall<int32_t> k(c, i32_input(c), smax::DType::kI32);
    smax_int_softmax_options p = c_defaults(smax_int_softmax_options_init);
    p.scaling_factor = static_cast<float>(c.param("scaling_factor"));
    p.output_bit = static_cast<int32_t>(c.param("output_bit"));
    const smax_quantized_options o = c_quantized(c);
    const smax_status s = smax_int_softmax(&k.c_src, &k.c_dst, &p, &o);
    if (s == SMAX_STATUS_OK) k.store(c);
    return s;
  };
  ops.back().bounds = exact;
  ops.push_back({"shiftmax", "I-ViT Shiftmax (i32 -> i32, out / 2^(output_bit - 1))",
                 OutShape::kSame, false, false, false, kShiftParams, nullptr,
                 [](const ExtCall& c) {
                   IntCall<int32_t> k(c, i32_input(c), smax::DType::kI32);
                   smax::shiftmax(k.src, k.dst, shiftmax_of(c), quantized_of(c));
                   k.store(c);
                 },
                 [](const ExtCall& c) {
                   const smax::ShiftmaxOptions p = shiftmax_of(c);
                   return reference_rows(c, i32_input(c), [&](const std::vector<int32_t>& r) {
                     return ref::shiftmax_row(r, p);
                   });
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall&) {
    IntCall<int32_t> k(c, i32_input(c), smax::DType::kI32);
    smax_shiftmax_options p = c_defaults(smax_shiftmax_options_init);
    p.scaling_factor = static_cast<float>(c.param("scaling_factor"));
    p.output_bit = static_cast<int32_t>(c.param("output_bit"));
    const smax_quantized_options o = c_quantized(c);
    const smax_status s = smax_shiftmax(&k.c_src, &k.c_dst, &p, &o);
    if (s == SMAX_STATUS_OK) k.store(c);
    return s;
  };
  ops.back().bounds = exact;
  ops.push_back({"qlinear_softmax", "ORT QLinearSoftmax (u8 / i8, quantised in and out)",
                 OutShape::kSame, false, false, false, kQLinearParams, nullptr,
                 [](const ExtCall& c) {
                   const smax::QLinearSoftmaxOptions p = qlinear_of(c);
                   if (is_signed(c)) {
                     IntCall<int8_t> k(c, q8_input(c), smax::DType::kI8);
                     smax::qlinear_softmax(k.src, k.dst, p, quantized_of(c));
                     k.store(c);
                   } else {
                     IntCall<uint8_t> k(c, q8_input(c), smax::DType::kU8);
                     smax::qlinear_softmax(k.src, k.dst, p, quantized_of(c));
                     k.store(c);
                   }
                 },
                 [](const ExtCall& c) {
                   const smax::QLinearSoftmaxOptions p = qlinear_of(c);
                   const bool s = is_signed(c);
                   return reference_rows(c, q8_input(c), [&](const std::vector<int32_t>& r) {
                     return ref::qlinear_softmax_row(r, s, p);
                   });
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall&) {
    smax_qlinear_softmax_options p = c_defaults(smax_qlinear_softmax_options_init);
    p.x_scale = static_cast<float>(c.param("x_scale"));
    p.x_zero_point = static_cast<int32_t>(c.param("x_zero_point"));
    p.y_scale = static_cast<float>(c.param("y_scale"));
    p.y_zero_point = static_cast<int32_t>(c.param("y_zero_point"));
    p.bias_correction = c.param("bias_correction") != 0 ? 1 : 0;
    const smax_quantized_options o = c_quantized(c);
    if (is_signed(c)) {
      IntCall<int8_t> k(c, q8_input(c), smax::DType::kI8);
      const smax_status s = smax_qlinear_softmax(&k.c_src, &k.c_dst, &p, &o);
      if (s == SMAX_STATUS_OK) k.store(c);
      return s;
    }
    IntCall<uint8_t> k(c, q8_input(c), smax::DType::kU8);
    const smax_status s = smax_qlinear_softmax(&k.c_src, &k.c_dst, &p, &o);
    if (s == SMAX_STATUS_OK) k.store(c);
    return s;
  };
  ops.back().bounds = exact;
  set_bound_header(ops, first, "include/smax/quantized.h");
}

}  // namespace smax_cli

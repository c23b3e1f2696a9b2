// python/src/ext_quantized.cc: bindings of the integer softmaxes
// (include/smax/quantized.h): int_softmax, shiftmax (int32 in and out) and
// qlinear_softmax (uint8 or int8 in, the same dtype out). Integer arrays get
// their own view helper here (ext_common.h's to_view takes float32, int64
// and bool only); the Python functions are in smax/_ops_quantized.py.
#include <string>

#include "ext_common.h"
#include "smax/quantized.h"

namespace nb = nanobind;

namespace smax_py __attribute__((visibility("hidden"))) {
namespace {

bool is_dtype(nb::dlpack::dtype d, smax::DType want) {
  switch (want) {
    case smax::DType::kI32: return d == nb::dtype<int32_t>();
    case smax::DType::kU8: return d == nb::dtype<uint8_t>();
    case smax::DType::kI8: return d == nb::dtype<int8_t>();
    default: return false;
  }
}

// A view over an integer ndarray (CPU, rank <= 8, any strides), or a
// TypeError naming the dtype it has and the one expected.
template <typename Array>
smax::TensorView int_view(const Array& a, const char* op, const char* arg, smax::DType want) {
  if (a.device_type() != nb::device::cpu::value) {
    throw nb::type_error((pre(op) + arg + " is not on the CPU; smax computes on CPU memory only").c_str());
  }
  if (!is_dtype(a.dtype(), want)) {
    throw nb::type_error((pre(op) + arg + " has dtype " + dtype_label(a.dtype()) + ", expected " +
                          (want == smax::DType::kI32 ? "int32" : want == smax::DType::kU8 ? "uint8" : "int8"))
                             .c_str());
  }
  const int rank = static_cast<int>(a.ndim());
  if (rank > smax::kMaxRank) {
    throw nb::value_error((pre(op) + arg + " has rank " + std::to_string(rank) + ", more than smax's maximum of " +
                           std::to_string(smax::kMaxRank))
                              .c_str());
  }
  int64_t shape[smax::kMaxRank], strides[smax::kMaxRank];
  for (int i = 0; i < rank; ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  return smax::make_view(const_cast<void*>(static_cast<const void*>(a.data())), want, rank, shape, strides);
}

smax::QuantizedOptions quantized(int64_t dim, int threads) {
  smax::QuantizedOptions o;
  o.axis = dim;
  o.threads = threads;
  return o;
}

}  // namespace

void def_quantized(nb::module_& m) {
  m.def(
      "int_softmax",
      [](const In& x, const Out& out, double scaling_factor, int output_bit, int64_t dim, int threads) {
        const auto s = int_view(x, "int_softmax", "x", smax::DType::kI32);
        const auto d = int_view(out, "int_softmax", "out", smax::DType::kI32);
        smax::IntSoftmaxOptions p;
        p.scaling_factor = static_cast<float>(scaling_factor);
        p.output_bit = output_bit;
        nb::gil_scoped_release release;
        smax::int_softmax(s, d, p, quantized(dim, threads));
      },
      nb::arg("x"), nb::arg("out"), nb::arg("scaling_factor"), nb::arg("output_bit"), nb::arg("dim"),
      nb::arg("threads"), "I-BERT integer softmax (smax/quantized.h): int32 x into int32 out.");
  m.def(
      "shiftmax",
      [](const In& x, const Out& out, double scaling_factor, int output_bit, int64_t dim, int threads) {
        const auto s = int_view(x, "shiftmax", "x", smax::DType::kI32);
        const auto d = int_view(out, "shiftmax", "out", smax::DType::kI32);
        smax::ShiftmaxOptions p;
        p.scaling_factor = static_cast<float>(scaling_factor);
        p.output_bit = output_bit;
        nb::gil_scoped_release release;
        smax::shiftmax(s, d, p, quantized(dim, threads));
      },
      nb::arg("x"), nb::arg("out"), nb::arg("scaling_factor"), nb::arg("output_bit"), nb::arg("dim"),
      nb::arg("threads"), "I-ViT Shiftmax (smax/quantized.h): int32 x into int32 out.");
  m.def(
      "qlinear_softmax",
      [](const In& x, const Out& out, double x_scale, int x_zero_point, double y_scale, int y_zero_point,
         bool bias_correction, int64_t dim, int threads) {
        const smax::DType dt = x.dtype() == nb::dtype<int8_t>() ? smax::DType::kI8 : smax::DType::kU8;
        const auto s = int_view(x, "qlinear_softmax", "x", dt);
        const auto d = int_view(out, "qlinear_softmax", "out", dt);
        smax::QLinearSoftmaxOptions p;
        p.x_scale = static_cast<float>(x_scale);
        p.x_zero_point = x_zero_point;
        p.y_scale = static_cast<float>(y_scale);
        p.y_zero_point = y_zero_point;
        p.bias_correction = bias_correction;
        nb::gil_scoped_release release;
        smax::qlinear_softmax(s, d, p, quantized(dim, threads));
      },
      nb::arg("x"), nb::arg("out"), nb::arg("x_scale"), nb::arg("x_zero_point"), nb::arg("y_scale"),
      nb::arg("y_zero_point"), nb::arg("bias_correction"), nb::arg("dim"), nb::arg("threads"),
      "ORT QLinearSoftmax (smax/quantized.h): uint8 / int8 x into out of the same dtype.");
}

}  // namespace smax_py

// python/src/smax_ext.cc: the nanobind module `smax._smax`.
//
// A thin layer: every op takes its inputs and its preallocated output(s) as
// nanobind ndarrays (numpy, torch CPU tensors, anything speaking DLPack; no
// copies, any strides), builds smax::TensorView's over the same memory and
// calls the C++ API with the GIL released. Allocation, array-type dispatch and
// the Pythonic signatures live in python/smax/__init__.py.
//
// Adding an op: write `void my_op(...)` below using to_view() / make_options()
// and `Release`, add one `m.def(...)`, then a wrapper in smax/__init__.py and a
// line in smax/_smax.pyi.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "smax/smax.h"

namespace nb = nanobind;

namespace {

// Any dtype, any device, any strides: accepted as-is (never converted, never
// copied), then checked by to_view() so errors are TypeErrors with a clear
// message instead of nanobind's generic "incompatible function arguments".
using In = nb::ndarray<nb::ro>;
using Out = nb::ndarray<>;

const char* dtype_label(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  const auto code = static_cast<C>(d.code);
  if (d.lanes != 1) return "a vector type";
  switch (code) {
    case C::Float:
      return d.bits == 16 ? "float16" : d.bits == 32 ? "float32" : d.bits == 64 ? "float64" : "float";
    case C::Bfloat:
      return "bfloat16";
    case C::Int:
      return d.bits == 8 ? "int8" : d.bits == 16 ? "int16" : d.bits == 32 ? "int32" : "int64";
    case C::UInt:
      return d.bits == 8 ? "uint8" : d.bits == 16 ? "uint16" : d.bits == 32 ? "uint32" : "uint64";
    case C::Bool:
      return "bool";
    case C::Complex:
      return "complex";
    default:
      return "an unknown dtype";
  }
}

bool is_f32(nb::dlpack::dtype d) { return d == nb::dtype<float>(); }
bool is_byte_mask(nb::dlpack::dtype d) {
  return d == nb::dtype<bool>() || d == nb::dtype<uint8_t>();
}

/// View over an ndarray's memory (strides in elements, as nanobind gives them).
template <typename Array>
smax::TensorView to_view(const Array& a, const char* op, const char* arg,
                         smax::DType want) {
  if (a.device_type() != nb::device::cpu::value) {
    throw nb::type_error((std::string(op) + ": " + arg +
                          " is not on the CPU; smax computes on CPU memory only")
                             .c_str());
  }
  const auto d = a.dtype();
  const bool ok = want == smax::DType::kF32 ? is_f32(d) : is_byte_mask(d);
  if (!ok) {
    std::string msg = std::string(op) + ": " + arg + " has dtype " + dtype_label(d) + ", expected " +
                      (want == smax::DType::kF32 ? "float32" : "bool");
    if (want == smax::DType::kF32 && d == nb::dtype<double>()) {
      msg += " (smax computes in float32 only; cast with .astype(np.float32) / .float())";
    }
    throw nb::type_error(msg.c_str());
  }
  const int rank = static_cast<int>(a.ndim());
  if (rank > smax::kMaxRank) {
    throw nb::value_error((std::string(op) + ": " + arg + " has rank " + std::to_string(rank) +
                           ", more than smax's maximum of " + std::to_string(smax::kMaxRank))
                              .c_str());
  }
  int64_t shape[smax::kMaxRank];
  int64_t strides[smax::kMaxRank];
  for (int i = 0; i < rank; ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  return smax::make_view(const_cast<void*>(static_cast<const void*>(a.data())), want, rank, shape,
                         strides);
}

/// Options from the Python keyword arguments. A bool (or uint8) mask becomes
/// `bool_mask`, a float32 mask `additive_mask`.
smax::SoftmaxOptions make_options(const char* op, int64_t dim, double scale, double temperature,
                                  const std::optional<In>& mask, const std::string& algorithm,
                                  const std::string& empty_row, int threads) {
  smax::SoftmaxOptions o;
  o.axis = dim;
  o.scale = static_cast<float>(scale);
  o.temperature = static_cast<float>(temperature);
  if (mask) {
    if (is_byte_mask(mask->dtype())) {
      o.bool_mask = to_view(*mask, op, "mask", smax::DType::kBool);
    } else if (is_f32(mask->dtype())) {
      o.additive_mask = to_view(*mask, op, "mask", smax::DType::kF32);
    } else {
      throw nb::type_error((std::string(op) + ": mask has dtype " + dtype_label(mask->dtype()) +
                            ", expected bool (keep where true) or float32 (additive)")
                               .c_str());
    }
  }
  o.algorithm = smax::parse_algorithm(algorithm);
  o.empty_row = smax::parse_empty_row(empty_row);
  if (threads < 0) {
    throw nb::value_error((std::string(op) + ": threads must be >= 0 (0 = default), got " +
                           std::to_string(threads))
                              .c_str());
  }
  o.threads = threads;
  return o;
}

using Forward = void (*)(const smax::TensorView&, const smax::TensorView&,
                         const smax::SoftmaxOptions&);
using Backward = void (*)(const smax::TensorView&, const smax::TensorView&,
                          const smax::TensorView&, const smax::SoftmaxOptions&);

template <Forward F>
void forward(const char* op, const In& x, const Out& out, int64_t dim, double scale,
             double temperature, const std::optional<In>& mask, const std::string& algorithm,
             const std::string& empty_row, int threads) {
  const smax::TensorView src = to_view(x, op, "x", smax::DType::kF32);
  const smax::TensorView dst = to_view(out, op, "out", smax::DType::kF32);
  const smax::SoftmaxOptions o =
      make_options(op, dim, scale, temperature, mask, algorithm, empty_row, threads);
  nb::gil_scoped_release release;
  F(src, dst, o);
}

template <Backward F>
void backward(const char* op, const In& y, const In& dy, const Out& out, int64_t dim, double scale,
              double temperature, int threads) {
  const smax::TensorView yv = to_view(y, op, "y", smax::DType::kF32);
  const smax::TensorView dyv = to_view(dy, op, "dy", smax::DType::kF32);
  const smax::TensorView dxv = to_view(out, op, "out", smax::DType::kF32);
  const smax::SoftmaxOptions o = make_options(op, dim, scale, temperature, std::nullopt, "auto",
                                              "zero", threads);
  nb::gil_scoped_release release;
  F(yv, dyv, dxv, o);
}

template <Forward F>
void def_forward(nb::module_& m, const char* name, const char* doc) {
  m.def(
      name,
      [name](const In& x, const Out& out, int64_t dim, double scale, double temperature,
             const std::optional<In>& mask, const std::string& algorithm,
             const std::string& empty_row, int threads) {
        forward<F>(name, x, out, dim, scale, temperature, mask, algorithm, empty_row, threads);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("dim"), nb::arg("scale"), nb::arg("temperature"),
      nb::arg("mask").none(), nb::arg("algorithm"), nb::arg("empty_row"), nb::arg("threads"),
      doc);
}

template <Backward F>
void def_backward(nb::module_& m, const char* name, const char* doc) {
  m.def(
      name,
      [name](const In& y, const In& dy, const Out& out, int64_t dim, double scale,
             double temperature, int threads) {
        backward<F>(name, y, dy, out, dim, scale, temperature, threads);
      },
      nb::arg("y"), nb::arg("dy"), nb::arg("out"), nb::arg("dim"), nb::arg("scale"),
      nb::arg("temperature"), nb::arg("threads"), doc);
}

}  // namespace

NB_MODULE(_smax, m) {
  m.doc() =
      "Low-level bindings of the smax C++ library. Use the `smax` package: these "
      "functions take preallocated outputs and every argument positionally.";

  // smax::Error -> ValueError / NotImplementedError / MemoryError / RuntimeError.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const smax::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.status()) {
        case smax::Status::kInvalidArgument:
          type = PyExc_ValueError;
          break;
        case smax::Status::kUnsupported:
          type = PyExc_NotImplementedError;
          break;
        case smax::Status::kOutOfMemory:
          type = PyExc_MemoryError;
          break;
        default:
          break;
      }
      PyErr_SetString(type, e.what());
    }
  });

  // ---- the softmax family ------------------------------------------------------
  def_forward<&smax::softmax>(m, "softmax", "softmax(x, out, dim, scale, temperature, mask, algorithm, empty_row, threads)");
  def_forward<&smax::log_softmax>(m, "log_softmax", "log_softmax(x, out, ...): as softmax");
  def_forward<&smax::logsumexp>(m, "logsumexp", "logsumexp(x, out, ...): out has x's shape without dim (or dim of size 1)");
  def_backward<&smax::softmax_backward>(m, "softmax_backward", "softmax_backward(y, dy, out, dim, scale, temperature, threads)");
  def_backward<&smax::log_softmax_backward>(m, "log_softmax_backward", "log_softmax_backward(y, dy, out, dim, scale, temperature, threads)");

  // ---- runtime -------------------------------------------------------------------
  m.def("version", []() { return std::string(smax::version()); });
  m.def("compiled_targets", &smax::compiled_targets);
  m.def("supported_targets", &smax::supported_targets);
  m.def("active_target", &smax::active_target);
  m.def("set_max_target", [](const std::string& name) { smax::set_max_target(name); },
        nb::arg("name"));
  m.def("kernel_name",
        [](const std::string& op, const std::string& algorithm, int64_t cols) {
          return smax::kernel_name(op, algorithm, cols);
        },
        nb::arg("op"), nb::arg("algorithm") = "auto", nb::arg("cols") = 32000);
  m.def("max_threads", &smax::max_threads);
  m.def("set_max_threads", &smax::set_max_threads, nb::arg("threads"));
}

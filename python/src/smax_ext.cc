// python/src/smax_ext.cc: the nanobind module `smax._smax`.
//
// A thin layer: every op takes its inputs and its preallocated output(s) as
// nanobind ndarrays (numpy, torch CPU tensors, anything speaking DLPack; no
// copies, any strides), builds smax::TensorView's over the same memory and
// calls the C++ API with the GIL released. Allocation, array-type dispatch and
// the Pythonic signatures live in python/smax/__init__.py.
//
// Layout: this file holds the module, the softmax family and the runtime
// calls; ext_<family>.cc bind the other op families (one def_<family>()
// each); ext_common.h has the shared helpers.
//
// Adding an op: in its family's ext_*.cc, one `m.def(...)` whose lambda builds
// views with f32()/i64()/target_view() (ext_common.h), the options with
// common() (the tuple `co` every op beyond the softmax family takes: dim,
// scale, temperature, mask, algorithm, empty_row, threads) and loss() (the
// tuple `lo`: ignore_index, reduction, weight, empty_mean), then calls the C++
// op inside a `nb::gil_scoped_release` block. Then a wrapper in
// smax/_ops.py, an autograd Function in smax/_torch_ops.py when it is
// differentiable, and lines in the .pyi stubs.
#include "ext_common.h"
#include <nanobind/stl/tuple.h>
#include <tuple>

namespace nb = nanobind;

namespace smax_py __attribute__((visibility("hidden"))) {
void def_sparse(nb::module_& m);
void def_rescaled(nb::module_& m);
void def_reweight(nb::module_& m);
void def_sampling(nb::module_& m);
void def_cross_entropy(nb::module_& m);
void def_attention(nb::module_& m);
}  // namespace smax_py

namespace {

using namespace smax_py;

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


/// The C++ library's message as Python callers read it: "smax.<op>: ...", the
/// output named `out` (the library calls it dst / dsrc; every Python function
/// takes it as out=), src, whose Python name depends on the op (x, input,
/// logits, p, ...), "the input", and the per-row parameter arrays by their
/// Python names (s, alpha).
std::string python_message(const std::string& what) {
  auto is_word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  // "<op>: ..." -> "smax.<op>: ..." (messages that do not start with an op's
  // name are left as they are).
  size_t n = 0;
  while (n < what.size() && is_word(what[n])) ++n;
  const bool op_first = n > 0 && what.compare(n, 2, ": ") == 0 && what.rfind("smax", 0) != 0;
  const std::string msg = op_first ? "smax." + what : what;
  std::string res;
  res.reserve(msg.size());
  size_t i = 0;
  while (i < msg.size()) {
    if (!is_word(msg[i])) {
      res += msg[i++];
      continue;
    }
    size_t j = i;
    while (j < msg.size() && is_word(msg[j])) ++j;
    const std::string word = msg.substr(i, j - i);
    res += (word == "dst" || word == "dsrc") ? std::string("out")
           : word == "src"                   ? std::string("the input")
           : word == "s_rows"                ? std::string("s")      // ssmax's per-row s
           : word == "alpha_tensor"          ? std::string("alpha")  // entmax_bisect's
                                             : word;
    i = j;
  }
  return res;
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
      PyErr_SetString(type, python_message(e.what()).c_str());
    }
  });

  // ---- the softmax family ------------------------------------------------------
  def_forward<&smax::softmax>(m, "softmax", "softmax(x, out, dim, scale, temperature, mask, algorithm, empty_row, threads)");
  def_forward<&smax::log_softmax>(m, "log_softmax", "log_softmax(x, out, ...): as softmax");
  def_forward<&smax::logsumexp>(m, "logsumexp", "logsumexp(x, out, ...): out has x's shape without dim (or dim of size 1)");
  def_backward<&smax::softmax_backward>(m, "softmax_backward", "softmax_backward(y, dy, out, dim, scale, temperature, threads)");
  def_backward<&smax::log_softmax_backward>(m, "log_softmax_backward", "log_softmax_backward(y, dy, out, dim, scale, temperature, threads)");


  // ---- every other op (ext_*.cc) -------------------------------------------------
  smax_py::def_sparse(m);
  smax_py::def_rescaled(m);
  smax_py::def_reweight(m);
  smax_py::def_sampling(m);
  smax_py::def_cross_entropy(m);
  smax_py::def_attention(m);

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
  m.def("op_list", [] {
    // (name, group, kind, cli) for every op of smax/op_list.inc.
    std::vector<std::tuple<std::string, std::string, std::string, std::string>> out;
    for (const smax::OpInfo& op : smax::op_list()) out.emplace_back(op.name, op.group, op.kind, op.cli);
    return out;
  });
  m.def("max_threads", &smax::max_threads);
  m.def("set_max_threads", &smax::set_max_threads, nb::arg("threads"));
}

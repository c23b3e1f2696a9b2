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
// Adding an op: in its family's ext_*.cc, a def_fwd / def_bwd / LossOp /
// ParamOp line (ext_common.h) or one `m.def(...)` whose lambda builds views
// with flt() (any floating dtype) / i64() / target_view(), the options with common() (from `co`, a
// SoftmaxOptions: dim, scale, temperature, mask, algorithm, empty_row,
// threads) and loss() (from `lo`, a LossOptions: ignore_index, reduction,
// weight, empty_mean), then calls the C++ op inside a `nb::gil_scoped_release`
// block. Then its one Python definition in smax/_ops_<family>.py; the build
// regenerates the stub smax/_smax.pyi (docs/python.md, "Layout of the sources").
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
void def_quantized(nb::module_& m);
void def_distributed(nb::module_& m);  // the submodule _distributed
}  // namespace smax_py

namespace {

using namespace smax_py;

/// The option classes of the module (ext_common.h): keyword-only
/// constructors with the Python functions' defaults, read/write fields.
void def_options(nb::module_& m) {
  nb::class_<PyOptions>(m, "SoftmaxOptions",
                        "The options every op takes (smax/_common.py builds them).")
      .def(
          "__init__",
          [](PyOptions* self, int64_t dim, double scale, double temperature,
             const std::optional<In>& mask, const std::string& algorithm,
             const std::string& empty_row, int threads) {
            new (self) PyOptions{dim, scale, temperature, mask, algorithm, empty_row, threads};
          },
          nb::kw_only(), nb::arg("dim") = -1, nb::arg("scale") = 1.0,
          nb::arg("temperature") = 1.0, nb::arg("mask").none() = nb::none(),
          nb::arg("algorithm") = "auto", nb::arg("empty_row") = "zero", nb::arg("threads") = 0)
      .def("__copy__", [](const PyOptions& o) { return PyOptions(o); })
      .def_rw("dim", &PyOptions::dim)
      .def_rw("scale", &PyOptions::scale)
      .def_rw("temperature", &PyOptions::temperature)
      .def_rw("mask", &PyOptions::mask)
      .def_rw("algorithm", &PyOptions::algorithm)
      .def_rw("empty_row", &PyOptions::empty_row)
      .def_rw("threads", &PyOptions::threads);
  nb::class_<PyLossOptions>(m, "LossOptions", "The options of the losses.")
      .def(
          "__init__",
          [](PyLossOptions* self, int64_t ignore_index, const std::string& reduction,
             const std::optional<In>& weight, const std::string& empty_mean) {
            new (self) PyLossOptions{ignore_index, reduction, weight, empty_mean};
          },
          nb::kw_only(), nb::arg("ignore_index") = -100, nb::arg("reduction") = "mean",
          nb::arg("weight").none() = nb::none(), nb::arg("empty_mean") = "nan")
      .def_rw("ignore_index", &PyLossOptions::ignore_index)
      .def_rw("reduction", &PyLossOptions::reduction)
      .def_rw("weight", &PyLossOptions::weight)
      .def_rw("empty_mean", &PyLossOptions::empty_mean);
  using A = PyAttentionOptions;
  nb::class_<A>(m, "AttentionOptions",
                "The options of attention (scale, sigmoid_bias: NaN = the default).")
      .def(
          "__init__",
          [](A* self, bool is_causal, double scale, double softcap,
             const std::optional<In>& sinks, const std::optional<In>& alibi_slopes,
             const std::string& normalizer, double sigmoid_bias, double softpick_eps,
             double ssmax_s, const std::string& empty_row, int threads,
             const std::string& sigmoid_bias_mode, double unified_max,
             const std::optional<In>& ssmax_scales, int power_p) {
            new (self) A{is_causal,  scale,        softcap,      sinks,
                         alibi_slopes, normalizer, sigmoid_bias, softpick_eps,
                         ssmax_s,    empty_row,    threads,      sigmoid_bias_mode,
                         unified_max, ssmax_scales, power_p};
          },
          nb::kw_only(), nb::arg("is_causal") = false, nb::arg("scale") = std::nan(""),
          nb::arg("softcap") = 0.0, nb::arg("sinks").none() = nb::none(),
          nb::arg("alibi_slopes").none() = nb::none(), nb::arg("normalizer") = "softmax",
          nb::arg("sigmoid_bias") = std::nan(""), nb::arg("softpick_eps") = 1e-6,
          nb::arg("ssmax_s") = 0.43, nb::arg("empty_row") = "zero", nb::arg("threads") = 0,
          nb::arg("sigmoid_bias_mode") = "per_sequence", nb::arg("unified_max") = std::nan(""),
          nb::arg("ssmax_scales").none() = nb::none(), nb::arg("power_p") = 2)
      .def("__copy__", [](const A& o) { return A(o); })
      .def_rw("is_causal", &A::is_causal)
      .def_rw("scale", &A::scale)
      .def_rw("softcap", &A::softcap)
      .def_rw("sinks", &A::sinks)
      .def_rw("alibi_slopes", &A::alibi_slopes)
      .def_rw("normalizer", &A::normalizer)
      .def_rw("sigmoid_bias", &A::sigmoid_bias)
      .def_rw("softpick_eps", &A::softpick_eps)
      .def_rw("ssmax_s", &A::ssmax_s)
      .def_rw("empty_row", &A::empty_row)
      .def_rw("threads", &A::threads)
      .def_rw("sigmoid_bias_mode", &A::sigmoid_bias_mode)
      .def_rw("unified_max", &A::unified_max)
      .def_rw("ssmax_scales", &A::ssmax_scales)
      .def_rw("power_p", &A::power_p);
}

/// A C++ message about an operand's dtype (check_view / check_float_view:
/// "<op>: <name> has dtype <dtype>, expected ..."): raised as a TypeError,
/// like the bindings' own dtype errors.
bool is_dtype_message(const std::string& what) {
  return what.find(" has dtype ") != std::string::npos;
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
  // A dtype message ("<op>: src has dtype f64, expected f32") names the
  // dtypes as numpy / torch do.
  const bool dtype_msg = is_dtype_message(msg);
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
    res += (dtype_msg && word == "f32")    ? std::string("float32")
           : (dtype_msg && word == "f64")  ? std::string("float64")
           : (dtype_msg && word == "f16")  ? std::string("float16")
           : (dtype_msg && word == "bf16") ? std::string("bfloat16")
           : (dtype_msg && word == "i64")  ? std::string("int64")
           : (word == "dst" || word == "dsrc") ? std::string("out")
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
      "functions take preallocated outputs, every argument positionally and the "
      "options as SoftmaxOptions / LossOptions / AttentionOptions objects.";
  // No leak report at interpreter exit: the autograd graph of a tensor still
  // alive at exit (a module-level `loss` after backward) belongs to torch's
  // C++ side, which does not free it during finalisation, so the option
  // objects and communicators its nodes hold outlive the interpreter
  // legitimately; nanobind would list them as leaks on stderr after every
  // such script (seen with `torchrun` and plain smax.torch scripts alike).
  nb::set_leak_warnings(false);

  // smax::Error -> ValueError / NotImplementedError / MemoryError / RuntimeError.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const smax::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.status()) {
        case smax::Status::kInvalidArgument:
          type = is_dtype_message(e.what()) ? PyExc_TypeError : PyExc_ValueError;
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

  def_options(m);

  // numpy has no bfloat16: ml_dtypes' bfloat16 arrays export neither DLPack
  // nor the buffer protocol, so smax/_common.py passes them as their uint16
  // view through this helper, which returns the same memory as a bfloat16
  // ndarray (DLPack kDLBfloat, 16 bits; `owner` kept alive by it). No copy.
  m.def(
      "_bfloat16_view",
      [](nb::ndarray<uint16_t, nb::ro, nb::device::cpu> a, nb::handle owner) {
        size_t shape[64];
        int64_t strides[64];
        const size_t nd = a.ndim();
        if (nd > 64) throw nb::value_error("smax: rank > 64");
        for (size_t i = 0; i < nd; ++i) {
          shape[i] = a.shape(i);
          strides[i] = a.stride(i);
        }
        nb::dlpack::dtype bf16;
        bf16.code = static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat);
        bf16.bits = 16;
        bf16.lanes = 1;
        return nb::ndarray<>(const_cast<uint16_t*>(a.data()), nd, shape, owner, strides, bf16,
                             nb::device::cpu::value);
      },
      nb::arg("a"), nb::arg("owner"));

  // ---- the softmax family ------------------------------------------------------
  def_fwd<&smax::softmax>(m, "softmax");
  def_fwd<&smax::log_softmax>(m, "log_softmax");
  def_fwd<&smax::logsumexp>(m, "logsumexp");  // out: x's shape without dim (or dim of size 1)
  def_bwd<&smax::softmax_backward>(m, "softmax_backward");
  def_bwd<&smax::log_softmax_backward>(m, "log_softmax_backward");
  m.def(
      "logit_scale_gradients",
      [](const In& x, const In& dx, const Co& co) {
        const char* op = "logit_scale_gradients";
        const Common c = common(op, co);
        const auto xv = flt(x, op, "x");
        const auto dv = flt(dx, op, "dx");
        nb::gil_scoped_release r;
        const smax::LogitScaleGradients g = smax::logit_scale_gradients(xv, dv, c.o);
        return std::make_tuple(g.dscale, g.dtemperature);
      },
      nb::arg("x"), nb::arg("dx"), nb::arg("co"));


  // ---- every other op (ext_*.cc) -------------------------------------------------
  smax_py::def_sparse(m);
  smax_py::def_rescaled(m);
  smax_py::def_reweight(m);
  smax_py::def_sampling(m);
  smax_py::def_cross_entropy(m);
  smax_py::def_attention(m);
  smax_py::def_quantized(m);
  smax_py::def_distributed(m);

  // ---- runtime -------------------------------------------------------------------
  m.def("version", []() { return std::string(smax::version()); });
  m.def("compiled_targets", &smax::compiled_targets);
  m.def("supported_targets", &smax::supported_targets);
  m.def("active_target", &smax::active_target);
  m.def("set_max_target", [](const std::string& name) { smax::set_max_target(name); },
        nb::arg("name"));
  m.def("streaming_stores", &smax::streaming_stores);
  m.def("set_streaming_stores",
        [](const std::string& mode) { smax::set_streaming_stores(mode); }, nb::arg("mode"));
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

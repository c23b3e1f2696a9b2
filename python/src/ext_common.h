// python/src/ext_common.h: helpers shared by the translation units of the
// nanobind module smax._smax (python/src/smax_ext.cc and ext_*.cc): ndarray ->
// smax::TensorView conversion with TypeErrors that name the argument, and the
// option objects the ops take (bound in smax_ext.cc, built by
// smax/_common.py): `co` a smax._smax.SoftmaxOptions (every op), `lo` a
// smax._smax.LossOptions (the losses). Their fields are the Python keyword
// arguments, checked and parsed here when an op reads them.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>
#include "smax/cross_entropy.h"
#include "smax/linear_cross_entropy.h"
#include "smax/rescaled.h"
#include "smax/reweight.h"
#include "smax/sampling.h"
#include "smax/smax.h"
#include "smax/sparse.h"

namespace nb = nanobind;

namespace smax_py __attribute__((visibility("hidden"))) {


// Any dtype, any device, any strides: accepted as-is (never converted, never
// copied), then checked by to_view() so errors are TypeErrors with a clear
// message instead of nanobind's generic "incompatible function arguments".
using In = nb::ndarray<nb::ro>;
using Out = nb::ndarray<>;

inline const char* dtype_label(nb::dlpack::dtype d) {
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

/// "smax.<op>: ", the start of every error message.
inline std::string pre(const char* op) { return std::string("smax.") + op + ": "; }

inline bool is_byte_mask(nb::dlpack::dtype d) {
  return d == nb::dtype<bool>() || d == nb::dtype<uint8_t>();
}
inline bool is_i64(nb::dlpack::dtype d) { return d == nb::dtype<int64_t>(); }

/// The smax storage dtype of a floating ndarray dtype (float32, float64,
/// float16, bfloat16: DLPack kDLFloat 32 / 64 / 16, kDLBfloat 16), or false.
inline bool float_dtype(nb::dlpack::dtype d, smax::DType* out) {
  using C = nb::dlpack::dtype_code;
  if (d.lanes != 1) return false;
  if (d.code == static_cast<uint8_t>(C::Float)) {
    if (d.bits == 32) { *out = smax::DType::kF32; return true; }
    if (d.bits == 64) { *out = smax::DType::kF64; return true; }
    if (d.bits == 16) { *out = smax::DType::kF16; return true; }
    return false;
  }
  if (d.code == static_cast<uint8_t>(C::Bfloat) && d.bits == 16) {
    *out = smax::DType::kBF16;
    return true;
  }
  return false;
}
inline bool is_float(nb::dlpack::dtype d) {
  smax::DType t;
  return float_dtype(d, &t);
}

/// The floating dtypes the bindings pass through (views of their own dtype).
inline constexpr const char* kFloatDtypes = "float32, float64, float16 or bfloat16";

/// What a view of `a` wants: any floating dtype (kFloat: the C++ API takes
/// f32, f64, f16 and bf16 for every floating operand of every op), int64, or
/// a byte mask.
// kIndex: int32 or int64 (KV cache lengths and block tables).
enum class Want { kFloat, kI64, kBool, kIndex };

/// View over an ndarray's memory (strides in elements, as nanobind gives them).
template <typename Array>
inline smax::TensorView to_view(const Array& a, const char* op, const char* arg, Want want) {
  if (a.device_type() != nb::device::cpu::value) {
    throw nb::type_error((pre(op) + arg +
                          " is not on the CPU; smax computes on CPU memory only")
                             .c_str());
  }
  const auto d = a.dtype();
  smax::DType dt = smax::DType::kF32;
  bool ok = false;
  switch (want) {
    case Want::kFloat:
      ok = float_dtype(d, &dt);
      break;
    case Want::kI64:
      ok = is_i64(d);
      dt = smax::DType::kI64;
      break;
    case Want::kBool:
      ok = is_byte_mask(d);
      dt = smax::DType::kBool;
      break;
    case Want::kIndex:
      ok = is_i64(d) || d == nb::dtype<int32_t>();
      dt = is_i64(d) ? smax::DType::kI64 : smax::DType::kI32;
      break;
  }
  if (!ok) {
    // Name the dtype, what smax takes and the cast (for an output: what to
    // pass instead; casting an output would write into a copy).
    constexpr bool is_output = std::is_same_v<Array, Out>;
    const std::string a = arg;
    std::string msg = pre(op) + a + " has dtype " + dtype_label(d);
    if (want == Want::kFloat) {
      msg += std::string(", expected a floating dtype (") + kFloatDtypes + ")";
      msg += is_output ? ": pass a floating " + a
                       : ": pass e.g. " + a + ".astype(np.float32) / " + a + ".float()";
    } else if (want == Want::kI64) {
      msg += is_output ? ", expected int64: pass an int64 " + a
                       : ", expected int64: pass " + a + ".astype(np.int64) / " + a + ".long()";
    } else if (want == Want::kIndex) {
      msg += ", expected int32 or int64: pass " + a + ".astype(np.int32) / " + a + ".int()";
    } else {
      msg += ", expected bool";
    }
    throw nb::type_error(msg.c_str());
  }
  const int rank = static_cast<int>(a.ndim());
  if (rank > smax::kMaxRank) {
    throw nb::value_error((pre(op) + arg + " has rank " + std::to_string(rank) +
                           ", more than smax's maximum of " + std::to_string(smax::kMaxRank))
                              .c_str());
  }
  int64_t shape[smax::kMaxRank];
  int64_t strides[smax::kMaxRank];
  for (int i = 0; i < rank; ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  return smax::make_view(const_cast<void*>(static_cast<const void*>(a.data())), dt, rank, shape,
                         strides);
}

/// f(), with the op's name put before the message of a smax::Error it throws
/// (the library's parse_* helpers do not know which op they parse for).
template <typename F>
inline auto with_op(const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const smax::Error& e) {
    throw smax::Error(e.status(), std::string(op) + ": " + e.what());
  }
}

/// Options from the Python keyword arguments. A bool (or uint8) mask becomes
/// `bool_mask`, a float32 mask `additive_mask`.
inline smax::SoftmaxOptions make_options(const char* op, int64_t dim, double scale, double temperature,
                                  const std::optional<In>& mask, const std::string& algorithm,
                                  const std::string& empty_row, int threads) {
  smax::SoftmaxOptions o;
  o.axis = dim;
  o.scale = static_cast<float>(scale);
  o.temperature = static_cast<float>(temperature);
  if (mask) {
    if (is_byte_mask(mask->dtype())) {
      o.bool_mask = to_view(*mask, op, "mask", Want::kBool);
    } else if (is_float(mask->dtype())) {
      o.additive_mask = to_view(*mask, op, "mask", Want::kFloat);
    } else {
      throw nb::type_error((pre(op) + "mask has dtype " + dtype_label(mask->dtype()) +
                            ", expected bool (keep where true) or a floating dtype (additive: " +
                            kFloatDtypes + ")")
                               .c_str());
    }
  }
  o.algorithm = with_op(op, [&] { return smax::parse_algorithm(algorithm); });
  o.empty_row = with_op(op, [&] { return smax::parse_empty_row(empty_row); });
  if (threads < 0) {
    throw nb::value_error((pre(op) + "threads must be >= 0 (0 = default), got " +
                           std::to_string(threads))
                              .c_str());
  }
  o.threads = threads;
  return o;
}

// ---- helpers of the ops beyond the softmax family ------------------------------------

/// Any floating operand (f32, f64, f16, bf16: a view of its own dtype).
inline smax::TensorView flt(const In& a, const char* op, const char* arg) {
  return to_view(a, op, arg, Want::kFloat);
}
inline smax::TensorView flto(const Out& a, const char* op, const char* arg) {
  return to_view(a, op, arg, Want::kFloat);
}
inline smax::TensorView i64(const In& a, const char* op, const char* arg) {
  return to_view(a, op, arg, Want::kI64);
}
inline smax::TensorView i64o(const Out& a, const char* op, const char* arg) {
  return to_view(a, op, arg, Want::kI64);
}
inline std::optional<smax::TensorView> opt_flt(const std::optional<In>& a, const char* op,
                                               const char* arg) {
  if (!a) return std::nullopt;
  return flt(*a, op, arg);
}
inline std::optional<smax::TensorView> opt_flto(const std::optional<Out>& a, const char* op,
                                                const char* arg) {
  if (!a) return std::nullopt;
  return flto(*a, op, arg);
}

/// Loss targets: int64 class indices, or floating class probabilities where the
/// op takes them (cross_entropy).
inline smax::TensorView target_view(const In& a, const char* op, bool probabilities_ok) {
  if (probabilities_ok && is_float(a.dtype())) return flt(a, op, "target");
  if (!is_i64(a.dtype())) {
    throw nb::type_error((pre(op) + "target has dtype " + dtype_label(a.dtype()) +
                          ", expected int64 class indices: pass target.astype(np.int64) / "
                          "target.long()" +
                          (probabilities_ok ? std::string(" (or class probabilities of a floating "
                                                          "dtype: ") + kFloatDtypes + ")"
                                            : std::string()))
                             .c_str());
  }
  return i64(a, op, "target");
}

/// smax._smax.SoftmaxOptions: the keyword options every op takes, as the
/// Python caller gave them (parsed by common()).
struct PyOptions {
  int64_t dim = -1;
  double scale = 1.0;
  double temperature = 1.0;
  std::optional<In> mask;  // bool / uint8 (keep where true) or floating (added)
  std::string algorithm = "auto";
  std::string empty_row = "zero";
  int threads = 0;
};

/// smax._smax.LossOptions: the loss keyword options (parsed by loss()).
struct PyLossOptions {
  int64_t ignore_index = -100;
  std::string reduction = "mean";
  std::optional<In> weight;  // [C] class weights (any floating dtype)
  std::string empty_mean = "nan";
};

/// smax._smax.AttentionOptions (parsed in ext_attention.cc); scale and
/// sigmoid_bias NaN mean "the default".
struct PyAttentionOptions {
  bool is_causal = false;
  double scale = std::nan("");
  double softcap = 0.0;
  std::optional<In> sinks;
  std::optional<In> alibi_slopes;
  std::string normalizer = "softmax";
  double sigmoid_bias = std::nan("");
  double softpick_eps = 1e-6;
  double ssmax_s = 0.43;
  std::string empty_row = "zero";
  int threads = 0;
  std::string sigmoid_bias_mode = "per_sequence";
  double unified_max = std::nan("");  // NaN = off
  std::optional<In> ssmax_scales;     // [H] per-head SSMax s
  int power_p = 2;                    // Power-Softmax's even p
};

/// smax::SoftmaxOptions from `co`. The mask array is kept in `mask` so that
/// the view in `o` stays valid while the op runs.
struct Common {
  std::optional<In> mask;
  smax::SoftmaxOptions o;
};

inline Common common(const char* op, const PyOptions& co) {
  Common c;
  c.mask = co.mask;
  c.o = make_options(op, co.dim, co.scale, co.temperature, c.mask, co.algorithm, co.empty_row,
                     co.threads);
  return c;
}

/// smax::LossOptions from `lo`.
struct Loss {
  std::optional<In> weight;
  smax::LossOptions l;
};

inline Loss loss(const char* op, const PyLossOptions& lo) {
  Loss r;
  r.l.ignore_index = lo.ignore_index;
  r.l.reduction = with_op(op, [&] { return smax::parse_reduction(lo.reduction); });
  if (lo.weight) {
    r.weight = lo.weight;
    r.l.weight = flt(*r.weight, op, "weight");
  }
  if (lo.empty_mean == "nan") {
    r.l.empty_mean = smax::EmptyMean::kNan;
  } else if (lo.empty_mean == "zero") {
    r.l.empty_mean = smax::EmptyMean::kZero;
  } else {
    throw nb::value_error(
        (pre(op) + "empty_mean must be \"nan\" or \"zero\", got \"" + lo.empty_mean + "\"")
            .c_str());
  }
  return r;
}

inline uint64_t seed_of(const char* op, nb::handle seed) {
  try {
    return nb::cast<uint64_t>(seed);
  } catch (const std::exception&) {
    throw nb::value_error(
        (pre(op) + "seed must be an int in [0, 2**64), got " +
         nb::cast<std::string>(nb::str(seed)))
            .c_str());
  }
}

inline smax::EntmaxBisectOptions bisect_params(const char* op, double alpha,
                                        const std::optional<In>& alpha_t, int n_iter,
                                        bool ensure_sum_one) {
  smax::EntmaxBisectOptions p;
  p.alpha = static_cast<float>(alpha);
  p.n_iter = n_iter;
  p.ensure_sum_one = ensure_sum_one;
  p.alpha_tensor = opt_flt(alpha_t, op, "alpha");
  return p;
}

/// The SampleOptions of sampling_filter and sample (the seed set by sample;
/// ext_sampling.cc, ext_distributed.cc).
/// min_p is checked in double first, so a value just above 1 is not rounded
/// into range by the conversion to float.
inline smax::SampleOptions sample_params(const char* op, double temperature, int64_t top_k, double top_p,
                                  double min_p, int64_t min_tokens_to_keep,
                                  const std::string& top_k_ties) {
  smax::SampleOptions p;
  p.temperature = static_cast<float>(temperature);
  p.top_k = top_k;
  p.top_p = static_cast<float>(top_p);
  if (!(min_p >= 0.0 && min_p <= 1.0)) {
    throw smax::Error(smax::Status::kInvalidArgument,
                      std::string(op) + ": min_p must be in [0, 1], got " + std::to_string(min_p));
  }
  p.min_p = static_cast<float>(min_p);
  p.min_tokens_to_keep = min_tokens_to_keep;
  p.top_k_ties = with_op(op, [&] { return smax::parse_top_k_ties(top_k_ties); });
  return p;
}


inline smax::CrossEntropyOptions ce_params(double label_smoothing, double lse_square_scale,
                                    double softcap, const smax::LossOptions& l) {
  smax::CrossEntropyOptions ce;
  ce.loss = l;
  ce.label_smoothing = static_cast<float>(label_smoothing);
  ce.lse_square_scale = static_cast<float>(lse_square_scale);
  ce.softcap = static_cast<float>(softcap);
  return ce;
}

using Co = PyOptions;
using Lo = PyLossOptions;
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

/// The optional per-row outputs of cross_entropy and linear_cross_entropy.
inline void ce_extras(smax::CrossEntropyOptions& ce, const char* op, const OptOut& z_loss,
                      const OptOut& lse, const OptOut& entropy, const OptOut& target_logprob,
                      const OptOut& accuracy) {
  ce.z_loss = opt_flto(z_loss, op, "z_loss");
  ce.lse = opt_flto(lse, op, "lse");
  ce.entropy = opt_flto(entropy, op, "entropy");
  ce.target_logprob = opt_flto(target_logprob, op, "target_logprob");
  ce.accuracy = opt_flto(accuracy, op, "accuracy");
}

inline smax::LinearCrossEntropyOptions lce_params(int64_t token_chunk, int64_t vocab_chunk) {
  smax::LinearCrossEntropyOptions lce;
  lce.token_chunk = token_chunk;
  lce.vocab_chunk = vocab_chunk;
  return lce;
}

// Forward `void F(src, dst, options)` and backward `void F(a, dy, dsrc, options)`.
using Fwd = void (*)(const smax::TensorView&, const smax::TensorView&,
                     const smax::SoftmaxOptions&);
using Bwd = void (*)(const smax::TensorView&, const smax::TensorView&, const smax::TensorView&,
                     const smax::SoftmaxOptions&);

template <Fwd F>
inline void def_fwd(nb::module_& m, const char* name) {
  m.def(
      name,
      [name](const In& x, const Out& out, const Co& co) {
        const Common c = common(name, co);
        const auto xv = flt(x, name, "x");
        const auto ov = flto(out, name, "out");
        nb::gil_scoped_release r;
        F(xv, ov, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("co"));
}

// `a` is the saved output y or the source x, whichever the C++ backward takes.
// `a_name`: the Python name of `a` in error messages.
template <Bwd F>
inline void def_bwd(nb::module_& m, const char* name, const char* a_name = "y") {
  m.def(
      name,
      [name, a_name](const In& a, const In& dy, const Out& out, const Co& co) {
        const Common c = common(name, co);
        const auto av = flt(a, name, a_name);
        const auto dyv = flt(dy, name, "dy");
        const auto ov = flto(out, name, "out");
        nb::gil_scoped_release r;
        F(av, dyv, ov, c.o);
      },
      nb::arg("a"), nb::arg("dy"), nb::arg("out"), nb::arg("co"));
}

/// A loss and its backward, with the scalar arguments A... (none for most):
///   void F(src, target, dst, A..., loss, options),
///   void B(src, target, dloss, dsrc, A..., loss, options),
/// bound as `name(x, target, out, *args, lo, co)` and
/// `bwd_name(x, target, dloss, out, *args, lo, co)`, `names` the nb::arg's of
/// the args. The target is int64 class indices.
template <typename... A>
struct LossOp {
  using F = void (*)(const smax::TensorView&, const smax::TensorView&, const smax::TensorView&,
                     A..., const smax::LossOptions&, const smax::SoftmaxOptions&);
  using B = void (*)(const smax::TensorView&, const smax::TensorView&, const smax::TensorView&,
                     const smax::TensorView&, A..., const smax::LossOptions&,
                     const smax::SoftmaxOptions&);

  template <F Fwd, B Bwd, typename... Names>
  static void def(nb::module_& m, const char* name, const char* bwd_name,
                  const Names&... names) {
    m.def(
        name,
        [name](const In& x, const In& target, const Out& out, A... a, const Lo& lo,
               const Co& co) {
          const Common c = common(name, co);
          const Loss l = loss(name, lo);
          const auto xv = flt(x, name, "x");
          const auto tv = target_view(target, name, false);
          const auto ov = flto(out, name, "out");
          nb::gil_scoped_release r;
          Fwd(xv, tv, ov, a..., l.l, c.o);
        },
        nb::arg("x"), nb::arg("target"), nb::arg("out"), names..., nb::arg("lo"),
        nb::arg("co"));
    m.def(
        bwd_name,
        [bwd_name](const In& x, const In& target, const In& dloss, const Out& out, A... a,
                   const Lo& lo, const Co& co) {
          const Common c = common(bwd_name, co);
          const Loss l = loss(bwd_name, lo);
          const auto xv = flt(x, bwd_name, "x");
          const auto tv = target_view(target, bwd_name, false);
          const auto dv = flt(dloss, bwd_name, "dloss");
          const auto ov = flto(out, bwd_name, "out");
          nb::gil_scoped_release r;
          Bwd(xv, tv, dv, ov, a..., l.l, c.o);
        },
        nb::arg("x"), nb::arg("target"), nb::arg("dloss"), nb::arg("out"), names...,
        nb::arg("lo"), nb::arg("co"));
  }
};

/// An op with parameters P (an options struct, or a number) and its backward:
///   void F(src, dst, P, options),  void B(a, dy, dsrc, P, options),
/// bound as `name(x, out, *args, co)` and `<name>_backward(a, dy, out, *args, co)`
/// where `args` (types A..., Python names given by `names`) make P through
/// Make. `a_name` / `a_kind`: the Python name of the backward's `a` (the
/// source x, or p) and of the forward's source.
template <typename P, typename... A>
struct ParamOp {
  using PArg = std::conditional_t<std::is_arithmetic_v<P>, P, const P&>;
  using F = void (*)(const smax::TensorView&, const smax::TensorView&, PArg,
                     const smax::SoftmaxOptions&);
  using B = void (*)(const smax::TensorView&, const smax::TensorView&, const smax::TensorView&,
                     PArg, const smax::SoftmaxOptions&);

  template <F Fwd, B Bwd, P (*Make)(A...), typename... Names>
  static void def(nb::module_& m, const char* name, const char* bwd_name, const char* x_name,
                  const Names&... names) {
    m.def(
        name,
        [name, x_name](const In& x, const Out& out, A... a, const Co& co) {
          const Common c = common(name, co);
          const P p = Make(a...);
          const auto xv = flt(x, name, x_name);
          const auto ov = flto(out, name, "out");
          nb::gil_scoped_release r;
          Fwd(xv, ov, p, c.o);
        },
        nb::arg(x_name), nb::arg("out"), names..., nb::arg("co"));
    m.def(
        bwd_name,
        [bwd_name, x_name](const In& x, const In& dy, const Out& out, A... a, const Co& co) {
          const Common c = common(bwd_name, co);
          const P p = Make(a...);
          const auto xv = flt(x, bwd_name, x_name);
          const auto dyv = flt(dy, bwd_name, "dy");
          const auto ov = flto(out, bwd_name, "out");
          nb::gil_scoped_release r;
          Bwd(xv, dyv, ov, p, c.o);
        },
        nb::arg(x_name), nb::arg("dy"), nb::arg("out"), names..., nb::arg("co"));
  }
};

// Wrappers giving the overloaded / defaulted C++ functions the plain shapes above.
inline void sparsemax_fwd(const smax::TensorView& s, const smax::TensorView& d,
                   const smax::SoftmaxOptions& o) {
  smax::sparsemax(s, d, o);
}
inline void entmax15_fwd(const smax::TensorView& s, const smax::TensorView& d,
                  const smax::SoftmaxOptions& o) {
  smax::entmax15(s, d, o);
}
inline void stablemax_fwd(const smax::TensorView& s, const smax::TensorView& d,
                   const smax::SoftmaxOptions& o) {
  smax::stablemax(s, d, o);
}
inline void sparsemax_loss_f(const smax::TensorView& s, const smax::TensorView& t,
                      const smax::TensorView& d, const smax::LossOptions& l,
                      const smax::SoftmaxOptions& o) {
  smax::sparsemax_loss(s, t, d, l, o);
}
inline void entmax15_loss_f(const smax::TensorView& s, const smax::TensorView& t,
                     const smax::TensorView& d, const smax::LossOptions& l,
                     const smax::SoftmaxOptions& o) {
  smax::entmax15_loss(s, t, d, l, o);
}
inline void stablemax_ce_f(const smax::TensorView& s, const smax::TensorView& t,
                    const smax::TensorView& d, const smax::LossOptions& l,
                    const smax::SoftmaxOptions& o) {
  smax::stablemax_cross_entropy(s, t, d, l, o);
}
inline void sparsemax_loss_b(const smax::TensorView& s, const smax::TensorView& t,
                      const smax::TensorView& g, const smax::TensorView& d,
                      const smax::LossOptions& l, const smax::SoftmaxOptions& o) {
  smax::sparsemax_loss_backward(s, t, g, d, l, o);
}
inline void entmax15_loss_b(const smax::TensorView& s, const smax::TensorView& t,
                     const smax::TensorView& g, const smax::TensorView& d,
                     const smax::LossOptions& l, const smax::SoftmaxOptions& o) {
  smax::entmax15_loss_backward(s, t, g, d, l, o);
}
inline void stablemax_ce_b(const smax::TensorView& s, const smax::TensorView& t,
                    const smax::TensorView& g, const smax::TensorView& d,
                    const smax::LossOptions& l, const smax::SoftmaxOptions& o) {
  smax::stablemax_cross_entropy_backward(s, t, g, d, l, o);
}
inline void sparsemax_bwd(const smax::TensorView& y, const smax::TensorView& dy,
                   const smax::TensorView& d, const smax::SoftmaxOptions& o) {
  smax::sparsemax_backward(y, dy, d, o);
}
inline void entmax15_bwd(const smax::TensorView& y, const smax::TensorView& dy,
                  const smax::TensorView& d, const smax::SoftmaxOptions& o) {
  smax::entmax15_backward(y, dy, d, o);
}
inline void sparse_softmax_bwd(const smax::TensorView& y, const smax::TensorView& dy,
                        const smax::TensorView& d, const smax::SoftmaxOptions& o) {
  smax::sparse_softmax_backward(y, dy, d, o);
}
inline void stablemax_bwd(const smax::TensorView& x, const smax::TensorView& dy,
                   const smax::TensorView& d, const smax::SoftmaxOptions& o) {
  smax::stablemax_backward(x, dy, d, o);
}
inline void sigmoid_normalizer_bwd(const smax::TensorView& y, const smax::TensorView& dy,
                            const smax::TensorView& d, const smax::SoftmaxOptions& o) {
  smax::sigmoid_normalizer_backward(y, dy, d, o);
}


}  // namespace smax_py

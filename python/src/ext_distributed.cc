// python/src/ext_distributed.cc: the vocabulary-parallel ops
// (smax/distributed.h) for Python, in the submodule smax._smax._distributed
// (private: smax/distributed.py is the public surface, and the op-list checks
// of the main module do not apply to it).
//
// Communicator: smax::distributed::Communicator bound with a nanobind
// trampoline, so a Python subclass (smax.distributed.TorchCommunicator, or
// any class defining rank(), size(), allgather(send, recv) and
// alltoall(send, recv)) is what the C++ ops call. The collectives receive
// numpy uint8 arrays over smax's buffers: `send` read-only, `recv` writable,
// valid only during the call (never keep them). Every op runs with the GIL
// released; the trampoline takes it back for each collective and releases it
// again on return, so a Python communicator may itself release the GIL (as
// torch.distributed does).
//
// Errors raised by the Python communicator: the trampoline keeps the Python
// exception, lets smax unwind with a C++ exception, and the binding re-raises
// the original exception (type, message, traceback) once the op has
// returned. smax::Error becomes ValueError & co. as in the main module.
//
// The ops take the same arguments as their smax._smax bindings (ext_*.cc)
// with the Communicator first. A group of ops is compiled in when its C++
// bodies are in the library: SMAX_DIST_<GROUP> (python/CMakeLists.txt, from
// SMAX_DISTRIBUTED_GROUPS); `groups` lists them.
#include <nanobind/stl/tuple.h>
#include <nanobind/trampoline.h>

#include <exception>
#include <stdexcept>
#include <tuple>

#include "ext_common.h"
#include "smax/distributed.h"

namespace smax_py __attribute__((visibility("hidden"))) {

namespace {

namespace dist = smax::distributed;

// Thrown through smax when the Python communicator raised; the Python
// exception itself waits in the trampoline (pending).
struct CommunicatorRaised : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PyCommunicator final : public dist::Communicator {
 public:
  NB_TRAMPOLINE(dist::Communicator);

  int rank() const override {
    nb::gil_scoped_acquire gil;
    return call_int("rank");
  }
  int size() const override {
    nb::gil_scoped_acquire gil;
    return call_int("size");
  }
  void allgather(const void* send, void* recv, size_t bytes) override {
    nb::gil_scoped_acquire gil;
    const size_t p = static_cast<size_t>(call_int("size"));
    exchange("allgather", send, bytes, recv, bytes * p);
  }
  void alltoall(const void* send, void* recv, size_t bytes) override {
    nb::gil_scoped_acquire gil;
    const size_t p = static_cast<size_t>(call_int("size"));
    exchange("alltoall", send, bytes * p, recv, bytes * p);
  }

  /// After an op failed (GIL held): re-raise the communicator's own Python
  /// exception when there is one.
  void reraise_pending() {
    if (!pending_.is_valid()) return;
    nb::object e = std::move(pending_);
    pending_ = nb::object();
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.ptr())), e.ptr());
    throw nb::python_error();
  }

 private:
  // GIL held by the caller.
  int call_int(const char* name) const {
    try {
      nb::detail::ticket t(nb_trampoline, name, nb::detail::str_hash(name), true);
      return nb::cast<int>(nb_trampoline.base().attr(t.key)());
    } catch (nb::python_error& e) {
      keep(e);
    } catch (const std::bad_cast&) {
      throw smax::Error(smax::Status::kInvalidArgument,
                        std::string("smax.distributed: the communicator's ") + name +
                            "() did not return an int");
    }
    throw CommunicatorRaised(std::string("the communicator's ") + name + "() raised");
  }

  void exchange(const char* name, const void* send, size_t send_bytes, void* recv,
                size_t recv_bytes) {
    try {
      using Ro = nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>;
      using Rw = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;
      // rv_policy::reference: numpy arrays over smax's memory (nanobind
      // copies an ndarray without an owner otherwise).
      nb::object s = nb::cast(Ro(send, {send_bytes}, nb::handle()), nb::rv_policy::reference);
      nb::object r = nb::cast(Rw(recv, {recv_bytes}, nb::handle()), nb::rv_policy::reference);
      nb::detail::ticket t(nb_trampoline, name, nb::detail::str_hash(name), true);
      nb_trampoline.base().attr(t.key)(s, r);
      return;
    } catch (nb::python_error& e) {
      keep(e);
    }
    throw CommunicatorRaised(std::string("the communicator's ") + name + "() raised");
  }

  void keep(nb::python_error& e) const { pending_ = nb::borrow(e.value()); }

  mutable nb::object pending_;
};

PyCommunicator& py_comm(dist::Communicator& c) {
  // Every Communicator made from Python is a PyCommunicator (the class
  // cannot be instantiated otherwise: it is abstract in C++).
  return static_cast<PyCommunicator&>(c);
}

/// Runs `f` (a C++ op) with the GIL released; a failure of the Python
/// communicator is re-raised as its own exception.
template <class F>
void run(dist::Communicator& comm, F&& f) {
  try {
    nb::gil_scoped_release r;
    f();
  } catch (...) {
    // CommunicatorRaised, or any error after the communicator raised: the
    // communicator's exception is the one to report.
    py_comm(comm).reraise_pending();
    throw;
  }
}

using Comm = dist::Communicator;

#if defined(SMAX_DIST_SOFTMAX)
using DistFwd = void (*)(Comm&, const smax::TensorView&, const smax::TensorView&,
                         const smax::SoftmaxOptions&);
using DistBwd = void (*)(Comm&, const smax::TensorView&, const smax::TensorView&,
                         const smax::TensorView&, const smax::SoftmaxOptions&);

template <DistFwd F>
void def_dist_fwd(nb::module_& m, const char* name) {
  m.def(
      name,
      [name](Comm& comm, const In& x, const Out& out, const Co& co) {
        const Common c = common(name, co);
        const auto xv = flt(x, name, "x");
        const auto ov = flto(out, name, "out");
        run(comm, [&] { F(comm, xv, ov, c.o); });
      },
      nb::arg("comm"), nb::arg("x"), nb::arg("out"), nb::arg("co"));
}

template <DistBwd F>
void def_dist_bwd(nb::module_& m, const char* name) {
  m.def(
      name,
      [name](Comm& comm, const In& y, const In& dy, const Out& out, const Co& co) {
        const Common c = common(name, co);
        const auto yv = flt(y, name, "y");
        const auto dyv = flt(dy, name, "dy");
        const auto ov = flto(out, name, "out");
        run(comm, [&] { F(comm, yv, dyv, ov, c.o); });
      },
      nb::arg("comm"), nb::arg("y"), nb::arg("dy"), nb::arg("out"), nb::arg("co"));
}
#endif

#if defined(SMAX_DIST_LINEAR_CROSS_ENTROPY)
struct LceViews {
  smax::TensorView h, w, t;
  std::optional<smax::TensorView> b;
};
LceViews lce_views(const char* op, const In& hidden, const In& weight, const In& target,
                   const OptIn& bias) {
  return {flt(hidden, op, "hidden"), flt(weight, op, "weight"), target_view(target, op, false),
          opt_flt(bias, op, "bias")};
}
#endif

}  // namespace

void def_distributed(nb::module_& parent) {
  nb::module_ m = parent.def_submodule(
      "_distributed", "The vocabulary-parallel ops (smax/distributed.h); use smax.distributed.");

  nb::class_<dist::Communicator, PyCommunicator>(
      m, "Communicator",
      "Base class of the collectives smax's vocabulary-parallel ops run on: define "
      "rank(), size(), allgather(send, recv) and alltoall(send, recv) (numpy uint8 arrays, "
      "valid during the call only).")
      .def(nb::init<>());

  nb::list groups;
  m.def(
      "shard_layout",
      [](Comm& comm, int64_t local_classes) {
        dist::ShardLayout l;
        run(comm, [&] { l = dist::shard_layout(comm, local_classes); });
        return std::make_tuple(l.offset, l.classes, l.vocab);
      },
      nb::arg("comm"), nb::arg("local_classes"));

#if defined(SMAX_DIST_SOFTMAX)
  groups.append("softmax");
  def_dist_fwd<&dist::softmax>(m, "softmax");
  def_dist_fwd<&dist::log_softmax>(m, "log_softmax");
  def_dist_fwd<&dist::logsumexp>(m, "logsumexp");
  def_dist_bwd<&dist::softmax_backward>(m, "softmax_backward");
  def_dist_bwd<&dist::log_softmax_backward>(m, "log_softmax_backward");
#endif

#if defined(SMAX_DIST_CROSS_ENTROPY)
  groups.append("cross_entropy");
  m.def(
      "cross_entropy",
      [](Comm& comm, const In& x, const In& target, const Out& out, double label_smoothing,
         double lse_square_scale, double softcap, const OptOut& z_loss, const OptOut& lse,
         const OptOut& entropy, const OptOut& target_logprob, const OptOut& accuracy,
         const Lo& lo, const Co& co, const OptOut& grad) {
        const char* op = "cross_entropy";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        smax::CrossEntropyOptions ce = ce_params(label_smoothing, lse_square_scale, softcap, l.l);
        ce_extras(ce, op, z_loss, lse, entropy, target_logprob, accuracy);
        ce.grad = opt_flto(grad, op, "grad");
        const auto xv = flt(x, op, "input");
        const auto tv = target_view(target, op, true);
        const auto ov = flto(out, op, "out");
        run(comm, [&] { dist::cross_entropy(comm, xv, tv, ov, ce, c.o); });
      },
      nb::arg("comm"), nb::arg("x"), nb::arg("target"), nb::arg("out"),
      nb::arg("label_smoothing"), nb::arg("lse_square_scale"), nb::arg("softcap"),
      nb::arg("z_loss").none(), nb::arg("lse").none(), nb::arg("entropy").none(),
      nb::arg("target_logprob").none(), nb::arg("accuracy").none(), nb::arg("lo"),
      nb::arg("co"), nb::arg("grad").none() = nb::none());
  m.def(
      "cross_entropy_backward",
      [](Comm& comm, const In& x, const In& target, const In& dloss, const Out& out,
         double label_smoothing, double lse_square_scale, double softcap, const OptIn& lse,
         const Lo& lo, const Co& co) {
        const char* op = "cross_entropy_backward";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        smax::CrossEntropyOptions ce = ce_params(label_smoothing, lse_square_scale, softcap, l.l);
        ce.lse = opt_flt(lse, op, "lse");
        const auto xv = flt(x, op, "x");
        const auto tv = target_view(target, op, true);
        const auto dv = flt(dloss, op, "dloss");
        const auto ov = flto(out, op, "out");
        run(comm, [&] { dist::cross_entropy_backward(comm, xv, tv, dv, ov, ce, c.o); });
      },
      nb::arg("comm"), nb::arg("x"), nb::arg("target"), nb::arg("dloss"), nb::arg("out"),
      nb::arg("label_smoothing"), nb::arg("lse_square_scale"), nb::arg("softcap"),
      nb::arg("lse").none(), nb::arg("lo"), nb::arg("co"));
#endif

#if defined(SMAX_DIST_LINEAR_CROSS_ENTROPY)
  groups.append("linear_cross_entropy");
  m.def(
      "linear_cross_entropy",
      [](Comm& comm, const In& hidden, const In& weight, const In& target, const OptIn& bias,
         const Out& out, double label_smoothing, double lse_square_scale, double softcap,
         const OptOut& z_loss, const OptOut& lse, const OptOut& entropy,
         const OptOut& target_logprob, const OptOut& accuracy, int64_t token_chunk,
         int64_t vocab_chunk, const Lo& lo, const Co& co) {
        const char* op = "linear_cross_entropy";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        smax::CrossEntropyOptions ce = ce_params(label_smoothing, lse_square_scale, softcap, l.l);
        ce_extras(ce, op, z_loss, lse, entropy, target_logprob, accuracy);
        const smax::LinearCrossEntropyOptions lce = lce_params(token_chunk, vocab_chunk);
        const LceViews in = lce_views(op, hidden, weight, target, bias);
        const auto ov = flto(out, op, "out");
        run(comm, [&] {
          dist::linear_cross_entropy(comm, in.h, in.w, in.t, in.b, ov, ce, lce, c.o);
        });
      },
      nb::arg("comm"), nb::arg("hidden"), nb::arg("weight"), nb::arg("target"),
      nb::arg("bias").none(), nb::arg("out"), nb::arg("label_smoothing"),
      nb::arg("lse_square_scale"), nb::arg("softcap"), nb::arg("z_loss").none(),
      nb::arg("lse").none(), nb::arg("entropy").none(), nb::arg("target_logprob").none(),
      nb::arg("accuracy").none(), nb::arg("token_chunk"), nb::arg("vocab_chunk"), nb::arg("lo"),
      nb::arg("co"));
  m.def(
      "linear_cross_entropy_backward",
      [](Comm& comm, const In& hidden, const In& weight, const In& target, const OptIn& bias,
         const In& dloss, const Out& dhidden, const Out& dweight, const OptOut& dbias,
         double label_smoothing, double lse_square_scale, double softcap, const OptIn& lse,
         int64_t token_chunk, int64_t vocab_chunk, const Lo& lo, const Co& co) {
        const char* op = "linear_cross_entropy_backward";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        smax::CrossEntropyOptions ce = ce_params(label_smoothing, lse_square_scale, softcap, l.l);
        ce.lse = opt_flt(lse, op, "lse");
        const smax::LinearCrossEntropyOptions lce = lce_params(token_chunk, vocab_chunk);
        const LceViews in = lce_views(op, hidden, weight, target, bias);
        const auto dv = flt(dloss, op, "dloss");
        const auto dhv = flto(dhidden, op, "dhidden");
        const auto dwv = flto(dweight, op, "dweight");
        const auto dbv = opt_flto(dbias, op, "dbias");
        run(comm, [&] {
          dist::linear_cross_entropy_backward(comm, in.h, in.w, in.t, in.b, dv, dhv, dwv, dbv, ce,
                                              lce, c.o);
        });
      },
      nb::arg("comm"), nb::arg("hidden"), nb::arg("weight"), nb::arg("target"),
      nb::arg("bias").none(), nb::arg("dloss"), nb::arg("dhidden"), nb::arg("dweight"),
      nb::arg("dbias").none(), nb::arg("label_smoothing"), nb::arg("lse_square_scale"),
      nb::arg("softcap"), nb::arg("lse").none(), nb::arg("token_chunk"),
      nb::arg("vocab_chunk"), nb::arg("lo"), nb::arg("co"));
#endif

#if defined(SMAX_DIST_SAMPLING)
  groups.append("sampling");
  m.def(
      "softmax_topk",
      [](Comm& comm, const In& x, const Out& probs, const Out& indices, int64_t k,
         bool renormalize, const Co& co) {
        const char* op = "softmax_topk";
        const Common c = common(op, co);
        smax::SoftmaxTopkOptions p;
        p.k = k;
        p.renormalize = renormalize;
        const auto xv = flt(x, op, "x");
        const auto pv = flto(probs, op, "probs");
        const auto iv = i64o(indices, op, "indices");
        run(comm, [&] { dist::softmax_topk(comm, xv, pv, iv, p, c.o); });
      },
      nb::arg("comm"), nb::arg("x"), nb::arg("probs"), nb::arg("indices"), nb::arg("k"),
      nb::arg("renormalize"), nb::arg("co"));
  m.def(
      "sample",
      [](Comm& comm, const In& x, const Out& indices, double temperature, int64_t top_k,
         double top_p, double min_p, int64_t min_tokens_to_keep, const std::string& top_k_ties,
         nb::handle seed, const Co& co) {
        const char* op = "sample";
        const Common c = common(op, co);
        smax::SampleOptions p =
            sample_params(op, temperature, top_k, top_p, min_p, min_tokens_to_keep, top_k_ties);
        p.seed = seed_of(op, seed);
        const auto xv = flt(x, op, "logits");
        const auto iv = i64o(indices, op, "indices");
        run(comm, [&] { dist::sample(comm, xv, iv, p, c.o); });
      },
      nb::arg("comm"), nb::arg("x"), nb::arg("indices"), nb::arg("temperature"),
      nb::arg("top_k"), nb::arg("top_p"), nb::arg("min_p"), nb::arg("min_tokens_to_keep"),
      nb::arg("top_k_ties"), nb::arg("seed"), nb::arg("co"));
#endif

  m.attr("groups") = groups;
}

}  // namespace smax_py

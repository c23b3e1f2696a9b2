// python/src/ext_sparse.cc: bindings of sparsemax, entmax15, entmax_bisect,
// sparse_softmax and their losses (smax/sparse.h).
// Conventions: ext_common.h.
#include "ext_common.h"

namespace smax_py __attribute__((visibility("hidden"))) {

namespace {

// sparse_softmax_loss(_backward) with the Python arguments (LossOp):
// force_target makes the SparseSoftmaxLossOptions.
void sparse_softmax_loss_f(const smax::TensorView& s, const smax::TensorView& t,
                           const smax::TensorView& d, int64_t k, bool force_target,
                           const smax::LossOptions& l, const smax::SoftmaxOptions& o) {
  smax::SparseSoftmaxLossOptions p;
  p.force_target = force_target;
  smax::sparse_softmax_loss(s, t, d, k, p, l, o);
}
void sparse_softmax_loss_b(const smax::TensorView& s, const smax::TensorView& t,
                           const smax::TensorView& g, const smax::TensorView& d, int64_t k,
                           bool force_target, const smax::LossOptions& l,
                           const smax::SoftmaxOptions& o) {
  smax::SparseSoftmaxLossOptions p;
  p.force_target = force_target;
  smax::sparse_softmax_loss_backward(s, t, g, d, k, p, l, o);
}

}  // namespace

void def_sparse(nb::module_& m) {
  def_fwd<&sparsemax_fwd>(m, "sparsemax");
  def_fwd<&entmax15_fwd>(m, "entmax15");
  def_bwd<&sparsemax_bwd>(m, "sparsemax_backward");
  def_bwd<&entmax15_bwd>(m, "entmax15_backward");
  def_bwd<&sparse_softmax_bwd>(m, "sparse_softmax_backward");
  LossOp<>::def<&sparsemax_loss_f, &sparsemax_loss_b>(m, "sparsemax_loss",
                                                       "sparsemax_loss_backward");
  LossOp<>::def<&entmax15_loss_f, &entmax15_loss_b>(m, "entmax15_loss",
                                                     "entmax15_loss_backward");
  m.def(
      "entmax_bisect",
      [](const In& x, const Out& out, double alpha, const OptIn& alpha_t, int n_iter,
         bool ensure_sum_one, const Co& co) {
        const char* op = "entmax_bisect";
        const Common c = common(op, co);
        const auto p = bisect_params(op, alpha, alpha_t, n_iter, ensure_sum_one);
        const auto xv = flt(x, op, "x");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::entmax_bisect(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("alpha"), nb::arg("alpha_t").none(),
      nb::arg("n_iter"), nb::arg("ensure_sum_one"), nb::arg("co"));
  m.def(
      "entmax_bisect_backward",
      [](const In& y, const In& dy, const Out& out, const OptOut& dalpha, double alpha,
         const OptIn& alpha_t, int n_iter, bool ensure_sum_one, const Co& co) {
        const char* op = "entmax_bisect_backward";
        const Common c = common(op, co);
        const auto p = bisect_params(op, alpha, alpha_t, n_iter, ensure_sum_one);
        const auto yv = flt(y, op, "y");
        const auto dyv = flt(dy, op, "dy");
        const auto ov = flto(out, op, "out");
        const auto da = opt_flto(dalpha, op, "dalpha");
        nb::gil_scoped_release r;
        smax::entmax_bisect_backward(yv, dyv, ov, da, p, c.o);
      },
      nb::arg("y"), nb::arg("dy"), nb::arg("out"), nb::arg("dalpha").none(), nb::arg("alpha"),
      nb::arg("alpha_t").none(), nb::arg("n_iter"), nb::arg("ensure_sum_one"), nb::arg("co"));
  m.def(
      "entmax_bisect_loss",
      [](const In& x, const In& target, const Out& out, double alpha, const OptIn& alpha_t,
         int n_iter, const Lo& lo, const Co& co) {
        const char* op = "entmax_bisect_loss";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        const auto p = bisect_params(op, alpha, alpha_t, n_iter, true);
        const auto xv = flt(x, op, "x");
        const auto tv = target_view(target, op, false);
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::entmax_bisect_loss(xv, tv, ov, p, l.l, c.o);
      },
      nb::arg("x"), nb::arg("target"), nb::arg("out"), nb::arg("alpha"),
      nb::arg("alpha_t").none(), nb::arg("n_iter"), nb::arg("lo"), nb::arg("co"));
  m.def(
      "entmax_bisect_loss_backward",
      [](const In& x, const In& target, const In& dloss, const Out& out, double alpha,
         const OptIn& alpha_t, int n_iter, const Lo& lo, const Co& co) {
        const char* op = "entmax_bisect_loss_backward";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        const auto p = bisect_params(op, alpha, alpha_t, n_iter, true);
        const auto xv = flt(x, op, "x");
        const auto tv = target_view(target, op, false);
        const auto dv = flt(dloss, op, "dloss");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::entmax_bisect_loss_backward(xv, tv, dv, ov, p, l.l, c.o);
      },
      nb::arg("x"), nb::arg("target"), nb::arg("dloss"), nb::arg("out"), nb::arg("alpha"),
      nb::arg("alpha_t").none(), nb::arg("n_iter"), nb::arg("lo"), nb::arg("co"));
  m.def(
      "sparse_softmax",
      [](const In& x, const Out& out, int64_t k, const Co& co) {
        const char* op = "sparse_softmax";
        const Common c = common(op, co);
        const auto xv = flt(x, op, "x");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::sparse_softmax(xv, ov, k, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("k"), nb::arg("co"));
  LossOp<int64_t, bool>::def<&sparse_softmax_loss_f, &sparse_softmax_loss_b>(
      m, "sparse_softmax_loss", "sparse_softmax_loss_backward", nb::arg("k"),
      nb::arg("force_target"));
}

}  // namespace smax_py

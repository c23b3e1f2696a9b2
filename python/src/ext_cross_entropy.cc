// python/src/ext_cross_entropy.cc: bindings of cross_entropy, z_loss, spherical_z_loss
// (smax/cross_entropy.h) and linear_cross_entropy (smax/linear_cross_entropy.h).
// Conventions: ext_common.h.
#include "ext_common.h"

namespace smax_py __attribute__((visibility("hidden"))) {

namespace {

// spherical_z_loss(_backward) with the Python arguments' types (LossOp).
void spherical_z_loss_f(const smax::TensorView& s, const smax::TensorView& t,
                        const smax::TensorView& d, double a, double b, const smax::LossOptions& l,
                        const smax::SoftmaxOptions& o) {
  smax::spherical_z_loss(s, t, d, static_cast<float>(a), static_cast<float>(b), l, o);
}
void spherical_z_loss_b(const smax::TensorView& s, const smax::TensorView& t,
                        const smax::TensorView& g, const smax::TensorView& d, double a, double b,
                        const smax::LossOptions& l, const smax::SoftmaxOptions& o) {
  smax::spherical_z_loss_backward(s, t, g, d, static_cast<float>(a), static_cast<float>(b), l,
                                  o);
}

/// The views of linear_cross_entropy(_backward)'s inputs: hidden [N, D],
/// weight [V, D], target [N] (int64), bias [V] or none. hidden, weight and
/// bias (like dloss, lse and every output) may each be any floating dtype.
struct LceInputs {
  smax::TensorView h, w, t;
  std::optional<smax::TensorView> b;
};

LceInputs lce_inputs(const char* op, const In& hidden, const In& weight, const In& target,
                     const OptIn& bias) {
  return {flt(hidden, op, "hidden"), flt(weight, op, "weight"), target_view(target, op, false),
          opt_flt(bias, op, "bias")};
}

}  // namespace

void def_cross_entropy(nb::module_& m) {
  m.def(
      "cross_entropy",
      [](const In& x, const In& target, const Out& out, double label_smoothing,
         double lse_square_scale, double softcap, const OptOut& z_loss, const OptOut& lse,
         const OptOut& entropy, const OptOut& target_logprob, const OptOut& accuracy,
         const Lo& lo, const Co& co, const OptOut& grad) {
        const char* op = "cross_entropy";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        smax::CrossEntropyOptions ce = ce_params(label_smoothing, lse_square_scale, softcap, l.l);
        ce_extras(ce, op, z_loss, lse, entropy, target_logprob, accuracy);
        ce.grad = opt_flto(grad, op, "grad");  // the fused unit gradient (may be x)
        const auto xv = flt(x, op, "input");
        const auto tv = target_view(target, op, true);
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::cross_entropy(xv, tv, ov, ce, c.o);
      },
      nb::arg("x"), nb::arg("target"), nb::arg("out"), nb::arg("label_smoothing"),
      nb::arg("lse_square_scale"), nb::arg("softcap"), nb::arg("z_loss").none(),
      nb::arg("lse").none(), nb::arg("entropy").none(), nb::arg("target_logprob").none(),
      nb::arg("accuracy").none(), nb::arg("lo"), nb::arg("co"),
      nb::arg("grad").none() = nb::none());
  m.def(
      "cross_entropy_backward",
      [](const In& x, const In& target, const In& dloss, const Out& out, double label_smoothing,
         double lse_square_scale, double softcap, const OptIn& lse, const Lo& lo,
         const Co& co) {
        const char* op = "cross_entropy_backward";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        smax::CrossEntropyOptions ce = ce_params(label_smoothing, lse_square_scale, softcap, l.l);
        ce.lse = opt_flt(lse, op, "lse");
        const auto xv = flt(x, op, "x");
        const auto tv = target_view(target, op, true);
        const auto dv = flt(dloss, op, "dloss");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::cross_entropy_backward(xv, tv, dv, ov, ce, c.o);
      },
      nb::arg("x"), nb::arg("target"), nb::arg("dloss"), nb::arg("out"),
      nb::arg("label_smoothing"), nb::arg("lse_square_scale"), nb::arg("softcap"),
      nb::arg("lse").none(), nb::arg("lo"), nb::arg("co"));
  m.def(
      "z_loss",
      [](const In& x, const OptIn& target, const Out& out, double coefficient, const Lo& lo,
         const Co& co) {
        const char* op = "z_loss";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        const auto xv = flt(x, op, "x");
        const auto ov = flto(out, op, "out");
        if (target) {
          const auto tv = target_view(*target, op, false);
          nb::gil_scoped_release r;
          smax::z_loss(xv, tv, ov, static_cast<float>(coefficient), l.l, c.o);
        } else {
          nb::gil_scoped_release r;
          smax::z_loss(xv, ov, static_cast<float>(coefficient), l.l, c.o);
        }
      },
      nb::arg("x"), nb::arg("target").none(), nb::arg("out"), nb::arg("coefficient"),
      nb::arg("lo"), nb::arg("co"));
  m.def(
      "z_loss_backward",
      [](const In& x, const OptIn& target, const In& dloss, const Out& out, double coefficient,
         const Lo& lo, const Co& co) {
        const char* op = "z_loss_backward";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        const auto xv = flt(x, op, "x");
        const auto dv = flt(dloss, op, "dloss");
        const auto ov = flto(out, op, "out");
        if (target) {
          const auto tv = target_view(*target, op, false);
          nb::gil_scoped_release r;
          smax::z_loss_backward(xv, tv, dv, ov, static_cast<float>(coefficient), l.l, c.o);
        } else {
          nb::gil_scoped_release r;
          smax::z_loss_backward(xv, dv, ov, static_cast<float>(coefficient), l.l, c.o);
        }
      },
      nb::arg("x"), nb::arg("target").none(), nb::arg("dloss"), nb::arg("out"),
      nb::arg("coefficient"), nb::arg("lo"), nb::arg("co"));
  LossOp<double, double>::def<&spherical_z_loss_f, &spherical_z_loss_b>(
      m, "spherical_z_loss", "spherical_z_loss_backward", nb::arg("a"), nb::arg("b"));

  // ---- fused linear + cross-entropy (smax/linear_cross_entropy.h) ----------------------
  m.def(
      "linear_cross_entropy",
      [](const In& hidden, const In& weight, const In& target, const OptIn& bias,
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
        const LceInputs in = lce_inputs(op, hidden, weight, target, bias);
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::linear_cross_entropy(in.h, in.w, in.t, in.b, ov, ce, lce, c.o);
      },
      nb::arg("hidden"), nb::arg("weight"), nb::arg("target"), nb::arg("bias").none(),
      nb::arg("out"), nb::arg("label_smoothing"), nb::arg("lse_square_scale"),
      nb::arg("softcap"), nb::arg("z_loss").none(), nb::arg("lse").none(),
      nb::arg("entropy").none(), nb::arg("target_logprob").none(), nb::arg("accuracy").none(),
      nb::arg("token_chunk"), nb::arg("vocab_chunk"), nb::arg("lo"), nb::arg("co"));
  m.def(
      "linear_cross_entropy_backward",
      [](const In& hidden, const In& weight, const In& target, const OptIn& bias,
         const In& dloss, const Out& dhidden, const Out& dweight, const OptOut& dbias,
         double label_smoothing, double lse_square_scale, double softcap, const OptIn& lse,
         int64_t token_chunk, int64_t vocab_chunk, const Lo& lo, const Co& co) {
        const char* op = "linear_cross_entropy_backward";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        smax::CrossEntropyOptions ce = ce_params(label_smoothing, lse_square_scale, softcap, l.l);
        ce.lse = opt_flt(lse, op, "lse");
        const smax::LinearCrossEntropyOptions lce = lce_params(token_chunk, vocab_chunk);
        const LceInputs in = lce_inputs(op, hidden, weight, target, bias);
        const auto dv = flt(dloss, op, "dloss");
        const auto dhv = flto(dhidden, op, "dhidden");
        const auto dwv = flto(dweight, op, "dweight");
        const auto dbv = opt_flto(dbias, op, "dbias");
        nb::gil_scoped_release r;
        smax::linear_cross_entropy_backward(in.h, in.w, in.t, in.b, dv, dhv, dwv, dbv, ce, lce,
                                            c.o);
      },
      nb::arg("hidden"), nb::arg("weight"), nb::arg("target"), nb::arg("bias").none(),
      nb::arg("dloss"), nb::arg("dhidden"), nb::arg("dweight"), nb::arg("dbias").none(),
      nb::arg("label_smoothing"), nb::arg("lse_square_scale"), nb::arg("softcap"),
      nb::arg("lse").none(), nb::arg("token_chunk"), nb::arg("vocab_chunk"), nb::arg("lo"),
      nb::arg("co"));

}

}  // namespace smax_py

// python/src/ext_cross_entropy.cc: bindings of cross_entropy, z_loss, spherical_z_loss
// (smax/cross_entropy.h) and linear_cross_entropy (smax/linear_cross_entropy.h).
// Conventions: ext_common.h.
#include "ext_common.h"

namespace smax_py __attribute__((visibility("hidden"))) {

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
        ce.z_loss = opt_f32o(z_loss, op, "z_loss");
        ce.lse = opt_f32o(lse, op, "lse");
        ce.entropy = opt_f32o(entropy, op, "entropy");
        ce.target_logprob = opt_f32o(target_logprob, op, "target_logprob");
        ce.accuracy = opt_f32o(accuracy, op, "accuracy");
        ce.grad = opt_f32o(grad, op, "grad");  // the fused unit gradient (may be x)
        const auto xv = f32(x, op, "input");
        const auto tv = target_view(target, op, true);
        const auto ov = f32o(out, op, "out");
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
        ce.lse = opt_f32(lse, op, "lse");
        const auto xv = f32(x, op, "x");
        const auto tv = target_view(target, op, true);
        const auto dv = f32(dloss, op, "dloss");
        const auto ov = f32o(out, op, "out");
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
        const auto xv = f32(x, op, "x");
        const auto ov = f32o(out, op, "out");
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
        const auto xv = f32(x, op, "x");
        const auto dv = f32(dloss, op, "dloss");
        const auto ov = f32o(out, op, "out");
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
  m.def(
      "spherical_z_loss",
      [](const In& x, const In& target, const Out& out, double a, double b, const Lo& lo,
         const Co& co) {
        const char* op = "spherical_z_loss";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        const auto xv = f32(x, op, "x");
        const auto tv = target_view(target, op, false);
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::spherical_z_loss(xv, tv, ov, static_cast<float>(a), static_cast<float>(b), l.l,
                               c.o);
      },
      nb::arg("x"), nb::arg("target"), nb::arg("out"), nb::arg("a"), nb::arg("b"),
      nb::arg("lo"), nb::arg("co"));
  m.def(
      "spherical_z_loss_backward",
      [](const In& x, const In& target, const In& dloss, const Out& out, double a, double b,
         const Lo& lo, const Co& co) {
        const char* op = "spherical_z_loss_backward";
        const Common c = common(op, co);
        const Loss l = loss(op, lo);
        const auto xv = f32(x, op, "x");
        const auto tv = target_view(target, op, false);
        const auto dv = f32(dloss, op, "dloss");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::spherical_z_loss_backward(xv, tv, dv, ov, static_cast<float>(a),
                                        static_cast<float>(b), l.l, c.o);
      },
      nb::arg("x"), nb::arg("target"), nb::arg("dloss"), nb::arg("out"), nb::arg("a"),
      nb::arg("b"), nb::arg("lo"), nb::arg("co"));

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
        ce.z_loss = opt_f32o(z_loss, op, "z_loss");
        ce.lse = opt_f32o(lse, op, "lse");
        ce.entropy = opt_f32o(entropy, op, "entropy");
        ce.target_logprob = opt_f32o(target_logprob, op, "target_logprob");
        ce.accuracy = opt_f32o(accuracy, op, "accuracy");
        smax::LinearCrossEntropyOptions lce;
        lce.token_chunk = token_chunk;
        lce.vocab_chunk = vocab_chunk;
        const auto hv = f32(hidden, op, "hidden");
        const auto wv = f32(weight, op, "weight");
        const auto tv = target_view(target, op, false);
        const auto bv = opt_f32(bias, op, "bias");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::linear_cross_entropy(hv, wv, tv, bv, ov, ce, lce, c.o);
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
        ce.lse = opt_f32(lse, op, "lse");
        smax::LinearCrossEntropyOptions lce;
        lce.token_chunk = token_chunk;
        lce.vocab_chunk = vocab_chunk;
        const auto hv = f32(hidden, op, "hidden");
        const auto wv = f32(weight, op, "weight");
        const auto tv = target_view(target, op, false);
        const auto bv = opt_f32(bias, op, "bias");
        const auto dv = f32(dloss, op, "dloss");
        const auto dhv = f32o(dhidden, op, "dhidden");
        const auto dwv = f32o(dweight, op, "dweight");
        const auto dbv = opt_f32o(dbias, op, "dbias");
        nb::gil_scoped_release r;
        smax::linear_cross_entropy_backward(hv, wv, tv, bv, dv, dhv, dwv, dbv, ce, lce, c.o);
      },
      nb::arg("hidden"), nb::arg("weight"), nb::arg("target"), nb::arg("bias").none(),
      nb::arg("dloss"), nb::arg("dhidden"), nb::arg("dweight"), nb::arg("dbias").none(),
      nb::arg("label_smoothing"), nb::arg("lse_square_scale"), nb::arg("softcap"),
      nb::arg("lse").none(), nb::arg("token_chunk"), nb::arg("vocab_chunk"), nb::arg("lo"),
      nb::arg("co"));

}

}  // namespace smax_py

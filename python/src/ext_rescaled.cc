// python/src/ext_rescaled.cc: bindings of ssmax, softpick, clipped_softmax, stablemax (+ its
// cross-entropy) and softmax_collapse_fraction (smax/rescaled.h).
// Conventions: ext_common.h.
#include "ext_common.h"

namespace smax_py __attribute__((visibility("hidden"))) {

namespace {

smax::SoftpickOptions softpick_params(double eps) {
  smax::SoftpickOptions p;
  p.eps = static_cast<float>(eps);
  return p;
}

smax::ClippedSoftmaxOptions clipped_params(double gamma, double zeta) {
  smax::ClippedSoftmaxOptions p;
  p.gamma = static_cast<float>(gamma);
  p.zeta = static_cast<float>(zeta);
  return p;
}

smax::SsmaxOptions ssmax_params(const char* op, double s, const OptIn& s_t, int64_t fixed_n) {
  smax::SsmaxOptions p;
  p.s = static_cast<float>(s);
  p.s_rows = opt_flt(s_t, op, "s");
  p.fixed_n = fixed_n;
  return p;
}

}  // namespace

void def_rescaled(nb::module_& m) {
  def_fwd<&stablemax_fwd>(m, "stablemax");
  def_bwd<&stablemax_bwd>(m, "stablemax_backward", "x");
  LossOp<>::def<&stablemax_ce_f, &stablemax_ce_b>(m, "stablemax_cross_entropy",
                                                   "stablemax_cross_entropy_backward");
  m.def(
      "ssmax",
      [](const In& x, const Out& out, double s, const OptIn& s_t, int64_t fixed_n,
         const Co& co) {
        const char* op = "ssmax";
        const Common c = common(op, co);
        const smax::SsmaxOptions p = ssmax_params(op, s, s_t, fixed_n);
        const auto xv = flt(x, op, "x");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::ssmax(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("s"), nb::arg("s_t").none(), nb::arg("fixed_n"),
      nb::arg("co"));
  m.def(
      "ssmax_backward",
      [](const In& x, const In& y, const In& dy, const Out& out, const OptOut& ds, double s,
         const OptIn& s_t, int64_t fixed_n, const Co& co) {
        const char* op = "ssmax_backward";
        const Common c = common(op, co);
        const smax::SsmaxOptions p = ssmax_params(op, s, s_t, fixed_n);
        const auto xv = flt(x, op, "x");
        const auto yv = flt(y, op, "y");
        const auto dyv = flt(dy, op, "dy");
        const auto ov = flto(out, op, "out");
        const auto dsv = opt_flto(ds, op, "ds");
        nb::gil_scoped_release r;
        smax::ssmax_backward(xv, yv, dyv, ov, p, c.o, dsv ? &*dsv : nullptr);
      },
      nb::arg("x"), nb::arg("y"), nb::arg("dy"), nb::arg("out"), nb::arg("ds").none(),
      nb::arg("s"), nb::arg("s_t").none(), nb::arg("fixed_n"), nb::arg("co"));
  ParamOp<smax::SoftpickOptions, double>::def<&smax::softpick, &smax::softpick_backward,
                                              &softpick_params>(m, "softpick",
                                                                "softpick_backward", "x",
                                                                nb::arg("eps"));
  ParamOp<smax::ClippedSoftmaxOptions, double, double>::def<
      &smax::clipped_softmax, &smax::clipped_softmax_backward, &clipped_params>(
      m, "clipped_softmax", "clipped_softmax_backward", "x", nb::arg("gamma"), nb::arg("zeta"));
  m.def(
      "softmax_collapse_fraction",
      [](const In& x, const std::string& precision, const OptOut& flags, const Co& co) {
        const char* op = "softmax_collapse_fraction";
        const Common c = common(op, co);
        const smax::Precision pr = smax::parse_precision(precision);
        const auto xv = flt(x, op, "x");
        const auto fv = opt_flto(flags, op, "flags");
        nb::gil_scoped_release r;
        return smax::softmax_collapse_fraction(xv, pr, c.o, fv ? &*fv : nullptr);
      },
      nb::arg("x"), nb::arg("precision"), nb::arg("flags").none(), nb::arg("co"));

}

}  // namespace smax_py

// python/src/ext_reweight.cc: bindings of self_adjust_softmax, sigmoid / softplus normalisers, power_softmax,
// probability_temperature, logit_standardization (smax/reweight.h).
// Conventions: ext_common.h.
#include "ext_common.h"

namespace smax_py __attribute__((visibility("hidden"))) {

void def_reweight(nb::module_& m) {
  m.def(
      "self_adjust_softmax",
      [](const In& x, const Out& out, bool normalized, bool grad_through_bounds, const Co& co) {
        const char* op = "self_adjust_softmax";
        const Common c = common(op, co);
        smax::SelfAdjustOptions p;
        p.normalized = normalized;
        p.grad_through_bounds = grad_through_bounds;
        const auto xv = f32(x, op, "x");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::self_adjust_softmax(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("normalized"), nb::arg("grad_through_bounds"),
      nb::arg("co"));
  m.def(
      "self_adjust_softmax_backward",
      [](const In& x, const In& dy, const Out& out, bool normalized, bool grad_through_bounds,
         const Co& co) {
        const char* op = "self_adjust_softmax_backward";
        const Common c = common(op, co);
        smax::SelfAdjustOptions p;
        p.normalized = normalized;
        p.grad_through_bounds = grad_through_bounds;
        const auto xv = f32(x, op, "x");
        const auto dyv = f32(dy, op, "dy");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::self_adjust_softmax_backward(xv, dyv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("dy"), nb::arg("out"), nb::arg("normalized"),
      nb::arg("grad_through_bounds"), nb::arg("co"));
  m.def(
      "sigmoid_normalizer",
      [](const In& x, const Out& out, std::optional<double> bias, int64_t n_fixed,
         bool count_visible, const Co& co) {
        const char* op = "sigmoid_normalizer";
        const Common c = common(op, co);
        smax::SigmoidNormalizerOptions p;
        if (bias) p.bias = static_cast<float>(*bias);
        p.n_fixed = n_fixed;
        p.count_visible = count_visible;
        const auto xv = f32(x, op, "x");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::sigmoid_normalizer(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("bias").none(), nb::arg("n_fixed"),
      nb::arg("count_visible"), nb::arg("co"));
  def_bwd<&sigmoid_normalizer_bwd>(m, "sigmoid_normalizer_backward");
  m.def(
      "softplus_normalizer",
      [](const In& x, const Out& out, std::optional<double> lambd, int64_t head_dim,
         double power, const Co& co) {
        const char* op = "softplus_normalizer";
        const Common c = common(op, co);
        smax::SoftplusNormalizerOptions p;
        if (lambd) p.lambda = static_cast<float>(*lambd);
        p.head_dim = head_dim;
        p.power = static_cast<float>(power);
        const auto xv = f32(x, op, "x");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::softplus_normalizer(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("lambd").none(), nb::arg("head_dim"),
      nb::arg("power"), nb::arg("co"));
  m.def(
      "softplus_normalizer_backward",
      [](const In& x, const In& dy, const Out& out, std::optional<double> lambd,
         int64_t head_dim, double power, const Co& co) {
        const char* op = "softplus_normalizer_backward";
        const Common c = common(op, co);
        smax::SoftplusNormalizerOptions p;
        if (lambd) p.lambda = static_cast<float>(*lambd);
        p.head_dim = head_dim;
        p.power = static_cast<float>(power);
        const auto xv = f32(x, op, "x");
        const auto dyv = f32(dy, op, "dy");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::softplus_normalizer_backward(xv, dyv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("dy"), nb::arg("out"), nb::arg("lambd").none(),
      nb::arg("head_dim"), nb::arg("power"), nb::arg("co"));
  m.def(
      "power_softmax",
      [](const In& x, const Out& out, int p, const Co& co) {
        const char* op = "power_softmax";
        const Common c = common(op, co);
        const auto xv = f32(x, op, "x");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::power_softmax(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("p"), nb::arg("co"));
  m.def(
      "power_softmax_backward",
      [](const In& x, const In& dy, const Out& out, int p, const Co& co) {
        const char* op = "power_softmax_backward";
        const Common c = common(op, co);
        const auto xv = f32(x, op, "x");
        const auto dyv = f32(dy, op, "dy");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::power_softmax_backward(xv, dyv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("dy"), nb::arg("out"), nb::arg("p"), nb::arg("co"));
  m.def(
      "probability_temperature",
      [](const In& p, const Out& out, double T, const Co& co) {
        const char* op = "probability_temperature";
        const Common c = common(op, co);
        const auto pv = f32(p, op, "p");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::probability_temperature(pv, ov, static_cast<float>(T), c.o);
      },
      nb::arg("p"), nb::arg("out"), nb::arg("T"), nb::arg("co"));
  m.def(
      "probability_temperature_backward",
      [](const In& p, const In& dy, const Out& out, double T, const Co& co) {
        const char* op = "probability_temperature_backward";
        const Common c = common(op, co);
        const auto pv = f32(p, op, "p");
        const auto dyv = f32(dy, op, "dy");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::probability_temperature_backward(pv, dyv, ov, static_cast<float>(T), c.o);
      },
      nb::arg("p"), nb::arg("dy"), nb::arg("out"), nb::arg("T"), nb::arg("co"));
  m.def(
      "logit_standardization",
      [](const In& x, const Out& out, double temperature, double eps, bool unbiased,
         const Co& co) {
        const char* op = "logit_standardization";
        const Common c = common(op, co);
        smax::LogitStandardizationOptions p;
        p.temperature = static_cast<float>(temperature);
        p.eps = static_cast<float>(eps);
        p.unbiased = unbiased;
        const auto xv = f32(x, op, "x");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::logit_standardization(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("temperature"), nb::arg("eps"),
      nb::arg("unbiased"), nb::arg("co"));
  m.def(
      "logit_standardization_backward",
      [](const In& x, const In& dy, const Out& out, double temperature, double eps,
         bool unbiased, const Co& co) {
        const char* op = "logit_standardization_backward";
        const Common c = common(op, co);
        smax::LogitStandardizationOptions p;
        p.temperature = static_cast<float>(temperature);
        p.eps = static_cast<float>(eps);
        p.unbiased = unbiased;
        const auto xv = f32(x, op, "x");
        const auto dyv = f32(dy, op, "dy");
        const auto ov = f32o(out, op, "out");
        nb::gil_scoped_release r;
        smax::logit_standardization_backward(xv, dyv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("dy"), nb::arg("out"), nb::arg("temperature"), nb::arg("eps"),
      nb::arg("unbiased"), nb::arg("co"));

}

}  // namespace smax_py

// python/src/ext_reweight.cc: bindings of self_adjust_softmax, sigmoid / softplus normalisers, power_softmax,
// probability_temperature, logit_standardization (smax/reweight.h).
// Conventions: ext_common.h.
#include "ext_common.h"

namespace smax_py __attribute__((visibility("hidden"))) {

namespace {

smax::SelfAdjustOptions self_adjust_params(bool normalized, bool grad_through_bounds) {
  smax::SelfAdjustOptions p;
  p.normalized = normalized;
  p.grad_through_bounds = grad_through_bounds;
  return p;
}

smax::SoftplusNormalizerOptions softplus_params(std::optional<double> lambd, int64_t head_dim,
                                                double power) {
  smax::SoftplusNormalizerOptions p;
  if (lambd) p.lambda = static_cast<float>(*lambd);
  p.head_dim = head_dim;
  p.power = static_cast<float>(power);
  return p;
}

smax::LogitStandardizationOptions standardization_params(double temperature, double eps,
                                                         bool unbiased) {
  smax::LogitStandardizationOptions p;
  p.temperature = static_cast<float>(temperature);
  p.eps = static_cast<float>(eps);
  p.unbiased = unbiased;
  return p;
}

int power_param(int p) { return p; }
float temperature_param(double T) { return static_cast<float>(T); }

}  // namespace

void def_reweight(nb::module_& m) {
  ParamOp<smax::SelfAdjustOptions, bool, bool>::def<
      &smax::self_adjust_softmax, &smax::self_adjust_softmax_backward, &self_adjust_params>(
      m, "self_adjust_softmax", "self_adjust_softmax_backward", "x", nb::arg("normalized"),
      nb::arg("grad_through_bounds"));
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
        const auto xv = flt(x, op, "x");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::sigmoid_normalizer(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("bias").none(), nb::arg("n_fixed"),
      nb::arg("count_visible"), nb::arg("co"));
  def_bwd<&sigmoid_normalizer_bwd>(m, "sigmoid_normalizer_backward");
  ParamOp<smax::SoftplusNormalizerOptions, std::optional<double>, int64_t, double>::def<
      &smax::softplus_normalizer, &smax::softplus_normalizer_backward, &softplus_params>(
      m, "softplus_normalizer", "softplus_normalizer_backward", "x", nb::arg("lambd").none(),
      nb::arg("head_dim"), nb::arg("power"));
  ParamOp<int, int>::def<&smax::power_softmax, &smax::power_softmax_backward, &power_param>(
      m, "power_softmax", "power_softmax_backward", "x", nb::arg("p"));
  ParamOp<float, double>::def<&smax::probability_temperature,
                              &smax::probability_temperature_backward, &temperature_param>(
      m, "probability_temperature", "probability_temperature_backward", "p", nb::arg("T"));
  ParamOp<smax::LogitStandardizationOptions, double, double, bool>::def<
      &smax::logit_standardization, &smax::logit_standardization_backward,
      &standardization_params>(m, "logit_standardization", "logit_standardization_backward",
                               "x", nb::arg("temperature"), nb::arg("eps"), nb::arg("unbiased"));
}

}  // namespace smax_py

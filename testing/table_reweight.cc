// testing/table_reweight.cc: SA-Softmax, sigmoid / softplus normalisers,
// Power-Softmax, probability-domain temperature and logit standardisation in
// `smax run` (table in op_table.h). Bounds: include/smax/reweight.h.
#include <cmath>

#include "op_table.h"
#include "reference/reweight.h"
#include "smax/reweight.h"

namespace smax_cli {
namespace {

namespace ref = smax::reference;

smax::SelfAdjustOptions sa_of(const ExtCall& c) {
  smax::SelfAdjustOptions o;
  o.normalized = c.param("normalized") != 0;
  return o;
}
smax::SigmoidNormalizerOptions sig_of(const ExtCall&) { return {}; }
smax::SoftplusNormalizerOptions sp_of(const ExtCall& c) {
  smax::SoftplusNormalizerOptions o;
  o.head_dim = static_cast<int64_t>(c.param("head_dim"));
  o.power = static_cast<float>(c.param("power"));
  return o;
}
smax::LogitStandardizationOptions ls_of(const ExtCall& c) {
  smax::LogitStandardizationOptions o;
  o.temperature = static_cast<float>(c.param("T"));
  return o;
}
int p_of(const ExtCall& c) { return static_cast<int>(c.param("p")); }
float t_of(const ExtCall& c) { return static_cast<float>(c.param("T")); }

// The C ABI's options structs of the same parameters.
smax_self_adjust_options c_sa(const ExtCall& c) {
  auto p = c_defaults(smax_self_adjust_options_init);
  p.normalized = sa_of(c).normalized ? 1 : 0;
  return p;
}
smax_sigmoid_normalizer_options c_sig(const ExtCall&) {
  return c_defaults(smax_sigmoid_normalizer_options_init);  // the table sets no parameter
}
smax_softplus_normalizer_options c_sp(const ExtCall& c) {
  auto p = c_defaults(smax_softplus_normalizer_options_init);
  p.head_dim = sp_of(c).head_dim;
  p.power = sp_of(c).power;
  return p;
}
smax_logit_standardization_options c_ls(const ExtCall& c) {
  auto p = c_defaults(smax_logit_standardization_options_init);
  p.temperature = ls_of(c).temperature;
  return p;
}

// probability_temperature takes probabilities: feed it softmax(x).
void probs(const ExtCall& c) { smax::softmax(c.x, c.out, c.options); }

const std::vector<ExtParam> kSaParams = {
    ExtParam{"normalized", 0, "true = normalised variant", ParamType::kBool}.fuzzed({0, 1}, {})};
const std::vector<ExtParam> kSpParams = {
    ExtParam{"head_dim", 64, "d in lambda = log N / log d", ParamType::kInt}.fuzzed({64, 2, 1000, 64},
                                                                                    {1, 0, -1}),
    ExtParam{"power", 1, "re-weighting power p"}.fuzzed({1, 2, 0.5, 3, 1}, {0, -1, NAN, INFINITY})};
const std::vector<ExtParam> kPowerParams = {
    ExtParam{"p", 2, "even power", ParamType::kInt}.fuzzed({2, 4, 8, 2}, {1, 3, 0, -2})};
const std::vector<ExtParam> kTParams = {
    ExtParam{"T", 2, "temperature > 0"}.fuzzed({2, 1, 0.5, 0.1, 10, 2}, {0, -1, NAN, INFINITY})};

// The re-weighting normalisers' bound rule (src/reference/bounds_reweight.cc).
ref::BoundRule reweight_rule(ref::ReweightOp op) {
  return [op](ref::BoundRows& b) { ref::reweight_bounds(b, op); };
}

ExtOp forward_op(const char* name, const char* summary, std::vector<ExtParam> params,
                 std::function<void(const ExtCall&)> run,
                 std::function<std::vector<double>(const ExtCall&)> reference) {
  ExtOp op;
  op.name = name;
  op.summary = summary;
  op.params = std::move(params);
  op.run = std::move(run);
  op.reference = std::move(reference);
  return op;
}

ExtOp backward_op(const char* name, const char* summary, std::vector<ExtParam> params,
                  std::function<void(const ExtCall&)> forward,
                  std::function<void(const ExtCall&)> run,
                  std::function<std::vector<double>(const ExtCall&)> reference) {
  ExtOp op = forward_op(name, summary, std::move(params), std::move(run), std::move(reference));
  op.needs_dy = true;
  op.forward = std::move(forward);
  return op;
}

}  // namespace

void add_reweight_ops(std::vector<ExtOp>& ops) {
  const size_t first = ops.size();
  ops.push_back(forward_op(
      "self_adjust_softmax", "SA-Softmax x * softmax(x)", kSaParams,
      [](const ExtCall& c) { smax::self_adjust_softmax(c.x, c.out, sa_of(c), c.options); },
      [](const ExtCall& c) { return ref::self_adjust_softmax(c.x, sa_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_self_adjust_options p = c_sa(c);
    return smax_self_adjust_softmax(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kSelfAdjust);
  ops.push_back(backward_op(
      "self_adjust_softmax_backward", "VJP of SA-Softmax (from x)", kSaParams, nullptr,
      [](const ExtCall& c) { smax::self_adjust_softmax_backward(c.x, c.dy, c.out, sa_of(c), c.options); },
      [](const ExtCall& c) { return ref::self_adjust_softmax_backward(c.x, c.dy, sa_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_self_adjust_options p = c_sa(c);
    return smax_self_adjust_softmax_backward(&k.x, &k.dy, &k.out, &p, &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kSelfAdjust);
  ops.push_back(forward_op(
      "sigmoid_normalizer", "sigmoid(x - ln n)", {},
      [](const ExtCall& c) { smax::sigmoid_normalizer(c.x, c.out, sig_of(c), c.options); },
      [](const ExtCall& c) { return ref::sigmoid_normalizer(c.x, sig_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_sigmoid_normalizer_options p = c_sig(c);
    return smax_sigmoid_normalizer(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) { ref::relative_bounds(b, 2e-6); };
  ops.push_back(backward_op(
      "sigmoid_normalizer_backward", "VJP of sigmoid_normalizer (from y)", {},
      [](const ExtCall& c) { smax::sigmoid_normalizer(c.x, c.out, sig_of(c), c.options); },
      [](const ExtCall& c) { smax::sigmoid_normalizer_backward(c.y, c.dy, c.out, c.options); },
      [](const ExtCall& c) { return ref::sigmoid_normalizer_backward(c.y, c.dy, c.options); }));
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_sigmoid_normalizer_backward(&k.y, &k.dy, &k.out, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bound_rows = ref::BoundRowsFrom::kSavedY;
  ops.back().bounds = reweight_rule(ref::ReweightOp::kSigmoid);
  ops.push_back(forward_op(
      "softplus_normalizer", "LSSA softplus(lambda x) / sum", kSpParams,
      [](const ExtCall& c) { smax::softplus_normalizer(c.x, c.out, sp_of(c), c.options); },
      [](const ExtCall& c) { return ref::softplus_normalizer(c.x, sp_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_softplus_normalizer_options p = c_sp(c);
    return smax_softplus_normalizer(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kSoftplus);
  ops.push_back(backward_op(
      "softplus_normalizer_backward", "VJP of softplus_normalizer (from x)", kSpParams, nullptr,
      [](const ExtCall& c) { smax::softplus_normalizer_backward(c.x, c.dy, c.out, sp_of(c), c.options); },
      [](const ExtCall& c) { return ref::softplus_normalizer_backward(c.x, c.dy, sp_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_softplus_normalizer_options p = c_sp(c);
    return smax_softplus_normalizer_backward(&k.x, &k.dy, &k.out, &p, &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kSoftplus);
  ops.push_back(forward_op(
      "power_softmax", "Power-Softmax x^p / sum x^p", kPowerParams,
      [](const ExtCall& c) { smax::power_softmax(c.x, c.out, p_of(c), c.options); },
      [](const ExtCall& c) { return ref::power_softmax(c.x, p_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_power_softmax(&k.x, &k.out, p_of(c), &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kPower);
  ops.push_back(backward_op(
      "power_softmax_backward", "VJP of power_softmax (from x)", kPowerParams, nullptr,
      [](const ExtCall& c) { smax::power_softmax_backward(c.x, c.dy, c.out, p_of(c), c.options); },
      [](const ExtCall& c) { return ref::power_softmax_backward(c.x, c.dy, p_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_power_softmax_backward(&k.x, &k.dy, &k.out, p_of(c), &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kPower);
  // Probability-domain temperature runs on p = softmax(x) (y below).
  ExtOp pt = backward_op(
      "probability_temperature", "p^(1/T) / sum p^(1/T) on p = softmax(x)", kTParams, probs,
      [](const ExtCall& c) { smax::probability_temperature(c.y, c.out, t_of(c), c.options); },
      [](const ExtCall& c) { return ref::probability_temperature(c.y, t_of(c), c.options); });
  pt.needs_dy = false;
  pt.c_run = [](const ExtCall& c, const CCall& k) {
    return smax_probability_temperature(&k.y, &k.out, t_of(c), &k.options);
  };
  pt.bound_rows = ref::BoundRowsFrom::kYInput;
  pt.bounds = [](ref::BoundRows& b) { ref::relative_bounds(b, 2e-6); };
  ops.push_back(pt);
  ops.push_back(backward_op(
      "probability_temperature_backward", "VJP of probability_temperature (w.r.t. p)", kTParams,
      probs,
      [](const ExtCall& c) {
        smax::probability_temperature_backward(c.y, c.dy, c.out, t_of(c), c.options);
      },
      [](const ExtCall& c) {
        return ref::probability_temperature_backward(c.y, c.dy, t_of(c), c.options);
      }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_probability_temperature_backward(&k.y, &k.dy, &k.out, t_of(c), &k.options);
  };
  ops.back().bound_rows = ref::BoundRowsFrom::kYInput;
  ops.back().bounds = reweight_rule(ref::ReweightOp::kProbabilityTemperature);
  ops.push_back(forward_op(
      "logit_standardization", "softmax((x - mean) / (std + eps) / T)", kTParams,
      [](const ExtCall& c) { smax::logit_standardization(c.x, c.out, ls_of(c), c.options); },
      [](const ExtCall& c) { return ref::logit_standardization(c.x, ls_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_logit_standardization_options p = c_ls(c);
    return smax_logit_standardization(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kLogitStandardization);
  ops.push_back(backward_op(
      "logit_standardization_backward", "VJP of logit_standardization (from x)", kTParams, nullptr,
      [](const ExtCall& c) { smax::logit_standardization_backward(c.x, c.dy, c.out, ls_of(c), c.options); },
      [](const ExtCall& c) { return ref::logit_standardization_backward(c.x, c.dy, ls_of(c), c.options); }));
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_logit_standardization_options p = c_ls(c);
    return smax_logit_standardization_backward(&k.x, &k.dy, &k.out, &p, &k.options);
  };
  ops.back().bounds = reweight_rule(ref::ReweightOp::kLogitStandardization);
  set_bound_header(ops, first, "include/smax/normalizers.h");
}

}  // namespace smax_cli

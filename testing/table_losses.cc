// testing/table_losses.cc: cross-entropy and the z-losses in `smax run`
// (table in op_table.h). Bounds of --check: include/smax/cross_entropy.h
// (relative to the loss's own magnitude; here a uniform abs + rel bound).
#include <cmath>

#include "op_table.h"
#include "reference/cross_entropy.h"
#include "smax/cross_entropy.h"

namespace smax_cli {
namespace {

namespace ref = smax::reference;

// From an ExtCall or a bound's BoundCall (both have param() and loss).
template <class Call>
smax::CrossEntropyOptions ce_of(const Call& c) {
  smax::CrossEntropyOptions ce;
  ce.loss = c.loss;
  ce.label_smoothing = static_cast<float>(c.param("label_smoothing"));
  ce.lse_square_scale = static_cast<float>(c.param("lse_square_scale"));
  ce.softcap = static_cast<float>(c.param("softcap"));
  return ce;
}

// The C ABI's options struct of the same parameters (its loss options are
// CCall::loss).
smax_cross_entropy_options c_ce(const ExtCall& c) {
  auto p = c_defaults(smax_cross_entropy_options_init);
  const smax::CrossEntropyOptions ce = ce_of(c);
  p.label_smoothing = ce.label_smoothing;
  p.lse_square_scale = ce.lse_square_scale;
  p.softcap = ce.softcap;
  return p;
}
float f32_param(const ExtCall& c, const char* name) { return static_cast<float>(c.param(name)); }

std::vector<double> loss_values(const ref::LossRef& r) {
  if (r.reduction == smax::Reduction::kNone) return r.rows;
  return {r.reduce(r.rows)};
}

const std::vector<ExtParam> kCeParams = {
    ExtParam{"label_smoothing", 0, "PyTorch's label_smoothing in [0, 1]"}.fuzzed({0, 0.1, 1, 0.5, 0},
                                                                                 {-0.1, 1.5, NAN}),
    ExtParam{"lse_square_scale", 0, "PaLM z-loss coefficient"}.fuzzed({0, 1e-4, 1, 0}, {-1, INFINITY, NAN}),
    ExtParam{"softcap", 0, "logit soft-capping (0 = off)"}.fuzzed({0, 30, 1, 0.5, 0}, {-1, INFINITY, NAN})};
const std::vector<ExtParam> kZParams = {
    ExtParam{"coefficient", 1e-4, "c in c * LSE^2"}.fuzzed({1e-4, 0, 1, 1e-4}, {-1, NAN, INFINITY})};
const std::vector<ExtParam> kSphericalParams = {
    ExtParam{"a", 1, "a > 0"}.fuzzed({1, 0.5, 10, 1}, {0, -1, NAN, INFINITY}),
    ExtParam{"b", 1, "b"}.fuzzed({1, 0, -2, 5}, {NAN, INFINITY})};

}  // namespace

void add_loss_ops(std::vector<ExtOp>& ops) {
  const size_t first = ops.size();
  ops.push_back({"cross_entropy", "fused cross-entropy from logits", OutShape::kLoss, true, false,
                 false, kCeParams, nullptr,
                 [](const ExtCall& c) { smax::cross_entropy(c.x, c.target, c.out, ce_of(c), c.options); },
                 [](const ExtCall& c) {
                   return loss_values(ref::cross_entropy(c.x, c.target, ce_of(c), c.options).loss);
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_cross_entropy_options p = c_ce(c);
    return smax_cross_entropy(&k.x, &k.target, &k.out, &p, &k.loss, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const ref::BoundCall& c = b.call;
    ref::cross_entropy_family_bounds(b, ref::cross_entropy(c.x, c.target, ce_of(c), c.options).loss);
  };
  ops.push_back({"cross_entropy_backward", "gradient of cross_entropy", OutShape::kLoss, true, true,
                 false, kCeParams, nullptr,
                 [](const ExtCall& c) {
                   smax::cross_entropy_backward(c.x, c.target, c.dy, c.out, ce_of(c), c.options);
                 },
                 [](const ExtCall& c) {
                   return ref::cross_entropy_backward(c.x, c.target, c.dy, ce_of(c), c.options).dsrc;
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_cross_entropy_options p = c_ce(c);
    return smax_cross_entropy_backward(&k.x, &k.target, &k.dy, &k.out, &p, &k.loss, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const ref::BoundCall& c = b.call;
    const smax::CrossEntropyOptions ce = ce_of(c);
    ref::cross_entropy_family_backward_bounds(
        b, ref::cross_entropy_backward(c.x, c.target, c.dy, ce, c.options), ce.softcap);
  };
  ops.push_back({"z_loss", "PaLM z-loss c * LSE^2", OutShape::kLoss, true, false, false, kZParams,
                 nullptr,
                 [](const ExtCall& c) {
                   smax::z_loss(c.x, c.target, c.out, static_cast<float>(c.param("coefficient")),
                                c.loss, c.options);
                 },
                 [](const ExtCall& c) {
                   return loss_values(ref::z_loss(c.x, &c.target, c.param("coefficient"), c.loss, c.options));
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_z_loss(&k.x, &k.target, &k.out, f32_param(c, "coefficient"), &k.loss, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const ref::BoundCall& c = b.call;
    ref::cross_entropy_family_bounds(b, ref::z_loss(c.x, &c.target, c.param("coefficient"), c.loss, c.options));
  };
  ops.push_back({"z_loss_backward", "gradient of z_loss", OutShape::kLoss, true, true, false,
                 kZParams, nullptr,
                 [](const ExtCall& c) {
                   smax::z_loss_backward(c.x, c.target, c.dy, c.out,
                                         static_cast<float>(c.param("coefficient")), c.loss, c.options);
                 },
                 [](const ExtCall& c) {
                   return ref::z_loss_backward(c.x, &c.target, c.dy, c.param("coefficient"), c.loss,
                                               c.options)
                       .dsrc;
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_z_loss_backward(&k.x, &k.target, &k.dy, &k.out, f32_param(c, "coefficient"), &k.loss,
                                &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const ref::BoundCall& c = b.call;
    ref::cross_entropy_family_backward_bounds(
        b, ref::z_loss_backward(c.x, &c.target, c.dy, c.param("coefficient"), c.loss, c.options), 0.0f);
  };
  ops.push_back({"spherical_z_loss", "Z-loss of de Brebisson & Vincent", OutShape::kLoss, true,
                 false, false, kSphericalParams, nullptr,
                 [](const ExtCall& c) {
                   smax::spherical_z_loss(c.x, c.target, c.out, static_cast<float>(c.param("a")),
                                          static_cast<float>(c.param("b")), c.loss, c.options);
                 },
                 [](const ExtCall& c) {
                   return loss_values(ref::spherical_z_loss(c.x, c.target, c.param("a"), c.param("b"),
                                                            c.loss, c.options));
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_spherical_z_loss(&k.x, &k.target, &k.out, f32_param(c, "a"), f32_param(c, "b"), &k.loss,
                                 &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const ref::BoundCall& c = b.call;
    ref::cross_entropy_family_bounds(
        b, ref::spherical_z_loss(c.x, c.target, c.param("a"), c.param("b"), c.loss, c.options));
  };
  ops.push_back({"spherical_z_loss_backward", "gradient of spherical_z_loss", OutShape::kLoss, true,
                 true, false, kSphericalParams, nullptr,
                 [](const ExtCall& c) {
                   smax::spherical_z_loss_backward(c.x, c.target, c.dy, c.out,
                                                   static_cast<float>(c.param("a")),
                                                   static_cast<float>(c.param("b")), c.loss, c.options);
                 },
                 [](const ExtCall& c) {
                   return ref::spherical_z_loss_backward(c.x, c.target, c.dy, c.param("a"),
                                                         c.param("b"), c.loss, c.options)
                       .dsrc;
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_spherical_z_loss_backward(&k.x, &k.target, &k.dy, &k.out, f32_param(c, "a"),
                                          f32_param(c, "b"), &k.loss, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const ref::BoundCall& c = b.call;
    ref::cross_entropy_family_backward_bounds(
        b, ref::spherical_z_loss_backward(c.x, c.target, c.dy, c.param("a"), c.param("b"), c.loss, c.options),
        0.0f);
  };
  set_bound_header(ops, first, "include/smax/losses.h");
}

}  // namespace smax_cli

// testing/table_rescaled.cc: SSMax, softpick, clipped softmax, StableMax and the collapse
// detector in `smax run` (table in op_table.h). Bounds: include/smax/rescaled.h.
#include <cfloat>
#include <cmath>

#include "op_table.h"
#include "reference/rescaled.h"
#include "smax/rescaled.h"
#include "smax/runtime.h"

namespace smax_cli {
namespace {

namespace ref = smax::reference;

// From an ExtCall or a bound's BoundCall (both have param()).
template <class Call>
smax::SsmaxOptions ssmax_of(const Call& c) {
  smax::SsmaxOptions o;
  o.s = static_cast<float>(c.param("s"));
  o.fixed_n = static_cast<int64_t>(c.param("fixed_n"));
  return o;
}
// From an ExtCall or a bound's BoundCall (both have param()).
template <class Call>
smax::SoftpickOptions softpick_of(const Call& c) {
  smax::SoftpickOptions o;
  o.eps = static_cast<float>(c.param("eps"));
  return o;
}

// From an ExtCall or a bound's BoundCall (both have param()).
template <class Call>
smax::ClippedSoftmaxOptions clipped_of(const Call& c) {
  smax::ClippedSoftmaxOptions o;
  o.gamma = static_cast<float>(c.param("gamma"));
  o.zeta = static_cast<float>(c.param("zeta"));
  return o;
}

// The C ABI's options structs of the same parameters.
smax_ssmax_options c_ssmax(const ExtCall& c) {
  auto p = c_defaults(smax_ssmax_options_init);
  p.s = ssmax_of(c).s;
  p.fixed_n = ssmax_of(c).fixed_n;
  return p;
}
smax_softpick_options c_softpick(const ExtCall& c) {
  auto p = c_defaults(smax_softpick_options_init);
  p.eps = softpick_of(c).eps;
  return p;
}
smax_clipped_softmax_options c_clipped(const ExtCall& c) {
  auto p = c_defaults(smax_clipped_softmax_options_init);
  p.gamma = clipped_of(c).gamma;
  p.zeta = clipped_of(c).zeta;
  return p;
}

const std::vector<ExtParam> kClippedParams = {
    ExtParam{"gamma", -0.025, "stretch below 0 (<= 0)"}.fuzzed({-0.025, 0, -0.1, -3, -1e-6, -0.025},
                                                              {0.1, NAN, INFINITY, -INFINITY}),
    ExtParam{"zeta", 1.0, "stretch above 1 (>= 1)"}.fuzzed({1, 1.5, 1.01, 10, 1}, {0.9, 0, NAN, INFINITY})};
const std::vector<ExtParam> kSsmaxParams = {
    ExtParam{"s", 0.43, "SSMax scale s"}.fuzzed({0.43, 1, 0, -0.5, 3, 0.43}, {NAN, INFINITY}),
    ExtParam{"fixed_n", 0, "n (0 = visible count per row)", ParamType::kInt}.fuzzed({0, 1, 7, 512, 0},
                                                                                   {-1})};
const std::vector<ExtParam> kSoftpickParams = {
    ExtParam{"eps", 1e-6, "denominator epsilon"}.fuzzed({1e-6, 0, 1e-8, FLT_MIN, 1, 1e-6},
                                                        {-1, 1e-40, NAN, INFINITY})};

// precision=32|16|-16 of softmax_collapse_fraction.
smax::Precision collapse_precision(const ExtCall& c) {
  const double p = c.param("precision");
  return p == 16 ? smax::Precision::kF16 : p == -16 ? smax::Precision::kBF16 : smax::Precision::kF32;
}

}  // namespace

void add_rescaled_ops(std::vector<ExtOp>& ops) {
  const size_t first = ops.size();
  ops.push_back({"ssmax", "Scalable-Softmax softmax((s ln n) x)", OutShape::kSame, false, false,
                 false, kSsmaxParams, nullptr,
                 [](const ExtCall& c) { smax::ssmax(c.x, c.out, ssmax_of(c), c.options); },
                 [](const ExtCall& c) { return ref::ssmax(c.x, ssmax_of(c), c.options); }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_ssmax_options p = c_ssmax(c);
    return smax_ssmax(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) { ref::relative_bounds(b, 2e-6); };
  ops.push_back({"ssmax_backward", "VJP of ssmax", OutShape::kSame, false, true, false,
                 kSsmaxParams,
                 [](const ExtCall& c) { smax::ssmax(c.x, c.out, ssmax_of(c), c.options); },
                 [](const ExtCall& c) { smax::ssmax_backward(c.x, c.y, c.dy, c.out, ssmax_of(c), c.options); },
                 [](const ExtCall& c) { return ref::ssmax_backward(c.x, c.y, c.dy, ssmax_of(c), c.options); }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_ssmax_options p = c_ssmax(c);
    return smax_ssmax_backward(&k.x, &k.y, &k.dy, &k.out, nullptr, &p, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bounds = [](ref::BoundRows& b) {
    const smax::SsmaxOptions o = ssmax_of(b.call);
    ref::ssmax_backward_bounds(b, o.s, o.fixed_n);
  };
  ops.push_back({"softpick", "rectified softmax relu(e^x - 1) / sum |e^x - 1|", OutShape::kSame,
                 false, false, false, kSoftpickParams, nullptr,
                 [](const ExtCall& c) { smax::softpick(c.x, c.out, softpick_of(c), c.options); },
                 [](const ExtCall& c) { return ref::softpick(c.x, softpick_of(c), c.options); }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_softpick_options p = c_softpick(c);
    return smax_softpick(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const float eps = softpick_of(b.call).eps;
    b.each_row([&](int64_t r) {
      return ref::softpick_forward_bound(ref::softpick_row(b.row(r), eps, b.call.options.empty_row));
    });
  };
  ops.push_back({"softpick_backward", "VJP of softpick", OutShape::kSame, false, true, false,
                 kSoftpickParams, nullptr,
                 [](const ExtCall& c) { smax::softpick_backward(c.x, c.dy, c.out, softpick_of(c), c.options); },
                 [](const ExtCall& c) { return ref::softpick_backward(c.x, c.dy, softpick_of(c), c.options); }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_softpick_options p = c_softpick(c);
    return smax_softpick_backward(&k.x, &k.dy, &k.out, &p, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bounds = [](ref::BoundRows& b) {
    const float eps = softpick_of(b.call).eps;
    b.each_row([&](int64_t r) {
      const ref::Row t = b.row(r);
      return ref::softpick_backward_bound(t, b.dy_row(r), ref::softpick_row(t, eps, b.call.options.empty_row),
                                          b.sigma());
    });
  };
  ops.push_back({"clipped_softmax", "clip((zeta - gamma) softmax(x) + gamma, 0, 1)",
                 OutShape::kSame, false, false, false, kClippedParams, nullptr,
                 [](const ExtCall& c) { smax::clipped_softmax(c.x, c.out, clipped_of(c), c.options); },
                 [](const ExtCall& c) { return ref::clipped_softmax(c.x, clipped_of(c), c.options); }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_clipped_softmax_options p = c_clipped(c);
    return smax_clipped_softmax(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) {
    const smax::ClippedSoftmaxOptions o = clipped_of(b.call);
    b.each_row([&](int64_t r) {
      return ref::clipped_softmax_bound_row(b.row(r), o.gamma, o.zeta, b.call.options.empty_row);
    });
  };
  ops.push_back({"clipped_softmax_backward", "VJP of clipped_softmax", OutShape::kSame, false,
                 true, false, kClippedParams, nullptr,
                 [](const ExtCall& c) {
                   smax::clipped_softmax_backward(c.x, c.dy, c.out, clipped_of(c), c.options);
                 },
                 [](const ExtCall& c) {
                   return ref::clipped_softmax_backward(c.x, c.dy, clipped_of(c), c.options);
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_clipped_softmax_options p = c_clipped(c);
    return smax_clipped_softmax_backward(&k.x, &k.dy, &k.out, &p, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bounds = [](ref::BoundRows& b) {
    const smax::ClippedSoftmaxOptions o = clipped_of(b.call);
    b.each_row([&](int64_t r) {
      return ref::clipped_softmax_vjp_bound_row(b.row(r), b.dy_row(r), o.gamma, o.zeta, b.sigma(),
                                                b.call.options.empty_row);
    });
  };
  ops.push_back({"stablemax", "StableMax s(x) / sum s(x)", OutShape::kSame, false, false, false,
                 {}, nullptr, [](const ExtCall& c) { smax::stablemax(c.x, c.out, c.options); },
                 [](const ExtCall& c) { return ref::stablemax(c.x, c.options); }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_stablemax(&k.x, &k.out, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) { ref::relative_bounds(b, 1e-6); };
  ops.push_back({"stablemax_backward", "VJP of stablemax", OutShape::kSame, false, true, false,
                 {}, nullptr,
                 [](const ExtCall& c) { smax::stablemax_backward(c.x, c.dy, c.out, c.options); },
                 [](const ExtCall& c) { return ref::stablemax_backward(c.x, c.dy, c.options); }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_stablemax_backward(&k.x, &k.dy, &k.out, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bounds = [](ref::BoundRows& b) {
    b.each_row([&](int64_t r) {
      return ref::stablemax_backward_bound(b.row(r), b.dy_row(r), b.sigma(), b.call.options.empty_row);
    });
  };
  ops.push_back({"stablemax_cross_entropy", "StableMax cross-entropy", OutShape::kLoss, true,
                 false, false, {}, nullptr,
                 [](const ExtCall& c) {
                   smax::stablemax_cross_entropy(c.x, c.target, c.out, c.loss, c.options);
                 },
                 [](const ExtCall& c) {
                   return ref::stablemax_cross_entropy(c.x, c.target, c.loss, c.options);
                 }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_stablemax_cross_entropy(&k.x, &k.target, &k.out, &k.loss, &k.options);
  };
  ops.back().bounds = ref::stablemax_cross_entropy_bounds;
  ops.push_back({"stablemax_cross_entropy_backward", "gradient of stablemax_cross_entropy",
                 OutShape::kLoss, true, true, false, {}, nullptr,
                 [](const ExtCall& c) {
                   smax::stablemax_cross_entropy_backward(c.x, c.target, c.dy, c.out, c.loss, c.options);
                 },
                 [](const ExtCall& c) {
                   return ref::stablemax_cross_entropy_backward(c.x, c.target, c.dy, c.loss, c.options);
                 }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_stablemax_cross_entropy_backward(&k.x, &k.target, &k.dy, &k.out, &k.loss, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bounds = ref::stablemax_cross_entropy_backward_bounds;
  ops.push_back({"softmax_collapse_fraction", "per-row flag: sum exp(x - max) rounds to 1 (precision=32|16|-16 for f32|f16|bf16)",
                 OutShape::kRows, false, false, false, {ExtParam{"precision", 32, "32 (f32), 16 (f16) or -16 (bf16)", ParamType::kInt, {32, 16, -16}}.fuzzed({32, 16, -16}, {})},
                 nullptr,
                 [](const ExtCall& c) {
                   smax::softmax_collapse_fraction(c.x, collapse_precision(c), c.options, &c.out);
                 },
                 [](const ExtCall& c) {
                   // 1 / 0 where the flag is decided whatever the f32 exp's last bits;
                   // 0.5 (either answer passes, bound 0.5 below) where it is not, or
                   // where the target's lane count (the f32 summation order) is unknown.
                   const int lanes = ref::f32_lanes_of_target(smax::active_target());
                   std::vector<double> out;
                   for (int f : ref::softmax_collapse_flags(c.x, collapse_precision(c), c.options,
                                                            lanes == 0 ? 1 : lanes)) {
                     out.push_back(f < 0 || lanes == 0 ? 0.5 : f);
                   }
                   return out;
                 }});
  ops.back().bounds = [](ref::BoundRows& b) {
    for (size_t i = 0; i < b.ref.size(); ++i) b.out.bound[i] = b.ref[i] == 0.5 ? 0.5 : 0.0;
  };
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const double p = c.param("precision");
    const int32_t prec = p == 16 ? SMAX_PRECISION_F16 : p == -16 ? SMAX_PRECISION_BF16 : SMAX_PRECISION_F32;
    double fraction = 0.0;
    return smax_softmax_collapse_fraction(&k.x, &k.out, prec, &k.options, &fraction);
  };
  set_bound_header(ops, first, "include/smax/normalizers.h");
}

}  // namespace smax_cli

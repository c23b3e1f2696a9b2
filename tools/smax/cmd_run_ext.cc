// tools/smax/cmd_run_ext.cc: `smax run` for the ops of the table in
// testing/op_table.h (normalisers, losses, samplers).
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "check.h"
#include "commands.h"
#include "data.h"
#include "json.h"
#include "reference/rows.h"
#include "op_table.h"
#include "progress.h"
#include "reference/bounds.h"
#include "smax/smax.h"
#include "timing.h"
#include "typed_call.h"

namespace smax_cli {
namespace {

// The bound --check applies, in words.
std::string bound_description(const ExtOp& op) {
  if (op.check_indices) return "indices equal to the oracle's (include/smax/sampling.h)";
  return "the op's documented bound (" + (op.bound_header.empty() ? "?" : op.bound_header) + ")";
}

// The documented per-element bounds of `op` for the call `c` (ref: the oracle's output).
smax::reference::ElementBounds bounds_of(const ExtOp& op, const ExtCall& c, const std::vector<double>& ref) {
  return op_bounds(op, bound_call_of(c), ref);
}

}  // namespace

int cmd_run_ext(const ExtOp& op, const Args& args) {
  const std::vector<int64_t> shape = parse_shape(args.get("shape", "256x32000"));
  const int64_t axis_arg = parse_int("--axis", args.get("axis", "-1"));
  make_geometry(shape, axis_arg);  // validates --axis against the shape
  const int threads = args.has("threads") ? parse_threads(args.get("threads", "")) : smax::max_threads();
  const Dist dist = parse_dist(args.get("dist", "normal"));
  const double scale = parse_double("--scale", args.get("scale", "1"));
  if (!(scale > 0) || !std::isfinite(static_cast<float>(scale))) {
    throw UsageError("--scale: expected a finite number > 0, got '" + args.get("scale", "") + "'");
  }
  const uint64_t seed = parse_seed(args.get("seed", "1"));
  TimingConfig timing;
  if (args.has("repeat")) timing.repeat = parse_repeat("--repeat", args.get("repeat", ""));
  if (args.has("min-time")) timing.min_time_s = parse_min_time(args.get("min-time", ""));
  const bool check = args.has("check");
  if (check && !op.reference) throw UsageError("--check: op " + op.name + " has no float64 oracle");
  const Format format = parse_format(args.get("format", "text"));
  // --dtype: a floating storage dtype, or (integer ops) their integer type.
  const bool floating = takes_floating_dtypes(op);
  const smax::DType dtype = floating ? parse_float_dtype(args.get("dtype", "f32")) : smax::DType::kF32;

  ExtCall call;
  call.params = parse_params(op, args.get("param", ""));
  if (!floating) apply_integer_dtype(op, args.get("dtype", ""), call.params);
  call.options.axis = axis_arg;
  call.options.scale = static_cast<float>(scale);
  call.options.threads = threads;
  try {
    call.loss.reduction = smax::parse_reduction(args.get("reduction", "mean"));
  } catch (const smax::Error& e) {
    throw UsageError(std::string("--reduction: ") + e.what());
  }
  if (args.has("target")) apply_target(args.get("target", ""));

  const int64_t count = product(shape);
  auto inst = make_instance(op, shape, call, dist, seed);
  // --dtype: the inputs are rounded to the dtype (in inst too, so the
  // oracle sees the same values) and the op runs on views of that dtype.
  std::unique_ptr<TypedCall> typed;
  if (dtype != smax::DType::kF32) typed = make_typed_call(*inst, dtype);
  const ExtCall& c = inst->call;
  const ExtCall& run_call = typed ? typed->call : c;
  const std::vector<int64_t>& written_shape = inst->out_shape;
  const std::vector<int64_t>& out_index = inst->out_index;

  Progress progress(check ? 3 : 1);
  progress.step("timing " + op.name);
  const Timing t = measure([&] { op.run(run_call); }, timing);
  std::vector<double> out;
  if (typed) {
    out = typed_output(*typed, product(written_shape));
  } else {
    out.assign(inst->out.begin(), inst->out.begin() + product(written_shape));
  }
  const double ns_per_elem = t.median_s * 1e9 / static_cast<double>(count);

  int64_t violations = 0, worst = -1;
  double max_abs = 0, worst_ratio = 0, worst_got = 0, worst_ref = 0;
  if (check) {
    progress.step("float64 reference");
    // f64 inputs take the ops' float64 paths: the oracle models those
    // (logits and derived factors in double, src/reference/rows.h).
    const smax::reference::Float64Semantics semantics(dtype == smax::DType::kF64 &&
                                                      has_float64_path(op.name));
    const std::vector<double> ref = op.reference(c);
    progress.step("checking against the reference");
    const int64_t m = product(written_shape);
    if (static_cast<int64_t>(ref.size()) != m) {
      throw smax::Error(smax::Status::kInternal, "reference returned " + std::to_string(ref.size()) +
                                                     " values for " + std::to_string(m) + " outputs");
    }
    smax::reference::ElementBounds bounds = bounds_of(op, c, ref);
    for (int64_t i = 0; i < m; ++i) {
      const double got = op.check_indices ? static_cast<double>(out_index[static_cast<size_t>(i)])
                                         : out[static_cast<size_t>(i)];
      const double r = ref[static_cast<size_t>(i)];
      // A narrow output adds its rounding: half an ulp of its dtype.
      if (!op.check_indices) {
        bounds.bound[static_cast<size_t>(i)] += half_ulp(dtype, std::max(std::fabs(r), std::fabs(got)));
      }
      if (std::isfinite(r) && std::isfinite(got)) max_abs = std::max(max_abs, std::fabs(got - r));
      const double ratio = smax::reference::bound_ratio(bounds, static_cast<size_t>(i), got, r);
      if (!(ratio <= 1)) ++violations;
      if (ratio > worst_ratio || worst < 0) {
        worst_ratio = ratio;
        worst = i;
        worst_got = got;
        worst_ref = r;
      }
    }
  }
  progress.finish();
  const std::string bound = bound_description(op);
  if (format == Format::kJson) {
    JsonObject o;
    o.str("op", op.name).raw("shape", json_int_array(shape)).integer("axis", axis_arg);
    JsonObject p;
    for (const ExtParam& param : op.params) p.raw(param.name, json_param(param, call.params.at(param.name)));
    o.raw("params", p.compact())
        .str("dtype", smax::dtype_name(dtype))
        .str("target", smax::active_target())
        .integer("threads", threads)
        .str("dist", format_dist(dist))
        .integer("elements", count);
    json_timing(o, t)
        .num("ns_per_elem", ns_per_elem);
    if (check) {
      o.num("max_abs_err", max_abs)
          .num("worst_err_over_bound", worst_ratio)
          .integer("violations", violations)
          .boolean("within_bounds", violations == 0);
    } else {
      o.null("max_abs_err").null("worst_err_over_bound").null("violations").null("within_bounds");
    }
    o.str("bound", bound).str("version", smax::version());
    std::printf("%s\n", o.pretty().c_str());
  } else {
    std::printf("op         %s (%s), shape %s, axis %lld\n", op.name.c_str(), op.summary.c_str(),
                format_shape(shape).c_str(), static_cast<long long>(axis_arg));
    const std::string ps = format_params(op.params, &call.params);
    std::printf("params     %s\n", ps.empty() ? "(none)" : ps.c_str());
    std::printf("dtype      %s\n", smax::dtype_name(dtype));
    std::printf("target     %s, threads %d\n", smax::active_target().c_str(), threads);
    std::printf("time       %s\n", format_timing(t).c_str());
    std::printf("speed      %.4f ns/elem\n", ns_per_elem);
    if (check) {
      std::printf("check      max abs err %.3g, worst error / bound %.3g: %s\n", max_abs,
                  worst_ratio, violations == 0 ? "within bounds" : "OUT OF BOUNDS");
      std::printf("bound      %s\n", bound.c_str());
      if (violations) {
        std::printf("worst      element %lld: got %.9g, reference %.17g (%.3g x the bound), %lld "
                    "elements out of bounds\n",
                    static_cast<long long>(worst), worst_got, worst_ref, worst_ratio,
                    static_cast<long long>(violations));
      }
    }
  }
  return check && violations ? kExitCheckFailed : kExitOk;
}

}  // namespace smax_cli

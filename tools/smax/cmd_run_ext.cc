// tools/smax/cmd_run_ext.cc: `smax run` for the ops of the table in
// ext_ops.h (normalisers, losses, samplers).
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "check.h"
#include "commands.h"
#include "data.h"
#include "ext_ops.h"
#include "json.h"
#include "smax/smax.h"
#include "timing.h"

namespace smax_cli {
namespace {

std::map<std::string, double> parse_params(const ExtOp& op, const std::string& text) {
  std::map<std::string, double> params;
  for (const ExtParam& p : op.params) params[p.name] = p.fallback;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    if (eq == std::string::npos || params.count(name) == 0) {
      std::string known;
      for (const ExtParam& p : op.params) known += (known.empty() ? "" : ", ") + p.name;
      throw UsageError("--param: '" + item + "' is not NAME=VALUE with NAME one of {" + known +
                       "} for op " + op.name);
    }
    params[name] = parse_double("--param " + name, item.substr(eq + 1));
  }
  return params;
}

std::vector<int64_t> out_shape_of(const ExtOp& op, const std::vector<int64_t>& shape, int axis,
                                  const ExtCall& call) {
  std::vector<int64_t> out = shape;
  switch (op.out_shape) {
    case OutShape::kSame: break;
    case OutShape::kRows: out[static_cast<size_t>(axis)] = 1; break;
    case OutShape::kLoss:
      if (call.loss.reduction == smax::Reduction::kNone) {
        out.erase(out.begin() + axis);
      } else {
        out.clear();
      }
      break;
    case OutShape::kTopK: out[static_cast<size_t>(axis)] = static_cast<int64_t>(call.param("k")); break;
  }
  return out;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

smax::TensorView f32_view(float* data, const std::vector<int64_t>& shape) {
  return smax::make_view(data, smax::DType::kF32, static_cast<int>(shape.size()), shape.data(),
                         nullptr);
}
smax::TensorView i64_view(int64_t* data, const std::vector<int64_t>& shape) {
  return smax::make_view(data, smax::DType::kI64, static_cast<int>(shape.size()), shape.data(),
                         nullptr);
}

}  // namespace

int cmd_run_ext(const ExtOp& op, int argc, char** argv, int first) {
  const Args args("smax run",
                  {{"op", true}, {"shape", true}, {"axis", true}, {"threads", true},
                   {"target", true}, {"dist", true}, {"scale", true}, {"seed", true},
                   {"repeat", true}, {"min-time", true}, {"check", false}, {"format", true},
                   {"param", true}, {"reduction", true}, {"help", false}},
                  argc, argv, first);
  const std::vector<int64_t> shape = parse_shape(args.get("shape", "256x32000"));
  const int64_t axis_arg = parse_int("--axis", args.get("axis", "-1"));
  const Geometry geo = make_geometry(shape, axis_arg);
  const int threads = args.has("threads") ? parse_threads(args.get("threads", "")) : smax::max_threads();
  const Dist dist = parse_dist(args.get("dist", "normal"));
  const double scale = parse_double("--scale", args.get("scale", "1"));
  if (!(scale > 0) || !std::isfinite(static_cast<float>(scale))) {
    throw UsageError("--scale: expected a finite number > 0, got '" + args.get("scale", "") + "'");
  }
  const int64_t seed = parse_int("--seed", args.get("seed", "1"));
  if (seed < 0) throw UsageError("--seed: expected an integer >= 0");
  TimingConfig timing;
  if (args.has("repeat")) {
    const int64_t r = parse_int("--repeat", args.get("repeat", ""));
    if (r < 1 || r > 1000000) throw UsageError("--repeat: expected an integer in [1, 1000000]");
    timing.repeat = static_cast<int>(r);
  }
  if (args.has("min-time")) {
    const double t = parse_double("--min-time", args.get("min-time", ""));
    if (!(t >= 0) || t > 3600) throw UsageError("--min-time: expected seconds in [0, 3600]");
    timing.min_time_s = t;
  }
  const bool check = args.has("check");
  if (check && !op.reference) throw UsageError("--check: op " + op.name + " has no float64 oracle");
  const Format format = parse_format(args.get("format", "text"));

  ExtCall call;
  call.params = parse_params(op, args.get("param", ""));
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
  const std::vector<int64_t> rows_shape = [&] {
    std::vector<int64_t> s = shape;
    s.erase(s.begin() + geo.axis);
    return s;
  }();
  const std::vector<int64_t> oshape = out_shape_of(op, shape, geo.axis, call);
  FloatBuffer x(static_cast<size_t>(count));
  fill(x.data(), x.size(), dist, static_cast<uint64_t>(seed));
  call.x = f32_view(x.data(), shape);
  std::vector<int64_t> target;
  if (op.needs_target) {
    target.resize(static_cast<size_t>(product(rows_shape)));
    uint64_t state = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 7;
    for (auto& t : target) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(geo.n));
    }
    call.target = i64_view(target.data(), rows_shape);
  }
  // Backward ops: y = forward(x) (same shape as the forward's output), dy ~ N(0, 1).
  FloatBuffer y(op.forward ? static_cast<size_t>(count) : 0);
  const int64_t dy_count = op.needs_dy ? (op.out_shape == OutShape::kSame ? product(oshape) : product(oshape)) : 0;
  FloatBuffer dy(static_cast<size_t>(op.needs_dy ? std::max<int64_t>(dy_count, count) : 0));
  if (op.forward) {
    ExtCall fwd = call;
    fwd.out = f32_view(y.data(), shape);
    op.forward(fwd);
    call.y = fwd.out;
  }
  FloatBuffer out(static_cast<size_t>(std::max<int64_t>(product(oshape), 1)));
  std::vector<int64_t> out_index;
  call.out = f32_view(out.data(), oshape);
  if (op.index_output) {
    out_index.resize(static_cast<size_t>(std::max<int64_t>(product(oshape), 1)));
    call.out_index = i64_view(out_index.data(), oshape);
  }
  if (op.needs_dy) {
    // Loss backward: dloss has the loss's shape; others: dy has x's shape.
    const std::vector<int64_t>& dshape = op.out_shape == OutShape::kLoss ? oshape : shape;
    fill(dy.data(), static_cast<size_t>(product(dshape)), Dist{}, static_cast<uint64_t>(seed) + 0x5eed);
    call.dy = f32_view(dy.data(), dshape);
    if (op.out_shape == OutShape::kLoss) {
      // The backward writes dsrc with x's shape.
      call.out = f32_view(out.data(), shape);
    }
  }
  const std::vector<int64_t> written_shape =
      op.needs_dy && op.out_shape == OutShape::kLoss ? shape : oshape;
  if (product(written_shape) > static_cast<int64_t>(out.size())) {
    throw smax::Error(smax::Status::kInternal, "output buffer too small");
  }

  const Timing t = measure([&] { op.run(call); }, timing);
  const double ns_per_elem = t.median_s * 1e9 / static_cast<double>(count);

  int64_t violations = 0, worst = -1;
  double max_abs = 0, worst_ratio = 0, worst_got = 0, worst_ref = 0;
  if (check) {
    const std::vector<double> ref = op.reference(call);
    const int64_t m = product(written_shape);
    if (static_cast<int64_t>(ref.size()) != m) {
      throw smax::Error(smax::Status::kInternal, "reference returned " + std::to_string(ref.size()) +
                                                     " values for " + std::to_string(m) + " outputs");
    }
    for (int64_t i = 0; i < m; ++i) {
      const double got = op.index_output ? static_cast<double>(out_index[static_cast<size_t>(i)])
                                         : static_cast<double>(out.data()[i]);
      const double r = ref[static_cast<size_t>(i)];
      double ratio = 0;
      if (std::isnan(r) || std::isnan(got)) {
        ratio = std::isnan(r) == std::isnan(got) ? 0 : INFINITY;
      } else if (std::isinf(r) || std::isinf(got)) {
        ratio = r == got ? 0 : INFINITY;
      } else {
        const double err = std::fabs(got - r);
        max_abs = std::max(max_abs, err);
        ratio = err / (op.abs_tol + op.rel_tol * std::fabs(r));
      }
      if (ratio > 1) ++violations;
      if (ratio > worst_ratio || worst < 0) {
        worst_ratio = ratio;
        worst = i;
        worst_got = got;
        worst_ref = r;
      }
    }
  }
  char bound[96];
  std::snprintf(bound, sizeof bound, "|got - ref| <= %g + %g * |ref|", op.abs_tol, op.rel_tol);
  if (format == Format::kJson) {
    JsonObject o;
    o.str("op", op.name).raw("shape", json_int_array(shape)).integer("axis", axis_arg);
    JsonObject p;
    for (const auto& [k, v] : call.params) p.num(k, v);
    o.raw("params", p.compact())
        .str("target", smax::active_target())
        .integer("threads", threads)
        .str("dist", format_dist(dist))
        .integer("elements", count)
        .integer("samples", t.samples)
        .num("median_ms", t.median_s * 1e3)
        .num("min_ms", t.min_s * 1e3)
        .num("ns_per_elem", ns_per_elem);
    if (check) {
      o.num("max_abs_err", max_abs).integer("violations", violations).boolean("within_bounds", violations == 0);
    } else {
      o.null("max_abs_err").null("violations").null("within_bounds");
    }
    o.str("bound", bound).str("version", smax::version());
    std::printf("%s\n", o.pretty().c_str());
  } else {
    std::printf("op         %s (%s), shape %s, axis %lld\n", op.name.c_str(), op.summary.c_str(),
                format_shape(shape).c_str(), static_cast<long long>(axis_arg));
    std::string ps;
    for (const auto& [k, v] : call.params) ps += (ps.empty() ? "" : ", ") + k + "=" + std::to_string(v);
    std::printf("params     %s\n", ps.empty() ? "(none)" : ps.c_str());
    std::printf("target     %s, threads %d\n", smax::active_target().c_str(), threads);
    std::printf("time       %.4g ms median (min %.4g ms) over %d samples\n", t.median_s * 1e3,
                t.min_s * 1e3, t.samples);
    std::printf("speed      %.4f ns/elem\n", ns_per_elem);
    if (check) {
      std::printf("check      max abs err %.3g: %s\n", max_abs,
                  violations == 0 ? "within bounds" : "OUT OF BOUNDS");
      std::printf("bound      %s\n", bound);
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

const std::vector<ExtOp>& ext_ops() {
  static const std::vector<ExtOp> ops = [] {
    std::vector<ExtOp> v;
    add_sparse_ops(v);
    add_rescaled_ops(v);
    add_reweight_ops(v);
    add_loss_ops(v);
    add_sampling_ops(v);
    return v;
  }();
  return ops;
}

const ExtOp* find_ext_op(const std::string& name) {
  for (const ExtOp& op : ext_ops()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace smax_cli

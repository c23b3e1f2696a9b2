// tools/smax/cmd_run.cc: `smax run` - time one op on one shape, optionally
// checking it against the float64 reference.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "args.h"
#include "check.h"
#include "commands.h"
#include "data.h"
#include "json.h"
#include "op_table.h"
#include "progress.h"
#include "reference/reference.h"
#include "run_inputs.h"
#include "smax/smax.h"
#include "suggest.h"
#include "timing.h"
#include "typed_call.h"

namespace smax_cli {
namespace {

struct RunConfig {
  Op op = Op::kSoftmax;
  std::vector<int64_t> shape;
  int64_t axis = -1;
  Geometry geometry;
  smax::Algorithm algorithm = smax::Algorithm::kAuto;
  std::string algo_name = "auto";
  int threads = 0;
  Dist dist;
  double scale = 1.0;
  uint64_t seed = 1;
  bool check = false;
  smax::DType dtype = smax::DType::kF32;
  Format format = Format::kText;
  TimingConfig timing;
};

RunConfig parse_run(const Args& args) {
  RunConfig c;
  c.op = parse_op(args.get("op", "softmax"));
  c.shape = parse_shape(args.get("shape", "256x32000"));
  c.axis = parse_int("--axis", args.get("axis", "-1"));
  c.geometry = make_geometry(c.shape, c.axis);
  c.algo_name = args.get("algo", "auto");
  c.algorithm = static_cast<smax::Algorithm>(parse_algo(c.algo_name));
  c.threads = args.has("threads") ? parse_threads(args.get("threads", "")) : smax::max_threads();
  c.dist = parse_dist(args.get("dist", "normal"));
  c.scale = parse_double("--scale", args.get("scale", "1"));
  if (!(c.scale > 0) || !std::isfinite(static_cast<float>(c.scale))) {
    throw UsageError("--scale: expected a finite number > 0, got '" + args.get("scale", "") + "'");
  }
  c.seed = parse_seed(args.get("seed", "1"));
  if (args.has("repeat")) c.timing.repeat = parse_repeat("--repeat", args.get("repeat", ""));
  if (args.has("min-time")) c.timing.min_time_s = parse_min_time(args.get("min-time", ""));
  c.check = args.has("check");
  c.dtype = parse_float_dtype(args.get("dtype", "f32"));
  c.format = parse_format(args.get("format", "text"));
  // Last: a bad --target should not leave the process capped for nothing,
  // and every pure parse error above is reported first.
  if (args.has("target")) apply_target(args.get("target", ""));
  return c;
}

smax::TensorView view_of(float* data, const std::vector<int64_t>& shape) {
  return smax::make_view(data, smax::DType::kF32, static_cast<int>(shape.size()), shape.data(),
                         nullptr);
}

// Refuses a run whose buffers (plus the float64 reference with --check)
// would not fit in physical memory, instead of letting the OOM killer decide.
void check_memory(int64_t count, int64_t out_count, bool backward, bool check) {
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  if (pages <= 0 || page <= 0) return;
  const double need = 4.0 * static_cast<double>(count) * (backward ? 3 : 1) +
                      4.0 * static_cast<double>(out_count) +
                      (check ? 8.0 * static_cast<double>(out_count) : 0.0);
  if (need > 0.9 * pages * page) {
    throw UsageError("--shape: this run needs " + std::to_string(static_cast<int64_t>(need / 1048576)) +
                     " MiB but the machine has " +
                     std::to_string(static_cast<int64_t>(pages * page / 1048576)) + " MiB");
  }
}

}  // namespace

const std::vector<OptionSpec>& run_option_specs() {
  static const std::vector<OptionSpec> specs = {
      {"op", true},     {"shape", true},    {"axis", true},     {"algo", true},
      {"threads", true}, {"target", true},  {"dist", true},     {"scale", true},
      {"seed", true},   {"repeat", true},   {"min-time", true}, {"check", false},
      {"format", true}, {"param", true},    {"reduction", true}, {"dtype", true},
      {"help", false}};
  return specs;
}

namespace {

bool is_family_op(const std::string& name) {
  for (Op op : softmax_family()) {
    if (name == op_name(op)) return true;
  }
  return false;
}

std::string family_list() {
  std::vector<std::string> names;
  for (Op op : softmax_family()) names.push_back(op_name(op));
  return join_names(names);
}

std::string loss_list() {
  std::vector<std::string> names;
  for (const ExtOp& op : ext_ops()) {
    if (is_loss(op) && !op.needs_dy) names.push_back(op.name);
  }
  return join_names(names) + " and their _backward";
}

// Options of `smax run` that exist but do not apply to the chosen op: one
// message saying which ops they apply to.
void reject_inapplicable(const std::string& op, const ExtOp* ext, const Args& args) {
  if (ext == nullptr) {
    if (args.has("param")) {
      throw UsageError("--param does not apply to op '" + op +
                       "' (it has no parameters; `smax info --ops` lists each op's parameters)");
    }
    if (args.has("reduction")) {
      throw UsageError("--reduction does not apply to op '" + op + "' (only losses take it: " +
                       loss_list() + ")");
    }
    return;
  }
  if (args.has("algo")) {
    std::string hint = ext->params.empty()
                           ? ""
                           : " (op '" + op + "' takes --param " + format_params(ext->params) + ")";
    throw UsageError("--algo applies only to " + family_list() + ", not to op '" + op + "'" + hint);
  }
  if (args.has("reduction") && !is_loss(*ext)) {
    throw UsageError("--reduction does not apply to op '" + op + "' (only losses take it: " +
                     loss_list() + ")");
  }
  if (args.has("param") && ext->params.empty()) {
    throw UsageError("--param does not apply to op '" + op +
                     "' (it has no parameters; `smax info --ops` lists each op's parameters)");
  }
}

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  const Args args("smax run", run_option_specs(), argc, argv, first);
  const std::string op = args.get("op", "softmax");
  // Ops with their own inputs (linear_cross_entropy*, attention*): run_inputs.h.
  if (const InputsOp* in = find_inputs_op(op); in != nullptr) return cmd_run_inputs(*in, args);
  const ExtOp* ext = find_ext_op(op);
  if (ext == nullptr && !is_family_op(op)) {
    std::vector<std::string> names;
    for (const smax::OpInfo& info : smax::op_list()) names.push_back(info.name);
    const smax::OpInfo* listed = smax::find_op(op);
    if (listed != nullptr) {  // in the op list, but no CLI runner: a defect of the build
      throw UsageError("op '" + op + "' is in smax/op_list.inc (cli " + listed->cli +
                       ") but `smax run` cannot run it yet");
    }
    throw UsageError("unknown op '" + op + "'" + did_you_mean(op, names) +
                     " (`smax info --ops` lists all ops)");
  }
  reject_inapplicable(op, ext, args);
  // Ops beyond the softmax family go through the op table (testing/op_table.h).
  if (ext != nullptr) return cmd_run_ext(*ext, args);
  const RunConfig c = parse_run(args);
  const bool backward = c.op == Op::kSoftmaxBackward || c.op == Op::kLogSoftmaxBackward;
  const int64_t count = product(c.shape);
  // logsumexp keeps the reduced axis with size 1.
  std::vector<int64_t> out_shape = c.shape;
  if (c.op == Op::kLogsumexp) out_shape[c.geometry.axis] = 1;
  const int64_t out_count = product(out_shape);
  check_memory(count, out_count, backward, c.check);

  smax::SoftmaxOptions options;
  options.axis = c.axis;
  options.scale = static_cast<float>(c.scale);
  options.algorithm = c.algorithm;
  options.threads = c.threads;

  // Inputs. Backward: x -> y = op(x) with smax itself, dy ~ N(0, 1).
  FloatBuffer x(static_cast<size_t>(count));
  fill(x.data(), x.size(), c.dist, c.seed);
  FloatBuffer dst(static_cast<size_t>(out_count));
  FloatBuffer* y = &x;
  FloatBuffer y_buf(backward ? static_cast<size_t>(count) : 0);
  FloatBuffer dy(backward ? static_cast<size_t>(count) : 0);
  const smax::TensorView xv = view_of(x.data(), c.shape);
  const smax::TensorView dv = view_of(dst.data(), out_shape);
  smax::TensorView yv = xv, dyv = xv;
  if (backward) {
    smax::SoftmaxOptions fwd = options;
    fwd.algorithm = smax::Algorithm::kAuto;
    yv = view_of(y_buf.data(), c.shape);
    if (c.op == Op::kSoftmaxBackward) {
      smax::softmax(xv, yv, fwd);
    } else {
      smax::log_softmax(xv, yv, fwd);
    }
    y = &y_buf;
    fill(dy.data(), dy.size(), Dist{}, c.seed + 0x5eed);
    dyv = view_of(dy.data(), c.shape);
  }

  // --dtype: x, y, dy rounded to the dtype in place (the reference reads
  // the f32 views, so it sees the same values); the op runs on typed views.
  std::vector<unsigned char> tx, ty, tdy, tdst;
  smax::TensorView txv = xv, tyv = yv, tdyv = dyv, tdv = dv;
  const bool typed = c.dtype != smax::DType::kF32;
  if (typed) {
    const auto retyped = [&](const smax::TensorView& v, std::vector<unsigned char>& bytes) {
      smax::TensorView t = v;
      t.dtype = c.dtype;
      t.data = bytes.data();
      return t;
    };
    tx = round_to_dtype(x.data(), x.size(), c.dtype);
    txv = retyped(xv, tx);
    if (backward) {
      ty = round_to_dtype(y_buf.data(), y_buf.size(), c.dtype);
      tdy = round_to_dtype(dy.data(), dy.size(), c.dtype);
      tyv = retyped(yv, ty);
      tdyv = retyped(dyv, tdy);
    }
    tdst.assign(std::max<size_t>(dst.size(), 1) * static_cast<size_t>(smax::dtype_size(c.dtype)), 0);
    tdv = retyped(dv, tdst);
  }
  std::function<void()> call;
  switch (c.op) {
    case Op::kSoftmax: call = [&] { smax::softmax(txv, tdv, options); }; break;
    case Op::kLogSoftmax: call = [&] { smax::log_softmax(txv, tdv, options); }; break;
    case Op::kLogsumexp: call = [&] { smax::logsumexp(txv, tdv, options); }; break;
    case Op::kSoftmaxBackward:
      call = [&] { smax::softmax_backward(tyv, tdyv, tdv, options); };
      break;
    case Op::kLogSoftmaxBackward:
      call = [&] { smax::log_softmax_backward(tyv, tdyv, tdv, options); };
      break;
  }

  Progress progress(c.check ? 3 : 1);
  progress.step(std::string("timing ") + op_name(c.op));
  const Timing t = measure(call, c.timing);
  const double ns_per_elem = t.median_s * 1e9 / static_cast<double>(count);
  const int bpe = bytes_per_element(c.op) * smax::dtype_size(c.dtype) / 4;  // per its dtype
  const double gbps = static_cast<double>(bpe) * static_cast<double>(count) / t.median_s * 1e-9;
  const std::string kernel = smax::kernel_name(op_name(c.op), c.algo_name, c.geometry.n);
  const std::string target = smax::active_target();

  ErrorStats st;
  if (c.check) {
    progress.step("float64 reference");
    std::vector<double> ref;
    switch (c.op) {
      case Op::kSoftmax: ref = smax::reference::softmax(xv, options); break;
      case Op::kLogSoftmax: ref = smax::reference::log_softmax(xv, options); break;
      case Op::kLogsumexp: ref = smax::reference::logsumexp(xv, options); break;
      case Op::kSoftmaxBackward:
        ref = smax::reference::softmax_backward(yv, dyv, options);
        break;
      case Op::kLogSoftmaxBackward:
        ref = smax::reference::log_softmax_backward(yv, dyv, options);
        break;
    }
    if (static_cast<int64_t>(ref.size()) != out_count) {
      throw smax::Error(smax::Status::kInternal,
                        "reference returned " + std::to_string(ref.size()) +
                            " values for " + std::to_string(out_count) + " outputs");
    }
    progress.step("checking against the reference");
    const double s = std::fabs(static_cast<double>(options.scale));
    if (typed) {
      const std::vector<double> got = widen_all(tdst, c.dtype, dst.size());
      st = backward ? check_backward(c.op, got.data(), ref, y->data(), dy.data(), c.geometry, s,
                                     c.dtype)
                    : check_forward(c.op, got.data(), ref, c.dtype);
    } else if (backward) {
      st = check_backward(c.op, dst.data(), ref, y->data(), dy.data(), c.geometry, s);
    } else {
      st = check_forward(c.op, dst.data(), ref);
    }
  }

  progress.finish();
  if (c.format == Format::kJson) {
    JsonObject out;
    out.str("op", op_name(c.op))
        .raw("shape", json_int_array(c.shape))
        .integer("axis", c.axis)
        .str("algo", c.algo_name)
        .str("kernel", kernel)
        .str("target", target)
        .integer("threads", c.threads)
        .str("dtype", smax::dtype_name(c.dtype))
        .str("dist", format_dist(c.dist))
        .num("scale", c.scale)
        .integer("seed", static_cast<int64_t>(c.seed))
        .integer("elements", count);
    json_timing(out, t)
        .num("ns_per_elem", ns_per_elem)
        .integer("bytes_per_elem", bpe)
        .num("gbps", gbps);
    if (c.check) {
      out.num("max_rel_err", st.max_rel_err)
          .num("max_abs_err", st.max_abs_err)
          .num("worst_err_over_bound", st.worst_ratio)
          .integer("violations", st.violations)
          .boolean("within_bounds", st.within_bounds());
    } else {
      out.null("max_rel_err").null("max_abs_err").null("worst_err_over_bound").null("violations")
          .null("within_bounds");
    }
    out.str("bound", bound_text(c.op)).str("version", smax::version());
    std::printf("%s\n", out.pretty().c_str());
  } else {
    std::printf("op         %s, shape %s, axis %lld (%lld rows of %lld)\n", op_name(c.op),
                format_shape(c.shape).c_str(), static_cast<long long>(c.axis),
                static_cast<long long>(c.geometry.outer * c.geometry.inner),
                static_cast<long long>(c.geometry.n));
    std::printf("algo       %s -> %s\n", c.algo_name.c_str(), kernel.c_str());
    std::printf("target     %s, threads %d, dtype %s\n", target.c_str(), c.threads,
                smax::dtype_name(c.dtype));
    std::printf("data       %s, scale %g, seed %llu\n", format_dist(c.dist).c_str(), c.scale,
                static_cast<unsigned long long>(c.seed));
    std::printf("time       %s\n", format_timing(t).c_str());
    std::printf("speed      %.4f ns/elem, %.2f GB/s (%d bytes/elem)\n", ns_per_elem, gbps, bpe);
    if (c.check) {
      std::printf("check      max rel err %.3g, max abs err %.3g, worst error / bound %.3g: %s\n",
                  st.max_rel_err, st.max_abs_err, st.worst_ratio,
                  st.within_bounds() ? "within bounds" : "OUT OF BOUNDS");
      std::printf("bound      %s\n", bound_text(c.op).c_str());
      if (!st.within_bounds()) {
        std::printf("worst      element %lld: got %.9g, reference %.17g (%.3g x the bound), "
                    "%lld elements out of bounds\n",
                    static_cast<long long>(st.worst), st.worst_got, st.worst_ref,
                    st.worst_ratio, static_cast<long long>(st.violations));
      }
    }
  }
  return c.check && !st.within_bounds() ? kExitCheckFailed : kExitOk;
}

}  // namespace smax_cli

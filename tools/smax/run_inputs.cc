// tools/smax/run_inputs.cc: the registry of run_inputs.h (checked against
// smax/op_list.inc) and `smax run` for its ops: option parsing and the
// common text / JSON report.
#include "run_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "args.h"
#include "commands.h"
#include "json.h"
#include "progress.h"

namespace smax_cli {
namespace {

// The registry in the list's order; throws std::logic_error when the list's
// RUN_INPUTS / ATTENTION ops and the registry differ.
std::vector<InputsOp> in_op_list_order(std::vector<InputsOp> table) {
  std::vector<InputsOp> ordered;
  for (const smax::OpInfo& info : smax::op_list()) {
    const std::string cli = info.cli;
    const bool listed = cli == "run_inputs" || cli == "attention";
    const auto it = std::find_if(table.begin(), table.end(),
                                 [&](const InputsOp& op) { return op.name == info.name; });
    if (!listed) {
      if (it != table.end()) {
        throw std::logic_error(std::string("op ") + info.name +
                               ": tools/smax/run_inputs_*.cc runs it but smax/op_list.inc says cli " +
                               cli);
      }
      continue;
    }
    if (it == table.end()) {
      throw std::logic_error(std::string("op ") + info.name + ": smax/op_list.inc says cli " + cli +
                             " but tools/smax/run_inputs_*.cc has no entry for it");
    }
    ordered.push_back(std::move(*it));
    table.erase(it);
  }
  if (!table.empty()) {
    throw std::logic_error("op " + table.front().name +
                           ": in tools/smax/run_inputs_*.cc but not in smax/op_list.inc");
  }
  return ordered;
}

}  // namespace

const std::vector<InputsOp>& inputs_ops() {
  static const std::vector<InputsOp> ops = [] {
    std::vector<InputsOp> v;
    add_lce_inputs_ops(v);
    add_sampling_inputs_ops(v);
    add_attention_inputs_ops(v);
    return in_op_list_order(std::move(v));
  }();
  return ops;
}

const InputsOp* find_inputs_op(const std::string& name) {
  for (const InputsOp& op : inputs_ops()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

void print_run_inputs_help() {
  std::printf("\nOps with their own inputs (not one logits tensor): --shape follows the op's\n"
              "convention below; --axis, --algo, --param and --scale do not apply; f32 only.\n"
              "--check compares every output with the op's float64 oracle within its\n"
              "documented bound.\n");
  for (const InputsOp& op : inputs_ops()) {
    std::printf("  %-30s (default --shape %s)\n", op.name.c_str(), op.default_shape.c_str());
    // The convention, wrapped at 78 columns under the name.
    std::string line = "      --shape";
    std::string word;
    std::istringstream words(op.convention);
    while (words >> word) {
      if (line.size() + 1 + word.size() > 78) {
        std::printf("%s\n", line.c_str());
        line = "        " + word;
      } else {
        line += " " + word;
      }
    }
    std::printf("%s\n", line.c_str());
  }
}

std::vector<int64_t> uniform_targets(int64_t count, int64_t classes, uint64_t seed) {
  std::vector<int64_t> t(static_cast<size_t>(count));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 7;
  for (auto& v : t) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(std::max<int64_t>(classes, 1)));
  }
  return t;
}

int cmd_run_inputs(const InputsOp& op, const Args& args) {
  if (op.delegate) return op.delegate(args);
  for (const char* name : {"algo", "axis", "param", "scale"}) {
    if (args.has(name)) {
      throw UsageError(std::string("--") + name + " does not apply to op '" + op.name +
                       "' (its inputs: --shape " + op.convention + ")");
    }
  }
  if (args.has("reduction") && !op.loss) {
    throw UsageError("--reduction does not apply to op '" + op.name + "' (it is not a loss)");
  }
  if (args.has("dtype") && args.get("dtype", "") != "f32") {
    throw UsageError("--dtype: op " + op.name + " runs in f32 only from the CLI, got '" +
                     args.get("dtype", "") + "'");
  }
  InputsConfig c;
  const std::string shape_text = args.get("shape", op.default_shape);
  c.shape = parse_shape(shape_text);
  c.threads = args.has("threads") ? parse_threads(args.get("threads", "")) : smax::max_threads();
  c.dist = parse_dist(args.get("dist", "normal"));
  c.seed = parse_seed(args.get("seed", "1"));
  if (args.has("repeat")) c.timing.repeat = parse_repeat("--repeat", args.get("repeat", ""));
  if (args.has("min-time")) c.timing.min_time_s = parse_min_time(args.get("min-time", ""));
  c.check = args.has("check");
  try {
    c.reduction = smax::parse_reduction(args.get("reduction", "mean"));
  } catch (const smax::Error& e) {
    throw UsageError(std::string("--reduction: ") + e.what());
  }
  const Format format = parse_format(args.get("format", "text"));
  if (args.has("target")) apply_target(args.get("target", ""));

  const InputsResult r = op.run(c);
  const double ns = r.timing.median_s * 1e9 / static_cast<double>(std::max<int64_t>(r.elements, 1));
  if (format == Format::kJson) {
    JsonObject o;
    o.str("op", op.name)
        .raw("shape", json_int_array(c.shape))
        .str("inputs", r.inputs)
        .str("dtype", "f32")
        .str("target", smax::active_target())
        .integer("threads", c.threads)
        .str("dist", format_dist(c.dist))
        .integer("seed", static_cast<int64_t>(c.seed));
    if (op.loss) o.str("reduction", smax::reduction_name(c.reduction));
    o.integer("elements", r.elements).str("elements_are", r.per);
    json_timing(o, r.timing).num("ns_per_elem", ns);
    if (c.check) {
      o.num("max_abs_err", r.st.max_abs_err)
          .num("worst_err_over_bound", r.st.worst_ratio)
          .integer("violations", r.st.violations)
          .boolean("within_bounds", r.st.within_bounds());
    } else {
      o.null("max_abs_err").null("worst_err_over_bound").null("violations").null("within_bounds");
    }
    o.str("bound", r.bound).str("version", smax::version());
    std::printf("%s\n", o.pretty().c_str());
  } else {
    std::printf("op         %s (%s), shape %s\n", op.name.c_str(), op.summary.c_str(),
                format_shape(c.shape).c_str());
    std::printf("inputs     %s\n", r.inputs.c_str());
    if (op.loss) std::printf("reduction  %s\n", smax::reduction_name(c.reduction));
    std::printf("target     %s, threads %d, dtype f32\n", smax::active_target().c_str(), c.threads);
    std::printf("data       %s, seed %llu\n", format_dist(c.dist).c_str(),
                static_cast<unsigned long long>(c.seed));
    std::printf("time       %s\n", format_timing(r.timing).c_str());
    std::printf("speed      %.4f ns/%s (%lld of them)\n", ns, r.per.c_str(),
                static_cast<long long>(r.elements));
    if (c.check) {
      std::printf("check      max abs err %.3g, worst error / bound %.3g: %s\n", r.st.max_abs_err,
                  r.st.worst_ratio, r.st.within_bounds() ? "within bounds" : "OUT OF BOUNDS");
      std::printf("bound      %s\n", r.bound.c_str());
      if (!r.st.within_bounds()) {
        std::printf("worst      output %lld: got %.9g, reference %.17g (%.3g x the bound), %lld "
                    "outputs out of bounds\n",
                    static_cast<long long>(r.st.worst), r.st.worst_got, r.st.worst_ref,
                    r.st.worst_ratio, static_cast<long long>(r.st.violations));
      }
    }
  }
  return c.check && !r.st.within_bounds() ? kExitCheckFailed : kExitOk;
}

}  // namespace smax_cli

// tools/smax/cmd_info_ops.cc: `smax info --ops` - every op `smax run --op`
// accepts, with its parameters (name, type, default, meaning).
//
// Text: one line per op (name, flags, summary), then one line per parameter.
// JSON: {"version", "ops": [{"name", "family", "summary", "backward", "loss",
// "algo", "check", "params": [{"name", "type", "default", "default_text",
// "doc"[, "choices"]}]}]} where default_text is the default as the CLI prints
// it ("1e-06", "10", "true")
// where family is "softmax" (the ops that take --algo), "table"
// (testing/op_table.h: one logits tensor) or "inputs" (run_inputs.h: the
// op's own --shape convention, in "shape_convention"), loss means the op
// takes --reduction and check that --check is offered; "example_args" is a
// small run of the op (`smax run --op NAME ARGS...`; the cli.every_op
// tests run it with --check). Every op of smax/op_list.inc that the CLI
// runs is listed.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "check.h"
#include "commands.h"
#include "json.h"
#include "op_table.h"
#include "run_inputs.h"
#include "smax/smax.h"

namespace smax_cli {
namespace {

// A small run of every logits op: an odd shape over a non-last axis.
constexpr const char* kLogitsExample = R"(["--shape", "3x333x5", "--axis", "1"])";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string params_json(const std::vector<ExtParam>& params) {
  std::string out = "[";
  for (size_t i = 0; i < params.size(); ++i) {
    const ExtParam& p = params[i];
    JsonObject o;
    o.str("name", p.name)
        .str("type", param_type_name(p.type))
        .raw("default", json_param(p, p.fallback))
        .str("default_text", format_param(p, p.fallback))
        .str("doc", p.doc);
    if (!p.choices.empty()) {
      std::string c = "[";
      for (size_t j = 0; j < p.choices.size(); ++j) {
        c += (j ? ", " : "") + json_param(p, p.choices[j]);
      }
      o.raw("choices", c + "]");
    }
    out += (i ? ", " : "") + o.compact();
  }
  return out + "]";
}

}  // namespace

int cmd_info_ops(bool json) {
  if (json) {
    std::vector<std::string> lines;
    for (Op op : softmax_family()) {
      const std::string name = op_name(op);
      JsonObject o;
      o.str("name", name)
          .str("family", "softmax")
          .str("summary", op_summary(op))
          .boolean("backward", ends_with(name, "_backward"))
          .boolean("loss", false)
          .boolean("algo", true)
          .boolean("check", true)
          .raw("params", "[]")
          .raw("example_args", kLogitsExample);
      lines.push_back(o.compact());
    }
    for (const ExtOp& op : ext_ops()) {
      JsonObject o;
      o.str("name", op.name)
          .str("family", "table")
          .str("summary", op.summary)
          .boolean("backward", op.needs_dy)
          .boolean("loss", is_loss(op))
          .boolean("algo", false)
          .boolean("check", static_cast<bool>(op.reference))
          .raw("params", params_json(op.params))
          .raw("example_args", kLogitsExample);
      lines.push_back(o.compact());
    }
    for (const InputsOp& op : inputs_ops()) {
      JsonObject o;
      o.str("name", op.name)
          .str("family", "inputs")
          .str("summary", op.summary)
          .boolean("backward", op.name.find("_backward") != std::string::npos ||
                                   op.name.find("_fused") != std::string::npos)
          .boolean("loss", op.loss)
          .boolean("algo", false)
          .boolean("check", true)
          .raw("params", "[]")
          .str("shape_convention", op.convention)
          .raw("example_args", json_string_array({"--shape", op.example_shape}));
      lines.push_back(o.compact());
    }
    std::string ops = "[\n";
    for (size_t i = 0; i < lines.size(); ++i) {
      ops += "    " + lines[i] + (i + 1 < lines.size() ? ",\n" : "\n");
    }
    JsonObject out;
    out.str("version", smax::version()).raw("ops", ops + "  ]");
    std::printf("%s\n", out.pretty().c_str());
    return kExitOk;
  }
  std::printf("Every op of `smax run --op OP`. Parameters: --param NAME=VALUE[,NAME=VALUE]\n"
              "(shown with their defaults and types). [loss]: takes --reduction mean|sum|none.\n"
              "[no --check]: no float64 oracle.\n\n");
  std::printf("softmax family (takes --algo; no parameters):\n");
  for (Op op : softmax_family()) std::printf("  %-34s %s\n", op_name(op), op_summary(op));
  std::printf("\nnormalisers, losses and samplers:\n");
  for (const ExtOp& op : ext_ops()) {
    std::string name = op.name;
    if (is_loss(op)) name += " [loss]";
    if (!op.reference) name += " [no --check]";
    std::printf("  %-34s %s\n", name.c_str(), op.summary.c_str());
    for (const ExtParam& p : op.params) {
      const std::string nv = p.name + "=" + format_param(p, p.fallback);
      std::printf("      %-22s %-5s %s\n", nv.c_str(), param_type_name(p.type), p.doc.c_str());
    }
  }
  std::printf("\nops with their own inputs (--shape in the op's convention; no --axis, --algo):\n");
  for (const InputsOp& op : inputs_ops()) {
    std::string name = op.name;
    if (op.loss) name += " [loss]";
    std::printf("  %-34s %s\n", name.c_str(), op.summary.c_str());
    std::printf("      --shape %s\n", op.convention.c_str());
  }
  return kExitOk;
}

}  // namespace smax_cli

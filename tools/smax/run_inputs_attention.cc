// tools/smax/run_inputs_attention.cc: `smax run --op attention` and
// `smax run --op attention_backward` (include/smax/attention.h), run by
// `smax attention` itself (cmd_attention.cc), so the two commands give the
// same results and checks.
//
// --shape BxHxLqxLkxD[xDv] (or with commas): q [B, H, Lq, D], k [B, H, Lk, D],
// v [B, H, Lk, Dv], softmax normaliser, no mask; --check compares with the
// float64 oracle (src/reference/attention.h) within the header's bound.
// The options `smax run` shares with `smax attention` (--shape, --threads,
// --target, --dist, --seed, --repeat, --min-time, --check, --format,
// --dtype, --scale) pass through; `smax attention` has the rest (GQA,
// causal masks, softcap, the other normalisers, paged KV caches).
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "run_inputs.h"

namespace smax_cli {
namespace {

int run_attention(const Args& args, bool backward, const std::string& name) {
  for (const char* opt : {"algo", "axis", "param", "reduction"}) {
    if (args.has(opt)) {
      throw UsageError(std::string("--") + opt + " does not apply to op '" + name +
                       "' (its inputs: --shape BxHxLqxLkxD[xDv]; `smax attention --help` has "
                       "its other options)");
    }
  }
  std::vector<std::string> words = {"smax", "attention"};
  for (const char* opt : {"shape", "threads", "target", "dist", "seed", "repeat", "min-time",
                          "format", "dtype", "scale"}) {
    if (args.has(opt)) {
      words.push_back(std::string("--") + opt);
      words.push_back(args.get(opt, ""));
    }
  }
  if (!args.has("shape")) {
    words.push_back("--shape");
    words.push_back("1,8,1024,1024,64");
  }
  if (args.has("check")) words.push_back("--check");
  if (backward) words.push_back("--backward");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return cmd_attention(static_cast<int>(words.size()), argv.data(), 2);
}

}  // namespace

void add_attention_inputs_ops(std::vector<InputsOp>& ops) {
  for (const bool backward : {false, true}) {
    InputsOp op;
    op.name = backward ? "attention_backward" : "attention";
    op.summary = backward ? "gradients dq, dk, dv of attention (smax attention --backward)"
                          : "fused attention softmax(q k^T scale) v (smax attention)";
    op.convention = "BxHxLqxLkxD[xDv]: q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv]"
                    " (`smax attention` for GQA, masks, other normalisers)";
    op.default_shape = "1x8x1024x1024x64";
    op.example_shape = "1x2x16x16x8";
    const std::string n = op.name;
    op.delegate = [backward, n](const Args& args) { return run_attention(args, backward, n); };
    ops.push_back(std::move(op));
  }
}

}  // namespace smax_cli

// tools/smax/run_inputs.h: `smax run --op NAME` for the ops of
// smax/op_list.inc whose inputs are not one logits tensor (cli RUN_INPUTS:
// linear_cross_entropy*, gumbel_noise, gumbel_softmax_backward,
// sampling_filter, soft_nms; and cli ATTENTION: attention, attention_backward).
// Each declares its own --shape convention (printed by `smax run --help`
// and `smax info --ops`), builds its inputs, times the call and, with
// --check, compares every output with its float64 oracle
// (src/reference/) within the op's documented bound (the op's public
// header), exiting kExitCheckFailed (1) on a violation.
//
// The registry is checked against smax/op_list.inc at first use: every op
// the list marks RUN_INPUTS or ATTENTION has an entry here and no other op
// does (a mismatch throws std::logic_error naming the op, so every
// `smax run` and every cli test fails).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "data.h"
#include "smax/smax.h"
#include "timing.h"

namespace smax_cli {

class Args;

/// The options of `smax run` an inputs op sees, parsed.
struct InputsConfig {
  std::vector<int64_t> shape;  ///< --shape, in the op's own convention
  int threads = 0;
  Dist dist;
  uint64_t seed = 1;
  bool check = false;
  smax::Reduction reduction = smax::Reduction::kMean;  ///< losses only
  TimingConfig timing;
};

/// What a run measured and found, for the common report.
struct InputsResult {
  std::string inputs;   ///< "hidden [4, 16], weight [50, 16], targets [4]"
  Timing timing;
  int64_t elements = 0;  ///< the count ns/elem divides by (stated in `per`)
  std::string per;       ///< "logit" / "score" ...
  ErrorStats st;         ///< filled with --check
  std::string bound;     ///< the bound --check applied, in words
};

struct InputsOp {
  std::string name;
  std::string summary;
  /// The --shape convention: "NxHxV: hidden [N, H], weight [V, H], targets [N]".
  std::string convention;
  std::string default_shape;  ///< --shape when absent
  std::string example_shape;  ///< a small shape (the cli.every_op tests run it)
  bool loss = false;          ///< takes --reduction
  /// Runs the op (with --check: checks it); null when `delegate` is set.
  std::function<InputsResult(const InputsConfig&)> run;
  /// Runs the whole command itself (attention: `smax attention`); returns
  /// the exit status.
  std::function<int(const Args&)> delegate;
};

/// Every inputs op, in smax/op_list.inc's order (validated against it).
const std::vector<InputsOp>& inputs_ops();
/// nullptr when `name` is not an inputs op.
const InputsOp* find_inputs_op(const std::string& name);

/// `smax run --op NAME` for an inputs op (the options not in its
/// convention, --algo, --axis, --param, --scale, a --dtype other than f32,
/// are refused with a message naming them).
int cmd_run_inputs(const InputsOp& op, const Args& args);

/// The end of `smax run --help`: each inputs op with its --shape
/// convention, from the registry.
void print_run_inputs_help();

// Families register their ops here (run_inputs_*.cc).
void add_lce_inputs_ops(std::vector<InputsOp>& ops);
void add_attention_inputs_ops(std::vector<InputsOp>& ops);
void add_sampling_inputs_ops(std::vector<InputsOp>& ops);

/// Targets uniform over [0, classes), the op table's generator (testing/op_table.cc).
std::vector<int64_t> uniform_targets(int64_t count, int64_t classes, uint64_t seed);

}  // namespace smax_cli

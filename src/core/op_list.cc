// src/core/op_list.cc: smax::op_list() and find_op(), generated from
// smax/op_list.inc (the one list of ops).
#include <string_view>
#include <vector>

#include "smax/runtime.h"

namespace smax {

const std::vector<OpInfo>& op_list() {
  static const std::vector<OpInfo> ops = {
#define SMAX_OP_LOWER_SOFTMAX "softmax"
#define SMAX_OP_LOWER_NORMALIZERS "normalizers"
#define SMAX_OP_LOWER_LOSSES "losses"
#define SMAX_OP_LOWER_SAMPLING "sampling"
#define SMAX_OP_LOWER_ATTENTION "attention"
#define SMAX_OP_LOWER_QUANTIZED "quantized"
#define SMAX_OP_LOWER_DIFF "diff"
#define SMAX_OP_LOWER_NODIFF "nodiff"
#define SMAX_OP_LOWER_BACKWARD "backward"
#define SMAX_OP_LOWER_FUSED "fused"
#define SMAX_OP_LOWER_RUN "run"
#define SMAX_OP_LOWER_RUN_UNCHECKED "run_unchecked"
#define SMAX_OP_LOWER_RUN_INPUTS "run_inputs"
#define SMAX_OP_LOWER_NONE "none"
#define SMAX_OP(name, group, kind, cli) \
  OpInfo{#name, SMAX_OP_LOWER_##group, SMAX_OP_LOWER_##kind, SMAX_OP_LOWER_##cli},
#include "smax/op_list.inc"
  };
  return ops;
}

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& op : op_list()) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

}  // namespace smax

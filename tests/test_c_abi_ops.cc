// tests/test_c_abi_ops.cc: every op of `smax run`'s table
// (testing/op_table.h) through the C ABI (ExtOp::c_run, include/smax/c/smax.h)
// against its C++ call (ExtOp::run), on the same inputs:
//  * a call the C++ function accepts gives the same bits through C;
//  * a call it rejects (each invalid value of each parameter, from
//    ExtParam::fuzz.invalid; a bad axis, scale or temperature) gives the
//    same status and message through C, and neither writes its outputs.
// Every table op must have a c_run, so a new op's C function is checked
// here without a hand-written C test. The ops outside the table (the
// softmax family, linear cross-entropy, attention, soft-NMS, ...) and the C
// ABI's own rules (NULL pointers, struct_size, dtypes) are tested in C by
// tests/c_api/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "op_table.h"
#include "typed_call.h"
#include "smax/c/smax.h"
#include "smax/error.h"

namespace {

using smax_cli::ExtCall;
using smax_cli::ExtInstance;
using smax_cli::ExtOp;

constexpr uint32_t kSentinelBits = 0x7fc0beefu;  // a NaN no op writes
constexpr int64_t kSentinelIndex = -777;

// What one call left behind.
struct Outcome {
  smax_status status = SMAX_STATUS_OK;
  std::string message;
  std::vector<uint32_t> out_bits;
  std::vector<int64_t> out_index;
};

void fill_sentinels(ExtInstance& inst) {
  float nan;
  std::memcpy(&nan, &kSentinelBits, sizeof nan);
  std::fill(inst.out.begin(), inst.out.end(), nan);
  std::fill(inst.out_index.begin(), inst.out_index.end(), kSentinelIndex);
}

void record_outputs(const ExtInstance& inst, Outcome& o) {
  o.out_bits.resize(inst.out.size());
  if (!inst.out.empty()) std::memcpy(o.out_bits.data(), inst.out.data(), inst.out.size() * sizeof(float));
  o.out_index = inst.out_index;
}

bool outputs_untouched(const Outcome& o) {
  for (uint32_t b : o.out_bits) {
    if (b != kSentinelBits) return false;
  }
  for (int64_t i : o.out_index) {
    if (i != kSentinelIndex) return false;
  }
  return true;
}

Outcome run_cpp(const ExtOp& op, ExtInstance& inst) {
  fill_sentinels(inst);
  Outcome o;
  try {
    op.run(inst.call);
  } catch (const smax::Error& e) {
    o.status = static_cast<smax_status>(static_cast<int>(e.status()));
    o.message = e.what();
  }
  record_outputs(inst, o);
  return o;
}

Outcome run_c(const ExtOp& op, ExtInstance& inst) {
  fill_sentinels(inst);
  Outcome o;
  const std::unique_ptr<smax_cli::CCall> k = smax_cli::c_call_of(inst.call);
  o.status = op.c_run(inst.call, *k);
  if (o.status != SMAX_STATUS_OK) o.message = smax_last_error();
  record_outputs(inst, o);
  return o;
}

// The C++ and the C call of `op` on `inst` agree; `what` names the case.
void expect_same(const ExtOp& op, ExtInstance& inst, const std::string& what) {
  SCOPED_TRACE(op.name + ": " + what);
  const Outcome cpp = run_cpp(op, inst);
  const Outcome c = run_c(op, inst);
  ASSERT_EQ(c.status, cpp.status) << "C: " << c.message << "\nC++: " << cpp.message;
  if (cpp.status == SMAX_STATUS_OK) {
    EXPECT_EQ(c.out_bits, cpp.out_bits) << "the C ABI's output differs from the C++ call's";
    EXPECT_EQ(c.out_index, cpp.out_index);
  } else {
    EXPECT_EQ(c.message, cpp.message);
    EXPECT_TRUE(outputs_untouched(cpp)) << "the C++ call wrote its output before failing";
    EXPECT_TRUE(outputs_untouched(c)) << "the C call wrote its output before failing";
  }
}

// One instance of `op` with its default parameters on a 4 x 64 input (the
// sampler's and top-k's default k fits the row).
std::unique_ptr<ExtInstance> instance_of(const ExtOp& op, smax::Reduction reduction) {
  ExtCall call;
  call.params = smax_cli::parse_params(op, "");
  call.loss.reduction = reduction;
  return smax_cli::make_instance(op, {4, 64}, call, smax_cli::Dist{}, 7);
}

TEST(CAbiOps, EveryTableOpHasACCall) {
  std::vector<std::string> missing;
  for (const ExtOp& op : smax_cli::ext_ops()) {
    if (!op.c_run) missing.push_back(op.name);
  }
  EXPECT_TRUE(missing.empty()) << "ops without ExtOp::c_run in testing/table_*.cc: "
                               << ::testing::PrintToString(missing);
}

TEST(CAbiOps, SameBitsAsCpp) {
  for (const ExtOp& op : smax_cli::ext_ops()) {
    if (!op.c_run) continue;
    std::vector<smax::Reduction> reductions = {smax::Reduction::kMean};
    if (smax_cli::is_loss(op)) reductions = {smax::Reduction::kMean, smax::Reduction::kSum, smax::Reduction::kNone};
    for (smax::Reduction r : reductions) {
      auto inst = instance_of(op, r);
      expect_same(op, *inst, std::string("defaults, reduction ") + smax::reduction_name(r));
    }
  }
}

// The same through views of each other storage dtype (docs/dtypes.md): the
// C ABI passes smax_tensor's dtype through, so the bits agree there too.
TEST(CAbiOps, SameBitsAsCppInEveryDtype) {
  for (const ExtOp& op : smax_cli::ext_ops()) {
    if (!op.c_run || !smax_cli::takes_floating_dtypes(op)) continue;
    for (smax::DType dtype : {smax::DType::kF64, smax::DType::kF16, smax::DType::kBF16}) {
      SCOPED_TRACE(op.name + " " + smax::dtype_name(dtype));
      auto inst = instance_of(op, smax::Reduction::kMean);
      auto typed = smax_cli::make_typed_call(*inst, dtype);
      const size_t bytes = typed->out.size();
      std::fill(typed->out.begin(), typed->out.end(), 0xa5);  // what neither call writes stays
      try {
        op.run(typed->call);
      } catch (const smax::Error& e) {
        ADD_FAILURE() << e.what();
        continue;
      }
      const std::vector<unsigned char> cpp(typed->out.begin(), typed->out.begin() + bytes);
      const std::vector<int64_t> cpp_index = inst->out_index;
      std::fill(typed->out.begin(), typed->out.end(), 0xa5);
      const std::unique_ptr<smax_cli::CCall> k = smax_cli::c_call_of(typed->call);
      ASSERT_EQ(op.c_run(typed->call, *k), SMAX_STATUS_OK) << smax_last_error();
      EXPECT_TRUE(std::equal(cpp.begin(), cpp.end(), typed->out.begin()))
          << "the C ABI's output differs from the C++ call's";
      EXPECT_EQ(inst->out_index, cpp_index);
    }
  }
}

TEST(CAbiOps, SameErrorsAsCpp) {
  for (const ExtOp& op : smax_cli::ext_ops()) {
    if (!op.c_run) continue;
    auto inst = instance_of(op, smax::Reduction::kMean);
    const ExtCall defaults = inst->call;
    for (const smax_cli::ExtParam& p : op.params) {
      for (double v : p.fuzz.invalid) {
        inst->call = defaults;
        inst->call.params[p.name] = v;
        expect_same(op, *inst, p.name + "=" + std::to_string(v));
      }
    }
    inst->call = defaults;
    inst->call.options.axis = 2;
    expect_same(op, *inst, "axis=2");
    inst->call = defaults;
    inst->call.options.scale = NAN;
    expect_same(op, *inst, "scale=nan");
    inst->call = defaults;
    inst->call.options.temperature = 0.0f;
    expect_same(op, *inst, "temperature=0");
  }
}

}  // namespace

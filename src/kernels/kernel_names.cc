// src/kernels/kernel_names.cc: kernel_name(op, algorithm), in the grammar
// `<dtype>_<family>__<target>_<tags>` (docs/design.md, "Names").
//
// The target is the one HWY_DYNAMIC_DISPATCH picks now (Highway 1.0.3 has no
// DispatchedTarget(), so a dispatched function returns its own HWY_TARGET).
// Tags describe what the code does:
//   rr2  Cody-Waite range reduction with a hi/lo ln2 pair (exact-difference
//        or reduction of t itself, see exp-inl.h)
//   p5   degree-5 minimax polynomial
//   u4   4 vectors per loop step
//   acc2 2 f32 sum accumulators (blocked into float64)
//   ts   TwoSum exact difference t - m in every exp (online, columns)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernel_names.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cctype>
#include <string>

#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
int64_t ThisTargetImpl() { return HWY_TARGET; }
}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(ThisTargetImpl);

namespace {
const char* AlgorithmTag(Algorithm a) {
  switch (a) {
    case Algorithm::kThreePassReload:
      return "reload";
    case Algorithm::kThreePassRecompute:
      return "recompute";
    case Algorithm::kTwoPass:
      return "twopass";
    case Algorithm::kOnline:
      return "online";
    case Algorithm::kAuto:
    default:
      return "auto";
  }
}
}  // namespace

std::string kernel_name(const std::string& op, Algorithm algorithm) {
  std::string target = hwy::TargetName(HWY_DYNAMIC_DISPATCH(ThisTargetImpl)());
  for (char& ch : target) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string family;
  std::string tags;
  if (op == "softmax" || op == "log_softmax" || op == "logsumexp") {
    family = op + "_" + AlgorithmTag(algorithm);
    tags = algorithm == Algorithm::kOnline ? "rr2_p5_u4_acc2_ts" : "rr2_p5_u4_acc2";
  } else if (op == "softmax_backward" || op == "log_softmax_backward") {
    family = op;
    tags = op == "log_softmax_backward" ? "rr2_p5_u2_f64acc2" : "u2_f64acc2";
  } else if (op == "softmax_columns" || op == "log_softmax_columns" ||
             op == "logsumexp_columns") {
    family = op;
    tags = "rr2_p5_ts_u1_acc1";
  } else {
    family = op;
    tags = "unknown";
  }
  return "f32_" + family + "__" + target + "_" + tags;
}

}  // namespace smax::kernels
#endif  // HWY_ONCE

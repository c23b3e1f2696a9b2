// smax/loss.h: options shared by every loss (cross-entropy, sparsemax /
// entmax / sparse-softmax / stablemax losses, z-losses).
//
// PyTorch conventions (torch.nn.functional.cross_entropy):
//  * logits `src` [..., C] over `SoftmaxOptions::axis` (the class axis),
//    class-index targets (DType::kI64) with src's shape without that axis;
//  * a target equal to `ignore_index` contributes 0 loss, 0 weight and 0
//    gradient; any other target outside [0, C) is an error (nothing written);
//  * `weight` (f32 [C]) scales each row's loss by weight[target];
//  * reduction: kNone -> one loss per row (dst has the targets' shape);
//    kSum -> sum of weighted losses; kMean -> sum / sum of the weights of the
//    non-ignored rows (dst: one element, any shape with numel 1, e.g. rank 0).
//    A zero denominator under kMean (every row ignored, or every counted
//    row's weight 0): loss NaN like PyTorch, or 0 with
//    `empty_mean = EmptyMean::kZero`. The gradient then follows PyTorch's
//    w / sum w = 0 / 0: NaN on every non-ignored row (kNan; masked entries
//    stay exactly 0), 0 with kZero; ignored rows get 0 either way.
//  * backward takes `dloss` with dst's shape and returns dsrc.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "smax/tensor.h"

namespace smax {

enum class Reduction : int { kNone = 0, kMean = 1, kSum = 2 };

/// What a mean over zero non-ignored rows (total weight 0) gives.
enum class EmptyMean : int {
  kNan = 0,   ///< 0/0 like PyTorch: NaN loss, NaN gradient on non-ignored rows
  kZero = 1,  ///< 0 (and zero gradient)
};

struct LossOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::kMean;
  std::optional<TensorView> weight;  ///< f32 [C] class weights (none = all 1)
  EmptyMean empty_mean = EmptyMean::kNan;
};

/// "none" / "mean" / "sum" (throws smax::Error naming the bad value).
Reduction parse_reduction(std::string_view name);
const char* reduction_name(Reduction reduction) noexcept;

}  // namespace smax

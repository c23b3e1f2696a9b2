// smax/detection.h: Soft-NMS for object detection (the score decay of
// overlapping boxes). Not a row-wise op: its own contract is stated below.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "smax/tensor.h"

namespace smax {

// ---------------------------------------------------------------------------
// Soft-NMS (Bodla et al., ICCV 2017; bharatsingh430/soft-nms)
// ---------------------------------------------------------------------------

enum class SoftNmsMethod : int {
  kHard = 0,      ///< classic NMS: iou > Nt -> score 0
  kLinear = 1,    ///< iou > Nt -> score * (1 - iou)
  kGaussian = 2,  ///< score * exp(-iou^2 / sigma) for every remaining box
};

struct SoftNmsOptions {
  SoftNmsMethod method = SoftNmsMethod::kLinear;  ///< mmcv's default
  float sigma = 0.5f;            ///< gaussian width; finite and > 0
  float iou_threshold = 0.3f;    ///< Nt (hard, linear); finite, in [0, 1]
  float score_threshold = 0.001f;  ///< boxes whose score falls below are dropped; finite
  bool plus_one = false;  ///< pixel convention: widths x2 - x1 + 1 (original code)
};

struct SoftNmsResult {
  std::vector<int64_t> indices;  ///< kept boxes (indices into the input), in selection order
  std::vector<float> scores;     ///< their decayed scores (the score at selection), rounded to f32
};

/// Greedy Soft-NMS over `boxes` ([N, 4] as x1, y1, x2, y2, any strides)
/// and `scores` ([N]), each f32, f64, f16 or bf16 (read exactly: f64
/// boxes and scores are not rounded to f32): repeatedly select the remaining box with the
/// highest current score (ties: lower index), then decay every other
/// remaining box by the IoU with it, and drop boxes whose score is below
/// score_threshold (boxes already below it at the start are dropped too;
/// the original code only drops boxes it decayed).
/// IoU = inter / (area_a + area_b - inter), widths x2 - x1 (+1 with
/// plus_one), computed in float64; decayed scores are kept in float64 and
/// rounded once on output (to f32 here; to kept_scores' dtype in the view
/// form, so f64 kept scores are the float64 values). Zero-area boxes are valid (IoU 0 when the
/// union is 0). Errors: x2 < x1 or y2 < y1 (x2 < x1 - 1 with plus_one), a
/// non-finite coordinate or score, bad options or shapes. O(N^2).
SoftNmsResult soft_nms(const TensorView& boxes, const TensorView& scores,
                       const SoftNmsOptions& options = {});

/// Same, into caller views of capacity N: `indices` (i64 [N]) and
/// `kept_scores` ([N], any floating dtype) get the kept boxes in their first `count` entries
/// (returned); the rest are set to -1 and 0.
int64_t soft_nms(const TensorView& boxes, const TensorView& scores, const TensorView& indices,
                 const TensorView& kept_scores, const SoftNmsOptions& options = {});

/// "hard" / "linear" / "gaussian" (throws smax::Error naming the bad value).
SoftNmsMethod parse_soft_nms_method(std::string_view name);
const char* soft_nms_method_name(SoftNmsMethod method) noexcept;

}  // namespace smax

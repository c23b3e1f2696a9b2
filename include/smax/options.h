// smax/options.h: options shared by the softmax family.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "smax/tensor.h"

namespace smax {

/// How the row normaliser is computed. All algorithms meet the same error
/// bounds; they differ in passes over memory and exps per element (see
/// docs/design.md for the costs and the measured `kAuto` thresholds).
enum class Algorithm : int {
  kAuto = 0,                ///< chosen from row length and cache sizes
  kThreePassReload = 1,     ///< max; exp -> dst and sum; dst *= 1/sum
  kThreePassRecompute = 2,  ///< max; sum exp; dst = exp * (1/sum)
  kTwoPass = 3,             ///< Dukhan & Ablavatski (mantissa, exponent) sum; no max pass
  kOnline = 4,              ///< Milakov & Gimelshein running (max, sum)
};

/// What an all-masked row (every entry masked or -inf) produces.
enum class EmptyRow : int {
  kZero = 0,  ///< softmax 0, log_softmax -inf, logsumexp -inf, gradient 0 (SDPA/FlashAttention)
  kNan = 1,   ///< NaN everywhere (torch.softmax behaviour)
};

/// Options of softmax, log_softmax, logsumexp and their backward passes.
///
/// The logits of a row are `t_i = x_i * scale / temperature + additive_mask_i`,
/// and `t_i = -inf` where `bool_mask_i == 0` (order: scale, then mask, as in
/// the ONNX Attention spec). A bool mask replaces the logit (like
/// masked_fill), so NaN or +inf under a masked-out entry is ignored. Masks
/// broadcast to the source shape by NumPy rules: dims aligned on the right,
/// a missing or size-1 dim broadcasts.
struct SoftmaxOptions {
  int64_t axis = -1;          ///< reduced dimension; negative counts from the end
  float scale = 1.0f;         ///< multiplies the logits; finite and > 0
  float temperature = 1.0f;   ///< divides the logits; finite and > 0
  std::optional<TensorView> additive_mask;  ///< f32, added after scaling (-inf masks)
  std::optional<TensorView> bool_mask;      ///< DType::kBool, 0 = masked out
  Algorithm algorithm = Algorithm::kAuto;
  EmptyRow empty_row = EmptyRow::kZero;
  int threads = 0;  ///< 0 = smax::max_threads(); results do not depend on it
};

/// Parse "auto", "three-pass-reload", "three-pass-recompute", "two-pass",
/// "online" (throws smax::Error naming the bad value otherwise).
Algorithm parse_algorithm(std::string_view name);
const char* algorithm_name(Algorithm algorithm) noexcept;
/// Parse "zero" / "nan".
EmptyRow parse_empty_row(std::string_view name);
const char* empty_row_name(EmptyRow policy) noexcept;

}  // namespace smax

// src/kernels/cross_entropy.h: row kernels of the fused cross-entropy and the
// z-losses (src/ops/losses/cross_entropy.cc, src/ops/losses/z_loss.cc).
//
// Written once on Highway (src/kernels/cross_entropy.cc,
// src/kernels/cross_entropy_zloss.cc), dispatched per call. noexcept,
// allocation-free, one contiguous row of n >= 1 floats per call; ops
// validate. No kernel reads or writes outside [p, p + n).
//
// Logits. `x` holds u_j (the op layer applied scale and the bool mask, and
// the additive mask too when softcap is off). With softcap > 0 the kernel
// forms t_j = softcap * tanh(u_j / softcap) + mask_j (mask nullable; -inf
// and +inf u_j pass through unchanged, so masked entries stay -inf).
#pragma once

#include <cstdint>

namespace smax::kernels {

struct XentRow {
  const float* x = nullptr;     ///< u_j, n floats
  const float* mask = nullptr;  ///< additive mask after the softcap (softcap > 0 only)
  float softcap = 0.0f;         ///< 0 = off
  int64_t n = 0;
};

/// What the scan accumulates besides the online (max, sum).
struct XentScanRequest {
  /// sum_{t_j > -inf} w_j t_j and sum_{t_j > -inf} w_j (w = weight or 1):
  /// label smoothing.
  bool sums = false;
  const float* weight = nullptr;  ///< f32 [n] class weights (nullable)
  bool entropy = false;           ///< sum_j e_j (t_j - ref)
  bool argmax = false;
};

/// One read of the row: sum_j exp(t_j - ref) = d (d >= 1 unless every t is
/// -inf: then d = 0; NaN or +inf in the row: d NaN). Blocked f32 sums
/// widened to float64 (error independent of n); exp with the exact t - ref.
struct XentScan {
  float ref = 0.0f;
  double d = 0.0;
  float max = 0.0f;
  int64_t argmax = 0;   ///< first index of the max of t (of u: softcap, no mask); 0 if all -inf
  double sum_t = 0.0;   ///< sum_{t_j > -inf} w_j t_j
  double sum_w = 0.0;   ///< sum_{t_j > -inf} w_j (the count without weights)
  double sum_et = 0.0;  ///< sum_j e^(t_j - ref) (t_j - ref)
};
XentScan xent_scan(const XentRow& row, const XentScanRequest& req) noexcept;

/// Sums over a probability-target row q (t from `row`): sum q_j t_j and
/// sum q_j over t_j > -inf, sum q_j over t_j = -inf; and the same with
/// w_j q_j (weight nullable = 1). float64 accumulation.
struct XentProbSums {
  double qt = 0.0, q = 0.0, q_masked = 0.0;
  double wqt = 0.0, wq = 0.0, wq_masked = 0.0;
};
XentProbSums xent_prob_sums(const XentRow& row, const float* q, const float* weight) noexcept;

/// Gradient row:
///   dst_j = s * cap'_j * (factor * e^(t_j - shift) - w_j * (b + bq * q_j))
/// with cap'_j = 1 - tanh^2(u_j / softcap) (1 without softcap), w = weight
/// or 1, q nullable (0); dst_j = 0 where t_j = -inf. `shift` finite.
/// dst may be exactly row.x (in place: each element is read before it is
/// written); it must not overlap mask, weight or q, nor x otherwise.
/// `stream`: write dst with streaming (non-temporal) stores where the kernel
/// can (dst float-aligned, n >= 8 vectors; the kernel fences before
/// it returns); the same bits either way (core/stream_stores.h).
struct XentGrad {
  float shift = 0.0f;
  double factor = 0.0;
  float b = 0.0f;
  float bq = 0.0f;
  const float* weight = nullptr;
  const float* q = nullptr;
  float scale = 1.0f;
  bool stream = false;
};
void xent_grad(const XentRow& row, const XentGrad& g, float* dst) noexcept;

/// The indices j (ascending) whose f32 t_j, formed exactly as in the scan,
/// is >= threshold: the first min(count, cap) are written to idx; returns
/// count. (accuracy's float64 argmax with softcap and a mask.)
int64_t xent_near_max(const XentRow& row, float threshold, int64_t* idx, int64_t cap) noexcept;

/// Mean and sum of squared deviations over the entries with t_j > -inf (two
/// passes over the row, in float64). count = number of such
/// entries; NaN / +inf propagate into mean and m2.
struct SphereStats {
  double mean = 0.0;
  double m2 = 0.0;
  int64_t count = 0;
};
SphereStats sphere_stats(const float* t, int64_t n) noexcept;

/// dst_j = alpha + beta * (t_j - mean) in float64, rounded once to f32; 0
/// where t_j = -inf.
void sphere_grad(const float* t, int64_t n, double mean, double alpha, double beta,
                 float* dst) noexcept;

}  // namespace smax::kernels

// src/kernels/linear_cross_entropy.h: row kernels of the fused linear
// cross-entropy (src/ops/losses/linear_cross_entropy.cc), applied to one row of a
// GEMM tile of logits (a token's logits over one vocabulary chunk).
//
// Written once on Highway (src/kernels/linear_cross_entropy.cc), dispatched
// per call. noexcept, allocation-free, one contiguous row of n floats (n >= 0;
// n == 0 returns the empty result); ops validate. No kernel reads or writes
// outside [p, p + n).
//
// Logits of class j (the order of include/smax/linear_cross_entropy.h):
//   z_j = fl(gemm_j + bias_j)      (the GEMM result plus the bias)
//   u_j = fl(z_j * s)              (s = scale / temperature, f32)
//   t_j = softcap * tanh(u_j / softcap) when softcap > 0, else u_j
// (+-inf and NaN u_j are not capped: -inf stays "masked", +inf / NaN make
// the row NaN). lce_logits forms u in place; the scan and the gradient form
// t (and the softcap derivative) in registers from u.
#pragma once

#include <cstdint>
#include <limits>

namespace smax::kernels {

/// u_j = fl(fl(z_j + bias_j) * scale) in place. bias nullable (no add);
/// scale == 1 skips the multiply (exact).
void lce_logits(float* z, int64_t n, const float* bias, float scale) noexcept;

struct LceScanRequest {
  float softcap = 0.0f;            ///< 0 = off
  const float* weight = nullptr;   ///< class weights of the chunk (nullable = 1)
  bool sums = false;               ///< sum_{t_j > -inf} w_j t_j and sum_{t_j > -inf} w_j
  bool entropy = false;            ///< sum_j e^(t_j - ref) (t_j - ref)
  bool argmax = false;             ///< first index of the maximum
};

/// One read of the row (online max / sum, Milakov & Gimelshein, with the
/// exact t - ref of exp-inl.h's ExpDiff): sum_j e^(t_j - ref) = d, d >= 1
/// unless every t is -inf (then d = 0, ref = 0); NaN or +inf in the row: d
/// NaN. f32 block sums widened to float64 (error independent of n).
struct LceScan {
  float ref = 0.0f;
  double d = 0.0;
  float max = -std::numeric_limits<float>::infinity();  ///< max_j t_j (-inf for n == 0)
  int64_t argmax = 0;             ///< first index of the maximum (0 if all -inf)
  double sum_t = 0.0;             ///< sum_{t_j > -inf} w_j t_j
  double sum_w = 0.0;             ///< sum_{t_j > -inf} w_j
  double sum_et = 0.0;            ///< sum_j e^(t_j - ref) (t_j - ref)
};
LceScan lce_scan(const float* u, int64_t n, const LceScanRequest& req) noexcept;

/// Gradient with respect to z, in place over u:
///   dz_j = scale * cap'_j * (factor * e^(t_j - shift) - w_j * b)
/// with cap'_j = 1 - tanh^2(u_j / softcap) (1 without softcap), w = weight
/// or 1; dz_j = 0 where t_j = -inf. `shift` finite.
struct LceGrad {
  float softcap = 0.0f;
  float scale = 1.0f;
  float shift = 0.0f;
  double factor = 0.0;
  float b = 0.0f;
  const float* weight = nullptr;
};
void lce_grad(float* u, int64_t n, const LceGrad& g) noexcept;

/// acc_j += x_j in float64 (bias gradient: column sums of dz, row by row).
void lce_accumulate(const float* x, int64_t n, double* acc) noexcept;

}  // namespace smax::kernels

// src/kernels/rescaled.h: row kernels of the rescaled / rectified softmaxes
// (SSMax helpers, softpick, StableMax, the Softmax Collapse detector); see
// include/smax/rescaled.h for the math and src/kernels/rescaled.cc for the
// implementation notes.
//
// Every kernel takes one contiguous row of n >= 1 f32 logits t (already
// transformed by ops: scale, masks; -inf = masked), is noexcept and
// allocation-free, and dispatches once per call (HWY_DYNAMIC_DISPATCH).
// Outputs never alias inputs (ops guarantee it). No kernel reads or writes
// outside [p, p + n).
#pragma once

#include <cstdint>

#include "smax/options.h"

namespace smax::kernels {

// ---- SSMax helpers (the softmax itself is kernels::softmax_rows) ----------
/// Number of entries with t_i != -inf (NaN and +inf count as visible).
int64_t count_visible(const float* t, int64_t n) noexcept;
/// u_i = fl(t_i * c), except u_i = -inf where t_i = -inf and NaN where
/// t_i = +inf (for c <= 0, where -inf * c would unmask an entry).
void ssmax_logits(const float* t, int64_t n, float c, float* u) noexcept;
/// sum_i t_i y_i fl(g_i - dot) in float64 (t_i y_i exact, never overflowing
/// f32) over entries with y_i != 0.
double ssmax_ds_sum(const float* t, const float* y, const float* g, int64_t n,
                    float dot) noexcept;

// ---- softpick ---------------------------------------------------------------
/// y = softpick(t) with denominator term eps (>= 0); NaN / +inf -> NaN row,
/// all -inf -> empty_row, all visible t <= 0 -> zeros.
void softpick_row(const float* t, int64_t n, float eps, EmptyRow empty_row,
                  float* y) noexcept;
/// dx = scale * VJP of softpick at t with upstream g.
void softpick_backward_row(const float* t, const float* g, int64_t n, float eps, float scale,
                           EmptyRow empty_row, float* dx) noexcept;

// ---- StableMax ------------------------------------------------------------
void stablemax_row(const float* t, int64_t n, EmptyRow empty_row, float* y) noexcept;
void stablemax_backward_row(const float* t, const float* g, int64_t n, float scale,
                            EmptyRow empty_row, float* dx) noexcept;
/// sum_{i != exclude} s(t_i) in float64 (exclude < 0: all i). NaN if some
/// t_i is NaN, +inf if some t_i is +inf.
double stablemax_sum(const float* t, int64_t n, int64_t exclude) noexcept;
/// Cross-entropy gradient of one row with target `target` in [0, n):
/// dx_j = coef * (s_j / S) / (1 + |t_j|) for j != target and
/// dx_t = -coef * (others / S) / (1 + |t_t|), with others = sum_{j != t} s_j
/// (float64, from stablemax_sum) and S = others + s(t_target). 0 where
/// t = -inf.
void stablemax_ce_grad_row(const float* t, int64_t n, int64_t target, double others,
                           float coef, float* dx) noexcept;

// ---- Softmax Collapse -------------------------------------------------------
/// precision: 0 = f32, 1 = f16, 2 = bf16 (smax::Precision). `scratch` holds n
/// floats (used by f16 / bf16). True if the row has collapsed.
bool softmax_collapse_row(const float* t, int64_t n, int precision, float* scratch) noexcept;

/// out_i = x_i (non-negative, finite) rounded to f16 (precision 1) or bf16
/// (2) by the vector code the detector uses (exposed for tests).
void round_to_precision_row(const float* x, int64_t n, int precision, float* out) noexcept;
/// Rounds a non-negative double to f16 (precision 1) or bf16 (2) with
/// round-to-nearest-even, the format's subnormals and overflow to +inf.
double round_to_precision(double v, int precision) noexcept;

}  // namespace smax::kernels

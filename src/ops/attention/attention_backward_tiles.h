// src/ops/attention/attention_backward_tiles.h: what the two f32 backward
// drivers share (attention_backward.cc: P recomputed for full key rows, any
// normaliser; attention_backward_lse.cc: the softmax from a saved lse in
// key-block tiles, FlashAttention-2's backward).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention/attention_internal.h"

namespace smax::detail::attn {

// Per-(b, h) sums of the logit gradient dT for the learnable knobs, filled
// by the backward's tasks (each (b, h) belongs to one task, which adds its
// terms in a fixed order), reduced at the end (store_reduced).
struct KnobGrads {
  std::vector<double> sink, alibi, bias, ssmax;  // [B * H] each, when requested
  std::vector<float> logits;                     // [B, H, Lq, Lk] dT, for dattn_mask
  bool any() const {
    return !sink.empty() || !alibi.empty() || !bias.empty() || !ssmax.empty() || !logits.empty();
  }
};

// Rows [i0, i0 + bq) of the upstream gradient of the ungated output,
// fl(dout * s), s = sigmoid(gate) in f32 (kernels::attention_gate_row), into
// buf (ld = max(Dv, 1)).
Mat gated_dout(const Setup& s, const TensorView& dout, int64_t b, int64_t h, int64_t i0,
               int64_t bq, float* buf);

// A task's K and V in the panels of kernels::attention_gemm_panels, packed
// once per (batch, kv head): K^T (D x Lk), V^T (Dv x Lk) and K (Lk x D).
struct TaskPanels {
  const float* kt;
  const float* vt;
  const float* kr;
  int64_t kt_stride, vt_stride, kr_stride;
};

// True when the backward can start from options.lse (P = e^(t - lse)) and
// delta = <dO, O> from the forward's output: options.backward_from_lse, the
// softmax normaliser, an f32 lse and f32 out (ungated_out with a gate),
// 0 < D, Dv and a nonzero scale. backward_lse_task decides per task the
// rest (finite q, k and lse).
bool backward_lse_applies(const Setup& s, const TensorView& out);
// The floats of scratch backward_lse_task takes (tiles of 64 x 128: a few
// hundred KB whatever the shapes).
int64_t backward_lse_scratch_floats(const Setup& s);

// The backward of task (b, hk) from the saved lse, into dq (stored) and
// the transposed dK^T [D, ld] / dV^T [Dv, ld] accumulators (zeroed by the
// caller) and kg; K: the task's key rows [Lk, D]. Returns false, having
// written nothing but scratch, when the task does not qualify: a
// non-finite entry of k or of the task's q rows (whose masked products
// must be skipped, attention_backward.cc), or a NaN / +inf lse (a NaN row).
// The order of every sum is fixed by the shapes.
bool backward_lse_task(const Setup& s, const TensorView& out, const TensorView& dout,
                       const TensorView& dq, int64_t b, int64_t hk, const Mat& K,
                       const TaskPanels& panels, float* dK, float* dV, int64_t ld, KnobGrads& kg,
                       float* scratch);

}  // namespace smax::detail::attn

// src/ops/losses/cross_entropy_rows.h: the row functions of the f32
// cross-entropy (src/ops/losses/cross_entropy.cc), exposed for the
// vocabulary-parallel cross-entropy (src/ops/distributed/
// cross_entropy_sharded.cc), which runs the same scan and gradient on its
// shard with the row's global statistics. Nothing here changes the
// single-process op's arithmetic: grad_row is grad_row_special +
// grad_row_with with the row's own A.
//
// Everything takes the validated CeSetup (cross_entropy.h) and a row of
// Rowwise's f32 logits (RowArgs: a.in[0] holds u_j after scale and the bool
// mask, and the additive mask too unless softcap moved it to
// a.in[s.mask_input]).
#pragma once

#include <cstdint>

#include "core/loss_rows.h"
#include "core/rowwise.h"
#include "kernels/cross_entropy.h"
#include "ops/losses/cross_entropy.h"
#include "smax/losses.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::detail::ce_rows {

/// check_ce_scalars then check_loss_enums.
void check_ce_options(const char* op, const CrossEntropyOptions& ce);

/// Fills CeSetup from a Rowwise over src (adds the post-cap mask and the
/// probability targets as inputs), validating targets, weights and the
/// reduction. `shard`: a vocabulary-parallel shard (targets global in
/// [0, vocab), weights of this shard's classes; s.vocab = vocab), or {}.
/// The reducer's kMean denominator then counts only this shard's targets.
void prepare(CeSetup& s, Rowwise& rw, const LogitsSetup& ls, const TensorView& target,
             const CrossEntropyOptions& ce, ClassShard shard);

kernels::XentRow make_row(const CeSetup& s, const RowArgs& a);
/// t_j in float64 (softcap in float64, then the post-cap mask).
double logit_at(const CeSetup& s, const RowArgs& a, int64_t j);
/// d t_j / d u_j (1 without softcap).
double cap_deriv(const CeSetup& s, const RowArgs& a, int64_t j);
bool masked_at(const CeSetup& s, const RowArgs& a, int64_t j);
void fill(float* out, int64_t n, float v);
/// First index of the max of q[0, n) (n >= 1).
int64_t first_argmax(const float* q, int64_t n);
/// accuracy's argmax of the row (losses.h: of t, of u with softcap and no
/// mask, of the float64 t with softcap and a mask).
int64_t accuracy_argmax(const CeSetup& s, const RowArgs& a, const kernels::XentScan& sc);

/// The gradient row of an active row (cross_entropy.cc): g = G_r, L = LSE(t)
/// and e^(t_j - shift) * inv_d = p_j; sum_w and ps as the scan's (ps null:
/// computed here). `out` may be exactly a.in[0].
void grad_row(const CeSetup& s, const RowArgs& a, double g, double L, double shift, double inv_d,
              double sum_w, const kernels::XentProbSums* ps_in, float* out);
/// The special rows of grad_row: L = -inf (every logit masked: empty_row's
/// 0 or NaN), a NaN row or a NaN g (NaN, masked entries 0). True when it
/// wrote the row.
bool grad_row_special(const CeSetup& s, const RowArgs& a, double g, double L, float* out);
/// The rest of grad_row with A (the p_j coefficient), the target's index in
/// this row `y` (-1: none here) and weight wy given.
void grad_row_with(const CeSetup& s, const RowArgs& a, double g, double shift, double inv_d,
                   double A, int64_t y, double wy, float* out);

/// grad is exactly src (same data, shape, strides and dtype).
bool same_view(const TensorView& a, const TensorView& b);

/// The validated state a pass starts from, built in this order: the logits
/// setup (softcap moves the additive mask), a Rowwise over src with those
/// options, then CeSetup via prepare(). Callers check the options first.
/// Not copyable or movable: rw refers to ls.options.
struct Pass {
  LogitsSetup ls;
  Rowwise rw;
  CeSetup s;
  Pass(const char* op, const TensorView& src, const TensorView& target,
       const CrossEntropyOptions& ce, const SoftmaxOptions& options, ClassShard shard = {})
      : ls(setup_logits(op, src, options, ce.softcap)),
        rw(op, src, "src", /*src_is_logits=*/true, ls.options) {
    s.op = op;
    s.empty_row = options.empty_row;
    prepare(s, rw, ls, target, ce, shard);
  }
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;
};

}  // namespace smax::detail::ce_rows

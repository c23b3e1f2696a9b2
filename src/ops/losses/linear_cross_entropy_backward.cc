// src/ops/losses/linear_cross_entropy_backward.cc: linear_cross_entropy_backward and
// linear_cross_entropy_fused (include/smax/linear_cross_entropy.h); the tiling
// and the pieces shared with the forward are described in linear_cross_entropy.cc.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "kernels/linear_cross_entropy.h"
#include "ops/losses/cross_entropy.h"
#include "core/errors.h"
#include "core/gemm.h"
#include "core/internal.h"
#include "ops/losses/linear_cross_entropy_tiles.h"
#include "core/loss_rows.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/linear_cross_entropy.h"
#include "smax/runtime.h"

namespace smax {

namespace detail {
namespace {

using namespace lce;

// dz of one row in place over u (u formed by lce_logits); L the row's LSE,
// sum_w its smoothing weight sum, g its upstream factor G_r.
void grad_row(const Setup& s, float* row, int64_t vc, int64_t v0, int64_t gr, double L,
              double sum_w, double g) {
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  const float ninf = -std::numeric_limits<float>::infinity();
  if (!s.active(gr)) {
    std::fill(row, row + vc, 0.0f);
    return;
  }
  if (L == -kInf) {  // every logit -inf
    std::fill(row, row + vc, s.empty_row == EmptyRow::kNan ? nanf : 0.0f);
    return;
  }
  if (!std::isfinite(L) || std::isnan(g)) {  // NaN row or G_r (0 / 0 mean); masked entries stay 0
    for (int64_t j = 0; j < vc; ++j) row[j] = row[j] == ninf ? 0.0f : nanf;
    return;
  }
  const double C = static_cast<double>(s.V);
  const int64_t y = s.lr->target(gr);
  const double wy = s.lr->weight(gr);
  double A = (1.0 - s.a) * wy + 2.0 * s.zs * wy * L;
  if (s.a > 0.0) A += s.a / C * sum_w;
  kernels::LceGrad k;
  k.softcap = s.cap;
  k.scale = s.scale;
  k.shift = static_cast<float>(L);
  // p_j = e^(t_j - shift) * e^(shift - L): the f32 rounding of L is folded
  // into the factor in float64.
  k.factor = g * A * std::exp(static_cast<double>(k.shift) - L);
  k.b = static_cast<float>(g * s.a / C);
  k.weight = s.cw(v0);
  const bool has_y = y >= v0 && y < v0 + vc;
  const float uy = has_y ? row[y - v0] : 0.0f;
  kernels::lce_grad(row, vc, k);
  if (has_y && uy != ninf) {
    const double fix = static_cast<double>(s.scale) * cap_deriv(s, uy) * g * (1.0 - s.a) * wy;
    row[y - v0] = static_cast<float>(static_cast<double>(row[y - v0]) - fix);
  }
}

// Where the gradient GEMMs write (the outputs or temporaries).
struct GradTargets {
  float* dh = nullptr;
  int64_t dh_ld = 1, dh_rs = 1;  // leading dimension, row step
  float* dw = nullptr;
  int64_t dw_ld = 1, dw_rs = 1;
  double* db = nullptr;          // float64 column sums (nullable)
};

// After a tile holds dz: dbias_v += column sums, dhidden_c (+)= dz · W_v,
// dweight_v (+)= dz^T · H_c.
void grad_tile_tail(const Setup& s, Work& w, const Operand& hc, const Operand& wv, int64_t n0,
                    int64_t nc, int64_t v0, int64_t vc, const GradTargets& t) {
  if (t.db != nullptr) {
    // Columns split over tasks; each column summed in token order (float64).
    const int64_t block = 256;
    const int64_t blocks = (vc + block - 1) / block;
    run_parallel(blocks, s.threads, [&](int64_t b) {
      const int64_t j0 = b * block, cnt = std::min(block, vc - j0);
      for (int64_t r = 0; r < nc; ++r) {
        kernels::lce_accumulate(w.tile.data() + r * vc + j0, cnt, t.db + v0 + j0);
      }
    });
  }
  if (s.D == 0) return;  // dhidden / dweight have no elements (and may be null)
  const Operand dz{w.tile.data(), vc, false};
  // dhidden: B(k = class, j = unit) = W[v0 + k, j] (wv as is).
  gemm(s.threads, nc, s.D, vc, dz, wv, v0 == 0 ? 0.0f : 1.0f, t.dh + n0 * t.dh_rs, t.dh_ld);
  // dweight: A(i = class, k = token) = dz[k, i].
  gemm(s.threads, vc, s.D, nc, transposed(dz), hc, n0 == 0 ? 0.0f : 1.0f, t.dw + v0 * t.dw_rs,
       t.dw_ld);
}

// The backward pass, and with `dst` the fused forward + backward (writes the
// loss as linear_cross_entropy does; lse_out optional).
void backward_impl(const char* op, const TensorView& hidden, const TensorView& weight,
                   const TensorView& target, const std::optional<TensorView>& bias,
                   const TensorView& dloss, const TensorView& dhidden, const TensorView& dweight,
                   const std::optional<TensorView>& dbias, const CrossEntropyOptions& ce,
                   const LinearCrossEntropyOptions& lce, const SoftmaxOptions& options,
                   const TensorView* dst) {
  const bool fused = dst != nullptr;
  // The forward's lse (skips the statistics pass) when label smoothing is off.
  const bool use_lse = !fused && ce.lse.has_value() && ce.label_smoothing == 0.0f;
  Setup s = prepare(op, hidden, weight, target, bias, ce, lce, options, /*whole_vocab=*/!use_lse);

  std::vector<std::pair<TensorView, const char*>> outs;
  std::optional<RowOut> o_lse;
  if (fused) {
    if (ce.z_loss || ce.entropy || ce.target_logprob || ce.accuracy) {
      fail(op, "only the lse optional output is supported (use linear_cross_entropy for the others)");
    }
    check_reduced(s, *dst, "dst");
    outs.push_back({*dst, "dst"});
    if (ce.lse) {
      o_lse = row_view(s, *ce.lse, "lse", true);
      outs.push_back({*ce.lse, "lse"});
    }
  }
  // Upstream gradient -> G_r.
  std::vector<double> G = alloc<double>(op, s.N);
  check_float_view(dloss, op, "dloss");
  const int dloss_size = dtype_size(dloss.dtype);
  if (s.reduction == Reduction::kNone) {
    const RowOut ro = row_view(s, dloss, "dloss", false);
    const auto* g = static_cast<const char*>(dloss.data);
    for (int64_t r = 0; r < s.N; ++r) {
      G[static_cast<size_t>(r)] =
          s.active(r) ? load_f64(g + r * ro.strides[0] * dloss_size, dloss.dtype) : 0.0;
    }
  } else {
    if (dloss.numel() != 1) {
      fail(op, "dloss shape " + dloss.describe() + " must hold one element for reduction '" +
                   reduction_name(s.reduction) + "'");
    }
    double g = load_f64(dloss.data, dloss.dtype);
    if (s.reduction == Reduction::kMean) {
      // A zero weight sum with counted rows: PyTorch's w / sum w = 0 / 0,
      // NaN for every counted row (kNan), or 0 (kZero).
      g = s.denominator != 0.0                    ? g / s.denominator
          : s.empty_mean == EmptyMean::kZero ? 0.0
                                               : kNan;
    }
    for (int64_t r = 0; r < s.N; ++r) G[static_cast<size_t>(r)] = s.active(r) ? g : 0.0;
  }
  std::vector<double> lse_in;
  if (use_lse) {
    const RowOut ro = row_view(s, *ce.lse, "lse", false);
    lse_in = alloc<double>(op, s.N);
    const auto* p = static_cast<const char*>(ce.lse->data);
    const int64_t step = ro.strides[0] * dtype_size(ce.lse->dtype);
    for (int64_t r = 0; r < s.N; ++r) lse_in[static_cast<size_t>(r)] = load_f64(p + r * step, ce.lse->dtype);
  }
  // Gradient outputs.
  check_matrix(op, dhidden, "dhidden");
  if (dhidden.shape[0] != s.N || dhidden.shape[1] != s.D) {
    fail(op, "dhidden " + dhidden.describe() + " must have hidden's shape " + hidden.describe());
  }
  check_no_self_overlap(dhidden, "dhidden", op);
  check_matrix(op, dweight, "dweight");
  if (dweight.shape[0] != s.V || dweight.shape[1] != s.D) {
    fail(op, "dweight " + dweight.describe() + " must have weight's shape " + weight.describe());
  }
  check_no_self_overlap(dweight, "dweight", op);
  if (dbias) {
    check_float_view(*dbias, op, "dbias");
    if (dbias->rank != 1 || dbias->shape[0] != s.V) {
      fail(op, "dbias " + dbias->describe() + " must be [" + std::to_string(s.V) + "]");
    }
    check_no_self_overlap(*dbias, "dbias", op);
  }
  outs.push_back({dhidden, "dhidden"});
  outs.push_back({dweight, "dweight"});
  if (dbias) outs.push_back({*dbias, "dbias"});
  auto ins = input_list(s, target, bias, ce);
  ins.push_back({dloss, "dloss"});
  if (use_lse) ins.push_back({*ce.lse, "lse"});
  check_disjoint(op, outs, ins);

  // Scratch (all before the first write).
  Work w(s);
  // Gradients accumulate in f32: an output that is not f32 (or not unit
  // stride) is accumulated in a temporary and rounded once at the end.
  Layout lh = layout_of(dhidden, false), lw = layout_of(dweight, false);
  if (dhidden.dtype != DType::kF32) lh.direct = false;
  if (dweight.dtype != DType::kF32) lw.direct = false;
  std::vector<float> dh_tmp = lh.direct ? std::vector<float>() : alloc<float>(op, s.N * s.D);
  std::vector<float> dw_tmp = lw.direct ? std::vector<float>() : alloc<float>(op, s.V * s.D);
  std::vector<double> db_acc = alloc<double>(op, dbias ? s.V : 0, 0.0);
  std::vector<RowStat> st;
  std::vector<double> Lrow = alloc<double>(op, s.Nc), sumw = alloc<double>(op, s.Nc);
  std::vector<double> loss = alloc<double>(op, fused ? s.N : 0), lse(o_lse ? s.N : 0);
  GradTargets t;
  t.dh = lh.direct ? static_cast<float*>(dhidden.data) : dh_tmp.data();
  t.dh_ld = lh.direct ? lh.ld : std::max<int64_t>(s.D, 1);
  t.dh_rs = lh.direct ? dhidden.strides[0] : t.dh_ld;
  t.dw = lw.direct ? static_cast<float*>(dweight.data) : dw_tmp.data();
  t.dw_ld = lw.direct ? lw.ld : std::max<int64_t>(s.D, 1);
  t.dw_rs = lw.direct ? dweight.strides[0] : t.dw_ld;
  t.db = dbias ? db_acc.data() : nullptr;

  if (s.D > 0) {
    // No classes: dz is empty and dhidden = 0; no tokens: dweight = 0.
    for (int64_t r = 0; r < s.N && s.V == 0; ++r) std::fill(t.dh + r * t.dh_rs, t.dh + r * t.dh_rs + s.D, 0.0f);
    for (int64_t j = 0; j < s.V && s.N == 0; ++j) std::fill(t.dw + j * t.dw_rs, t.dw + j * t.dw_rs + s.D, 0.0f);
  }
  auto record = [&](const RowStat& rs, int64_t gr) {
    if (!fused) return;
    const RowResult res = finalize_row(s, rs, gr);
    loss[static_cast<size_t>(gr)] = res.loss;
    if (o_lse) lse[static_cast<size_t>(gr)] = res.L;
  };

  for (int64_t n0 = 0; n0 < s.N; n0 += s.Nc) {
    const int64_t nc = std::min(s.Nc, s.N - n0);
    const Operand hc = s.hm.rows(n0, nc, w.hbuf.data());
    if (s.V == 0) {
      RowStat empty;
      for (int64_t r = 0; r < nc; ++r) record(empty, n0 + r);
      continue;
    }
    if (!use_lse && s.Vc >= s.V) {
      // Whole vocabulary in one tile: statistics and gradient from the same
      // logits (one GEMM for the logits of these tokens).
      const Operand wv = logits_tile(s, w, hc, n0, nc, 0, s.V);
      kernels::LceScanRequest kr;
      kr.softcap = s.cap;
      kr.weight = s.cw(0);
      kr.sums = s.a > 0.0;
      for_tile_rows(s, nc, s.V, [&](int64_t r) {
        float* row = w.tile.data() + r * s.V;
        const int64_t gr = n0 + r;
        kernels::lce_logits(row, s.V, s.bias, s.scale);
        if (!s.active(gr) && !o_lse) {
          std::fill(row, row + s.V, 0.0f);
          return;
        }
        RowStat rs;
        merge(rs, kernels::lce_scan(row, s.V, kr), 0);
        if (s.active(gr)) rs.ty = logit_of(s, row[s.lr->target(gr)]);
        record(rs, gr);
        grad_row(s, row, s.V, 0, gr, lse_of(rs), rs.sum_w, G[static_cast<size_t>(gr)]);
      });
      grad_tile_tail(s, w, hc, wv, n0, nc, 0, s.V, t);
      continue;
    }
    if (use_lse) {
      for (int64_t r = 0; r < nc; ++r) Lrow[static_cast<size_t>(r)] = lse_in[static_cast<size_t>(n0 + r)];
    } else {
      StatRequest req;
      req.sums = s.a > 0.0;
      req.all_rows = o_lse.has_value();
      stats_pass(s, w, hc, n0, nc, req, st);
      for (int64_t r = 0; r < nc; ++r) {
        const RowStat& rs = st[static_cast<size_t>(r)];
        Lrow[static_cast<size_t>(r)] = lse_of(rs);
        sumw[static_cast<size_t>(r)] = rs.sum_w;
        record(rs, n0 + r);
      }
    }
    for (int64_t v0 = 0; v0 < s.V; v0 += s.Vc) {
      const int64_t vc = std::min(s.Vc, s.V - v0);
      const Operand wv = logits_tile(s, w, hc, n0, nc, v0, vc);
      const float* bias_v = s.bias != nullptr ? s.bias + v0 : nullptr;
      for_tile_rows(s, nc, vc, [&](int64_t r) {
        float* row = w.tile.data() + r * vc;
        const int64_t gr = n0 + r;
        if (s.active(gr)) kernels::lce_logits(row, vc, bias_v, s.scale);
        grad_row(s, row, vc, v0, gr, Lrow[static_cast<size_t>(r)], sumw[static_cast<size_t>(r)],
                 G[static_cast<size_t>(gr)]);
      });
      grad_tile_tail(s, w, hc, wv, n0, nc, v0, vc, t);
    }
  }

  // Outputs that went through temporaries.
  if (!lh.direct) {
    auto* out = static_cast<char*>(dhidden.data);
    const int64_t size = dtype_size(dhidden.dtype);
    for (int64_t r = 0; r < s.N && s.D > 0; ++r) {
      scatter_row_f32(dh_tmp.data() + r * t.dh_ld, s.D, out + r * dhidden.strides[0] * size,
                      dhidden.dtype, dhidden.strides[1]);
    }
  }
  if (!lw.direct) {
    auto* out = static_cast<char*>(dweight.data);
    const int64_t size = dtype_size(dweight.dtype);
    for (int64_t j = 0; j < s.V && s.D > 0; ++j) {
      scatter_row_f32(dw_tmp.data() + j * t.dw_ld, s.D, out + j * dweight.strides[0] * size,
                      dweight.dtype, dweight.strides[1]);
    }
  }
  if (dbias) {
    auto* out = static_cast<char*>(dbias->data);
    const int64_t step = dbias->strides[0] * dtype_size(dbias->dtype);
    for (int64_t j = 0; j < s.V; ++j) {
      store_f64(out + j * step, dbias->dtype, db_acc[static_cast<size_t>(j)]);
    }
  }
  if (fused) {
    write_reduced(s, loss, s.denominator, *dst, "dst");
    if (o_lse) write_row_out(*o_lse, lse);
  }
}

}  // namespace
}  // namespace detail

void linear_cross_entropy_backward(const TensorView& hidden, const TensorView& weight,
                                   const TensorView& target, const std::optional<TensorView>& bias,
                                   const TensorView& dloss, const TensorView& dhidden,
                                   const TensorView& dweight, const std::optional<TensorView>& dbias,
                                   const CrossEntropyOptions& ce,
                                   const LinearCrossEntropyOptions& lce,
                                   const SoftmaxOptions& options) {
  const detail::BlasOnCallingThread one_pool;  // gemm.h: BLAS on smax's threads only
  detail::backward_impl("linear_cross_entropy_backward", hidden, weight, target, bias, dloss,
                        dhidden, dweight, dbias, ce, lce, options, nullptr);
}

void linear_cross_entropy_fused(const TensorView& hidden, const TensorView& weight,
                                const TensorView& target, const std::optional<TensorView>& bias,
                                const TensorView& dst, const TensorView& dloss,
                                const TensorView& dhidden, const TensorView& dweight,
                                const std::optional<TensorView>& dbias,
                                const CrossEntropyOptions& ce,
                                const LinearCrossEntropyOptions& lce,
                                const SoftmaxOptions& options) {
  const detail::BlasOnCallingThread one_pool;  // gemm.h: BLAS on smax's threads only
  detail::backward_impl("linear_cross_entropy_fused", hidden, weight, target, bias, dloss,
                        dhidden, dweight, dbias, ce, lce, options, &dst);
}

}  // namespace smax

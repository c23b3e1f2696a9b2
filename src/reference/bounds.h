// src/reference/bounds.h: the documented error bound of every op, next to
// its float64 oracle. One function per concern; the tests (tests/), the fuzz
// harnesses (fuzz/) and `smax run --check` (tools/smax/) all call these, so
// a bound is written down once (docs/reliability.md, "Where the bounds
// live"). The ops of `smax run`'s table name their rule (a BoundRule built
// from these functions) beside their oracle in testing/table_*.cc;
// op_bounds applies it to a call. No list of op names lives here.
//
// A bound is computed from the call's f32 inputs and the float64 reference
// output: |out_i - ref_i| <= bound_i. Each function cites the public header
// whose "Numerics" paragraph states the bound; these functions are that
// text written as code, never loosened to make a test pass.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/cross_entropy.h"
#include "reference/rescaled.h"
#include "reference/reweight.h"
#include "reference/rows.h"
#include "reference/sparse.h"
#include "smax/loss.h"
#include "smax/options.h"
#include "smax/reweight.h"
#include "smax/tensor.h"

namespace smax::reference {

// ---- the softmax family (include/smax/softmax.h) ----------------------------------
// ref: the float64 reference output; y, dy: the backward's f32 inputs (as
// doubles); s = fl(scale / temperature) as the library rounds it. Callers
// also require: NaN in ref <=> NaN in out, a ref of +-inf matched exactly, an
// exact 0 where softmax's input is -inf / masked and where the backward's y
// is 0 (softmax) or -inf (log_softmax).

/// softmax: |out - ref| <= 1e-36 + 2e-6 |ref| (the header: relative 2e-6 on
/// outputs >= 1e-30, absolute 1e-36 below).
double softmax_bound(double ref);
/// log_softmax, logsumexp: |out - ref| <= 2e-6 (1 + |ref|).
double log_softmax_bound(double ref);

/// The sums of one backward row that its bounds use (add every element).
struct BackwardRow {
  double dot = 0, abs_dot = 0;  ///< <dy, y>, sum |dy_j y_j|
  double sum = 0, abs_sum = 0;  ///< sum dy, sum |dy_j|
  void add(double y, double dy) {
    dot += dy * y;
    abs_dot += std::fabs(dy * y);
    sum += dy;
    abs_sum += std::fabs(dy);
  }
};
/// softmax_backward: 2e-6 s |y| (|dy| + |<dy, y>|) + 1e-30 (the header's
/// elementwise bound).
double softmax_backward_bound(double s, double y, double dy, const BackwardRow& row);
/// softmax_backward's documented dot term, allowed on top of the bound:
/// 1.02e-6 s |y| sum_j |dy_j y_j| ("where <dy, y> cancels": the error of
/// the dot's f32 products).
double softmax_backward_dot_gap(double s, double y, const BackwardRow& row);
/// log_softmax_backward: 2e-6 s (|dy| + e |sum dy| + e sum |dy|) + 1e-30,
/// e = exp(y) (derivation: tests/test_util.h, "Error metrics").
double log_softmax_backward_bound(double s, double y, double dy, const BackwardRow& row);

// ---- the re-weighting normalisers (include/smax/reweight.h), one row --------------
// t: the row's logits (-inf = masked; softplus: z = fl(lambda t)), y: the
// row's reference forward output, g: its upstream gradient, dx: its
// reference backward output, scale: s = fl(scale / temperature), lambda:
// softplus's dz/dt (f32), 1 otherwise.

enum class ReweightOp {
  kSelfAdjust,              ///< self_adjust_softmax
  kSigmoid,                 ///< sigmoid_normalizer
  kSoftplus,                ///< softplus_normalizer
  kPower,                   ///< power_softmax
  kProbabilityTemperature,  ///< probability_temperature
  kLogitStandardization,    ///< logit_standardization
};
/// The op and the options its bound reads.
struct ReweightBound {
  ReweightOp op = ReweightOp::kSelfAdjust;
  SelfAdjustOptions sa;           ///< normalized, grad_through_bounds
  SoftplusNormalizerOptions sp;   ///< power
  int p = 2;                      ///< power_softmax
  float T = 1.0f;                 ///< probability_temperature
  LogitStandardizationOptions ls; ///< eps, temperature, unbiased
};
/// Relative forward factor e_i: |y_i - ref_i| <= e_i |ref_i| + 1e-36
/// (2e-6; SA 2.2e-6; Power kappa(p); softplus with power != 1 and logit
/// standardisation add their logits' terms).
Row reweight_forward_rel(const ReweightBound& s, const Row& t, const Row& y);
/// The forward bound e_i |y_i| + 1e-36 (SA: + 1e-36 |t_i| for finite t_i).
Row reweight_forward_bound(const ReweightBound& s, const Row& t, const Row& y);
/// The backward bound of each element of the row (>= 1e-30).
Row reweight_backward_bound(const ReweightBound& s, const Row& t, const Row& g, const Row& y,
                            const Row& dx, double scale, double lambda);
/// No NaN or +inf, and at least one visible (not -inf) entry.
bool row_finite_visible(const Row& t);

// ---- the sparse normalisers (include/smax/sparse.h), one row ----------------------

/// sparsemax / entmax15 / entmax_bisect (alpha != 1; alpha = 1 is softmax's
/// bound), y an element of the reference output, n the row length:
/// 2u |y| + 1e-16 (64 + n) max(1, 1 / (alpha - 1)), u = 2^-24 (the float64
/// thresholds of library and oracle differ by ~n 1e-16, amplified by the
/// output map's power 1 / (alpha - 1)).
double entmax_forward_bound(double y, double alpha, int64_t n);
/// Their backward from the saved y (alpha != 1), ref the reference dx row:
/// 2u |ref_i| + 1e-15 (n + 100 (1 + |2 - alpha|)) s w_i G + 1e-30,
/// w_i = y_i^(2 - alpha) on the support (0 off it), G = sum w |g| / sum w.
Row entmax_backward_bound(const Row& y, const Row& g, const Row& ref, double alpha, double sigma);

// ---- the rescaled / rectified softmaxes (include/smax/rescaled.h), one row -------
// t: the row's logits (-inf = masked), g: its upstream gradient, y: its
// saved / reference output, sigma: s = fl(scale / temperature).

/// softpick: 2e-6 ((1 + K) |y_i| + q_i) + 1e-36, f = softpick_row(t, eps, empty_row).
Row softpick_forward_bound(const SoftpickRow& f);
/// softpick_backward: 2e-6 s q_i ((1 + K) (|g_i| + |<g, y>|) + sum_j |g_j| (y_j + q_j))
/// + 1e-30 (masked and NaN entries out of the sums).
Row softpick_backward_bound(const Row& t, const Row& g, const SoftpickRow& f, double sigma);
/// stablemax_backward: 2e-6 s s'_i (|g_i| + |<g, y>| + sum_j |g_j| y_j) + 1e-30,
/// s'_i = stable_ds(t_i) / sum_j stable_s(t_j), y = stablemax_row(t).
Row stablemax_backward_bound(const Row& t, const Row& g, double sigma, EmptyRow empty);
/// ssmax_backward's dx (c = s * the row's factor ssmax_factor(s, n, true)):
/// 2e-6 |c| |y_i| (|g_i| + |<g, y>|) + 1e-30; *dot_gap (if not null) gets the
/// kernel's softmax_backward dot term 1.02e-6 |c| |y_i| sum_j |g_j y_j|.
Row ssmax_backward_bound(const Row& y, const Row& g, double c, Row* dot_gap = nullptr);
/// ssmax_backward's ds of one row (n: the row's ssmax_n):
/// 2e-6 ln n sum_i |t_i y_i| (|g_i| + |<g, y>|) + 1e-30 over y_i != 0, finite t_i;
/// *dot_gap (if not null) gets the dot term 1.02e-6 ln n sum_i |t_i y_i| sum_j |g_j y_j|.
double ssmax_ds_bound(const Row& t, const Row& y, const Row& g, int64_t n, double* dot_gap = nullptr);

// ---- the ops of the CLI's table (normalisers, losses, samplers) ------------------

/// One valid call of an op, as the op saw it (before any in-place write).
struct BoundCall {
  TensorView x;       ///< logits (f32)
  TensorView y;       ///< saved forward output (backward ops from y; probability_temperature's p)
  TensorView dy;      ///< upstream gradient (backward ops; loss backward: dloss)
  TensorView target;  ///< class targets (i64) or probability targets (f32, cross_entropy)
  SoftmaxOptions options;  ///< with the masks
  LossOptions loss;        ///< with the class weight
  /// The op's parameters, named as `smax run --param` names them (alpha,
  /// n_iter, k, s, fixed_n, eps, normalized, head_dim, power, p, T,
  /// label_smoothing, lse_square_scale, softcap, coefficient, a, b, tau,
  /// hard, seed, ...). A missing parameter reads as 0.
  std::map<std::string, double> params;
  double param(const std::string& name) const {
    const auto it = params.find(name);
    return it == params.end() ? 0.0 : it->second;
  }
  /// Per-row parameter: entmax_bisect(_backward)'s
  /// EntmaxBisectOptions::alpha_tensor, ssmax(_backward)'s SsmaxOptions::s_rows.
  std::optional<TensorView> row_param;
  /// sparse_softmax_loss(_backward): SparseSoftmaxLossOptions::force_target.
  bool force_target = false;
};

/// Per element of the reference output (dense, in the output's logical
/// order). An output element passes when
///   out is the f32 rounding of ref, or |out - ref| <= bound, or
///   |out - ref| <= bound + dot_gap (the documented dot term, see softmax.h), or
///   exact_zero and ref == 0: out must be exactly 0, or
///   overflow_ok and out is +-inf / NaN;
/// special values (NaN, +-inf in ref) must match exactly.
struct ElementBounds {
  std::vector<double> bound;
  std::vector<char> exact_zero;
  std::vector<double> dot_gap;
  std::vector<char> overflow_ok;  ///< empty: none
};

/// Which view holds the rows an op's bound reads (BoundShape::rows).
enum class BoundRowsFrom {
  kX,       ///< the logits x as the library forms them (scaled, -inf where masked)
  kSavedY,  ///< a backward pass's saved output y, as plain values (backward ops
            ///< reading only y); y's masks mark the exact zeros
  kYInput,  ///< y is the op's input (probability_temperature's p), formed like logits
};

/// The layout of a call as its bound sees it.
struct BoundShape {
  BoundRowsFrom rows = BoundRowsFrom::kX;
  bool backward = false;     ///< the op reads an upstream gradient dy
  bool elementwise = true;   ///< the output has the rows' shape (not per row, reduced, top-k)
  bool loss = false;         ///< the output follows the loss's reduction
};

/// What an op's bound rule reads and fills; op_bounds prepares it: `out`
/// sized like `ref` (bound 0, no exact zeros, dot_gap 0, overflow_ok empty)
/// with exact zeros already set where an elementwise output (or a loss's
/// gradient) has a masked / -inf row entry and ref == 0.
struct BoundRows {
  const BoundCall& call;
  const std::vector<double>& ref;  ///< the float64 reference output (dense, logical order)
  ElementBounds& out;
  BoundShape shape;
  RefRows R;                       ///< the rows (BoundShape::rows)
  RefRows G;                       ///< dy's rows (elementwise backward ops), else empty
  std::vector<double> row_param;   ///< call.row_param broadcast per row, else empty

  double sigma() const { return R.scale; }
  /// The call's parameter `name`; 0 when absent.
  double param(const char* name) const { return call.param(name); }
  bool has_param(const char* name) const { return call.params.count(name) != 0; }
  /// Row r's per-row parameter (f32-rounded), or `scalar` without a row tensor.
  double row_param_or(int64_t r, double scalar) const;
  Row row(int64_t r) const { return R.row_copy(r); }
  Row dy_row(int64_t r) const { return G.row_copy(r); }
  /// Row r of `ref`.
  Row ref_row(int64_t r) const;
  /// Dense index (into ref / out) of element k of row r.
  size_t at(int64_t r, int64_t k) const;
  void set_row(int64_t r, const Row& bound);
  /// Element (r, k) may come out +-inf / NaN (an f32 intermediate overflows).
  void allow_overflow(int64_t r, int64_t k);
  /// set_row(r, bound_of_row(r)) for every row.
  template <class F>
  void each_row(F&& bound_of_row) {
    for (int64_t r = 0; r < R.rows; ++r) set_row(r, bound_of_row(r));
  }
};

/// One op's bound: fills BoundRows::out (the op's "Numerics" paragraph as
/// code). Each op of `smax run`'s table names its rule beside its oracle
/// (testing/table_*.cc); the rules call the functions of this header.
using BoundRule = std::function<void(BoundRows&)>;

/// The documented bound of one call: prepares BoundRows for `shape` and
/// applies `rule`, given the float64 reference output `ref`.
ElementBounds op_bounds(const BoundShape& shape, const BoundCall& call, const std::vector<double>& ref,
                        const BoundRule& rule);

// ---- rules shared by several ops (bounds.cc and bounds_<family>.cc) ---------------

/// rel |ref_i| + 1e-36 (softmax-like outputs: 2e-6; StableMax: 1e-6).
void relative_bounds(BoundRows& b, double rel);
/// sparsemax / entmax15 / entmax_bisect (alpha = 1: softmax's bound), with
/// the per-row alpha of the call's row tensor when there is one.
void entmax_bounds(BoundRows& b, double alpha);
/// Their backward from the saved y (alpha = 1: softmax_backward's bound and
/// dot gap; sparse_softmax_backward); per-row alpha as above.
void entmax_backward_bounds(BoundRows& b, double alpha);
/// The sparse losses' forward; `spec` says which loss, with its parameters.
void sparse_loss_bounds(BoundRows& b, const SparseLossSpec& spec);
/// The sparse losses' backward (alpha: 2 sparsemax, 1.5 entmax15, the
/// bisection's alpha, 1 sparse_softmax_loss).
void sparse_loss_backward_bounds(BoundRows& b, double alpha);
/// stablemax_cross_entropy forward and backward.
void stablemax_cross_entropy_bounds(BoundRows& b);
void stablemax_cross_entropy_backward_bounds(BoundRows& b);
/// ssmax_backward (s, fixed_n: SsmaxOptions; per-row s from the row tensor).
void ssmax_backward_bounds(BoundRows& b, double s, int64_t fixed_n);
/// The re-weighting normalisers, forward or backward (the call's params:
/// normalized, head_dim, power, p, T).
void reweight_bounds(BoundRows& b, ReweightOp op);
/// cross_entropy / z_loss / spherical_z_loss forward: 4e-6 per row's
/// magnitude (lr.rows_mag), reduced like the loss.
void cross_entropy_family_bounds(BoundRows& b, const LossRef& lr);
/// Their backward: 4e-6 gr.mag_i f_i + 1e-30, f_i = 1 + |fl(x_i s)| / softcap
/// (+ t's rounding with an additive mask) for a soft-capped cross_entropy, else 1.
void cross_entropy_family_backward_bounds(BoundRows& b, const GradRef& gr, float softcap);

/// Element i against its bound, as ElementBounds states it: |out - ref| /
/// (bound + dot_gap); 0 where out is the f32 rounding of ref or matches a
/// special value, or overflow_ok allows a non-finite out; +inf where a
/// special value or a required exact 0 does not match.
double bound_ratio(const ElementBounds& b, size_t i, double out, double ref);

// ---- helpers shared with the tests and the harnesses -----------------------------

/// Dense logical index of element k of row r of `R`.
int64_t dense_index(const RefRows& R, int64_t r, int64_t k);

/// A softmax-style VJP row c y (dy - <dy, y>) whose f32 intermediates
/// overflow: a product y_i dy_i, the dot or y_i (dy_i - dot) beyond FLT_MAX
/// (only a y far outside [0, 1], which no forward produces, gets there).
/// The library computes them in f32, so such rows may hold +-inf or NaN
/// where the float64 reference is finite.
bool vjp_row_overflows(const double* y, const double* g, int64_t n);

/// Power-Softmax's relative forward factor kappa(p) (include/smax/reweight.h):
/// max(2e-6, (2p + 4 log2 p + 6) u), u = 2^-24.
double power_kappa(int p);

}  // namespace smax::reference

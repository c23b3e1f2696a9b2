// src/ops/losses/linear_cross_entropy_tiles.cc: the shared pieces of the linear
// cross-entropy ops (ops/losses/linear_cross_entropy_tiles.h).
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
namespace lce {

Layout layout_of(const TensorView& v, bool allow_colmajor) {
  const int64_t rows = v.shape[0], cols = v.shape[1];
  const int64_t s0 = v.strides[0], s1 = v.strides[1];
  Layout l;
  if ((cols <= 1 || s1 == 1) && (rows <= 1 || s0 >= std::max<int64_t>(cols, 1))) {
    l.direct = true;
    l.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : s0;
  } else if (allow_colmajor && (rows <= 1 || s0 == 1) &&
             (cols <= 1 || s1 >= std::max<int64_t>(rows, 1))) {
    l.direct = true;
    l.colmajor = true;
    l.ld = cols <= 1 ? std::max<int64_t>(rows, 1) : s1;
  }
  if (l.ld > kBlasMax) l.direct = false;
  return l;
}

void gemm(int threads, int64_t M, int64_t Nn, int64_t K, const Operand& a, const Operand& b,
          float beta, float* c, int64_t ldc) {
  sgemm_parallel(threads, M, Nn, K, 1.0f, a, b, beta, c, ldc);
}
void gemm(int threads, int64_t M, int64_t Nn, int64_t K, const GemmOperand64& a,
          const GemmOperand64& b, double beta, double* c, int64_t ldc) {
  dgemm_parallel(threads, M, Nn, K, 1.0, a, b, beta, c, ldc);
}

namespace {

// hidden / weight as GEMM operands of T, the bias as a contiguous [V] of T
// (the view itself when it already is), the class weights as T.
template <class T>
void fill_operands(Operands<T>& o, const Setup& s, const std::optional<TensorView>& bias,
                   bool class_weights) {
  o.hm = InputMatrix<T>(s.hidden);
  o.wm = InputMatrix<T>(s.weight);
  if (bias && s.V > 0) {
    if (bias->dtype == kDTypeOf<T> && (bias->strides[0] == 1 || s.V <= 1)) {
      o.bias = static_cast<const T*>(bias->data);
    } else {  // strided or another dtype: a contiguous copy
      o.bias_copy.resize(static_cast<size_t>(s.V));
      gather_row(bias->data, bias->dtype, bias->strides[0], s.V, o.bias_copy.data());
      o.bias = o.bias_copy.data();
    }
  }
  if (class_weights) {
    o.class_w.resize(static_cast<size_t>(s.V));
    for (int64_t c = 0; c < s.V; ++c) o.class_w[static_cast<size_t>(c)] = static_cast<T>(s.lr->class_weight(c));
  }
}

}  // namespace

void check_matrix(const char* op, const TensorView& v, const char* name) {
  check_float_view(v, op, name);
  if (v.rank != 2) fail(op, std::string(name) + " must be 2-D, got " + v.describe());
}

Setup prepare(const char* op, const TensorView& hidden, const TensorView& weight,
              const TensorView& target, const std::optional<TensorView>& bias,
              const CrossEntropyOptions& ce, const LinearCrossEntropyOptions& lce,
              const SoftmaxOptions& options, bool whole_vocab) {
  Setup s;
  s.op = op;
  ensure_runtime_initialized();
  // Options.
  check_ce_scalars(op, ce);
  if (ce.grad) {
    fail(op, "ce.grad (cross_entropy's fused logits gradient) is not supported: the logits are "
             "never materialised (linear_cross_entropy_fused gives dhidden / dweight in one call)");
  }
  if (lce.token_chunk < 0) fail(op, "token_chunk must be >= 0, got " + std::to_string(lce.token_chunk));
  if (lce.vocab_chunk < 0) fail(op, "vocab_chunk must be >= 0, got " + std::to_string(lce.vocab_chunk));
  if (options.additive_mask) {
    fail(op, "additive_mask is not supported (mask classes with a -inf bias instead)");
  }
  if (options.bool_mask) fail(op, "bool_mask is not supported (mask classes with a -inf bias instead)");
  if (options.axis != -1 && options.axis != 1) {
    fail(op, "axis must be -1 or 1 (the class axis of the [N, V] logits), got " +
                 std::to_string(options.axis));
  }
  s.scale = check_options(options, op);
  s.threads = options.threads > 0 ? options.threads : max_threads();
  s.empty_row = options.empty_row;
  s.a = ce.label_smoothing;
  s.zs = ce.lse_square_scale;
  s.cap = ce.softcap;
  s.reduction = ce.loss.reduction;
  s.empty_mean = ce.loss.empty_mean;

  // Shapes.
  check_matrix(op, hidden, "hidden");
  check_matrix(op, weight, "weight");
  s.N = hidden.shape[0];
  s.D = hidden.shape[1];
  s.V = weight.shape[0];
  if (weight.shape[1] != s.D) {
    fail(op, "weight " + weight.describe() + " must be [V, " + std::to_string(s.D) +
                 "] (hidden is " + hidden.describe() + ")");
  }
  if (s.D > kBlasMax) {
    throw Error(Status::kUnsupported, std::string(op) + ": hidden size D = " + std::to_string(s.D) +
                                          " exceeds the BLAS int range");
  }
  s.hidden = hidden;
  s.weight = weight;
  // The float64 path (include/smax/linear_cross_entropy.h, "float64").
  s.f64 = hidden.dtype == DType::kF64 || weight.dtype == DType::kF64;
  s.scale64 = static_cast<double>(options.scale) / static_cast<double>(options.temperature);
  if (bias) {
    check_float_view(*bias, op, "bias");
    if (bias->rank != 1 || bias->shape[0] != s.V) {
      fail(op, "bias " + bias->describe() + " must be [" + std::to_string(s.V) + "] (one per class)");
    }
  }
  // Targets and class weights (LossRows validates both against a [N, V] view).
  if (is_floating(target.dtype)) {
    fail(op, "target must be i64 class indices (probability targets are not supported)");
  }
  TensorView fake;
  fake.data = hidden.data;
  fake.dtype = DType::kF32;
  fake.rank = 2;
  fake.shape[0] = s.N;
  fake.shape[1] = s.V;
  fake.strides[0] = s.V;
  fake.strides[1] = 1;
  s.logits_shape = fake;
  s.lr.emplace(op, fake, 1, target, ce.loss);
  if (s.f64) {
    fill_operands(s.f64_ops, s, bias, ce.loss.weight.has_value());
  } else {
    fill_operands(s.f32_ops, s, bias, ce.loss.weight.has_value());
  }
  for (int64_t r = 0; r < s.N; ++r) s.denominator += s.lr->weight(r);

  // Tiling (depends on the shapes and lce only).
  if (whole_vocab && lce.vocab_chunk == 0 && s.V > 0 &&
      kWholeTileFloats / s.V >= kMinWholeTokens && s.V <= kBlasMax) {
    s.Vc = s.V;
    // At most 1/32 of the tokens per tile, so the tile stays under ~3% of
    // the [N, V] logits whatever N is (but >= kMinWholeTokens tokens):
    // OpenBLAS's own packing buffers add ~128 MiB at N = 4096, D = 2048,
    // V = 128256 (measured), and peak extra memory must stay under 10% of
    // the logits there (measured: see docs/linear-cross-entropy.md).
    const int64_t cap = std::max<int64_t>(kMinWholeTokens, s.N / 32 / 16 * 16);
    const int64_t nc = lce.token_chunk > 0
                           ? lce.token_chunk
                           : std::min<int64_t>(kWholeTileFloats / s.V / 16 * 16, cap);
    s.Nc = std::max<int64_t>(1, std::min<int64_t>({nc, s.N, kBlasMax}));
    return s;
  }
  const int64_t vc = lce.vocab_chunk > 0 ? lce.vocab_chunk : kAutoVocabChunk;
  s.Vc = std::max<int64_t>(1, std::min<int64_t>({vc, s.V, kBlasMax}));
  const int64_t nc = lce.token_chunk > 0 ? lce.token_chunk
                                         : std::max<int64_t>(1, kTileFloats / s.Vc);
  s.Nc = std::max<int64_t>(1, std::min<int64_t>({nc, s.N, kBlasMax}));
  return s;
}

RowOut row_view(const Setup& s, const TensorView& v, const char* name, bool output) {
  check_float_view(v, s.op, name);
  RowOut ro;
  ro.view = v;
  reduced_strides(s.logits_shape, 1, v, name, s.op, ro.strides);
  if (output) check_no_self_overlap(v, name, s.op);
  return ro;
}

void write_row_out(const RowOut& ro, const std::vector<double>& values) {
  auto* out = static_cast<char*>(ro.view.data);
  const int64_t step = ro.strides[0] * dtype_size(ro.view.dtype);
  for (size_t r = 0; r < values.size(); ++r) {
    store_f64(out + static_cast<int64_t>(r) * step, ro.view.dtype, values[r]);
  }
}

// A reduced output (dst, z_loss, accuracy): kNone -> a row view, else one element.
void check_reduced(const Setup& s, const TensorView& v, const char* name) {
  if (s.reduction == Reduction::kNone) {
    row_view(s, v, name, true);
    return;
  }
  check_float_view(v, s.op, name);
  if (v.numel() != 1) {
    fail(s.op, std::string(name) + " shape " + v.describe() + " must hold one element for reduction '" +
                   reduction_name(s.reduction) + "'");
  }
}

// Inactive rows count 0 (kNone) or are left out; kMean divides by `denominator`.
void write_reduced(const Setup& s, const std::vector<double>& values, double denominator,
                   const TensorView& v, const char* name) {
  if (s.reduction == Reduction::kNone) {
    std::vector<double> out(values.size());
    for (size_t r = 0; r < values.size(); ++r) {
      out[r] = s.active(static_cast<int64_t>(r)) ? values[r] : 0.0;
    }
    write_row_out(row_view(s, v, name, true), out);
    return;
  }
  double sum = 0.0;
  for (size_t r = 0; r < values.size(); ++r) {
    if (s.active(static_cast<int64_t>(r))) sum += values[r];
  }
  if (s.reduction == Reduction::kMean) {
    if (denominator == 0.0) {
      sum = s.empty_mean == EmptyMean::kZero ? 0.0 : kNan;
    } else {
      sum /= denominator;
    }
  }
  store_f64(v.data, v.dtype, sum);
}

void check_disjoint(const char* op, const std::vector<std::pair<TensorView, const char*>>& outs,
                    const std::vector<std::pair<TensorView, const char*>>& ins) {
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const auto& in : ins) {
      check_disjoint_or_same(outs[i].first, outs[i].second, in.first, in.second, op, false);
    }
    for (size_t j = i + 1; j < outs.size(); ++j) {
      check_disjoint_or_same(outs[j].first, outs[j].second, outs[i].first, outs[i].second, op,
                             false);
    }
  }
}

ForwardOuts check_forward_outputs(const char* op, const Setup& s, const TensorView& dst,
                                  const TensorView& target, const std::optional<TensorView>& bias,
                                  const CrossEntropyOptions& ce) {
  check_reduced(s, dst, "dst");
  std::vector<std::pair<TensorView, const char*>> outs = {{dst, "dst"}};
  if (ce.z_loss) {
    check_reduced(s, *ce.z_loss, "z_loss");
    outs.push_back({*ce.z_loss, "z_loss"});
  }
  if (ce.accuracy) {
    check_reduced(s, *ce.accuracy, "accuracy");
    outs.push_back({*ce.accuracy, "accuracy"});
  }
  ForwardOuts fo;
  auto row_out = [&](const std::optional<TensorView>& v, const char* name,
                     std::optional<RowOut>& ro) {
    if (!v) return;
    ro = row_view(s, *v, name, true);
    outs.push_back({*v, name});
  };
  row_out(ce.lse, "lse", fo.lse);
  row_out(ce.entropy, "entropy", fo.entropy);
  row_out(ce.target_logprob, "target_logprob", fo.target_logprob);
  check_disjoint(op, outs, input_list(s, target, bias, ce));
  return fo;
}

void check_gradient_outputs(const char* op, const Setup& s, const TensorView& hidden,
                            const TensorView& weight, const TensorView& dhidden,
                            const TensorView& dweight, const std::optional<TensorView>& dbias,
                            std::vector<std::pair<TensorView, const char*>>& outs) {
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
}

std::vector<std::pair<TensorView, const char*>> input_list(const Setup& s, const TensorView& target,
                                                           const std::optional<TensorView>& bias,
                                                           const CrossEntropyOptions& ce) {
  std::vector<std::pair<TensorView, const char*>> ins = {
      {s.hidden, "hidden"}, {s.weight, "weight"}, {target, "target"}};
  if (bias) ins.push_back({*bias, "bias"});
  if (ce.loss.weight) ins.push_back({*ce.loss.weight, "weight (class weights)"});
  return ins;
}

// t_y in float64 from u_y (cross_entropy's logit_at), and d t / d u.
double logit_of(const Setup& s, double u) {
  double t = static_cast<double>(u);
  if (s.cap > 0.0f && std::isfinite(t)) {
    t = static_cast<double>(s.cap) * std::tanh(t / static_cast<double>(s.cap));
  }
  return t;
}

double cap_deriv(const Setup& s, double u) {
  if (!(s.cap > 0.0f)) return 1.0;
  const double x = std::fabs(static_cast<double>(u) / static_cast<double>(s.cap));
  const double e = std::exp(-2.0 * x);
  return 4.0 * e / ((1.0 + e) * (1.0 + e));
}

void merge(RowStat& st, const kernels::LceScan& sc, int64_t v0) {
  if (std::isnan(sc.d)) {
    st.nan = true;
    return;
  }
  if (sc.max > st.best) {
    st.best = sc.max;
    st.arg = v0 + sc.argmax;
  }
  st.sum_t += sc.sum_t;
  st.sum_w += sc.sum_w;
  if (sc.d == 0.0) return;
  const double ref = static_cast<double>(sc.ref);
  if (st.d == 0.0) {
    st.m = ref;
    st.d = sc.d;
    st.s1 = sc.sum_et;
    return;
  }
  const double M = std::max(st.m, ref);
  const double f1 = std::exp(st.m - M), f2 = std::exp(ref - M);
  st.s1 = f1 * (st.s1 + (st.m - M) * st.d) + f2 * (sc.sum_et + (ref - M) * sc.d);
  st.d = f1 * st.d + f2 * sc.d;
  st.m = M;
}

// L = LSE(t) of a finished row: NaN, -inf (every logit -inf or V = 0) or finite.
double lse_of(const RowStat& st) {
  if (st.nan) return kNan;
  if (st.d == 0.0) return -kInf;
  return st.m + std::log(st.d);
}

RowResult finalize_row(const Setup& s, const RowStat& rs, int64_t gr) {
  RowResult o;
  const double C = static_cast<double>(s.V);
  const bool empty = !rs.nan && rs.d == 0.0;
  if (rs.nan || (empty && s.empty_row == EmptyRow::kNan)) {
    o.L = o.H = o.loss = o.z = o.tlp = o.acc = kNan;
  } else if (!empty) {
    const double logd = std::log(rs.d);
    o.L = rs.m + logd;
    o.H = logd - rs.s1 / rs.d;
    if (s.active(gr)) {
      const int64_t y = s.lr->target(gr);
      const double wy = s.lr->weight(gr);
      const double c = (1.0 - s.a) * wy;
      if (c != 0.0) o.loss = c * (o.L - rs.ty);
      o.z = s.zs * wy * o.L * o.L;
      o.tlp = rs.ty - o.L;
      o.acc = rs.arg == y ? 1.0 : 0.0;
      if (s.a > 0.0) o.loss += s.a * (rs.sum_w * o.L - rs.sum_t) / C;
      o.loss += o.z;
    }
  }
  return o;
}

// ---- the f32 row steps (the float64 ones: linear_cross_entropy_f64.cc) ----------
void form_logits(const Setup& s, float* row, int64_t vc, int64_t v0) {
  kernels::lce_logits(row, vc, s.f32_ops.bias_at(v0), s.scale);
}

void scan_chunk(const Setup& s, const float* row, int64_t vc, int64_t v0, int64_t gr,
                const StatRequest& req, RowStat& st, double* /*scratch*/) {
  kernels::LceScanRequest kr;
  kr.softcap = s.cap;
  kr.weight = s.f32_ops.cw(v0);
  kr.sums = req.sums;
  kr.entropy = req.entropy;
  kr.argmax = req.argmax;
  merge(st, kernels::lce_scan(row, vc, kr), v0);
  const int64_t y = s.lr->target(gr);
  if (s.active(gr) && y >= v0 && y < v0 + vc) st.ty = logit_of(s, row[y - v0]);
}

void accumulate(const float* x, int64_t n, double* acc) { kernels::lce_accumulate(x, n, acc); }

GradCoeffs grad_coeffs(const Setup& s, int64_t gr, double L, double sum_w) {
  GradCoeffs k;
  k.C = static_cast<double>(s.V);
  k.y = s.lr->target(gr);
  k.wy = s.lr->weight(gr);
  k.A = (1.0 - s.a) * k.wy + 2.0 * s.zs * k.wy * L;
  if (s.a > 0.0) k.A += s.a / k.C * sum_w;
  return k;
}

// ---- tiles --------------------------------------------------------------------------
template <class T>
GemmOperandT<T> logits_tile(const Setup& s, Work<T>& w, const GemmOperandT<T>& hc, int64_t nc,
                            int64_t v0, int64_t vc) {
  const GemmOperandT<T> wv = s.ops<T>().wm.rows(v0, vc, w.wbuf.data());
  // B(k, j) = W[v0 + j, k]: the transpose of W's operand.
  gemm(s.threads, nc, vc, s.D, hc, transposed(wv), T(0), w.tile.data(), vc);
  return wv;
}

template <class T>
void stats_pass(const Setup& s, Work<T>& w, const GemmOperandT<T>& hc, int64_t n0, int64_t nc,
                const StatRequest& req, std::vector<RowStat>& st) {
  st.assign(static_cast<size_t>(nc), RowStat());
  for (int64_t v0 = 0; v0 < s.V; v0 += s.Vc) {
    const int64_t vc = std::min(s.Vc, s.V - v0);
    logits_tile(s, w, hc, nc, v0, vc);
    for_tile_rows(s, w, nc, vc, [&](int64_t r, double* scratch) {
      T* row = w.tile.data() + r * vc;
      form_logits(s, row, vc, v0);
      const int64_t gr = n0 + r;
      if (!req.all_rows && !s.active(gr)) return;
      scan_chunk(s, row, vc, v0, gr, req, st[static_cast<size_t>(r)], scratch);
    });
  }
  for (RowStat& rs : st) settle<T>(rs);
}

template GemmOperand logits_tile(const Setup&, Work<float>&, const GemmOperand&, int64_t,
                                 int64_t, int64_t);
template GemmOperand64 logits_tile(const Setup&, Work<double>&, const GemmOperand64&, int64_t,
                                   int64_t, int64_t);
template void stats_pass(const Setup&, Work<float>&, const GemmOperand&, int64_t, int64_t,
                         const StatRequest&, std::vector<RowStat>&);
template void stats_pass(const Setup&, Work<double>&, const GemmOperand64&, int64_t, int64_t,
                         const StatRequest&, std::vector<RowStat>&);

}  // namespace lce
}  // namespace detail
}  // namespace smax

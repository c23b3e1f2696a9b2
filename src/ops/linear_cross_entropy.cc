// src/ops/linear_cross_entropy.cc: linear_cross_entropy and its backward
// (include/smax/linear_cross_entropy.h).
//
// validate everything -> allocate the tile (Nc x Vc floats) and copies ->
// for each token chunk: for each vocabulary chunk: SGEMM into the tile, then
// the row kernels (kernels/linear_cross_entropy.h) on every row of the tile
// in parallel (fixed grid; a row is one task's work) -> merge the per-chunk
// row results in float64 in vocabulary order -> write the outputs.
// Backward: (the same pass to get each row's LSE, unless given) then a
// gradient pass that turns each tile into dz in place and issues
// dhidden (+)= dz · W_v, dweight_v (+)= dz^T · H_c and the float64 column
// sums of dbias.
//
// Threads: smax's `threads` run the row kernels of a tile and the tile's
// GEMMs, split into blocks of rows or columns on a grid fixed by the shape
// (ops/gemm.h: sgemm_parallel; OpenBLAS itself runs single-threaded on each
// of smax's threads). Neither changes the order of any sum, so results do
// not depend on `threads`.

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
#include "ops/cross_entropy.h"
#include "ops/errors.h"
#include "ops/gemm.h"
#include "ops/internal.h"
#include "ops/loss_rows.h"
#include "ops/validate.h"
#include "smax/error.h"
#include "smax/linear_cross_entropy.h"
#include "smax/runtime.h"

namespace smax {
namespace detail {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
// Auto tiling: Vc = min(V, kAutoVocabChunk) classes, Nc = kTileFloats / Vc
// tokens (a 32 MiB f32 tile). 2048 columns keep each row of the tile in L1
// for the scan and give OpenBLAS GEMMs of >= 2048 in two dims when N allows.
constexpr int64_t kTileFloats = int64_t{8} << 20;
constexpr int64_t kAutoVocabChunk = 2048;
// Whole-vocabulary tiling (fused call, backward without the forward's lse):
// Vc = V so that each logit is computed by one GEMM (no recomputing pass),
// Nc = min(kWholeTileFloats / V, N / 32) rounded down to a multiple of 16
// (>= kMinWholeTokens), used while kWholeTileFloats / V >= kMinWholeTokens
// (V <= 2M); at N = 4096, V = 128256: 128 tokens, a 63 MiB tile (3.1% of
// the logits).
constexpr int64_t kWholeTileFloats = int64_t{32} << 20;
constexpr int64_t kMinWholeTokens = 16;
// Largest GEMM dimension / leading dimension handed to BLAS (blasint).
constexpr int64_t kBlasMax = INT_MAX;
// Elements of the tile one task of row kernels covers.
constexpr int64_t kTaskElements = int64_t{1} << 16;

// ---- GEMM operands ---------------------------------------------------------------
// A 2-D view [rows, cols] seen as a BLAS operand: element (i, k) is
// p[i * ld + k] (row-major) or p[k * ld + i] (trans: column-major).
using Operand = GemmOperand;

struct Layout {
  bool direct = false;
  bool colmajor = false;
  int64_t ld = 1;
};

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

// Rows [r0, r0 + rc) of an input matrix as a GEMM operand: direct when the
// view has a unit stride, else copied into `buf` (rc x cols, row-major).
class InputMatrix {
 public:
  InputMatrix() = default;
  explicit InputMatrix(const TensorView& v) : v_(v), l_(layout_of(v, true)) {}
  bool direct() const { return l_.direct; }
  Operand rows(int64_t r0, int64_t rc, float* buf) const {
    const float* base = static_cast<const float*>(v_.data);
    const int64_t cols = v_.shape[1];
    // D = 0: nothing to read, and data may be null (no offset arithmetic on it).
    if (cols == 0) return Operand{buf, 1, false};
    if (l_.direct) {
      return l_.colmajor ? Operand{base + r0 * v_.strides[0], l_.ld, true}
                         : Operand{base + r0 * v_.strides[0], l_.ld, false};
    }
    for (int64_t i = 0; i < rc; ++i) {
      const float* src = base + (r0 + i) * v_.strides[0];
      float* dst = buf + i * cols;
      for (int64_t k = 0; k < cols; ++k) dst[k] = src[k * v_.strides[1]];
    }
    return Operand{buf, std::max<int64_t>(cols, 1), false};
  }

 private:
  TensorView v_;
  Layout l_;
};

// C[M x Nn] (row-major, ldc) = op(A)[M x K] · op(B)[K x Nn] + beta C, split
// into row or column blocks over smax's threads (gemm.h: BLAS itself runs on each
// calling thread). `a` gives A's element (i, k) as described by Operand; `b`
// gives B's element (k, j) the same way (row index k).
void gemm(int threads, int64_t M, int64_t Nn, int64_t K, const Operand& a, const Operand& b,
          float beta, float* c, int64_t ldc) {
  sgemm_parallel(threads, M, Nn, K, 1.0f, a, b, beta, c, ldc);
}

// The transpose of an operand (element (i, k) of the result = (k, i)).
Operand transposed(const Operand& o) { return Operand{o.p, o.ld, !o.trans}; }

// ---- validated call ------------------------------------------------------------------
struct Setup {
  const char* op = nullptr;
  int64_t N = 0, D = 0, V = 0;
  int64_t Nc = 1, Vc = 1;
  TensorView hidden, weight;
  InputMatrix hm, wm;
  std::vector<float> bias_copy;  // contiguous bias when given with a non-unit stride
  const float* bias = nullptr;   // contiguous [V] or nullptr
  std::vector<float> class_w;    // f32 class weights (empty: none)
  std::optional<LossRows> lr;
  TensorView logits_shape;       // fake [N, V] view (shapes only) for row views
  double a = 0.0, zs = 0.0;
  float cap = 0.0f;
  float scale = 1.0f;
  EmptyRow empty_row = EmptyRow::kZero;
  int threads = 1;
  Reduction reduction = Reduction::kMean;
  EmptyMean empty_mean = EmptyMean::kNan;
  double denominator = 0.0;  // sum of w[target] over non-ignored rows

  const float* cw(int64_t v0) const { return class_w.empty() ? nullptr : class_w.data() + v0; }
  bool active(int64_t r) const { return !lr->ignored(r); }
};

void check_matrix(const char* op, const TensorView& v, const char* name) {
  check_view(v, op, name, DType::kF32);
  if (v.rank != 2) fail(op, std::string(name) + " must be 2-D, got " + v.describe());
}

Setup prepare(const char* op, const TensorView& hidden, const TensorView& weight,
              const TensorView& target, const std::optional<TensorView>& bias,
              const CrossEntropyOptions& ce, const LinearCrossEntropyOptions& lce,
              const SoftmaxOptions& options, bool whole_vocab = false) {
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
  s.hm = InputMatrix(hidden);
  s.wm = InputMatrix(weight);
  if (bias) {
    check_view(*bias, op, "bias", DType::kF32);
    if (bias->rank != 1 || bias->shape[0] != s.V) {
      fail(op, "bias " + bias->describe() + " must be [" + std::to_string(s.V) + "] (one per class)");
    }
    const float* bp = static_cast<const float*>(bias->data);
    if (bias->strides[0] == 1 || s.V <= 1) {
      s.bias = bp;
    } else {
      s.bias_copy.resize(static_cast<size_t>(s.V));
      for (int64_t j = 0; j < s.V; ++j) s.bias_copy[static_cast<size_t>(j)] = bp[j * bias->strides[0]];
      s.bias = s.bias_copy.data();
    }
    if (s.V == 0) s.bias = nullptr;
  }
  // Targets and class weights (LossRows validates both against a [N, V] view).
  if (target.dtype == DType::kF32) {
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
  if (ce.loss.weight) {
    s.class_w.resize(static_cast<size_t>(s.V));
    for (int64_t c = 0; c < s.V; ++c) {
      s.class_w[static_cast<size_t>(c)] = static_cast<float>(s.lr->class_weight(c));
    }
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

// One output view per row ([N] or [N, 1]); strides in the [N, V] index space.
struct RowOut {
  TensorView view;
  int64_t strides[kMaxRank] = {};
};
RowOut row_view(const Setup& s, const TensorView& v, const char* name, bool output) {
  check_view(v, s.op, name, DType::kF32);
  RowOut ro;
  ro.view = v;
  reduced_strides(s.logits_shape, 1, v, name, s.op, ro.strides);
  if (output) check_no_self_overlap(v, name, s.op);
  return ro;
}
void write_row_out(const RowOut& ro, const std::vector<double>& values) {
  float* out = static_cast<float*>(ro.view.data);
  for (size_t r = 0; r < values.size(); ++r) {
    out[static_cast<int64_t>(r) * ro.strides[0]] = static_cast<float>(values[r]);
  }
}

// A reduced output (dst, z_loss, accuracy): kNone -> a row view, else one element.
void check_reduced(const Setup& s, const TensorView& v, const char* name) {
  if (s.reduction == Reduction::kNone) {
    row_view(s, v, name, true);
    return;
  }
  check_view(v, s.op, name, DType::kF32);
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
  *static_cast<float*>(v.data) = static_cast<float>(sum);
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

std::vector<std::pair<TensorView, const char*>> input_list(const Setup& s, const TensorView& target,
                                                           const std::optional<TensorView>& bias,
                                                           const CrossEntropyOptions& ce) {
  std::vector<std::pair<TensorView, const char*>> ins = {
      {s.hidden, "hidden"}, {s.weight, "weight"}, {target, "target"}};
  if (bias) ins.push_back({*bias, "bias"});
  if (ce.loss.weight) ins.push_back({*ce.loss.weight, "weight (class weights)"});
  return ins;
}

template <typename T>
std::vector<T> alloc(const char* op, int64_t count, T value = T()) {
  try {
    return std::vector<T>(static_cast<size_t>(std::max<int64_t>(count, 0)), value);
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory,
                std::string(op) + ": cannot allocate " + std::to_string(count) + " scratch elements");
  }
}

// t_y in float64 from u_y (cross_entropy's logit_at), and d t / d u.
double logit_of(const Setup& s, float u) {
  double t = static_cast<double>(u);
  if (s.cap > 0.0f && std::isfinite(t)) {
    t = static_cast<double>(s.cap) * std::tanh(t / static_cast<double>(s.cap));
  }
  return t;
}
double cap_deriv(const Setup& s, float u) {
  if (!(s.cap > 0.0f)) return 1.0;
  const double x = std::fabs(static_cast<double>(u) / static_cast<double>(s.cap));
  const double e = std::exp(-2.0 * x);
  return 4.0 * e / ((1.0 + e) * (1.0 + e));
}

// Per-row state of the online scan over vocabulary chunks (float64).
struct RowStat {
  double m = 0.0;    // reference: sum_j e^(t_j - m) = d
  double d = 0.0;
  double s1 = 0.0;   // sum_j e^(t_j - m) (t_j - m)
  double sum_t = 0.0, sum_w = 0.0;
  float best = -std::numeric_limits<float>::infinity();
  int64_t arg = 0;
  double ty = kNan;
  bool nan = false;
};

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

// One row's forward results from its finished statistics (cross_entropy's
// formulas; gr = the row's global index).
struct RowResult {
  double L = -kInf, H = 0.0, loss = 0.0, z = 0.0, tlp = -kInf, acc = 0.0;
};
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

// Tiles and copies of one call.
struct Work {
  std::vector<float> tile;  // Nc x Vc
  std::vector<float> hbuf;  // Nc x D when hidden is not unit-stride
  std::vector<float> wbuf;  // Vc x D when weight is not unit-stride
  Work(const Setup& s) {
    tile = alloc<float>(s.op, s.Nc * s.Vc);
    if (!s.hm.direct()) hbuf = alloc<float>(s.op, s.Nc * s.D);
    if (!s.wm.direct()) wbuf = alloc<float>(s.op, s.Vc * s.D);
  }
};

// Runs fn(r) for the rows [0, nc) of a tile of vc columns, in parallel.
template <typename Fn>
void for_tile_rows(const Setup& s, int64_t nc, int64_t vc, Fn&& fn) {
  const int64_t per = std::max<int64_t>(1, kTaskElements / std::max<int64_t>(vc, 1));
  const int64_t tasks = (nc + per - 1) / per;
  run_parallel(tasks, s.threads, [&](int64_t task) {
    const int64_t end = std::min(nc, (task + 1) * per);
    for (int64_t r = task * per; r < end; ++r) fn(r);
  });
}

// tile[nc x vc] = logits u of tokens [n0, n0 + nc) over classes [v0, v0 + vc),
// GEMM then bias and scale (lce_logits) row by row (in parallel).
Operand logits_tile(const Setup& s, Work& w, const Operand& hc, int64_t n0, int64_t nc,
                    int64_t v0, int64_t vc) {
  const Operand wv = s.wm.rows(v0, vc, w.wbuf.data());
  // B(k, j) = W[v0 + j, k]: the transpose of W's operand.
  gemm(s.threads, nc, vc, s.D, hc, transposed(wv), 0.0f, w.tile.data(), vc);
  (void)n0;
  return wv;
}

// The float64 row statistics of tokens [n0, n0 + nc) over the whole vocabulary.
struct StatRequest {
  bool sums = false, entropy = false, argmax = false, all_rows = false;
};
void stats_pass(const Setup& s, Work& w, const Operand& hc, int64_t n0, int64_t nc,
                const StatRequest& req, std::vector<RowStat>& st) {
  st.assign(static_cast<size_t>(nc), RowStat());
  for (int64_t v0 = 0; v0 < s.V; v0 += s.Vc) {
    const int64_t vc = std::min(s.Vc, s.V - v0);
    logits_tile(s, w, hc, n0, nc, v0, vc);
    kernels::LceScanRequest kr;
    kr.softcap = s.cap;
    kr.weight = s.cw(v0);
    kr.sums = req.sums;
    kr.entropy = req.entropy;
    kr.argmax = req.argmax;
    const float* bias = s.bias != nullptr ? s.bias + v0 : nullptr;
    for_tile_rows(s, nc, vc, [&](int64_t r) {
      float* row = w.tile.data() + r * vc;
      kernels::lce_logits(row, vc, bias, s.scale);
      const int64_t gr = n0 + r;
      if (!req.all_rows && !s.active(gr)) return;
      RowStat& rs = st[static_cast<size_t>(r)];
      merge(rs, kernels::lce_scan(row, vc, kr), v0);
      const int64_t y = s.lr->target(gr);
      if (s.active(gr) && y >= v0 && y < v0 + vc) rs.ty = logit_of(s, row[y - v0]);
    });
  }
}

}  // namespace
}  // namespace detail

void linear_cross_entropy(const TensorView& hidden, const TensorView& weight,
                          const TensorView& target, const std::optional<TensorView>& bias,
                          const TensorView& dst, const CrossEntropyOptions& ce,
                          const LinearCrossEntropyOptions& lce, const SoftmaxOptions& options) {
  using namespace detail;
  const char* op = "linear_cross_entropy";
  const BlasOnCallingThread one_pool;  // gemm.h: BLAS on smax's threads only
  Setup s = prepare(op, hidden, weight, target, bias, ce, lce, options);

  // Outputs: shapes, then no overlap with any input or each other.
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
  std::optional<RowOut> o_lse, o_ent, o_tlp;
  auto row_out = [&](const std::optional<TensorView>& v, const char* name,
                     std::optional<RowOut>& ro) {
    if (!v) return;
    ro = row_view(s, *v, name, true);
    outs.push_back({*v, name});
  };
  row_out(ce.lse, "lse", o_lse);
  row_out(ce.entropy, "entropy", o_ent);
  row_out(ce.target_logprob, "target_logprob", o_tlp);
  check_disjoint(op, outs, input_list(s, target, bias, ce));

  const size_t N = static_cast<size_t>(s.N);
  std::vector<double> loss = alloc<double>(op, s.N), z(ce.z_loss ? N : 0), lse(o_lse ? N : 0),
                      ent(o_ent ? N : 0), tlp(o_tlp ? N : 0), acc(ce.accuracy ? N : 0);
  Work w(s);
  std::vector<RowStat> st;
  StatRequest req;
  req.sums = s.a > 0.0;
  req.entropy = o_ent.has_value();
  req.argmax = ce.accuracy.has_value();
  req.all_rows = o_lse.has_value() || o_ent.has_value();

  for (int64_t n0 = 0; n0 < s.N; n0 += s.Nc) {
    const int64_t nc = std::min(s.Nc, s.N - n0);
    const Operand hc = s.hm.rows(n0, nc, w.hbuf.data());
    stats_pass(s, w, hc, n0, nc, req, st);
    for (int64_t r = 0; r < nc; ++r) {
      const int64_t gr = n0 + r;
      const size_t ri = static_cast<size_t>(gr);
      const RowStat& rs = st[static_cast<size_t>(r)];
      const bool active = s.active(gr);
      const RowResult res = finalize_row(s, rs, gr);
      const double L = res.L, H = res.H, loss_r = res.loss, z_r = res.z, tlp_r = res.tlp,
                   acc_r = res.acc;
      loss[ri] = loss_r;
      if (ce.z_loss) z[ri] = z_r;
      if (o_lse) lse[ri] = L;
      if (o_ent) ent[ri] = H;
      if (o_tlp) tlp[ri] = active ? tlp_r : 0.0;
      if (ce.accuracy) acc[ri] = active ? acc_r : 0.0;
    }
  }

  write_reduced(s, loss, s.denominator, dst, "dst");
  if (ce.z_loss) write_reduced(s, z, s.denominator, *ce.z_loss, "z_loss");
  if (ce.accuracy) {
    double count = 0.0;
    for (int64_t r = 0; r < s.N; ++r) count += s.active(r) ? 1.0 : 0.0;
    write_reduced(s, acc, count, *ce.accuracy, "accuracy");
  }
  if (o_lse) write_row_out(*o_lse, lse);
  if (o_ent) write_row_out(*o_ent, ent);
  if (o_tlp) write_row_out(*o_tlp, tlp);
}

namespace detail {
namespace {

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
  check_view(dloss, op, "dloss", DType::kF32);
  if (s.reduction == Reduction::kNone) {
    const RowOut ro = row_view(s, dloss, "dloss", false);
    const float* g = static_cast<const float*>(dloss.data);
    for (int64_t r = 0; r < s.N; ++r) {
      G[static_cast<size_t>(r)] = s.active(r) ? static_cast<double>(g[r * ro.strides[0]]) : 0.0;
    }
  } else {
    if (dloss.numel() != 1) {
      fail(op, "dloss shape " + dloss.describe() + " must hold one element for reduction '" +
                   reduction_name(s.reduction) + "'");
    }
    double g = static_cast<double>(*static_cast<const float*>(dloss.data));
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
    const float* p = static_cast<const float*>(ce.lse->data);
    for (int64_t r = 0; r < s.N; ++r) lse_in[static_cast<size_t>(r)] = p[r * ro.strides[0]];
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
    check_view(*dbias, op, "dbias", DType::kF32);
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
  const Layout lh = layout_of(dhidden, false), lw = layout_of(dweight, false);
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
    float* out = static_cast<float*>(dhidden.data);
    for (int64_t r = 0; r < s.N; ++r) {
      for (int64_t k = 0; k < s.D; ++k) {
        out[r * dhidden.strides[0] + k * dhidden.strides[1]] = dh_tmp[static_cast<size_t>(r * t.dh_ld + k)];
      }
    }
  }
  if (!lw.direct) {
    float* out = static_cast<float*>(dweight.data);
    for (int64_t j = 0; j < s.V; ++j) {
      for (int64_t k = 0; k < s.D; ++k) {
        out[j * dweight.strides[0] + k * dweight.strides[1]] = dw_tmp[static_cast<size_t>(j * t.dw_ld + k)];
      }
    }
  }
  if (dbias) {
    float* out = static_cast<float*>(dbias->data);
    for (int64_t j = 0; j < s.V; ++j) {
      out[j * dbias->strides[0]] = static_cast<float>(db_acc[static_cast<size_t>(j)]);
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

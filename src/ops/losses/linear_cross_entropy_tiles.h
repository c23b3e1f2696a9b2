// src/ops/losses/linear_cross_entropy_tiles.h: the pieces linear_cross_entropy.cc
// (the forward) and linear_cross_entropy_backward.cc (backward and fused)
// share: tiling constants, GEMM operands, the validated call (Setup, prepare),
// output checks and writes, the per-row statistics merged over vocabulary
// chunks, and the statistics pass over one tile. Internal to src/ops; in
// namespace smax::detail::lce.
//
// Element type T of the tiles: float (the f32 path: SGEMM, f32 row kernels,
// kernels/linear_cross_entropy.h) or double (the float64 path, taken when
// hidden or weight is f64: DGEMM, the float64 row steps of
// linear_cross_entropy_f64.cc). The tile code (InputMatrix, Work, gemm,
// logits_tile, stats_pass, the backward's gradient pass) is written once
// for both; Setup::f64 says which one a call runs.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/linear_cross_entropy.h"
#include "core/convert.h"
#include "core/execution.h"
#include "core/gemm.h"
#include "core/internal.h"
#include "core/loss_rows.h"
#include "smax/error.h"
#include "smax/linear_cross_entropy.h"
#include "smax/tensor.h"

namespace smax {
namespace detail {
namespace lce {

inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
// Auto tiling: Vc = min(V, kAutoVocabChunk) classes, Nc = kTileFloats / Vc
// tokens (a 32 MiB f32 tile). 2048 columns keep each row of the tile in L1
// for the scan and give OpenBLAS GEMMs of >= 2048 in two dims when N allows.
inline constexpr int64_t kTileFloats = int64_t{8} << 20;
inline constexpr int64_t kAutoVocabChunk = 2048;
// Whole-vocabulary tiling (fused call, backward without the forward's lse):
// Vc = V so that each logit is computed by one GEMM (no recomputing pass),
// Nc = min(kWholeTileFloats / V, N / 32) rounded down to a multiple of 16
// (>= kMinWholeTokens), used while kWholeTileFloats / V >= kMinWholeTokens
// (V <= 2M); at N = 4096, V = 128256: 128 tokens, a 63 MiB tile (3.1% of
// the logits).
inline constexpr int64_t kWholeTileFloats = int64_t{32} << 20;
inline constexpr int64_t kMinWholeTokens = 16;
// Largest GEMM dimension / leading dimension handed to BLAS (blasint).
inline constexpr int64_t kBlasMax = INT_MAX;
// Elements of the tile one task of row kernels covers.
inline constexpr int64_t kTaskElements = int64_t{1} << 16;

// ---- GEMM operands ---------------------------------------------------------------
// A 2-D view [rows, cols] seen as a BLAS operand: element (i, k) is
// p[i * ld + k] (row-major) or p[k * ld + i] (trans: column-major).
using Operand = GemmOperand;

struct Layout {
  bool direct = false;
  bool colmajor = false;
  int64_t ld = 1;
};

Layout layout_of(const TensorView& v, bool allow_colmajor);

// The storage dtype of element type T, and a strided row read as T (f32:
// f64 rounds to nearest, narrow widens; double: exact).
template <class T>
inline constexpr DType kDTypeOf = std::is_same_v<T, double> ? DType::kF64 : DType::kF32;
inline void gather_row(const void* base, DType dt, int64_t stride, int64_t n, float* out) {
  gather_row_f32(base, dt, stride, n, out);
}
inline void gather_row(const void* base, DType dt, int64_t stride, int64_t n, double* out) {
  gather_row_f64(base, dt, stride, n, out);
}
inline void scatter_row(const float* in, int64_t n, void* base, DType dt, int64_t stride) {
  scatter_row_f32(in, n, base, dt, stride);
}
inline void scatter_row(const double* in, int64_t n, void* base, DType dt, int64_t stride) {
  scatter_row_f64(in, n, base, dt, stride);
}

// Rows [r0, r0 + rc) of an input matrix as a GEMM operand of T: direct when
// the view's dtype is T's with a unit stride, else copied into `buf` (rc x
// cols, row-major T; other storage is converted there, one tile at a time:
// the GEMM runs in T).
template <class T>
class InputMatrix {
 public:
  InputMatrix() = default;
  explicit InputMatrix(const TensorView& v) : v_(v), l_(layout_of(v, true)) {
    if (v.dtype != kDTypeOf<T>) l_.direct = false;
  }
  bool direct() const { return l_.direct; }
  GemmOperandT<T> rows(int64_t r0, int64_t rc, T* buf) const {
    using Op = GemmOperandT<T>;
    const int64_t cols = v_.shape[1];
    // D = 0: nothing to read, and data may be null (no offset arithmetic on it).
    if (cols == 0) return Op{buf, 1, false};
    if (l_.direct) {
      const T* base = static_cast<const T*>(v_.data);
      return Op{base + r0 * v_.strides[0], l_.ld, l_.colmajor};
    }
    const auto* base = static_cast<const char*>(v_.data);
    const int64_t size = dtype_size(v_.dtype);
    for (int64_t i = 0; i < rc; ++i) {
      gather_row(base + (r0 + i) * v_.strides[0] * size, v_.dtype, v_.strides[1], cols,
                 buf + i * cols);
    }
    return Op{buf, std::max<int64_t>(cols, 1), false};
  }

 private:
  TensorView v_;
  Layout l_;
};

// C[M x Nn] (row-major, ldc) = op(A)[M x K] · op(B)[K x Nn] + beta C, split
// into row or column blocks over smax's threads (gemm.h: BLAS itself runs on each
// calling thread; sgemm_parallel / dgemm_parallel). `a` gives A's element
// (i, k) as described by Operand; `b` gives B's element (k, j) the same way
// (row index k).
void gemm(int threads, int64_t M, int64_t Nn, int64_t K, const Operand& a, const Operand& b,
          float beta, float* c, int64_t ldc);
void gemm(int threads, int64_t M, int64_t Nn, int64_t K, const GemmOperand64& a,
          const GemmOperand64& b, double beta, double* c, int64_t ldc);

// The transpose of an operand (element (i, k) of the result = (k, i)).
template <class T>
GemmOperandT<T> transposed(const GemmOperandT<T>& o) {
  return GemmOperandT<T>{o.p, o.ld, !o.trans};
}

// The operands of one element type: hidden and weight as GEMM operands, the
// bias and the class weights as contiguous arrays of T (f32: rounded; the
// float64 path: exact). Only the running path's are filled (Setup::f64).
template <class T>
struct Operands {
  InputMatrix<T> hm, wm;
  std::vector<T> bias_copy;   // contiguous bias when not T or not unit stride
  const T* bias = nullptr;    // contiguous [V] or nullptr
  std::vector<T> class_w;     // class weights (empty: none)
  const T* cw(int64_t v0) const { return class_w.empty() ? nullptr : class_w.data() + v0; }
  const T* bias_at(int64_t v0) const { return bias != nullptr ? bias + v0 : nullptr; }
};

// ---- validated call ------------------------------------------------------------------
struct Setup {
  const char* op = nullptr;
  int64_t N = 0, D = 0, V = 0;
  int64_t Nc = 1, Vc = 1;
  TensorView hidden, weight;
  // The float64 path: hidden or weight is f64 (include/smax/linear_cross_entropy.h,
  // "float64"); then f64_ops is filled, else f32_ops.
  bool f64 = false;
  Operands<float> f32_ops;
  Operands<double> f64_ops;
  std::optional<LossRows> lr;
  TensorView logits_shape;       // fake [N, V] view (shapes only) for row views
  double a = 0.0, zs = 0.0;
  float cap = 0.0f;
  float scale = 1.0f;            // the f32 path's s = fl(scale / temperature)
  double scale64 = 1.0;          // the float64 path's s = double(scale) / double(temperature)
  EmptyRow empty_row = EmptyRow::kZero;
  int threads = 1;
  Reduction reduction = Reduction::kMean;
  EmptyMean empty_mean = EmptyMean::kNan;
  double denominator = 0.0;  // sum of w[target] over non-ignored rows

  template <class T>
  const Operands<T>& ops() const {
    if constexpr (std::is_same_v<T, double>) {
      return f64_ops;
    } else {
      return f32_ops;
    }
  }
  bool active(int64_t r) const { return !lr->ignored(r); }
};

void check_matrix(const char* op, const TensorView& v, const char* name);

Setup prepare(const char* op, const TensorView& hidden, const TensorView& weight,
              const TensorView& target, const std::optional<TensorView>& bias,
              const CrossEntropyOptions& ce, const LinearCrossEntropyOptions& lce,
              const SoftmaxOptions& options, bool whole_vocab = false);

// One output view per row ([N] or [N, 1]); strides in the [N, V] index space.
struct RowOut {
  TensorView view;
  int64_t strides[kMaxRank] = {};
};
RowOut row_view(const Setup& s, const TensorView& v, const char* name, bool output);
void write_row_out(const RowOut& ro, const std::vector<double>& values);

// A reduced output (dst, z_loss, accuracy): kNone -> a row view, else one element.
void check_reduced(const Setup& s, const TensorView& v, const char* name);
// Inactive rows count 0 (kNone) or are left out; kMean divides by `denominator`.
void write_reduced(const Setup& s, const std::vector<double>& values, double denominator,
                   const TensorView& v, const char* name);

void check_disjoint(const char* op, const std::vector<std::pair<TensorView, const char*>>& outs,
                    const std::vector<std::pair<TensorView, const char*>>& ins);

/// The forward's outputs: dst and CrossEntropyOptions' z_loss / accuracy
/// (reduced), lse / entropy / target_logprob (per row, returned as RowOuts),
/// checked for shape and disjoint from each other and every input.
struct ForwardOuts {
  std::optional<RowOut> lse, entropy, target_logprob;
};
ForwardOuts check_forward_outputs(const char* op, const Setup& s, const TensorView& dst,
                                  const TensorView& target, const std::optional<TensorView>& bias,
                                  const CrossEntropyOptions& ce);

/// The gradient outputs of the backward ops: dhidden of hidden's shape
/// [N, D], dweight of weight's shape [V, D] (V: this call's classes), dbias
/// [V] (optional), each a float matrix / vector without self-overlap; they
/// are appended to `outs` (for check_disjoint).
void check_gradient_outputs(const char* op, const Setup& s, const TensorView& hidden,
                            const TensorView& weight, const TensorView& dhidden,
                            const TensorView& dweight, const std::optional<TensorView>& dbias,
                            std::vector<std::pair<TensorView, const char*>>& outs);

std::vector<std::pair<TensorView, const char*>> input_list(const Setup& s, const TensorView& target,
                                                           const std::optional<TensorView>& bias,
                                                           const CrossEntropyOptions& ce);

template <typename T>
std::vector<T> alloc(const char* op, int64_t count, T value = T()) {
  try {
    return std::vector<T>(static_cast<size_t>(std::max<int64_t>(count, 0)), value);
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory,
                std::string(op) + ": cannot allocate " + std::to_string(count) + " scratch elements");
  }
}

// t_y in float64 from u_y (cross_entropy's logit_at), and d t / d u
// (f32 u widen exactly).
double logit_of(const Setup& s, double u);
double cap_deriv(const Setup& s, double u);

// Per-row state of the online scan over vocabulary chunks (float64).
struct RowStat {
  double m = 0.0;    // reference: sum_j e^(t_j - m) = d
  double d = 0.0;
  double s1 = 0.0;   // sum_j e^(t_j - m) (t_j - m)
  double sum_t = 0.0, sum_w = 0.0;
  // The float64 path's Neumaier compensations of d, s1, sum_t and sum_w
  // (linear_cross_entropy_f64.cc: added in by settle_f64 after the last
  // chunk; always 0 on the f32 path).
  double d_c = 0.0, s1_c = 0.0, sum_t_c = 0.0, sum_w_c = 0.0;
  double best = -kInf;  // max_j t_j (f32 path) or max_j u_j (float64 path)
  int64_t arg = 0;
  double ty = kNan;
  bool nan = false;
};

void merge(RowStat& st, const kernels::LceScan& sc, int64_t v0);

// The float64 path's compensations added into a row's sums after its last
// chunk (linear_cross_entropy_f64.cc); nothing to do on the f32 path.
void settle_f64(RowStat& st);
template <class T>
void settle(RowStat& st) {
  if constexpr (std::is_same_v<T, double>) settle_f64(st);
}

// L = LSE(t) of a finished row: NaN, -inf (every logit -inf or V = 0) or finite.
double lse_of(const RowStat& st);

// One row's forward results from its finished statistics (cross_entropy's
// formulas; gr = the row's global index).
struct RowResult {
  double L = -kInf, H = 0.0, loss = 0.0, z = 0.0, tlp = -kInf, acc = 0.0;
};
RowResult finalize_row(const Setup& s, const RowStat& rs, int64_t gr);

// Doubles of row scratch the float64 row steps need per tile row of vc
// classes (linear_cross_entropy_f64.cc: the capped logits t and the terms
// e^(t - max)); the f32 row kernels need none.
inline int64_t row_scratch_f64(int64_t vc) { return 2 * vc; }

// Tiles and copies of one call, and (float64 path) one row scratch per
// thread, all allocated before anything is written.
template <class T>
struct Work {
  std::vector<T> tile;  // Nc x Vc
  std::vector<T> hbuf;  // Nc x D when hidden is not a direct operand
  std::vector<T> wbuf;  // Vc x D when weight is not a direct operand
  std::optional<ScratchPool> rows;
  explicit Work(const Setup& s) {
    tile = alloc<T>(s.op, s.Nc * s.Vc);
    if (!s.ops<T>().hm.direct()) hbuf = alloc<T>(s.op, s.Nc * s.D);
    if (!s.ops<T>().wm.direct()) wbuf = alloc<T>(s.op, s.Vc * s.D);
    if constexpr (std::is_same_v<T, double>) {
      // ScratchPool counts floats: two per double.
      rows.emplace(std::max(s.threads, 1), 2 * row_scratch_f64(s.Vc));
    }
  }
};

// Runs fn(r, scratch) for the rows [0, nc) of a tile of vc columns, in
// parallel; scratch: row_scratch_f64(vc) doubles of a leased buffer on the
// float64 path, nullptr on the f32 path.
template <class T, typename Fn>
void for_tile_rows(const Setup& s, Work<T>& w, int64_t nc, int64_t vc, Fn&& fn) {
  const int64_t per = std::max<int64_t>(1, kTaskElements / std::max<int64_t>(vc, 1));
  const int64_t tasks = (nc + per - 1) / per;
  run_parallel(tasks, s.threads, [&](int64_t task) {
    const int64_t end = std::min(nc, (task + 1) * per);
    std::optional<ScratchPool::Lease> lease;
    double* scratch = nullptr;
    if (w.rows) scratch = lease.emplace(*w.rows).template as<double>();
    for (int64_t r = task * per; r < end; ++r) fn(r, scratch);
  });
}

// tile[nc x vc] = the GEMM part of the logits of tokens [n0, n0 + nc) over
// classes [v0, v0 + vc) (the row steps add the bias and scale); returns the
// weight rows' operand.
template <class T>
GemmOperandT<T> logits_tile(const Setup& s, Work<T>& w, const GemmOperandT<T>& hc, int64_t nc,
                            int64_t v0, int64_t vc);

// What stats_pass (and scan_chunk) gather besides the (max, sum) of a row.
struct StatRequest {
  bool sums = false, entropy = false, argmax = false, all_rows = false;
};

// ---- row steps: one overload per tile element type ------------------------------
// (f32: the Highway kernels of kernels/linear_cross_entropy.h, in
// linear_cross_entropy_tiles.cc / _backward.cc; double: linear_cross_entropy_f64.cc.)
// A tile row holds classes [v0, v0 + vc) of token gr; `scratch` is
// row_scratch_f64(vc) doubles on the float64 path (unused on the f32 path).
//
// u = (z + bias) * s in place (the bias add, then the scale; s = 1: no multiply).
void form_logits(const Setup& s, float* row, int64_t vc, int64_t v0);
void form_logits(const Setup& s, double* row, int64_t vc, int64_t v0);
// Adds the chunk to the row's statistics (and t_y when the chunk holds an
// active row's target).
void scan_chunk(const Setup& s, const float* row, int64_t vc, int64_t v0, int64_t gr,
                const StatRequest& req, RowStat& st, double* scratch);
void scan_chunk(const Setup& s, const double* row, int64_t vc, int64_t v0, int64_t gr,
                const StatRequest& req, RowStat& st, double* scratch);
// dz of the chunk in place over u: L the row's LSE, sum_w its smoothing
// weight sum, g its upstream factor G_r (0 for inactive rows).
void grad_row(const Setup& s, float* row, int64_t vc, int64_t v0, int64_t gr, double L,
              double sum_w, double g, double* scratch);
void grad_row(const Setup& s, double* row, int64_t vc, int64_t v0, int64_t gr, double L,
              double sum_w, double g, double* scratch);
// The rows whose dz is not the formula, written here (returns true): an
// inactive row (0), every logit -inf (empty_row: 0 or NaN), a NaN / inf L
// or a NaN G_r (NaN; -inf entries 0). `row` holds u.
template <class T>
bool special_grad_row(const Setup& s, T* row, int64_t vc, int64_t gr, double L, double g) {
  const T nan = std::numeric_limits<T>::quiet_NaN(), ninf = -std::numeric_limits<T>::infinity();
  if (!s.active(gr)) {
    std::fill(row, row + vc, T(0));
  } else if (L == -kInf) {
    std::fill(row, row + vc, s.empty_row == EmptyRow::kNan ? nan : T(0));
  } else if (!std::isfinite(L) || std::isnan(g)) {
    for (int64_t j = 0; j < vc; ++j) row[j] = row[j] == ninf ? T(0) : nan;
  } else {
    return false;
  }
  return true;
}
// The coefficients of an active row's dz (cross_entropy_backward's):
// A_r = (1 - a) w_y + (a / C) sum_w + 2 zs w_y L, the target y and w_y.
struct GradCoeffs {
  int64_t y = 0;
  double wy = 0.0, A = 0.0, C = 1.0;
};
GradCoeffs grad_coeffs(const Setup& s, int64_t gr, double L, double sum_w);
// acc_j += x_j in float64 (dbias: the column sums of dz, row by row).
void accumulate(const float* x, int64_t n, double* acc);
void accumulate(const double* x, int64_t n, double* acc);

// The float64 row statistics of tokens [n0, n0 + nc) (hc: their hidden rows)
// over the whole vocabulary, one vocabulary tile at a time; st[r] settled.
template <class T>
void stats_pass(const Setup& s, Work<T>& w, const GemmOperandT<T>& hc, int64_t n0, int64_t nc,
                const StatRequest& req, std::vector<RowStat>& st);

}  // namespace lce
}  // namespace detail
}  // namespace smax

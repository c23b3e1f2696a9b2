// src/ops/losses/linear_cross_entropy_tiles.h: the pieces linear_cross_entropy.cc
// (the forward) and linear_cross_entropy_backward.cc (backward and fused)
// share: tiling constants, GEMM operands, the validated call (Setup, prepare),
// output checks and writes, the per-row statistics merged over vocabulary
// chunks, and the statistics pass over one tile. Internal to src/ops; in
// namespace smax::detail::lce.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/linear_cross_entropy.h"
#include "core/convert.h"
#include "core/gemm.h"
#include "core/internal.h"
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

// Rows [r0, r0 + rc) of an input matrix as a GEMM operand: direct when the
// view is f32 with a unit stride, else copied into `buf` (rc x cols,
// row-major f32; f16 / bf16 / f64 storage is converted there, one tile at
// a time: the GEMM runs in f32).
class InputMatrix {
 public:
  InputMatrix() = default;
  explicit InputMatrix(const TensorView& v) : v_(v), l_(layout_of(v, true)) {
    if (v.dtype != DType::kF32) l_.direct = false;
  }
  bool direct() const { return l_.direct; }
  Operand rows(int64_t r0, int64_t rc, float* buf) const {
    const int64_t cols = v_.shape[1];
    // D = 0: nothing to read, and data may be null (no offset arithmetic on it).
    if (cols == 0) return Operand{buf, 1, false};
    if (l_.direct) {
      const float* base = static_cast<const float*>(v_.data);
      return l_.colmajor ? Operand{base + r0 * v_.strides[0], l_.ld, true}
                         : Operand{base + r0 * v_.strides[0], l_.ld, false};
    }
    const auto* base = static_cast<const char*>(v_.data);
    const int64_t size = dtype_size(v_.dtype);
    for (int64_t i = 0; i < rc; ++i) {
      gather_row_f32(base + (r0 + i) * v_.strides[0] * size, v_.dtype, v_.strides[1], cols,
                     buf + i * cols);
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
          float beta, float* c, int64_t ldc);

// The transpose of an operand (element (i, k) of the result = (k, i)).
Operand transposed(const Operand& o);

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

// t_y in float64 from u_y (cross_entropy's logit_at), and d t / d u.
double logit_of(const Setup& s, float u);
double cap_deriv(const Setup& s, float u);

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

void merge(RowStat& st, const kernels::LceScan& sc, int64_t v0);

// L = LSE(t) of a finished row: NaN, -inf (every logit -inf or V = 0) or finite.
double lse_of(const RowStat& st);

// One row's forward results from its finished statistics (cross_entropy's
// formulas; gr = the row's global index).
struct RowResult {
  double L = -kInf, H = 0.0, loss = 0.0, z = 0.0, tlp = -kInf, acc = 0.0;
};
RowResult finalize_row(const Setup& s, const RowStat& rs, int64_t gr);

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
                    int64_t v0, int64_t vc);

// The float64 row statistics of tokens [n0, n0 + nc) over the whole vocabulary.
struct StatRequest {
  bool sums = false, entropy = false, argmax = false, all_rows = false;
};
void stats_pass(const Setup& s, Work& w, const Operand& hc, int64_t n0, int64_t nc,
                const StatRequest& req, std::vector<RowStat>& st);

}  // namespace lce
}  // namespace detail
}  // namespace smax

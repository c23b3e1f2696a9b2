// src/ops/sampling/sampling_rows.cc: the shared pieces of the sampling ops
// (ops/sampling/sampling_rows.h): RowOut outputs and the Gumbel-max argmax of one row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "core/errors.h"
#include "core/execution.h"
#include "core/internal.h"
#include "core/long_row.h"
#include "core/rowwise.h"
#include "ops/sampling/sampling_rows.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/runtime.h"
#include "smax/sampling.h"

namespace smax {
namespace detail {

// Rejects an output that overlaps src or a mask.
void check_against_inputs(const TensorView& out, const char* name, const TensorView& src,
                          const SoftmaxOptions& options, const char* op) {
  check_disjoint_or_same(out, name, src, "src", op, false);
  if (options.additive_mask) {
    check_disjoint_or_same(out, name, *options.additive_mask, "additive_mask", op, false);
  }
  if (options.bool_mask) {
    check_disjoint_or_same(out, name, *options.bool_mask, "bool_mask", op, false);
  }
}

// Per-row i64 output: src's shape without the axis (or keepdim).
RowOut index_output(const Rowwise& rw, const TensorView& out, const char* name,
                    const TensorView& src_in, const SoftmaxOptions& options, const char* op) {
  check_view(out, op, name, DType::kI64);
  RowOut r;
  const TensorView& src = rw.src();
  reduced_strides(src, rw.axis(), out, name, op, r.strides);
  check_no_self_overlap(out, name, op);
  check_against_inputs(out, name, src_in, options, op);
  r.base = static_cast<char*>(out.data);
  r.dtype = DType::kI64;
  r.elem = 8;
  r.rank = src.rank;
  r.axis = rw.axis();
  for (int d = 0; d < src.rank; ++d) r.shape[d] = src.shape[d];
  return r;
}

// [.., k] output: src's shape with the axis of length k.
RowOut k_output(const Rowwise& rw, const TensorView& out_in, const char* name, DType dtype,
                int64_t k, const TensorView& src_in, const SoftmaxOptions& options,
                const char* op) {
  // dtype kF32 stands for "a floating output" (f32, f64, f16 or bf16).
  if (dtype == DType::kF32) {
    check_float_view(out_in, op, name);
  } else {
    check_view(out_in, op, name, dtype);
  }
  const TensorView out = as_rank1_if_scalar(out_in);
  const TensorView& src = rw.src();
  bool ok = out.rank == src.rank;
  for (int d = 0; ok && d < src.rank; ++d) {
    ok = out.shape[d] == (d == rw.axis() ? k : src.shape[d]);
  }
  if (!ok) {
    fail(op, std::string(name) + " shape " + out_in.describe() + " must be src shape " +
                 src.describe() + " with dim " + std::to_string(rw.axis()) + " of size k = " +
                 std::to_string(k));
  }
  check_no_self_overlap(out_in, name, op);
  check_against_inputs(out_in, name, src_in, options, op);
  RowOut r;
  r.base = static_cast<char*>(out.data);
  r.dtype = out_in.dtype;
  r.elem = dtype_size(out_in.dtype);
  r.rank = src.rank;
  r.axis = rw.axis();
  for (int d = 0; d < src.rank; ++d) {
    r.shape[d] = src.shape[d];
    r.strides[d] = out.strides[d];
  }
  r.axis_stride = out.strides[rw.axis()];
  return r;
}

namespace {

// Largest f32 thr such that t <= thr implies t + g < best for every noise
// value g <= kGumbelBound, with a relative margin that also covers the
// rounding of the float64 sum t + g.
float prune_threshold(double best) {
  const double th = best - kernels::kGumbelBound - std::fabs(best) * 1e-12;
  float f = static_cast<float>(th);
  if (static_cast<double>(f) > th) f = std::nextafter(f, -kInfF);
  return f;
}

}  // namespace

// argmax_i ((double) t_i + g(seed, row, i)), lowest index on ties; -1 for
// empty, all -inf, NaN or +inf rows. The two float64 logs of the noise are
// paid only by entries that can still win. Per chunk of kChunk entries:
//  1. a SIMD filter keeps t_i > best - 37 (g <= 36.74 for every U);
//  2. a log-free test on U: with e_i ~ e^(t_i - best) (SIMD f32 exp against
//     the f32-rounded best, |best| < 1e5 so the argument is off by < 0.01,
//     i.e. e_i >= e^(t_i - best) / 1.02) and w = floor24(1 - U) <= 1 - U,
//     w >= 2 e_i implies U <= 1 - 1.96 e^(t_i - best) <= exp(-1.96 e^(t_i -
//     best)), hence g_i <= best - t_i - log(1.96) and t_i + g_i < best - 0.67:
//     the entry cannot win (or tie), whatever the rounding of t_i + g_i.
//     Only the top 24 bits of u are needed: (~u) >> 40 = (~hi) >> 8.
// About 2 survivors per row are expected once best is near its final value,
// The Philox words for step 2 come from a SIMD Philox over the chunk
// (philox_hi_words); survivors recompute their full u with the scalar one.
// So the cost per entry is ~1/2 vector Philox lane plus one SIMD exp.
int64_t gumbel_argmax(const float* t, int64_t n, uint64_t seed, uint64_t row, int64_t* idx,
                      float* ebuf, uint32_t* hbuf, uint64_t offset) {
  if (n == 0) return -1;
  const kernels::MaxScan ms = kernels::max_scan(t, n);
  if (ms.has_nan || !(ms.max < kInfF) || ms.max == -kInfF) return -1;
  int64_t best_i = kernels::find_first_equal(t, n, ms.max);
  double best = static_cast<double>(ms.max) +
                kernels::gumbel(seed, row, offset + static_cast<uint64_t>(best_i));
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    const int64_t cnt = kernels::select_greater(t + c0, len, prune_threshold(best), idx);
    const bool prune_u = cnt > 16 && std::fabs(best) < 1e5;
    // Entry c0 + j has the noise index offset + c0 + j: word j + shift of
    // the pairs from (offset + c0) / 2 on.
    const int64_t shift = static_cast<int64_t>((offset + static_cast<uint64_t>(c0)) & 1);
    if (prune_u) {
      kernels::exp_scale_segment(t + c0, nullptr, len, 1.0f, static_cast<float>(best), 1.0f, ebuf);
      kernels::philox_hi_words(seed, row, (offset + c0) / 2, (len + shift + 1) / 2, hbuf);
    }
    for (int64_t j = 0; j < cnt; ++j) {
      const int64_t i = c0 + idx[j];
      if (i == best_i) continue;
      if (prune_u) {
        const float wf = static_cast<float>((~hbuf[idx[j] + shift]) >> 8) * 0x1p-24f;
        if (wf >= 2.0f * ebuf[idx[j]]) continue;
      }
      const double z =
          static_cast<double>(t[i]) + kernels::gumbel(seed, row, offset + static_cast<uint64_t>(i));
      if (z > best || (z == best && i < best_i)) {
        best = z;
        best_i = i;
      }
    }
  }
  return best_i;
}

Algorithm softmax_algorithm(const SoftmaxOptions& o, int64_t n) {
  return o.algorithm == Algorithm::kAuto ? choose_algorithm("softmax", n) : o.algorithm;
}

}  // namespace detail
}  // namespace smax

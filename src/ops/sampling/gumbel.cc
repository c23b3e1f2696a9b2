// src/ops/sampling/gumbel.cc: gumbel_noise, gumbel_softmax (+ backward) and gumbel_max
// (include/smax/sampling.h); Rowwise ops like the rest of the sampling ops
// (sampling.cc), sharing their pieces through ops/sampling/sampling_rows.h.
// An f64 input runs the float64 rows of ops/sampling/sampling_f64.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "core/convert.h"
#include "core/errors.h"
#include "core/execution.h"
#include "core/internal.h"
#include "core/long_row.h"
#include "core/rowwise.h"
#include "kernels/softmax_f64.h"
#include "ops/sampling/sampling_f64.h"
#include "ops/sampling/sampling_rows.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/runtime.h"
#include "smax/sampling.h"

namespace smax {

using detail::RowArgs;
using detail::Rowwise;

// ---- gumbel_noise ---------------------------------------------------------------

void gumbel_noise(const TensorView& dst_in, uint64_t seed, int64_t axis) {
  const char* op = "gumbel_noise";
  detail::ensure_runtime_initialized();
  detail::check_float_view(dst_in, op, "dst");
  detail::check_no_self_overlap(dst_in, "dst", op);
  const TensorView dst = detail::as_rank1_if_scalar(dst_in);
  const int ax = detail::resolve_axis(axis, dst_in.rank, op);
  char* bases[detail::kMaxOperands] = {static_cast<char*>(dst.data)};
  const int sizes[detail::kMaxOperands] = {dtype_size(dst.dtype)};
  int64_t strides[detail::kMaxOperands][kMaxRank] = {};
  for (int d = 0; d < dst.rank; ++d) strides[0][d] = dst.strides[d];
  const detail::Geometry g = detail::make_geometry(dst, ax, 1, bases, sizes, strides);
  if (g.rows == 0 || g.n == 0) return;
  detail::for_each_row_task(g, max_threads(), [&](int64_t begin, int64_t end) {
    int64_t off[detail::kMaxOperands];
    for (int64_t row = begin; row < end; ++row) {
      g.row_offsets(row, off);
      char* p = g.at(0, off[0]);
      const int64_t step = g.axis_stride[0] * g.elem_size[0];
      for (int64_t i = 0; i < g.n; i += 2) {
        double g2[2];
        kernels::gumbel_pair(seed, static_cast<uint64_t>(row), static_cast<uint64_t>(i / 2), g2);
        // f32 (and narrower) outputs keep today's bits: the f32 rounding
        // first, as before; f64 outputs keep the double.
        detail::store_f64(p + i * step, dst.dtype,
                          dst.dtype == DType::kF64 ? g2[0] : static_cast<float>(g2[0]));
        if (i + 1 < g.n) {
          detail::store_f64(p + (i + 1) * step, dst.dtype,
                            dst.dtype == DType::kF64 ? g2[1] : static_cast<float>(g2[1]));
        }
      }
    }
  });
}

// ---- gumbel_softmax -------------------------------------------------------------

namespace {
// gumbel_softmax's f32 row (dst = a.out[0], y_soft = a.out[1] when given).
void gumbel_softmax_row_f32_into(const RowArgs& a, bool has_noise, bool has_soft, bool hard,
                                 float tau, uint64_t seed, const SoftmaxOptions& options) {
  const int64_t n = a.n;
  if (n == 0) return;
  const float* t = a.in[0];
  const float* noise = has_noise ? a.in[1] : nullptr;
  float* soft = (hard && has_soft) ? a.out[1] : a.out[0];
  double best = -detail::kInfD;
  int64_t h = -1;
  auto one = [&](int64_t i, double g, float gf) {
    const double zd = static_cast<double>(t[i]) + g;
    if (zd > best) {
      best = zd;
      h = i;
    }
    soft[i] = (t[i] + gf) / tau;
  };
  if (noise != nullptr) {
    for (int64_t i = 0; i < n; ++i) one(i, noise[i], noise[i]);
  } else {
    for (int64_t i = 0; i < n; i += 2) {
      double g2[2];
      kernels::gumbel_pair(seed, static_cast<uint64_t>(a.row), static_cast<uint64_t>(i / 2), g2);
      one(i, g2[0], static_cast<float>(g2[0]));
      if (i + 1 < n) one(i + 1, g2[1], static_cast<float>(g2[1]));
    }
  }
  detail::forward_row(detail::ForwardOp::kSoftmax, detail::softmax_algorithm(options, n), soft,
                      nullptr, n, 1.0f, a.empty_row, soft, 1);
  if (!hard) {
    if (has_soft) std::memcpy(a.out[1], soft, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  float* out = a.out[0];
  if (std::isnan(soft[0]) || !(best > -detail::kInfD) || !(best < detail::kInfD)) {
    if (out != soft) std::memcpy(out, soft, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  std::fill(out, out + n, 0.0f);
  out[h] = 1.0f;
}

// gumbel_softmax's float64 row.
void gumbel_softmax_row_f64_into(const detail::RowArgs64& a, bool has_noise, bool has_soft,
                                 bool hard, float tau, uint64_t seed) {
  const int64_t n = a.n;
  if (n == 0) return;
  double* soft = (hard && has_soft) ? a.out[1] : a.out[0];
  const int64_t h = detail::gumbel_softmax_row_f64(a.in[0], has_noise ? a.in[1] : nullptr, n, tau,
                                                   seed, static_cast<uint64_t>(a.row),
                                                   a.empty_row, soft);
  if (!hard) {
    if (has_soft) std::copy(soft, soft + n, a.out[1]);
    return;
  }
  double* out = a.out[0];
  if (std::isnan(soft[0]) || h < 0) {
    if (out != soft) std::copy(soft, soft + n, out);
    return;
  }
  std::fill(out, out + n, 0.0);
  out[h] = 1.0;
}
}  // namespace


void gumbel_softmax(const TensorView& src, const TensorView& dst,
                    const GumbelSoftmaxOptions& gumbel, const SoftmaxOptions& options) {
  const char* op = "gumbel_softmax";
  Rowwise rw(op, src, "src", true, options);
  if (!(std::isfinite(gumbel.tau) && gumbel.tau > 0.0f)) {
    detail::fail(op, "tau must be finite and > 0, got " + detail::num(gumbel.tau));
  }
  const bool has_noise = gumbel.noise.has_value();
  const bool has_soft = gumbel.y_soft.has_value();
  if (has_noise) rw.add_input(*gumbel.noise, "noise");
  rw.add_output(dst, "dst");
  if (has_soft) rw.add_output(*gumbel.y_soft, "y_soft");
  const float tau = gumbel.tau;
  const bool hard = gumbel.hard;
  const uint64_t seed = gumbel.seed;
  rw.run_native(0, [&](const auto& a) {
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      gumbel_softmax_row_f64_into(a, has_noise, has_soft, hard, tau, seed);
    } else {
      gumbel_softmax_row_f32_into(a, has_noise, has_soft, hard, tau, seed, options);
    }
  });
}


void gumbel_softmax_backward(const TensorView& y_soft, const TensorView& dy, const TensorView& dx,
                             float tau, const SoftmaxOptions& options) {
  const char* op = "gumbel_softmax_backward";
  Rowwise rw(op, y_soft, "y_soft", false, options);
  if (!(std::isfinite(tau) && tau > 0.0f)) {
    detail::fail(op, "tau must be finite and > 0, got " + detail::num(tau));
  }
  rw.add_input(dy, "dy");
  const float c = rw.scale() / tau;
  // c = s / tau: an f32 on the f32 path, a double on the float64 one (an f64
  // y_soft or dy), which must be finite and positive in its own type.
  const double c64 = static_cast<double>(options.scale) /
                     static_cast<double>(options.temperature) / static_cast<double>(tau);
  const bool c_ok = rw.any_input_f64() ? std::isfinite(c64) && c64 > 0.0
                                       : std::isfinite(c) && c > 0.0f;
  if (!c_ok) {
    detail::fail(op, "scale / temperature / tau = " + detail::num(rw.scale()) + " / " +
                         detail::num(tau) + " is not a finite positive " +
                         (rw.any_input_f64() ? "double" : "f32"));
  }
  rw.add_output(dx, "dx");
  rw.zero_masked_outputs();
  rw.run_native(0, [&](const auto& a) {
    if (a.n == 0) return;
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      // c = s / tau in double (s = double(scale) / double(temperature)).
      kernels::softmax_backward_row_f64(false, a.in[0], a.in[1], a.n, a.scale / tau, a.out[0]);
    } else {
      detail::backward_row(detail::BackwardOp::kSoftmax, a.in[0], a.in[1], a.n, c, a.out[0], 1);
    }
  });
}

// ---- gumbel_max -----------------------------------------------------------------

void gumbel_max(const TensorView& src, const TensorView& indices, uint64_t seed,
                const SoftmaxOptions& options) {
  const char* op = "gumbel_max";
  Rowwise rw(op, src, "src", true, options);
  const detail::RowOut out = detail::index_output(rw, indices, "indices", src, options, op);
  const int64_t floats = detail::floats_for<int64_t>(detail::kChunk) + 2 * detail::kChunk;
  rw.run_native(4 * floats, [&](const auto& a) {
    const auto row = static_cast<uint64_t>(a.row);
    if constexpr (detail::kIsF64Row<decltype(a)>) {
      *out.at<int64_t>(a.row) = detail::gumbel_argmax_f64(a.in[0], a.n, seed, row);
    } else {
      float* scratch = a.scratch;
      int64_t* idx = detail::carve<int64_t>(scratch, detail::kChunk);
      auto* hbuf = reinterpret_cast<uint32_t*>(scratch + detail::kChunk);
      *out.at<int64_t>(a.row) = detail::gumbel_argmax(a.in[0], a.n, seed, row, idx, scratch, hbuf);
    }
  });
}
}  // namespace smax

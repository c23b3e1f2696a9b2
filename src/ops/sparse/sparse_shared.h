// src/ops/sparse/sparse_shared.h: parameter checks shared by the sparse ops and
// their losses (all throw smax::Error before anything is written).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/convert.h"
#include "core/errors.h"
#include "core/rowwise.h"
#include "smax/error.h"
#include "smax/sparse.h"

namespace smax::detail {

/// alpha finite and >= 1 (1 only as the scalar softmax route), n_iter >= 1.
inline void check_bisect_params(const char* op, const EntmaxBisectOptions& p) {
  if (!p.alpha_tensor && !(std::isfinite(p.alpha) && p.alpha >= 1.0f)) {
    fail(op, "alpha must be finite and > 1 (or exactly 1: softmax), got " + num(p.alpha));
  }
  if (p.n_iter < 1) fail(op, "n_iter must be >= 1, got " + std::to_string(p.n_iter));
}

/// Every element of the per-row alpha tensor finite and > 1. Call after
/// Rowwise::add_row_input validated the view.
inline void check_alpha_tensor(const char* op, const TensorView& v) {
  const auto* base = static_cast<const char*>(v.data);
  const int size = dtype_size(v.dtype);
  int64_t total = 1;
  for (int d = 0; d < v.rank; ++d) total *= v.shape[d];
  int64_t index[kMaxRank] = {};
  for (int64_t e = 0; e < total; ++e) {
    int64_t off = 0;
    for (int d = 0; d < v.rank; ++d) off += index[d] * v.strides[d];
    const double a = load_f64(base + off * size, v.dtype);  // its own dtype, exactly
    if (!(std::isfinite(a) && a > 1.0)) {
      fail(op, "alpha_tensor element " + std::to_string(e) + " must be finite and > 1, got " +
                   num(a));
    }
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
}

inline void check_k(const char* op, int64_t k) {
  if (k < 1) fail(op, "k must be >= 1, got " + std::to_string(k));
}

}  // namespace smax::detail

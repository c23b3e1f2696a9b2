// src/ops/normalizers/clipped_softmax.cc: clipped softmax and its VJP
// (include/smax/rescaled.h) on the Rowwise driver (core/rowwise.h): the
// library's softmax row kernel on the gathered row (in cache: the three-pass
// reload variant), then the stretch and clip in float64 per element. Op
// parameters are checked before Rowwise::run, so nothing is written on error.
// f64 logits run on float64 rows (Rowwise::run_native): the float64 softmax
// kernel (kernels/softmax_f64.h), the dot <u, p> compensated.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/softmax_f64.h"
#include "core/compensated.h"
#include "core/errors.h"
#include "core/long_row.h"
#include "core/rowwise.h"
#include "smax/error.h"
#include "smax/rescaled.h"

namespace smax {
namespace {

using detail::fail;
using detail::num;
using detail::Rowwise;
using detail::BackwardRowwise;
using detail::ForwardRowwise;
using detail::softmax_row_reload;

void check_clipped(const char* op, const ClippedSoftmaxOptions& p) {
  if (!(std::isfinite(p.gamma) && p.gamma <= 0.0f)) {
    fail(op, "gamma must be finite and <= 0, got " + num(p.gamma));
  }
  if (!(std::isfinite(p.zeta) && p.zeta >= 1.0f)) {
    fail(op, "zeta must be finite and >= 1, got " + num(p.zeta));
  }
}

// The stretched probability z = (zeta - gamma) p + gamma, in float64 (NaN
// stays NaN); the forward output is clip(z, 0, 1) rounded once, and the
// backward passes the gradient where 0 <= z <= 1.
struct Stretch {
  double a, gamma;
  explicit Stretch(const ClippedSoftmaxOptions& p)
      : a(static_cast<double>(p.zeta) - static_cast<double>(p.gamma)),
        gamma(static_cast<double>(p.gamma)) {}
  double z(double p) const { return a * p + gamma; }
};

// p = softmax(t) of a row: the f32 row kernel, or the float64 one.
void softmax_of(const float* t, int64_t n, EmptyRow policy, float* p) {
  softmax_row_reload(t, n, 1.0f, policy, p);
}
void softmax_of(const double* t, int64_t n, EmptyRow policy, double* p) {
  kernels::softmax_row_f64(kernels::F64Op::kSoftmax, t, n, policy, p);
}

}  // namespace

void clipped_softmax(const TensorView& src, const TensorView& dst,
                     const ClippedSoftmaxOptions& params, const SoftmaxOptions& options) {
  const char* op = "clipped_softmax";
  check_clipped(op, params);
  const Stretch st(params);
  ForwardRowwise rw(op, src, dst, options);
  rw.run_native(0, [&](const auto& a) {
    using T = detail::RowValue<decltype(a)>;
    if (a.n == 0) return;
    T* y = a.out[0];
    softmax_of(a.in[0], a.n, a.empty_row, y);
    for (int64_t i = 0; i < a.n; ++i) {
      const double z = st.z(y[i]);
      y[i] = static_cast<T>(z < 0.0 ? 0.0 : z > 1.0 ? 1.0 : z);  // NaN stays NaN
    }
  });
}

void clipped_softmax_backward(const TensorView& src, const TensorView& dy, const TensorView& dsrc,
                              const ClippedSoftmaxOptions& params,
                              const SoftmaxOptions& options) {
  const char* op = "clipped_softmax_backward";
  check_clipped(op, params);
  const Stretch st(params);
  BackwardRowwise rw(op, src, "src", true, dy, dsrc, options);
  rw.zero_masked_outputs();
  // Scratch: p, n values of the row's type.
  rw.run_native(8 * rw.row_length(), [&](const auto& a) {
    using T = detail::RowValue<decltype(a)>;
    constexpr T kNaN = std::numeric_limits<T>::quiet_NaN();
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    if (a.n == 0) return;
    const T* t = a.in[0];
    const T* g = a.in[1];
    T* dx = a.out[0];
    T* p = a.scratch;
    softmax_of(t, a.n, a.empty_row, p);
    // A NaN softmax row (NaN / +inf logits, or an empty row under kNan)
    // gives a NaN gradient row; an empty row under kZero gives p = 0, hence 0.
    if (std::isnan(p[0])) {
      for (int64_t j = 0; j < a.n; ++j) dx[j] = kNaN;
      return;
    }
    detail::CompensatedSum rsum;  // <u, p> over the visible entries
    for (int64_t i = 0; i < a.n; ++i) {
      if (t[i] == kNegInf) continue;
      const double z = st.z(p[i]);
      if (z >= 0.0 && z <= 1.0) {
        if constexpr (std::is_same_v<T, double>) {
          rsum.add(st.a * g[i] * p[i]);
        } else {
          rsum.sum += st.a * static_cast<double>(g[i]) * static_cast<double>(p[i]);
        }
      }
    }
    const double r = rsum.value();
    const double s = static_cast<double>(a.scale);
    for (int64_t j = 0; j < a.n; ++j) {
      if (t[j] == kNegInf) {
        dx[j] = T(0);
        continue;
      }
      const double z = st.z(p[j]);
      const double u = z >= 0.0 && z <= 1.0 ? st.a * static_cast<double>(g[j]) : 0.0;
      dx[j] = static_cast<T>(s * static_cast<double>(p[j]) * (u - r));
    }
  });
}

}  // namespace smax

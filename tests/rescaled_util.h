// tests/rescaled_util.h: helpers, checks and the per-target fixture shared by
// tests/test_rescaled*.cc, which test
// SSMax, softpick, StableMax (+ cross-entropy) and the
// Softmax Collapse detector (include/smax/rescaled.h) against the float64
// oracles of src/reference/rescaled.h, on every SIMD target.
//
// Bounds are the headers' (include/smax/rescaled.h), enforced as written:
//  ssmax:            |y - ref| <= 2e-6 |ref| + 1e-36 (ref: softmax of fl(t c))
//  ssmax_backward:   |dx - ref| <= 2e-6 |sigma c| |y| (|g| + |D|) + 1e-30,
//                    |ds - ref| <= 2e-6 ln n sum |t y| (|g| + |D|) + 1e-30
//  softpick:         |y - ref| <= 2e-6 ((1 + K)|ref| + q) + 1e-36
//  softpick_backward |dx - ref| <= 2e-6 sigma q ((1 + K)(|g| + |r|) + G) + 1e-30
//  stablemax:        |y - ref| <= 1e-6 |ref| + 1e-36
//  stablemax_backward|dx - ref| <= 2e-6 sigma (s'/S)(|g| + |r| + sum |g| y) + 1e-30
//  CE loss:          |l - ref| <= 1e-6 |ref| + 1e-30 per row (reductions: the
//                    sum of the rows' bounds, + 2^-24 |ref| for the f32 result)
//  CE gradient:      |dx - ref| <= 2e-6 |c sigma| |y - d_t| / (1 + |t|) + 1e-30
// with exact zeros where the reference is exactly 0 (masked entries, rows of
// softpick with max <= 0, ignored rows) and NaN exactly where it is NaN.
// Collapse flags must equal the oracle's wherever the oracle is decidable at
// the f32 exp's accuracy (reference::softmax_collapse_flags).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/rescaled.h"
#include "reference/bounds.h"
#include "reference/reference.h"
#include "reference/rescaled.h"
#include "reference/rows.h"
#include "smax/rescaled.h"
#include "test_util.h"

namespace smax_test {
namespace {

namespace ref = smax::reference;
using ref::Row;
using smax::LossOptions;
using smax::Precision;
using smax::Reduction;
using smax::SoftpickOptions;
using smax::SsmaxOptions;
using I64Tensor = Array<int64_t>;


enum class Kind { kSsmax, kSoftpick, kStablemax };
inline const char* kind_name(Kind k) {
  return k == Kind::kSsmax ? "ssmax" : k == Kind::kSoftpick ? "softpick" : "stablemax";
}

// Rows of a view (no logit transform) in row order.
inline ref::RefRows rows_of(const TensorView& v, const SoftmaxOptions& o) {
  SoftmaxOptions plain;
  plain.axis = o.axis;
  return ref::ref_rows("test", v, plain, false);
}
inline Row row(const ref::RefRows& R, int64_t r) { return Row(R.row(r), R.row(r) + R.n); }

// Extra data: values near 0 (softpick's ill-conditioned region).
inline void fill_near_zero(Tensor& t, Rng& rng) {
  t.fill([&](int64_t) { return rng.uniform(-0.01f, 0.01f); });
}

// ---------------------------------------------------------------------------
// Checks of one op call (library output vs row-level reference + bound).
// ---------------------------------------------------------------------------
struct Checker {
  CheckResult res;
  int64_t index = 0;
  void element(float out, double refv, double bound, bool exact_zero = true) {
    check_element(res, index++, out, refv, bound, exact_zero);
  }
};

struct Params {
  SsmaxOptions ssmax;
  SoftpickOptions softpick;
};

// Forward: runs the op into dst and checks it.
inline ::testing::AssertionResult check_forward(Kind kind, const Tensor& src, Tensor& dst,
                                         const SoftmaxOptions& o, const Params& p,
                                         const std::string& what) {
  dst.poison();
  switch (kind) {
    case Kind::kSsmax: smax::ssmax(src.view(), dst.view(), p.ssmax, o); break;
    case Kind::kSoftpick: smax::softpick(src.view(), dst.view(), p.softpick, o); break;
    case Kind::kStablemax: smax::stablemax(src.view(), dst.view(), o); break;
  }
  if (!dst.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const ref::RefRows R = ref::ref_rows("test", src.view(), o);
  const ref::RefRows O = rows_of(dst.view(), o);
  std::vector<double> srow(static_cast<size_t>(R.rows), p.ssmax.s);
  if (kind == Kind::kSsmax && p.ssmax.s_rows) srow = ref::ref_row_values("t", *p.ssmax.s_rows, R);
  Checker c;
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t = row(R, r), out = row(O, r);
    if (kind == Kind::kSsmax) {
      const Row y = ref::ssmax_row(t, srow[static_cast<size_t>(r)], p.ssmax.fixed_n, o.empty_row,
                                   true, true);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), y[i], 2e-6 * std::fabs(y[i]) + 1e-36);
    } else if (kind == Kind::kSoftpick) {
      const ref::SoftpickRow f = ref::softpick_row(t, p.softpick.eps, o.empty_row);
      const Row b = ref::softpick_forward_bound(f);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), f.y[i], b[i]);
    } else {
      const Row y = ref::stablemax_row(t, o.empty_row);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), y[i], 1e-6 * std::fabs(y[i]) + 1e-36);
    }
  }
  return to_assertion(c.res, what);
}

// Saved forward output for ssmax_backward: the reference rounded to f32.
inline void saved_ssmax(const Tensor& src, const SoftmaxOptions& o, const SsmaxOptions& p, Tensor& y) {
  const std::vector<double> ref_y = ref::ssmax(src.view(), p, o);
  y.fill([&](int64_t i) { return static_cast<float>(ref_y[static_cast<size_t>(i)]); });
}

// Backward: dy random; runs the op into dst (dsrc) and checks it (and ds).
inline ::testing::AssertionResult check_backward_op(Kind kind, const Tensor& src, Tensor& dst,
                                             const SoftmaxOptions& o, const Params& p, Rng& rng,
                                             const std::string& what) {
  Tensor dy(src.shape());
  fill_normal(dy, rng);
  Tensor y(src.shape());
  Array<float> ds(drop_axis(src.shape(), static_cast<int>(o.axis < 0 ? o.axis + static_cast<int64_t>(src.shape().size()) : o.axis)));
  dst.poison();
  switch (kind) {
    case Kind::kSsmax: {
      saved_ssmax(src, o, p.ssmax, y);
      const TensorView dsv = ds.view();
      smax::ssmax_backward(src.view(), y.view(), dy.view(), dst.view(), p.ssmax, o, &dsv);
      break;
    }
    case Kind::kSoftpick: smax::softpick_backward(src.view(), dy.view(), dst.view(), p.softpick, o); break;
    case Kind::kStablemax: smax::stablemax_backward(src.view(), dy.view(), dst.view(), o); break;
  }
  if (!dst.guards_intact() || !ds.guards_intact()) {
    return ::testing::AssertionFailure() << what << ": guard written";
  }
  const ref::RefRows R = ref::ref_rows("test", src.view(), o);
  const ref::RefRows O = rows_of(dst.view(), o);
  const ref::RefRows G = rows_of(dy.view(), o);
  const ref::RefRows Y = rows_of(y.view(), o);
  const double sigma = R.scale;
  std::vector<double> srow(static_cast<size_t>(R.rows), p.ssmax.s);
  if (kind == Kind::kSsmax && p.ssmax.s_rows) srow = ref::ref_row_values("t", *p.ssmax.s_rows, R);
  const std::vector<float> dsd = ds.dense();
  Checker c;
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t = row(R, r), out = row(O, r), g = row(G, r);
    if (kind == Kind::kSsmax) {
      const Row yy = row(Y, r);
      double dsr = 0.0;
      const double s = srow[static_cast<size_t>(r)];
      const Row dx = ref::ssmax_vjp_row(t, yy, g, s, p.ssmax.fixed_n, sigma, o.empty_row, true, &dsr);
      const int64_t nn = ref::ssmax_n(t, p.ssmax.fixed_n);
      const double cf = nn > 0 ? ref::ssmax_factor(s, nn, true) : 0.0;
      // The bounds without the documented dot terms (bounds.h).
      const Row b = ref::ssmax_backward_bound(yy, g, sigma * cf);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), dx[i], b[i]);
      if (R.n > 0) {
        c.element(dsd[static_cast<size_t>(r)], dsr, ref::ssmax_ds_bound(t, yy, g, nn), false);
      }
    } else if (kind == Kind::kSoftpick) {
      const ref::SoftpickRow f = ref::softpick_row(t, p.softpick.eps, o.empty_row);
      const Row dx = ref::softpick_vjp_row(t, g, p.softpick.eps, sigma, o.empty_row);
      const Row b = ref::softpick_backward_bound(t, g, f, sigma);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), dx[i], b[i]);
    } else {
      const Row dx = ref::stablemax_vjp_row(t, g, sigma, o.empty_row);
      const Row b = ref::stablemax_backward_bound(t, g, sigma, o.empty_row);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), dx[i], b[i]);
    }
  }
  return to_assertion(c.res, what);
}

// ---------------------------------------------------------------------------
// Per-target suite.
// ---------------------------------------------------------------------------
class Rescaled : public RecordingTargetTest {};

}  // namespace
}  // namespace smax_test

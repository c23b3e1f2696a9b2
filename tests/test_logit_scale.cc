// tests/test_logit_scale.cc: logit_scale_gradients (smax/logit_scale.h), the
// gradients of scale and temperature of any op:
//  * the hand vector of docs/numerics.md (softmax, x = [0, 1, 3], T = 2, g = [1, 0, 0]);
//  * central finite differences of float64 oracles of softmax, log_softmax
//    and logsumexp (loss = <g, op(x * scale / T + mask)>) against the op's
//    backward followed by logit_scale_gradients, scale and T both != 1, an
//    additive mask and a bool mask;
//  * terms with dsrc == 0 left out (inf / NaN under masked entries);
//  * strided, transposed and mixed-dtype views give the float64 sum of the
//    products; bits do not depend on the thread count;
//  * errors name the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/convert.h"
#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::DType;
using smax::LogitScaleGradients;
using smax::SoftmaxOptions;
using smax::TensorView;

TensorView view_of(void* p, DType dt, std::vector<int64_t> shape,
                   std::vector<int64_t> strides = {}) {
  return smax::make_view(p, dt, static_cast<int>(shape.size()), shape.data(),
                         strides.empty() ? nullptr : strides.data());
}

TEST(LogitScale, SpecVector) {
  // softmax([0, 1, 3] / 2), g = [1, 0, 0]: dT = 0.0742180 (docs/numerics.md, hand vectors).
  std::vector<float> x = {0.0f, 1.0f, 3.0f}, y(3), g = {1.0f, 0.0f, 0.0f}, dx(3);
  SoftmaxOptions o;
  o.temperature = 2.0f;
  smax::softmax(smax::make_view(x.data(), {3}), smax::make_view(y.data(), {3}), o);
  smax::softmax_backward(smax::make_view(y.data(), {3}), smax::make_view(g.data(), {3}),
                         smax::make_view(dx.data(), {3}), o);
  const LogitScaleGradients r =
      smax::logit_scale_gradients(smax::make_view(x.data(), {3}), smax::make_view(dx.data(), {3}), o);
  EXPECT_NEAR(r.dtemperature, 0.0742180, 5e-7);
  EXPECT_NEAR(r.dscale, -2.0 * 0.0742180, 1e-6);  // S / scale = -T dT / scale
}

// float64 oracles of the softmax family on rows of the last dim.
enum class Family { kSoftmax, kLogSoftmax, kLogsumexp };

// loss = sum_rows <g_row, op(t_row)>, t = x * scale / T + add (-inf where keep == 0).
double oracle_loss(Family f, const std::vector<float>& x, const std::vector<float>& add,
                   const std::vector<uint8_t>& keep, const std::vector<float>& g, int64_t rows,
                   int64_t n, double scale, double temp) {
  double loss = 0.0;
  std::vector<double> t(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(r * n + j);
      t[static_cast<size_t>(j)] = keep[i] ? static_cast<double>(x[i]) * scale / temp + add[i] : -INFINITY;
      m = std::max(m, t[static_cast<size_t>(j)]);
    }
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(t[static_cast<size_t>(j)] - m);
    const double lse = m + std::log(s);
    if (f == Family::kLogsumexp) {
      loss += static_cast<double>(g[static_cast<size_t>(r)]) * lse;
      continue;
    }
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(r * n + j);
      if (!keep[i]) continue;
      const double v = t[static_cast<size_t>(j)] - lse;
      loss += static_cast<double>(g[i]) * (f == Family::kSoftmax ? std::exp(v) : v);
    }
  }
  return loss;
}

TEST(LogitScale, MatchesFiniteDifferencesOfTheOracle) {
  Rng rng("fd");
  const int64_t rows = 5, n = 37;
  const double scale = 1.3, temp = 0.7;
  std::vector<float> x(rows * n), add(rows * n), g(rows * n);
  std::vector<uint8_t> keep(rows * n);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = rng.uniform(-4.0f, 4.0f);
    add[i] = rng.uniform(-1.0f, 1.0f);
    g[i] = rng.uniform(-1.0f, 1.0f);
    keep[i] = rng.bernoulli(0.8) ? 1 : 0;
    if (!keep[i]) g[i] = 0.0f;  // log_softmax is -inf there: a finite loss needs g = 0
  }
  for (Family f : {Family::kSoftmax, Family::kLogSoftmax, Family::kLogsumexp}) {
    SCOPED_TRACE(static_cast<int>(f));
    SoftmaxOptions o;
    o.scale = static_cast<float>(scale);
    o.temperature = static_cast<float>(temp);
    o.additive_mask = smax::make_view(add.data(), {rows, n});
    o.bool_mask = smax::make_bool_view(keep.data(), {rows, n});
    std::vector<float> y(rows * n), dx(rows * n);
    const TensorView xv = smax::make_view(x.data(), {rows, n});
    const TensorView yv = smax::make_view(y.data(), {rows, n});
    const TensorView dxv = smax::make_view(dx.data(), {rows, n});
    if (f == Family::kSoftmax) {
      smax::softmax(xv, yv, o);
      smax::softmax_backward(yv, smax::make_view(g.data(), {rows, n}), dxv, o);
    } else if (f == Family::kLogSoftmax) {
      smax::log_softmax(xv, yv, o);
      smax::log_softmax_backward(yv, smax::make_view(g.data(), {rows, n}), dxv, o);
    } else {
      // d lse / d x = s * softmax(t), times the row's g.
      smax::softmax(xv, yv, o);
      const double s = static_cast<double>(o.scale / o.temperature);
      for (int64_t i = 0; i < rows * n; ++i) {
        dx[static_cast<size_t>(i)] =
            static_cast<float>(s * y[static_cast<size_t>(i)] * g[static_cast<size_t>(i / n)]);
      }
    }
    const LogitScaleGradients r = smax::logit_scale_gradients(xv, dxv, o);
    const double h = 1e-6;
    const double dT = (oracle_loss(f, x, add, keep, g, rows, n, scale, temp + h) -
                       oracle_loss(f, x, add, keep, g, rows, n, scale, temp - h)) / (2 * h);
    const double dS = (oracle_loss(f, x, add, keep, g, rows, n, scale + h, temp) -
                       oracle_loss(f, x, add, keep, g, rows, n, scale - h, temp)) / (2 * h);
    // dx carries the op's f32 bound (~1e-6 relative per element); the sum of
    // |x dx| bounds what that can move.
    double mag = 0.0;
    for (size_t i = 0; i < x.size(); ++i) mag += std::fabs(static_cast<double>(x[i]) * dx[i]);
    EXPECT_NEAR(r.dtemperature, dT, 4e-6 * mag / temp + 1e-7);
    EXPECT_NEAR(r.dscale, dS, 4e-6 * mag / scale + 1e-7);
  }
}

TEST(LogitScale, ZeroGradientTermsAreLeftOut) {
  std::vector<float> x = {1.0f, INFINITY, -INFINITY, NAN, 2.0f};
  std::vector<float> dx = {0.5f, 0.0f, 0.0f, -0.0f, -0.25f};
  SoftmaxOptions o;
  o.temperature = 0.5f;
  o.scale = 2.0f;
  const LogitScaleGradients r =
      smax::logit_scale_gradients(smax::make_view(x.data(), {5}), smax::make_view(dx.data(), {5}), o);
  const double s = 1.0 * 0.5 + 2.0 * -0.25;  // 0
  EXPECT_EQ(r.dtemperature, -s / 0.5);
  EXPECT_EQ(r.dscale, s / 2.0);
  dx[1] = 1.0f;  // an infinite x with a gradient: infinite
  EXPECT_TRUE(std::isinf(smax::logit_scale_gradients(smax::make_view(x.data(), {5}),
                                                     smax::make_view(dx.data(), {5}), o).dscale));
  dx[1] = 0.0f;
  dx[3] = 1.0f;  // NaN with a gradient: NaN
  EXPECT_TRUE(std::isnan(smax::logit_scale_gradients(smax::make_view(x.data(), {5}),
                                                     smax::make_view(dx.data(), {5}), o).dscale));
}

TEST(LogitScale, ViewsDtypesAndThreads) {
  Rng rng("views");
  const int64_t a = 40, b = 3, c = 700;  // x [a, b, c] as f64; dx the transpose [c, b, a] as bf16
  std::vector<double> x(a * b * c);
  std::vector<uint16_t> dxt(a * b * c);
  double want = 0.0;
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) {
      for (int64_t k = 0; k < c; ++k) {
        const double xv = rng.uniform(-8.0f, 8.0f) + 1e-9 * static_cast<double>(k);
        const uint16_t dv = smax::detail::f32_to_bf16(rng.uniform(-1.0f, 1.0f));
        x[static_cast<size_t>((i * b + j) * c + k)] = xv;
        dxt[static_cast<size_t>((k * b + j) * a + i)] = dv;
        want += xv * static_cast<double>(smax::detail::bf16_to_f32(dv));
      }
    }
  }
  const TensorView xv = view_of(x.data(), DType::kF64, {a, b, c});
  const TensorView dv = view_of(dxt.data(), DType::kBF16, {a, b, c}, {1, a, a * b});
  double mag = 0.0;
  for (size_t i = 0; i < x.size(); ++i) mag += std::fabs(x[i]);
  SoftmaxOptions o;
  o.threads = 1;
  const LogitScaleGradients one = smax::logit_scale_gradients(xv, dv, o);
  EXPECT_NEAR(one.dscale, want, 1e-13 * mag);
  EXPECT_EQ(one.dtemperature, -one.dscale);
  for (int threads : {2, 3, 7}) {
    o.threads = threads;
    const LogitScaleGradients r = smax::logit_scale_gradients(xv, dv, o);
    EXPECT_EQ(std::memcmp(&r.dscale, &one.dscale, sizeof(double)), 0) << threads;
  }
  // Rank 0 and empty views.
  double x0 = 3.0, d0 = -2.0;
  EXPECT_EQ(smax::logit_scale_gradients(view_of(&x0, DType::kF64, {}),
                                        view_of(&d0, DType::kF64, {})).dscale, -6.0);
  EXPECT_EQ(smax::logit_scale_gradients(view_of(nullptr, DType::kF32, {0, 5}),
                                        view_of(nullptr, DType::kF32, {0, 5})).dtemperature, 0.0);
}

TEST(LogitScale, Errors) {
  std::vector<float> x(6, 1.0f), dx(6, 1.0f);
  std::vector<int64_t> idx(6, 0);
  const auto expect_error = [](const std::function<void()>& fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << what;
    } catch (const smax::Error& e) {
      EXPECT_NE(std::string(e.what()).find("logit_scale_gradients"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error([&] { smax::logit_scale_gradients(smax::make_view(x.data(), {2, 3}),
                                                 smax::make_view(dx.data(), {3, 2})); }, "shape");
  expect_error([&] { smax::logit_scale_gradients(smax::make_view(x.data(), {2, 3}),
                                                 smax::make_index_view(idx.data(), {2, 3})); },
               "dsrc");
  expect_error([&] { smax::logit_scale_gradients(view_of(nullptr, DType::kF32, {2, 3}),
                                                 smax::make_view(dx.data(), {2, 3})); }, "src");
  SoftmaxOptions o;
  o.temperature = 0.0f;
  expect_error([&] { smax::logit_scale_gradients(smax::make_view(x.data(), {6}),
                                                 smax::make_view(dx.data(), {6}), o); },
               "temperature");
  o.temperature = 1.0f;
  o.threads = -1;
  expect_error([&] { smax::logit_scale_gradients(smax::make_view(x.data(), {6}),
                                                 smax::make_view(dx.data(), {6}), o); },
               "threads");
}

}  // namespace
}  // namespace smax_test

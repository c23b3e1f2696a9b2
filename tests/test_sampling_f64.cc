// tests/test_sampling_f64.cc: the samplers (softmax_topk, gumbel_max,
// sampling_filter, sample, gumbel_softmax and its backward) with f64 logits
// run on float64 rows (src/ops/sampling/sampling_f64.h), on every SIMD
// target, against references written here from include/smax/sampling.h:
//  * indices (top-k order, Gumbel-max, sample) equal the float64 reference
//    exactly: the argmax of t + g in double with g = smax::gumbel_noise into
//    an f64 view (the exact float64 noise), the filters on z = t / T in
//    double with the nucleus masses in long double;
//  * probabilities within the float64 bounds of the header ("float64") of a
//    long double softmax;
//  * logits near 12345.678 (spread 0.01): rounded to f32 (spacing 0.001
//    there) their order and their sums with the noise change, so the test
//    fails if an op fell back to f32 arithmetic;
//  * the same bits for 1 and 3 threads; NaN, +inf and all-masked rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "smax/smax.h"
#include "f64_rows.h"
#include "test_util.h"

namespace smax_test {
namespace {

using LD = long double;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

int64_t rows_of(const Shape& s) { return s.n > 1000 ? 3 : 8; }

// The exact float64 noise g(seed, r, i) of a [rows, n] source.
std::vector<double> noise(int64_t rows, int64_t n, uint64_t seed) {
  std::vector<double> g(static_cast<size_t>(rows * n));
  smax::gumbel_noise(f64_view(g.data(), {rows, n}), seed);
  return g;
}

// Indices of a row by descending value, ties (and -inf) by index.
std::vector<int64_t> order(const double* z, int64_t n) {
  std::vector<int64_t> o(static_cast<size_t>(n));
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) { return z[a] > z[b]; });
  return o;
}

// softmax of a row's entries in long double (masked: 0).
std::vector<LD> softmax_ld(const double* z, int64_t n) {
  LD m = -INFINITY, S = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max<LD>(m, z[i]);
  std::vector<LD> p(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (z[i] > -kInf) S += (p[static_cast<size_t>(i)] = std::exp(static_cast<LD>(z[i]) - m));
  }
  for (LD& v : p) v /= S;
  return p;
}

// The kept set of sampling_filter on z (T > 0): top-k, then the nucleus
// (masses in long double), as a mask.
std::vector<bool> kept_set(const double* z, int64_t n, int64_t top_k, double top_p) {
  std::vector<int64_t> o = order(z, n);
  int64_t visible = 0;
  for (int64_t i = 0; i < n; ++i) visible += z[i] > -kInf;
  int64_t K = top_k > 0 && top_k < n ? std::min(top_k, visible) : visible;
  if (top_p < 1.0) {
    const LD z0 = z[o[0]];
    LD total = 0, cum = 0;
    for (int64_t j = 0; j < K; ++j) total += std::exp(static_cast<LD>(z[o[static_cast<size_t>(j)]]) - z0);
    for (int64_t j = 0; j < K; ++j) {
      cum += std::exp(static_cast<LD>(z[o[static_cast<size_t>(j)]]) - z0);
      if (cum >= static_cast<LD>(top_p) * total) {
        K = j + 1;
        break;
      }
    }
  }
  std::vector<bool> keep(static_cast<size_t>(n), false);
  for (int64_t j = 0; j < K; ++j) keep[static_cast<size_t>(o[static_cast<size_t>(j)])] = true;
  return keep;
}

int64_t argmax_plus(const double* z, const double* g, int64_t n, const std::vector<bool>& keep) {
  double best = -kInf;
  int64_t r = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!keep[static_cast<size_t>(i)] || !(z[i] > -kInf)) continue;
    const double v = z[i] + g[i];
    if (v > best) best = v, r = i;
  }
  return r;
}

class SamplingF64 : public TargetTest {};

TEST_P(SamplingF64, SoftmaxTopkIndicesAndProbabilities) {
  uint64_t seed = 1;
  for (const Shape& sh : f64_shapes(false)) {
    for (int64_t k : {int64_t{1}, int64_t{5}, sh.n}) {
      for (bool renorm : {false, true}) {
        if (k > sh.n) continue;
        SCOPED_TRACE(describe(sh) + " k " + std::to_string(k) + (renorm ? " renorm" : ""));
        const int64_t rows = rows_of(sh), n = sh.n;
        std::vector<double> x = make_rows(rows, n, sh.spread, sh.offset, sh.masked, seed++);
        std::vector<double> probs(static_cast<size_t>(rows * k));
        std::vector<int64_t> idx(static_cast<size_t>(rows * k));
        smax::SoftmaxTopkOptions to;
        to.k = k;
        to.renormalize = renorm;
        smax::softmax_topk(f64_view(x.data(), {rows, n}), f64_view(probs.data(), {rows, k}),
                           smax::make_index_view(idx.data(), {rows, k}), to);
        for (int64_t r = 0; r < rows; ++r) {
          const double* t = x.data() + r * n;
          const std::vector<int64_t> o = order(t, n);
          std::vector<double> top(static_cast<size_t>(k));
          for (int64_t j = 0; j < k; ++j) top[static_cast<size_t>(j)] = t[o[static_cast<size_t>(j)]];
          const std::vector<LD> p = softmax_ld(t, n);
          const std::vector<LD> pk = softmax_ld(top.data(), k);
          for (int64_t j = 0; j < k; ++j) {
            const size_t at = static_cast<size_t>(r * k + j);
            ASSERT_EQ(idx[at], o[static_cast<size_t>(j)]) << "row " << r << " j " << j;
            const LD want = renorm ? pk[static_cast<size_t>(j)] : p[static_cast<size_t>(o[static_cast<size_t>(j)])];
            ASSERT_LE(std::fabs(static_cast<LD>(probs[at]) - want), 1e-14L * want + 1e-300L)
                << "row " << r << " j " << j;
          }
        }
      }
    }
  }
}

TEST_P(SamplingF64, GumbelMaxIsTheFloat64Argmax) {
  uint64_t seed = 100;
  // Besides the common shapes: logits 1e8 +- 3, where f32's spacing is 8
  // (rounded to f32 the row would collapse to two or three values).
  std::vector<Shape> all = f64_shapes(false);
  all.push_back({100, 3.0, 1e8, false});
  all.push_back({1000, 3.0, 1e8, true});
  for (const Shape& sh : all) {
    SCOPED_TRACE(describe(sh));
    const int64_t rows = rows_of(sh), n = sh.n;
    std::vector<double> x = make_rows(rows, n, sh.spread, sh.offset, sh.masked, seed++);
    for (double scale : {1.0, 0.5}) {
      const uint64_t s = seed++;
      const std::vector<double> g = noise(rows, n, s);
      std::vector<int64_t> idx(static_cast<size_t>(rows));
      smax::SoftmaxOptions o;
      o.scale = static_cast<float>(scale);
      smax::gumbel_max(f64_view(x.data(), {rows, n}), smax::make_index_view(idx.data(), {rows}), s, o);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> t(x.begin() + r * n, x.begin() + (r + 1) * n);
        for (double& v : t) v *= scale;
        const int64_t want = argmax_plus(t.data(), g.data() + r * n, n,
                                         std::vector<bool>(static_cast<size_t>(n), true));
        ASSERT_EQ(idx[static_cast<size_t>(r)], want) << "row " << r << " scale " << scale;
      }
    }
  }
}

TEST_P(SamplingF64, SamplingFilterAndSampleMatchTheFloat64Reference) {
  struct Filter {
    float T;
    int64_t top_k;
    float top_p;
  };
  const Filter filters[] = {{1.0f, 0, 1.0f}, {0.5f, 5, 1.0f}, {1.0f, 0, 0.9f},
                            {2.0f, 50, 0.75f}, {0.25f, 0, 0.5f}, {0.0f, 0, 1.0f}};
  uint64_t seed = 200;
  for (const Shape& sh : f64_shapes(false)) {
    const int64_t rows = rows_of(sh), n = sh.n;
    std::vector<double> x = make_rows(rows, n, sh.spread, sh.offset, sh.masked, seed++);
    for (const Filter& f : filters) {
      SCOPED_TRACE(describe(sh) + " T " + std::to_string(f.T) + " top_k " +
                   std::to_string(f.top_k) + " top_p " + std::to_string(f.top_p));
      smax::SampleOptions so;
      so.temperature = f.T;
      so.top_k = f.top_k;
      so.top_p = f.top_p;
      so.seed = seed++;
      std::vector<double> dst(x.size());
      std::vector<int64_t> idx(static_cast<size_t>(rows));
      smax::sampling_filter(f64_view(x.data(), {rows, n}), f64_view(dst.data(), {rows, n}), so);
      smax::sample(f64_view(x.data(), {rows, n}), smax::make_index_view(idx.data(), {rows}), so);
      const std::vector<double> g = noise(rows, n, so.seed);
      for (int64_t r = 0; r < rows; ++r) {
        const double* t = x.data() + r * n;
        const double* dr = dst.data() + r * n;
        if (f.T == 0.0f) {  // greedy: the first max
          const int64_t want = order(t, n)[0];
          ASSERT_EQ(idx[static_cast<size_t>(r)], want);
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dr[i], i == want ? t[i] : -kInf);
          continue;
        }
        std::vector<double> z(t, t + n);
        for (double& v : z) v = f.T == 1.0f ? v : v / static_cast<double>(f.T);
        const std::vector<bool> keep = kept_set(z.data(), n, f.top_k, f.top_p);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(dr[i], keep[static_cast<size_t>(i)] ? z[static_cast<size_t>(i)] : -kInf)
              << "row " << r << " i " << i;
        }
        ASSERT_EQ(idx[static_cast<size_t>(r)], argmax_plus(z.data(), g.data() + r * n, n, keep))
            << "row " << r;
      }
    }
  }
}

TEST_P(SamplingF64, GumbelSoftmaxAndBackwardWithinTheFloat64Bound) {
  uint64_t seed = 300;
  for (const Shape& sh : f64_shapes(false)) {
    for (bool hard : {false, true}) {
      SCOPED_TRACE(describe(sh) + (hard ? " hard" : ""));
      const int64_t rows = rows_of(sh), n = sh.n;
      std::vector<double> x = make_rows(rows, n, sh.spread, sh.offset, sh.masked, seed++);
      smax::GumbelSoftmaxOptions go;
      go.tau = 0.5f;
      go.hard = hard;
      go.seed = seed++;
      std::vector<double> y(x.size()), soft(x.size()), dy(x.size()), dx(x.size());
      if (hard) go.y_soft = f64_view(soft.data(), {rows, n});
      smax::gumbel_softmax(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), go);
      const std::vector<double>& ys = hard ? soft : y;
      std::mt19937_64 rng(seed++);
      std::normal_distribution<double> nd;
      for (double& v : dy) v = nd(rng);
      smax::SoftmaxOptions bo;
      bo.scale = 0.75f;
      smax::gumbel_softmax_backward(f64_view(const_cast<double*>(ys.data()), {rows, n}),
                                    f64_view(dy.data(), {rows, n}), f64_view(dx.data(), {rows, n}),
                                    go.tau, bo);
      const std::vector<double> g = noise(rows, n, go.seed);
      for (int64_t r = 0; r < rows; ++r) {
        const double* t = x.data() + r * n;
        const double* gr = g.data() + r * n;
        // z = fl(fl(t + g) / tau): the op's logits of the softmax.
        std::vector<double> z(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) z[static_cast<size_t>(i)] = (t[i] + gr[i]) / 0.5;
        const std::vector<LD> p = softmax_ld(z.data(), n);
        const int64_t h = argmax_plus(t, gr, n, std::vector<bool>(static_cast<size_t>(n), true));
        for (int64_t i = 0; i < n; ++i) {
          const size_t at = static_cast<size_t>(r * n + i);
          ASSERT_LE(std::fabs(static_cast<LD>(ys[at]) - p[static_cast<size_t>(i)]),
                    1e-14L * p[static_cast<size_t>(i)] + 1e-300L)
              << "row " << r << " i " << i;
          if (hard) {
            ASSERT_EQ(y[at], i == h ? 1.0 : 0.0);
          }
        }
        // Backward from the op's soft row: dx = c y (dy - <dy, y>), c = 0.75 / tau.
        const double* yr = ys.data() + r * n;
        const double* dr = dy.data() + r * n;
        LD dot = 0, adot = 0;
        for (int64_t i = 0; i < n; ++i) dot += static_cast<LD>(dr[i]) * yr[i], adot += std::fabs(dr[i] * yr[i]);
        const LD c = 0.75L / 0.5L;
        for (int64_t i = 0; i < n; ++i) {
          const LD want = c * yr[i] * (dr[i] - dot);
          const LD bound = 1e-14L * c * yr[i] * (std::fabs(dr[i]) + std::fabs(dot)) +
                           4e-16L * c * yr[i] * adot + 1e-300L;
          ASSERT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(r * n + i)]) - want), bound)
              << "row " << r << " i " << i;
        }
      }
    }
  }
}

TEST_P(SamplingF64, ThreadsGiveTheSameBits) {
  const int64_t rows = 33, n = 4000;
  std::vector<double> x = make_rows(rows, n, 3.0, 0.5, true, 7);
  smax::SoftmaxOptions o1, o3;
  o1.threads = 1;
  o3.threads = 3;
  std::vector<double> p1(static_cast<size_t>(rows * 10)), p3(p1.size());
  std::vector<int64_t> i1(p1.size()), i3(p1.size());
  smax::softmax_topk(f64_view(x.data(), {rows, n}), f64_view(p1.data(), {rows, 10}),
                     smax::make_index_view(i1.data(), {rows, 10}), 10, o1);
  smax::softmax_topk(f64_view(x.data(), {rows, n}), f64_view(p3.data(), {rows, 10}),
                     smax::make_index_view(i3.data(), {rows, 10}), 10, o3);
  EXPECT_EQ(0, std::memcmp(p1.data(), p3.data(), p1.size() * sizeof(double)));
  EXPECT_EQ(i1, i3);
  smax::SampleOptions so;
  so.top_p = 0.8f;
  so.seed = 5;
  std::vector<int64_t> s1(static_cast<size_t>(rows)), s3(s1.size());
  smax::sample(f64_view(x.data(), {rows, n}), smax::make_index_view(s1.data(), {rows}), so, o1);
  smax::sample(f64_view(x.data(), {rows, n}), smax::make_index_view(s3.data(), {rows}), so, o3);
  EXPECT_EQ(s1, s3);
  std::vector<double> g1(x.size()), g3(x.size());
  smax::gumbel_softmax(f64_view(x.data(), {rows, n}), f64_view(g1.data(), {rows, n}), {}, o1);
  smax::gumbel_softmax(f64_view(x.data(), {rows, n}), f64_view(g3.data(), {rows, n}), {}, o3);
  EXPECT_EQ(0, std::memcmp(g1.data(), g3.data(), g1.size() * sizeof(double)));
}

TEST_P(SamplingF64, SpecialRows) {
  const int64_t n = 4, rows = 3;
  std::vector<double> x = {1.0, kNan, 2.0, -kInf,        // NaN
                           -kInf, -kInf, -kInf, -kInf,   // all masked
                           0.5, kInf, 0.0, 0.0};         // +inf
  std::vector<int64_t> idx(static_cast<size_t>(rows));
  smax::gumbel_max(f64_view(x.data(), {rows, n}), smax::make_index_view(idx.data(), {rows}), 1);
  EXPECT_EQ(idx, (std::vector<int64_t>{-1, -1, -1}));
  smax::sample(f64_view(x.data(), {rows, n}), smax::make_index_view(idx.data(), {rows}), {});
  EXPECT_EQ(idx, (std::vector<int64_t>{-1, -1, -1}));
  smax::SampleOptions greedy;
  greedy.temperature = 0.0f;
  smax::sample(f64_view(x.data(), {rows, n}), smax::make_index_view(idx.data(), {rows}), greedy);
  EXPECT_EQ(idx, (std::vector<int64_t>{-1, -1, 1}));  // greedy: +inf is a valid max
  std::vector<double> probs(static_cast<size_t>(rows * 2));
  std::vector<int64_t> ti(probs.size());
  smax::softmax_topk(f64_view(x.data(), {rows, n}), f64_view(probs.data(), {rows, 2}),
                     smax::make_index_view(ti.data(), {rows, 2}), 2);
  EXPECT_EQ(ti, (std::vector<int64_t>{1, 2, 0, 1, 1, 0}));  // NaN first, +inf next; masked by index
  EXPECT_TRUE(std::isnan(probs[0]) && std::isnan(probs[1]));
  EXPECT_EQ(probs[2], 0.0);
  EXPECT_TRUE(std::isnan(probs[4]) && std::isnan(probs[5]));
  std::vector<double> dst(x.size());
  smax::sampling_filter(f64_view(x.data(), {rows, n}), f64_view(dst.data(), {rows, n}), {});
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(std::isnan(dst[static_cast<size_t>(i)]));
    EXPECT_EQ(dst[static_cast<size_t>(n + i)], -kInf);
    EXPECT_TRUE(std::isnan(dst[static_cast<size_t>(2 * n + i)]));
  }
}

// c = s / tau is validated in the type of the path: 1e-30 / 1e30 is a
// positive double (it underflows f32).
TEST_P(SamplingF64, GumbelSoftmaxBackwardTinyCoefficient) {
  std::vector<double> y = {0.5, 0.5}, dy = {1.0, 0.0}, dx(2);
  smax::SoftmaxOptions o;
  o.scale = 1e-30f;
  smax::gumbel_softmax_backward(f64_view(y.data(), {2}), f64_view(dy.data(), {2}),
                                f64_view(dx.data(), {2}), 1e30f, o);
  const double c = static_cast<double>(1e-30f) / static_cast<double>(1e30f);
  EXPECT_NEAR(dx[0], c * 0.25, 1e-15 * c);
  EXPECT_NEAR(dx[1], -c * 0.25, 1e-15 * c);
}

// Soft-NMS on f64 boxes whose areas overflow (1e200) or underflow (1e-200):
// two identical boxes have IoU 1, so hard NMS keeps one.
TEST_P(SamplingF64, SoftNmsBoxesAtTheEndsOfFloat64) {
  for (double size : {1e200, 1e-200}) {
    double boxes[8] = {0, 0, size, size, 0, 0, size, size};
    double scores[2] = {0.9, 0.8};
    smax::SoftNmsOptions o;
    o.method = smax::SoftNmsMethod::kHard;
    const auto r = smax::soft_nms(f64_view(boxes, {2, 4}), f64_view(scores, {2}), o);
    EXPECT_EQ(r.indices, (std::vector<int64_t>{0})) << size;
    o.method = smax::SoftNmsMethod::kLinear;
    o.iou_threshold = 0.0f;
    // Half overlap: IoU = (s / 2 * s) / (2 s^2 - s^2 / 2) = 1 / 3.
    double shifted[8] = {0, 0, size, size, size / 2, 0, size * 1.5, size};
    const auto q = smax::soft_nms(f64_view(shifted, {2, 4}), f64_view(scores, {2}), o);
    ASSERT_EQ(q.indices.size(), 2u) << size;
    EXPECT_NEAR(q.scores[1], 0.8 * (1.0 - 1.0 / 3.0), 1e-7) << size;
  }
}

SMAX_INSTANTIATE_PER_TARGET(SamplingF64);

}  // namespace
}  // namespace smax_test

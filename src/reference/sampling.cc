// src/reference/sampling.cc: see sampling.h. Slow and obvious.
#include "reference/sampling.h"

#include <Random123/philox.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "reference/reference.h"
#include "reference/rescaled.h"
#include "reference/rows.h"
#include "smax/error.h"

namespace smax::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using RowD = std::vector<double>;

// z = fl(fl(t) / T) as the f32 samplers form it; t / T in double under
// float64 semantics.
double tempered(double t, float T) {
  if (float64_semantics()) return t / static_cast<double>(T);
  return static_cast<float>(static_cast<float>(t) / T);
}

// Order of the top-k: NaN first, then larger value, then lower index.
bool before(double a, int64_t ia, double b, int64_t ib) {
  const bool an = std::isnan(a), bn = std::isnan(b);
  if (an != bn) return an;
  if (!an && a != b) return a > b;
  return ia < ib;
}

std::vector<int64_t> sorted_order(const double* t, int64_t n) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return before(t[a], a, t[b], b); });
  return idx;
}

// Dense offset of element j of row r in an output of `shape` whose axis has
// length `len`.
int64_t out_index(const RefRows& R, int64_t r, int64_t j, int64_t len) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(R.axis) + 1; d < R.shape.size(); ++d) inner *= R.shape[d];
  const int64_t o = r / inner, in = r % inner;
  return (o * len + j) * inner + in;
}

}  // namespace

double gumbel(uint64_t seed, uint64_t row, uint64_t i) {
  philox4x32_ctr_t c = {{static_cast<uint32_t>(i / 2), static_cast<uint32_t>((i / 2) >> 32),
                         static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32)}};
  philox4x32_key_t k = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const philox4x32_ctr_t w = philox4x32(c, k);
  const uint32_t lo = i % 2 == 0 ? w.v[0] : w.v[2];
  const uint32_t hi = i % 2 == 0 ? w.v[1] : w.v[3];
  const uint64_t u = (uint64_t{hi} << 32) | lo;
  const double U = (std::floor(static_cast<double>(u >> 12)) + 0.5) / 4503599627370496.0;  // 2^52
  return -std::log(-std::log(U));
}

std::vector<double> gumbel_noise(const std::vector<int64_t>& shape, int64_t axis, uint64_t seed) {
  const int rank = static_cast<int>(shape.size());
  const int a = static_cast<int>(axis < 0 ? axis + rank : axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; ++d) outer *= shape[static_cast<size_t>(d)];
  for (int d = a + 1; d < rank; ++d) inner *= shape[static_cast<size_t>(d)];
  const int64_t n = shape[static_cast<size_t>(a)];
  std::vector<double> g(static_cast<size_t>(outer * n * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t j = 0; j < inner; ++j) {
        g[static_cast<size_t>((o * n + k) * inner + j)] =
            gumbel(seed, static_cast<uint64_t>(o * inner + j), static_cast<uint64_t>(k));
      }
    }
  }
  return g;
}

GumbelSoftmaxRef gumbel_softmax(const TensorView& src, const GumbelSoftmaxOptions& gs,
                                const SoftmaxOptions& options) {
  const RefRows R = ref_rows("gumbel_softmax", src, options, true);
  RefRows N;
  if (gs.noise) N = ref_rows("gumbel_softmax", *gs.noise, options, false);
  std::vector<double> soft(static_cast<size_t>(R.rows * R.n)), dst(soft.size());
  const float tau = gs.tau;
  for (int64_t r = 0; r < R.rows; ++r) {
    RowD z(static_cast<size_t>(R.n));
    double best = -kInf;
    int64_t h = -1;
    for (int64_t i = 0; i < R.n; ++i) {
      const double g = gs.noise ? N.row(r)[i]
                                : gumbel(gs.seed, static_cast<uint64_t>(r), static_cast<uint64_t>(i));
      // z = fl(fl(t + fl(g)) / tau) in f32 (float64 semantics: in double).
      const double t = R.row(r)[i];
      z[static_cast<size_t>(i)] =
          float64_semantics() ? (t + g) / tau
                              : (static_cast<float>(t) + static_cast<float>(g)) / tau;
      const double zd = t + g;
      if (zd > best) {
        best = zd;
        h = i;
      }
    }
    const RowD y = softmax_row(z, options.empty_row);
    for (int64_t i = 0; i < R.n; ++i) {
      const size_t k = static_cast<size_t>(r * R.n + i);
      soft[k] = y[static_cast<size_t>(i)];
      dst[k] = soft[k];
    }
    const bool special = R.n == 0 || std::isnan(y[0]) || !(best > -kInf) || !(best < kInf);
    if (gs.hard && !special) {
      for (int64_t i = 0; i < R.n; ++i) dst[static_cast<size_t>(r * R.n + i)] = i == h ? 1.0 : 0.0;
    }
  }
  return GumbelSoftmaxRef{R.scatter(soft), R.scatter(dst)};
}

std::vector<double> gumbel_softmax_backward(const TensorView& y, const TensorView& dy, float tau,
                                            const SoftmaxOptions& options) {
  const RefRows Y = ref_rows("gumbel_softmax_backward", y, options, false);
  const RefRows M = ref_rows("gumbel_softmax_backward", y, options, true);  // -inf = masked
  const RefRows G = ref_rows("gumbel_softmax_backward", dy, options, false);
  const double c = float64_semantics() ? Y.scale / tau
                                       : static_cast<float>(static_cast<float>(Y.scale) / tau);
  std::vector<double> dx(static_cast<size_t>(Y.rows * Y.n));
  for (int64_t r = 0; r < Y.rows; ++r) {
    double dot = 0.0;
    for (int64_t i = 0; i < Y.n; ++i) dot += Y.row(r)[i] * G.row(r)[i];
    for (int64_t i = 0; i < Y.n; ++i) {
      const bool masked = M.row(r)[i] == -kInf;
      dx[static_cast<size_t>(r * Y.n + i)] =
          masked ? 0.0 : c * Y.row(r)[i] * (G.row(r)[i] - dot);
    }
  }
  return Y.scatter(dx);
}

std::vector<int64_t> gumbel_max(const TensorView& src, uint64_t seed,
                                const SoftmaxOptions& options) {
  const RefRows R = ref_rows("gumbel_max", src, options, true);
  std::vector<int64_t> out(static_cast<size_t>(R.rows), -1);
  for (int64_t r = 0; r < R.rows; ++r) {
    bool bad = false;
    double best = -kInf;
    int64_t h = -1;
    for (int64_t i = 0; i < R.n; ++i) {
      const double t = R.row(r)[i];
      if (std::isnan(t) || t == kInf) bad = true;
      const double z = t + gumbel(seed, static_cast<uint64_t>(r), static_cast<uint64_t>(i));
      if (z > best) {
        best = z;
        h = i;
      }
    }
    out[static_cast<size_t>(r)] = bad ? -1 : h;
  }
  return out;
}

TopkRef softmax_topk(const TensorView& src, const SoftmaxTopkOptions& topk,
                     const SoftmaxOptions& options) {
  const RefRows R = ref_rows("softmax_topk", src, options, true);
  const int64_t k = topk.k;
  if (k < 0 || k > R.n) throw Error(Status::kInvalidArgument, "softmax_topk: k out of range");
  TopkRef out;
  out.probs.assign(static_cast<size_t>(R.rows * k), 0.0);
  out.indices.assign(out.probs.size(), -1);
  for (int64_t r = 0; r < R.rows; ++r) {
    const double* t = R.row(r);
    const std::vector<int64_t> order = sorted_order(t, R.n);
    const RowD y = softmax_row(RowD(t, t + R.n), options.empty_row);
    double norm = 0.0;
    if (topk.renormalize && k > 0) {
      for (int64_t j = 0; j < k; ++j) norm += std::exp(t[order[static_cast<size_t>(j)]] - t[order[0]]);
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = order[static_cast<size_t>(j)];
      const size_t o = static_cast<size_t>(out_index(R, r, j, k));
      out.indices[o] = i;
      double p = y[static_cast<size_t>(i)];
      if (topk.renormalize && !std::isnan(p) && t[order[0]] > -kInf) {
        p = t[i] == -kInf ? 0.0 : std::exp(t[i] - t[order[0]]) / norm;
      }
      out.probs[o] = p;
    }
  }
  return out;
}

FilterRef sampling_filter(const TensorView& src, const SampleOptions& so,
                          const SoftmaxOptions& options, double tolerance) {
  const RefRows R = ref_rows("sampling_filter", src, options, true);
  FilterRef F;
  std::vector<double> values(static_cast<size_t>(R.rows * R.n), -kInf);
  F.dist.resize(static_cast<size_t>(R.rows));
  F.fragile.assign(static_cast<size_t>(R.rows), false);
  for (int64_t r = 0; r < R.rows; ++r) {
    double* v = values.data() + r * R.n;
    const double* t = R.row(r);
    auto& dist = F.dist[static_cast<size_t>(r)];
    if (R.n == 0) continue;
    if (so.temperature == 0.0f) {
      bool nan = false;
      double m = -kInf;
      int64_t g = -1;
      for (int64_t i = 0; i < R.n; ++i) {
        if (std::isnan(t[i])) nan = true;
        if (t[i] > m) {
          m = t[i];
          g = i;
        }
      }
      if (nan) {
        std::fill(v, v + R.n, kNaN);
      } else if (g >= 0) {
        v[g] = t[g];
        dist.push_back({g, 1.0});
      }
      continue;
    }
    RowD z(static_cast<size_t>(R.n));
    bool bad = false;
    for (int64_t i = 0; i < R.n; ++i) {
      z[static_cast<size_t>(i)] = tempered(t[i], so.temperature);
      if (std::isnan(z[static_cast<size_t>(i)]) || z[static_cast<size_t>(i)] == kInf) bad = true;
    }
    if (bad) {
      std::fill(v, v + R.n, kNaN);
      continue;
    }
    std::vector<int64_t> order = sorted_order(z.data(), R.n);
    while (!order.empty() && z[static_cast<size_t>(order.back())] == -kInf) order.pop_back();
    if (order.empty()) continue;
    // top-k: the K = max(top_k, min_tokens_to_keep) best, and with
    // TopKTies::kKeep every entry equal to the K-th.
    const size_t floor_k = static_cast<size_t>(std::max<int64_t>(1, so.min_tokens_to_keep));
    const int64_t K = std::max<int64_t>(so.top_k, static_cast<int64_t>(floor_k));
    const bool topk_on = so.top_k > 0 && K < R.n;
    if (topk_on && static_cast<int64_t>(order.size()) > K) {
      const double kth = z[static_cast<size_t>(order[static_cast<size_t>(K - 1)])];
      size_t m = static_cast<size_t>(K);
      if (so.top_k_ties == TopKTies::kKeep) {
        while (m < order.size() && z[static_cast<size_t>(order[m])] == kth) ++m;
      }
      order.resize(m);
    }
    const double z0 = z[static_cast<size_t>(order[0])];
    double total = 0.0;
    if (topk_on) {
      for (int64_t i : order) total += std::exp(z[static_cast<size_t>(i)] - z0);
    } else {
      for (double zi : z) total += std::exp(zi - z0);
    }
    size_t keep = order.size();
    if (so.top_p < 1.0f) {
      const double target = static_cast<double>(so.top_p) * total;
      double cum = 0.0;
      for (size_t j = 0; j < order.size(); ++j) {
        const double before_j = cum;
        cum += std::exp(z[static_cast<size_t>(order[j])] - z0);
        if (cum >= target) {
          keep = j + 1;
          // Fragile: the cut would move if the masses were off by `tolerance`
          // (unless the min_tokens_to_keep floor decides).
          if ((std::fabs(cum - target) <= tolerance * total ||
               std::fabs(before_j - target) <= tolerance * total) &&
              j + 1 >= floor_k) {
            F.fragile[static_cast<size_t>(r)] = true;
          }
          break;
        }
      }
      keep = std::max(keep, std::min(floor_k, order.size()));
    }
    // min-p: p_i >= min_p p_max, i.e. z_i - z0 >= log(min_p) (the library's
    // exact float64 test), never below min(min_tokens_to_keep, keep).
    if (so.min_p > 0.0f) {
      const double lthr = std::log(static_cast<double>(so.min_p));
      size_t pass = 0;
      while (pass < keep && z[static_cast<size_t>(order[pass])] - z0 >= lthr) ++pass;
      keep = std::max(pass, std::min(floor_k, keep));
    }
    double mass = 0.0;
    for (size_t j = 0; j < keep; ++j) mass += std::exp(z[static_cast<size_t>(order[j])] - z0);
    for (size_t j = 0; j < keep; ++j) {
      const int64_t i = order[j];
      v[i] = z[static_cast<size_t>(i)];
      dist.push_back({i, std::exp(z[static_cast<size_t>(i)] - z0) / mass});
    }
  }
  F.values = R.scatter(values);
  return F;
}

std::vector<int64_t> sample(const TensorView& src, const SampleOptions& so,
                            const SoftmaxOptions& options) {
  const FilterRef F = sampling_filter(src, so, options);
  const RefRows R = ref_rows("sample", src, options, true);
  std::vector<int64_t> out(static_cast<size_t>(R.rows), -1);
  for (int64_t r = 0; r < R.rows; ++r) {
    const auto& dist = F.dist[static_cast<size_t>(r)];
    if (dist.empty()) continue;
    if (so.temperature == 0.0f) {
      out[static_cast<size_t>(r)] = dist[0].first;
      continue;
    }
    double best = -kInf;
    int64_t h = -1;
    for (const auto& [i, p] : dist) {
      (void)p;
      const double z = tempered(R.row(r)[i], so.temperature);
      const double v = z + gumbel(so.seed, static_cast<uint64_t>(r), static_cast<uint64_t>(i));
      if (v > best || (v == best && i < h)) {
        best = v;
        h = i;
      }
    }
    out[static_cast<size_t>(r)] = h;
  }
  return out;
}

SoftNmsResult soft_nms(const TensorView& boxes, const TensorView& scores,
                       const SoftNmsOptions& o) {
  const std::vector<double> b = to_dense(boxes);
  const std::vector<double> s0 = to_dense(scores);
  const size_t n = s0.size();
  const double one = o.plus_one ? 1.0 : 0.0;
  std::vector<double> s = s0;
  std::vector<bool> alive(n, true);
  SoftNmsResult res;
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      if (alive[i] && s[i] < o.score_threshold) alive[i] = false;
    }
    size_t best = n;
    for (size_t i = 0; i < n; ++i) {
      if (alive[i] && (best == n || s[i] > s[best])) best = i;
    }
    if (best == n) break;
    res.indices.push_back(static_cast<int64_t>(best));
    res.scores.push_back(static_cast<float>(s[best]));
    alive[best] = false;
    const double* M = &b[4 * best];
    const double am = (M[2] - M[0] + one) * (M[3] - M[1] + one);
    for (size_t i = 0; i < n; ++i) {
      if (!alive[i]) continue;
      const double* B = &b[4 * i];
      const double ab = (B[2] - B[0] + one) * (B[3] - B[1] + one);
      const double iw = std::max(0.0, std::min(M[2], B[2]) - std::max(M[0], B[0]) + one);
      const double ih = std::max(0.0, std::min(M[3], B[3]) - std::max(M[1], B[1]) + one);
      const double inter = iw * ih;
      const double uni = am + ab - inter;
      const double iou = uni > 0.0 ? inter / uni : 0.0;
      double w = 1.0;
      if (o.method == SoftNmsMethod::kHard) w = iou > o.iou_threshold ? 0.0 : 1.0;
      if (o.method == SoftNmsMethod::kLinear) w = iou > o.iou_threshold ? 1.0 - iou : 1.0;
      if (o.method == SoftNmsMethod::kGaussian) w = std::exp(-(iou * iou) / static_cast<double>(o.sigma));
      s[i] *= w;
    }
  }
  return res;
}

}  // namespace smax::reference

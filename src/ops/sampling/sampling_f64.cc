// src/ops/sampling/sampling_f64.cc: see sampling_f64.h.
#include "ops/sampling/sampling_f64.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/compensated.h"
#include "ops/sampling/sampling_filters.h"
#include "kernels/sampling.h"
#include "kernels/softmax_f64.h"

namespace smax::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// g(seed, r, i) lies in [-log(-log 2^-53), -log(-log(1 - 2^-53))] =
// [-3.61, 36.74]: an entry below max t - kGumbelReach cannot win.
constexpr double kGumbelReach = 41.0;

// Descending value, ties by the lower index; NaN first (by index).
bool better(const Cand64& a, const Cand64& b) {
  const bool an = std::isnan(a.value), bn = std::isnan(b.value);
  if (an != bn) return an;
  if (an) return a.index < b.index;
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

// The k best of the row, sorted, in buf[0..k).
void best_k(const double* t, int64_t n, int64_t k, Cand64* buf) {
  for (int64_t i = 0; i < n; ++i) buf[i] = Cand64{t[i], i};
  if (k < n) std::nth_element(buf, buf + (k - 1), buf + n, better);
  std::sort(buf, buf + k, better);
}

// max, and whether the row holds a NaN or +inf.
struct Scan {
  double max = -kInf;
  bool special = false;
};
Scan scan(const double* z, int64_t n) {
  Scan s;
  for (int64_t i = 0; i < n; ++i) {
    s.special |= std::isnan(z[i]) || z[i] == kInf;
    s.max = z[i] > s.max ? z[i] : s.max;
  }
  return s;
}

}  // namespace

void softmax_topk_row_f64(const double* t, int64_t n, int64_t k, bool renorm, EmptyRow policy,
                          Cand64* buf, double* probs, int64_t* idx) noexcept {
  best_k(t, n, k, buf);
  const Scan s = scan(t, n);
  const bool empty = !s.special && s.max == -kInf;
  // The normaliser: the full row's, or the k winners' (relative to the best).
  const double shift = renorm ? buf[0].value : s.max;
  CompensatedSum S;
  if (!s.special && !empty) {
    if (renorm) {
      for (int64_t j = 0; j < k; ++j) {
        if (buf[j].value > -kInf) S.add(exp_diff_f64(buf[j].value, shift));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        if (t[i] > -kInf) S.add(exp_diff_f64(t[i], shift));
      }
    }
  }
  const double sum = S.value();
  for (int64_t j = 0; j < k; ++j) {
    const double v = buf[j].value;
    double q;
    if (s.special || (empty && policy == EmptyRow::kNan)) {
      q = kNaN;
    } else if (v == -kInf) {
      q = 0.0;
    } else {
      q = exp_diff_f64(v, shift) / sum;
    }
    probs[j] = q;
    idx[j] = buf[j].index;
  }
}

int64_t gumbel_argmax_f64(const double* t, int64_t n, uint64_t seed, uint64_t row) noexcept {
  const Scan s = scan(t, n);
  if (s.special || !(s.max > -kInf)) return -1;
  // Two ulps of max of slack: t_i + g_i rounds, so an entry just below the
  // reach could still tie the winner after rounding (max near 2^58 and up).
  const double floor = s.max - kGumbelReach - 2.0 * (std::nextafter(s.max, kInf) - s.max);
  double best = -kInf;
  int64_t result = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!(t[i] >= floor)) continue;
    const double v = t[i] + kernels::gumbel(seed, row, static_cast<uint64_t>(i));
    if (v > best) {  // strict: the lowest index wins ties
      best = v;
      result = i;
    }
  }
  return result;
}

KeptF64 filter_row_f64(const double* t, int64_t n, const SampleOptions& so, double* z,
                       Cand64* buf) noexcept {
  KeptF64 kept;
  if (n == 0) return kept;
  if (so.temperature == 0.0f) {
    double m = -kInf;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      nan |= std::isnan(t[i]);
      m = t[i] > m ? t[i] : m;
    }
    if (nan) {
      kept.kind = KeptF64::kNaN;
    } else if (m > -kInf) {
      kept.kind = KeptF64::kGreedy;
      kept.index = std::find(t, t + n, m) - t;
    }
    return kept;
  }
  const double T = so.temperature;
  for (int64_t i = 0; i < n; ++i) z[i] = T == 1.0 ? t[i] : t[i] / T;
  const Scan s = scan(z, n);
  if (s.special) {
    kept.kind = KeptF64::kNaN;
    return kept;
  }
  if (s.max == -kInf) return kept;  // nothing to sample
  if (uses_general_filter(so)) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (z[i] > -kInf) buf[count++] = Cand64{z[i], i};
    }
    const int64_t keep = filter_candidates<CompensatedSum>(buf, count, so, better, exp_diff_f64);
    const Cand64& last = worst_candidate(buf, keep, better);
    kept.kind = KeptF64::kPrefix;
    kept.value = last.value;
    kept.index = last.index;
    kept.count = keep;  // buf[0..keep) is exactly the kept set
    return kept;
  }
  const int64_t top_k = (so.top_k > 0 && so.top_k < n) ? so.top_k : 0;
  if (top_k == 0 && so.top_p >= 1.0f) {
    kept.kind = KeptF64::kAll;
    return kept;
  }
  // The visible candidates (top-k's best, or all of them for top-p alone),
  // sorted best first; -inf entries never count.
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (z[i] > -kInf) buf[count++] = Cand64{z[i], i};
  }
  const int64_t K = top_k > 0 ? std::min(top_k, count) : count;
  if (K < count) std::nth_element(buf, buf + (K - 1), buf + count, better);
  std::sort(buf, buf + K, better);
  int64_t last = K - 1;
  if (so.top_p < 1.0f) {
    const double z0 = buf[0].value;
    CompensatedSum total;
    for (int64_t j = 0; j < count; ++j) {
      if (top_k == 0 || j < K) total.add(exp_diff_f64(buf[j].value, z0));
    }
    const double target = static_cast<double>(so.top_p) * total.value();
    CompensatedSum cum;
    for (int64_t j = 0; j < K; ++j) {
      cum.add(exp_diff_f64(buf[j].value, z0));
      if (cum.value() >= target) {
        last = j;
        break;
      }
    }
  }
  kept.kind = KeptF64::kPrefix;
  kept.value = buf[last].value;
  kept.index = buf[last].index;
  kept.count = last + 1;
  return kept;
}

int64_t gumbel_softmax_row_f64(const double* t, const double* noise, int64_t n, double tau,
                               uint64_t seed, uint64_t row, EmptyRow policy, double* y) noexcept {
  double best = -kInf;
  int64_t h = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double g = noise != nullptr ? noise[i] : kernels::gumbel(seed, row, static_cast<uint64_t>(i));
    const double zd = t[i] + g;
    if (zd > best) {
      best = zd;
      h = i;
    }
    y[i] = zd / tau;
  }
  kernels::softmax_row_f64(kernels::F64Op::kSoftmax, y, n, policy, y);
  return best > -kInf && best < kInf ? h : -1;
}

}  // namespace smax::detail

// src/reference/attention.cc: float64 attention oracle (see attention.h).
#include "reference/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/reference.h"

namespace smax::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))); }
double sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z));
}

// Broadcast a view to `shape` (right-aligned) and read it densely.
std::vector<double> expand(const TensorView& view, const std::vector<int64_t>& shape) {
  const int r = static_cast<int>(shape.size());
  const int off = r - view.rank;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, pos = 0;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t idx = rem % shape[d];
      rem /= shape[d];
      if (d >= off && view.shape[d - off] != 1) pos += idx * view.strides[d - off];
    }
    if (view.dtype == DType::kBool) {
      out[i] = static_cast<const uint8_t*>(view.data)[pos] != 0 ? 1.0 : 0.0;
    } else {
      out[i] = static_cast<const float*>(view.data)[pos];
    }
  }
  return out;
}

// Normalises one row of logits t (n entries, -inf masked) into y; sink:
// optional extra softmax logit. Returns the softmax lse.
double normalize_row(const AttentionProblem& p, const double* t, int64_t n, const double* sink,
                     double* y, double* aux, int64_t keys, int64_t h) {
  const auto& o = p.o;
  int64_t vis = 0;
  bool nan = false, pinf = false;
  double m = -kInf;
  for (int64_t j = 0; j < n; ++j) {
    if (std::isnan(t[j])) nan = true;
    if (t[j] == kInf) pinf = true;
    if (t[j] != -kInf) ++vis;
    if (!std::isnan(t[j])) m = std::max(m, t[j]);
  }
  if (sink != nullptr) {
    if (std::isnan(*sink) || *sink == kInf) nan = true;
    if (*sink != -kInf) ++vis;
  }
  const bool sig = o.normalizer == AttentionNormalizer::kSigmoid;
  if (nan || (pinf && !sig)) {
    std::fill(y, y + n, kNaN);
    return kNaN;
  }
  if (vis == 0) {
    std::fill(y, y + n, o.empty_row == EmptyRow::kNan ? kNaN : 0.0);
    return o.empty_row == EmptyRow::kNan ? kNaN : -kInf;
  }
  switch (o.normalizer) {
    case AttentionNormalizer::kSoftmax: {
      if (sink != nullptr) m = std::max(m, *sink);
      double d = 0;
      for (int64_t j = 0; j < n; ++j) d += std::exp(t[j] - m);
      if (sink != nullptr) d += std::exp(*sink - m);
      for (int64_t j = 0; j < n; ++j) y[j] = std::exp(t[j] - m) / d;
      return m + std::log(d);
    }
    case AttentionNormalizer::kSsmax: {
      const double s = p.ssmax.empty() ? static_cast<double>(o.ssmax_s) : p.ssmax[h];
      const double c = s * std::log(static_cast<double>(vis));
      *aux = c;
      double mm = -kInf;
      for (int64_t j = 0; j < n; ++j)
        if (t[j] != -kInf) mm = std::max(mm, c * t[j]);
      double d = 0;
      for (int64_t j = 0; j < n; ++j) d += t[j] == -kInf ? 0.0 : std::exp(c * t[j] - mm);
      for (int64_t j = 0; j < n; ++j) y[j] = t[j] == -kInf ? 0.0 : std::exp(c * t[j] - mm) / d;
      return kNaN;
    }
    case AttentionNormalizer::kSigmoid: {
      // Default bias: -ln n, n = the sequence's keys (Lk, or cache_seqlens[b];
      // kPerSequence) or the row's visible keys.
      const double nb = o.sigmoid_bias_mode == SigmoidBiasMode::kPerSequence
                            ? static_cast<double>(keys)
                            : static_cast<double>(vis);
      const double b = std::isnan(o.sigmoid_bias) ? -std::log(nb)
                                                  : static_cast<double>(o.sigmoid_bias);
      for (int64_t j = 0; j < n; ++j) y[j] = t[j] == -kInf ? 0.0 : t[j] == kInf ? 1.0 : sigmoid(t[j] + b);
      return kNaN;
    }
    case AttentionNormalizer::kSoftpick: {
      const double em = std::exp(-m);
      double S = 0;
      for (int64_t j = 0; j < n; ++j)
        if (t[j] != -kInf) S += std::abs(std::exp(t[j] - m) - em);
      S += static_cast<double>(o.softpick_eps) * em;
      // A row whose visible entries are all <= 0 gives exactly 0 (smax::softpick;
      // also with eps = 0 and every t = 0, where S = 0).
      for (int64_t j = 0; j < n; ++j) {
        const double num = t[j] == -kInf ? 0.0 : std::max(std::exp(t[j] - m) - em, 0.0);
        y[j] = num == 0.0 ? 0.0 : num / S;
      }
      *aux = S / em;  // S in unshifted units (may overflow: only used as e^t / S)
      aux[1] = m;
      aux[2] = S;
      return kNaN;
    }
    case AttentionNormalizer::kStablemax: {
      double S = 0;
      for (int64_t j = 0; j < n; ++j)
        if (t[j] != -kInf) S += t[j] >= 0 ? t[j] + 1 : 1 / (1 - t[j]);
      for (int64_t j = 0; j < n; ++j)
        y[j] = t[j] == -kInf ? 0.0 : (t[j] >= 0 ? t[j] + 1 : 1 / (1 - t[j])) / S;
      *aux = S;
      return kNaN;
    }
    case AttentionNormalizer::kSoftplus: {
      const double lam = std::log(static_cast<double>(vis)) / std::log(static_cast<double>(p.D));
      *aux = lam;
      double S = 0;
      for (int64_t j = 0; j < n; ++j)
        if (t[j] != -kInf) S += softplus(lam * t[j]);
      for (int64_t j = 0; j < n; ++j) y[j] = t[j] == -kInf ? 0.0 : softplus(lam * t[j]) / S;
      return kNaN;
    }
    case AttentionNormalizer::kPower: {
      // y_j = t_j^p / sum t^p over the visible logits, as (t_j / M)^p / S'
      // with M = max |t|; an all-zero row is uniform (smax::power_softmax).
      const int q = o.power_p;
      double M = 0;
      for (int64_t j = 0; j < n; ++j)
        if (t[j] != -kInf) M = std::max(M, std::abs(t[j]));
      double S = 0;
      for (int64_t j = 0; j < n; ++j)
        if (t[j] != -kInf) S += M == 0.0 ? 1.0 : std::pow(t[j] / M, q);
      for (int64_t j = 0; j < n; ++j)
        y[j] = t[j] == -kInf ? 0.0 : (M == 0.0 ? 1.0 : std::pow(t[j] / M, q)) / S;
      aux[0] = M;
      aux[1] = S;
      return kNaN;
    }
  }
  return kNaN;
}

// VJP of the normaliser row: dt from dy (g).
void normalize_row_backward(const AttentionProblem& p, const double* t, const double* y,
                            const double* g, int64_t n, const double* aux, double* dt) {
  double r = 0;
  for (int64_t j = 0; j < n; ++j)
    if (y[j] != 0.0 || std::isnan(y[j])) r += g[j] * y[j];
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf && !std::isnan(y[j])) {
      dt[j] = 0.0;
      continue;
    }
    switch (p.o.normalizer) {
      case AttentionNormalizer::kSoftmax:
        dt[j] = y[j] * (g[j] - r);
        break;
      case AttentionNormalizer::kSsmax:
        dt[j] = aux[0] * y[j] * (g[j] - r);
        break;
      case AttentionNormalizer::kSigmoid:
        dt[j] = g[j] * y[j] * (1 - y[j]);
        break;
      case AttentionNormalizer::kSoftpick: {
        // S = 0 (eps = 0, every visible t = 0): y = 0 and 0 gradient.
        const double q = aux[2] == 0.0 ? 0.0 : std::exp(t[j] - aux[1]) / aux[2];
        const double sgn = t[j] > 0 ? 1.0 : -1.0;
        dt[j] = std::isnan(y[j]) ? kNaN : q * ((t[j] > 0 ? g[j] : 0.0) - sgn * r);
        break;
      }
      case AttentionNormalizer::kStablemax: {
        const double sp = t[j] >= 0 ? 1.0 : 1.0 / ((1 - t[j]) * (1 - t[j]));
        dt[j] = std::isnan(y[j]) ? kNaN : sp / aux[0] * (g[j] - r);
        break;
      }
      case AttentionNormalizer::kSoftplus: {
        const double z = aux[0] * t[j];
        // sigmoid(z) / softplus(z) -> 1 as z -> -inf, where both underflow.
        const double sp = softplus(z);
        dt[j] = aux[0] * y[j] * (sp > 0.0 ? sigmoid(z) / sp : 1.0) * (g[j] - r);
        break;
      }
      case AttentionNormalizer::kPower: {
        // dt_j = p t_j^(p-1) / sum t^p (g_j - r); an all-zero row: 0.
        const double M = aux[0], S = aux[1];
        dt[j] = std::isnan(y[j]) ? kNaN
                : M == 0.0       ? 0.0
                                 : p.o.power_p * std::pow(t[j] / M, p.o.power_p - 1) / (M * S) *
                                 (g[j] - r);
        break;
      }
    }
  }
}


// Element `at` (in elements) of an i32 / i64 view.
int64_t index_at(const TensorView& t, int64_t at) {
  const char* p = static_cast<const char*>(t.data);
  if (t.dtype == DType::kI32) {
    int32_t x;
    std::memcpy(&x, p + at * 4, 4);
    return x;
  }
  int64_t x;
  std::memcpy(&x, p + at * 8, 8);
  return x;
}

// Logical [B, Hkv, Lk, cols] from a pool of pages [num_pages, Hkv, page, cols]:
// key j of sequence b is row j % page of page table[b, j / page]; pages past
// `used[b]` keys are left 0.
std::vector<double> unpage(const TensorView& pool, const TensorView& table, int64_t B,
                           const std::vector<int64_t>& used) {
  const int64_t Hkv = pool.shape[1], page = pool.shape[2], cols = pool.shape[3];
  const int64_t slots = table.shape[1], Lk = slots * page;
  const std::vector<double> dense = to_dense(pool);
  std::vector<double> out(static_cast<size_t>(B * Hkv * Lk * cols), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < used[static_cast<size_t>(b)]; ++j) {
      const int64_t pg = index_at(table, b * table.strides[0] + (j / page) * table.strides[1]);
      for (int64_t hk = 0; hk < Hkv; ++hk)
        for (int64_t c = 0; c < cols; ++c) {
          out[static_cast<size_t>(((b * Hkv + hk) * Lk + j) * cols + c)] =
              dense[static_cast<size_t>(((pg * Hkv + hk) * page + j % page) * cols + c)];
        }
    }
  return out;
}

}  // namespace

AttentionProblem attention_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const AttentionOptions& options) {
  AttentionProblem p;
  p.B = q.shape[0];
  p.H = q.shape[1];
  p.Lq = q.shape[2];
  p.D = q.shape[3];
  p.Hkv = k.shape[1];
  p.Lk = options.block_table ? options.block_table->shape[1] * k.shape[2] : k.shape[2];
  p.Dv = v.shape[3];
  p.q = to_dense(q);
  if (options.cache_seqlens) {
    for (int64_t b = 0; b < p.B; ++b) {
      p.seqlens.push_back(index_at(*options.cache_seqlens, b * options.cache_seqlens->strides[0]));
    }
  }
  if (options.block_table) {
    const std::vector<int64_t> used =
        p.seqlens.empty() ? std::vector<int64_t>(static_cast<size_t>(p.B), p.Lk) : p.seqlens;
    p.k = unpage(k, *options.block_table, p.B, used);
    p.v = unpage(v, *options.block_table, p.B, used);
  } else {
    p.k = to_dense(k);
    p.v = to_dense(v);
  }
  p.o = options;
  p.scale = std::isnan(options.scale) ? (p.D > 0 ? 1.0 / std::sqrt(static_cast<double>(p.D)) : 1.0)
                                      : static_cast<double>(options.scale);
  // The library rounds the default scale to f32: use the same multiplier.
  p.scale = static_cast<float>(p.scale);
  const std::vector<int64_t> sshape = {p.B, p.H, p.Lq, p.Lk};
  if (options.attn_mask) {
    const auto m = expand(*options.attn_mask, sshape);
    if (options.attn_mask->dtype == DType::kBool) {
      p.keep.resize(m.size());
      for (size_t i = 0; i < m.size(); ++i) p.keep[i] = m[i] != 0.0;
    } else {
      p.add = m;
    }
  }
  if (options.sinks) p.sinks = expand(*options.sinks, {p.H});
  if (options.ssmax_scales) p.ssmax = expand(*options.ssmax_scales, {p.H});
  if (options.alibi_slopes) p.alibi = expand(*options.alibi_slopes, {p.B, p.H});
  if (options.gate) p.gate = expand(*options.gate, {p.B, p.H, p.Lq, p.Dv});
  return p;
}

AttentionResult attention_forward(const AttentionProblem& p) {
  AttentionResult r;
  const int64_t G = p.Hkv > 0 ? p.H / p.Hkv : 1;
  r.out.assign(static_cast<size_t>(p.B * p.H * p.Lq * p.Dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.B * p.H * p.Lq), 0.0);
  r.P.assign(static_cast<size_t>(p.B * p.H * p.Lq * p.Lk), 0.0);
  r.T.assign(r.P.size(), 0.0);
  const double cap = p.o.softcap;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t hk = h / G;
      const double* K = p.k.data() + (b * p.Hkv + hk) * p.Lk * p.D;
      const double* V = p.v.data() + (b * p.Hkv + hk) * p.Lk * p.Dv;
      for (int64_t i = 0; i < p.Lq; ++i) {
        const double* Q = p.q.data() + ((b * p.H + h) * p.Lq + i) * p.D;
        const int64_t row = (b * p.H + h) * p.Lq + i;
        double* t = r.T.data() + row * p.Lk;
        const int64_t keys = p.seqlens.empty() ? p.Lk : p.seqlens[static_cast<size_t>(b)];
        const int64_t pos = p.seqlens.empty() ? i : keys - p.Lq + i;  // the query's position
        for (int64_t j = 0; j < p.Lk; ++j) {
          if (j >= keys) {  // past the sequence's keys (KV cache): never read
            t[j] = -kInf;
            continue;
          }
          double x = 0;
          for (int64_t c = 0; c < p.D; ++c) x += Q[c] * K[j * p.D + c];
          x *= p.scale;
          if (cap > 0) x = cap * std::tanh(x / cap);
          if (!p.alibi.empty()) x += -p.alibi[b * p.H + h] * std::abs(static_cast<double>(pos - j));
          if (!p.add.empty()) x += p.add[row * p.Lk + j];
          if (!p.keep.empty() && !p.keep[row * p.Lk + j]) x = -kInf;
          if (p.o.is_causal && j > pos) x = -kInf;
          t[j] = x;
        }
        double* y = r.P.data() + row * p.Lk;
        double aux[3] = {0, 0, 0};
        const double sink = p.sinks.empty() ? 0.0 : p.sinks[h];
        r.lse[row] = normalize_row(p, t, p.Lk, p.sinks.empty() ? nullptr : &sink, y, aux, keys, h);
        double* o = r.out.data() + row * p.Dv;
        bool row_nan = false;
        for (int64_t j = 0; j < p.Lk; ++j) row_nan = row_nan || std::isnan(y[j]);
        for (int64_t c = 0; c < p.Dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < p.Lk; ++j) acc += y[j] == 0.0 ? 0.0 : y[j] * V[j * p.Dv + c];
          o[c] = row_nan ? kNaN : acc;
        }
        if (keys == 0 && p.sinks.empty() && p.o.empty_row == EmptyRow::kNan) {
          for (int64_t c = 0; c < p.Dv; ++c) o[c] = kNaN;
        }
      }
    }
  r.ungated = r.out;
  for (size_t e = 0; e < p.gate.size(); ++e) r.out[e] = sigmoid(p.gate[e]) * r.ungated[e];
  return r;
}

AttentionGrads attention_backward(const AttentionProblem& p, const std::vector<double>& dout_gated) {
  const AttentionResult f = attention_forward(p);
  AttentionGrads g;
  // The gate: dA = dout * s, dgate = dout * a * s (1 - s), s = sigmoid(gate).
  std::vector<double> dout = dout_gated;
  if (!p.gate.empty()) {
    g.dgate.resize(dout.size());
    g.dgate_mag.resize(dout.size());
    for (size_t e = 0; e < dout.size(); ++e) {
      const double sg = sigmoid(p.gate[e]);
      g.dgate[e] = dout_gated[e] * f.ungated[e] * sg * (1 - sg);
      g.dgate_mag[e] = std::abs(dout_gated[e] * f.ungated[e]) * sg * (1 - sg);
      dout[e] = dout_gated[e] * sg;
    }
  }
  const int64_t G = p.Hkv > 0 ? p.H / p.Hkv : 1;
  g.dq.assign(p.q.size(), 0.0);
  g.dk.assign(p.k.size(), 0.0);
  g.dv.assign(p.v.size(), 0.0);
  g.dq_mag.assign(p.q.size(), 0.0);
  g.dt.assign(static_cast<size_t>(p.B * p.H * p.Lq * p.Lk), 0.0);
  g.dt_mag.assign(g.dt.size(), 0.0);
  g.dsink.assign(static_cast<size_t>(p.B * p.H * p.Lq), 0.0);
  g.dsink_mag.assign(g.dsink.size(), 0.0);
  g.dssmax.assign(g.dsink.size(), 0.0);
  g.dssmax_mag.assign(g.dsink.size(), 0.0);
  g.dk_mag.assign(p.k.size(), 0.0);
  g.dv_mag.assign(p.v.size(), 0.0);
  const double cap = p.o.softcap;
  std::vector<double> dp(static_cast<size_t>(p.Lk)), dt(static_cast<size_t>(p.Lk));
  std::vector<double> dpa(static_cast<size_t>(p.Lk));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t hk = h / G;
      const double* K = p.k.data() + (b * p.Hkv + hk) * p.Lk * p.D;
      const double* V = p.v.data() + (b * p.Hkv + hk) * p.Lk * p.Dv;
      double* dK = g.dk.data() + (b * p.Hkv + hk) * p.Lk * p.D;
      double* dV = g.dv.data() + (b * p.Hkv + hk) * p.Lk * p.Dv;
      double* mK = g.dk_mag.data() + (b * p.Hkv + hk) * p.Lk * p.D;
      double* mV = g.dv_mag.data() + (b * p.Hkv + hk) * p.Lk * p.Dv;
      for (int64_t i = 0; i < p.Lq; ++i) {
        const int64_t row = (b * p.H + h) * p.Lq + i;
        const double* Q = p.q.data() + row * p.D;
        double* dQ = g.dq.data() + row * p.D;
        double* mQ = g.dq_mag.data() + row * p.D;
        const double* dO = dout.data() + row * p.Dv;
        if (p.Lk == 0 && p.sinks.empty() && p.o.empty_row == EmptyRow::kNan) {
          // No key at all: an empty row (NaN output, as the forward): NaN dq.
          for (int64_t c = 0; c < p.D; ++c) dQ[c] = kNaN;
          continue;
        }
        const double* t = f.T.data() + row * p.Lk;
        const double* y = f.P.data() + row * p.Lk;
        double aux[3] = {0, 0, 0};
        {  // recompute aux
          std::vector<double> tmp(static_cast<size_t>(p.Lk));
          const double sink = p.sinks.empty() ? 0.0 : p.sinks[h];
          normalize_row(p, t, p.Lk, p.sinks.empty() ? nullptr : &sink, tmp.data(), aux, p.Lk, h);
        }
        for (int64_t j = 0; j < p.Lk; ++j) {
          double a = 0, aa = 0;
          for (int64_t c = 0; c < p.Dv; ++c) {
            a += dO[c] * V[j * p.Dv + c];
            aa += std::abs(dO[c] * V[j * p.Dv + c]);
          }
          dp[j] = a;
          dpa[j] = aa;
          for (int64_t c = 0; c < p.Dv; ++c) dV[j * p.Dv + c] += y[j] * dO[c];
        }
        normalize_row_backward(p, t, y, dp.data(), p.Lk, aux, dt.data());
        double ra = 0, m = -kInf;
        for (int64_t j = 0; j < p.Lk; ++j) {
          if (y[j] != 0.0) ra += dpa[j] * std::abs(y[j]);
          if (t[j] == t[j]) m = std::max(m, t[j]);
        }
        if (!p.sinks.empty() && std::isfinite(f.lse[row])) {
          // The sink column: P_s = e^(sink - lse), dT_s = P_s (0 - <dP, P>).
          const double ps = std::exp(p.sinks[h] - f.lse[row]);
          double dot = 0;
          for (int64_t j = 0; j < p.Lk; ++j) dot += y[j] == 0.0 ? 0.0 : dp[j] * y[j];
          g.dsink[row] = -ps * dot;
          g.dsink_mag[row] = ps * (std::abs(dot) + ra);
        }
        double cw = 1.0;
        if (p.o.normalizer == AttentionNormalizer::kSsmax ||
            p.o.normalizer == AttentionNormalizer::kSoftplus) {
          cw = std::max(1.0, std::abs(aux[0]));
        }
        if (p.o.normalizer == AttentionNormalizer::kSsmax) {
          // dL/ds = ln(n) sum_j t_j y_j (dP_j - <dP, y>) over the visible keys.
          int64_t vis = 0;
          double dot = 0;
          bool nan_row = false;
          for (int64_t j = 0; j < p.Lk; ++j) {
            nan_row = nan_row || std::isnan(y[j]);
            if (t[j] == -kInf) continue;
            ++vis;
            dot += y[j] * dp[j];
          }
          double sum = 0, mag = 0;
          for (int64_t j = 0; j < p.Lk && vis > 0 && !nan_row; ++j) {
            if (t[j] == -kInf) continue;
            sum += t[j] * y[j] * (dp[j] - dot);
            mag += std::abs(y[j]) * (std::abs(t[j]) + 1) * cw *
                   (std::abs(dp[j] - dot) + dpa[j] + ra);
          }
          const double ln = vis > 0 ? std::log(static_cast<double>(vis)) : 0.0;
          g.dssmax[row] = nan_row ? kNaN : ln * sum;
          g.dssmax_mag[row] = std::abs(ln) * mag;
        }
        for (int64_t j = 0; j < p.Lk; ++j) {
          double w = cw * std::abs(y[j]);
          if (p.o.normalizer == AttentionNormalizer::kSoftpick && t[j] != -kInf &&
              aux[2] != 0.0) {
            w += std::exp(t[j] - aux[1]) / aux[2];
          }
          if (p.o.normalizer == AttentionNormalizer::kPower && t[j] != -kInf && aux[0] > 0.0) {
            w += p.o.power_p * std::pow(std::abs(t[j]) / aux[0], p.o.power_p - 1) /
                 (aux[0] * aux[1]);
          }
          for (int64_t c = 0; c < p.Dv; ++c) mV[j * p.Dv + c] += w * std::abs(dO[c]);
          g.dt[row * p.Lk + j] = dt[j];
          g.dt_mag[row * p.Lk + j] = std::abs(dt[j]) + w * (dpa[j] + ra);
          double mag = (std::abs(dt[j]) + w * (dpa[j] + ra)) * std::abs(p.scale);
          if (cap > 0 && t[j] != -kInf) {
            // The softcap factor f = 1 - tanh^2 is computed in f32 from a
            // saturating tanh: its absolute error (~8 u) is not relative to f.
            double x = 0;
            for (int64_t c = 0; c < p.D; ++c) x += Q[c] * K[j * p.D + c];
            const double th = std::tanh(x * p.scale / cap);
            mag *= (1 - th) * (1 + th) + 0.25;
          }
          if (mag == mag && mag > 0) {
            for (int64_t c = 0; c < p.D; ++c) {
              mQ[c] += mag * std::abs(K[j * p.D + c]);
              mK[j * p.D + c] += mag * std::abs(Q[c]);
            }
          }
        }
        for (int64_t j = 0; j < p.Lk; ++j) {
          double ds = dt[j];
          if (cap > 0 && ds != 0.0) {
            double x = 0;
            for (int64_t c = 0; c < p.D; ++c) x += Q[c] * K[j * p.D + c];
            const double th = std::tanh(x * p.scale / cap);
            ds *= (1 - th) * (1 + th);
          }
          ds *= p.scale;
          if (ds == 0.0) continue;
          for (int64_t c = 0; c < p.D; ++c) {
            dQ[c] += ds * K[j * p.D + c];
            dK[j * p.D + c] += ds * Q[c];
          }
        }
      }
    }
  return g;
}

}  // namespace smax::reference

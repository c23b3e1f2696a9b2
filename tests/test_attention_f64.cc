// tests/test_attention_f64.cc: the fused attention's float64 path
// (src/ops/attention/attention_f64.cc; attention() with f64 q / k / v,
// attention_backward() with any of q, k, v, out, dout f64), on every SIMD
// target, against a long double oracle written here from the formulas of
// include/smax/attention.h (forward; the backward's gradients are the
// oracle's exact derivatives, by forward-mode dual numbers over long double):
//  * the "float64" bound of include/smax/attention.h (the f32 bound's form
//    with u = 2^-53; the weights, sensitivities and backward magnitudes from
//    src/reference/attention.h) for every normaliser, masks (bool, additive
//    f64), causal, softcap, ALiBi, sinks, GQA, lse, a gate, cache_seqlens
//    and a paged block table; dq / dk / dv and every knob gradient;
//  * q near 1e3 and k near 1 with differences at 1e-3..1e-6: rounded to f32
//    the logits move by ~1e-4, far outside the float64 bound (the test fails
//    if the path fell back to f32);
//  * the same bits for 1, 2 and 3 threads; f32 outputs that are the float64
//    results rounded once; NaN and fully masked rows under both empty_row
//    policies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "smax/attention.h"
#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::AttentionNormalizer;
using smax::AttentionOptions;
using smax::DType;
using smax::TensorView;
namespace ref = smax::reference;
using LD = long double;
constexpr double kU64 = 0x1p-53;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- forward-mode dual numbers over long double --------------------------------------------
struct Dual {
  LD v = 0, d = 0;
  Dual() = default;
  Dual(LD x, LD y = 0) : v(x), d(y) {}  // NOLINT: implicit from a constant
};
Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
Dual operator-(Dual a) { return {-a.v, -a.d}; }
Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
Dual& operator+=(Dual& a, Dual b) { return a = a + b; }
LD val(Dual a) { return a.v; }
LD val(LD a) { return a; }
Dual dexp(Dual a) {
  const LD e = std::exp(a.v);
  return {e, e * a.d};
}
Dual dlog(Dual a) { return {std::log(a.v), a.d / a.v}; }
Dual dlog1p(Dual a) { return {std::log1p(a.v), a.d / (1 + a.v)}; }
Dual dexpm1(Dual a) { return {std::expm1(a.v), std::exp(a.v) * a.d}; }
Dual dtanh(Dual a) {
  const LD t = std::tanh(a.v);
  return {t, (1 - t * t) * a.d};
}
LD dexp(LD a) { return std::exp(a); }
LD dlog(LD a) { return std::log(a); }
LD dlog1p(LD a) { return std::log1p(a); }
LD dexpm1(LD a) { return std::expm1(a); }
LD dtanh(LD a) { return std::tanh(a); }
template <class S>
S dabs(S a) {
  return val(a) < 0 ? -a : a;
}

// ---- a problem -------------------------------------------------------------------------------
struct Case {
  int64_t B = 1, H = 4, Hkv = 2, Lq = 6, Lk = 9, D = 5, Dv = 3;
  AttentionOptions o;  // normaliser and scalar options (tensors filled from the flags)
  bool add = false, keep = false, sinks = false, alibi = false, gate = false;
  bool ssmax_heads = false, lse = false;
  std::vector<int64_t> seqlens;  // KV cache (forward)
  int64_t page_size = 0;         // > 0: a paged cache (forward)
  double q_off = 0, q_spread = 1, k_off = 0, k_spread = 1;
};

struct Data {
  std::vector<double> q, k, v, add, sinks, alibi, gate, ssmax, dout;
  std::vector<uint8_t> keep;
};

Data make_data(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n;
  std::uniform_real_distribution<double> u(-1.0, 1.0), unit(0.0, 1.0);
  auto fill = [&](size_t count, double off, double spread, bool uniform) {
    std::vector<double> x(count);
    for (double& e : x) e = off + spread * (uniform ? u(rng) : n(rng));
    return x;
  };
  const bool uni = c.q_off != 0 || c.k_off != 0;
  Data d;
  d.q = fill(c.B * c.H * c.Lq * c.D, c.q_off, c.q_spread, uni);
  d.k = fill(c.B * c.Hkv * c.Lk * c.D, c.k_off, c.k_spread, uni);
  d.v = fill(c.B * c.Hkv * c.Lk * c.Dv, 0, 1, false);
  d.dout = fill(c.B * c.H * c.Lq * c.Dv, 0, 1, false);
  const size_t scores = static_cast<size_t>(c.B * c.H * c.Lq * c.Lk);
  if (c.add) d.add = fill(scores, 0, 0.5, false);
  if (c.keep) {
    d.keep.resize(scores);
    for (size_t e = 0; e < scores; ++e) {
      d.keep[e] = e % static_cast<size_t>(c.Lk) == 0 || unit(rng) > 0.25;
    }
  }
  if (c.sinks) d.sinks = fill(c.H, 0, 1, false);
  if (c.alibi) {
    d.alibi.resize(c.H);
    for (int64_t h = 0; h < c.H; ++h) d.alibi[h] = std::pow(2.0, -(h + 1.0)) * 1.1;
  }
  if (c.gate) d.gate = fill(c.B * c.H * c.Lq * c.Dv, 0, 1.5, false);
  if (c.ssmax_heads) d.ssmax = {0.43, 0.7, -0.2, 1.3};
  return d;
}

double default_scale(const Case& c) {
  return std::isnan(c.o.scale) ? 1.0 / std::sqrt(static_cast<double>(c.D)) : c.o.scale;
}

// ---- the long double oracle (include/smax/attention.h's formulas) -----------------------
template <class S>
struct OracleIn {
  std::vector<S> q, k, v, add, sinks, alibi, gate, ssmax;
  S bias_shift = 0, s_scalar = 0;
};
template <class S>
OracleIn<S> oracle_in(const Case& c, const Data& d) {
  auto cv = [](const std::vector<double>& x) { return std::vector<S>(x.begin(), x.end()); };
  OracleIn<S> in{cv(d.q), cv(d.k), cv(d.v), cv(d.add), cv(d.sinks), cv(d.alibi), cv(d.gate),
                 cv(d.ssmax)};
  in.s_scalar = static_cast<LD>(c.o.ssmax_s);
  return in;
}
template <class S>
struct OracleOut {
  std::vector<S> out, ungated, lse;
};

template <class S>
OracleOut<S> oracle(const Case& c, const Data& d, const OracleIn<S>& in) {
  OracleOut<S> r;
  r.out.assign(c.B * c.H * c.Lq * c.Dv, S(0));
  r.ungated = r.out;
  r.lse.assign(c.B * c.H * c.Lq, S(0));
  const LD scale = std::isnan(c.o.scale) ? 1.0L / std::sqrt(static_cast<LD>(c.D))
                                         : static_cast<LD>(c.o.scale);
  const LD cap = c.o.softcap;
  const int64_t G = c.H / c.Hkv;
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t hk = h / G;
      for (int64_t i = 0; i < c.Lq; ++i) {
        const int64_t nk = c.seqlens.empty() ? c.Lk : c.seqlens[b];
        const int64_t pos = c.seqlens.empty() ? i : nk - c.Lq + i;
        const int64_t row = (b * c.H + h) * c.Lq + i;
        std::vector<S> t;
        std::vector<int64_t> js;
        for (int64_t j = 0; j < c.Lk; ++j) {
          const int64_t sc = row * c.Lk + j;
          if (j >= nk || (c.o.is_causal && j > pos) || (!d.keep.empty() && d.keep[sc] == 0)) continue;
          S x = 0;
          for (int64_t e = 0; e < c.D; ++e) {
            x += in.q[row * c.D + e] * in.k[((b * c.Hkv + hk) * c.Lk + j) * c.D + e];
          }
          x = S(scale) * x;
          if (cap > 0) x = S(cap) * dtanh(x / S(cap));
          if (!in.alibi.empty()) x = x - in.alibi[h] * S(static_cast<LD>(std::abs(pos - j)));
          if (!in.add.empty()) x += in.add[sc];
          t.push_back(x);
          js.push_back(j);
        }
        const size_t n = t.size();
        EXPECT_TRUE(n > 0 || !in.sinks.empty());  // oracle rows have a visible logit
        std::vector<S> y(n);
        auto softmax_of = [&](const std::vector<S>& u, bool with_sink) {
          LD m = -INFINITY;
          for (const S& x : u) m = std::max(m, val(x));
          if (with_sink) m = std::max(m, val(in.sinks[h]));
          S sum = 0;
          for (size_t j = 0; j < n; ++j) sum += dexp(u[j] - S(m));
          if (with_sink) sum += dexp(in.sinks[h] - S(m));
          for (size_t j = 0; j < n; ++j) y[j] = dexp(u[j] - S(m)) / sum;
          r.lse[row] = S(m) + dlog(sum);
        };
        const LD nvis = static_cast<LD>(n);
        switch (c.o.normalizer) {
          case AttentionNormalizer::kSoftmax:
            softmax_of(t, !in.sinks.empty());
            break;
          case AttentionNormalizer::kSigmoid: {
            S bias = !std::isnan(c.o.sigmoid_bias) ? S(static_cast<LD>(c.o.sigmoid_bias))
                     : c.o.sigmoid_bias_mode == smax::SigmoidBiasMode::kPerSequence
                         ? S(-std::log(static_cast<LD>(nk)))
                         : S(-std::log(nvis));
            bias += in.bias_shift;
            for (size_t j = 0; j < n; ++j) y[j] = S(1) / (S(1) + dexp(-(t[j] + bias)));
            break;
          }
          case AttentionNormalizer::kSoftpick: {
            S den = static_cast<LD>(c.o.softpick_eps);
            for (size_t j = 0; j < n; ++j) den += dabs(dexpm1(t[j]));
            for (size_t j = 0; j < n; ++j) {
              y[j] = val(t[j]) > 0 ? dexpm1(t[j]) / den : S(0);
            }
            break;
          }
          case AttentionNormalizer::kSsmax: {
            const S s = in.ssmax.empty() ? in.s_scalar : in.ssmax[h];
            std::vector<S> u(n);
            for (size_t j = 0; j < n; ++j) u[j] = s * S(std::log(nvis)) * t[j];
            softmax_of(u, false);
            break;
          }
          case AttentionNormalizer::kStablemax:
          case AttentionNormalizer::kSoftplus:
          case AttentionNormalizer::kPower: {
            const LD lambda = std::log(nvis) / std::log(static_cast<LD>(c.D));
            S sum = 0;
            for (size_t j = 0; j < n; ++j) {
              const S x = t[j];
              if (c.o.normalizer == AttentionNormalizer::kStablemax) {
                y[j] = val(x) >= 0 ? x + S(1) : S(1) / (S(1) - x);
              } else if (c.o.normalizer == AttentionNormalizer::kSoftplus) {
                const S z = S(lambda) * x;
                y[j] = val(z) > 0 ? z + dlog1p(dexp(-z)) : dlog1p(dexp(z));
              } else {
                y[j] = S(1);
                for (int p = 0; p < c.o.power_p; ++p) y[j] = y[j] * x;
              }
              sum += y[j];
            }
            for (size_t j = 0; j < n; ++j) y[j] = y[j] / sum;
            break;
          }
        }
        for (int64_t cc = 0; cc < c.Dv; ++cc) {
          S a = 0;
          for (size_t j = 0; j < n; ++j) {
            a += y[j] * in.v[((b * c.Hkv + hk) * c.Lk + js[j]) * c.Dv + cc];
          }
          const int64_t at = row * c.Dv + cc;
          r.ungated[at] = a;
          r.out[at] = in.gate.empty() ? a : a / (S(1) + dexp(-in.gate[at]));
        }
      }
    }
  }
  return r;
}

// ---- running smax ------------------------------------------------------------------------------
TensorView view64(const std::vector<double>& x, std::initializer_list<int64_t> shape) {
  std::vector<int64_t> sh(shape);
  return smax::make_view(const_cast<double*>(x.data()), DType::kF64, static_cast<int>(sh.size()),
                         sh.data(), nullptr);
}
TensorView view_dt(void* p, DType dt, std::initializer_list<int64_t> shape) {
  std::vector<int64_t> sh(shape);
  return smax::make_view(p, dt, static_cast<int>(sh.size()), sh.data(), nullptr);
}

// The options with the case's tensors (views into d and the holders).
struct Views {
  std::vector<int64_t> seqlens, table;
  std::vector<double> kpool, vpool;
  AttentionOptions o;
};
void fill_options(const Case& c, const Data& d, Views& w) {
  w.o = c.o;
  if (c.add) w.o.attn_mask = view64(d.add, {c.B, c.H, c.Lq, c.Lk});
  if (c.keep) {
    w.o.attn_mask = view_dt(const_cast<uint8_t*>(d.keep.data()), DType::kBool,
                            {c.B, c.H, c.Lq, c.Lk});
  }
  if (c.sinks) w.o.sinks = view64(d.sinks, {c.H});
  if (c.alibi) w.o.alibi_slopes = view64(d.alibi, {c.H});
  if (c.gate) w.o.gate = view64(d.gate, {c.B, c.H, c.Lq, c.Dv});
  if (c.ssmax_heads) w.o.ssmax_scales = view64(d.ssmax, {c.H});
  if (!c.seqlens.empty()) {
    w.seqlens = c.seqlens;
    w.o.cache_seqlens = smax::make_index_view(w.seqlens.data(), {c.B});
  }
}

struct Fwd {
  std::vector<double> out, ungated, lse;
};

// attention() on the case's f64 inputs; outputs of dtype `dt` read back as double.
Fwd run_forward(const Case& c, const Data& d, int threads, DType dt = DType::kF64) {
  Views w;
  fill_options(c, d, w);
  w.o.threads = threads;
  TensorView k = view64(d.k, {c.B, c.Hkv, c.Lk, c.D});
  TensorView v = view64(d.v, {c.B, c.Hkv, c.Lk, c.Dv});
  if (c.page_size > 0) {
    // Pages in reverse order plus one unused page: k / v [pages, Hkv, ps, D].
    const int64_t ps = c.page_size, mp = c.Lk / ps, pages = c.B * mp + 1;
    w.kpool.assign(pages * c.Hkv * ps * c.D, 1e300);
    w.vpool.assign(pages * c.Hkv * ps * c.Dv, 1e300);
    w.table.resize(c.B * mp);
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t s = 0; s < mp; ++s) {
        const int64_t page = pages - 1 - (b * mp + s);
        w.table[b * mp + s] = page;
        for (int64_t hk = 0; hk < c.Hkv; ++hk) {
          for (int64_t r = 0; r < ps; ++r) {
            const int64_t j = s * ps + r;
            for (int64_t e = 0; e < c.D; ++e) {
              w.kpool[((page * c.Hkv + hk) * ps + r) * c.D + e] = d.k[((b * c.Hkv + hk) * c.Lk + j) * c.D + e];
            }
            for (int64_t e = 0; e < c.Dv; ++e) {
              w.vpool[((page * c.Hkv + hk) * ps + r) * c.Dv + e] = d.v[((b * c.Hkv + hk) * c.Lk + j) * c.Dv + e];
            }
          }
        }
      }
    }
    k = view64(w.kpool, {pages, c.Hkv, ps, c.D});
    v = view64(w.vpool, {pages, c.Hkv, ps, c.Dv});
    w.o.block_table = smax::make_index_view(w.table.data(), {c.B, mp});
  }
  const size_t osz = static_cast<size_t>(smax::dtype_size(dt));
  std::vector<char> out(c.B * c.H * c.Lq * c.Dv * osz), ung(out.size()), lse(c.B * c.H * c.Lq * osz);
  if (c.gate) w.o.ungated_out = view_dt(ung.data(), dt, {c.B, c.H, c.Lq, c.Dv});
  if (c.lse) w.o.lse = view_dt(lse.data(), dt, {c.B, c.H, c.Lq});
  smax::attention(view64(d.q, {c.B, c.H, c.Lq, c.D}), k, v,
                  view_dt(out.data(), dt, {c.B, c.H, c.Lq, c.Dv}), w.o);
  auto back = [&](const std::vector<char>& x) {
    std::vector<double> r(x.size() / osz);
    for (size_t e = 0; e < r.size(); ++e) {
      if (dt == DType::kF64) {
        std::memcpy(&r[e], x.data() + e * 8, 8);
      } else {
        float f;
        std::memcpy(&f, x.data() + e * 4, 4);
        r[e] = f;
      }
    }
    return r;
  };
  return {back(out), back(ung), back(lse)};
}

struct Bwd {
  std::vector<double> dq, dk, dv, dmask, dsinks, dalibi, dbias, dssmax, dgate;
};

Bwd run_backward(const Case& c, const Data& d, const Fwd& f, int threads, bool knobs = true) {
  Views w;
  fill_options(c, d, w);
  w.o.threads = threads;
  Bwd g;
  g.dq.assign(d.q.size(), 7);
  g.dk.assign(d.k.size(), 7);
  g.dv.assign(d.v.size(), 7);
  if (knobs) {
    if (c.add) w.o.dattn_mask = view64((g.dmask = std::vector<double>(d.add.size())), {c.B, c.H, c.Lq, c.Lk});
    if (c.sinks) w.o.dsinks = view64((g.dsinks = std::vector<double>(c.H)), {c.H});
    if (c.alibi) w.o.dalibi_slopes = view64((g.dalibi = std::vector<double>(c.H)), {c.H});
    if (c.o.normalizer == AttentionNormalizer::kSigmoid) {
      w.o.dsigmoid_bias = view64((g.dbias = std::vector<double>(1)), {1});
    }
    if (c.o.normalizer == AttentionNormalizer::kSsmax) {
      g.dssmax.assign(c.ssmax_heads ? c.H : 1, 0.0);
      w.o.dssmax_scales = view64(g.dssmax, {static_cast<int64_t>(g.dssmax.size())});
    }
    if (c.gate) w.o.dgate = view64((g.dgate = std::vector<double>(d.gate.size())), {c.B, c.H, c.Lq, c.Dv});
  }
  if (c.gate) w.o.ungated_out = view64(f.ungated, {c.B, c.H, c.Lq, c.Dv});
  smax::attention_backward(
      view64(d.q, {c.B, c.H, c.Lq, c.D}), view64(d.k, {c.B, c.Hkv, c.Lk, c.D}),
      view64(d.v, {c.B, c.Hkv, c.Lk, c.Dv}), view64(f.out, {c.B, c.H, c.Lq, c.Dv}),
      view64(d.dout, {c.B, c.H, c.Lq, c.Dv}), view64(g.dq, {c.B, c.H, c.Lq, c.D}),
      view64(g.dk, {c.B, c.Hkv, c.Lk, c.D}), view64(g.dv, {c.B, c.Hkv, c.Lk, c.Dv}), w.o);
  return g;
}

// ---- the float64 bound (include/smax/attention.h, "float64") ------------------------------
ref::AttentionProblem problem(const Case& c, const Data& d) {
  ref::AttentionProblem p;
  p.B = c.B, p.H = c.H, p.Hkv = c.Hkv, p.Lq = c.Lq, p.Lk = c.Lk, p.D = c.D, p.Dv = c.Dv;
  p.q = d.q, p.k = d.k, p.v = d.v, p.add = d.add, p.keep = d.keep, p.sinks = d.sinks;
  p.gate = d.gate, p.ssmax = d.ssmax, p.seqlens = c.seqlens;
  if (c.alibi) {
    for (int64_t b = 0; b < c.B; ++b) p.alibi.insert(p.alibi.end(), d.alibi.begin(), d.alibi.end());
  }
  p.scale = default_scale(c);
  p.o = c.o;
  return p;
}

// The reference's Delta_i is linear in its u = 2^-24: Delta_i at u = 2^-53.
constexpr double kToF64 = 0x1p-29;

double norm_error64(const Case& c) {
  if (c.o.normalizer != AttentionNormalizer::kPower) return 1e-14;
  const double p = c.o.power_p;
  return std::max(1e-14, (2 * p + 4 * std::log2(p) + 6) * kU64);
}

// |got - want| / bound, worst over the elements (and each within the bound).
double check(const std::vector<double>& got, const std::vector<LD>& want,
             const std::vector<double>& bound, const std::string& what) {
  double worst = 0;
  EXPECT_EQ(got.size(), want.size()) << what;
  for (size_t e = 0; e < got.size() && e < want.size(); ++e) {
    const double err = std::fabs(static_cast<double>(static_cast<LD>(got[e]) - want[e]));
    EXPECT_LE(err, bound[e]) << what << " [" << e << "] got " << got[e] << " want "
                             << static_cast<double>(want[e]);
    worst = std::max(worst, err / bound[e]);
  }
  return worst;
}

void check_forward(const Case& c, const Data& d, const std::string& what) {
  const Fwd f = run_forward(c, d, 2);
  const auto want = oracle<LD>(c, d, oracle_in<LD>(c, d));
  const auto p = problem(c, d);
  const auto r = ref::attention_forward(p);
  std::vector<double> bound(f.out.size()), ubound(f.out.size()), lbound(f.lse.size());
  std::vector<double> w(c.Lk);
  const int64_t G = c.H / c.Hkv;
  for (int64_t row = 0; row < c.B * c.H * c.Lq; ++row) {
    const int64_t b = row / (c.H * c.Lq), hk = (row / c.Lq) % c.H / G;
    double dot_max = 0;
    const double delta = ref::attention_row_delta(p, r, row, &dot_max) * kToF64;
    const double E = ref::attention_sensitivity(p, r, row) * delta + norm_error64(c) +
                     (c.Lk + 16) * kU64;
    ref::attention_bound_weights(p, r, row, w.data());
    for (int64_t cc = 0; cc < c.Dv; ++cc) {
      double W = 0;
      for (int64_t j = 0; j < c.Lk; ++j) W += w[j] * std::fabs(d.v[((b * c.Hkv + hk) * c.Lk + j) * c.Dv + cc]);
      const int64_t at = row * c.Dv + cc;
      ubound[at] = E * W + 1e-300;
      bound[at] = ubound[at];
      if (c.gate) {
        const double s = 1.0 / (1.0 + std::exp(-d.gate[at]));
        bound[at] = s * ubound[at] + 4 * kU64 * std::fabs(static_cast<double>(want.out[at]));
      }
    }
    // lse = m + log d: the logits' error plus log's and the sum's roundings.
    lbound[row] = delta + (c.Lk + 4) * kU64 * (std::fabs(static_cast<double>(want.lse[row])) + 1);
  }
  const double worst = check(f.out, want.out, bound, what + " out");
  if (c.gate) check(f.ungated, want.ungated, ubound, what + " ungated_out");
  if (c.lse) check(f.lse, want.lse, lbound, what + " lse");
  std::printf("    %s: worst error / bound %.3g\n", what.c_str(), worst);
}

// The oracle's gradients: dL/dx for L = sum dout * out, one dual pass per input.
struct Grads {
  std::vector<LD> dq, dk, dv, dmask, dsinks, dalibi, dbias, dssmax;
};
Grads oracle_grads(const Case& c, const Data& d) {
  const OracleIn<Dual> base = oracle_in<Dual>(c, d);
  auto loss = [&](const OracleIn<Dual>& in) {
    const auto r = oracle<Dual>(c, d, in);
    LD l = 0;
    for (size_t e = 0; e < r.out.size(); ++e) l += d.dout[e] * r.out[e].d;
    return l;
  };
  auto grad = [&](std::vector<Dual> OracleIn<Dual>::*field) {
    std::vector<LD> g((base.*field).size());
    OracleIn<Dual> in = base;
    for (size_t e = 0; e < g.size(); ++e) {
      (in.*field)[e].d = 1;
      g[e] = loss(in);
      (in.*field)[e].d = 0;
    }
    return g;
  };
  Grads g;
  g.dq = grad(&OracleIn<Dual>::q);
  g.dk = grad(&OracleIn<Dual>::k);
  g.dv = grad(&OracleIn<Dual>::v);
  g.dmask = grad(&OracleIn<Dual>::add);
  g.dsinks = grad(&OracleIn<Dual>::sinks);
  g.dalibi = grad(&OracleIn<Dual>::alibi);
  if (c.o.normalizer == AttentionNormalizer::kSigmoid) {
    OracleIn<Dual> in = base;
    in.bias_shift.d = 1;
    g.dbias = {loss(in)};
  }
  if (c.o.normalizer == AttentionNormalizer::kSsmax) {
    if (c.ssmax_heads) {
      g.dssmax = grad(&OracleIn<Dual>::ssmax);
    } else {
      OracleIn<Dual> in = base;
      in.s_scalar.d = 1;
      g.dssmax = {loss(in)};
    }
  }
  return g;
}

void check_backward(const Case& c, const Data& d, const std::string& what) {
  const Fwd f = run_forward(c, d, 1);
  const Bwd got = run_backward(c, d, f, 2);
  const Grads want = oracle_grads(c, d);
  const auto p = problem(c, d);
  const auto r = ref::attention_forward(p);
  const auto mag = ref::attention_backward(p, d.dout);
  double dmax = 0;
  for (int64_t row = 0; row < c.B * c.H * c.Lq; ++row) {
    dmax = std::max(dmax, ref::attention_row_delta(p, r, row) * kToF64);
  }
  const double rel = norm_error64(c) * (c.o.normalizer == AttentionNormalizer::kPower ? 2 : 1) +
                     2.0 * (c.Lq + c.Lk + c.D + c.Dv + (c.gate ? 2 : 0)) * kU64 + 4 * dmax;
  auto scaled = [&](const std::vector<double>& m) {
    std::vector<double> b(m.size());
    for (size_t e = 0; e < m.size(); ++e) b[e] = rel * m[e] + 1e-300;
    return b;
  };
  double worst = check(got.dq, want.dq, scaled(mag.dq_mag), what + " dq");
  worst = std::max(worst, check(got.dk, want.dk, scaled(mag.dk_mag), what + " dk"));
  worst = std::max(worst, check(got.dv, want.dv, scaled(mag.dv_mag), what + " dv"));
  // Knobs: the sums of the logit gradient's magnitudes they collect.
  const int64_t rows = c.B * c.H * c.Lq;
  auto per_head = [&](auto term) {
    std::vector<double> m(c.H, 0.0);
    for (int64_t row = 0; row < rows; ++row) m[(row / c.Lq) % c.H] += term(row);
    return m;
  };
  if (c.add) worst = std::max(worst, check(got.dmask, want.dmask, scaled(mag.dt_mag), what + " dattn_mask"));
  if (c.sinks) {
    worst = std::max(worst, check(got.dsinks, want.dsinks,
                                  scaled(per_head([&](int64_t row) { return mag.dsink_mag[row]; })),
                                  what + " dsinks"));
  }
  if (c.alibi) {
    const auto m = per_head([&](int64_t row) {
      double s = 0;
      for (int64_t j = 0; j < c.Lk; ++j) s += mag.dt_mag[row * c.Lk + j] * std::abs(row % c.Lq - j);
      return s;
    });
    worst = std::max(worst, check(got.dalibi, want.dalibi, scaled(m), what + " dalibi_slopes"));
  }
  if (c.o.normalizer == AttentionNormalizer::kSigmoid) {
    double s = 0;
    for (double x : mag.dt_mag) s += x;
    worst = std::max(worst, check(got.dbias, want.dbias, scaled({s}), what + " dsigmoid_bias"));
  }
  if (c.o.normalizer == AttentionNormalizer::kSsmax) {
    std::vector<double> m = per_head([&](int64_t row) { return mag.dssmax_mag[row]; });
    if (!c.ssmax_heads) m = {[&] { double s = 0; for (double x : m) s += x; return s; }()};
    worst = std::max(worst, check(got.dssmax, want.dssmax, scaled(m), what + " dssmax_scales"));
  }
  if (c.gate) {
    // dgate = dout a sigmoid'(g) from the saved a (ungated_out), per element.
    std::vector<LD> wg(d.gate.size());
    std::vector<double> bg(d.gate.size());
    for (size_t e = 0; e < wg.size(); ++e) {
      const LD s = 1 / (1 + std::exp(-static_cast<LD>(d.gate[e])));
      wg[e] = d.dout[e] * static_cast<LD>(f.ungated[e]) * s * (1 - s);
      bg[e] = 16 * kU64 * std::fabs(static_cast<double>(wg[e])) + 1e-300;
    }
    worst = std::max(worst, check(got.dgate, wg, bg, what + " dgate"));
  }
  std::printf("    %s: worst error / bound %.3g\n", what.c_str(), worst);
}

const char* norm_name(AttentionNormalizer n) { return smax::attention_normalizer_name(n); }

class AttentionF64 : public TargetTest {};

TEST_P(AttentionF64, EveryNormaliserWithinTheFloat64Bound) {
  const AttentionNormalizer all[] = {
      AttentionNormalizer::kSoftmax,   AttentionNormalizer::kSigmoid,
      AttentionNormalizer::kSoftpick,  AttentionNormalizer::kSsmax,
      AttentionNormalizer::kStablemax, AttentionNormalizer::kSoftplus,
      AttentionNormalizer::kPower};
  uint64_t seed = 11;
  for (AttentionNormalizer n : all) {
    for (int variant = 0; variant < 3; ++variant) {
      Case c;
      c.o.normalizer = n;
      if (variant == 0) {
        c.add = true;  // additive f64 mask, ALiBi, GQA
        c.alibi = true;
      } else if (variant == 1) {
        c.keep = true;  // bool mask, causal, softcap
        c.o.is_causal = true;
        c.o.softcap = 2.5f;
      } else {
        c.o.scale = 0.3f;  // explicit scale, a gate
        c.gate = true;
        c.add = true;
      }
      if (n == AttentionNormalizer::kSoftmax) {
        c.sinks = variant != 1;
        c.lse = true;
      }
      if (n == AttentionNormalizer::kSsmax) c.ssmax_heads = variant != 2;
      if (n == AttentionNormalizer::kSigmoid && variant == 2) c.o.sigmoid_bias = -1.25f;
      if (n == AttentionNormalizer::kPower) c.o.power_p = variant == 2 ? 4 : 2;
      const Data d = make_data(c, ++seed);
      const std::string what = std::string(norm_name(n)) + " variant " + std::to_string(variant);
      check_forward(c, d, what);
      check_backward(c, d, what);
    }
  }
}

TEST_P(AttentionF64, KvCacheAndPagedTable) {
  for (AttentionNormalizer n : {AttentionNormalizer::kSoftmax, AttentionNormalizer::kSigmoid}) {
    Case c;
    c.B = 2, c.Lq = 3, c.Lk = 12;
    c.o.normalizer = n;
    c.o.is_causal = true;
    c.alibi = true;
    c.lse = n == AttentionNormalizer::kSoftmax;
    c.seqlens = {7, 12};
    const Data d = make_data(c, 77);
    check_forward(c, d, std::string("cache_seqlens ") + norm_name(n));
    Case paged = c;
    paged.page_size = 4;
    check_forward(paged, d, std::string("paged ") + norm_name(n));
    const Fwd a = run_forward(c, d, 1), b = run_forward(paged, d, 3);
    EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * 8)) << norm_name(n);
  }
}

// q near 1e3, k near 1 with differences down to 1e-6: logits whose
// differences f32 storage and products cannot hold.
TEST_P(AttentionF64, FailsInFloat32Arithmetic) {
  for (AttentionNormalizer n : {AttentionNormalizer::kSoftmax, AttentionNormalizer::kSsmax}) {
    Case c;
    c.o.normalizer = n;
    c.q_off = 1000.0, c.q_spread = 1e-3;
    c.k_off = 1.0, c.k_spread = 1e-3;
    c.D = 4;
    c.o.scale = 1.0f;
    const Data d = make_data(c, 5);
    check_forward(c, d, std::string("near 1e3 ") + norm_name(n));
    check_backward(c, d, std::string("near 1e3 ") + norm_name(n));
    // The f32 rounding of the inputs alone moves the output far past the bound.
    Data d32 = d;
    for (auto* x : {&d32.q, &d32.k}) {
      for (double& e : *x) e = static_cast<float>(e);
    }
    const Fwd a = run_forward(c, d, 1), b = run_forward(c, d32, 1);
    double diff = 0;
    for (size_t e = 0; e < a.out.size(); ++e) diff = std::max(diff, std::fabs(a.out[e] - b.out[e]));
    EXPECT_GT(diff, 1e-6) << "f32 inputs should change the result far beyond the float64 bound";
  }
}

TEST_P(AttentionF64, ThreadsGiveTheSameBitsAndF32OutputsAreRoundedOnce) {
  Case c;
  c.B = 2, c.Lq = 70, c.Lk = 33;
  c.add = true, c.sinks = true, c.alibi = true, c.lse = true, c.gate = true;
  c.o.is_causal = true;
  const Data d = make_data(c, 3);
  const Fwd f1 = run_forward(c, d, 1);
  const Bwd g1 = run_backward(c, d, f1, 1);
  for (int threads : {2, 3}) {
    const Fwd f = run_forward(c, d, threads);
    EXPECT_EQ(0, std::memcmp(f.out.data(), f1.out.data(), f.out.size() * 8)) << threads;
    EXPECT_EQ(0, std::memcmp(f.lse.data(), f1.lse.data(), f.lse.size() * 8)) << threads;
    const Bwd g = run_backward(c, d, f1, threads);
    for (auto m : {&Bwd::dq, &Bwd::dk, &Bwd::dv, &Bwd::dmask, &Bwd::dsinks, &Bwd::dalibi,
                   &Bwd::dgate}) {
      EXPECT_EQ(0, std::memcmp((g.*m).data(), (g1.*m).data(), (g.*m).size() * 8)) << threads;
    }
  }
  const Fwd f32 = run_forward(c, d, 2, DType::kF32);
  for (size_t e = 0; e < f1.out.size(); ++e) {
    ASSERT_EQ(f32.out[e], static_cast<double>(static_cast<float>(f1.out[e]))) << e;
    ASSERT_EQ(f32.ungated[e], static_cast<double>(static_cast<float>(f1.ungated[e]))) << e;
  }
  for (size_t e = 0; e < f1.lse.size(); ++e) {
    ASSERT_EQ(f32.lse[e], static_cast<double>(static_cast<float>(f1.lse[e]))) << e;
  }
}

TEST_P(AttentionF64, NanAndFullyMaskedRows) {
  for (smax::EmptyRow policy : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    for (AttentionNormalizer n : {AttentionNormalizer::kSoftmax, AttentionNormalizer::kSigmoid}) {
      Case c;
      c.H = 2, c.Hkv = 1, c.Lq = 3, c.Lk = 4;
      c.o.normalizer = n;
      c.o.empty_row = policy;
      c.keep = true;
      c.lse = n == AttentionNormalizer::kSoftmax;
      Data d = make_data(c, 9);
      std::fill(d.keep.begin(), d.keep.end(), 1);
      for (int64_t h = 0; h < c.H; ++h) {
        for (int64_t j = 0; j < c.Lk; ++j) d.keep[(h * c.Lq + 1) * c.Lk + j] = 0;  // row 1 masked
      }
      d.q[2 * c.D] = kNan;  // head 0, row 2: NaN
      const Fwd f = run_forward(c, d, 2);
      const double empty = policy == smax::EmptyRow::kNan ? kNan : 0.0;
      for (int64_t cc = 0; cc < c.Dv; ++cc) {
        for (int64_t h = 0; h < c.H; ++h) {
          const double o1 = f.out[(h * c.Lq + 1) * c.Dv + cc];
          EXPECT_TRUE(std::isnan(empty) ? std::isnan(o1) : o1 == 0.0) << o1;
          EXPECT_TRUE(std::isfinite(f.out[(h * c.Lq) * c.Dv + cc]));
        }
        EXPECT_TRUE(std::isnan(f.out[2 * c.Dv + cc]));
      }
      if (c.lse) {
        EXPECT_TRUE(policy == smax::EmptyRow::kNan ? std::isnan(f.lse[1]) : f.lse[1] == -kInf);
        EXPECT_TRUE(std::isnan(f.lse[2]));
      }
      const Bwd g = run_backward(c, d, f, 1);
      for (int64_t e = 0; e < c.D; ++e) {
        const double g1 = g.dq[(c.Lq + 1) * c.D + e];  // head 1, masked row
        EXPECT_TRUE(std::isnan(empty) ? std::isnan(g1) : g1 == 0.0) << g1;
        EXPECT_TRUE(std::isnan(g.dq[2 * c.D + e]));
        EXPECT_TRUE(std::isfinite(g.dq[(c.Lq) * c.D + e]));
      }
    }
  }
}

// No key at all (Lk = 0): the empty row policy; with a sink the empty sum 0
// and the sink's lse (as the f32 path).
TEST_P(AttentionF64, NoKeys) {
  for (bool sink : {false, true}) {
    for (smax::EmptyRow policy : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
      Case c;
      c.Lk = 0;
      c.sinks = sink;
      c.lse = true;
      c.o.empty_row = policy;
      const Data d = make_data(c, 4);
      const Fwd f = run_forward(c, d, 2);
      const bool nan = policy == smax::EmptyRow::kNan && !sink;
      for (double o : f.out) EXPECT_TRUE(nan ? std::isnan(o) : o == 0.0) << o;
      for (size_t r = 0; r < f.lse.size(); ++r) {
        const double want = sink ? d.sinks[(r / c.Lq) % c.H]
                            : policy == smax::EmptyRow::kNan ? kNan : -kInf;
        EXPECT_TRUE(std::isnan(want) ? std::isnan(f.lse[r]) : f.lse[r] == want) << f.lse[r];
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(AttentionF64);

}  // namespace
}  // namespace smax_test

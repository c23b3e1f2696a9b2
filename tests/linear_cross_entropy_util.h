// tests/linear_cross_entropy_util.h: helpers, bounds and the per-target fixture shared by
// tests/test_linear_cross_entropy*.cc, which test
// linear_cross_entropy and its backward
// against the float64 oracle (src/reference/linear_cross_entropy.h), on
// every SIMD target.
//
// Bounds (include/smax/linear_cross_entropy.h). The oracle computes the
// logits z = H W^T + b in float64 from the same f32 inputs; the library's are
// f32 SGEMM results, off by at most
//   E_r = s (D + 3) 2^-24 max_j (sum_k |h_rk| |w_jk| + |b_j|)
// (gamma_D for a dot product of D terms in any order, plus the bias add and
// the scale). Since d loss / d t is a weighted probability vector, a row's
// loss moves by at most 2 E_r (w_y (1 + 2 zs |L|) + a W / C); on top of it
// come cross_entropy's own kernel bounds (4e-6 M_r). Gradients: the dz error
// e_rj (kernel 4e-6 relative + the p_j perturbation 2 E_r + the softcap
// derivative's), then the f32 GEMMs over V (dhidden) or N (dweight) terms.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "reference/linear_cross_entropy.h"
#include "smax/linear_cross_entropy.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::CrossEntropyOptions;
using smax::EmptyMean;
using smax::LinearCrossEntropyOptions;
using smax::Reduction;
using smax::reference::LceProblem;
using smax::reference::LceResult;
using I64 = Array<int64_t>;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

enum class Layout { kContig, kPadded, kTransposed, kReversed };

inline std::vector<int64_t> strides_for(const std::vector<int64_t>& shape, Layout l) {
  switch (l) {
    case Layout::kContig: return row_major_strides(shape);
    case Layout::kPadded: return {shape[1] + 3, 1};
    case Layout::kTransposed: return permuted_strides(shape, {1, 0});
    case Layout::kReversed: return {std::max<int64_t>(shape[1], 1), -1};
  }
  return {};
}

struct Gen {
  float h_scale = 1.0f, w_scale = 1.0f, b_scale = 1.0f;
  float b_shift = 0.0f;      // added to every bias
  double ignore = 0.0;       // fraction of ignored targets
  bool bias = true;
  bool class_weights = false;
  int masked_classes = 0;    // classes with a -inf bias
  Layout hl = Layout::kContig, wl = Layout::kContig;
};

struct Inputs {
  int64_t N = 0, D = 0, V = 0;
  Tensor hidden, weight, bias, cw;
  I64 target;
  bool has_bias = false, has_cw = false;
  std::optional<TensorView> bias_view() const {
    if (!has_bias) return std::nullopt;
    return bias.view();
  }
};

inline Inputs make_inputs(int64_t N, int64_t D, int64_t V, const Gen& g, Rng& rng) {
  Inputs in;
  in.N = N;
  in.D = D;
  in.V = V;
  in.hidden = Tensor({N, D}, strides_for({N, D}, g.hl), 1);
  in.weight = Tensor({V, D}, strides_for({V, D}, g.wl), 3);
  in.hidden.fill([&](int64_t) { return g.h_scale * rng.normal(); });
  in.weight.fill([&](int64_t) { return g.w_scale * rng.normal(); });
  in.has_bias = g.bias || g.masked_classes > 0;
  in.bias = Tensor({V});
  in.bias.fill([&](int64_t) { return g.bias ? g.b_shift + g.b_scale * rng.normal() : 0.0f; });
  for (int k = 0; k < g.masked_classes && V > 0; ++k) in.bias.at(rng.index(V)) = -kInfF;
  in.has_cw = g.class_weights;
  in.cw = Tensor({V});
  in.cw.fill([&](int64_t) { return rng.uniform(0.25f, 2.0f); });
  in.target = I64({N});
  in.target.fill([&](int64_t) -> int64_t {
    if (V == 0 || rng.bernoulli(g.ignore)) return -100;
    return rng.index(V);
  });
  return in;
}

struct Outs {
  Tensor dst, lse, entropy, tlp, acc, z;
};

// SMAX_LCE_REPORT=1 prints the largest error / bound ratio seen so far.
inline void report(const char* what, double ratio) {
  static double worst[2] = {0.0, 0.0};
  double& w = worst[what[0] == 'f' ? 0 : 1];
  if (ratio > w) {
    w = ratio;
    if (std::getenv("SMAX_LCE_REPORT") != nullptr) {
      std::printf("[ lce ] worst %s error / bound so far: %.3g\n", what, w);
    }
  }
}

// ---- bounds ------------------------------------------------------------------
struct RowInfo {
  double E = 0.0;     // GEMM error of the row's logits
  double L = 0.0, ty = 0.0, max_abs_t = 0.0, wy = 0.0, gap = 0.0;
};

inline std::vector<RowInfo> row_info(const LceProblem& p, const LceResult& ref) {
  std::vector<RowInfo> info(static_cast<size_t>(p.N));
  for (int64_t r = 0; r < p.N; ++r) {
    RowInfo& ri = info[static_cast<size_t>(r)];
    double emax = 0.0, best = -kInfD, second = -kInfD;
    for (int64_t j = 0; j < p.V; ++j) {
      double s = p.b.empty() ? 0.0 : std::fabs(p.b[static_cast<size_t>(j)]);
      if (std::isinf(s)) s = 0.0;
      for (int64_t k = 0; k < p.D; ++k) {
        s += std::fabs(p.h[static_cast<size_t>(r * p.D + k)] * p.w[static_cast<size_t>(j * p.D + k)]);
      }
      emax = std::max(emax, s);
      const double t = ref.logits[static_cast<size_t>(r * p.V + j)];
      if (std::isfinite(t)) ri.max_abs_t = std::max(ri.max_abs_t, std::fabs(t));
      if (t > best) {
        second = best;
        best = t;
      } else if (t > second) {
        second = t;
      }
    }
    ri.gap = best - second;
    ri.E = p.s * static_cast<double>(p.D + 3) * kU * emax;
    ri.L = ref.lse[static_cast<size_t>(r)];
    const int64_t y = p.target[static_cast<size_t>(r)];
    const bool active = y != p.ignore_index;
    ri.wy = active ? (p.class_w.empty() ? 1.0 : p.class_w[static_cast<size_t>(y)]) : 0.0;
    ri.ty = active ? ref.logits[static_cast<size_t>(r * p.V + y)] : 0.0;
  }
  return info;
}

inline double sum_class_w(const LceProblem& p) {
  if (p.class_w.empty()) return static_cast<double>(p.V);
  double s = 0.0;
  for (double w : p.class_w) s += w;
  return s;
}

// Per-row loss bound (the header's formula).
inline double loss_bound(const LceProblem& p, const RowInfo& ri) {
  const double C = std::max<double>(static_cast<double>(p.V), 1.0);
  const double WC = sum_class_w(p) / C;
  const double L = std::isfinite(ri.L) ? std::fabs(ri.L) : 0.0;
  const double ty = std::isfinite(ri.ty) ? std::fabs(ri.ty) : 0.0;
  const double M = ri.wy * (1.0 + L + ty) + p.a * WC * (1.0 + L + ri.max_abs_t) +
                   2.0 * p.zs * ri.wy * L * L;
  double b = 4e-6 * M + 2.0 * ri.E * (ri.wy * (1.0 + 2.0 * p.zs * L) + p.a * WC);
  if (p.cap > 0.0) b += 1e-6 * p.cap * (ri.wy + p.a * WC);
  return b;
}

inline ::testing::AssertionResult check_forward(const Inputs& in, const LceProblem& p,
                                         const LceResult& ref, const Outs& o,
                                         const CrossEntropyOptions& ce, const std::string& what) {
  const std::vector<RowInfo> info = row_info(p, ref);
  CheckResult r;
  double den = 0.0, count = 0.0, sum_bound = 0.0, sum_zbound = 0.0;
  std::vector<double> bounds(static_cast<size_t>(p.N)), zb(static_cast<size_t>(p.N));
  for (int64_t i = 0; i < p.N; ++i) {
    const RowInfo& ri = info[static_cast<size_t>(i)];
    const bool active = p.target[static_cast<size_t>(i)] != p.ignore_index;
    den += ri.wy;
    count += active ? 1.0 : 0.0;
    bounds[static_cast<size_t>(i)] = active ? loss_bound(p, ri) : 0.0;
    const double L = std::isfinite(ri.L) ? std::fabs(ri.L) : 0.0;
    zb[static_cast<size_t>(i)] = active ? p.zs * ri.wy * (8e-6 * L * L + 4.0 * L * ri.E + ri.E * ri.E) : 0.0;
    sum_bound += bounds[static_cast<size_t>(i)];
    sum_zbound += zb[static_cast<size_t>(i)];
  }
  auto reduced_check = [&](const Tensor& t, const std::vector<double>& rows, double refv,
                           const std::vector<double>& rb, double sb, double d, int64_t base) {
    if (p.reduction == Reduction::kNone) {
      for (int64_t i = 0; i < p.N; ++i) {
        check_element(r, base + i, t.at(i), rows[static_cast<size_t>(i)], rb[static_cast<size_t>(i)],
                      false);
      }
    } else {
      double b = p.reduction == Reduction::kMean ? (d > 0 ? sb / d : 0.0) : sb;
      b += 1.2e-7 * std::fabs(refv) + 1e-30;
      check_element(r, base, t.at(0), refv, b, false);
    }
  };
  reduced_check(o.dst, ref.row_loss, ref.loss, bounds, sum_bound, den, 0);
  if (ce.z_loss) reduced_check(o.z, ref.z_rows, ref.z_loss, zb, sum_zbound, den, 1000000);
  for (int64_t i = 0; i < p.N; ++i) {
    const RowInfo& ri = info[static_cast<size_t>(i)];
    const double L = std::isfinite(ri.L) ? std::fabs(ri.L) : 0.0;
    const double capb = p.cap > 0.0 ? 1e-6 * p.cap : 0.0;
    if (ce.lse) {
      check_element(r, 2000000 + i, o.lse.at(i), ref.lse[static_cast<size_t>(i)],
                    2e-6 * (1.0 + L) + ri.E + capb, false);
    }
    if (ce.entropy) {
      check_element(r, 3000000 + i, o.entropy.at(i), ref.entropy[static_cast<size_t>(i)],
                    4e-6 * (1.0 + L + ri.max_abs_t) + 3.0 * ri.E * (1.0 + ri.max_abs_t) + capb,
                    false);
    }
    if (ce.target_logprob) {
      const double ty = std::isfinite(ri.ty) ? std::fabs(ri.ty) : 0.0;
      check_element(r, 4000000 + i, o.tlp.at(i), ref.target_logprob[static_cast<size_t>(i)],
                    2e-6 * (1.0 + L + ty) + 2.0 * ri.E + capb, false);
    }
  }
  if (ce.accuracy) {
    // Exact unless the top two logits are within the GEMM error.
    bool near_tie = false;
    for (const RowInfo& ri : info) near_tie = near_tie || !(ri.gap > 2.0 * ri.E + 1e-5 * (1.0 + ri.max_abs_t));
    if (!near_tie) {
      if (p.reduction == Reduction::kNone) {
        for (int64_t i = 0; i < p.N; ++i) {
          check_element(r, 5000000 + i, o.acc.at(i), ref.accuracy[static_cast<size_t>(i)], 0.0, false);
        }
      } else {
        check_element(r, 5000000, o.acc.at(0), ref.accuracy_reduced,
                      1.2e-7 * std::fabs(ref.accuracy_reduced), false);
      }
    }
  }
  if (!o.dst.guards_intact()) r.fail(-1, 0, 0, 0, " (dst guard overwritten)");
  (void)in;
  report("forward", r.worst_ratio);
  return to_assertion(r, what);
}

struct Grads {
  Tensor dh, dw, db;
};

inline ::testing::AssertionResult check_backward(const LceProblem& p, const LceResult& ref,
                                          const Grads& g, bool with_db, const std::string& what) {
  const std::vector<RowInfo> info = row_info(p, ref);
  const double C = std::max<double>(static_cast<double>(p.V), 1.0);
  auto cw = [&](int64_t j) { return p.class_w.empty() ? 1.0 : p.class_w[static_cast<size_t>(j)]; };
  double WU = 0.0;
  // e_rj: the dz error bound; |dz|.
  std::vector<double> e(static_cast<size_t>(p.N * p.V), 0.0), adz(e.size(), 0.0);
  for (int64_t r = 0; r < p.N; ++r) {
    const RowInfo& ri = info[static_cast<size_t>(r)];
    const double G = ref.G[static_cast<size_t>(r)];
    if (G == 0.0 || !std::isfinite(ri.L)) continue;
    const int64_t y = p.target[static_cast<size_t>(r)];
    WU = 0.0;
    for (int64_t j = 0; j < p.V; ++j) {
      if (ref.logits[static_cast<size_t>(r * p.V + j)] > -kInfD) WU += cw(j);
    }
    const double A = std::fabs((1.0 - p.a) * ri.wy + p.a / C * WU + 2.0 * p.zs * ri.wy * ri.L);
    for (int64_t j = 0; j < p.V; ++j) {
      const size_t k = static_cast<size_t>(r * p.V + j);
      const double t = ref.logits[k];
      if (t == -kInfD) continue;
      const double pj = std::exp(t - ri.L);
      const double B = (j == y ? (1.0 - p.a) * ri.wy : 0.0) + p.a / C * cw(j);
      double capd = 1.0;
      if (p.cap > 0.0) {
        const double th = t / p.cap;
        capd = 1.0 - th * th;
      }
      double b = 4e-6 * p.s * capd * std::fabs(G) * (pj * A + B) +
                 2.5 * p.s * std::fabs(G) * pj * (A + 2.0 * p.zs * ri.wy) * ri.E + 1e-30;
      if (p.cap > 0.0) b += p.s * std::fabs(G) * (pj * A + B) * ri.E / p.cap;
      e[k] = b;
      adz[k] = std::fabs(ref.dz[k]);
    }
  }
  // An f32 GEMM entry over `terms` products dz_q x_m, m = 0 .. terms - 1,
  // q = q0 + m q_step, x_m = x[x0 + m x_step]: sum of (e_q + (terms + 2) u
  // |dz_q|) |x_m|.
  auto gemm_bound = [&](int64_t terms, int64_t q0, int64_t q_step, const std::vector<double>& x,
                        int64_t x0, int64_t x_step) {
    double b = 0.0;
    for (int64_t m = 0; m < terms; ++m) {
      const size_t q = static_cast<size_t>(q0 + m * q_step);
      b += (e[q] + static_cast<double>(terms + 2) * kU * adz[q]) *
           std::fabs(x[static_cast<size_t>(x0 + m * x_step)]);
    }
    return b;
  };
  CheckResult res;
  for (int64_t r = 0; r < p.N; ++r) {
    for (int64_t k = 0; k < p.D; ++k) {
      const double b = gemm_bound(p.V, r * p.V, 1, p.w, k, p.D);  // dz_rj w_jk over j
      const size_t i = static_cast<size_t>(r * p.D + k);
      check_element(res, static_cast<int64_t>(i), g.dh.at(static_cast<int64_t>(i)), ref.dhidden[i],
                    b + 1e-30, false);
    }
  }
  for (int64_t j = 0; j < p.V; ++j) {
    for (int64_t k = 0; k < p.D; ++k) {
      const double b = gemm_bound(p.N, j, p.V, p.h, k, p.D);  // dz_rj h_rk over r
      const size_t i = static_cast<size_t>(j * p.D + k);
      check_element(res, 10000000 + static_cast<int64_t>(i), g.dw.at(static_cast<int64_t>(i)),
                    ref.dweight[i], b + 1e-30, /*require_exact_zero=*/b == 0.0);
    }
    if (with_db) {
      double b = 0.0;
      for (int64_t r = 0; r < p.N; ++r) {
        const size_t q = static_cast<size_t>(r * p.V + j);
        b += e[q] + 2.0 * kU * adz[q];
      }
      check_element(res, 20000000 + j, g.db.at(j), ref.dbias[static_cast<size_t>(j)], b + 1e-30,
                    /*require_exact_zero=*/b == 0.0);
    }
  }
  report("backward", res.worst_ratio);
  if (!g.dh.guards_intact() || !g.dw.guards_intact() || (with_db && !g.db.guards_intact())) {
    res.fail(-1, 0, 0, 0, " (gradient guard overwritten)");
  }
  return to_assertion(res, what);
}

// ---- one full case ---------------------------------------------------------------
struct Case {
  int64_t N = 5, D = 7, V = 11;
  Gen gen;
  CrossEntropyOptions ce;
  LinearCrossEntropyOptions lce;
  SoftmaxOptions opt;
  bool outputs = false;   // lse, entropy, target_logprob, accuracy, z_loss
  bool backward = true;
  bool lse_to_backward = false;
  bool dbias = true;
  bool fused = false;     // linear_cross_entropy_fused (loss + gradients, one call)
  Layout dhl = Layout::kContig, dwl = Layout::kContig;
};

// A case of N tokens, hidden size D and vocabulary V, reduced by `red`.
inline Case sized_case(int64_t N, int64_t D, int64_t V, Reduction red) {
  Case c;
  c.N = N;
  c.D = D;
  c.V = V;
  c.ce.loss.reduction = red;
  return c;
}

inline std::string describe(const Case& c) {
  std::ostringstream os;
  os << "N=" << c.N << " D=" << c.D << " V=" << c.V << " red=" << smax::reduction_name(c.ce.loss.reduction)
     << " a=" << c.ce.label_smoothing << " zs=" << c.ce.lse_square_scale << " cap=" << c.ce.softcap
     << " s=" << c.opt.scale << "/" << c.opt.temperature << " chunks=" << c.lce.token_chunk << "x"
     << c.lce.vocab_chunk << " ignore=" << c.gen.ignore << " bias=" << c.gen.bias
     << " cw=" << c.gen.class_weights << " hl=" << static_cast<int>(c.gen.hl)
     << " wl=" << static_cast<int>(c.gen.wl) << " hscale=" << c.gen.h_scale
     << (c.fused ? " fused" : "");
  return os.str();
}

inline Tensor reduced_tensor(Reduction red, int64_t N) {
  return red == Reduction::kNone ? Tensor({N}) : Tensor(std::vector<int64_t>{});
}

inline ::testing::AssertionResult run_case(Case c, Rng& rng) {
  const std::string what = describe(c);
  Inputs in = make_inputs(c.N, c.D, c.V, c.gen, rng);
  if (in.has_cw) c.ce.loss.weight = in.cw.view();
  Outs o;
  o.dst = reduced_tensor(c.ce.loss.reduction, c.N);
  CrossEntropyOptions ce = c.ce;
  if (c.outputs) {
    o.lse = Tensor({c.N});
    o.entropy = Tensor({c.N});
    o.tlp = Tensor({c.N});
    o.acc = reduced_tensor(c.ce.loss.reduction, c.N);
    o.z = reduced_tensor(c.ce.loss.reduction, c.N);
    ce.lse = o.lse.view();
    ce.entropy = o.entropy.view();
    ce.target_logprob = o.tlp.view();
    ce.accuracy = o.acc.view();
    ce.z_loss = o.z.view();
  }
  Tensor dloss = reduced_tensor(c.ce.loss.reduction, c.N);
  fill_normal(dloss, rng);
  Grads gr;
  gr.dh = Tensor({c.N, c.D}, strides_for({c.N, c.D}, c.dhl), 2);
  gr.dw = Tensor({c.V, c.D}, strides_for({c.V, c.D}, c.dwl), 1);
  gr.db = Tensor({c.V}, {c.V > 1 ? 2 : 1});
  std::optional<TensorView> db;
  if (c.dbias) db = gr.db.view();
  if (c.fused) {
    CrossEntropyOptions f = c.ce;
    if (c.outputs) f.lse = o.lse.view();
    smax::linear_cross_entropy_fused(in.hidden.view(), in.weight.view(), in.target.view(),
                                     in.bias_view(), o.dst.view(), dloss.view(), gr.dh.view(),
                                     gr.dw.view(), db, f, c.lce, c.opt);
    ce = f;
  } else {
    smax::linear_cross_entropy(in.hidden.view(), in.weight.view(), in.target.view(),
                               in.bias_view(), o.dst.view(), ce, c.lce, c.opt);
  }
  const LceProblem p = smax::reference::lce_problem(in.hidden.view(), in.weight.view(),
                                                    in.target.view(), in.bias_view(), c.ce, c.opt);
  const std::vector<double> g = to_dense(dloss.view());
  const LceResult ref = smax::reference::lce_solve(p, c.backward ? &g : nullptr);
  auto fwd = check_forward(in, p, ref, o, ce, what);
  if (!fwd || !c.backward || c.fused) {
    if (!fwd || !c.backward) return fwd;
    return check_backward(p, ref, gr, c.dbias, what + " (fused backward)");
  }

  CrossEntropyOptions bce = c.ce;
  Tensor lse_in({c.N});
  if (c.lse_to_backward) {
    CrossEntropyOptions f = c.ce;
    Tensor tmp = reduced_tensor(c.ce.loss.reduction, c.N);
    f.lse = lse_in.view();
    smax::linear_cross_entropy(in.hidden.view(), in.weight.view(), in.target.view(),
                               in.bias_view(), tmp.view(), f, c.lce, c.opt);
    bce.lse = lse_in.view();
  }
  smax::linear_cross_entropy_backward(in.hidden.view(), in.weight.view(), in.target.view(),
                                      in.bias_view(), dloss.view(), gr.dh.view(), gr.dw.view(), db,
                                      bce, c.lce, c.opt);
  return check_backward(p, ref, gr, c.dbias, what + " (backward)");
}

class Lce : public TargetTest {
 protected:
  /// Runs make(red, variant, i) for every reduction and variant in
  /// [0, variants), i counting the cases, with one Rng(seed); stops at the
  /// first failure.
  template <class Make>
  void run_variants(const char* seed, int variants, const Make& make) {
    Rng rng(seed);
    int i = 0;
    for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
      for (int variant = 0; variant < variants; ++variant) {
        ASSERT_TRUE(run_case(make(red, variant, i++), rng)) << GetParam() << " variant " << variant;
      }
    }
  }
};

}  // namespace
}  // namespace smax_test

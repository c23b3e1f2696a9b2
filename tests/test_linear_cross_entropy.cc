// tests/test_linear_cross_entropy.cc: linear_cross_entropy and its backward
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

std::vector<int64_t> strides_for(const std::vector<int64_t>& shape, Layout l) {
  switch (l) {
    case Layout::kContig: return contiguous_strides(shape);
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

Inputs make_inputs(int64_t N, int64_t D, int64_t V, const Gen& g, Rng& rng) {
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
void report(const char* what, double ratio) {
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

std::vector<RowInfo> row_info(const LceProblem& p, const LceResult& ref) {
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

double sum_class_w(const LceProblem& p) {
  if (p.class_w.empty()) return static_cast<double>(p.V);
  double s = 0.0;
  for (double w : p.class_w) s += w;
  return s;
}

// Per-row loss bound (the header's formula).
double loss_bound(const LceProblem& p, const RowInfo& ri) {
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

::testing::AssertionResult check_forward(const Inputs& in, const LceProblem& p,
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

::testing::AssertionResult check_backward(const LceProblem& p, const LceResult& ref,
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
  CheckResult res;
  for (int64_t r = 0; r < p.N; ++r) {
    for (int64_t k = 0; k < p.D; ++k) {
      double b = 0.0;
      for (int64_t j = 0; j < p.V; ++j) {
        const size_t q = static_cast<size_t>(r * p.V + j);
        b += (e[q] + static_cast<double>(p.V + 2) * kU * adz[q]) *
             std::fabs(p.w[static_cast<size_t>(j * p.D + k)]);
      }
      const size_t i = static_cast<size_t>(r * p.D + k);
      check_element(res, static_cast<int64_t>(i), g.dh.at(static_cast<int64_t>(i)), ref.dhidden[i],
                    b + 1e-30, false);
    }
  }
  for (int64_t j = 0; j < p.V; ++j) {
    for (int64_t k = 0; k < p.D; ++k) {
      double b = 0.0;
      for (int64_t r = 0; r < p.N; ++r) {
        const size_t q = static_cast<size_t>(r * p.V + j);
        b += (e[q] + static_cast<double>(p.N + 2) * kU * adz[q]) *
             std::fabs(p.h[static_cast<size_t>(r * p.D + k)]);
      }
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

std::string describe(const Case& c) {
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

Tensor reduced_tensor(Reduction red, int64_t N) {
  return red == Reduction::kNone ? Tensor({N}) : Tensor(std::vector<int64_t>{});
}

::testing::AssertionResult run_case(Case c, Rng& rng) {
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

class Lce : public TargetTest {};

// ---- hand vectors ------------------------------------------------------------------
TEST_P(Lce, HandVector) {
  // h = [1, 0], W = [[1, 0], [2, 0], [0, 0]] -> z = [1, 2, 0], target 1:
  // loss = log(e + e^2 + 1) - 2 = 0.4076059644, dz = softmax(z) - e_1 =
  // [0.2447284711, -0.3347590421, 0.0900305732], dhidden = dz W =
  // [-0.4247896131, 0], dweight = dz^T h, dbias = dz.
  const float h[] = {1.0f, 0.0f};
  const float w[] = {1.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f};
  const float b[] = {0.0f, 0.0f, 0.0f};
  const int64_t t[] = {1};
  float loss = 0.0f, one = 1.0f;
  float dh[2], dw[6], db[3];
  CrossEntropyOptions ce;
  smax::linear_cross_entropy(smax::make_view(h, {1, 2}), smax::make_view(w, {3, 2}),
                             smax::make_index_view(t, {1}), smax::make_view(b, {3}),
                             smax::make_view(&loss, {1}), ce);
  EXPECT_NEAR(loss, 0.4076059644, 1e-6);
  smax::linear_cross_entropy_backward(smax::make_view(h, {1, 2}), smax::make_view(w, {3, 2}),
                                      smax::make_index_view(t, {1}), smax::make_view(b, {3}),
                                      smax::make_view(&one, {1}), smax::make_view(dh, {1, 2}),
                                      smax::make_view(dw, {3, 2}), smax::make_view(db, {3}), ce);
  const double dz[] = {0.2447284711, -0.3347590421, 0.0900305732};
  EXPECT_NEAR(dh[0], -0.4247896131, 1e-6);
  EXPECT_EQ(dh[1], 0.0f);
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(dw[2 * j], dz[j], 1e-6);
    EXPECT_EQ(dw[2 * j + 1], 0.0f);
    EXPECT_NEAR(db[j], dz[j], 1e-6);
  }
  // The cross-entropy hand vector (docs/vectors.md, "Losses"): LSE(x) - x_t
  // with x = z (no bias).
  smax::linear_cross_entropy(smax::make_view(h, {1, 2}), smax::make_view(w, {3, 2}),
                             smax::make_index_view(t, {1}), std::nullopt,
                             smax::make_view(&loss, {1}), ce);
  EXPECT_NEAR(loss, 0.4076059644, 1e-6);
}

// ---- sizes -------------------------------------------------------------------------
TEST_P(Lce, OddSizes) {
  Rng rng("odd");
  const int64_t dims[][3] = {{1, 1, 1},   {2, 3, 2},   {3, 5, 7},   {7, 13, 31}, {8, 8, 8},
                             {9, 2, 33},  {17, 33, 101}, {5, 31, 1000}, {3, 9, 1001},
                             {1, 1, 100}, {31, 3, 9},  {33, 1, 3}};
  int i = 0;
  for (const auto& d : dims) {
    for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
      Case c;
      c.N = d[0];
      c.D = d[1];
      c.V = d[2];
      c.ce.loss.reduction = red;
      c.gen.bias = (i % 2) == 0;
      c.gen.ignore = 0.2;
      c.dbias = (i % 3) != 0;
      c.lce.vocab_chunk = (i % 4) == 1 ? 7 : 0;
      c.lce.token_chunk = (i % 4) == 2 ? 3 : 0;
      ++i;
      ASSERT_TRUE(run_case(c, rng)) << GetParam();
    }
  }
}

// D = 0 (no hidden units) with null hidden / weight / dhidden / dweight
// data: logits are the bias alone; no address may be formed from the null
// pointers (fuzz finding: the backward computed dweight + v0 * stride).
TEST_P(Lce, ZeroHiddenUnitsNullData) {
  const int64_t N = 3, V = 7;
  std::vector<float> bias(V), dbias(V, -1.0f), loss(1, -1.0f), dloss(1, 1.0f);
  for (int64_t j = 0; j < V; ++j) bias[static_cast<size_t>(j)] = 0.25f * static_cast<float>(j);
  std::vector<int64_t> target = {1, 6, 3};
  const auto h = smax::make_view(static_cast<float*>(nullptr), {N, 0});
  const auto w = smax::make_view(static_cast<float*>(nullptr), {V, 0});
  const auto t = smax::make_index_view(target.data(), {N});
  const auto b = smax::make_view(bias.data(), {V});
  smax::CrossEntropyOptions ce;  // mean
  smax::linear_cross_entropy(h, w, t, b, smax::make_view(loss.data(), {}), ce);
  // Every row has the logits `bias`: loss = mean over rows of lse(bias) - bias[target].
  double lse = 0.0;
  for (float v : bias) lse += std::exp(static_cast<double>(v));
  lse = std::log(lse);
  double want = 0.0;
  for (int64_t tg : target) want += lse - bias[static_cast<size_t>(tg)];
  EXPECT_NEAR(loss[0], want / N, 1e-6);
  smax::linear_cross_entropy_backward(h, w, t, b, smax::make_view(dloss.data(), {}),
                                      smax::make_view(static_cast<float*>(nullptr), {N, 0}),
                                      smax::make_view(static_cast<float*>(nullptr), {V, 0}),
                                      smax::make_view(dbias.data(), {V}), ce);
  for (int64_t j = 0; j < V; ++j) {
    double g = 0.0;
    for (int64_t tg : target) g += std::exp(bias[static_cast<size_t>(j)] - lse) - (tg == j ? 1.0 : 0.0);
    EXPECT_NEAR(dbias[static_cast<size_t>(j)], g / N, 1e-6) << j;
  }
}

TEST_P(Lce, VocabularySizes) {
  Rng rng("vocab");
  for (int64_t V : {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000, 128256}) {
    Case c;
    c.N = V > 10000 ? 2 : 3;
    c.D = 3;
    c.V = V;
    c.gen.ignore = V == 0 ? 1.0 : 0.0;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // N = 0 and D = 0.
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    Case c;
    c.N = 0;
    c.ce.loss.reduction = red;
    c.ce.loss.empty_mean = EmptyMean::kZero;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
    c.N = 4;
    c.D = 0;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
}

// ---- every option ---------------------------------------------------------------------
TEST_P(Lce, EveryOption) {
  Rng rng("options");
  int i = 0;
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    for (int variant = 0; variant < 9; ++variant) {
      Case c;
      c.N = 37;
      c.D = 19;
      c.V = 203;
      c.ce.loss.reduction = red;
      c.gen.ignore = 0.2;
      c.outputs = true;
      c.lce.token_chunk = (i % 3) == 0 ? 8 : 0;
      c.lce.vocab_chunk = (i % 2) == 0 ? 64 : 0;
      ++i;
      switch (variant) {
        case 0: break;
        case 1: c.ce.label_smoothing = 0.1f; break;
        case 2: c.ce.lse_square_scale = 1e-2f; break;
        case 3: c.ce.softcap = 3.0f; break;
        case 4: c.gen.class_weights = true; break;
        case 5:
          c.opt.scale = 0.7f;
          c.opt.temperature = 1.3f;
          c.gen.bias = false;
          break;
        case 6:  // everything at once, padded vocabulary (-inf bias)
          c.ce.label_smoothing = 0.2f;
          c.ce.lse_square_scale = 1e-4f;
          c.ce.softcap = 5.0f;
          c.gen.class_weights = true;
          c.gen.masked_classes = 5;
          c.opt.temperature = 0.8f;
          break;
        case 7:  // the forward's lse handed to the backward
          c.lse_to_backward = true;
          c.ce.lse_square_scale = 1e-3f;
          break;
        case 8:
          c.ce.label_smoothing = 1.0f;
          c.gen.class_weights = true;
          c.lse_to_backward = true;  // ignored with smoothing: rescans
          break;
      }
      ASSERT_TRUE(run_case(c, rng)) << GetParam() << " variant " << variant;
    }
  }
}

TEST_P(Lce, Fused) {
  Rng rng("fused");
  int i = 0;
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    for (int variant = 0; variant < 4; ++variant) {
      Case c;
      c.fused = true;
      c.N = 23;
      c.D = 11;
      c.V = 97;
      c.ce.loss.reduction = red;
      c.gen.ignore = 0.2;
      c.outputs = (i % 2) == 0;
      c.lce.vocab_chunk = variant == 3 ? 16 : 0;  // tiled vocabulary: two passes
      c.lce.token_chunk = (i % 3) == 0 ? 5 : 0;
      ++i;
      if (variant == 1) {
        c.ce.label_smoothing = 0.1f;
        c.ce.softcap = 4.0f;
        c.gen.class_weights = true;
      }
      if (variant == 2) {
        c.ce.lse_square_scale = 1e-3f;
        c.gen.masked_classes = 3;
        c.opt.scale = 1.5f;
      }
      ASSERT_TRUE(run_case(c, rng)) << GetParam() << " variant " << variant;
    }
  }
}

TEST_P(Lce, AllIgnored) {
  Rng rng("ignored");
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    for (EmptyMean em : {EmptyMean::kNan, EmptyMean::kZero}) {
      Case c;
      c.N = 6;
      c.ce.loss.reduction = red;
      c.ce.loss.empty_mean = em;
      c.gen.ignore = 1.0;
      c.outputs = true;
      ASSERT_TRUE(run_case(c, rng)) << GetParam();
    }
  }
}

// kMean where every counted row has weight 0 (targets 0 and 2 weigh 0, row
// 1 ignored): loss NaN and, as PyTorch's linear + cross_entropy, the
// gradient of the counted rows NaN (w_y / sum w = 0 / 0): dhidden rows 0
// and 2, every dweight and dbias entry (sums over those rows); dhidden row 1
// is 0. kZero: loss and gradients 0. Backward, fused, a tiled vocabulary and
// the oracle agree. (The gradients used to be exactly 0.)
TEST_P(Lce, ZeroWeightSumMean) {
  const float h[] = {1.0f, 0.5f, -1.0f, 2.0f, 0.25f, 0.0f};
  const float w[] = {1.0f, 0.0f, 2.0f, -1.0f, 0.0f, 0.5f};
  const float cw[] = {0.0f, 1.0f, 0.0f};
  const int64_t t[] = {0, -100, 2};
  const float one = 1.0f;
  const TensorView hv = smax::make_view(h, {3, 2}), wv = smax::make_view(w, {3, 2});
  const TensorView tv = smax::make_index_view(t, {3});
  for (int zero = 0; zero < 2; ++zero) {
    for (int mode = 0; mode < 3; ++mode) {  // backward, fused, tiled vocabulary
      CrossEntropyOptions ce;
      ce.loss.weight = smax::make_view(cw, {3});
      if (zero) ce.loss.empty_mean = EmptyMean::kZero;
      LinearCrossEntropyOptions lce;
      if (mode == 2) lce.vocab_chunk = 2;
      float loss = 7.0f, dh[6], dw[6], db[3];
      std::fill(dh, dh + 6, 7.0f);
      std::fill(dw, dw + 6, 7.0f);
      std::fill(db, db + 3, 7.0f);
      const std::string what = std::string(zero ? "kZero" : "kNan") + " mode " + std::to_string(mode);
      if (mode == 1) {
        smax::linear_cross_entropy_fused(hv, wv, tv, std::nullopt, smax::make_view(&loss, {}),
                                         smax::make_view(&one, {}), smax::make_view(dh, {3, 2}),
                                         smax::make_view(dw, {3, 2}), smax::make_view(db, {3}),
                                         ce, lce);
        if (zero) {
          EXPECT_EQ(loss, 0.0f) << what;
        } else {
          EXPECT_TRUE(std::isnan(loss)) << what;
        }
      } else {
        smax::linear_cross_entropy_backward(hv, wv, tv, std::nullopt, smax::make_view(&one, {}),
                                            smax::make_view(dh, {3, 2}),
                                            smax::make_view(dw, {3, 2}),
                                            smax::make_view(db, {3}), ce, lce);
      }
      const TensorView dl = smax::make_view(&one, {});
      const LceResult R = smax::reference::linear_cross_entropy(hv, wv, tv, std::nullopt, ce, {}, &dl);
      auto expect = [&](float got, double want, bool nan, const std::string& name) {
        if (nan && !zero) {
          EXPECT_TRUE(std::isnan(got)) << what << " " << name << " = " << got;
          EXPECT_TRUE(std::isnan(want)) << what << " oracle " << name;
        } else {
          EXPECT_EQ(got, 0.0f) << what << " " << name;
          EXPECT_EQ(want, 0.0) << what << " oracle " << name;
        }
      };
      for (int i = 0; i < 6; ++i) {
        expect(dh[i], R.dhidden[static_cast<size_t>(i)], i / 2 != 1, "dhidden " + std::to_string(i));
        expect(dw[i], R.dweight[static_cast<size_t>(i)], true, "dweight " + std::to_string(i));
      }
      for (int j = 0; j < 3; ++j) expect(db[j], R.dbias[static_cast<size_t>(j)], true, "dbias");
    }
  }
}

TEST_P(Lce, Adversarial) {
  Rng rng("adversarial");
  // Huge logits (|z| ~ 1e4: naive exp overflows), with and without softcap.
  for (float cap : {0.0f, 30.0f}) {
    Case c;
    c.N = 13;
    c.D = 5;
    c.V = 77;
    c.gen.h_scale = 40.0f;
    c.gen.w_scale = 40.0f;
    c.gen.b_scale = 1000.0f;
    c.ce.softcap = cap;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    c.lce.vocab_chunk = 16;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // Every logit below -709 (bias -1000): the scan's first rebase moves its
  // reference from 0 to ~-1000, where e^(0 - ref) overflows float64; the
  // sums, still exactly 0, must stay 0 (they were 0 * inf = NaN).
  Rng r0("very-negative");
  for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
    for (float cap : {0.0f, 2000.0f}) {
      Case c;
      c.N = 6;
      c.V = 45;
      c.gen.b_shift = -1000.0f;
      c.ce.softcap = cap;
      c.ce.label_smoothing = 0.1f;
      c.ce.loss.reduction = Reduction::kNone;
      c.outputs = true;
      c.lce.vocab_chunk = chunk;
      ASSERT_TRUE(run_case(c, r0)) << GetParam() << " chunk " << chunk << " cap " << cap;
    }
  }
  // Constant logits (W = 0), ties everywhere.
  {
    Case c;
    c.gen.w_scale = 0.0f;
    c.gen.bias = false;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // A masked target (-inf bias on every class but a few): loss +inf, finite gradients.
  {
    Case c;
    c.N = 9;
    c.V = 12;
    c.gen.masked_classes = 6;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // Every class masked: empty rows (kZero and kNan).
  for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
    Rng r2("allmasked");
    Inputs in = make_inputs(4, 3, 5, Gen{}, r2);
    in.bias.fill([](int64_t) { return -kInfF; });
    in.has_bias = true;
    SoftmaxOptions opt;
    opt.empty_row = er;
    CrossEntropyOptions ce;
    ce.loss.reduction = Reduction::kNone;
    Tensor dst({4}), dl({4}), dh({4, 3}), dw({5, 3}), db({5});
    fill_normal(dl, r2);
    smax::linear_cross_entropy(in.hidden.view(), in.weight.view(), in.target.view(), in.bias_view(),
                               dst.view(), ce, {}, opt);
    smax::linear_cross_entropy_backward(in.hidden.view(), in.weight.view(), in.target.view(),
                                        in.bias_view(), dl.view(), dh.view(), dw.view(), db.view(),
                                        ce, {}, opt);
    const LceProblem p = smax::reference::lce_problem(in.hidden.view(), in.weight.view(),
                                                      in.target.view(), in.bias_view(), ce, opt);
    const std::vector<double> g = to_dense(dl.view());
    const LceResult ref = smax::reference::lce_solve(p, &g);
    for (int64_t r = 0; r < 4; ++r) {
      const double want = ref.row_loss[static_cast<size_t>(r)];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(dst.at(r)));
      } else {
        EXPECT_EQ(dst.at(r), want);
      }
    }
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(std::isnan(dh.at(i)), std::isnan(ref.dhidden[static_cast<size_t>(i)]));
      if (er == EmptyRow::kZero) {
        EXPECT_EQ(dh.at(i), 0.0f);
      }
    }
  }
  // NaN in one hidden row: that row's loss NaN, the others exact.
  {
    Rng r3("nanrow");
    Inputs in = make_inputs(5, 4, 9, Gen{}, r3);
    in.hidden.at(2 * 4 + 1) = kNanF;
    in.target.at(2) = 3;
    CrossEntropyOptions ce;
    ce.loss.reduction = Reduction::kNone;
    Tensor dst({5});
    smax::linear_cross_entropy(in.hidden.view(), in.weight.view(), in.target.view(), in.bias_view(),
                               dst.view(), ce);
    EXPECT_TRUE(std::isnan(dst.at(2)));
    for (int64_t r : {0, 1, 3, 4}) {
      if (in.target.at(r) != -100) {
        EXPECT_TRUE(std::isfinite(dst.at(r)));
      }
    }
  }
}

// ---- layouts ------------------------------------------------------------------------------
TEST_P(Lce, StridedInputsAndOutputs) {
  Rng rng("strided");
  const Layout ls[] = {Layout::kContig, Layout::kPadded, Layout::kTransposed, Layout::kReversed};
  int i = 0;
  for (Layout hl : ls) {
    for (Layout wl : ls) {
      Case c;
      c.N = 11;
      c.D = 6;
      c.V = 29;
      c.gen.hl = hl;
      c.gen.wl = wl;
      c.dhl = ls[i % 4];
      c.dwl = ls[(i + 1) % 4];
      c.ce.loss.reduction = Reduction::kNone;
      c.lce.token_chunk = (i % 2) ? 4 : 0;
      c.lce.vocab_chunk = (i % 3) ? 8 : 0;
      ++i;
      ASSERT_TRUE(run_case(c, rng)) << GetParam();
    }
  }
}

// ---- determinism ------------------------------------------------------------------------------
TEST_P(Lce, DeterministicAcrossThreads) {
  Rng rng("threads");
  Gen g;
  g.ignore = 0.2;
  Inputs in = make_inputs(300, 64, 5000, g, rng);
  CrossEntropyOptions ce;
  ce.label_smoothing = 0.1f;
  ce.loss.reduction = Reduction::kNone;
  LinearCrossEntropyOptions lce;
  lce.vocab_chunk = 1024;
  Tensor dl({300});
  fill_normal(dl, rng);
  // smax's threads: bitwise identical for a fixed OpenBLAS thread count.
  // OpenBLAS's own thread count changes the last bits of its SGEMM
  // (measured with 0.3.21: see docs/linear-cross-entropy.md), so it is held
  // fixed within each group.
  const int blas0 = openblas_get_num_threads();
  for (int blas : {1, 2}) {
    openblas_set_num_threads(blas);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      SoftmaxOptions opt;
      opt.threads = threads;
      Tensor dst({300}), dh({300, 64}), dw({5000, 64}), db({5000});
      smax::linear_cross_entropy(in.hidden.view(), in.weight.view(), in.target.view(),
                                 in.bias_view(), dst.view(), ce, lce, opt);
      smax::linear_cross_entropy_backward(in.hidden.view(), in.weight.view(), in.target.view(),
                                          in.bias_view(), dl.view(), dh.view(), dw.view(),
                                          db.view(), ce, lce, opt);
      std::vector<float> all = dst.dense();
      for (const Tensor* t : {&dh, &dw, &db}) {
        const std::vector<float> v = t->dense();
        all.insert(all.end(), v.begin(), v.end());
      }
      if (first.empty()) {
        first = all;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), all.data(), all.size() * sizeof(float)))
            << "threads " << threads << ", OpenBLAS threads " << blas;
      }
    }
  }
  openblas_set_num_threads(blas0);
}

// ---- the oracle itself: float64 finite differences -------------------------------------------
TEST(LceReference, FiniteDifferences) {
  Rng rng("fd");
  for (Reduction red : {Reduction::kNone, Reduction::kMean}) {
    LceProblem p;
    p.N = 4;
    p.D = 3;
    p.V = 6;
    for (int64_t i = 0; i < p.N * p.D; ++i) p.h.push_back(rng.normal());
    for (int64_t i = 0; i < p.V * p.D; ++i) p.w.push_back(rng.normal());
    for (int64_t i = 0; i < p.V; ++i) p.b.push_back(rng.normal());
    for (int64_t i = 0; i < p.V; ++i) p.class_w.push_back(rng.uniform(0.5f, 2.0f));
    p.target = {2, -100, 0, 5};
    p.s = 0.8;
    p.cap = 4.0;
    p.a = 0.15;
    p.zs = 0.01;
    p.reduction = red;
    std::vector<double> dl;
    for (int64_t i = 0; i < (red == Reduction::kNone ? p.N : 1); ++i) dl.push_back(rng.normal());
    const LceResult ref = smax::reference::lce_solve(p, &dl);
    auto objective = [&](const LceProblem& q) {
      const LceResult r = smax::reference::lce_solve(q);
      if (red != Reduction::kNone) return dl[0] * r.loss;
      double s = 0.0;
      for (int64_t i = 0; i < q.N; ++i) s += dl[static_cast<size_t>(i)] * r.row_loss[static_cast<size_t>(i)];
      return s;
    };
    const double eps = 1e-6;
    auto fd = [&](std::vector<double> LceProblem::*field, size_t i) {
      LceProblem a = p, b = p;
      (a.*field)[i] += eps;
      (b.*field)[i] -= eps;
      return (objective(a) - objective(b)) / (2 * eps);
    };
    for (size_t i = 0; i < p.h.size(); ++i) {
      EXPECT_NEAR(fd(&LceProblem::h, i), ref.dhidden[i], 1e-7 * (1 + std::fabs(ref.dhidden[i]))) << i;
    }
    for (size_t i = 0; i < p.w.size(); ++i) {
      EXPECT_NEAR(fd(&LceProblem::w, i), ref.dweight[i], 1e-7 * (1 + std::fabs(ref.dweight[i]))) << i;
    }
    for (size_t i = 0; i < p.b.size(); ++i) {
      EXPECT_NEAR(fd(&LceProblem::b, i), ref.dbias[i], 1e-7 * (1 + std::fabs(ref.dbias[i]))) << i;
    }
  }
}

// ---- errors ---------------------------------------------------------------------------------------
TEST_P(Lce, Errors) {
  Rng rng("errors");
  Inputs in = make_inputs(4, 3, 5, Gen{}, rng);
  Tensor dst(std::vector<int64_t>{});
  Tensor dl(std::vector<int64_t>{}), dh({4, 3}), dw({5, 3}), db({5});
  auto fwd = [&](const TensorView& h, const TensorView& w, const TensorView& t,
                 std::optional<TensorView> b, const TensorView& d, const CrossEntropyOptions& ce,
                 const LinearCrossEntropyOptions& lce, const SoftmaxOptions& o) {
    return [=] { smax::linear_cross_entropy(h, w, t, b, d, ce, lce, o); };
  };
  const CrossEntropyOptions ce0;
  const LinearCrossEntropyOptions l0;
  const SoftmaxOptions o0;
  auto expect_invalid = [&](const std::function<void()>& f, const std::string& needle) {
    dst.poison();
    EXPECT_TRUE(throws_invalid(f, needle));
    EXPECT_TRUE(std::all_of(dst.storage().begin(), dst.storage().end(),
                            [](float v) { return v == kSentinel; }));
  };
  const TensorView H = in.hidden.view(), W = in.weight.view(), T = in.target.view();
  const auto B = in.bias_view();
  // Shapes.
  Tensor w_bad({5, 4}), h1({12}), b_bad({4});
  expect_invalid(fwd(H, w_bad.view(), T, B, dst.view(), ce0, l0, o0), "weight");
  expect_invalid(fwd(h1.view(), W, T, B, dst.view(), ce0, l0, o0), "hidden");
  expect_invalid(fwd(H, W, T, b_bad.view(), dst.view(), ce0, l0, o0), "bias");
  I64 t_bad({3});
  expect_invalid(fwd(H, W, t_bad.view(), B, dst.view(), ce0, l0, o0), "target");
  Tensor dst_bad({2});
  expect_invalid(fwd(H, W, T, B, dst_bad.view(), ce0, l0, o0), "dst");
  // Targets.
  I64 t_out({4});
  t_out.fill([](int64_t i) -> int64_t { return i == 2 ? 5 : 0; });
  expect_invalid(fwd(H, W, t_out.view(), B, dst.view(), ce0, l0, o0), "target 5");
  t_out.at(2) = -1;
  expect_invalid(fwd(H, W, t_out.view(), B, dst.view(), ce0, l0, o0), "target -1");
  Tensor tprob({4, 5});
  expect_invalid(fwd(H, W, tprob.view(), B, dst.view(), ce0, l0, o0), "target");
  // Options.
  SoftmaxOptions om;
  Tensor mask({5});
  om.additive_mask = mask.view();
  expect_invalid(fwd(H, W, T, B, dst.view(), ce0, l0, om), "additive_mask");
  SoftmaxOptions ob;
  BoolTensor bm({5});
  ob.bool_mask = bm.view();
  expect_invalid(fwd(H, W, T, B, dst.view(), ce0, l0, ob), "bool_mask");
  SoftmaxOptions oa;
  oa.axis = 0;
  expect_invalid(fwd(H, W, T, B, dst.view(), ce0, l0, oa), "axis");
  SoftmaxOptions ot;
  ot.temperature = 0.0f;
  expect_invalid(fwd(H, W, T, B, dst.view(), ce0, l0, ot), "temperature");
  CrossEntropyOptions cs;
  cs.label_smoothing = 1.5f;
  expect_invalid(fwd(H, W, T, B, dst.view(), cs, l0, o0), "label_smoothing");
  CrossEntropyOptions cz;
  cz.lse_square_scale = -1.0f;
  expect_invalid(fwd(H, W, T, B, dst.view(), cz, l0, o0), "lse_square_scale");
  CrossEntropyOptions cg;  // cross_entropy's fused logits gradient: no logits here
  Tensor g45({4, 5});
  cg.grad = g45.view();
  expect_invalid(fwd(H, W, T, B, dst.view(), cg, l0, o0), "ce.grad");
  EXPECT_TRUE(throws_invalid([&] {
    smax::linear_cross_entropy_backward(H, W, T, B, dl.view(), dh.view(), dw.view(), db.view(), cg,
                                        l0, o0);
  }, "ce.grad"));
  CrossEntropyOptions cc;
  cc.softcap = kNanF;
  expect_invalid(fwd(H, W, T, B, dst.view(), cc, l0, o0), "softcap");
  CrossEntropyOptions cw;
  Tensor cw_bad({4});
  cw.loss.weight = cw_bad.view();
  expect_invalid(fwd(H, W, T, B, dst.view(), cw, l0, o0), "weight");
  LinearCrossEntropyOptions lneg;
  lneg.vocab_chunk = -1;
  expect_invalid(fwd(H, W, T, B, dst.view(), ce0, lneg, o0), "vocab_chunk");
  lneg.vocab_chunk = 0;
  lneg.token_chunk = -2;
  expect_invalid(fwd(H, W, T, B, dst.view(), ce0, lneg, o0), "token_chunk");
  // Overlap: dst inside hidden.
  TensorView inside = smax::make_view(static_cast<float*>(H.data), {1});
  expect_invalid(fwd(H, W, T, B, inside, ce0, l0, o0), "dst");
  // Backward: shapes and overlaps, outputs untouched.
  auto bwd = [&](const TensorView& dloss, const TensorView& dhid, const TensorView& dwt,
                 std::optional<TensorView> dbias) {
    return [=] {
      smax::linear_cross_entropy_backward(H, W, T, B, dloss, dhid, dwt, dbias, ce0, l0, o0);
    };
  };
  dh.poison();
  dw.poison();
  db.poison();
  Tensor dh_bad({4, 2}), dw_bad({6, 3}), db_bad({6}), dl_bad({4});
  EXPECT_TRUE(throws_invalid(bwd(dl.view(), dh_bad.view(), dw.view(), db.view()), "dhidden"));
  EXPECT_TRUE(throws_invalid(bwd(dl.view(), dh.view(), dw_bad.view(), db.view()), "dweight"));
  EXPECT_TRUE(throws_invalid(bwd(dl.view(), dh.view(), dw.view(), db_bad.view()), "dbias"));
  EXPECT_TRUE(throws_invalid(bwd(dl_bad.view(), dh.view(), dw.view(), db.view()), "dloss"));
  EXPECT_TRUE(throws_invalid(bwd(dl.view(), dh.view(), dh.view(), db.view()), "dweight"));
  EXPECT_TRUE(throws_invalid(bwd(dl.view(), H, dw.view(), db.view()), "dhidden"));
  TensorView bcast = dh.view();
  bcast.strides[0] = 0;
  EXPECT_TRUE(throws_invalid(bwd(dl.view(), bcast, dw.view(), db.view()), "dhidden"));
  for (const Tensor* t : {&dh, &dw, &db}) {
    EXPECT_TRUE(std::all_of(t->storage().begin(), t->storage().end(),
                            [](float v) { return v == kSentinel; }));
  }
}

SMAX_INSTANTIATE_PER_TARGET(Lce);

}  // namespace
}  // namespace smax_test

// fuzz/harness_ops_expect.cc: the float64 reference and the documented
// bounds of a case
// (part of the ops harness, harness_ops.h; what the parts share:
// harness_ops_internal.h).
#include "harness_ops_internal.h"

namespace smax_fuzz {
namespace ops_internal {

Row row_of(const ref::RefRows& R, int64_t r) { return Row(R.row(r), R.row(r) + R.n); }

// The call as the bounds see it (src/reference/bounds.h).
ref::BoundCall bound_call(Case& c, const smax_cli::ExtCall& e) {
  ref::BoundCall b = smax_cli::bound_call_of(e);
  b.params = c.params;
  if (c.prow.present) b.row_param = view_of(c, c.prow);
  b.force_target = c.op->variant == Variant::kForceTarget;
  return b;
}

// Bounds for the table ops (documented in each op's header; src/reference/bounds.h).
void table_bounds(Case& c, Expect& ex, smax_cli::ExtCall& e) {
  ref::ElementBounds b = smax_cli::op_bounds(*c.op->ext, bound_call(c, e), ex.ref);
  ex.bound = std::move(b.bound);
  ex.exact_zero = std::move(b.exact_zero);
  ex.dot_gap = std::move(b.dot_gap);
  ex.overflow_ok = std::move(b.overflow_ok);
}

std::vector<double> dense_f32(Case& c, const Operand& o) {
  if (c.typed && o.arena == Arena::kF32) return dense_typed(c, o);
  return ref::to_dense(view_of(c, o));
}

std::vector<int64_t> dense_i64(Case& c, const Operand& o) {
  std::vector<int64_t> v;
  for (int64_t off : offsets_of(o)) v.push_back(c.i64[static_cast<size_t>(o.origin + off)]);
  return v;
}

// LCE: bounds of include/smax/linear_cross_entropy.h.
void lce_expect(Case& c, Expect& ex) {
  const smax::CrossEntropyOptions ce = lce_ce(c);
  std::optional<TensorView> bias;
  if (c.bias.present) bias = view_of(c, c.bias);
  const SoftmaxOptions o = full_options(c);
  const ref::LceProblem P = ref::lce_problem(view_of(c, c.hidden), view_of(c, c.lweight),
                                             view_of(c, c.target), bias, ce, o);
  std::vector<double> dl;
  if (c.dloss.present) dl = dense_f32(c, c.dloss);
  const ref::LceResult res = ref::lce_solve(P, c.dloss.present ? &dl : nullptr);
  const int64_t N = P.N, V = P.V, D = P.D;
  const double a = P.a, zs = P.zs, s = P.s;
  double W = 0.0;
  for (int64_t j = 0; j < V; ++j) W += P.class_w.empty() ? 1.0 : std::fabs(P.class_w[static_cast<size_t>(j)]);
  auto cw = [&](int64_t j) { return P.class_w.empty() ? 1.0 : P.class_w[static_cast<size_t>(j)]; };
  std::vector<double> E(static_cast<size_t>(N), 0.0), rowb(static_cast<size_t>(N), 0.0);
  double den = 0.0;
  for (int64_t r = 0; r < N; ++r) {
    double mx = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      double acc = P.b.empty() ? 0.0 : std::fabs(P.b[static_cast<size_t>(j)]);
      if (!std::isfinite(acc)) acc = 0.0;
      for (int64_t k = 0; k < D; ++k) {
        acc += std::fabs(P.h[static_cast<size_t>(r * D + k)]) * std::fabs(P.w[static_cast<size_t>(j * D + k)]);
      }
      mx = std::max(mx, acc);
    }
    E[static_cast<size_t>(r)] = s * static_cast<double>(D + 3) * kU * mx;
    const int64_t y = P.target[static_cast<size_t>(r)];
    if (y == P.ignore_index) continue;
    const double wy = cw(y);
    den += wy;
    const double L = res.lse[static_cast<size_t>(r)];
    const double* t = &res.logits[static_cast<size_t>(r * V)];
    double Lf = std::isfinite(L) ? std::fabs(L) : 0.0;
    double M = (1.0 - a) * std::fabs(wy) * (1.0 + Lf + (std::isfinite(t[y]) ? std::fabs(t[y]) : 0.0));
    double sm = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      if (t[j] == -kInfD || !std::isfinite(t[j])) continue;
      sm += std::fabs(cw(j)) * (1.0 + Lf + std::fabs(t[j]));
    }
    M += a / static_cast<double>(V) * sm + 2.0 * zs * std::fabs(wy) * (1.0 + Lf) * Lf;
    rowb[static_cast<size_t>(r)] = 4e-6 * M + 2.0 * E[static_cast<size_t>(r)] *
                                                  (std::fabs(wy) * (1.0 + 2.0 * zs * Lf) + a * W / static_cast<double>(V)) + 1e-30;
  }
  if (c.out.present) {
    if (c.loss.reduction == smax::Reduction::kNone) {
      ex.ref = res.row_loss;
      ex.bound = rowb;
    } else {
      ex.ref = {res.loss};
      double sb = 0.0;
      for (double b : rowb) sb += b;
      if (c.loss.reduction == smax::Reduction::kMean) sb /= res.row_loss.empty() ? 1.0 : den;
      ex.bound = {sb + 0x1p-23 * (std::isfinite(res.loss) ? std::fabs(res.loss) : 0.0) + 1e-30};
    }
    ex.exact_zero.assign(ex.ref.size(), 0);
  }
  if (!c.dloss.present) return;
  // dz bounds e_rj (cap' <= 1).
  std::vector<double> e(static_cast<size_t>(N * V), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t y = P.target[static_cast<size_t>(r)];
    if (y == P.ignore_index) continue;
    const double G = std::fabs(res.G[static_cast<size_t>(r)]);
    const double L = res.lse[static_cast<size_t>(r)];
    const double* t = &res.logits[static_cast<size_t>(r * V)];
    const double wy = cw(y);
    double WU = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      if (t[j] != -kInfD) WU += cw(j);
    }
    const double A = std::fabs((1.0 - a) * wy + a / static_cast<double>(V) * WU + 2.0 * zs * wy * (std::isfinite(L) ? L : 0.0));
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::isfinite(L) && std::isfinite(t[j]) ? std::exp(t[j] - L) : 0.0;
      const double B = std::fabs((1.0 - a) * wy * (j == y ? 1.0 : 0.0) + a / static_cast<double>(V) * cw(j));
      // 0 * E_r is 0 even where E_r is inf (a row of non-finite hidden
      // values: p = 0 there), not NaN, which would fail every comparison.
      auto times_e = [&](double x) { return x == 0.0 ? 0.0 : x * E[static_cast<size_t>(r)]; };
      double b = 4e-6 * s * G * (p * A + B) + times_e(2.5 * s * G * p * (A + 2.0 * zs * std::fabs(wy)));
      if (P.cap > 0) b += times_e(s * G * (p * A + B)) / P.cap;
      e[static_cast<size_t>(r * V + j)] = b + 1e-30;
    }
  }
  ex.ref2 = res.dhidden;
  ex.bound2.assign(static_cast<size_t>(N * D), 1e-30);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t k = 0; k < D; ++k) {
      double b = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        const double dz = res.dz[static_cast<size_t>(r * V + j)];
        b += (e[static_cast<size_t>(r * V + j)] + (V + 2) * kU * (std::isfinite(dz) ? std::fabs(dz) : 0.0)) *
             std::fabs(P.w[static_cast<size_t>(j * D + k)]);
      }
      ex.bound2[static_cast<size_t>(r * D + k)] += b;
    }
  }
  ex.ref3 = res.dweight;
  ex.bound3.assign(static_cast<size_t>(V * D), 1e-30);
  for (int64_t j = 0; j < V; ++j) {
    for (int64_t k = 0; k < D; ++k) {
      double b = 0.0;
      for (int64_t r = 0; r < N; ++r) {
        const double dz = res.dz[static_cast<size_t>(r * V + j)];
        b += (e[static_cast<size_t>(r * V + j)] + (N + 2) * kU * (std::isfinite(dz) ? std::fabs(dz) : 0.0)) *
             std::fabs(P.h[static_cast<size_t>(r * D + k)]);
      }
      ex.bound3[static_cast<size_t>(j * D + k)] += b;
    }
  }
  ex.ref4 = res.dbias;
  ex.bound4.assign(static_cast<size_t>(V), 1e-30);
  for (int64_t j = 0; j < V; ++j) {
    for (int64_t r = 0; r < N; ++r) {
      const double dz = res.dz[static_cast<size_t>(r * V + j)];
      ex.bound4[static_cast<size_t>(j)] += e[static_cast<size_t>(r * V + j)] + 2 * kU * (std::isfinite(dz) ? std::fabs(dz) : 0.0);
    }
  }
}

// sigmoid_normalizer_backward and gumbel_softmax_backward from a saved y:
// their headers zero the entries masked by the options' masks, and compute
// every other entry from y as given. The table / reference oracles take y's
// -inf entries as masked too (right for any y the forward produces, which is
// never -inf); the harness also feeds raw y, so it uses this oracle, which
// takes the masked set from the masks (reference::ref_masked).
std::vector<double> from_y_backward(const char* fn, const TensorView& y, const TensorView& dy,
                                    const SoftmaxOptions& o, bool gumbel, float tau) {
  const ref::RefRows Y = ref::ref_rows(fn, y, o, false);
  const ref::RefRows G = ref::ref_rows(fn, dy, o, false);
  const std::vector<char> masked = ref::ref_masked(fn, y, o);
  const double cg = static_cast<float>(static_cast<float>(Y.scale) / tau);
  std::vector<double> out(static_cast<size_t>(Y.rows * Y.n), 0.0);
  for (int64_t r = 0; r < Y.rows; ++r) {
    double dot = 0.0;
    for (int64_t i = 0; i < Y.n; ++i) dot += Y.row(r)[i] * G.row(r)[i];
    for (int64_t i = 0; i < Y.n; ++i) {
      const size_t at = static_cast<size_t>(r * Y.n + i);
      if (masked[at]) continue;
      const double v = Y.row(r)[i], g = G.row(r)[i];
      out[at] = gumbel ? cg * v * (g - dot) : Y.scale * g * v * (1.0 - v);
    }
  }
  return Y.scatter(out);
}

// Backward passes that zero every entry masked by the options' masks,
// whatever the row holds (Rowwise::zero_masked_outputs; "masks win over NaN
// in a backward pass", src/reference/rows.h): NaN rows and all-masked
// empty_row = kNan rows included. Returns the view whose masks count
// (ExtOp::zeroes_masked_gradient and bound_rows, declared with the op in
// testing/table_*.cc), or nullptr for other ops.
const TensorView* masks_zero_gradient(Case& c, const smax_cli::ExtCall& e) {
  if (c.op->ext == nullptr || !c.op->ext->zeroes_masked_gradient) return nullptr;
  return c.op->ext->bound_rows == ref::BoundRowsFrom::kSavedY ? &e.y : &e.x;
}

void zero_masked_expect(Case& c, Expect& ex, const TensorView& v, const SoftmaxOptions& o) {
  const ref::RefRows R = ref::ref_rows("fuzz", v, o, false);
  const std::vector<char> masked = ref::ref_masked("fuzz", v, o);
  for (int64_t r = 0; r < R.rows; ++r) {
    for (int64_t k = 0; k < R.n; ++k) {
      if (!masked[static_cast<size_t>(r * R.n + k)]) continue;
      const size_t i = static_cast<size_t>(dense_index(R, r, k));
      if (i >= ex.ref.size()) continue;
      ex.ref[i] = 0.0;
      if (i < ex.exact_zero.size()) ex.exact_zero[i] = 1;
    }
  }
}

// cross_entropy_backward / z_loss_backward: "a masked class, or any class
// whose logit is -inf, ... gets exactly 0 gradient" (smax/cross_entropy.h),
// NaN rows and a NaN / inf dloss included; only an all-masked (or empty) row
// with empty_row = kNan is NaN everywhere. The oracles multiply a NaN / inf
// G by p_j = 0 there (NaN).
// The logits as cross_entropy forms them: with softcap and an additive
// mask, t = softcap tanh(u / softcap) + mask with u = x s under the bool
// mask (-inf where hidden, and the bool mask wins over the mask's value),
// not fl(x s + mask) (which overflows to -inf where the capped sum does
// not: fuzz/regressions/options/cross_entropy_backward_prob_targets_softcap_nan_row_vs_0).
std::vector<double> ce_logit_rows(Case& c, const smax_cli::ExtCall& e, const ref::RefRows& R) {
  const double cap = c.params.count("softcap") ? static_cast<float>(c.params["softcap"]) : 0.0;
  if (!(cap > 0.0) || !e.options.additive_mask) return R.values;
  return ref::cross_entropy_logits("fuzz", e.x, cap, e.options).values;
}

void zero_neg_inf_logits(Case& c, Expect& ex, const smax_cli::ExtCall& e) {
  const ref::RefRows R = ref::ref_rows("fuzz", e.x, e.options, true);
  const std::vector<double> T = ce_logit_rows(c, e, R);
  for (int64_t r = 0; r < R.rows; ++r) {
    bool all = true;
    for (int64_t k = 0; k < R.n; ++k) all &= T[static_cast<size_t>(r * R.n + k)] == -kInfD;
    if (all && e.options.empty_row == smax::EmptyRow::kNan) continue;
    for (int64_t k = 0; k < R.n; ++k) {
      if (T[static_cast<size_t>(r * R.n + k)] != -kInfD) continue;
      const size_t i = static_cast<size_t>(dense_index(R, r, k));
      if (i >= ex.ref.size()) continue;
      ex.ref[i] = 0.0;
      if (i < ex.exact_zero.size()) ex.exact_zero[i] = 1;
    }
  }
}

// The optional outputs of the variants, with the bounds of their headers
// (as tests/test_sparse*.cc, test_rescaled*.cc, test_cross_entropy*.cc check
// them).
void variant_extras(Case& c, Expect& ex, const smax_cli::ExtCall& e) {
  const OpDef& op = *c.op;
  const SoftmaxOptions& o = e.options;
  if (op.variant == Variant::kAlphaTensor && c.dprow.present) {
    // dalpha: 1e-6 (1 + |ref|) + 4e-16 (n + 16) M (include/smax/sparse.h):
    // M = sum_i |g_i| (y_i + p~_i) / (alpha-1)^2 + |g_i| (|S_i| + p~_i |H|) / |alpha-1|,
    // the magnitude of the formula's terms, which cancel (e.g. uniform y).
    const smax::EntmaxBisectOptions b = bisect_options(c);
    std::vector<double> da;
    ref::entmax_backward(e.y, e.dy, 0.0, o, &b, &da);
    Expect::Out out{&c.dprow, da, {}};
    const ref::RefRows Y = ref::ref_rows("fuzz", e.y, o, false);
    const ref::RefRows G = ref::ref_rows("fuzz", e.dy, o, false);
    const std::vector<double> alphas =
        b.alpha_tensor ? ref::ref_row_values("fuzz", *b.alpha_tensor, Y)
                       : std::vector<double>(static_cast<size_t>(Y.rows), static_cast<double>(b.alpha));
    for (size_t r = 0; r < da.size(); ++r) {
      const double v = da[r];
      double bound = 1e-6 * (1.0 + (std::isfinite(v) ? std::fabs(v) : 0.0));
      if (static_cast<int64_t>(r) < Y.rows && r < alphas.size()) {
        const double am1 = std::fabs(alphas[r] - 1.0);
        const Row y = row_of(Y, static_cast<int64_t>(r)), g = row_of(G, static_cast<int64_t>(r));
        double sw = 0.0, H = 0.0;
        for (double yi : y) {
          if (yi > 0.0) {
            sw += std::pow(yi, 2.0 - alphas[r]);
            H += yi * std::log(yi);
          }
        }
        double M = 0.0;
        for (size_t i = 0; i < y.size() && sw > 0.0 && am1 > 0.0; ++i) {
          if (!(y[i] > 0.0)) continue;
          const double pt = std::pow(y[i], 2.0 - alphas[r]) / sw;
          M += std::fabs(g[i]) * ((y[i] + pt) / (am1 * am1) +
                                  (std::fabs(y[i] * std::log(y[i])) + pt * std::fabs(H)) / am1);
        }
        if (std::isfinite(M)) bound += 4e-16 * (static_cast<double>(y.size()) + 16.0) * M;
      }
      out.bound.push_back(bound);
    }
    ex.extras.push_back(out);
  }
  if (op.variant == Variant::kSRows && c.dprow.present) {
    // ds: 2e-6 ln n sum_i |t_i y_i| (|dy_i| + |<dy, y>|) + 1e-30 (include/smax/rescaled.h;
    // ref::ssmax_ds_bound).
    std::vector<double> ds;
    const smax::SsmaxOptions so = ssmax_options(c);
    ref::ssmax_backward(e.x, e.y, e.dy, so, o, &ds);
    const ref::RefRows T = ref::ref_rows("fuzz", e.x, o, true);
    const ref::RefRows Y = ref::ref_rows("fuzz", e.y, o, false);
    const ref::RefRows G = ref::ref_rows("fuzz", e.dy, o, false);
    Expect::Out out{&c.dprow, ds, std::vector<double>(ds.size(), 1e-30)};
    for (int64_t r = 0; r < T.rows && static_cast<size_t>(r) < ds.size(); ++r) {
      const Row t = row_of(T, r), y = row_of(Y, r), g = row_of(G, r);
      // + the dot term (smax/rescaled.h): every t_i y_i (g_i - dot) shares
      // the dot's error, 1.02e-6 sum_j |dy_j y_j| where <dy, y> cancels.
      double dot_term = 0.0;
      out.bound[static_cast<size_t>(r)] = ref::ssmax_ds_bound(t, y, g, ref::ssmax_n(t, so.fixed_n), &dot_term);
      out.bound[static_cast<size_t>(r)] += dot_term;
      if (vjp_row_overflows(y.data(), g.data(), static_cast<int64_t>(y.size()))) {  // f32 overflow
        ex.unchecked_row.resize(static_cast<size_t>(T.rows), 0);
        ex.unchecked_row[static_cast<size_t>(r)] = 1;
      }
    }
    ex.extras.push_back(out);
  }
  if (op.variant == Variant::kProbTargets || op.variant == Variant::kCeOutputs) {
    if (op.ext->needs_dy) return;
    const ref::CrossEntropyRef R = ref::cross_entropy(e.x, e.target, ce_options(c, e.loss, false), o);
    const ref::LossRef& L = R.loss;
    const bool reduced = c.loss.reduction != smax::Reduction::kNone;
    // Reduced like the loss: value, and 4e-6 (the same reduction of the
    // magnitudes) + 2^-23 |value| + 1e-30 (tests/test_cross_entropy*.cc).
    auto reduce = [&](const std::vector<double>& v, const std::vector<double>& mag, double eps,
                      double den, Expect::Out& out) {
      const double want = L.reduce_with(v, den);
      std::vector<double> am(mag.size());
      for (size_t i = 0; i < mag.size(); ++i) am[i] = std::fabs(mag[i]);
      double bound = eps * std::fabs(L.reduce_with(am, den)) + std::ldexp(std::fabs(want), -23) + 1e-30;
      if (std::isnan(bound)) bound = 0.0;
      out.ref = {want};
      out.bound = {bound};
    };
    auto per_row = [&](const std::vector<double>& v, const std::vector<double>& mag, double eps,
                       Expect::Out& out) {
      out.ref = v;
      for (double m : mag) out.bound.push_back(eps * m + 1e-30);
    };
    if (c.ce_z.present) {
      std::vector<double> zmag(R.z.size());
      for (size_t i = 0; i < zmag.size(); ++i) {
        const double Li = std::fabs(R.lse[i]);
        zmag[i] = std::isfinite(R.z[i]) && std::isfinite(Li) && Li > 0 ? std::fabs(R.z[i]) * (1.0 + Li) / Li : 0.0;
      }
      Expect::Out out{&c.ce_z, {}, {}};
      if (reduced) reduce(R.z, zmag, 4e-6, L.denominator, out);
      else per_row(R.z, zmag, 4e-6, out);
      ex.extras.push_back(out);
    }
    if (c.ce_acc.present) {
      Expect::Out out{&c.ce_acc, {}, {}};
      const std::vector<double> zero(R.accuracy.size(), 0.0);
      double count = 0.0;
      for (char a : L.active) count += a;
      if (reduced) reduce(R.accuracy, zero, 0.0, count, out);
      else per_row(R.accuracy, zero, 0.0, out);
      ex.extras.push_back(out);
    }
    if (c.ce_lse.present) {
      Expect::Out out{&c.ce_lse, {}, {}};
      per_row(R.lse, R.lse_mag, 2e-6, out);
      ex.extras.push_back(out);
    }
    if (c.ce_ent.present) {
      Expect::Out out{&c.ce_ent, {}, {}};
      per_row(R.entropy, R.entropy_mag, 4e-6, out);
      ex.extras.push_back(out);
    }
    if (c.ce_tlp.present) {
      Expect::Out out{&c.ce_tlp, {}, {}};
      per_row(R.target_logprob, R.target_logprob_mag, 2e-6, out);
      ex.extras.push_back(out);
    }
  }
}

// The expected result of a valid call (before the call: in-place calls
// overwrite inputs).
Expect expect_of(Case& c) {
  Expect ex;
  const OpDef& op = *c.op;
  if (op.ext) {
    const ref::Float64Semantics semantics(float64_oracle(c));
    smax_cli::ExtCall e = ext_call(c);
    if (op.ext->check_indices || op.name == "softmax_topk") {
      if (op.name == "gumbel_max") {
        ex.ref_index = ref::gumbel_max(e.x, static_cast<uint64_t>(c.params["seed"]), e.options);
      } else if (op.name == "sample") {
        const smax::SampleOptions so = sample_options(c);
        ex.ref_index = ref::sample(e.x, so, e.options);
        const ref::FilterRef f = ref::sampling_filter(e.x, so, e.options);
        ex.index_free.assign(ex.ref_index.size(), 0);
        for (size_t r = 0; r < f.fragile.size() && r < ex.index_free.size(); ++r) ex.index_free[r] = f.fragile[r];
      } else {
        smax::SoftmaxTopkOptions t;
        t.k = static_cast<int64_t>(c.params["k"]);
        const ref::TopkRef tr = ref::softmax_topk(e.x, t, e.options);
        ex.ref_index = tr.indices;
        ex.ref = tr.probs;
      }
    } else if (op.name == "sparse_softmax_backward" ||
               (op.name == "entmax_bisect_backward" && static_cast<float>(c.params["alpha"]) == 1.0f)) {
      // Documented as softmax_backward, dx = s y (dy - <dy, y>), for any y
      // (the table's entmax oracle divides by sum y instead, which agrees
      // only when y sums to 1); masked entries get exact 0
      // (masks_zero_gradient below).
      ex.ref = ref::softmax_backward(e.y, e.dy, e.options);
    } else if (op.name == "sigmoid_normalizer_backward") {
      ex.ref = from_y_backward("sigmoid_normalizer_backward", e.y, e.dy, e.options, false, 1.0f);
    } else {
      ex.ref = reference_of(c, e);
    }
    if (!ex.ref.empty()) table_bounds(c, ex, e);
    if (const TensorView* mv = masks_zero_gradient(c, e)) {
      if (!ex.ref.empty()) zero_masked_expect(c, ex, *mv, e.options);
    }
    if ((op.name == "cross_entropy_backward" || op.name == "z_loss_backward") && !ex.ref.empty()) {
      zero_neg_inf_logits(c, ex, e);
    }
    if (op.variant != Variant::kNone) variant_extras(c, ex, e);
    return ex;
  }
  const SoftmaxOptions o = full_options(c);
  switch (op.custom) {
    case Custom::kCollapse:
      if (c.precision != 0) {
        ex.flags = ref::softmax_collapse_flags(view_of(c, c.x), static_cast<smax::Precision>(c.precision), o, 1);
      }
      break;
    case Custom::kGumbelNoise: {
      std::vector<int64_t> shape = c.out.shape;
      ex.ref = ref::gumbel_noise(shape, c.opt.axis, static_cast<uint64_t>(c.params["seed"]));
      ex.bound.assign(ex.ref.size(), 0.0);
      ex.exact_zero.assign(ex.ref.size(), 0);
      break;
    }
    case Custom::kGumbelSoftmaxBackward: {
      const float tau = static_cast<float>(c.params["tau"]);
      ex.ref = from_y_backward("gumbel_softmax_backward", view_of(c, c.y), view_of(c, c.dy), o, true, tau);
      const ref::RefRows Y = ref::ref_rows("fuzz", view_of(c, c.y), o, false);
      const ref::RefRows G = ref::ref_rows("fuzz", view_of(c, c.dy), o, false);
      const ref::RefRows T = ref::ref_rows("fuzz", view_of(c, c.y), o, true);
      const double cf = static_cast<float>(static_cast<float>(Y.scale) / tau);
      ex.bound.assign(ex.ref.size(), 0.0);
      ex.exact_zero.assign(ex.ref.size(), 0);
      ex.dot_gap.assign(ex.ref.size(), 0.0);
      for (int64_t r = 0; r < Y.rows; ++r) {
        double dot = 0.0, abs_dot = 0.0;
        for (int64_t k = 0; k < Y.n; ++k) {
          dot += Y.row(r)[k] * G.row(r)[k];
          abs_dot += std::fabs(Y.row(r)[k] * G.row(r)[k]);
        }
        const bool ovf = vjp_row_overflows(Y.row(r), G.row(r), Y.n);
        for (int64_t k = 0; k < Y.n; ++k) {
          const size_t i = static_cast<size_t>(dense_index(Y, r, k));
          ex.bound[i] = 2e-6 * cf * std::fabs(Y.row(r)[k]) * (std::fabs(G.row(r)[k]) + std::fabs(dot)) + 1e-30;
          // softmax_backward's dot term (smax/sampling.h): the same kernel.
          ex.dot_gap[i] = 1.02e-6 * cf * std::fabs(Y.row(r)[k]) * abs_dot;
          if (ovf) {
            ex.overflow_ok.resize(ex.ref.size(), 0);
            ex.overflow_ok[i] = 1;
          }
          if (T.row(r)[k] == -kInfD && ex.ref[i] == 0.0) ex.exact_zero[i] = 1;
        }
      }
      break;
    }
    case Custom::kSamplingFilter: {
      const smax::SampleOptions so = sample_options(c);
      const ref::FilterRef f = ref::sampling_filter(view_of(c, c.x), so, o);
      ex.ref = f.values;
      ex.bound.assign(ex.ref.size(), 0.0);
      ex.exact_zero.assign(ex.ref.size(), 0);
      ex.index_free.assign(f.fragile.begin(), f.fragile.end());
      break;
    }
    case Custom::kSoftNms:
      ex.nms = ref::soft_nms(view_of(c, c.x), view_of(c, c.y), c.nms);
      break;
    case Custom::kLce:
    case Custom::kLceBackward:
    case Custom::kLceFused: lce_expect(c, ex); break;
    case Custom::kNone: break;
  }
  return ex;
}

// Elementwise backward passes: rows whose upstream gradient dy holds +-inf or
// NaN. The headers do not define 0 * inf there (e.g. dy = -inf at a masked
// entry, where y = 0: the library leaves masked entries out of <dy, y>, the
// oracles compute -inf * 0 = NaN), so those rows' values are not compared
// (everything else is still checked).
void unchecked_rows(Case& c, Expect& ex) {
  if (!c.dy.present || is_loss_backward(*c.op) || ex.ref.empty() || c.dy.shape != c.shape) return;
  const ref::RefRows D = ref::ref_rows("fuzz", view_of(c, c.dy), full_options(c), false);
  // softpick_backward leaves masked entries (t = -inf) out of <dy, y>
  // (smax/rescaled.h): a non-finite dy there reaches no other entry, so the
  // row stays checked (normalizers/softpick_backward_neg_inf_logits_nan_ref).
  ref::RefRows T;
  bool skip_masked = c.op->name == "softpick_backward" && c.x.present && c.x.shape == c.shape;
  if (skip_masked) {
    T = ref::ref_rows("fuzz", view_of(c, c.x), full_options(c), true);
    skip_masked = T.rows == D.rows && T.n == D.n;
  }
  for (int64_t r = 0; r < D.rows; ++r) {
    bool bad = false;
    for (int64_t k = 0; k < D.n; ++k) {
      if (skip_masked && T.row(r)[k] == -kInfD) continue;
      bad |= !std::isfinite(D.row(r)[k]);
    }
    if (!bad) continue;
    ++g_stats.nonfinite_dy_rows;
    ex.unchecked.resize(ex.ref.size(), 0);
    ex.unchecked_row.resize(static_cast<size_t>(D.rows), 0);
    ex.unchecked_row[static_cast<size_t>(r)] = 1;
    for (int64_t k = 0; k < D.n; ++k) {
      const size_t i = static_cast<size_t>(dense_index(D, r, k));
      if (i < ex.unchecked.size()) ex.unchecked[i] = 1;
    }
  }
}

// Loss gradients for a non-finite upstream dloss: the headers do not say
// what G * 0 gives for G = +-inf / NaN (entries outside a sparse support,
// p_j (..) - q_j that cancel exactly); the oracles follow IEEE (NaN), the
// library often writes the structural 0. Such cases are checked for
// everything but the values (counted as known_open).
bool nonfinite_dloss(Case& c) {
  const bool lce = c.op->custom == Custom::kLceBackward || c.op->custom == Custom::kLceFused;
  const Operand& g = lce ? c.dloss : c.dy;
  if (!(is_loss_backward(*c.op) || lce) || !g.present) return false;
  for (double v : dense_f32(c, g)) {
    if (!std::isfinite(v)) return true;
  }
  return false;
}

}  // namespace ops_internal
}  // namespace smax_fuzz

// tools/smax/run_inputs_lce.cc: `smax run --op linear_cross_entropy`,
// linear_cross_entropy_backward and linear_cross_entropy_fused
// (include/smax/linear_cross_entropy.h).
//
// --shape NxDxV: hidden [N, D] from --dist, weight [V, D] from --dist
// scaled by 1/sqrt(D) (rounded to f32; logits of order 1 as in a trained
// LM head), targets [N] uniform over [0, V), no bias; --reduction
// mean|sum|none; the upstream gradient dloss ~ N(0, 1) ([N] for none, one
// value otherwise). --check: the float64 oracle
// (src/reference/linear_cross_entropy.h) and the header's bounds, the
// per-row loss bound
//   4e-6 M_r + 2 E_r,  E_r = (D + 3) 2^-24 max_j sum_k |h_rk w_jk|
// (reduced: their mean / sum plus one f32 rounding) and the gradients'
// e_rj and f32 GEMM terms, as tests/linear_cross_entropy_util.h applies
// them (no label smoothing, z-loss or softcap from the CLI: a = zs = cap = 0).
#include <cmath>
#include <optional>
#include <string>

#include "args.h"
#include "progress.h"
#include "reference/linear_cross_entropy.h"
#include "run_inputs.h"
#include "smax/linear_cross_entropy.h"

namespace smax_cli {
namespace {

using smax::reference::LceProblem;
using smax::reference::LceResult;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, the f32 unit roundoff

enum class Pass { kForward, kBackward, kFused };

struct Lce {
  int64_t N = 0, H = 0, V = 0;
  std::vector<float> h, w, dloss, dst, dh, dw;
  std::vector<int64_t> target;
  std::vector<int64_t> loss_shape;  // [N] or []
};

smax::TensorView f32(float* p, const std::vector<int64_t>& shape) {
  return smax::make_view(p, smax::DType::kF32, static_cast<int>(shape.size()), shape.data(), nullptr);
}

// The per-row loss bound of the header (a = zs = cap = 0, class weights 1).
std::vector<double> row_loss_bounds(const LceProblem& p, const LceResult& ref, std::vector<double>* E) {
  std::vector<double> b(static_cast<size_t>(p.N));
  E->assign(static_cast<size_t>(p.N), 0.0);
  for (int64_t r = 0; r < p.N; ++r) {
    double emax = 0.0;
    for (int64_t j = 0; j < p.V; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < p.D; ++k) {
        s += std::fabs(p.h[static_cast<size_t>(r * p.D + k)] * p.w[static_cast<size_t>(j * p.D + k)]);
      }
      emax = std::max(emax, s);
    }
    const double e = p.s * static_cast<double>(p.D + 3) * kU * emax;
    (*E)[static_cast<size_t>(r)] = e;
    const double L = std::isfinite(ref.lse[static_cast<size_t>(r)]) ? std::fabs(ref.lse[static_cast<size_t>(r)]) : 0.0;
    const int64_t y = p.target[static_cast<size_t>(r)];
    const double ty = std::fabs(ref.logits[static_cast<size_t>(r * p.V + y)]);
    b[static_cast<size_t>(r)] = 4e-6 * (1.0 + L + ty) + 2.0 * e;
  }
  return b;
}

void check_loss(ErrorStats& st, const LceProblem& p, const LceResult& ref, const std::vector<float>& got) {
  std::vector<double> E;
  const std::vector<double> rb = row_loss_bounds(p, ref, &E);
  if (p.reduction == smax::Reduction::kNone) {
    for (int64_t i = 0; i < p.N; ++i) {
      const double g = got[static_cast<size_t>(i)], r = ref.row_loss[static_cast<size_t>(i)];
      record_error(st, i, g, r, std::fabs(g - r), rb[static_cast<size_t>(i)], kTinyOutput);
    }
  } else {
    double sb = 0.0;
    for (double b : rb) sb += b;
    double b = p.reduction == smax::Reduction::kMean ? sb / static_cast<double>(p.N) : sb;
    b += 1.2e-7 * std::fabs(ref.loss) + 1e-30;
    record_error(st, 0, got[0], ref.loss, std::fabs(got[0] - ref.loss), b, kTinyOutput);
  }
}

// The gradients' bounds of the header (a = zs = cap = 0, class weights 1);
// outputs numbered after the loss's: dhidden from 1000000, dweight from 2000000.
void check_grads(ErrorStats& st, const LceProblem& p, const LceResult& ref, const std::vector<float>& dh,
                 const std::vector<float>& dw) {
  std::vector<double> E;
  row_loss_bounds(p, ref, &E);
  std::vector<double> e(static_cast<size_t>(p.N * p.V), 0.0), adz(e.size(), 0.0);
  for (int64_t r = 0; r < p.N; ++r) {
    const double G = ref.G[static_cast<size_t>(r)];
    const double L = ref.lse[static_cast<size_t>(r)];
    if (G == 0.0 || !std::isfinite(L)) continue;
    const int64_t y = p.target[static_cast<size_t>(r)];
    const double A = 1.0;  // (1 - a) w_y + a W / C + 2 zs w_y L with a = zs = 0, w_y = 1
    for (int64_t j = 0; j < p.V; ++j) {
      const size_t k = static_cast<size_t>(r * p.V + j);
      const double pj = std::exp(ref.logits[k] - L);
      const double B = j == y ? 1.0 : 0.0;
      e[k] = 4e-6 * p.s * std::fabs(G) * (pj * A + B) + 2.5 * p.s * std::fabs(G) * pj * A * E[static_cast<size_t>(r)] +
             1e-30;
      adz[k] = std::fabs(ref.dz[k]);
    }
  }
  // An f32 GEMM entry over `terms` products dz_q x_m: sum (e_q + (terms + 2) u |dz_q|) |x_m|.
  auto gemm_bound = [&](int64_t terms, int64_t q0, int64_t q_step, const std::vector<double>& x, int64_t x0,
                        int64_t x_step) {
    double b = 0.0;
    for (int64_t m = 0; m < terms; ++m) {
      const size_t q = static_cast<size_t>(q0 + m * q_step);
      b += (e[q] + static_cast<double>(terms + 2) * kU * adz[q]) * std::fabs(x[static_cast<size_t>(x0 + m * x_step)]);
    }
    return b;
  };
  for (int64_t r = 0; r < p.N; ++r) {
    for (int64_t k = 0; k < p.D; ++k) {
      const size_t i = static_cast<size_t>(r * p.D + k);
      const double b = gemm_bound(p.V, r * p.V, 1, p.w, k, p.D) + 1e-30;
      record_error(st, 1000000 + static_cast<int64_t>(i), dh[i], ref.dhidden[i], std::fabs(dh[i] - ref.dhidden[i]), b,
                   kTinyOutput);
    }
  }
  for (int64_t j = 0; j < p.V; ++j) {
    for (int64_t k = 0; k < p.D; ++k) {
      const size_t i = static_cast<size_t>(j * p.D + k);
      const double b = gemm_bound(p.N, j, p.V, p.h, k, p.D) + 1e-30;
      record_error(st, 2000000 + static_cast<int64_t>(i), dw[i], ref.dweight[i], std::fabs(dw[i] - ref.dweight[i]),
                   b, kTinyOutput);
    }
  }
}

InputsResult run_lce(const InputsConfig& c, Pass pass, const std::string& name) {
  if (c.shape.size() != 3) {
    throw UsageError("--shape: op " + name + " takes NxDxV (tokens x hidden size x vocabulary), got " +
                     format_shape(c.shape));
  }
  Lce L;
  L.N = c.shape[0];
  L.H = c.shape[1];
  L.V = c.shape[2];
  L.h.resize(static_cast<size_t>(L.N * L.H));
  L.w.resize(static_cast<size_t>(L.V * L.H));
  fill(L.h.data(), L.h.size(), c.dist, c.seed);
  fill(L.w.data(), L.w.size(), c.dist, c.seed + 0x77);
  const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(L.H)));
  for (float& v : L.w) v *= inv;
  L.target = uniform_targets(L.N, L.V, c.seed);
  L.loss_shape = c.reduction == smax::Reduction::kNone ? std::vector<int64_t>{L.N} : std::vector<int64_t>{};
  const int64_t loss_count = c.reduction == smax::Reduction::kNone ? L.N : 1;
  L.dst.assign(static_cast<size_t>(loss_count), 0.0f);
  L.dloss.resize(static_cast<size_t>(loss_count));
  fill(L.dloss.data(), L.dloss.size(), Dist{}, c.seed + 0x5eed);
  L.dh.assign(L.h.size(), 0.0f);
  L.dw.assign(L.w.size(), 0.0f);
  const std::vector<int64_t> hs{L.N, L.H}, ws{L.V, L.H}, ts{L.N};
  const smax::TensorView hv = f32(L.h.data(), hs), wv = f32(L.w.data(), ws);
  const smax::TensorView tv =
      smax::make_view(L.target.data(), smax::DType::kI64, 1, ts.data(), nullptr);
  const smax::TensorView dv = f32(L.dst.data(), L.loss_shape), gv = f32(L.dloss.data(), L.loss_shape);
  const smax::TensorView dhv = f32(L.dh.data(), hs), dwv = f32(L.dw.data(), ws);
  smax::CrossEntropyOptions ce;
  ce.loss.reduction = c.reduction;
  smax::SoftmaxOptions options;
  options.threads = c.threads;

  InputsResult r;
  r.inputs = "hidden [" + std::to_string(L.N) + ", " + std::to_string(L.H) + "], weight [" + std::to_string(L.V) +
             ", " + std::to_string(L.H) + "], targets [" + std::to_string(L.N) + "], no bias" +
             (pass == Pass::kForward ? "" : ", dloss " + format_shape(L.loss_shape.empty() ? std::vector<int64_t>{1} : L.loss_shape));
  r.elements = L.N * L.V;
  r.per = "logit";
  r.bound = "include/smax/linear_cross_entropy.h: per-row loss 4e-6 M_r + 2 E_r (GEMM error E_r)" +
            std::string(pass == Pass::kForward ? "" : "; gradients e_rj plus the f32 GEMM terms");
  Progress progress(c.check ? 3 : 1);
  progress.step("timing " + name);
  std::function<void()> call;
  switch (pass) {
    case Pass::kForward:
      call = [&] { smax::linear_cross_entropy(hv, wv, tv, std::nullopt, dv, ce, {}, options); };
      break;
    case Pass::kBackward:
      call = [&] {
        smax::linear_cross_entropy_backward(hv, wv, tv, std::nullopt, gv, dhv, dwv, std::nullopt, ce, {}, options);
      };
      break;
    case Pass::kFused:
      call = [&] {
        smax::linear_cross_entropy_fused(hv, wv, tv, std::nullopt, dv, gv, dhv, dwv, std::nullopt, ce, {}, options);
      };
      break;
  }
  r.timing = measure(call, c.timing);
  if (c.check) {
    progress.step("float64 reference");
    const LceProblem p = smax::reference::lce_problem(hv, wv, tv, std::nullopt, ce, options);
    std::vector<double> dl(L.dloss.begin(), L.dloss.end());
    const LceResult ref = smax::reference::lce_solve(p, pass == Pass::kForward ? nullptr : &dl);
    progress.step("checking against the reference");
    if (pass != Pass::kBackward) check_loss(r.st, p, ref, L.dst);
    if (pass != Pass::kForward) check_grads(r.st, p, ref, L.dh, L.dw);
  }
  progress.finish();
  return r;
}

}  // namespace

void add_lce_inputs_ops(std::vector<InputsOp>& ops) {
  const std::string conv = "NxDxV: hidden [N, D], weight [V, D] (scaled by 1/sqrt(D)), targets [N] uniform in [0, V)";
  for (const auto& [name, pass, summary] :
       {std::tuple<const char*, Pass, const char*>{"linear_cross_entropy", Pass::kForward,
                                                   "cross_entropy(hidden weight^T, targets) without the logits"},
        {"linear_cross_entropy_backward", Pass::kBackward, "gradients of linear_cross_entropy (dhidden, dweight)"},
        {"linear_cross_entropy_fused", Pass::kFused, "linear_cross_entropy loss and gradients in one call"}}) {
    InputsOp op;
    op.name = name;
    op.summary = summary;
    op.convention = conv +
                    (pass == Pass::kForward ? "" : "; dloss ~ N(0, 1): [N] for --reduction none, one value otherwise");
    op.default_shape = "512x1024x32000";
    op.example_shape = "5x24x301";
    op.loss = true;
    const std::string n = name;
    const Pass ps = pass;
    op.run = [n, ps](const InputsConfig& c) { return run_lce(c, ps, n); };
    ops.push_back(std::move(op));
  }
}

}  // namespace smax_cli

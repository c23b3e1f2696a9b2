// tests/cross_entropy_util.h: helpers and the per-target fixture shared by
// tests/test_cross_entropy*.cc, which test
// cross_entropy, the PaLM z-loss and the
// spherical Z-loss (include/smax/cross_entropy.h) against the float64
// oracles of src/reference/cross_entropy.h, on every SIMD target: random and
// adversarial rows at many sizes (vocabularies 32000, 128256, 256000),
// class-index and probability targets, ignored rows, weights, label
// smoothing, z-loss, softcap, masks, strided 3-D tensors on any axis, in
// place, thread counts; backward with random upstream gradients; float64
// finite differences of the oracles; PyTorch hand vectors; every error path.
//
// Bounds (the header's, enforced as written): with the oracle's error scale
// M (reference/cross_entropy.h: sums of the magnitudes of the terms),
//   per-row loss / z-loss: |out - ref| <= 4e-6 * M + 1e-30
//   lse: 2e-6 (1 + |L|); entropy: 4e-6 * (1 + |L| + sum p|t| + H);
//   target_logprob: 2e-6 (1 + |L| + |t_y|)
//   reduced values: 4e-6 * (reduction of M) + 2^-23 |ref| (the f32 rounding)
//   gradients: |out - ref| <= 4e-6 * mag_j * (1 + |u_j / softcap|) + 1e-30
//   (the softcap derivative e^(-2|a|) amplifies the f32 rounding of a =
//   u / softcap by 2|a|: 2|a| * 2^-24 relative).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "reference/cross_entropy.h"
#include "smax/cross_entropy.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::CrossEntropyOptions;
using smax::EmptyMean;
using smax::LossOptions;
using smax::Reduction;
using IndexTensor = Array<int64_t>;
namespace ref = smax::reference;

constexpr double kLossEps = 4e-6;
constexpr double kGradEps = 4e-6;

// ---- comparison helpers ----------------------------------------------------------
inline void check_value(CheckResult& r, int64_t i, float out, double want, double bound) {
  check_element(r, i, out, want, bound, false);
}

inline ::testing::AssertionResult check_rows(const std::vector<float>& out, const std::vector<double>& want,
                                      const std::vector<double>& scale, double eps,
                                      const std::string& what) {
  CheckResult r;
  for (size_t i = 0; i < want.size(); ++i) {
    check_value(r, static_cast<int64_t>(i), out[i], want[i], eps * scale[i] + 1e-30);
  }
  return to_assertion(r, what);
}

inline std::vector<float> dense_f(const Tensor& t) { return t.dense(); }

// Reduced value of `values` with its bound.
inline ::testing::AssertionResult check_reduced(float out, const ref::LossRef& L,
                                         const std::vector<double>& values,
                                         const std::vector<double>& mags, double den,
                                         const std::string& what) {
  const double want = L.reduce_with(values, den);
  std::vector<double> am(mags.size());
  for (size_t i = 0; i < mags.size(); ++i) am[i] = std::fabs(mags[i]);
  double bound = kLossEps * std::fabs(L.reduce_with(am, den)) + std::ldexp(std::fabs(want), -23) + 1e-30;
  if (std::isnan(bound)) bound = 0.0;
  CheckResult r;
  check_value(r, 0, out, want, bound);
  return to_assertion(r, what);
}

// ---- one case --------------------------------------------------------------------
struct Case {
  std::vector<int64_t> shape = {4, 33};
  int axis = -1;
  std::vector<int64_t> src_strides;  // empty: contiguous
  Data data = Data::kUniform;
  bool probs = false;
  double ignore = 0.0;  // fraction of ignored rows
  bool weights = false;
  float smoothing = 0.0f, zs = 0.0f, cap = 0.0f;
  float scale = 1.0f, temperature = 1.0f;
  bool bool_mask = false, add_mask = false;
  EmptyRow empty_row = EmptyRow::kZero;
  int threads = 0;
  bool in_place = false;
  bool lse_input = false;  // backward reads the forward's lse
  std::string name() const {
    std::ostringstream os;
    os << shape_str(shape) << " axis " << axis << " " << data_name(data) << (probs ? " probs" : "")
       << " ignore " << ignore << (weights ? " weights" : "") << " a " << smoothing << " zs " << zs
       << " cap " << cap << " s " << scale << "/" << temperature << (bool_mask ? " bool_mask" : "")
       << (add_mask ? " add_mask" : "") << (in_place ? " in-place" : "")
       << (lse_input ? " lse-input" : "");
    return os.str();
  }
};

struct Built {
  Tensor src;
  IndexTensor index;
  Tensor probs;
  Tensor weight;
  Tensor add;
  BoolTensor keep;
  SoftmaxOptions o;
  CrossEntropyOptions ce;
  std::vector<int64_t> row_shape;
  int64_t C = 0;
  bool is_probs = false;
  TensorView target() const { return is_probs ? probs.view() : index.view(); }
};

inline Built build(const Case& c, Rng& rng) {
  Built b;
  const int rank = static_cast<int>(c.shape.size());
  const int axis = c.axis < 0 ? c.axis + rank : c.axis;
  b.C = c.shape[static_cast<size_t>(axis)];
  b.src = Tensor(c.shape, c.src_strides, 1);
  fill_rows(b.src, axis, c.data, rng);
  b.row_shape = drop_axis(c.shape, axis);
  b.is_probs = c.probs;
  if (c.probs) {
    b.probs = Tensor(c.shape);
    const Geometry g(c.shape, axis);
    for (int64_t o = 0; o < g.outer; ++o) {
      for (int64_t j = 0; j < g.inner; ++j) {
        double sum = 0.0;
        std::vector<double> v(static_cast<size_t>(g.n));
        const bool onehot = rng.bernoulli(0.25);
        const int64_t hot = g.n > 0 ? rng.index(g.n) : 0;
        for (int64_t k = 0; k < g.n; ++k) {
          v[static_cast<size_t>(k)] = onehot ? (k == hot) : std::exp(rng.normal());
          sum += v[static_cast<size_t>(k)];
        }
        for (int64_t k = 0; k < g.n; ++k) {
          b.probs.at(g.index(o, k, j)) = static_cast<float>(v[static_cast<size_t>(k)] / sum);
        }
      }
    }
  } else {
    b.index = IndexTensor(b.row_shape);
    b.index.fill([&](int64_t) -> int64_t {
      if (b.C == 0 || rng.bernoulli(c.ignore)) return -100;
      return rng.index(b.C);
    });
  }
  if (c.weights) {
    b.weight = Tensor({b.C});
    b.weight.fill([&](int64_t) { return rng.uniform(0.1f, 2.0f); });
    b.ce.loss.weight = b.weight.view();
  }
  if (c.add_mask) {
    b.add = Tensor({b.C});
    b.add.fill([&](int64_t) { return rng.bernoulli(0.1) ? -kInfF : rng.uniform(-1.0f, 1.0f); });
    b.o.additive_mask = b.add.view();
  }
  if (c.bool_mask) {
    b.keep = BoolTensor({b.C});
    b.keep.fill([&](int64_t) { return static_cast<uint8_t>(!rng.bernoulli(0.2)); });
    b.o.bool_mask = b.keep.view();
  }
  b.o.axis = c.axis;
  b.o.scale = c.scale;
  b.o.temperature = c.temperature;
  b.o.empty_row = c.empty_row;
  b.o.threads = c.threads;
  b.ce.label_smoothing = c.smoothing;
  b.ce.lse_square_scale = c.zs;
  b.ce.softcap = c.cap;
  return b;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline ::testing::AssertionResult check_fused(const Built& b, const Case& c, Reduction fr,
                                       const std::string& what_in) {
  const std::string what = what_in + " fused " + smax::reduction_name(fr);
  const std::vector<int64_t> lshape =
      fr == Reduction::kNone ? b.row_shape : std::vector<int64_t>{};
  CrossEntropyOptions ce = b.ce;
  ce.loss.reduction = fr;
  Tensor ones(lshape);
  ones.fill([](int64_t) { return 1.0f; });
  Tensor l_plain(lshape), e_plain(b.row_shape), a_plain(lshape);
  ce.entropy = e_plain.view();
  ce.accuracy = a_plain.view();
  smax::cross_entropy(b.src.view(), b.target(), l_plain.view(), ce, b.o);
  ce.entropy.reset();
  ce.accuracy.reset();
  Tensor g_ref(c.shape, {}, 2);
  smax::cross_entropy_backward(b.src.view(), b.target(), ones.view(), g_ref.view(), ce, b.o);
  // Fused, separate gradient tensor, with extras (another scan variant).
  Tensor l_fused(lshape), e_fused(b.row_shape), a_fused(lshape), g_fused(c.shape, {}, 3);
  ce.entropy = e_fused.view();
  ce.accuracy = a_fused.view();
  ce.grad = g_fused.view();
  smax::cross_entropy(b.src.view(), b.target(), l_fused.view(), ce, b.o);
  if (!g_fused.guards_intact() || !l_fused.guards_intact()) {
    return ::testing::AssertionFailure() << what << ": guard overwritten";
  }
  if (!same_bits(l_plain.dense(), l_fused.dense())) {
    return ::testing::AssertionFailure() << what << ": loss differs from the plain forward";
  }
  if (!same_bits(e_plain.dense(), e_fused.dense()) || !same_bits(a_plain.dense(), a_fused.dense())) {
    return ::testing::AssertionFailure() << what << ": extras differ from the plain forward";
  }
  if (!same_bits(g_ref.dense(), g_fused.dense())) {
    const std::vector<float> x = g_ref.dense(), y = g_fused.dense();
    size_t i = 0;
    while (i < x.size() && std::memcmp(&x[i], &y[i], 4) == 0) ++i;
    return ::testing::AssertionFailure() << what << ": gradient differs from the backward at "
                                         << i << ": " << x[i] << " vs " << y[i];
  }
  // In place: the logits become their gradient; no extras.
  Tensor x = b.src;
  Tensor l_in(lshape);
  ce.entropy.reset();
  ce.accuracy.reset();
  ce.grad = x.view();
  smax::cross_entropy(x.view(), b.target(), l_in.view(), ce, b.o);
  if (!x.guards_intact()) return ::testing::AssertionFailure() << what << ": in-place guard";
  if (!same_bits(l_plain.dense(), l_in.dense()) || !same_bits(g_ref.dense(), x.dense())) {
    return ::testing::AssertionFailure() << what << ": in place differs";
  }
  return ::testing::AssertionSuccess();
}

// Forward with every output, kNone and `red`; fused forward + gradient;
// backward with kNone (random dloss) and `red`. Returns false after the
// first failing check.
inline ::testing::AssertionResult run_case(const Case& c, Reduction red, Rng& rng) {
  Built b = build(c, rng);
  const std::string what = c.name() + " reduction " + smax::reduction_name(red);
  // ---- forward, per row ----
  CrossEntropyOptions ce = b.ce;
  ce.loss.reduction = Reduction::kNone;
  Tensor loss(b.row_shape), z(b.row_shape), lse(b.row_shape), ent(b.row_shape), tlp(b.row_shape),
      acc(b.row_shape);
  ce.z_loss = z.view();
  ce.lse = lse.view();
  ce.entropy = ent.view();
  ce.target_logprob = tlp.view();
  ce.accuracy = acc.view();
  smax::cross_entropy(b.src.view(), b.target(), loss.view(), ce, b.o);
  const ref::CrossEntropyRef R = ref::cross_entropy(b.src.view(), b.target(), ce, b.o);
  for (const Tensor* t : {&loss, &z, &lse, &ent, &tlp, &acc}) {
    if (!t->guards_intact()) return ::testing::AssertionFailure() << what << ": guard overwritten";
  }
  std::vector<double> ones(R.lse.size(), 1.0);
  if (auto r = check_rows(dense_f(loss), R.loss.rows, R.loss.rows_mag, kLossEps, what + " loss"); !r) return r;
  std::vector<double> zmag(R.z.size());
  // z = zs w L^2: error 2 zs w |L| * dL, dL <= 2e-6 (1 + |L|).
  for (size_t i = 0; i < zmag.size(); ++i) {
    const double Li = std::fabs(R.lse[i]);
    zmag[i] = std::isfinite(R.z[i]) && std::isfinite(Li) && Li > 0
                  ? std::fabs(R.z[i]) * (1.0 + Li) / Li
                  : 0.0;
  }
  if (auto r = check_rows(dense_f(z), R.z, zmag, kLossEps, what + " z_loss"); !r) return r;
  if (auto r = check_rows(dense_f(lse), R.lse, R.lse_mag, 2e-6, what + " lse"); !r) return r;
  if (auto r = check_rows(dense_f(ent), R.entropy, R.entropy_mag, kLossEps, what + " entropy"); !r) return r;
  if (auto r = check_rows(dense_f(tlp), R.target_logprob, R.target_logprob_mag, 2e-6, what + " target_logprob"); !r) return r;
  if (auto r = check_rows(dense_f(acc), R.accuracy, ones, 0.0, what + " accuracy"); !r) return r;

  // ---- forward, reduced ----
  if (red != Reduction::kNone) {
    ce.loss.reduction = red;
    const std::vector<int64_t> scalar;
    Tensor l1(scalar), z1(scalar), a1(scalar);
    ce.z_loss = z1.view();
    ce.accuracy = a1.view();
    smax::cross_entropy(b.src.view(), b.target(), l1.view(), ce, b.o);
    ref::LossRef L = R.loss;
    L.reduction = red;
    if (auto r = check_reduced(l1.at(0), L, R.loss.rows, R.loss.rows_mag, L.denominator, what + " loss"); !r) return r;
    if (auto r = check_reduced(z1.at(0), L, R.z, zmag, L.denominator, what + " z_loss"); !r) return r;
    double count = 0.0;
    for (char a : L.active) count += a;
    if (auto r = check_reduced(a1.at(0), L, R.accuracy, std::vector<double>(ones.size(), 0.0), count, what + " accuracy"); !r) return r;
  }

  // ---- fused gradient (CrossEntropyOptions::grad): the loss and the extras
  // of the plain forward, the gradient of the backward with dloss = 1 (no
  // lse input), bit for bit; into a separate tensor and in place. ----
  for (Reduction fr : {Reduction::kNone, red}) {
    if (auto r = check_fused(b, c, fr, what); !r) return r;
  }

  // ---- backward ----
  for (Reduction br : {Reduction::kNone, red}) {
    CrossEntropyOptions bce = b.ce;
    bce.loss.reduction = br;
    Tensor dloss(br == Reduction::kNone ? b.row_shape : std::vector<int64_t>{});
    fill_normal(dloss, rng);
    if (c.lse_input) bce.lse = lse.view();
    Tensor dsrc(c.shape, {}, 2);
    Tensor src_copy = b.src;
    const TensorView out = c.in_place ? src_copy.view() : dsrc.view();
    smax::cross_entropy_backward(src_copy.view(), b.target(), dloss.view(), out, bce, b.o);
    const ref::GradRef G = ref::cross_entropy_backward(b.src.view(), b.target(), dloss.view(), bce, b.o);
    const Tensor& got = c.in_place ? src_copy : dsrc;
    if (!got.guards_intact()) return ::testing::AssertionFailure() << what << ": dsrc guard overwritten";
    // Bound: 4e-6 * mag * (1 + |u/cap|) (+ f32 lse input: 2^-24 |L| p |A| <= 2^-24 |L| mag;
    // + softcap with an additive mask: 0.03 (|t_j| + |L|), t's f32 rounding).
    const std::vector<float> gv = got.dense();
    const std::vector<double> x = to_dense(b.src.view());
    const Geometry g(c.shape, c.axis);
    CheckResult r;
    for (int64_t o = 0; o < g.outer; ++o) {
      for (int64_t j = 0; j < g.inner; ++j) {
        const double L = R.lse[static_cast<size_t>(o * g.inner + j)];
        for (int64_t k = 0; k < g.n; ++k) {
          const size_t i = static_cast<size_t>(g.index(o, k, j));
          double f = 1.0;
          const double u = static_cast<double>(static_cast<float>(x[i]) * eff_scale(b.o));
          if (c.cap > 0.0f && std::isfinite(u)) f += std::fabs(u) / c.cap;
          if (c.lse_input && c.smoothing == 0.0f && std::isfinite(L)) f += std::fabs(L) * 0.02;
          if (i < G.t_round.size()) f += G.t_round[i];  // softcap + additive mask
          check_value(r, static_cast<int64_t>(i), gv[i], G.dsrc[i], kGradEps * G.mag[i] * f + 1e-30);
        }
      }
    }
    if (auto res = to_assertion(r, what + " backward " + smax::reduction_name(br)); !res) return res;
  }
  return ::testing::AssertionSuccess();
}

class CrossEntropy : public TargetTest {
 protected:
  // Runs one case; stops reporting after 8 failing cases.
  void expect(const Case& c, Reduction red, Rng& rng) {
    if (failures_ >= 8) return;
    const auto res = run_case(c, red, rng);
    EXPECT_TRUE(res) << "target " << GetParam();
    if (!res && ++failures_ == 8) ADD_FAILURE() << "not running more cases of this test";
  }
  int failures_ = 0;
};

const std::vector<int64_t> kSizes = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001};

}  // namespace
}  // namespace smax_test

// tests/test_cross_entropy.cc: cross_entropy, the PaLM z-loss and the
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
void check_value(CheckResult& r, int64_t i, float out, double want, double bound) {
  check_element(r, i, out, want, bound, false);
}

::testing::AssertionResult check_rows(const std::vector<float>& out, const std::vector<double>& want,
                                      const std::vector<double>& scale, double eps,
                                      const std::string& what) {
  CheckResult r;
  for (size_t i = 0; i < want.size(); ++i) {
    check_value(r, static_cast<int64_t>(i), out[i], want[i], eps * scale[i] + 1e-30);
  }
  return to_assertion(r, what);
}

std::vector<float> dense_f(const Tensor& t) { return t.dense(); }

// Reduced value of `values` with its bound.
::testing::AssertionResult check_reduced(float out, const ref::LossRef& L,
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

Built build(const Case& c, Rng& rng) {
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

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

::testing::AssertionResult check_fused(const Built& b, const Case& c, Reduction fr,
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
::testing::AssertionResult run_case(const Case& c, Reduction red, Rng& rng) {
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

TEST_P(CrossEntropy, RandomRowsEveryConfig) {
  Rng rng("random");
  for (int64_t n : kSizes) {
    Case c;
    c.shape = {5, n};
    c.ignore = 0.2;
    expect(c, Reduction::kMean, rng);
    c.weights = true;
    c.smoothing = 0.1f;
    expect(c, Reduction::kMean, rng);
    c.zs = 1e-2f;
    c.cap = 3.0f;
    expect(c, Reduction::kSum, rng);
    c.probs = true;
    expect(c, Reduction::kMean, rng);
    c.weights = false;
    c.cap = 0.0f;
    expect(c, Reduction::kSum, rng);
  }
}

TEST_P(CrossEntropy, Vocabularies) {
  Rng rng("vocab");
  Case c;
  c.shape = {3, 32000};
  c.ignore = 0.2;
  c.weights = true;
  c.smoothing = 0.1f;
  c.zs = 1e-4f;
  expect(c, Reduction::kMean, rng);
  for (int64_t n : {int64_t{128256}, int64_t{256000}}) {
    Case v;
    v.shape = {1, n};
    v.data = Data::kWide;
    expect(v, Reduction::kMean, rng);
    v.smoothing = 0.1f;
    v.cap = 30.0f;
    v.zs = 1e-4f;
    v.weights = true;
    expect(v, Reduction::kSum, rng);
    v.smoothing = 0.0f;
    v.lse_input = true;
    v.in_place = true;
    expect(v, Reduction::kNone, rng);
  }
}

TEST_P(CrossEntropy, Adversarial) {
  Rng rng("adversarial");
  for (Data d : all_data()) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{33}, int64_t{1001}}) {
      Case c;
      c.shape = {3, n};
      c.data = d;
      c.ignore = 0.2;
      expect(c, Reduction::kMean, rng);
      c.smoothing = 0.2f;
      c.weights = true;
      c.zs = 1e-3f;
      expect(c, Reduction::kNone, rng);
      c.cap = 10.0f;
      expect(c, Reduction::kSum, rng);
      c.probs = true;
      expect(c, Reduction::kMean, rng);
      c.empty_row = EmptyRow::kNan;
      c.probs = false;
      expect(c, Reduction::kSum, rng);
    }
  }
}

TEST_P(CrossEntropy, StridedAnyAxisWithMasks) {
  Rng rng("strided");
  const std::vector<int64_t> shape = {3, 5, 37};
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> sh = shape;
    std::swap(sh[static_cast<size_t>(axis)], sh[2]);  // classes (37) along `axis`
    Case c;
    c.shape = sh;
    c.axis = axis;
    c.src_strides = permuted_strides(sh, {2, 0, 1}, 3);
    c.ignore = 0.2;
    c.weights = true;
    c.smoothing = 0.1f;
    c.zs = 1e-3f;
    c.scale = 0.5f;
    c.temperature = 0.7f;
    // Masks broadcast as [C] along the last dim: only when the classes are last.
    c.bool_mask = c.add_mask = axis == 2;
    expect(c, Reduction::kMean, rng);
    c.cap = 5.0f;
    expect(c, Reduction::kNone, rng);
    c.probs = true;
    expect(c, Reduction::kSum, rng);
  }
}

TEST_P(CrossEntropy, InPlaceAndLseInput) {
  Rng rng("inplace");
  for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{1001}}) {
    Case c;
    c.shape = {4, n};
    c.ignore = 0.2;
    c.in_place = true;
    c.weights = true;
    expect(c, Reduction::kMean, rng);
    c.lse_input = true;
    c.zs = 1e-3f;
    expect(c, Reduction::kNone, rng);
    c.bool_mask = c.add_mask = true;
    c.cap = 4.0f;
    expect(c, Reduction::kSum, rng);
  }
}

TEST_P(CrossEntropy, ZLosses) {
  Rng rng("zloss");
  for (int64_t n : kSizes) {
    for (Data d : {Data::kUniform, Data::kWide, Data::kHigh, Data::kSomeNegInf, Data::kNan}) {
      Tensor x({4, n}, {}, 1);
      fill_rows(x, 1, d, rng);
      IndexTensor t({4});
      t.fill([&](int64_t i) -> int64_t { return n == 0 || i == 1 ? -100 : rng.index(n); });
      Tensor w({n});
      w.fill([&](int64_t) { return rng.uniform(0.5f, 2.0f); });
      for (bool with_target : {false, true}) {
        LossOptions lo;
        lo.reduction = Reduction::kNone;
        if (with_target) lo.weight = w.view();
        const TensorView tv = t.view();
        Tensor out({4}), dl({4}), dx({4, n});
        fill_normal(dl, rng);
        SoftmaxOptions o;
        o.scale = 0.75f;
        const float coef = 1e-3f;
        if (with_target) {
          smax::z_loss(x.view(), tv, out.view(), coef, lo, o);
          smax::z_loss_backward(x.view(), tv, dl.view(), dx.view(), coef, lo, o);
        } else {
          smax::z_loss(x.view(), out.view(), coef, lo, o);
          smax::z_loss_backward(x.view(), dl.view(), dx.view(), coef, lo, o);
        }
        const auto R = ref::z_loss(x.view(), with_target ? &tv : nullptr, coef, lo, o);
        const auto G = ref::z_loss_backward(x.view(), with_target ? &tv : nullptr, dl.view(), coef, lo, o);
        const std::string what = std::string("z_loss ") + data_name(d) + " n " + std::to_string(n) +
                                 (with_target ? " target" : "");
        EXPECT_TRUE(check_rows(out.dense(), R.rows, R.rows_mag, kLossEps, what));
        EXPECT_TRUE(check_rows(dx.dense(), G.dsrc, G.mag, kGradEps, what + " backward"));
        EXPECT_TRUE(out.guards_intact() && dx.guards_intact());
        // Spherical (class targets only).
        if (!with_target) continue;
        const float a = 1.5f, bb = 0.5f;
        smax::spherical_z_loss(x.view(), tv, out.view(), a, bb, lo, o);
        smax::spherical_z_loss_backward(x.view(), tv, dl.view(), dx.view(), a, bb, lo, o);
        const auto S = ref::spherical_z_loss(x.view(), tv, a, bb, lo, o);
        const auto SG = ref::spherical_z_loss_backward(x.view(), tv, dl.view(), a, bb, lo, o);
        EXPECT_TRUE(check_rows(out.dense(), S.rows, S.rows_mag, kLossEps, "spherical " + what));
        EXPECT_TRUE(check_rows(dx.dense(), SG.dsrc, SG.mag, kGradEps, "spherical " + what + " backward"));
      }
    }
  }
}

TEST_P(CrossEntropy, ThreadCountsBitwiseEqual) {
  Rng rng("threads");
  Tensor x({37, 1001});
  fill_rows(x, 1, Data::kWide, rng);
  IndexTensor t({37});
  t.fill([&](int64_t) -> int64_t { return rng.bernoulli(0.2) ? -100 : rng.index(1001); });
  Tensor dl({37});
  fill_normal(dl, rng);
  CrossEntropyOptions ce;
  ce.label_smoothing = 0.1f;
  ce.lse_square_scale = 1e-4f;
  ce.softcap = 20.0f;
  ce.loss.reduction = Reduction::kNone;
  std::vector<float> first_loss, first_grad, first_ent, first_fused;
  for (int threads : {1, 2, 3}) {
    SoftmaxOptions o;
    o.threads = threads;
    Tensor loss({37}), ent({37}), dx({37, 1001});
    ce.entropy = ent.view();
    smax::cross_entropy(x.view(), t.view(), loss.view(), ce, o);
    ce.entropy.reset();
    smax::cross_entropy_backward(x.view(), t.view(), dl.view(), dx.view(), ce, o);
    Tensor fused_loss({37}), fused_grad({37, 1001});
    ce.grad = fused_grad.view();
    smax::cross_entropy(x.view(), t.view(), fused_loss.view(), ce, o);
    ce.grad.reset();
    if (threads == 1) {
      first_loss = loss.dense();
      first_grad = dx.dense();
      first_ent = ent.dense();
      first_fused = fused_grad.dense();
      EXPECT_EQ(0, std::memcmp(first_loss.data(), fused_loss.dense().data(), first_loss.size() * 4));
      continue;
    }
    EXPECT_EQ(0, std::memcmp(first_fused.data(), fused_grad.dense().data(), first_fused.size() * 4))
        << threads;
    EXPECT_EQ(0, std::memcmp(first_loss.data(), loss.dense().data(), first_loss.size() * 4)) << threads;
    EXPECT_EQ(0, std::memcmp(first_ent.data(), ent.dense().data(), first_ent.size() * 4)) << threads;
    EXPECT_EQ(0, std::memcmp(first_grad.data(), dx.dense().data(), first_grad.size() * 4)) << threads;
  }
}

// ---------------------------------------------------------------------------
// Fuzz regressions (fuzz/regressions/{losses,options}/cross_entropy_*).
// ---------------------------------------------------------------------------

// Accuracy with softcap and an additive mask: the f32 t = fl(tanh(7.9375) +
// 7.9375) rounds to 8.9375 = fl(tanh(1e38) + 7.9375), a tie the float64
// capped logits do not have (entry 5 is the maximum). The library took the
// first f32 maximum (0); it now agrees with the oracle.
TEST_P(CrossEntropy, FuzzRegressionSoftcapMaskAccuracy) {
  const std::vector<float> x = {7.9375f, 0.125f, -4.625f, 2.25f, -4.625f, 1e38f,
                                0.5f,    7.9375f, 1.0f,   -2.0f, 7.9375f, 3.0f};
  const float mask = 7.9375f;
  SoftmaxOptions o;
  o.additive_mask = smax::make_view(&mask, {1});
  CrossEntropyOptions ce;
  ce.softcap = 1.0f;
  ce.loss.reduction = Reduction::kNone;
  std::vector<float> dst(2), acc(2, 7.0f);
  ce.accuracy = smax::make_view(acc.data(), {2});
  // Probability targets (all 0: the target's argmax is class 0).
  const std::vector<float> q(12, 0.0f);
  smax::cross_entropy(smax::make_view(x.data(), {2, 6}), smax::make_view(q.data(), {2, 6}),
                      smax::make_view(dst.data(), {2}), ce, o);
  CrossEntropyOptions rce = ce;
  rce.accuracy.reset();
  const ref::CrossEntropyRef r = ref::cross_entropy(smax::make_view(x.data(), {2, 6}),
                                                    smax::make_view(q.data(), {2, 6}), rce, o);
  EXPECT_EQ(acc[0], 0.0f);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(static_cast<double>(acc[i]), r.accuracy[i]) << i;
  // Class targets: 5 is right for row 0; row 1's u ties exactly at 7.9375
  // (entries 1 and 4): the first wins.
  const std::vector<int64_t> y = {5, 1};
  smax::cross_entropy(smax::make_view(x.data(), {2, 6}), smax::make_index_view(y.data(), {2}),
                      smax::make_view(dst.data(), {2}), ce, o);
  const ref::CrossEntropyRef ri = ref::cross_entropy(smax::make_view(x.data(), {2, 6}),
                                                     smax::make_index_view(y.data(), {2}), rce, o);
  EXPECT_EQ(acc[0], 1.0f);
  EXPECT_EQ(acc[1], 1.0f);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(static_cast<double>(acc[i]), ri.accuracy[i]) << i;
}

// A gradient row whose p_j factor (2 zs L, L = 1e38) is beyond f32: the
// kernel's f32 factor was inf, and inf * e^(t_j - L) = inf * 0 gave NaN at
// every other entry; now -inf at the max (float64 -5.2e45) and -0
// elsewhere, as the oracle. With dloss = 1 the factor (2e38) is still past
// 2^126: the float64 path, bitwise the same in the fused forward.
TEST_P(CrossEntropy, FuzzRegressionZlossOverflowRowNoNan) {
  const std::vector<float> x = {-kInfF, -6.8125f, -4.75f, 1e38f, 97.65625f, 0.1875f, -3.875f, 1.0f, -6.3125f};
  const std::vector<float> q(9, 0.0f);
  const std::vector<float> w = {0, 1, 0, 1, 0.5f, 0.5f, 0, 1.5f, 0.5f};
  const float dloss = -26114000.0f;
  CrossEntropyOptions ce;
  ce.lse_square_scale = 1.0f;
  ce.loss.weight = smax::make_view(w.data(), {9});
  std::vector<float> dx(9, 7.0f);
  smax::cross_entropy_backward(smax::make_view(x.data(), {9}), smax::make_view(q.data(), {9}),
                               smax::make_view(&dloss, {}), smax::make_view(dx.data(), {9}), ce);
  const ref::GradRef g = ref::cross_entropy_backward(smax::make_view(x.data(), {9}),
                                                     smax::make_view(q.data(), {9}),
                                                     smax::make_view(&dloss, {}), ce);
  EXPECT_EQ(dx[3], -kInfF);
  EXPECT_LT(g.dsrc[3], -static_cast<double>(FLT_MAX));  // -5.2e45: -inf in f32
  for (size_t j = 0; j < 9; ++j) {
    if (j == 3) continue;
    EXPECT_EQ(dx[j], 0.0f) << j;
    EXPECT_EQ(g.dsrc[j], 0.0) << j;
  }
  // The fused gradient (unit dloss) has the same bits as the backward pass.
  std::vector<float> dst(1), fused(9, 7.0f), back(9, 5.0f);
  CrossEntropyOptions fce = ce;
  fce.grad = smax::make_view(fused.data(), {9});
  smax::cross_entropy(smax::make_view(x.data(), {9}), smax::make_view(q.data(), {9}),
                      smax::make_view(dst.data(), {}), fce);
  const float one = 1.0f;
  smax::cross_entropy_backward(smax::make_view(x.data(), {9}), smax::make_view(q.data(), {9}),
                               smax::make_view(&one, {}), smax::make_view(back.data(), {9}), ce);
  EXPECT_EQ(std::memcmp(fused.data(), back.data(), sizeof(float) * 9), 0);
  EXPECT_NEAR(back[3], 2e38, 2e38 * 1e-6);  // 2 zs L, L = 1e38: still finite
  for (size_t j = 0; j < 9; ++j) EXPECT_FALSE(std::isnan(back[j])) << j;
}

// Softcap and a large additive mask (3500.875): t = fl(tanh(u) + 3500.875)
// keeps 2^-13 of the capped value, so p_j is off by ~2^-24 (|t_j| + |L|)
// relative against the float64 oracle: the 0.03 (|t_j| + |L|) term of the
// bound (the old bound, without it, was 20x too small here).
TEST_P(CrossEntropy, FuzzRegressionSoftcapMaskBound) {
  const std::vector<float> x = {-7.3125f, 1.875f, -6.75f, 0.1025390625f, -3.6875f, 2.0625f, 0.875f, 6.0625f};
  const std::vector<int64_t> y = {0};
  const float mask = 3500.875f, dloss = 0.25f;
  SoftmaxOptions o;
  o.additive_mask = smax::make_view(&mask, {1});
  CrossEntropyOptions ce;
  ce.softcap = 1.0f;
  std::vector<float> dx(8);
  smax::cross_entropy_backward(smax::make_view(x.data(), {1, 8}), smax::make_index_view(y.data(), {1}),
                               smax::make_view(&dloss, {}), smax::make_view(dx.data(), {1, 8}), ce, o);
  const ref::GradRef g = ref::cross_entropy_backward(smax::make_view(x.data(), {1, 8}),
                                                     smax::make_index_view(y.data(), {1}),
                                                     smax::make_view(&dloss, {}), ce, o);
  ASSERT_EQ(g.t_round.size(), 8u);
  for (size_t j = 0; j < 8; ++j) {
    EXPECT_GT(g.t_round[j], 0.0);
    const double f = 1.0 + std::fabs(x[j]) / ce.softcap + g.t_round[j];
    EXPECT_LE(std::fabs(dx[j] - g.dsrc[j]), 4e-6 * g.mag[j] * f + 1e-30) << j;
  }
  // Without the mask the term is absent (the oracle's t is the library's).
  const ref::GradRef g0 = ref::cross_entropy_backward(smax::make_view(x.data(), {1, 8}),
                                                      smax::make_index_view(y.data(), {1}),
                                                      smax::make_view(&dloss, {}), ce);
  for (double v : g0.t_round) EXPECT_EQ(v, 0.0);
}

// Fuzz regression (fuzz/regressions/losses/z_loss_backward_factor_overflow_nan):
// L ~ 8e37 and dloss 2.6e7 put the z-loss gradient factor 2 c L dloss (4e41)
// beyond f32: inf * p_j = inf * 0 gave NaN at every entry but the max. Now
// inf only at the max (its float64 value is beyond f32), exact 0 elsewhere.
TEST_P(CrossEntropy, FuzzRegressionZLossFactorOverflow) {
  const std::vector<float> x = {7.99999995e+37f, -FLT_MAX, 97.109375f, 0.0f, -kInfF};
  const float dloss = 25784000.0f;
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  std::vector<float> dx(5, 7.0f);
  smax::z_loss_backward(smax::make_view(x.data(), {1, 5}), smax::make_view(&dloss, {1}),
                        smax::make_view(dx.data(), {1, 5}), 1e-4f, lo);
  const ref::GradRef g = ref::z_loss_backward(smax::make_view(x.data(), {1, 5}), nullptr,
                                              smax::make_view(&dloss, {1}), 1e-4, lo);
  EXPECT_GT(g.dsrc[0], static_cast<double>(FLT_MAX));
  EXPECT_EQ(dx[0], kInfF);
  for (size_t j = 1; j < 5; ++j) {
    EXPECT_EQ(dx[j], 0.0f) << j;
    EXPECT_EQ(g.dsrc[j], 0.0) << j;
  }
}

// Fuzz regression (fuzz/regressions/losses/spherical_z_loss_backward_target_beyond_flt_max):
// a row of nearly equal denormals has std ~ 1e-41, so the gradient's terms
// are far beyond FLT_MAX. The target entry was the f32 rounding of
// alpha + beta (t_y - mean) (+inf) plus f in float64 (-9e38): +inf, where
// the float64 value is about -8.4e38 (-inf in f32). It is now one float64
// sum rounded once.
TEST_P(CrossEntropy, FuzzRegressionSphericalTargetBeyondFltMax) {
  const std::vector<float> x = {9.21956439e-39f, 9.21956439e-39f, 9.19660551e-39f, 9.21956439e-39f};
  const std::vector<int64_t> y = {0};
  const float dloss = 0.25f;
  LossOptions lo;
  std::vector<float> dx(4, 7.0f);
  smax::spherical_z_loss_backward(smax::make_view(x.data(), {1, 4}), smax::make_index_view(y.data(), {1}),
                                  smax::make_view(&dloss, {}), smax::make_view(dx.data(), {1, 4}),
                                  1.0f, 1.0f, lo);
  const ref::GradRef g = ref::spherical_z_loss_backward(
      smax::make_view(x.data(), {1, 4}), smax::make_index_view(y.data(), {1}),
      smax::make_view(&dloss, {}), 1.0, 1.0, lo);
  for (size_t j = 0; j < 4; ++j) {
    const double r = g.dsrc[j];
    if (std::fabs(r) >= 0x1.ffffffp127) {
      EXPECT_EQ(dx[j], r > 0 ? kInfF : -kInfF) << j << " ref " << r;
    } else {
      EXPECT_TRUE(std::isfinite(dx[j])) << j;
      EXPECT_LE(std::fabs(dx[j] - r), kGradEps * g.mag[j] + 1e-30) << j << " ref " << r;
    }
  }
  EXPECT_LT(g.dsrc[0], -static_cast<double>(FLT_MAX));  // the case the fix is about
}

// Fuzz regression (fuzz/regressions/losses/cross_entropy_backward_softcap_bool_mask_nan):
// with softcap the additive mask is added after the cap, to logits the bool
// mask had already set to -inf; a NaN in the additive mask at a hidden entry
// then made the entry NaN. The bool mask wins (as without softcap): the loss
// and gradients equal those with 0 there, hidden entries get exactly 0.
TEST_P(CrossEntropy, FuzzRegressionSoftcapBoolMaskBeatsNanMask) {
  const std::vector<float> x = {0.5f, -1.25f, 2.0f, 0.75f, -0.5f, 1.5f, 0.25f, -2.0f};
  const std::vector<int64_t> y = {0, 3};
  const uint8_t keep[8] = {1, 1, 0, 1, 0, 1, 1, 1};
  const float dloss = 0.25f;
  for (int variant = 0; variant < 2; ++variant) {
    const float hidden = variant == 0 ? kNanF : 0.0f;
    const float add[8] = {0.5f, 0.0f, hidden, -1.0f, hidden, 0.25f, 0.0f, 0.0f};
    SoftmaxOptions o;
    o.additive_mask = smax::make_view(add, {2, 4});
    o.bool_mask = smax::make_bool_view(keep, {2, 4});
    CrossEntropyOptions ce;
    ce.softcap = 1.0f;
    std::vector<float> dx(8, 7.0f), loss(1, 7.0f);
    smax::cross_entropy(smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}),
                        smax::make_view(loss.data(), {}), ce, o);
    smax::cross_entropy_backward(smax::make_view(x.data(), {2, 4}),
                                 smax::make_index_view(y.data(), {2}), smax::make_view(&dloss, {}),
                                 smax::make_view(dx.data(), {2, 4}), ce, o);
    // The oracles agree (the bool mask wins there too).
    const ref::CrossEntropyRef R = ref::cross_entropy(
        smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}), ce, o);
    EXPECT_NEAR(loss[0], R.loss.reduce(R.loss.rows), 1e-5 * (1 + std::fabs(R.loss.reduce(R.loss.rows))));
    const ref::GradRef G = ref::cross_entropy_backward(
        smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}),
        smax::make_view(&dloss, {}), ce, o);
    for (size_t j = 0; j < 8; ++j) {
      EXPECT_LE(std::fabs(dx[j] - G.dsrc[j]), 1e-5 * G.mag[j] + 1e-30) << j << " ref " << G.dsrc[j];
    }
    static std::vector<float> loss0, dx0;
    if (variant == 0) {
      loss0 = loss;
      dx0 = dx;
      EXPECT_TRUE(std::isfinite(loss[0]));
      for (int j = 0; j < 8; ++j) {
        EXPECT_FALSE(std::isnan(dx[j])) << j;
        if (keep[j] == 0) {
          EXPECT_EQ(dx[j], 0.0f) << j;
        }
      }
    } else {
      EXPECT_EQ(std::memcmp(loss.data(), loss0.data(), sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(dx.data(), dx0.data(), sizeof(float) * 8), 0);
    }
  }
  // Every entry hidden, NaN in the additive mask: an empty row (0 gradient).
  const uint8_t none[8] = {};
  const float nan_add[8] = {kNanF, kNanF, kNanF, kNanF, kNanF, kNanF, kNanF, kNanF};
  SoftmaxOptions o;
  o.additive_mask = smax::make_view(nan_add, {2, 4});
  o.bool_mask = smax::make_bool_view(none, {2, 4});
  CrossEntropyOptions ce;
  ce.softcap = 1.0f;
  std::vector<float> dx(8, 7.0f);
  smax::cross_entropy_backward(smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}),
                               smax::make_view(&dloss, {}), smax::make_view(dx.data(), {2, 4}), ce, o);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(dx[j], 0.0f) << j;
  // The forward of such rows (fuzz/regressions/losses/cross_entropy_softcap_all_hidden_nan_mask):
  // empty rows (0 with the default policy), in the library and the oracle.
  for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
    ce.loss.reduction = red;
    ce.loss.empty_mean = smax::EmptyMean::kZero;
    std::vector<float> loss(2, 7.0f);
    const TensorView lv = red == Reduction::kNone ? smax::make_view(loss.data(), {2})
                                                  : smax::make_view(loss.data(), {});
    smax::cross_entropy(smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}), lv,
                        ce, o);
    const ref::CrossEntropyRef R = ref::cross_entropy(
        smax::make_view(x.data(), {2, 4}), smax::make_index_view(y.data(), {2}), ce, o);
    EXPECT_EQ(loss[0], 0.0f);
    for (double v : R.loss.rows) EXPECT_EQ(v, 0.0);
  }
}

SMAX_INSTANTIATE_PER_TARGET(CrossEntropy);

// ---- hand vectors (PyTorch 2.x, float64, and docs/vectors.md, "Losses") ----------
TEST(CrossEntropyHand, PyTorchWeightsAndSmoothing) {
  const float xv[] = {1, 2, 3, 0.5f, -1, 2, 0, 0, 0};
  const int64_t tv[] = {2, 0, -100};
  const float wv[] = {1, 2, 0.5f};
  CrossEntropyOptions ce;
  ce.loss.weight = smax::make_view(wv, {3});
  ce.label_smoothing = 0.1f;
  const TensorView x = smax::make_view(xv, {3, 3});
  const TensorView t = smax::make_index_view(tv, {3});
  float none[3], mean, sum;
  ce.loss.reduction = Reduction::kNone;
  smax::cross_entropy(x, t, smax::make_view(none, {3}), ce);
  EXPECT_NEAR(none[0], 0.36431004651848226, 1e-6);
  EXPECT_NEAR(none[1], 1.845333151601443, 1e-6);
  EXPECT_EQ(none[2], 0.0f);
  ce.loss.reduction = Reduction::kMean;
  smax::cross_entropy(x, t, smax::make_view(&mean, {}), ce);
  EXPECT_NEAR(mean, 1.4730954654132837, 1e-6);
  ce.loss.reduction = Reduction::kSum;
  smax::cross_entropy(x, t, smax::make_view(&sum, {}), ce);
  EXPECT_NEAR(sum, 2.2096431981199256, 1e-6);
  ce.loss.reduction = Reduction::kMean;
  const float one = 1.0f;
  float g[9];
  smax::cross_entropy_backward(x, t, smax::make_view(&one, {}), smax::make_view(g, {3, 3}), ce);
  const double want[] = {0.011789327642143717, 0.048008533509590216, -0.059797861151734,
                         -0.503414289771753,   -0.0179348114498674,  0.5213491012216203,
                         0, 0, 0};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
}

TEST(CrossEntropyHand, PyTorchProbabilityTargets) {
  const float xv[] = {1, 2, 3, 0.5f, -1, 2, 0, 0, 0};
  const float qv[] = {0.2f, 0.3f, 0.5f, 1, 0, 0, 0.25f, 0.25f, 0.5f};
  const float wv[] = {1, 2, 0.5f};
  CrossEntropyOptions ce;
  ce.loss.weight = smax::make_view(wv, {3});
  ce.label_smoothing = 0.2f;
  const TensorView x = smax::make_view(xv, {3, 3});
  const TensorView q = smax::make_view(qv, {3, 3});
  float none[3], mean, sum;
  ce.loss.reduction = Reduction::kNone;
  smax::cross_entropy(x, q, smax::make_view(none, {3}), ce);
  EXPECT_NEAR(none[0], 1.5041637351703017, 2e-6);
  EXPECT_NEAR(none[1], 1.9493550065457292, 2e-6);
  EXPECT_NEAR(none[2], 1.13523269829038, 2e-6);
  ce.loss.reduction = Reduction::kMean;
  smax::cross_entropy(x, q, smax::make_view(&mean, {}), ce);
  EXPECT_NEAR(mean, 1.5295838133354704, 2e-6);
  ce.loss.reduction = Reduction::kSum;
  smax::cross_entropy(x, q, smax::make_view(&sum, {}), ce);
  EXPECT_NEAR(sum, 4.588751440006411, 4e-6);
  const float one = 1.0f;
  float g[9];
  smax::cross_entropy_backward(x, q, smax::make_view(&one, {}), smax::make_view(g, {3, 3}), ce);
  const double want[] = {-0.13003385146379168, -0.35065810773451717, 0.48069195919830865,
                         -0.6855332614552955,  -0.09291700762028964, 0.7784502690755851,
                         0.07777777777777779,  -0.18888888888888886, 0.11111111111111112};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
}

TEST(CrossEntropyHand, PlainAndAllIgnored) {
  const float xv[] = {0, 0};
  const int64_t tv[] = {0};
  float l;
  smax::cross_entropy(smax::make_view(xv, {1, 2}), smax::make_index_view(tv, {1}),
                      smax::make_view(&l, {}));
  EXPECT_NEAR(l, std::log(2.0), 1e-7);
  float g[2];
  const float one = 1.0f;
  smax::cross_entropy_backward(smax::make_view(xv, {1, 2}), smax::make_index_view(tv, {1}),
                               smax::make_view(&one, {}), smax::make_view(g, {1, 2}));
  EXPECT_FLOAT_EQ(g[0], -0.5f);
  EXPECT_FLOAT_EQ(g[1], 0.5f);
  // All ignored + mean: NaN like PyTorch, 0 on request; zero gradient.
  const int64_t ign[] = {-100, -100};
  const float x2[] = {1, 2, 3, 4};
  CrossEntropyOptions ce;
  smax::cross_entropy(smax::make_view(x2, {2, 2}), smax::make_index_view(ign, {2}),
                      smax::make_view(&l, {}), ce);
  EXPECT_TRUE(std::isnan(l));
  ce.loss.empty_mean = EmptyMean::kZero;
  smax::cross_entropy(smax::make_view(x2, {2, 2}), smax::make_index_view(ign, {2}),
                      smax::make_view(&l, {}), ce);
  EXPECT_EQ(l, 0.0f);
  float g2[4] = {9, 9, 9, 9};
  smax::cross_entropy_backward(smax::make_view(x2, {2, 2}), smax::make_index_view(ign, {2}),
                               smax::make_view(&one, {}), smax::make_view(g2, {2, 2}), ce);
  for (float v : g2) EXPECT_EQ(v, 0.0f);
}

// kMean where every counted row has weight 0 (targets 1 and 3 weigh 0, row
// 1 is ignored): the loss is NaN like PyTorch, and so is the gradient of
// every element of the counted rows (nll_loss's backward multiplies by
// w_y / sum w = 0 / 0, and log_softmax's spreads it over the row), a
// bool-masked entry excepted (smax's rule: exactly 0); the ignored row is 0.
// The backward, the fused gradient (ce.grad), label smoothing, the z-loss
// and the spherical z-loss with targets, and the float64 oracles agree;
// EmptyMean::kZero gives 0 everywhere. (The gradient used to be exactly 0.)
TEST(CrossEntropyHand, ZeroWeightSumMeanGradientIsNaN) {
  const ZeroWeightSumProblem p;
  const TensorView x = p.x(), t = p.target(), one = p.dloss();
  const SoftmaxOptions o = p.options();
  for (int zero = 0; zero < 2; ++zero) {
    for (float a : {0.0f, 0.1f}) {
      CrossEntropyOptions ce;
      ce.loss = p.loss_options(zero);
      ce.label_smoothing = a;
      const std::string what = "a=" + std::to_string(a);
      float g[12], fused[12], loss = 7.0f;
      std::fill(g, g + 12, 7.0f);
      std::fill(fused, fused + 12, 7.0f);
      smax::cross_entropy_backward(x, t, one, smax::make_view(g, {3, 4}), ce, o);
      const ref::GradRef R = ref::cross_entropy_backward(x, t, one, ce, o);
      p.expect_gradient(g, R.dsrc, zero != 0, "backward " + what);
      CrossEntropyOptions cf = ce;
      cf.grad = smax::make_view(fused, {3, 4});
      smax::cross_entropy(x, t, smax::make_view(&loss, {}), cf, o);
      p.expect_gradient(fused, R.dsrc, zero != 0, "fused " + what);
      if (zero) {
        EXPECT_EQ(loss, 0.0f) << what;
      } else {
        EXPECT_TRUE(std::isnan(loss)) << what;
      }
    }
    const LossOptions lo = p.loss_options(zero);
    float g[12];
    std::fill(g, g + 12, 7.0f);
    smax::z_loss_backward(x, t, one, smax::make_view(g, {3, 4}), 1e-2f, lo, o);
    p.expect_gradient(g, ref::z_loss_backward(x, &t, one, 1e-2, lo, o).dsrc, zero != 0, "z_loss");
    std::fill(g, g + 12, 7.0f);
    smax::spherical_z_loss_backward(x, t, one, smax::make_view(g, {3, 4}), 1.0f, 2.0f, lo, o);
    p.expect_gradient(g, ref::spherical_z_loss_backward(x, t, one, 1.0, 2.0, lo, o).dsrc,
                      zero != 0, "spherical_z_loss");
  }
}

TEST(CrossEntropyHand, SpecZLosses) {
  // PaLM: x = [0, 0], c = 1e-4 -> 4.8045e-5, gradient [6.9315e-5, 6.9315e-5].
  const float x[] = {0, 0};
  float l, g[2];
  const float one = 1.0f;
  LossOptions lo;
  smax::z_loss(smax::make_view(x, {2}), smax::make_view(&l, {}), 1e-4f, lo);
  EXPECT_NEAR(l, 4.8045e-5, 1e-9);
  smax::z_loss_backward(smax::make_view(x, {2}), smax::make_view(&one, {}), smax::make_view(g, {2}),
                        1e-4f, lo);
  EXPECT_NEAR(g[0], 6.9315e-5, 1e-9);
  EXPECT_NEAR(g[1], 6.9315e-5, 1e-9);
  // Spherical: o = [1, -1], t = 0, a = 1, b = 0 -> 0.3132617.
  const float o1[] = {1, -1};
  const int64_t t0[] = {0};
  smax::spherical_z_loss(smax::make_view(o1, {1, 2}), smax::make_index_view(t0, {1}),
                         smax::make_view(&l, {}), 1.0f, 0.0f, lo);
  EXPECT_NEAR(l, 0.3132617, 1e-6);
  // o = [3, 1, 2], t = 0, a = 1, b = 1 -> 0.5870753, gradient
  // [-0.0906411, -0.0906411, 0.1812823].
  const float o2[] = {3, 1, 2};
  smax::spherical_z_loss(smax::make_view(o2, {1, 3}), smax::make_index_view(t0, {1}),
                         smax::make_view(&l, {}), 1.0f, 1.0f, lo);
  EXPECT_NEAR(l, 0.5870753, 1e-6);
  float g3[3];
  smax::spherical_z_loss_backward(smax::make_view(o2, {1, 3}), smax::make_index_view(t0, {1}),
                                  smax::make_view(&one, {}), smax::make_view(g3, {1, 3}), 1.0f,
                                  1.0f, lo);
  EXPECT_NEAR(g3[0], -0.0906411, 1e-6);
  EXPECT_NEAR(g3[1], -0.0906411, 1e-6);
  EXPECT_NEAR(g3[2], 0.1812823, 1e-6);
}

// ---- float64 finite differences of the oracles --------------------------------------
// x on a grid of 1/64 and h = 1/256, so x +- h is exact in f32 (the oracles
// read f32 views); central differences of sum_r dloss_r * loss_r.
template <typename Loss, typename Grad>
void finite_differences(const std::vector<int64_t>& shape, Loss loss, Grad grad, Rng& rng,
                        const std::string& what, double tol = 2e-4) {
  Tensor x(shape);
  x.fill([&](int64_t) { return std::round(rng.normal() * 128.0f) / 64.0f; });
  const std::vector<double> g = grad(x);
  const double h = 1.0 / 256.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float x0 = x.at(i);
    x.at(i) = static_cast<float>(x0 + h);
    const double up = loss(x);
    x.at(i) = static_cast<float>(x0 - h);
    const double down = loss(x);
    x.at(i) = x0;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(g[static_cast<size_t>(i)], fd, tol * (1.0 + std::fabs(fd))) << what << " element " << i;
  }
}

TEST(CrossEntropyReference, FiniteDifferences) {
  Rng rng("fd");
  const std::vector<int64_t> shape = {3, 6};
  Tensor dl({3});
  fill_normal(dl, rng);
  const std::vector<double> dlv = to_dense(dl.view());
  auto dot = [&](const std::vector<double>& rows) {
    double s = 0;
    for (size_t r = 0; r < rows.size(); ++r) s += dlv[r] * rows[r];
    return s;
  };
  IndexTensor t({3});
  const int64_t tv[] = {1, 5, 0};
  for (int i = 0; i < 3; ++i) t.at(i) = tv[i];
  Tensor w({6});
  w.fill([&](int64_t) { return rng.uniform(0.5f, 2.0f); });
  Tensor add({6});
  add.fill([&](int64_t i) { return i == 3 ? -kInfF : 0.25f * static_cast<float>(i); });
  Tensor q(shape);
  // No target mass on the masked class 3 (that would make the loss +inf).
  q.fill([&](int64_t i) { return i % 6 == 3 ? 0.0f : static_cast<float>(1 + i % 4) / 16.0f; });
  for (bool probs : {false, true}) {
    CrossEntropyOptions ce;
    ce.loss.reduction = Reduction::kNone;
    ce.loss.weight = w.view();
    ce.label_smoothing = 0.15f;
    ce.lse_square_scale = 0.05f;
    ce.softcap = 2.5f;
    SoftmaxOptions o;
    o.scale = 0.5f;
    o.additive_mask = add.view();
    const TensorView target = probs ? q.view() : t.view();
    finite_differences(
        shape, [&](const Tensor& x) { return dot(ref::cross_entropy(x.view(), target, ce, o).loss.rows); },
        [&](const Tensor& x) { return ref::cross_entropy_backward(x.view(), target, dl.view(), ce, o).dsrc; },
        rng, probs ? "cross_entropy probs" : "cross_entropy");
  }
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  const TensorView tview = t.view();
  finite_differences(
      shape, [&](const Tensor& x) { return dot(ref::z_loss(x.view(), &tview, 0.1, lo).rows); },
      [&](const Tensor& x) { return ref::z_loss_backward(x.view(), &tview, dl.view(), 0.1, lo).dsrc; },
      rng, "z_loss");
  finite_differences(
      shape, [&](const Tensor& x) { return dot(ref::spherical_z_loss(x.view(), tview, 1.5, 0.25, lo).rows); },
      [&](const Tensor& x) {
        return ref::spherical_z_loss_backward(x.view(), tview, dl.view(), 1.5, 0.25, lo).dsrc;
      },
      rng, "spherical_z_loss");
}

// ---- errors: smax::Error naming the argument, nothing written ------------------------
TEST(CrossEntropyErrors, EveryPathThrowsBeforeWriting) {
  Tensor x({4, 5});
  x.fill([](int64_t i) { return static_cast<float>(i % 7); });
  IndexTensor t({4});
  t.fill([](int64_t i) -> int64_t { return i % 5; });
  const std::vector<int64_t> scalar;
  Tensor dst(scalar), rows({4}), dx({4, 5}), one(scalar);
  one.at(0) = 1.0f;
  auto ce_call = [&](const CrossEntropyOptions& ce, const TensorView& target, const TensorView& out,
                     const SoftmaxOptions& o = {}) {
    return [&, ce, target, out, o] { smax::cross_entropy(x.view(), target, out, ce, o); };
  };
  CrossEntropyOptions ce;
  // Targets.
  IndexTensor bad({4});
  bad.fill([](int64_t i) -> int64_t { return i == 2 ? 5 : 0; });
  EXPECT_TRUE(throws_invalid(ce_call(ce, bad.view(), dst.view()), "target 5"));
  bad.at(2) = -1;
  EXPECT_TRUE(throws_invalid(ce_call(ce, bad.view(), dst.view()), "target -1"));
  IndexTensor short_t({3});
  EXPECT_TRUE(throws_invalid(ce_call(ce, short_t.view(), dst.view()), "target"));
  Tensor ftarget({4});
  EXPECT_TRUE(throws_invalid(ce_call(ce, ftarget.view(), dst.view()), "target"));
  // Weights.
  Tensor w4({4});
  ce.loss.weight = w4.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "weight shape"));
  ce = {};
  // Options.
  for (float a : {-0.1f, 1.5f, kNanF}) {
    ce.label_smoothing = a;
    EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "label_smoothing"));
  }
  ce = {};
  for (float cap : {-1.0f, kNanF, kInfF}) {
    ce.softcap = cap;
    EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "softcap"));
  }
  ce = {};
  for (float zs : {-1e-4f, kNanF}) {
    ce.lse_square_scale = zs;
    EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "lse_square_scale"));
  }
  ce = {};
  ce.loss.reduction = static_cast<Reduction>(7);
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "reduction"));
  ce = {};
  SoftmaxOptions bad_o;
  bad_o.temperature = 0.0f;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view(), bad_o), "temperature"));
  // Outputs: wrong shapes, overlaps.
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), rows.view()), "dst"));
  ce.loss.reduction = Reduction::kNone;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "dst"));
  Tensor rows5({5});
  ce.lse = rows5.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), rows.view()), "lse"));
  ce.lse = rows.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), rows.view()), "overlaps"));
  ce = {};
  ce.entropy = x.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "entropy"));
  ce = {};
  // Backward.
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy_backward(x.view(), t.view(), rows.view(), dx.view(), ce); },
                             "dloss"));
  TensorView part = x.view();
  part.data = static_cast<float*>(part.data) + 1;
  part.shape[0] = 3;
  TensorView x3 = x.view();
  x3.shape[0] = 3;
  IndexTensor t3({3});
  t3.fill([](int64_t) -> int64_t { return 0; });
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy_backward(x3, t3.view(), one.view(), part, ce); },
                             "overlaps"));
  // Fused gradient: wrong shape, partial overlap with src, overlap with an
  // output, given to the backward.
  ce = {};
  ce.grad = rows.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "grad"));
  ce.grad = part;
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy(x3, t3.view(), one.view(), ce); }, "overlaps"));
  Tensor g45({4, 5});
  ce.grad = g45.view();
  ce.loss.reduction = Reduction::kNone;
  TensorView g_row = g45.view();
  g_row.rank = 1;
  g_row.shape[0] = 4;
  g_row.strides[0] = 5;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), g_row), "overlaps"));
  ce.loss.reduction = Reduction::kMean;
  ce.lse = g_row;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "overlaps"));
  ce.lse.reset();
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy_backward(x.view(), t.view(), one.view(), dx.view(), ce); },
                             "grad"));
  ce = {};
  // z-losses.
  EXPECT_TRUE(throws_invalid([&] { smax::z_loss(x.view(), dst.view(), -1.0f); }, "coefficient"));
  LossOptions lo;
  lo.weight = w4.view();
  EXPECT_TRUE(throws_invalid([&] { smax::z_loss(x.view(), dst.view(), 1e-4f, lo); }, "weight"));
  EXPECT_TRUE(throws_invalid([&] { smax::spherical_z_loss(x.view(), t.view(), dst.view(), 0.0f, 1.0f); }, "a must"));
  EXPECT_TRUE(throws_invalid([&] { smax::spherical_z_loss(x.view(), t.view(), dst.view(), 1.0f, kNanF); }, "b must"));
  EXPECT_TRUE(throws_invalid([&] { smax::spherical_z_loss(x.view(), bad.view(), dst.view(), 1.0f, 0.0f); }, "target"));
  // Nothing was written anywhere.
  for (const Tensor* out : {&dst, &rows, &dx, &rows5, &g45}) {
    EXPECT_TRUE(out->guards_intact());
    for (float v : out->dense()) EXPECT_EQ(v, kSentinel);
  }
}

}  // namespace
}  // namespace smax_test

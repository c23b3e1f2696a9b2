// tests/test_reweight.cc: the re-weighting normalisers of smax/reweight.h
// (SA-Softmax, sigmoid and softplus normalisers, Power-Softmax,
// probability-domain temperature, logit standardisation), forward and
// backward, against the float64 oracles of src/reference/reweight.h on
// every SIMD target, with the error bounds stated in the header:
//  * the hand vectors of docs/normalizers.md ("Re-weighting normalisers");
//  * random and adversarial rows (all of test_util's Data kinds) at sizes
//    0..32000 and one 128256 row;
//  * every axis of a strided 3-D tensor with bool + additive masks and a
//    scale, in place, thread counts 1/2/3 bitwise equal;
//  * backward vs the reference VJP (random upstream gradient), and the
//    reference VJP vs float64 central finite differences of the reference
//    forward;
//  * error paths: smax::Error naming the argument, nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "reference/bounds.h"
#include "reference/reweight.h"
#include "reference/rows.h"
#include "smax/reweight.h"
#include "test_util.h"

namespace smax_test {
namespace {

namespace ref = smax::reference;
using ref::Row;

// ---------------------------------------------------------------------------
// The op variants under test.
// ---------------------------------------------------------------------------
enum class Kind { kSA, kSigmoid, kSoftplus, kPower, kProb, kLS };

struct Spec {
  std::string name;
  Kind kind;
  smax::SelfAdjustOptions sa;
  smax::SigmoidNormalizerOptions sig;
  smax::SoftplusNormalizerOptions sp;
  int p = 2;
  float T = 1.0f;
  smax::LogitStandardizationOptions ls;
};

Spec make(const std::string& name, Kind kind) {
  Spec s;
  s.name = name;
  s.kind = kind;
  return s;
}

std::vector<Spec> all_specs() {
  std::vector<Spec> v;
  Spec s;
  s = make("sa", Kind::kSA);
  v.push_back(s);
  s = make("sa_normalized", Kind::kSA);
  s.sa.normalized = true;
  v.push_back(s);
  s.name = "sa_normalized_const_bounds";
  s.sa.grad_through_bounds = false;
  v.push_back(s);
  s = make("sigmoid", Kind::kSigmoid);
  v.push_back(s);
  s.name = "sigmoid_visible";
  s.sig.count_visible = true;
  v.push_back(s);
  s = make("softplus", Kind::kSoftplus);
  s.sp.head_dim = 64;
  v.push_back(s);
  s = make("softplus_lambda_power3", Kind::kSoftplus);
  s.sp.lambda = 0.75f;
  s.sp.power = 3.0f;
  v.push_back(s);
  s = make("power2", Kind::kPower);
  v.push_back(s);
  s.name = "power6";
  s.p = 6;
  v.push_back(s);
  s = make("prob_T0.5", Kind::kProb);
  s.T = 0.5f;
  v.push_back(s);
  s.name = "prob_T3";
  s.T = 3.0f;
  v.push_back(s);
  s = make("standardize", Kind::kLS);
  s.ls.temperature = 2.0f;
  v.push_back(s);
  s.name = "standardize_biased";
  s.ls.unbiased = false;
  s.ls.temperature = 0.5f;
  v.push_back(s);
  return v;
}

void run_forward(const Spec& s, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& o) {
  switch (s.kind) {
    case Kind::kSA: smax::self_adjust_softmax(src, dst, s.sa, o); return;
    case Kind::kSigmoid: smax::sigmoid_normalizer(src, dst, s.sig, o); return;
    case Kind::kSoftplus: smax::softplus_normalizer(src, dst, s.sp, o); return;
    case Kind::kPower: smax::power_softmax(src, dst, s.p, o); return;
    case Kind::kProb: smax::probability_temperature(src, dst, s.T, o); return;
    case Kind::kLS: smax::logit_standardization(src, dst, s.ls, o); return;
  }
}

std::vector<double> ref_forward(const Spec& s, const TensorView& src, const SoftmaxOptions& o) {
  switch (s.kind) {
    case Kind::kSA: return ref::self_adjust_softmax(src, s.sa, o);
    case Kind::kSigmoid: return ref::sigmoid_normalizer(src, s.sig, o);
    case Kind::kSoftplus: return ref::softplus_normalizer(src, s.sp, o);
    case Kind::kPower: return ref::power_softmax(src, s.p, o);
    case Kind::kProb: return ref::probability_temperature(src, s.T, o);
    case Kind::kLS: return ref::logit_standardization(src, s.ls, o);
  }
  return {};
}

// `in` is src (the logits), except for the sigmoid normaliser: its saved y.
void run_backward(const Spec& s, const TensorView& in, const TensorView& dy,
                  const TensorView& dx, const SoftmaxOptions& o) {
  switch (s.kind) {
    case Kind::kSA: smax::self_adjust_softmax_backward(in, dy, dx, s.sa, o); return;
    case Kind::kSigmoid: smax::sigmoid_normalizer_backward(in, dy, dx, o); return;
    case Kind::kSoftplus: smax::softplus_normalizer_backward(in, dy, dx, s.sp, o); return;
    case Kind::kPower: smax::power_softmax_backward(in, dy, dx, s.p, o); return;
    case Kind::kProb: smax::probability_temperature_backward(in, dy, dx, s.T, o); return;
    case Kind::kLS: smax::logit_standardization_backward(in, dy, dx, s.ls, o); return;
  }
}

std::vector<double> ref_backward(const Spec& s, const TensorView& in, const TensorView& dy,
                                 const SoftmaxOptions& o) {
  switch (s.kind) {
    case Kind::kSA: return ref::self_adjust_softmax_backward(in, dy, s.sa, o);
    case Kind::kSigmoid: return ref::sigmoid_normalizer_backward(in, dy, o);
    case Kind::kSoftplus: return ref::softplus_normalizer_backward(in, dy, s.sp, o);
    case Kind::kPower: return ref::power_softmax_backward(in, dy, s.p, o);
    case Kind::kProb: return ref::probability_temperature_backward(in, dy, s.T, o);
    case Kind::kLS: return ref::logit_standardization_backward(in, dy, s.ls, o);
  }
  return {};
}

// ---------------------------------------------------------------------------
// Error bounds (include/smax/reweight.h), per row, from float64 quantities:
// src/reference/bounds.h (shared with the fuzz harness and smax run --check).
// t: the row's logits, g: upstream gradient, y: the reference output row,
// s: the chain factor. Returns one bound per element.
// ---------------------------------------------------------------------------
// The bound's view of a Spec (src/reference/bounds.h).
ref::ReweightBound bound_spec(const Spec& s) {
  ref::ReweightBound b;
  switch (s.kind) {
    case Kind::kSA: b.op = ref::ReweightOp::kSelfAdjust; break;
    case Kind::kSigmoid: b.op = ref::ReweightOp::kSigmoid; break;
    case Kind::kSoftplus: b.op = ref::ReweightOp::kSoftplus; break;
    case Kind::kPower: b.op = ref::ReweightOp::kPower; break;
    case Kind::kProb: b.op = ref::ReweightOp::kProbabilityTemperature; break;
    case Kind::kLS: b.op = ref::ReweightOp::kLogitStandardization; break;
  }
  b.sa = s.sa;
  b.sp = s.sp;
  b.p = s.p;
  b.T = s.T;
  b.ls = s.ls;
  return b;
}

Row forward_bound(const Spec& s, const Row& t, const Row& y) {
  return ref::reweight_forward_bound(bound_spec(s), t, y);
}

// Backward bound; t is z for softplus (lambda = dz/dt given), y the reference
// forward of the row, dx the reference backward (for relative terms).
Row backward_bound(const Spec& s, const Row& t, const Row& g, const Row& y, const Row& dx,
                   double scale, double lambda) {
  return ref::reweight_backward_bound(bound_spec(s), t, g, y, dx, scale, lambda);
}

// Dense logical index of row r, element k: ref::dense_index (bounds.h).
using ref::dense_index;

Row gather_row(const ref::RefRows& R, const std::vector<double>& dense, int64_t r) {
  Row v(static_cast<size_t>(R.n));
  for (int64_t k = 0; k < R.n; ++k) v[static_cast<size_t>(k)] = dense[dense_index(R, r, k)];
  return v;
}

// Compares out with ref elementwise within the bounds; exact 0 required where
// `exact_zero` (masked positions).
::testing::AssertionResult compare(const std::vector<double>& out, const std::vector<double>& refv,
                                   const std::vector<double>& bound,
                                   const std::vector<char>& exact_zero, const std::string& what) {
  if (out.size() != refv.size()) {
    return ::testing::AssertionFailure() << what << ": size mismatch";
  }
  CheckResult res;
  for (size_t i = 0; i < refv.size(); ++i) {
    check_element(res, static_cast<int64_t>(i), static_cast<float>(out[i]), refv[i], bound[i],
                  exact_zero[i] != 0);
  }
  return to_assertion(res, what);
}

// The logit rows of src for the op `s` (softplus: z = fl(lambda t)).
ref::RefRows logit_rows(const Spec& s, const TensorView& src, const SoftmaxOptions& o) {
  ref::RefRows R = ref::ref_rows("test", src, o, true);
  if (s.kind == Kind::kSoftplus) R.values = [&] {
    const std::vector<double> z = ref::softplus_z(src, s.sp, o);
    std::vector<double> v(R.values.size());
    for (int64_t r = 0; r < R.rows; ++r) {
      for (int64_t k = 0; k < R.n; ++k) {
        v[static_cast<size_t>(r * R.n + k)] = z[dense_index(R, r, k)];
      }
    }
    return v;
  }();
  return R;
}

double softplus_lambda_of(const Spec& s, const Row& t) {
  if (s.sp.lambda) return *s.sp.lambda;
  int64_t vis = 0;
  for (double v : t) vis += v != -kInfD;
  return static_cast<float>(std::log(static_cast<double>(std::max<int64_t>(vis, 1))) /
                            std::log(static_cast<double>(s.sp.head_dim)));
}

// Full forward check of src -> dst (dst poisoned first).
::testing::AssertionResult check_forward(const Spec& s, const Tensor& src, Tensor& dst,
                                         const SoftmaxOptions& o, const std::string& what) {
  dst.poison();
  run_forward(s, src.view(), dst.view(), o);
  if (!dst.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const std::vector<double> refv = ref_forward(s, src.view(), o);
  const std::vector<double> out = to_dense(dst.view());
  const ref::RefRows R = logit_rows(s, src.view(), o);
  std::vector<double> bound(refv.size());
  std::vector<char> zero(refv.size(), 0);
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t(R.row(r), R.row(r) + R.n);
    const Row b = forward_bound(s, t, gather_row(R, refv, r));
    for (int64_t k = 0; k < R.n; ++k) {
      bound[dense_index(R, r, k)] = b[static_cast<size_t>(k)];
      zero[dense_index(R, r, k)] = t[static_cast<size_t>(k)] == -kInfD;
    }
  }
  return compare(out, refv, bound, zero, what);
}

// Backward check: dy random; for the sigmoid normaliser the saved y is the
// reference forward rounded to f32.
::testing::AssertionResult check_backward_case(const Spec& s, const Tensor& src, Tensor& dx,
                                               const SoftmaxOptions& o, Rng& rng,
                                               const std::string& what) {
  Tensor dy(src.shape());
  fill_normal(dy, rng);
  Tensor in = src;
  if (s.kind == Kind::kSigmoid) {
    const std::vector<double> y = ref_forward(s, src.view(), o);
    in.fill([&](int64_t i) { return static_cast<float>(y[static_cast<size_t>(i)]); });
  }
  dx.poison();
  run_backward(s, in.view(), dy.view(), dx.view(), o);
  if (!dx.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const std::vector<double> refv = ref_backward(s, in.view(), dy.view(), o);
  const std::vector<double> out = to_dense(dx.view());
  const std::vector<double> yref = ref_forward(s, src.view(), o);
  const ref::RefRows R = logit_rows(s, src.view(), o);
  const ref::RefRows G = ref::ref_rows("test", dy.view(), o, false);
  const ref::RefRows Tr = ref::ref_rows("test", src.view(), o, true);
  std::vector<double> bound(refv.size());
  std::vector<char> zero(refv.size(), 0);
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t(R.row(r), R.row(r) + R.n);
    const Row g(G.row(r), G.row(r) + R.n);
    const Row traw(Tr.row(r), Tr.row(r) + R.n);
    const double lambda = s.kind == Kind::kSoftplus ? softplus_lambda_of(s, traw) : 1.0;
    const Row b = backward_bound(s, t, g, gather_row(R, yref, r), gather_row(R, refv, r),
                                 R.scale, lambda);
    for (int64_t k = 0; k < R.n; ++k) {
      bound[dense_index(R, r, k)] = b[static_cast<size_t>(k)];
      zero[dense_index(R, r, k)] = t[static_cast<size_t>(k)] == -kInfD;
    }
  }
  return compare(out, refv, bound, zero, what);
}

// Data for the op `s`: probabilities must be >= 0 (|x|, -inf kept; some exact
// zeros), others as drawn.
void fill_for(const Spec& s, Tensor& t, int axis, Data d, Rng& rng) {
  fill_rows(t, axis, d, rng);
  if (s.kind != Kind::kProb) return;
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& v = t.at(i);
    if (v == -kInfF || std::isnan(v)) continue;
    v = rng.bernoulli(0.1) ? 0.0f : std::fabs(v);
  }
}

const std::vector<int64_t>& sweep_sizes() {
  static const std::vector<int64_t> v = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000};
  return v;
}

class Reweight : public TargetTest {
 protected:
  using RowCheck = std::function<::testing::AssertionResult(
      const Spec&, const Tensor& src, const SoftmaxOptions&, Rng&, const std::string& what)>;
  // Every spec x data kind x size on [3, n] ([1, n] past 1001, only for the
  // data kinds in `long_data`), all -inf rows under EmptyRow::kNan half the
  // time; stops after 10 failing cases.
  void sweep_rows(const std::vector<Data>& long_data, const std::string& label,
                  const RowCheck& check) {
    int failures = 0;
    for (const Spec& s : all_specs()) {
      for (Data d : all_data()) {
        Rng rng(s.name + "/" + data_name(d));
        for (int64_t n : sweep_sizes()) {
          if (n > 1001 && std::find(long_data.begin(), long_data.end(), d) == long_data.end()) {
            continue;
          }
          const int64_t rows = n > 1001 ? 1 : 3;
          Tensor src({rows, n}, {}, 1);
          fill_for(s, src, 1, d, rng);
          SoftmaxOptions o;
          if (d == Data::kAllNegInf && rng.bernoulli(0.5)) o.empty_row = EmptyRow::kNan;
          const auto res = check(s, src, o, rng,
                                 s.name + " " + label + data_name(d) + " n=" + std::to_string(n));
          EXPECT_TRUE(res) << GetParam();
          if (!res && ++failures > 10) FAIL() << "too many failures";
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------
// Hand vectors (docs/normalizers.md, "Re-weighting normalisers").
// ---------------------------------------------------------------------------
std::vector<float> fwd(const Spec& s, std::vector<float> x) {
  std::vector<float> y(x.size());
  const int64_t n = static_cast<int64_t>(x.size());
  run_forward(s, smax::make_view(x.data(), {n}), smax::make_view(y.data(), {n}), {});
  return y;
}
std::vector<float> bwd(const Spec& s, std::vector<float> x, std::vector<float> g) {
  std::vector<float> dx(x.size());
  const int64_t n = static_cast<int64_t>(x.size());
  run_backward(s, smax::make_view(x.data(), {n}), smax::make_view(g.data(), {n}),
               smax::make_view(dx.data(), {n}), {});
  return dx;
}

TEST_P(Reweight, SpecHandVectors) {
  Spec sa = make("sa", Kind::kSA);
  expect_row(fwd(sa, {0.0f, std::log(3.0f)}), {0.0, 0.8239592}, 1e-6, "sa [0, ln3]");
  expect_row(bwd(sa, {0.5f, -1.0f, 2.0f}, {1.0f, 2.0f, -1.0f}),
             {0.5366996, 0.0610850, -1.1298661}, 1e-6, "sa VJP");
  Spec san = sa;
  san.sa.normalized = true;
  expect_row(fwd(san, {1.0f, 3.0f}), {0.0397343, 0.8807971}, 1e-6, "sa normalised [1,3]");
  expect_row(fwd(san, {-1.0f, 1.0f}), {0.0, 0.8807971}, 1e-6, "sa normalised [-1,1]");
  EXPECT_EQ(fwd(san, {0.0f, 0.0f}), (std::vector<float>{0.0f, 0.0f})) << "b == a -> r = 0";

  Spec sig = make("sigmoid", Kind::kSigmoid);
  expect_row(fwd(sig, {std::log(4.0f), 0.0f, 0.0f, 0.0f}), {0.5, 0.2, 0.2, 0.2}, 1e-6,
             "sigmoid n=4");

  Spec sp = make("softplus", Kind::kSoftplus);
  sp.sp.lambda = 1.0f;
  expect_row(fwd(sp, {0.0f, 0.0f}), {0.5, 0.5}, 1e-6, "softplus [0,0]");
  expect_row(fwd(sp, {static_cast<float>(std::log(std::exp(1.0) - 1.0)), 0.0f}),
             {0.5906161, 0.4093839}, 1e-6, "softplus [ln(e-1), 0]");
  // Default lambda = ln N / ln d: N = 4, d = 16 -> 0.5.
  Spec spd = make("softplus", Kind::kSoftplus);
  spd.sp.head_dim = 16;
  {
    const double a = std::log1p(std::exp(0.5 * 2.0)), b = std::log(2.0);
    const double S = a + 3 * b;
    expect_row(fwd(spd, {2.0f, 0.0f, 0.0f, 0.0f}), {a / S, b / S, b / S, b / S}, 1e-6,
               "softplus default lambda");
  }

  Spec pw = make("power2", Kind::kPower);
  expect_row(fwd(pw, {1.0f, -2.0f, 0.0f}), {0.2, 0.8, 0.0}, 1e-6, "power [1,-2,0]");
  expect_row(bwd(pw, {1.0f, -2.0f, 0.5f}, {1.0f, 0.0f, 2.0f}),
             {0.2721088, 0.2176871, 0.3265306}, 1e-6, "power VJP");
  expect_row(fwd(pw, {0.0f, 0.0f, 0.0f, 0.0f}), {0.25, 0.25, 0.25, 0.25}, 0, "power zeros");

  Spec pt = make("prob", Kind::kProb);
  pt.T = 0.5f;
  expect_row(fwd(pt, {0.5f, 0.25f, 0.25f, 0.0f}), {2.0 / 3, 1.0 / 6, 1.0 / 6, 0.0}, 1e-6,
             "prob T=0.5");
  pt.T = 1.0f;
  expect_row(fwd(pt, {2.0f, 1.0f, 1.0f}), {0.5, 0.25, 0.25}, 1e-6, "prob T=1");

  Spec ls = make("ls", Kind::kLS);
  {
    const double k = 1.0 / (1.0 + 1e-7f);
    // softmax(-k, 0, k), shifted by its maximum k.
    const double S = std::exp(-2 * k) + std::exp(-k) + 1.0;
    const Row y = {std::exp(-2 * k) / S, std::exp(-k) / S, 1.0 / S};
    expect_row(fwd(ls, {1.0f, 2.0f, 3.0f}), {y[0], y[1], y[2]}, 1e-6, "standardize [1,2,3]");
    // Shift and scale invariance (up to eps): [11, 21, 31] gives the same.
    expect_row(fwd(ls, {11.0f, 21.0f, 31.0f}), {y[0], y[1], y[2]}, 1e-6, "standardize x10+1");
  }
}

// ---------------------------------------------------------------------------
// Random and adversarial rows.
// ---------------------------------------------------------------------------
TEST_P(Reweight, ForwardSizesAndData) {
  sweep_rows({Data::kUniform, Data::kWide, Data::kSomeNegInf}, "",
             [](const Spec& s, const Tensor& src, const SoftmaxOptions& o, Rng&,
                const std::string& what) {
               Tensor dst(src.shape());
               return check_forward(s, src, dst, o, what);
             });
}

TEST_P(Reweight, BackwardSizesAndData) {
  sweep_rows({Data::kUniform, Data::kWide}, "backward ",
             [](const Spec& s, const Tensor& src, const SoftmaxOptions& o, Rng& rng,
                const std::string& what) {
               Tensor dx(src.shape());
               return check_backward_case(s, src, dx, o, rng, what);
             });
}

TEST_P(Reweight, VocabularyRow) {
  for (const Spec& s : all_specs()) {
    Rng rng(s.name);
    Tensor src({1, 128256}), dst({1, 128256});
    fill_for(s, src, 1, Data::kWide, rng);
    EXPECT_TRUE(check_forward(s, src, dst, {}, s.name + " n=128256")) << GetParam();
    EXPECT_TRUE(check_backward_case(s, src, dst, {}, rng, s.name + " backward n=128256"))
        << GetParam();
  }
}

// Specific special values.
TEST_P(Reweight, SpecialValues) {
  const float ninf = -kInfF;
  // +inf: sigmoid -> 1 (elementwise), everything else -> NaN row.
  for (const Spec& s : all_specs()) {
    const std::vector<float> y = fwd(s, {1.0f, kInfF, 0.5f});
    if (s.kind == Kind::kSigmoid) {
      EXPECT_EQ(y[1], 1.0f) << s.name;
      EXPECT_FALSE(std::isnan(y[0])) << s.name;
    } else {
      for (float v : y) EXPECT_TRUE(std::isnan(v)) << s.name;
    }
    // n = 1: a single visible entry.
    const std::vector<float> one = fwd(s, {0.75f});
    if (s.kind == Kind::kSA) {
      EXPECT_NEAR(one[0], s.sa.normalized ? 1.0f : 0.75f, 1e-7) << s.name;
    } else if (s.kind != Kind::kSigmoid) {
      EXPECT_EQ(one[0], 1.0f) << s.name;
    }
    // Masked entries: exact 0, also in backward.
    const std::vector<float> m = fwd(s, {ninf, 0.5f, ninf, 0.25f});
    EXPECT_EQ(m[0], 0.0f) << s.name;
    EXPECT_EQ(m[2], 0.0f) << s.name;
  }
  // Probability temperature: negative -> NaN row; all zero -> empty policy.
  Spec pt = make("prob", Kind::kProb);
  pt.T = 2.0f;
  for (float v : fwd(pt, {0.5f, -0.25f, 0.25f})) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(fwd(pt, {0.0f, 0.0f}), (std::vector<float>{0.0f, 0.0f}));
  // Gradient at p = 0: T < 1 -> 0, T > 1 -> inf.
  pt.T = 0.5f;
  EXPECT_EQ(bwd(pt, {0.0f, 0.5f, 0.5f}, {1.0f, 0.0f, 0.5f})[0], 0.0f);
  pt.T = 2.0f;
  EXPECT_TRUE(std::isinf(bwd(pt, {0.0f, 0.5f, 0.5f}, {1.0f, 0.0f, 0.5f})[0]));
  // Logit standardisation with a single visible entry: y = 1, gradient 0.
  Spec ls = make("ls", Kind::kLS);
  EXPECT_EQ(fwd(ls, {ninf, 3.0f})[1], 1.0f);
  EXPECT_EQ(bwd(ls, {ninf, 3.0f}, {0.5f, 2.0f})[1], 0.0f);
}

// ---------------------------------------------------------------------------
// Layouts: every axis of a strided 3-D tensor, masks, scale, in place,
// thread counts.
// ---------------------------------------------------------------------------
TEST_P(Reweight, StridedAxesMasksInPlaceThreads) {
  const std::vector<int64_t> shape = {4, 6, 9};
  for (const Spec& s : all_specs()) {
    Rng rng(s.name);
    for (int axis = 0; axis < 3; ++axis) {
      SCOPED_TRACE(s.name + " axis " + std::to_string(axis));
      Tensor src(shape, permuted_strides(shape, {2, 0, 1}, 2), 1);
      fill_for(s, src, axis, Data::kUniform, rng);
      // Bool mask broadcast over dim 0; additive mask over the last dim with
      // some -inf (and finite values except for probabilities).
      BoolTensor keep({6, 9});
      keep.fill([&](int64_t) { return static_cast<uint8_t>(rng.bernoulli(0.8)); });
      Tensor add({9});
      add.fill([&](int64_t i) {
        if (i == 4) return -kInfF;
        return s.kind == Kind::kProb ? 0.0f : rng.uniform(-1.0f, 1.0f);
      });
      SoftmaxOptions o = masked_options(axis, 0.5f, 0.8f, keep, add);
      Tensor dst(shape, permuted_strides(shape, {1, 2, 0}, 1));
      ASSERT_TRUE(check_forward(s, src, dst, o, s.name + " strided")) << GetParam();
      Tensor dx(shape, permuted_strides(shape, {0, 2, 1}, 3));
      ASSERT_TRUE(check_backward_case(s, src, dx, o, rng, s.name + " strided backward"))
          << GetParam();

      // Threads: bitwise equal.
      std::vector<std::vector<float>> outs;
      Tensor dy(shape);
      fill_normal(dy, rng);
      for (int threads : {1, 2, 3}) {
        o.threads = threads;
        Tensor y(shape), g(shape);
        run_forward(s, src.view(), y.view(), o);
        run_backward(s, s.kind == Kind::kSigmoid ? y.view() : src.view(), dy.view(), g.view(), o);
        std::vector<float> both = y.dense();
        const std::vector<float> gd = g.dense();
        both.insert(both.end(), gd.begin(), gd.end());
        outs.push_back(both);
      }
      for (size_t k = 1; k < outs.size(); ++k) {
        ASSERT_EQ(0, std::memcmp(outs[0].data(), outs[k].data(), outs[0].size() * sizeof(float)))
            << "threads differ";
      }
      o.threads = 0;
      // In place: forward dst == src, backward dsrc == dy: bitwise equal to
      // out of place.
      Tensor ip = src;
      Tensor y0(shape);
      run_forward(s, src.view(), y0.view(), o);
      run_forward(s, ip.view(), ip.view(), o);
      for (int64_t i = 0; i < ip.numel(); ++i) {
        ASSERT_EQ(0, std::memcmp(&ip.at(i), &y0.at(i), sizeof(float))) << "in place fwd " << i;
      }
      const TensorView bin = s.kind == Kind::kSigmoid ? y0.view() : src.view();
      Tensor g0(shape), gip = dy;
      run_backward(s, bin, dy.view(), g0.view(), o);
      run_backward(s, bin, gip.view(), gip.view(), o);
      for (int64_t i = 0; i < gip.numel(); ++i) {
        ASSERT_EQ(0, std::memcmp(&gip.at(i), &g0.at(i), sizeof(float))) << "in place bwd " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Reference VJP vs float64 central finite differences of the reference
// forward (row level, in double).
// ---------------------------------------------------------------------------
TEST(ReweightReference, FiniteDifferences) {
  Rng rng("fd");
  const double h = 1e-6;
  for (const Spec& s : all_specs()) {
    if (s.kind == Kind::kSA && s.sa.normalized && !s.sa.grad_through_bounds) continue;
    for (int n : {1, 2, 3, 5, 8}) {
      for (int trial = 0; trial < 4; ++trial) {
        Row t(static_cast<size_t>(n)), g(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          t[static_cast<size_t>(i)] = s.kind == Kind::kProb ? rng.uniform(0.05f, 1.0f)
                                                            : 2.0 * rng.normal();
          g[static_cast<size_t>(i)] = rng.normal();
        }
        if (trial == 3 && n > 2) t[1] = -kInfD;  // a masked entry
        auto forward = [&](const Row& x) -> Row {
          switch (s.kind) {
            case Kind::kSA: return ref::sa_row(x, s.sa.normalized, EmptyRow::kZero);
            case Kind::kSigmoid: return ref::sigmoid_norm_row(x, -0.7, EmptyRow::kZero);
            case Kind::kSoftplus: return ref::softplus_norm_row(x, s.sp.power, EmptyRow::kZero);
            case Kind::kPower: return ref::power_row(x, s.p, EmptyRow::kZero);
            case Kind::kProb: return ref::prob_temperature_row(x, s.T, EmptyRow::kZero);
            case Kind::kLS: return ref::standardization_row(x, s.ls, EmptyRow::kZero);
          }
          return {};
        };
        Row vjp;
        switch (s.kind) {
          case Kind::kSA:
            vjp = ref::sa_backward_row(t, g, s.sa.normalized, true, EmptyRow::kZero);
            break;
          case Kind::kSigmoid: {
            const Row y = forward(t);
            vjp.resize(t.size());
            for (size_t i = 0; i < t.size(); ++i) vjp[i] = g[i] * y[i] * (1 - y[i]);
            break;
          }
          case Kind::kSoftplus:
            vjp = ref::softplus_norm_backward_row(t, g, s.sp.power, EmptyRow::kZero);
            break;
          case Kind::kPower: vjp = ref::power_backward_row(t, g, s.p, EmptyRow::kZero); break;
          case Kind::kProb:
            vjp = ref::prob_temperature_backward_row(t, g, s.T, EmptyRow::kZero);
            break;
          case Kind::kLS: vjp = ref::standardization_backward_row(t, g, s.ls, EmptyRow::kZero); break;
        }
        for (int j = 0; j < n; ++j) {
          if (t[static_cast<size_t>(j)] == -kInfD) {
            EXPECT_EQ(vjp[static_cast<size_t>(j)], 0.0) << s.name;
            continue;
          }
          Row tp = t, tm = t;
          tp[static_cast<size_t>(j)] += h;
          tm[static_cast<size_t>(j)] -= h;
          const Row yp = forward(tp), ym = forward(tm);
          double fd = 0.0;
          for (int i = 0; i < n; ++i) {
            fd += g[static_cast<size_t>(i)] * (yp[static_cast<size_t>(i)] - ym[static_cast<size_t>(i)]);
          }
          fd /= 2 * h;
          EXPECT_NEAR(vjp[static_cast<size_t>(j)], fd, 1e-6 * (1.0 + std::fabs(fd)))
              << s.name << " n=" << n << " trial " << trial << " j=" << j;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Errors: smax::Error naming the argument; nothing written.
// ---------------------------------------------------------------------------
TEST(ReweightErrors, ParametersAndShapes) {
  Tensor src({3, 5}), dst({3, 5}), dy({3, 5}), bad({3, 4});
  src.fill([](int64_t i) { return 0.1f * static_cast<float>(i); });
  dy.fill([](int64_t i) { return 0.2f * static_cast<float>(i) - 1.0f; });
  auto untouched = [&](const Tensor& t) {
    for (float v : t.storage()) {
      if (v != kSentinel) return false;
    }
    return true;
  };
  auto expect_error = [&](const std::function<void(const TensorView&)>& f,
                          const std::string& needle) {
    dst.poison();
    EXPECT_TRUE(throws_invalid([&] { f(dst.view()); }, needle));
    EXPECT_TRUE(untouched(dst)) << needle;
  };
  const TensorView x = src.view(), g = dy.view();
  // power_softmax: p odd or <= 0.
  for (int p : {1, 3, 0, -2}) {
    expect_error([&](const TensorView& d) { smax::power_softmax(x, d, p); }, "p must be even");
    expect_error([&](const TensorView& d) { smax::power_softmax_backward(x, g, d, p); },
                 "power_softmax_backward: p");
  }
  // probability temperature.
  for (float T : {0.0f, -1.0f, kInfF, kNanF}) {
    expect_error([&](const TensorView& d) { smax::probability_temperature(x, d, T); },
                 "probability_temperature: T");
    expect_error([&](const TensorView& d) { smax::probability_temperature_backward(x, g, d, T); },
                 "probability_temperature_backward: T");
  }
  // logit standardisation.
  smax::LogitStandardizationOptions ls;
  ls.temperature = 0.0f;
  expect_error([&](const TensorView& d) { smax::logit_standardization(x, d, ls); }, "temperature");
  ls.temperature = 1.0f;
  ls.eps = -1e-3f;
  expect_error([&](const TensorView& d) { smax::logit_standardization_backward(x, g, d, ls); },
               "eps");
  ls.eps = kNanF;
  expect_error([&](const TensorView& d) { smax::logit_standardization(x, d, ls); }, "eps");
  // softplus.
  smax::SoftplusNormalizerOptions sp;
  expect_error([&](const TensorView& d) { smax::softplus_normalizer(x, d, sp); }, "head_dim");
  sp.head_dim = 1;
  expect_error([&](const TensorView& d) { smax::softplus_normalizer(x, d, sp); }, "head_dim");
  sp.lambda = -1.0f;
  expect_error([&](const TensorView& d) { smax::softplus_normalizer_backward(x, g, d, sp); },
               "lambda");
  sp.lambda = 1.0f;
  sp.power = 0.0f;
  expect_error([&](const TensorView& d) { smax::softplus_normalizer(x, d, sp); }, "power");
  // sigmoid.
  smax::SigmoidNormalizerOptions sig;
  sig.n_fixed = -3;
  expect_error([&](const TensorView& d) { smax::sigmoid_normalizer(x, d, sig); }, "n_fixed");
  sig.n_fixed = 0;
  sig.bias = kInfF;
  expect_error([&](const TensorView& d) { smax::sigmoid_normalizer(x, d, sig); }, "bias");
  // Shapes, axis and options (from the Rowwise driver), every op.
  for (const Spec& s : all_specs()) {
    SoftmaxOptions o;
    dst.poison();
    EXPECT_TRUE(throws_invalid([&] { run_forward(s, x, bad.view(), o); }, "dst")) << s.name;
    EXPECT_TRUE(throws_invalid([&] { run_backward(s, x, bad.view(), dst.view(), o); }, "dy"))
        << s.name;
    EXPECT_TRUE(untouched(dst)) << s.name;
    o.axis = 2;
    EXPECT_TRUE(throws_invalid([&] { run_forward(s, x, dst.view(), o); }, "axis")) << s.name;
    o.axis = -1;
    o.temperature = 0.0f;
    EXPECT_TRUE(throws_invalid([&] { run_backward(s, x, g, dst.view(), o); }, "temperature"))
        << s.name;
    EXPECT_TRUE(untouched(dst)) << s.name;
  }
}

// Fuzz regression (fuzz/regressions/normalizers/softplus_normalizer_backward_zero_vs_nan):
// every visible z = fl(lambda t) overflows to -inf (t = -FLT_MAX after an
// additive mask of -FLT_MAX, lambda = log 6 / log 2 > 1): the row has no
// mass and follows empty_row like a row with no visible entry (it was a NaN
// row with 0 at the masked entries in both policies). Forward, backward and
// the float64 oracle agree.
TEST_P(Reweight, SoftplusAllZOverflowFollowsEmptyRow) {
  const float ninf = -kInfF;
  const std::vector<float> x = {0.0234375f, 2581.875f, ninf, -FLT_MAX, ninf,
                                -3.43596282e-39f, 0.0f, 0.0234375f, 2581.875f, ninf};
  const std::vector<float> dy(10, 0.25f);
  const float am = -FLT_MAX;
  smax::SoftplusNormalizerOptions sp;
  sp.head_dim = 2;
  for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
    SoftmaxOptions o;
    o.additive_mask = smax::make_view(&am, {1});
    o.empty_row = er;
    std::vector<float> y(10, 7.0f), dx(10, 7.0f);
    smax::softplus_normalizer(smax::make_view(x.data(), {10}), smax::make_view(y.data(), {10}), sp, o);
    smax::softplus_normalizer_backward(smax::make_view(x.data(), {10}), smax::make_view(dy.data(), {10}),
                                       smax::make_view(dx.data(), {10}), sp, o);
    const std::vector<double> ry = ref::softplus_normalizer(smax::make_view(x.data(), {10}), sp, o);
    const std::vector<double> rd = ref::softplus_normalizer_backward(
        smax::make_view(x.data(), {10}), smax::make_view(dy.data(), {10}), sp, o);
    for (size_t i = 0; i < 10; ++i) {
      if (er == EmptyRow::kNan) {
        EXPECT_TRUE(std::isnan(y[i]) && std::isnan(dx[i]) && std::isnan(ry[i]) && std::isnan(rd[i])) << i;
      } else {
        EXPECT_EQ(y[i], 0.0f) << i;
        EXPECT_EQ(dx[i], 0.0f) << i;
        EXPECT_EQ(ry[i], 0.0) << i;
        EXPECT_EQ(rd[i], 0.0) << i;
      }
    }
  }
  // Only some z overflow: those entries get 0 (softplus(-inf) = 0), the row is finite.
  const std::vector<float> x2 = {-FLT_MAX, 1.0f, 0.5f, -FLT_MAX};
  std::vector<float> y2(4);
  smax::softplus_normalizer(smax::make_view(x2.data(), {4}), smax::make_view(y2.data(), {4}), sp);
  const std::vector<double> r2 = ref::softplus_normalizer(smax::make_view(x2.data(), {4}), sp, {});
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y2[i], r2[i], 2e-6 * r2[i] + 1e-36) << i;
  EXPECT_EQ(y2[0], 0.0f);
  EXPECT_EQ(y2[3], 0.0f);
}

SMAX_INSTANTIATE_PER_TARGET(Reweight);

}  // namespace
}  // namespace smax_test

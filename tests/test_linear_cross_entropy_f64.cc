// tests/test_linear_cross_entropy_f64.cc: linear_cross_entropy, its backward
// and the fused call with f64 hidden / weight run in float64 arithmetic
// (DGEMM tiles, src/ops/losses/linear_cross_entropy_f64.cc), on every SIMD
// target, against the long double oracle of linear_cross_entropy_f64_oracle.h:
//  * the "float64" bounds of include/smax/linear_cross_entropy.h for the
//    per-row loss, lse, entropy, target_logprob, z-loss, accuracy, the
//    reduced loss and dhidden / dweight / dbias (backward and fused), over
//    class weights, label smoothing, z-loss, softcap, scale / temperature,
//    ignored rows, -inf bias classes, 1 to 32000 classes, and token /
//    vocabulary chunks from 1 (with logits ramps that move the row
//    reference across chunks);
//  * logits near 12345.678: f32 arithmetic would be 1e6 times outside the
//    bound there, so the test fails if the path fell back to f32;
//  * the same bits for 1, 2 and 7 threads; the fused gradients are the
//    bits of the backward with dloss = 1; the backward reads a given lse
//    only when it is f64;
//  * mixed operands (f64 hidden with f32 weight, and the reverse) on the
//    float64 path; f32 / bf16 / f16 outputs that are the float64 results
//    rounded once; NaN, all-masked and empty shapes; errors before writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/convert.h"
#include "linear_cross_entropy_f64_oracle.h"
#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

using namespace lce64;
using smax::DType;

std::string describe(const LceCase& c) {
  return "N " + std::to_string(c.N) + " D " + std::to_string(c.D) + " V " + std::to_string(c.V) +
         " weights " + std::to_string(c.weights) + " ignore " + std::to_string(c.ignore) +
         " masked " + std::to_string(c.masked) + " a " + std::to_string(c.a) + " zs " +
         std::to_string(c.zs) + " cap " + std::to_string(c.cap) + " s " +
         std::to_string(c.scale) + "/" + std::to_string(c.temperature) + " ramp " +
         std::to_string(c.b_ramp) + " chunks " + std::to_string(c.token_chunk) + "x" +
         std::to_string(c.vocab_chunk);
}

// SMAX_LCE_REPORT=1 prints each new largest error / bound ratio.
void report(double err, double bound, const std::string& what) {
  static double worst = 0.0;
  static const bool on = std::getenv("SMAX_LCE_REPORT") != nullptr;
  if (!on || !(bound > 0.0) || !(err / bound > worst)) return;
  worst = err / bound;
  std::printf("largest error / bound so far: %.3g (%s)\n", worst, what.c_str());
}

::testing::AssertionResult within(double got, LD want, double bound, const std::string& what) {
  const double w = static_cast<double>(want);
  if (std::isfinite(w)) report(std::fabs(got - w), bound, what);
  if (std::isnan(w) ? std::isnan(got) : (std::isinf(w) ? got == w : std::fabs(got - w) <= bound)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << what << ": got " << got << " want " << w << " error "
                                       << std::fabs(got - w) << " bound " << bound;
}

// Forward with kNone and every optional output, against the oracle.
void check_forward(LceData& d, const Ref& R) {
  const LceCase& c = d.c;
  const size_t N = static_cast<size_t>(c.N);
  std::vector<double> loss(N, 7.0), lse(N), ent(N), tlp(N), acc(N), z(N);
  smax::CrossEntropyOptions ce = d.ce();
  ce.loss.reduction = smax::Reduction::kNone;
  ce.lse = f64_view(lse.data(), {c.N});
  ce.entropy = f64_view(ent.data(), {c.N});
  ce.target_logprob = f64_view(tlp.data(), {c.N});
  ce.accuracy = f64_view(acc.data(), {c.N});
  ce.z_loss = f64_view(z.data(), {c.N});
  smax::linear_cross_entropy(d.hidden(), d.weight(), d.target(), d.bias(),
                             f64_view(loss.data(), {c.N}), ce, d.lce(), d.options());
  for (int64_t r = 0; r < c.N; ++r) {
    const size_t ri = static_cast<size_t>(r);
    const RowRef& o = R.rows[ri];
    const std::string at = "row " + std::to_string(r);
    ASSERT_FALSE(o.empty) << at;
    EXPECT_TRUE(within(lse[ri], o.L, o.b_lse, at + " lse"));
    EXPECT_TRUE(within(ent[ri], o.H, o.b_ent, at + " entropy"));
    if (!d.active(r)) {
      EXPECT_EQ(loss[ri], 0.0) << at;
      EXPECT_EQ(tlp[ri], 0.0) << at;
      EXPECT_EQ(acc[ri], 0.0) << at;
      continue;
    }
    EXPECT_TRUE(within(loss[ri], o.loss, o.b_loss, at + " loss"));
    EXPECT_TRUE(within(tlp[ri], o.tlp, o.b_tlp, at + " target_logprob"));
    EXPECT_TRUE(within(z[ri], o.z, o.b_z, at + " z_loss"));
    if (o.gap > 2 * o.E + 1e-12 * (1 + o.tmax)) {
      EXPECT_EQ(acc[ri], o.argmax == d.y[ri] ? 1.0 : 0.0) << at;
    }
  }
}

// kMean / kSum: the reduced loss.
void check_reduced(LceData& d, const Ref& R) {
  double loss = 7.0;
  smax::linear_cross_entropy(d.hidden(), d.weight(), d.target(), d.bias(), f64_view(&loss, {}),
                             d.ce(), d.lce(), d.options());
  EXPECT_TRUE(within(loss, R.reduced, R.b_reduced, "reduced loss"));
}

struct Grads {
  int64_t N, D, V;
  std::vector<double> dh, dw, db;
  explicit Grads(const LceCase& c)
      : N(c.N), D(c.D), V(c.V), dh(static_cast<size_t>(c.N * c.D), 7.0),
        dw(static_cast<size_t>(c.V * c.D), 7.0), db(static_cast<size_t>(c.V), 7.0) {}
  bool same_bits(const Grads& o) const {
    auto eq = [](const std::vector<double>& a, const std::vector<double>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
    };
    return eq(dh, o.dh) && eq(dw, o.dw) && eq(db, o.db);
  }
};

// hidden, weight and bias of a call (d's own views unless replaced).
struct Inputs {
  smax::TensorView h, w;
  std::optional<smax::TensorView> b;
};
Inputs inputs_of(LceData& d) { return {d.hidden(), d.weight(), d.bias()}; }

// linear_cross_entropy_backward (fused: _fused, writing `dst`) of d's
// target and dloss into f64 gradients.
Grads gradients(LceData& d, const smax::CrossEntropyOptions& ce, const smax::SoftmaxOptions& o,
                const Inputs& in, const smax::TensorView* dst = nullptr) {
  const LceCase& c = d.c;
  Grads g(c);
  const smax::TensorView dh = f64_view(g.dh.data(), {c.N, c.D}), dw = f64_view(g.dw.data(), {c.V, c.D}),
                         db = f64_view(g.db.data(), {c.V});
  if (dst != nullptr) {
    smax::linear_cross_entropy_fused(in.h, in.w, d.target(), in.b, *dst, d.dloss_view(), dh, dw, db, ce,
                                     d.lce(), o);
  } else {
    smax::linear_cross_entropy_backward(in.h, in.w, d.target(), in.b, d.dloss_view(), dh, dw, db, ce,
                                        d.lce(), o);
  }
  return g;
}
Grads gradients(LceData& d, const smax::CrossEntropyOptions& ce, const smax::TensorView* dst = nullptr) {
  return gradients(d, ce, d.options(), inputs_of(d), dst);
}

// The loss output of the fused call: [N] for kNone, else one element.
smax::TensorView loss_view(const LceCase& c, std::vector<double>& loss) {
  loss.assign(c.red == smax::Reduction::kNone ? static_cast<size_t>(c.N) : 1, 7.0);
  return c.red == smax::Reduction::kNone ? f64_view(loss.data(), {c.N}) : f64_view(loss.data(), {});
}

void check_grads(const LceData& d, const Ref& R, const Grads& g, const std::string& what) {
  for (size_t i = 0; i < g.dh.size(); ++i) {
    ASSERT_TRUE(within(g.dh[i], R.dh[i], R.b_dh[i], what + " dhidden " + std::to_string(i)));
  }
  for (size_t i = 0; i < g.dw.size(); ++i) {
    ASSERT_TRUE(within(g.dw[i], R.dw[i], R.b_dw[i], what + " dweight " + std::to_string(i)));
  }
  for (size_t i = 0; i < g.db.size(); ++i) {
    ASSERT_TRUE(within(g.db[i], R.db[i], R.b_db[i], what + " dbias " + std::to_string(i)));
  }
  (void)d;
}

// Backward (without lse, and with the forward's f64 lse when there is no
// smoothing) and fused, against the oracle.
void check_backward(LceData& d, const Ref& R) {
  const LceCase& c = d.c;
  check_grads(d, R, gradients(d, d.ce()), "backward");
  if (c.a == 0.0f) {
    std::vector<double> lse(static_cast<size_t>(c.N));
    for (int64_t r = 0; r < c.N; ++r) lse[static_cast<size_t>(r)] = static_cast<double>(R.rows[static_cast<size_t>(r)].L);
    smax::CrossEntropyOptions ce = d.ce();
    ce.lse = f64_view(lse.data(), {c.N});
    check_grads(d, R, gradients(d, ce), "backward with lse");
  }
  std::vector<double> loss;
  const smax::TensorView dst = loss_view(c, loss);
  check_grads(d, R, gradients(d, d.ce(), &dst), "fused");
  if (c.red == smax::Reduction::kNone) {
    for (int64_t r = 0; r < c.N; ++r) {
      const RowRef& o = R.rows[static_cast<size_t>(r)];
      EXPECT_TRUE(within(loss[static_cast<size_t>(r)], d.active(r) ? o.loss : 0, o.b_loss, "fused loss"));
    }
  } else {
    EXPECT_TRUE(within(loss[0], R.reduced, R.b_reduced, "fused reduced loss"));
  }
}

void check_case(const LceCase& c) {
  SCOPED_TRACE(describe(c));
  LceData d(c);
  const Ref R = oracle(d);
  check_forward(d, R);
  if (::testing::Test::HasFatalFailure()) return;
  check_backward(d, R);
  for (smax::Reduction red : {smax::Reduction::kMean, smax::Reduction::kSum}) {
    LceCase cr = c;
    cr.red = red;
    LceData dr(cr);
    const Ref Rr = oracle(dr);
    check_reduced(dr, Rr);
    check_backward(dr, Rr);
  }
}

LceCase sized(int64_t N, int64_t D, int64_t V) {
  LceCase c;
  c.N = N;
  c.D = D;
  c.V = V;
  return c;
}

class LceF64 : public TargetTest {};

TEST_P(LceF64, EveryOptionWithinTheFloat64Bound) {
  struct Shape {
    int64_t N, D, V;
  };
  uint64_t seed = 1;
  for (const Shape& sh : {Shape{1, 1, 1}, Shape{6, 16, 50}, Shape{9, 33, 1000}, Shape{2, 8, 32000}}) {
    LceCase c = sized(sh.N, sh.D, sh.V);
    c.seed = seed++;
    check_case(c);  // plain
    c.weights = c.ignore = true;
    c.a = 0.1f;
    c.zs = 1e-3f;
    c.scale = 1.3f;
    c.temperature = 0.7f;
    c.h_scale = 3.0;
    check_case(c);
    if (sh.V > 1) {
      c.masked = 3;
      c.cap = 5.0f;
      check_case(c);
      c.cap = 0.0f;
      c.a = 0.0f;
      c.b_scale = 30.0;  // wide logits (spread of hundreds)
      check_case(c);
    }
  }
}

TEST_P(LceF64, TileSizesWithinTheBound) {
  LceCase base = sized(11, 12, 300);
  base.weights = base.ignore = true;
  base.a = 0.05f;
  base.masked = 2;
  for (double ramp : {0.0, 0.5, -0.5, 90.0}) {  // 0.5, 90: the row reference moves
    for (int64_t vc : {1, 7, 64, 0}) {
      for (int64_t tc : {1, 5, 0}) {
        LceCase c = base;
        c.b_ramp = ramp;
        c.vocab_chunk = vc;
        c.token_chunk = tc;
        c.seed = static_cast<uint64_t>(vc * 100 + tc) + 7;
        check_case(c);
      }
    }
  }
}

// Logits near 12345.678 with a spread of a few units: rounded to f32 they
// lose ~1e-3 of their differences; the float64 path keeps ~1e-11.
TEST_P(LceF64, FarFromZeroLogitsKeepFloat64Accuracy) {
  LceCase c = sized(5, 8, 700);
  c.b_shift = 12345.678;
  c.b_scale = 3.0;
  check_case(c);
  LceData d(c);
  const Ref R = oracle(d);
  std::vector<double> loss(static_cast<size_t>(c.N));
  smax::linear_cross_entropy(d.hidden(), d.weight(), d.target(), d.bias(),
                             f64_view(loss.data(), {c.N}), d.ce());
  for (int64_t r = 0; r < c.N; ++r) {
    EXPECT_LE(std::fabs(loss[static_cast<size_t>(r)] - static_cast<double>(R.rows[static_cast<size_t>(r)].loss)), 1e-9);
  }
}

// Every output of the three calls for `threads`.
std::vector<double> run_all(LceData& d, int threads) {
  const LceCase& c = d.c;
  smax::SoftmaxOptions o = d.options();
  o.threads = threads;
  std::vector<double> out;
  std::vector<double> loss(static_cast<size_t>(c.N)), lse(loss.size()), ent(loss.size());
  smax::CrossEntropyOptions ce = d.ce();
  ce.lse = f64_view(lse.data(), {c.N});
  ce.entropy = f64_view(ent.data(), {c.N});
  smax::linear_cross_entropy(d.hidden(), d.weight(), d.target(), d.bias(),
                             f64_view(loss.data(), {c.N}), ce, d.lce(), o);
  for (auto* v : {&loss, &lse, &ent}) out.insert(out.end(), v->begin(), v->end());
  for (int fused = 0; fused < 2; ++fused) {
    const smax::TensorView dst = f64_view(loss.data(), {c.N});
    const Grads g = gradients(d, d.ce(), o, inputs_of(d), fused ? &dst : nullptr);
    if (fused) out.insert(out.end(), loss.begin(), loss.end());
    for (auto* v : {&g.dh, &g.dw, &g.db}) out.insert(out.end(), v->begin(), v->end());
  }
  return out;
}

TEST_P(LceF64, ThreadsGiveTheSameBits) {
  for (int64_t vc : {0, 100}) {
    LceCase c = sized(70, 96, 1500);  // GEMMs above the split threshold: blocks over the threads
    c.weights = c.ignore = true;
    c.a = 0.1f;
    c.cap = 8.0f;
    c.masked = 4;
    c.vocab_chunk = vc;
    LceData d(c);
    const std::vector<double> one = run_all(d, 1);
    // 3, not 7: LLVM 14's libomp leaks a hot team's structures when a
    // 7-thread team is formed on this 2-core machine (LeakSanitizer in the
    // ASan suite, not every run); 3 threads already split the GEMM blocks
    // unevenly over more threads than cores.
    for (int threads : {2, 3}) {
      const std::vector<double> other = run_all(d, threads);
      ASSERT_EQ(one.size(), other.size());
      EXPECT_EQ(0, std::memcmp(one.data(), other.data(), one.size() * sizeof(double)))
          << "threads " << threads << " vocab_chunk " << vc;
    }
  }
}

// dloss = 1: the fused gradients are the bits of the backward (no lse).
TEST_P(LceF64, FusedGradientsAreTheBackwardBits) {
  for (smax::Reduction red : {smax::Reduction::kNone, smax::Reduction::kMean, smax::Reduction::kSum}) {
    for (int64_t vc : {0, 13}) {
      LceCase c = sized(21, 10, 97);
      c.weights = c.ignore = true;
      c.a = 0.1f;
      c.zs = 1e-3f;
      c.cap = 6.0f;
      c.masked = 2;
      c.red = red;
      c.vocab_chunk = vc;
      LceData d(c);
      for (double& v : d.dloss) v = 1.0;
      std::vector<double> loss;
      const smax::TensorView dst = loss_view(c, loss);
      EXPECT_TRUE(gradients(d, d.ce()).same_bits(gradients(d, d.ce(), &dst)));
    }
  }
}

// A given lse is read only when it is f64: an f32 (or bf16) lse gives the
// bits of the backward without one; an f64 lse is read (a shifted one
// changes the gradient).
TEST_P(LceF64, BackwardReadsOnlyAnF64Lse) {
  LceCase c = sized(8, 6, 40);
  LceData d(c);
  const Ref R = oracle(d);
  auto backward = [&](const std::optional<smax::TensorView>& lse) {
    smax::CrossEntropyOptions ce = d.ce();
    ce.lse = lse;
    return gradients(d, ce);
  };
  const Grads none = backward(std::nullopt);
  std::vector<float> lse32(static_cast<size_t>(c.N), 3.0f);  // wrong values: not read
  EXPECT_TRUE(none.same_bits(backward(smax::make_view(lse32.data(), {c.N}))));
  std::vector<double> lse64(static_cast<size_t>(c.N));
  for (int64_t r = 0; r < c.N; ++r) lse64[static_cast<size_t>(r)] = static_cast<double>(R.rows[static_cast<size_t>(r)].L);
  check_grads(d, R, backward(f64_view(lse64.data(), {c.N})), "f64 lse");
  for (double& v : lse64) v += 1.0;  // p scaled by 1/e: read
  EXPECT_FALSE(none.same_bits(backward(f64_view(lse64.data(), {c.N}))));
}

// f64 hidden with f32 weight (and the reverse) take the float64 path: the
// oracle on the f32 values widened, within the float64 bound. An f32 bias
// is widened exactly.
TEST_P(LceF64, MixedOperandsTakeTheFloat64Path) {
  LceCase c = sized(7, 20, 130);
  c.weights = true;
  c.a = 0.1f;
  for (int which = 0; which < 2; ++which) {
    LceData d(c);
    std::vector<double>& narrow = which == 0 ? d.w : d.h;
    std::vector<float> n32(narrow.size());
    for (size_t i = 0; i < narrow.size(); ++i) {
      n32[i] = static_cast<float>(narrow[i]);
      narrow[i] = n32[i];  // the oracle's values
    }
    std::vector<float> b32(d.b.size());
    for (size_t i = 0; i < d.b.size(); ++i) {
      b32[i] = static_cast<float>(d.b[i]);
      d.b[i] = b32[i];
    }
    const Ref R = oracle(d);
    const smax::TensorView hv = which == 1 ? smax::make_view(n32.data(), {c.N, c.D}) : d.hidden();
    const smax::TensorView wv = which == 0 ? smax::make_view(n32.data(), {c.V, c.D}) : d.weight();
    const smax::TensorView bv = smax::make_view(b32.data(), {c.V});
    std::vector<double> loss(static_cast<size_t>(c.N));
    smax::CrossEntropyOptions ce = d.ce();
    smax::linear_cross_entropy(hv, wv, d.target(), bv, f64_view(loss.data(), {c.N}), ce);
    for (int64_t r = 0; r < c.N; ++r) {
      const RowRef& o = R.rows[static_cast<size_t>(r)];
      EXPECT_TRUE(within(loss[static_cast<size_t>(r)], o.loss, o.b_loss, "mixed loss " + std::to_string(which)));
    }
    check_grads(d, R, gradients(d, ce, d.options(), Inputs{hv, wv, bv}), "mixed " + std::to_string(which));
  }
}

// f32 / bf16 / f16 outputs of f64 inputs: the float64 results rounded once.
TEST_P(LceF64, NarrowOutputsAreTheFloat64ResultsRoundedOnce) {
  LceCase c = sized(9, 11, 77);
  c.ignore = true;
  c.cap = 7.0f;
  LceData d(c);
  std::vector<double> loss(static_cast<size_t>(c.N)), lse(loss.size());
  smax::CrossEntropyOptions ce = d.ce();
  ce.lse = f64_view(lse.data(), {c.N});
  smax::linear_cross_entropy(d.hidden(), d.weight(), d.target(), d.bias(), f64_view(loss.data(), {c.N}), ce);
  const Grads g = gradients(d, d.ce());
  for (DType nt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(smax::dtype_name(nt));
    const int size = smax::dtype_size(nt);
    auto buf = [&](size_t n) { return std::vector<unsigned char>(n * static_cast<size_t>(size)); };
    auto view = [&](std::vector<unsigned char>& b, std::vector<int64_t> shape) {
      return smax::make_view(b.data(), nt, static_cast<int>(shape.size()), shape.data(), nullptr);
    };
    auto same = [&](const std::vector<unsigned char>& got, const std::vector<double>& want, const char* what) {
      for (size_t i = 0; i < want.size(); ++i) {
        uint64_t w = 0, h = 0;
        smax::detail::store_f64(&w, nt, want[i]);
        std::memcpy(&h, got.data() + i * static_cast<size_t>(size), static_cast<size_t>(size));
        ASSERT_EQ(w, h) << what << " " << i;
      }
    };
    std::vector<unsigned char> l = buf(loss.size()), ls = buf(lse.size()), dh = buf(g.dh.size()),
                               dw = buf(g.dw.size()), db = buf(g.db.size());
    smax::CrossEntropyOptions cn = d.ce();
    cn.lse = view(ls, {c.N});
    smax::linear_cross_entropy(d.hidden(), d.weight(), d.target(), d.bias(), view(l, {c.N}), cn);
    smax::linear_cross_entropy_backward(d.hidden(), d.weight(), d.target(), d.bias(), d.dloss_view(),
                                        view(dh, {c.N, c.D}), view(dw, {c.V, c.D}), view(db, {c.V}),
                                        d.ce());
    same(l, loss, "loss");
    same(ls, lse, "lse");
    same(dh, g.dh, "dhidden");
    same(dw, g.dw, "dweight");
    same(db, g.db, "dbias");
  }
}

TEST_P(LceF64, SpecialValuesAndEmptyShapes) {
  // Row 0 has a NaN hidden unit; class 2 is masked (-inf bias); row 3's
  // target is the masked class.
  const int64_t N = 4, D = 3, V = 5;
  std::vector<double> h = {kNan, 1, 0, 0.5, -1, 2, 1, 1, 1, -2, 0.25, 3};
  std::vector<double> w(static_cast<size_t>(V * D));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<double>(i));
  std::vector<double> b = {0.1, -0.2, -kInf, 0.3, 0.0};
  std::vector<int64_t> y = {1, 0, 4, 2};
  std::vector<double> loss(N), dl(N, 1.0), dh(N * D), dw(V * D), db(V);
  smax::CrossEntropyOptions ce;
  ce.loss.reduction = smax::Reduction::kNone;
  const smax::TensorView hv = f64_view(h.data(), {N, D}), wv = f64_view(w.data(), {V, D}),
                         bv = f64_view(b.data(), {V}), tv = smax::make_index_view(y.data(), {N});
  smax::linear_cross_entropy_fused(hv, wv, tv, bv, f64_view(loss.data(), {N}), f64_view(dl.data(), {N}),
                                   f64_view(dh.data(), {N, D}), f64_view(dw.data(), {V, D}),
                                   f64_view(db.data(), {V}), ce);
  EXPECT_TRUE(std::isnan(loss[0]));
  EXPECT_TRUE(std::isfinite(loss[1]) && std::isfinite(loss[2]));
  EXPECT_EQ(loss[3], kInf);  // the target's logit is -inf
  for (int k = 0; k < D; ++k) EXPECT_TRUE(std::isnan(dh[static_cast<size_t>(k)]));
  for (double v : db) EXPECT_TRUE(std::isnan(v));  // through row 0
  // Without the NaN row: the masked class gets exactly 0 in dweight / dbias.
  h[0] = 0.5;
  smax::linear_cross_entropy_fused(hv, wv, tv, bv, f64_view(loss.data(), {N}), f64_view(dl.data(), {N}),
                                   f64_view(dh.data(), {N, D}), f64_view(dw.data(), {V, D}),
                                   f64_view(db.data(), {V}), ce);
  EXPECT_EQ(db[2], 0.0);
  for (int k = 0; k < D; ++k) EXPECT_EQ(dw[static_cast<size_t>(2 * D + k)], 0.0);
  // Every class masked: empty_row decides.
  std::vector<double> all_masked(V, -kInf);
  for (smax::EmptyRow policy : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    smax::SoftmaxOptions o;
    o.empty_row = policy;
    smax::linear_cross_entropy_fused(hv, wv, tv, f64_view(all_masked.data(), {V}), f64_view(loss.data(), {N}),
                                     f64_view(dl.data(), {N}), f64_view(dh.data(), {N, D}),
                                     f64_view(dw.data(), {V, D}), f64_view(db.data(), {V}), ce, {}, o);
    for (int64_t r = 0; r < N; ++r) {
      if (policy == smax::EmptyRow::kNan) {
        EXPECT_TRUE(std::isnan(loss[static_cast<size_t>(r)]));
      } else {
        EXPECT_EQ(loss[static_cast<size_t>(r)], 0.0);
        for (int k = 0; k < D; ++k) EXPECT_EQ(dh[static_cast<size_t>(r * D + k)], 0.0);
      }
    }
  }
  // D = 0 (z = bias), V = 0, N = 0: the f32 path's results on the same values.
  struct Shape {
    int64_t N, D, V;
  };
  for (const Shape& sh : {Shape{3, 0, 4}, Shape{3, 2, 0}, Shape{0, 2, 4}}) {
    SCOPED_TRACE("N " + std::to_string(sh.N) + " D " + std::to_string(sh.D) + " V " + std::to_string(sh.V));
    std::vector<double> h64(static_cast<size_t>(sh.N * sh.D), 0.5), w64(static_cast<size_t>(sh.V * sh.D), -0.25),
        b64(static_cast<size_t>(sh.V), 0.125), l64(3, 9.0), dh64(h64.size(), 9.0), dw64(w64.size(), 9.0),
        db64(b64.size(), 9.0), one64(1, 1.0);
    std::vector<float> h32(h64.begin(), h64.end()), w32(w64.begin(), w64.end()), b32(b64.begin(), b64.end()),
        l32(3, 9.0f), dh32(h32.size(), 9.0f), dw32(w32.size(), 9.0f), db32(b32.size(), 9.0f), one32(1, 1.0f);
    std::vector<int64_t> t(static_cast<size_t>(sh.N), sh.V > 0 ? 1 : -100);
    smax::CrossEntropyOptions cm;  // kMean
    cm.loss.empty_mean = smax::EmptyMean::kZero;
    const smax::TensorView tt = smax::make_index_view(t.data(), {sh.N});
    smax::linear_cross_entropy_fused(
        f64_view(h64.data(), {sh.N, sh.D}), f64_view(w64.data(), {sh.V, sh.D}), tt, f64_view(b64.data(), {sh.V}),
        f64_view(l64.data(), {}), f64_view(one64.data(), {}), f64_view(dh64.data(), {sh.N, sh.D}),
        f64_view(dw64.data(), {sh.V, sh.D}), f64_view(db64.data(), {sh.V}), cm);
    smax::linear_cross_entropy_fused(
        smax::make_view(h32.data(), {sh.N, sh.D}), smax::make_view(w32.data(), {sh.V, sh.D}), tt,
        smax::make_view(b32.data(), {sh.V}), smax::make_view(l32.data(), {}), smax::make_view(one32.data(), {}),
        smax::make_view(dh32.data(), {sh.N, sh.D}), smax::make_view(dw32.data(), {sh.V, sh.D}),
        smax::make_view(db32.data(), {sh.V}), cm);
    EXPECT_NEAR(l64[0], l32[0], 1e-6 * (1 + std::fabs(l64[0])));
    for (size_t i = 0; i < dh64.size(); ++i) EXPECT_NEAR(dh64[i], dh32[i], 1e-6) << i;
    for (size_t i = 0; i < dw64.size(); ++i) EXPECT_NEAR(dw64[i], dw32[i], 1e-6) << i;
    for (size_t i = 0; i < db64.size(); ++i) EXPECT_NEAR(db64[i], db32[i], 1e-6) << i;
  }
}

// Bad input on the float64 path: smax::Error naming the argument, nothing written.
TEST_P(LceF64, ErrorsWriteNothing) {
  LceCase c = sized(4, 3, 6);
  LceData d(c);
  std::vector<double> loss(1, 7.0), dh(static_cast<size_t>(c.N * c.D), 7.0), dw(static_cast<size_t>(c.V * c.D), 7.0),
      one(1, 1.0), wrong(static_cast<size_t>(c.V * 2), 1.0);
  std::vector<int64_t> bad = d.y;
  bad[1] = c.V;  // out of range
  EXPECT_TRUE(throws_invalid([&] {
    smax::linear_cross_entropy(d.hidden(), d.weight(), smax::make_index_view(bad.data(), {c.N}), d.bias(),
                               f64_view(loss.data(), {}));
  }, "target"));
  EXPECT_TRUE(throws_invalid([&] {
    smax::linear_cross_entropy(d.hidden(), f64_view(wrong.data(), {c.V, 2}), d.target(), d.bias(),
                               f64_view(loss.data(), {}));
  }, "weight"));
  std::vector<double> hbig(static_cast<size_t>(c.V * c.D), 0.5);  // dweight over hidden
  EXPECT_TRUE(throws_invalid([&] {
    smax::linear_cross_entropy_fused(f64_view(hbig.data(), {c.N, c.D}), d.weight(), d.target(), d.bias(),
                                     f64_view(loss.data(), {}), f64_view(one.data(), {}),
                                     f64_view(dh.data(), {c.N, c.D}), f64_view(hbig.data(), {c.V, c.D}),
                                     std::nullopt);
  }, "dweight"));
  EXPECT_TRUE(throws_invalid([&] {
    smax::linear_cross_entropy_backward(d.hidden(), d.weight(), d.target(), d.bias(), f64_view(one.data(), {}),
                                        f64_view(dh.data(), {c.N, c.D}), f64_view(dw.data(), {c.V + 1, c.D}),
                                        std::nullopt);
  }, "dweight"));
  EXPECT_EQ(loss[0], 7.0);
  for (double v : dh) EXPECT_EQ(v, 7.0);
  for (double v : dw) EXPECT_EQ(v, 7.0);
}

SMAX_INSTANTIATE_PER_TARGET(LceF64);

}  // namespace
}  // namespace smax_test

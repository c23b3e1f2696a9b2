// tests/test_linear_cross_entropy_layout.cc: linear_cross_entropy on every SIMD target:
// strided inputs and outputs, determinism across threads, every error path;
// float64 finite differences of the oracle.
// Helpers, bounds and the fixture: tests/linear_cross_entropy_util.h.
#include "linear_cross_entropy_util.h"

namespace smax_test {
namespace {

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

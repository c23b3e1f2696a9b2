// tests/test_sparse_backward.cc: backward of the sparse normalisers on every SIMD
// target, and float64 finite differences of the oracles.
// Helpers, bounds and the fixture: tests/sparse_util.h.
#include "sparse_util.h"

namespace smax_test {
namespace {

// ---------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------

// Worst err / bound of the entmax-family backward checks (reported).
double g_bwd_worst = 0;

// Bounds: top-k (softmax_backward's) 2e-6 s w_i (|dy_i| + |q|) + 1e-30;
// entmax family (include/smax/sparse.h; ref::entmax_backward_bound):
//   2u |ref_i| + 1e-15 (n + 100 (1 + |2 - alpha|)) s w_i G + 1e-30,
//   G = sum_j w_j |dy_j| / sum_j w_j,
// the second term being the float64 error of q (sums of n terms in the
// library and in the oracle, and w's exp(e log y), whose relative error
// grows with |e ln y| <= 104 |2 - alpha|) times s w_i.
::testing::AssertionResult check_bwd(const Case& c, const Tensor& y, const Tensor& dy,
                                     const Tensor& dx, const std::vector<double>& expect,
                                     int axis, double s, const std::string& what) {
  const Geometry g(y.shape(), axis);
  CheckResult r;
  const double alpha = c.grad_alpha();
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t j = 0; j < g.inner; ++j) {
      double gw = 0;
      auto w = [&](double yv) {
        if (!(yv > 0)) return 0.0;
        return c.topk() ? yv : alpha == 2.0 ? 1.0 : std::pow(yv, 2.0 - alpha);
      };
      std::vector<double> yr, gr, er;  // the row, for ref::entmax_backward_bound
      for (int64_t k = 0; k < g.n; ++k) {
        const int64_t i = g.index(o, k, j);
        gw += w(y.at(i)) * dy.at(i);
        yr.push_back(y.at(i));
        gr.push_back(dy.at(i));
        er.push_back(expect[static_cast<size_t>(i)]);
      }
      const double q = gw;  // top-k: <dy, y> over the support
      const std::vector<double> eb =
          c.topk() ? std::vector<double>() : ref::entmax_backward_bound(yr, gr, er, alpha, s);
      for (int64_t k = 0; k < g.n; ++k) {
        const int64_t i = g.index(o, k, j);
        const double e = expect[static_cast<size_t>(i)];
        const double bound =
            c.topk() ? 2e-6 * s * w(y.at(i)) * (std::fabs(dy.at(i)) + std::fabs(q)) + 1e-30
                     : eb[static_cast<size_t>(k)];
        // Exact 0 off the support; on it ref can be 0 by cancellation.
        check_element(r, i, dx.at(i), e, bound, w(y.at(i)) == 0.0);
      }
    }
  }
  if (!c.topk()) g_bwd_worst = std::max(g_bwd_worst, r.worst_ratio);
  return to_assertion(r, what + " " + c.name());
}

// Saved output y: the oracle's forward rounded to f32, in y's layout.
void saved_output(const Case& c, const Tensor& src, const SoftmaxOptions& o, Tensor& y) {
  const auto f = reference_fwd(c, src.view(), o);
  for (int64_t i = 0; i < y.numel(); ++i) y.at(i) = static_cast<float>(f[static_cast<size_t>(i)]);
}

std::vector<double> reference_bwd(const Case& c, const Tensor& y, const Tensor& dy,
                                  const SoftmaxOptions& o) {
  if (c.topk()) return ref::softmax_backward(y.view(), dy.view(), o);
  return ref::entmax_backward(y.view(), dy.view(), c.grad_alpha(), o);
}

TEST_P(Sparse, BackwardVsReference) {
  Rng rng("bwd");
  for (const Case& c : all_cases()) {
    for (int64_t n : {1, 2, 3, 7, 8, 9, 31, 33, 100, 1001, 32000}) {
      for (Data d : {Data::kUniform, Data::kWide, Data::kSomeNegInf, Data::kConstant, Data::kNan,
                     Data::kAllNegInf}) {
        const int64_t rows = n > 2000 ? 1 : 3;
        Tensor src({rows, n}), y({rows, n}), dy({rows, n}, {}, 1), dx({rows, n});
        fill_rows(src, 1, d, rng);
        saved_output(c, src, {}, y);
        fill_normal(dy, rng);
        dx.poison();
        backward(c, y.view(), dy.view(), dx.view(), {});
        ASSERT_TRUE(dx.guards_intact());
        EXPECT_TRUE(check_bwd(c, y, dy, dx, reference_bwd(c, y, dy, {}), 1, 1.0,
                              std::string(data_name(d)) + " n=" + std::to_string(n)));
      }
    }
    // Strided, other axis, scale, in place (dx is dy).
    const std::vector<int64_t> shape = {5, 7, 4};
    Tensor src(shape), y(shape, permuted_strides(shape, {2, 1, 0}, 1)), dy(shape);
    src.fill([&](int64_t) { return rng.normal(); });
    SoftmaxOptions o;
    o.axis = 1;
    o.scale = 2.5f;
    saved_output(c, src, o, y);
    fill_normal(dy, rng);
    const auto expect = reference_bwd(c, y, dy, o);
    Tensor dy0 = dy;
    backward(c, y.view(), dy.view(), dy.view(), o);
    EXPECT_TRUE(check_bwd(c, y, dy0, dy, expect, 1, 2.5, "strided in place"));
  }
  std::printf("backward worst err/bound = %.3g\n", g_bwd_worst);
}

// alpha > 2: w_i = y_i^(2-alpha) is largest on the smallest y_i, so one
// entry can dominate q = <dy,w>/sum w and its dx_i = s w_i (dy_i - q) is a
// large w_i times a cancelling difference. q (and w) used to be rounded to
// f32 before that difference: errors up to |q| u w_i, measured 1e-3 (alpha 4)
// to 100% (alpha 5) of the row's largest |dx|, which the old bound
// 1e-6 s w_i (|dy_i| + |q|) did not see. The bound is now relative
// (check_bwd), and y with tiny support entries (w_i > FLT_MAX at alpha = 5)
// is checked too.
TEST_P(Sparse, BisectBackwardLargeAlpha) {
  Rng rng("bisect-large-alpha");
  for (double alpha : {3.0, 4.0, 5.0}) {
    const Case c{Case::kBisect, alpha};
    for (int64_t n : {2, 3, 7, 33, 100, 1001}) {
      for (Data d : {Data::kUniform, Data::kWide, Data::kSomeNegInf}) {
        const int64_t rows = 20;
        Tensor src({rows, n}), y({rows, n}), dy({rows, n}), dx({rows, n});
        fill_rows(src, 1, d, rng);
        saved_output(c, src, {}, y);
        fill_normal(dy, rng);
        backward(c, y.view(), dy.view(), dx.view(), {});
        EXPECT_TRUE(check_bwd(c, y, dy, dx, reference_bwd(c, y, dy, {}), 1, 1.0,
                              std::string(data_name(d)) + " n=" + std::to_string(n)));
      }
    }
    // A hand-made saved output with support entries of 1e-3 .. 1e-14 (the
    // backward takes any y): at alpha = 5, w = y^-3 reaches 1e42, past
    // FLT_MAX (the f32 w gave inf there). With w ratios past 1e16 the
    // dominant entry's w_i (dy_i - q) is lost in float64 as well (library
    // and oracle alike): the bound's w_i G term says so.
    Tensor y({1, 6}), dy({1, 6}), dx({1, 6});
    const float yv[6] = {0.9f, 0.1f, 1e-3f, 1e-7f, 1e-14f, 0.0f};
    for (int64_t i = 0; i < 6; ++i) y.at(i) = yv[i];
    fill_normal(dy, rng);
    backward(c, y.view(), dy.view(), dx.view(), {});
    EXPECT_TRUE(check_bwd(c, y, dy, dx, reference_bwd(c, y, dy, {}), 1, 1.0, "tiny y"));
    for (int64_t i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(dx.at(i))) << alpha << " " << i;
  }
  std::printf("backward worst err/bound = %.3g\n", g_bwd_worst);
}

TEST_P(Sparse, BisectDalphaAndPerRowAlpha) {
  Rng rng("dalpha");
  const std::vector<int64_t> shape = {3, 17, 2};
  Tensor src(shape), y(shape), dy(shape), dx(shape), y2(shape);
  src.fill([&](int64_t) { return 1.5f * rng.normal(); });
  fill_normal(dy, rng);
  Tensor alpha({3, 1, 2});
  alpha.fill([&](int64_t i) { return 1.1f + 0.35f * static_cast<float>(i); });
  EntmaxBisectOptions p;
  p.alpha_tensor = alpha.view();
  SoftmaxOptions o;
  o.axis = 1;
  smax::entmax_bisect(src.view(), y.view(), p, o);
  const auto fexp = ref::entmax_bisect(src.view(), p, o);
  EXPECT_TRUE(check_fwd({Case::kBisect, 1.1}, dense(y), fexp, "per-row alpha", 17));
  Tensor da({3, 2});
  da.poison();
  smax::entmax_bisect_backward(y.view(), dy.view(), dx.view(), da.view(), p, o);
  std::vector<double> da_ref;
  const auto dexp = ref::entmax_backward(y.view(), dy.view(), 0.0, o, &p, &da_ref);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    const int64_t row = (i / 34) * 2 + i % 2;
    const double a = alpha.at(row);
    const double w = y.at(i) > 0 ? std::pow(y.at(i), 2.0 - a) : 0.0;
    EXPECT_NEAR(dx.at(i), dexp[static_cast<size_t>(i)], 1e-6 * w * (std::fabs(dy.at(i)) + 3) + 1e-30);
  }
  for (int64_t r = 0; r < 6; ++r) {
    EXPECT_NEAR(da.at(r), da_ref[static_cast<size_t>(r)], 1e-6 * (1 + std::fabs(da_ref[static_cast<size_t>(r)])))
        << "row " << r;
  }
  EXPECT_TRUE(da.guards_intact());
}

TEST_P(Sparse, BisectOptions) {
  Rng rng("bisect-options");
  Tensor src({4, 50}), dst({4, 50}), sm({4, 50});
  src.fill([&](int64_t) { return rng.normal(); });
  for (int n_iter : {1, 2, 5, 12, 30}) {
    for (bool sum_one : {true, false}) {
      EntmaxBisectOptions p;
      p.alpha = 1.7f;
      p.n_iter = n_iter;
      p.ensure_sum_one = sum_one;
      smax::entmax_bisect(src.view(), dst.view(), p);
      EXPECT_TRUE(check_fwd({Case::kBisect, 1.7}, dense(dst), ref::entmax_bisect(src.view(), p),
                            "n_iter " + std::to_string(n_iter), 50));
    }
  }
  // alpha = 1 routes to softmax (bitwise).
  EntmaxBisectOptions one;
  one.alpha = 1.0f;
  smax::entmax_bisect(src.view(), dst.view(), one);
  smax::softmax(src.view(), sm.view());
  EXPECT_EQ(dst.dense(), sm.dense());
  // alpha = 2 equals sparsemax to rounding.
  EntmaxBisectOptions two;
  two.alpha = 2.0f;
  smax::entmax_bisect(src.view(), dst.view(), two);
  smax::sparsemax(src.view(), sm.view());
  for (int64_t i = 0; i < dst.numel(); ++i) EXPECT_NEAR(dst.at(i), sm.at(i), 3e-7);
}

// ---------------------------------------------------------------------------
// Finite differences of the float64 oracles (VJP formulas, dalpha, losses)
// ---------------------------------------------------------------------------
TEST(SparseReference, FiniteDifferences) {
  Rng rng("fd");
  const double h = 1e-6;
  for (int rep = 0; rep < 6; ++rep) {
    const size_t n = 7;
    std::vector<double> t(n), g(n);
    for (auto& v : t) v = rng.normal();
    for (auto& v : g) v = rng.normal();
    const double scale = 1.0;
    for (double alpha : {2.0, 1.5, 1.3, 2.6}) {
      auto f = [&](const std::vector<double>& x, double a) {
        if (a == 2.0) return ref::sparsemax_row(x);
        if (a == 1.5) return ref::entmax15_row(x);
        return ref::entmax_bisect_row(x, a, 200, true);
      };
      const auto y = f(t, alpha);
      double dalpha = 0;
      const auto vjp = ref::entmax_vjp_row(y, g, alpha, scale, &dalpha);
      for (size_t j = 0; j < n; ++j) {
        auto tp = t, tm = t;
        tp[j] += h;
        tm[j] -= h;
        const auto yp = f(tp, alpha), ym = f(tm, alpha);
        double fd = 0;
        for (size_t i = 0; i < n; ++i) fd += g[i] * (yp[i] - ym[i]) / (2 * h);
        EXPECT_NEAR(vjp[j], fd, 1e-6) << "alpha " << alpha << " j " << j;
      }
      if (alpha != 2.0 && alpha != 1.5) {
        const auto yp = f(t, alpha + h), ym = f(t, alpha - h);
        double fd = 0;
        for (size_t i = 0; i < n; ++i) fd += g[i] * (yp[i] - ym[i]) / (2 * h);
        EXPECT_NEAR(dalpha, fd, 1e-6) << "dalpha, alpha " << alpha;
      }
    }
    // sparse softmax VJP = softmax VJP on the kept set.
    const auto ys = ref::sparse_softmax_row(t, 3);
    double dot = 0;
    for (size_t i = 0; i < n; ++i) dot += g[i] * ys[i];
    for (size_t j = 0; j < n; ++j) {
      auto tp = t, tm = t;
      tp[j] += h;
      tm[j] -= h;
      const auto yp = ref::sparse_softmax_row(tp, 3), ym = ref::sparse_softmax_row(tm, 3);
      double fd = 0;
      for (size_t i = 0; i < n; ++i) fd += g[i] * (yp[i] - ym[i]) / (2 * h);
      EXPECT_NEAR(ys[j] * (g[j] - dot), fd, 1e-6);
    }
  }
  // Loss gradients p - d_t by finite differences of the loss oracle.
  for (int which = 0; which < 4; ++which) {
    std::vector<float> x(6);
    for (auto& v : x) v = rng.normal();
    int64_t tg = 2;
    RefSpec spec;
    spec.which = static_cast<RefSpec::Which>(which);
    spec.bisect.alpha = 1.4f;
    spec.k = 3;
    LossOptions lo;
    lo.reduction = Reduction::kSum;
    float one = 1.0f;
    const auto grad = ref::sparse_loss_backward(spec, smax::make_view(x.data(), {1, 6}),
                                                smax::make_index_view(&tg, {1}),
                                                smax::make_view(&one, {}), lo);
    for (size_t j = 0; j < 6; ++j) {
      const float hf = 1e-2f;
      auto xp = x, xm = x;
      xp[j] += hf;
      xm[j] -= hf;
      const double lp = ref::sparse_loss(spec, smax::make_view(xp.data(), {1, 6}),
                                         smax::make_index_view(&tg, {1}), lo)[0];
      const double lm = ref::sparse_loss(spec, smax::make_view(xm.data(), {1, 6}),
                                         smax::make_index_view(&tg, {1}), lo)[0];
      const double fd = (lp - lm) / (static_cast<double>(xp[j]) - xm[j]);
      EXPECT_NEAR(grad[j], fd, 2e-3) << "loss " << which << " j " << j;
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(Sparse);

}  // namespace
}  // namespace smax_test

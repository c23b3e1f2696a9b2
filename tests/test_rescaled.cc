// tests/test_rescaled.cc: the rescaled and rectified softmaxes on every SIMD
// target: random and adversarial rows, any axis with strides, masks and scale,
// thread counts bitwise equal, in place.
// Helpers, bounds and the fixture: tests/rescaled_util.h.
#include "rescaled_util.h"

namespace smax_test {
namespace {

std::vector<Params> params_for(Kind kind) {
  Params base;
  if (kind == Kind::kSsmax) {
    std::vector<Params> v(3, base);
    v[0].ssmax.s = 0.43f;
    v[1].ssmax.s = 1.0f;
    v[1].ssmax.fixed_n = 4096;
    v[2].ssmax.s = -0.5f;  // c < 0: masked entries must stay masked
    return v;
  }
  if (kind == Kind::kSoftpick) {
    std::vector<Params> v(2, base);
    v[1].softpick.eps = 1e-8f;
    return v;
  }
  return {base};
}

TEST_P(Rescaled, RandomAndAdversarialRows) {
  for (Kind kind : {Kind::kSsmax, Kind::kSoftpick, Kind::kStablemax}) {
    const std::vector<Params> ps = params_for(kind);
    for (size_t pi = 0; pi < ps.size(); ++pi) {
      std::vector<int64_t> sizes = kSweepSizes;
      if (pi == 0) sizes.push_back(kVocab);
      for (Data data : all_data()) {
        Rng rng(std::string(kind_name(kind)) + "/" + data_name(data) + "/" + std::to_string(pi));
        for (int64_t n : sizes) {
          const int64_t rows = n >= 32000 ? 1 : 3;
          Tensor src({rows, n}, {}, n % 3);
          fill_rows(src, 1, data, rng);
          Tensor dst({rows, n});
          SoftmaxOptions o;
          const std::string what = std::string(kind_name(kind)) + " p" + std::to_string(pi) + " " +
                                   data_name(data) + " n=" + std::to_string(n);
          record(check_forward(kind, src, dst, o, ps[pi], what));
          if (n <= 1001 || data == Data::kUniform || data == Data::kSomeNegInf) {
            record(check_backward_op(kind, src, dst, o, ps[pi], rng, what + " backward"));
          }
          if (stop()) FAIL() << "stopping after " << failures_ << " failing cases";
        }
      }
      // Near-zero rows, and empty_row = kNan.
      Rng rng(std::string(kind_name(kind)) + "/extra");
      for (int64_t n : {5, 64, 1001}) {
        Tensor src({3, n}), dst({3, n});
        fill_near_zero(src, rng);
        record(check_forward(kind, src, dst, {}, ps[pi], "near-zero"));
        record(check_backward_op(kind, src, dst, {}, ps[pi], rng, "near-zero backward"));
        SoftmaxOptions nan_rows;
        nan_rows.empty_row = EmptyRow::kNan;
        fill_rows(src, 1, Data::kAllNegInf, rng);
        record(check_forward(kind, src, dst, nan_rows, ps[pi], "all-masked kNan"));
        record(check_backward_op(kind, src, dst, nan_rows, ps[pi], rng, "all-masked kNan bwd"));
      }
    }
  }
}

TEST_P(Rescaled, AnyAxisStridedWithMasksAndScale) {
  Rng rng("axis");
  const std::vector<int64_t> shape = {4, 9, 6};
  const AxisMasks masks(rng);
  Tensor srows({4, 1, 1});
  srows.fill([&](int64_t i) { return 0.3f + 0.2f * static_cast<float>(i); });
  for (int axis = 0; axis < 3; ++axis) {
    for (Kind kind : {Kind::kSsmax, Kind::kSoftpick, Kind::kStablemax}) {
      Tensor src(shape, permuted_strides(shape, {2, 0, 1}, 1), 1);
      src.fill([&](int64_t) { return 2.0f * rng.normal(); });
      Tensor dst(shape, permuted_strides(shape, {1, 2, 0}, 2));
      SoftmaxOptions o = masks.options(axis, 1.5f, 0.8f);
      Params p;
      if (axis != 0) {  // s_rows broadcasts over [4, 1, 1] only when axis != 0
        p.ssmax.s_rows = srows.view();
      }
      const std::string what = std::string(kind_name(kind)) + " axis " + std::to_string(axis);
      record(check_forward(kind, src, dst, o, p, what));
      record(check_backward_op(kind, src, dst, o, p, rng, what + " backward"));
      // The view-level oracle agrees with the row-level one used above.
      if (kind == Kind::kStablemax) {
        const std::vector<double> r = ref::stablemax(src.view(), o);
        const std::vector<float> out = dst.dense();
        smax::stablemax(src.view(), dst.view(), o);
        const std::vector<float> out2 = dst.dense();
        for (size_t i = 0; i < r.size(); ++i) {
          EXPECT_NEAR(out2[i], r[i], 1e-6 * std::fabs(r[i]) + 1e-36) << what << " " << i;
        }
        (void)out;
      }
    }
  }
}

// Runs every op once on `src` (2-D, axis -1) with `threads` and returns all
// outputs concatenated (for bitwise comparisons).
std::vector<float> run_all(const Tensor& src, const Tensor& dy, const I64Tensor& target, int threads,
                           bool in_place) {
  SoftmaxOptions o;
  o.threads = threads;
  std::vector<float> all;
  const std::vector<int64_t> shape = src.shape();
  auto take = [&](const Tensor& t) {
    const std::vector<float> v = t.dense();
    all.insert(all.end(), v.begin(), v.end());
  };
  auto fwd = [&](const std::function<void(const TensorView&, const TensorView&)>& f) {
    Tensor out(shape);
    if (in_place) {
      Tensor io(shape);
      io.fill([&](int64_t i) { return src.at(i); });
      f(io.view(), io.view());
      take(io);
    } else {
      f(src.view(), out.view());
      take(out);
    }
  };
  auto bwd = [&](const std::function<void(const TensorView&, const TensorView&)>& f) {
    Tensor g(shape);
    g.fill([&](int64_t i) { return dy.at(i); });
    if (in_place) {
      f(g.view(), g.view());  // dsrc aliases dy
      take(g);
    } else {
      Tensor out(shape);
      f(g.view(), out.view());
      take(out);
    }
  };
  SsmaxOptions sp;
  fwd([&](const TensorView& s, const TensorView& d) { smax::ssmax(s, d, sp, o); });
  Tensor y(shape);
  smax::ssmax(src.view(), y.view(), sp, o);
  bwd([&](const TensorView& g, const TensorView& d) {
    smax::ssmax_backward(src.view(), y.view(), g, d, sp, o);
  });
  fwd([&](const TensorView& s, const TensorView& d) { smax::softpick(s, d, {}, o); });
  bwd([&](const TensorView& g, const TensorView& d) { smax::softpick_backward(src.view(), g, d, {}, o); });
  fwd([&](const TensorView& s, const TensorView& d) { smax::stablemax(s, d, o); });
  bwd([&](const TensorView& g, const TensorView& d) { smax::stablemax_backward(src.view(), g, d, o); });
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  Tensor loss({shape[0]});
  smax::stablemax_cross_entropy(src.view(), target.view(), loss.view(), lo, o);
  take(loss);
  Tensor dl({shape[0]});
  dl.fill([](int64_t i) { return 0.5f + static_cast<float>(i % 3); });
  Tensor gx(shape);
  smax::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), gx.view(), lo, o);
  take(gx);
  Tensor flags({shape[0]});
  const TensorView fv = flags.view();
  all.push_back(static_cast<float>(smax::softmax_collapse_fraction(src.view(), Precision::kF32, o, &fv)));
  take(flags);
  return all;
}

TEST_P(Rescaled, ThreadsBitwiseEqualAndInPlace) {
  Rng rng("threads");
  for (int64_t n : {7, 1001, 33000}) {
    const WideRows in(n, rng);
    I64Tensor target({in.rows});
    target.fill([&](int64_t i) { return i % 5 == 4 ? int64_t{-100} : rng.index(n); });
    expect_threads_bitwise_equal(
        [&](int threads, bool in_place) { return run_all(in.src, in.dy, target, threads, in_place); },
        n);
  }
}

SMAX_INSTANTIATE_PER_TARGET(Rescaled);

}  // namespace
}  // namespace smax_test

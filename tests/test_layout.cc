// tests/test_layout.cc: axes, strides, in place and masks, on every target.
//
//  * every axis (negative too) of 2-D, 3-D, 4-D (and rank 0, 1, 8) tensors,
//    with contiguous, permuted (axis stride 1 and != 1, inner contiguous and
//    not), padded, misaligned and negative-stride layouts for src and dst;
//  * in place (dst == src) for every axis;
//  * additive and bool masks with broadcasting ([1, cols] over [rows, cols],
//    [rows, 1] bool, stride-0 views, masks on a non-last axis), all-masked
//    rows under both empty_row policies.
#include <numeric>
#include <string>
#include <vector>

#include "test_util.h"

namespace smax_test {
namespace {

struct Layout {
  std::string name;
  std::vector<int64_t> strides;
  int64_t misalign = 0;
};

/// Memory layouts of `shape` that put `axis` in different places.
std::vector<Layout> layouts(const std::vector<int64_t>& shape, int axis) {
  const int r = static_cast<int>(shape.size());
  const int a = axis < 0 ? axis + r : axis;
  std::vector<int> ident(static_cast<size_t>(r));
  std::iota(ident.begin(), ident.end(), 0);
  std::vector<int> rev(ident.rbegin(), ident.rend());
  std::vector<int> axis_inner, axis_outer = {a};
  for (int d : ident) {
    if (d != a) axis_inner.push_back(d);
    if (d != a) axis_outer.push_back(d);
  }
  axis_inner.push_back(a);
  std::vector<Layout> out = {
      {"contiguous", row_major_strides(shape), 0},
      {"contiguous+1", row_major_strides(shape), 1},
      {"reversed", permuted_strides(shape, rev), 0},
      {"axis-innermost-padded", permuted_strides(shape, axis_inner, 3), 1},
      {"axis-outermost", permuted_strides(shape, axis_outer), 0},
      {"padded", permuted_strides(shape, ident, 5), 0},
  };
  std::vector<int64_t> neg = row_major_strides(shape);
  neg[0] = -neg[0];
  if (r > 1) neg[static_cast<size_t>(r - 1)] = -neg[static_cast<size_t>(r - 1)];
  out.push_back({"negative", neg, 0});
  return out;
}

class Layouts : public TargetTest {};

void every_axis(const std::vector<int64_t>& shape, const std::vector<Algorithm>& algos,
                Rng& rng, int& failures, const std::vector<int>& only_axes = {}) {
  const int r = static_cast<int>(shape.size());
  std::vector<int> axes = only_axes;
  if (axes.empty()) {
    for (int axis = -r; axis < r; ++axis) axes.push_back(axis);
  }
  for (int axis : axes) {
    for (Op op : all_ops()) {
      const std::vector<int64_t> dshape = op == Op::kLogsumexp ? drop_axis(shape, axis) : shape;
      const std::vector<Layout> src_layouts = layouts(shape, axis);
      for (size_t li = 0; li < src_layouts.size(); ++li) {
        const Layout& sl = src_layouts[li];
        // Pair each src layout with a dst layout (rotating through them).
        std::vector<Layout> dst_layouts;
        if (dshape.empty()) {
          dst_layouts = {{"scalar", {}, 0}};
        } else {
          const int daxis = op == Op::kLogsumexp ? 0 : axis;
          dst_layouts = layouts(dshape, daxis);
        }
        const Layout& dl = dst_layouts[(li * 3 + 1) % dst_layouts.size()];
        for (Algorithm a : algos) {
          Tensor src(shape, sl.strides, sl.misalign);
          fill_rows(src, axis, Data::kWide, rng);
          Tensor dst(dshape, dl.strides, dl.misalign);
          SoftmaxOptions o;
          o.axis = axis;
          o.algorithm = a;
          const ::testing::AssertionResult res =
              check_op(op, src, dst, o, rng,
                       shape_str(shape) + " axis " + std::to_string(axis) + " src " + sl.name +
                           " dst " + dl.name + " " + algo_str(a));
          EXPECT_TRUE(res);
          if (!res && ++failures > 15) return;
        }
      }
    }
  }
}

TEST_P(Layouts, EveryAxis2D) {
  Rng rng("axes2");
  int failures = 0;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{5, 7}, {33, 17}, {1, 9}, {9, 1}}) {
    every_axis(shape, all_algorithms(), rng, failures);
  }
}

TEST_P(Layouts, EveryAxis3D) {
  Rng rng("axes3");
  int failures = 0;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 4, 5}, {3, 33, 17}, {2, 1, 70}}) {
    every_axis(shape, {Algorithm::kAuto, Algorithm::kTwoPass}, rng, failures);
  }
}

TEST_P(Layouts, EveryAxis4D) {
  Rng rng("axes4");
  int failures = 0;
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{2, 3, 4, 5}, {2, 70, 9, 3}, {3, 2, 1, 40}}) {
    every_axis(shape, {Algorithm::kAuto, Algorithm::kOnline}, rng, failures);
  }
}

// Long reduced axis that is not the last one (column kernels over many rows).
TEST_P(Layouts, LongStridedAxis) {
  Rng rng("long-strided");
  int failures = 0;
  every_axis({3000, 5}, {Algorithm::kAuto}, rng, failures, {0, -1});
  every_axis({2, 70000, 2}, {Algorithm::kAuto}, rng, failures, {-2});
}

TEST_P(Layouts, RankZeroOneAndEight) {
  Rng rng("ranks");
  // Rank 0 behaves as shape [1].
  Tensor s0(std::vector<int64_t>{}), d0(std::vector<int64_t>{});
  s0.at(0) = 4.5f;
  smax::softmax(s0.view(), d0.view());
  EXPECT_EQ(d0.at(0), 1.0f);
  smax::log_softmax(s0.view(), d0.view());
  EXPECT_EQ(d0.at(0), 0.0f);
  smax::logsumexp(s0.view(), d0.view());
  EXPECT_EQ(d0.at(0), 4.5f);
  int failures = 0;
  every_axis({13}, all_algorithms(), rng, failures);
  every_axis({2, 1, 2, 1, 3, 1, 2, 5}, {Algorithm::kAuto}, rng, failures);
}

// In place: dst is exactly src (same pointer and strides).
TEST_P(Layouts, InPlace) {
  Rng rng("inplace");
  const std::vector<std::vector<int64_t>> shapes = {{4, 1}, {4, 64}, {3, 1000}, {2, 65537},
                                                     {3, 4, 5}, {2, 33, 17}};
  for (const auto& shape : shapes) {
    const int r = static_cast<int>(shape.size());
    for (int axis = -r; axis < r; ++axis) {
      for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
        for (Algorithm a : all_algorithms()) {
          for (const Layout& l : layouts(shape, axis)) {
            if (l.name != "contiguous" && l.name != "axis-outermost" && l.name != "negative") {
              continue;
            }
            Tensor t(shape, l.strides, l.misalign);
            fill_rows(t, axis, Data::kSomeNegInf, rng);
            SoftmaxOptions o;
            o.axis = axis;
            o.algorithm = a;
            const std::vector<double> ref = reference_forward(op, t.view(), o);
            library_forward(op, t.view(), t.view(), o);
            const std::string what = std::string(op_name(op)) + " in place " +
                                     shape_str(shape) + " axis " + std::to_string(axis) + " " +
                                     l.name + " " + algo_str(a);
            const std::vector<double> out = to_dense(t.view());
            EXPECT_TRUE(op == Op::kSoftmax ? check_softmax(out, ref, what)
                                           : check_log(out, ref, what));
          }
        }
      }
    }
  }
}

// ---- masks ----------------------------------------------------------------

TEST_P(Layouts, AdditiveMaskBroadcastRow) {
  Rng rng("addmask");
  for (Algorithm a : all_algorithms()) {
    for (int64_t n : {1, 7, 64, 65, 1000, 65537}) {
      const int64_t rows = n > 4096 ? 2 : 5;
      Tensor src({rows, n}, {}, 1), mask({1, n});
      fill_rows(src, 1, Data::kUniform, rng);
      mask.fill([&](int64_t i) { return i % 5 == 2 ? -kInfF : rng.uniform(-3, 3); });
      for (Op op : all_ops()) {
        if (is_backward(op)) continue;
        Tensor dst = op == Op::kLogsumexp ? Tensor({rows}) : Tensor({rows, n});
        SoftmaxOptions o;
        o.algorithm = a;
        o.additive_mask = mask.view();
        EXPECT_TRUE(check_op(op, src, dst, o, rng,
                             "additive [1,n] n=" + std::to_string(n) + " " + algo_str(a)));
        if (op == Op::kSoftmax) {
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t k = 2; k < n; k += 5) {
              ASSERT_EQ(dst.at(r * n + k), 0.0f) << "masked entry not exactly 0";
            }
          }
        }
      }
    }
  }
}

TEST_P(Layouts, BoolMaskRowsAndFull) {
  Rng rng("boolmask");
  for (Algorithm a : all_algorithms()) {
    for (int64_t n : {1, 3, 64, 257, 65537}) {
      const int64_t rows = n > 4096 ? 3 : 6;
      Tensor src({rows, n});
      fill_rows(src, 1, Data::kWide, rng);
      BoolTensor per_row({rows, 1}), full({rows, n}, {n + 2, 1}, 1);
      per_row.fill([&](int64_t r) { return static_cast<uint8_t>(r == 1 ? 0 : 1 + r); });
      full.fill([&](int64_t i) {
        const int64_t r = i / n;
        return static_cast<uint8_t>(r == 2 ? 0 : (rng.bernoulli(0.7) ? 255 : 0));
      });
      for (EmptyRow e : {EmptyRow::kZero, EmptyRow::kNan}) {
        for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogsumexp}) {
          for (int which = 0; which < 3; ++which) {
            Tensor dst = op == Op::kLogsumexp ? Tensor({rows, 1}) : Tensor({rows, n});
            SoftmaxOptions o;
            o.algorithm = a;
            o.empty_row = e;
            if (which != 1) o.bool_mask = per_row.view();
            if (which != 0) o.bool_mask = full.view();
            if (which == 2) {  // both masks together: an additive one too
              Tensor add({1, n});
              add.fill([&](int64_t) { return rng.uniform(-1, 1); });
              o.additive_mask = add.view();
              EXPECT_TRUE(check_op(op, src, dst, o, rng, "bool+additive " + algo_str(a)));
              continue;
            }
            EXPECT_TRUE(check_op(op, src, dst, o, rng,
                                 std::string(which == 0 ? "bool [rows,1]" : "bool full") +
                                     " n=" + std::to_string(n) + " " + algo_str(a) +
                                     (e == EmptyRow::kNan ? " nan" : " zero")));
          }
        }
      }
    }
  }
}

// Masks on a non-last axis, given with stride-0 views and lower rank.
TEST_P(Layouts, MasksOnOtherAxes) {
  Rng rng("mask-axes");
  const std::vector<int64_t> shape = {4, 6, 5};
  for (int axis : {0, 1, -1}) {
    for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogsumexp}) {
      Tensor src(shape, permuted_strides(shape, {2, 0, 1}), 1);
      fill_rows(src, axis, Data::kUniform, rng);
      Tensor add({1, 6, 5});
      add.fill([&](int64_t i) { return i % 4 == 0 ? -kInfF : rng.normal(); });
      BoolTensor keep({4, 1, 1});
      keep.fill([&](int64_t i) { return static_cast<uint8_t>(i != 3); });
      TensorView add_b = add.view();  // stride-0 broadcast over dim 0
      add_b.shape[0] = 4;
      add_b.strides[0] = 0;
      Tensor low({5});  // lower rank: right-aligned (NumPy) broadcast
      low.fill([&](int64_t) { return rng.normal(); });
      const std::vector<int64_t> dshape = op == Op::kLogsumexp ? drop_axis(shape, axis) : shape;
      for (int variant = 0; variant < 3; ++variant) {
        Tensor dst(dshape);
        SoftmaxOptions o;
        o.axis = axis;
        o.additive_mask = variant == 0 ? add.view() : add_b;
        if (variant == 2) {
          o.additive_mask = low.view();
          o.bool_mask = keep.view();
        }
        EXPECT_TRUE(check_op(op, src, dst, o, rng,
                             "masks axis " + std::to_string(axis) + " variant " +
                                 std::to_string(variant)));
      }
    }
  }
}

// An additive mask of -inf everywhere in some rows = all-masked rows.
TEST_P(Layouts, AllMaskedRowsBothPolicies) {
  Rng rng("all-masked");
  const int64_t rows = 4, n = 130;
  Tensor src({rows, n}), mask({rows, n});
  fill_rows(src, 1, Data::kUniform, rng);
  mask.fill([&](int64_t i) { return (i / n) % 2 == 1 ? -kInfF : 0.0f; });
  for (Algorithm a : all_algorithms()) {
    for (EmptyRow e : {EmptyRow::kZero, EmptyRow::kNan}) {
      SoftmaxOptions o;
      o.algorithm = a;
      o.empty_row = e;
      o.additive_mask = mask.view();
      Tensor y({rows, n}), l({rows, n}), s({rows});
      smax::softmax(src.view(), y.view(), o);
      smax::log_softmax(src.view(), l.view(), o);
      smax::logsumexp(src.view(), s.view(), o);
      for (int64_t r = 1; r < rows; r += 2) {
        for (int64_t k = 0; k < n; ++k) {
          if (e == EmptyRow::kZero) {
            ASSERT_EQ(y.at(r * n + k), 0.0f) << algo_str(a);
            ASSERT_EQ(l.at(r * n + k), -kInfF) << algo_str(a);
          } else {
            ASSERT_TRUE(std::isnan(y.at(r * n + k))) << algo_str(a);
            ASSERT_TRUE(std::isnan(l.at(r * n + k))) << algo_str(a);
          }
        }
        if (e == EmptyRow::kZero) {
          EXPECT_EQ(s.at(r), -kInfF) << algo_str(a);
        } else {
          EXPECT_TRUE(std::isnan(s.at(r))) << algo_str(a);
        }
      }
      // The other rows are unaffected by the policy.
      EXPECT_FALSE(std::isnan(y.at(0)));
      // Backward of an all-masked row under kZero: zero gradient.
      if (e == EmptyRow::kZero) {
        Tensor dy({rows, n}), dx({rows, n});
        fill_normal(dy, rng);
        smax::softmax_backward(y.view(), dy.view(), dx.view(), o);
        for (int64_t k = 0; k < n; ++k) ASSERT_EQ(dx.at(n + k), 0.0f);
        smax::log_softmax_backward(l.view(), dy.view(), dx.view(), o);
        for (int64_t k = 0; k < n; ++k) ASSERT_EQ(dx.at(n + k), 0.0f);
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(Layouts);

}  // namespace
}  // namespace smax_test

// tests/test_rowwise.cc: white-box tests of the row-wise op driver
// (src/core/rowwise.h) and the loss machinery (src/core/loss_rows.h) that every
// normaliser, loss and sampler is built on: layouts, the logit transform,
// masks, in-place aliasing, per-row operands, errors, reductions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/loss_rows.h"
#include "core/rowwise.h"
#include "reference/rows.h"
#include "smax/smax.h"
#include "test_util.h"

namespace {

using smax::detail::LossRows;
using smax::detail::RowArgs;
using smax::detail::Rowwise;
using smax_test::Array;
using smax_test::Rng;

// A toy op: out_i = 2 * t_i + row_param (t = logits), row_out = number of
// unmasked entries; both checked against a direct computation.
void toy(const smax::TensorView& x, const smax::TensorView& y, const smax::TensorView& param,
         const smax::TensorView& count, const smax::SoftmaxOptions& o) {
  Rowwise rw("toy", x, "src", /*src_is_logits=*/true, o);
  rw.add_output(y, "dst");
  rw.add_row_input(param, "param", smax::DType::kF32);
  rw.add_row_output(count, "count");
  rw.run(0, [](const RowArgs& a) {
    int64_t visible = 0;
    for (int64_t i = 0; i < a.n; ++i) {
      a.out[0][i] = 2.0f * a.in[0][i] + a.row_in[0];
      visible += a.in[0][i] != -INFINITY;
    }
    *a.row_out[0] = static_cast<float>(visible);
  });
}

TEST(Rowwise, EveryAxisStridedWithMasksAndRowOperands) {
  Rng rng("data");
  const std::vector<int64_t> shape = {3, 5, 7};
  for (int axis = 0; axis < 3; ++axis) {
    Array<float> x(shape, smax_test::permuted_strides(shape, {2, 0, 1}, 2), 1);
    x.fill([&](int64_t) { return rng.normal(); });
    Array<float> y(shape, smax_test::permuted_strides(shape, {1, 2, 0}, 1));
    std::vector<int64_t> pshape = shape;
    pshape[static_cast<size_t>(axis)] = 1;
    Array<float> param(pshape);
    param.fill([&](int64_t i) { return static_cast<float>(i); });
    std::vector<int64_t> cshape = smax_test::drop_axis(shape, axis);
    Array<float> count(cshape, {}, 0);
    Array<uint8_t> keep({shape[2]});
    keep.fill([&](int64_t i) { return static_cast<uint8_t>(i % 3 != 0); });
    smax::SoftmaxOptions o;
    o.axis = axis;
    o.scale = 0.5f;
    o.bool_mask = keep.view();
    for (int threads : {1, 2, 3}) {
      o.threads = threads;
      toy(x.view(), y.view(), param.view(), count.view(), o);
      const smax_test::Geometry g(shape, axis);
      for (int64_t out = 0; out < g.outer; ++out) {
        for (int64_t in = 0; in < g.inner; ++in) {
          const int64_t row = out * g.inner + in;
          int64_t visible = 0;
          for (int64_t k = 0; k < g.n; ++k) {
            const int64_t i = g.index(out, k, in);
            const int64_t last = i % shape[2];
            const float t = keep.at(last) ? x.at(i) * 0.5f : -INFINITY;
            visible += keep.at(last) != 0;
            ASSERT_EQ(y.at(i), 2.0f * t + param.at(row)) << "axis " << axis << " i " << i;
          }
          ASSERT_EQ(count.at(row), static_cast<float>(visible));
        }
      }
      EXPECT_TRUE(y.guards_intact());
      EXPECT_TRUE(count.guards_intact());
    }
  }
}

TEST(Rowwise, MatchesTheReferenceRowView) {
  Rng rng("data");
  const std::vector<int64_t> shape = {2, 3, 4, 5};
  Array<float> add({4, 1});
  add.fill([&](int64_t i) { return i == 2 ? -INFINITY : rng.normal(); });
  Array<uint8_t> keep({3, 1, 5});
  keep.fill([&](int64_t i) { return static_cast<uint8_t>(i % 4 != 1); });
  for (int axis = 0; axis < 4; ++axis) {
    Array<float> x(shape, smax_test::permuted_strides(shape, {3, 1, 0, 2}, 1));
    x.fill([&](int64_t) { return rng.normal(); });
    Array<float> y(shape);
    std::vector<int64_t> pshape = shape;
    pshape[static_cast<size_t>(axis)] = 1;
    Array<float> param(pshape);
    param.fill([&](int64_t) { return rng.normal(); });
    Array<float> count(smax_test::drop_axis(shape, axis));
    smax::SoftmaxOptions o;
    o.axis = axis - 4;
    o.temperature = 3.0f;
    o.additive_mask = add.view();
    o.bool_mask = keep.view();
    toy(x.view(), y.view(), param.view(), count.view(), o);
    const auto R = smax::reference::ref_rows("toy", x.view(), o);
    const auto p = smax::reference::ref_row_values("toy", param.view(), R);
    std::vector<double> by_row(static_cast<size_t>(R.rows * R.n));
    for (int64_t r = 0; r < R.rows; ++r) {
      for (int64_t k = 0; k < R.n; ++k) {
        by_row[static_cast<size_t>(r * R.n + k)] =
            static_cast<float>(2.0f * static_cast<float>(R.row(r)[k]) + static_cast<float>(p[static_cast<size_t>(r)]));
      }
    }
    const auto expect = R.scatter(by_row);
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.at(i), expect[static_cast<size_t>(i)]) << axis << " " << i;
  }
}

TEST(Rowwise, InPlaceGoesThroughScratch) {
  Array<float> x({4, 9});
  x.fill([](int64_t i) { return static_cast<float>(i); });
  smax::SoftmaxOptions o;
  Rowwise rw("reverse", x.view(), "src", false, o);
  rw.add_output(x.view(), "dst");
  rw.run(0, [](const RowArgs& a) {
    ASSERT_NE(a.in[0], a.out[0]);
    for (int64_t i = 0; i < a.n; ++i) a.out[0][i] = a.in[0][a.n - 1 - i];
  });
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(x.at(r * 9 + i), static_cast<float>(r * 9 + 8 - i));
  }
}

// Rows of length 0 touch no element, so their tensors may have null data:
// no address may be formed from it (fuzz finding: smax::sample on
// [1, 0, 5, 4] with null data computed null + offset in the gather, UB).
TEST(Rowwise, EmptyRowsWithNullData) {
  const smax::TensorView x = smax::make_view(static_cast<float*>(nullptr), {1, 0, 5, 4});
  smax::SoftmaxOptions o;
  o.axis = 1;
  std::vector<float> param(20, 1.0f), count(20, -1.0f);
  const auto pv = smax::make_view(param.data(), {1, 1, 5, 4});
  const auto cv = smax::make_view(count.data(), {1, 1, 5, 4});
  smax::TensorView mask;  // a bool mask with no elements either (null data)
  mask.dtype = smax::DType::kBool;
  mask.rank = 4;
  const int64_t mshape[4] = {1, 0, 5, 4};
  for (int d = 0; d < 4; ++d) mask.shape[d] = mshape[d];
  mask.strides[1] = 1;
  o.bool_mask = mask;
  EXPECT_NO_THROW(toy(x, smax::make_view(static_cast<float*>(nullptr), {1, 0, 5, 4}), pv, cv, o));
  for (float c : count) EXPECT_EQ(c, 0.0f);  // every row ran, with n = 0
  // Public ops on the same shape (the normalisers, a loss, the sampler).
  o.bool_mask.reset();
  EXPECT_NO_THROW(smax::sparsemax(x, smax::make_view(static_cast<float*>(nullptr), {1, 0, 5, 4}), o));
  EXPECT_NO_THROW(smax::softpick(x, smax::make_view(static_cast<float*>(nullptr), {1, 0, 5, 4}), {}, o));
  std::vector<int64_t> idx(20, -7);
  EXPECT_NO_THROW(smax::sample(x, smax::make_index_view(idx.data(), {1, 1, 5, 4}), {}, o));
}

TEST(Rowwise, ErrorsBeforeAnyWrite) {
  Array<float> x({4, 9}), y({4, 9}), bad({4, 8});
  smax::SoftmaxOptions o;
  auto run = [&](const smax::TensorView& out) {
    Rowwise rw("toy", x.view(), "src", false, o);
    rw.add_output(out, "dst");
    rw.run(0, [](const RowArgs& a) {
      for (int64_t i = 0; i < a.n; ++i) a.out[0][i] = 1.0f;
    });
  };
  EXPECT_THROW(run(bad.view()), smax::Error);
  // Partial overlap with the input.
  smax::TensorView shifted = x.view();
  shifted.data = static_cast<float*>(shifted.data) + 1;
  shifted.shape[0] = 3;
  smax::TensorView src3 = x.view();
  src3.shape[0] = 3;
  try {
    Rowwise rw("toy", src3, "src", false, o);
    rw.add_output(shifted, "dst");
    rw.run(0, [](const RowArgs&) {});
    FAIL() << "overlap accepted";
  } catch (const smax::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dst overlaps src"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(bad.guards_intact());
}

TEST(LossRows, TargetsWeightsAndReductions) {
  Array<float> logits({3, 4});
  Array<int64_t> target({3});
  const int64_t t[] = {1, -100, 3};
  for (int i = 0; i < 3; ++i) target.at(i) = t[i];
  std::vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f};
  smax::LossOptions lo;
  lo.weight = smax::make_view(w.data(), {4});
  const std::vector<double> loss = {0.5, 100.0, 0.25};

  lo.reduction = smax::Reduction::kMean;
  LossRows mean("loss", logits.view(), 1, target.view(), lo);
  EXPECT_TRUE(mean.ignored(1));
  EXPECT_EQ(mean.weight(2), 4.0);
  float out = 0;
  mean.write(loss, smax::make_view(&out, {}));
  EXPECT_FLOAT_EQ(out, static_cast<float>((2 * 0.5 + 4 * 0.25) / 6.0));
  float g = 3.0f;
  const auto c = mean.coefficients(smax::make_view(&g, {}));
  EXPECT_DOUBLE_EQ(c[0], 2 * 3.0 / 6.0);
  EXPECT_DOUBLE_EQ(c[1], 0.0);

  lo.reduction = smax::Reduction::kNone;
  LossRows none("loss", logits.view(), 1, target.view(), lo);
  Array<float> per_row({3});
  none.check_output(per_row.view(), "dst");
  none.write(loss, per_row.view());
  EXPECT_EQ(per_row.at(0), 1.0f);
  EXPECT_EQ(per_row.at(1), 0.0f);
  EXPECT_EQ(per_row.at(2), 1.0f);

  // All ignored + mean: NaN, or 0 on request.
  for (int i = 0; i < 3; ++i) target.at(i) = -100;
  lo.reduction = smax::Reduction::kMean;
  LossRows empty("loss", logits.view(), 1, target.view(), lo);
  empty.write(loss, smax::make_view(&out, {}));
  EXPECT_TRUE(std::isnan(out));
  lo.empty_mean = smax::EmptyMean::kZero;
  LossRows zero("loss", logits.view(), 1, target.view(), lo);
  zero.write(loss, smax::make_view(&out, {}));
  EXPECT_EQ(out, 0.0f);

  // Out of range target.
  target.at(0) = 4;
  EXPECT_THROW(LossRows("loss", logits.view(), 1, target.view(), lo), smax::Error);
  target.at(0) = -1;
  EXPECT_THROW(LossRows("loss", logits.view(), 1, target.view(), lo), smax::Error);
}

}  // namespace

// tests/test_softmax_backward.cc: softmax_backward and log_softmax_backward
// against the float64 reference VJPs, on every SIMD target and with every
// algorithm value in the options, with random upstream gradients (never all
// ones). y is the float64 reference forward rounded to f32 (the "saved
// output"), so these tests do not depend on the forward kernels.
// Bounds (derived in test_util.h):
//   softmax:     |dx - ref| <= 2e-6 s |y| (|dy| + |<dy,y>|) + 1e-30
//   log_softmax: |dx - ref| <= 2e-6 s (|dy| + e^y |sum dy| + e^y sum |dy|) + 1e-30
// with exact zeros where y = 0 (softmax) or y = -inf (log_softmax).
#include <cstring>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "softmax_util.h"

namespace smax_test {
namespace {

const std::vector<Op> kBackwardOps = {Op::kSoftmaxBackward, Op::kLogSoftmaxBackward};

class Backward : public SweepTargetTest {};

std::vector<int64_t> small_sizes() {
  std::vector<int64_t> v;
  for (int64_t n = 0; n <= 70; ++n) v.push_back(n);
  return v;
}

TEST_P(Backward, SmallSizes) {
  sweep("bwd/", kBackwardOps, small_sizes(), Data::kUniform, {}, 3, 0);
  sweep("bwd/", kBackwardOps, small_sizes(), Data::kWide, {}, 2, 1);
}

TEST_P(Backward, TileSizesAndPrimes) {
  const std::vector<int64_t> sizes = {63,  64,  65,   127,  128,  129,  255,  256,
                                      257, 97,  251,  509,  1021, 1031, 2039, 4093,
                                      8191, 16381, 1000, 1001};
  sweep("bwd/", kBackwardOps, sizes, Data::kUniform, {}, 3, 0);
  sweep("bwd/", kBackwardOps, sizes, Data::kWide, {}, 2, 1);
}

TEST_P(Backward, LongRows) {
  const std::vector<int64_t> sizes = {21841, 32000, 65535, 65536, 65537, 128256, 3 * 65536 + 5};
  sweep("bwd/", kBackwardOps, sizes, Data::kUniform, {}, 1, 0);
  sweep("bwd/", kBackwardOps, sizes, Data::kHigh, {}, 1, 1, {Algorithm::kAuto});
}

TEST_P(Backward, Adversarial) {
  const std::vector<int64_t> sizes = {1, 2, 3, 8, 17, 64, 65, 257, 1000, 65537};
  for (Data d : all_data()) {
    SCOPED_TRACE(data_name(d));
    sweep("bwd/", kBackwardOps, sizes, d, {}, 3, 0, {Algorithm::kAuto, Algorithm::kOnline});
    if (HasFatalFailure()) return;
  }
  SoftmaxOptions nan_rows;
  nan_rows.empty_row = EmptyRow::kNan;
  sweep("bwd/", kBackwardOps, {1, 5, 64, 1000}, Data::kAllNegInf, nan_rows, 3, 0,
        {Algorithm::kAuto});
}

TEST_P(Backward, ScaleAndTemperature) {
  struct ST {
    float scale, temperature;
  };
  for (const ST& st : {ST{0.125f, 1.0f}, ST{1.0f, 0.7f}, ST{3.0f, 2.0f}, ST{0.3f, 0.7f}}) {
    SCOPED_TRACE("scale " + std::to_string(st.scale) + " temperature " +
                 std::to_string(st.temperature));
    SoftmaxOptions o;
    o.scale = st.scale;
    o.temperature = st.temperature;
    sweep("bwd/", kBackwardOps, {1, 7, 64, 65, 1000, 65537}, Data::kUniform, o, 3, 0);
    sweep("bwd/", kBackwardOps, {9, 1000}, Data::kSomeNegInf, o, 3, 1, {Algorithm::kAuto});
    if (HasFatalFailure()) return;
  }
}

// dx may alias dy (in place): same results as out of place.
TEST_P(Backward, InPlace) {
  Rng rng("inplace");
  for (Op op : kBackwardOps) {
    for (int64_t n : {1, 5, 64, 1000, 65537}) {
      for (Data d : {Data::kUniform, Data::kSomeNegInf}) {
        const std::vector<int64_t> shape = {n > 4096 ? 2 : 4, n};
        Tensor src(shape), y(shape, {}, 1), dy(shape, {shape[1] + 3, 1}, 2);
        fill_rows(src, 1, d, rng);
        SoftmaxOptions o;
        o.temperature = 0.5f;
        make_saved_output(op, src, o, y);
        fill_normal(dy, rng);
        const std::vector<double> ref = reference_backward(op, y.view(), dy.view(), o);
        const std::vector<double> yd = to_dense(y.view()), dyd = to_dense(dy.view());
        library_backward(op, y.view(), dy.view(), dy.view(), o);
        EXPECT_TRUE(check_backward(op == Op::kLogSoftmaxBackward, to_dense(dy.view()), ref, yd,
                                   dyd, Geometry(shape, -1), eff_scale(o),
                                   std::string(op_name(op)) + " in place n=" +
                                       std::to_string(n) + " " + data_name(d)));
        EXPECT_TRUE(dy.guards_intact());
      }
    }
  }
}

// Exact zero gradient on masked entries (y = 0 / y = -inf), even next to a
// huge upstream gradient, and a zero gradient for an all-masked row (kZero).
TEST_P(Backward, MaskedEntriesGetExactZero) {
  const int64_t n = 300;
  Rng rng("masked-zero");
  Tensor y({2, n}), ly({2, n}), dy({2, n}), dx({2, n});
  for (int64_t k = 0; k < n; ++k) {
    const bool masked = k % 3 == 0;
    y.at(k) = masked ? 0.0f : 1.0f / 200;
    ly.at(k) = masked ? -kInfF : std::log(1.0f / 200);
    y.at(n + k) = 0.0f;  // all-masked row, kZero
    ly.at(n + k) = -kInfF;
  }
  dy.fill([&](int64_t i) { return i % 7 == 0 ? 1e20f : rng.normal(); });
  smax::softmax_backward(y.view(), dy.view(), dx.view());
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (y.at(i) == 0.0f) {
      EXPECT_EQ(dx.at(i), 0.0f) << "softmax_backward " << i;
    }
  }
  smax::log_softmax_backward(ly.view(), dy.view(), dx.view());
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (ly.at(i) == -kInfF) {
      EXPECT_EQ(dx.at(i), 0.0f) << "log_softmax_backward " << i;
    }
  }
}

// Batched rows of >= 512 are pipelined (kernels/softmax_backward.cc,
// BlockedReduce: each row's store sweep also computes the next row's
// reduction): every row must get the bits it gets when computed alone, on
// every target. Row lengths around the pipeline's threshold and the
// kernels' vector tails; adversarial y and dy (NaN, -inf, huge values that
// take the float64 path, flushing values); rows strided apart; in place
// (dx = dy) and out of place; regular and streamed stores; 1 and 2 threads.
TEST_P(Backward, PipelinedRowsSameBitsAsOneRowCalls) {
  StreamModeGuard guard;
  Rng rng("Backward.PipelinedRowsSameBitsAsOneRowCalls");
  const int64_t rows = 7;
  for (int64_t n : {511, 512, 513, 1000, 1031, 4093, 8200, 32000}) {
    const int64_t stride = (n + 9 + 15) / 16 * 16;  // rows 64-byte aligned: they may stream
    const size_t count = static_cast<size_t>(rows * stride);
    for (int kind = 0; kind < kAdversarialRowKinds; ++kind) {
      const std::vector<float> y = adversarial_row(kind, static_cast<int64_t>(count), rng);
      const std::vector<float> dy =
          adversarial_row((kind + 1) % kAdversarialRowKinds, static_cast<int64_t>(count), rng);
      for (Op op : kBackwardOps) {
        auto run = [&](const float* yp, const float* dyp, float* dxp, int64_t r, int64_t s,
                       int threads) {
          SoftmaxOptions o;
          o.threads = threads;
          const smax::TensorView yv = smax::make_view(yp, {r, n}, {s, 1});
          const smax::TensorView dyv = smax::make_view(dyp, {r, n}, {s, 1});
          const smax::TensorView dxv = smax::make_view(dxp, {r, n}, {s, 1});
          if (op == Op::kSoftmaxBackward) {
            smax::softmax_backward(yv, dyv, dxv, o);
          } else {
            smax::log_softmax_backward(yv, dyv, dxv, o);
          }
        };
        // Each row alone (one row: nothing to pipeline).
        std::vector<float> alone(count, 0.0f);
        smax::set_streaming_stores("off");
        for (int64_t r = 0; r < rows; ++r) {
          run(y.data() + r * stride, dy.data() + r * stride, alone.data() + r * stride, 1, stride, 1);
        }
        for (const char* mode : {"off", "on"}) {
          for (bool in_place : {false, true}) {
            for (int threads : {1, 2}) {
              SCOPED_TRACE(testing::Message() << op_name(op) << " n " << n << " kind " << kind
                                              << " stores " << mode << " in place " << in_place
                                              << " threads " << threads);
              smax::set_streaming_stores(mode);
              PlacedFloats ys(count, 0), dys(count, 0), dxs(count, 0);
              std::memcpy(ys.data, y.data(), count * sizeof(float));
              std::memcpy(dys.data, dy.data(), count * sizeof(float));
              float* dx = in_place ? dys.data : dxs.data;
              run(ys.data, dys.data, dx, rows, stride, threads);
              for (int64_t r = 0; r < rows; ++r) {
                ASSERT_EQ(std::memcmp(dx + r * stride, alone.data() + r * stride,
                                      static_cast<size_t>(n) * sizeof(float)),
                          0)
                    << "row " << r;
              }
            }
          }
        }
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(Backward);

}  // namespace
}  // namespace smax_test

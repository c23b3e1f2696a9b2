// tests/test_stream_stores_xent.cc: streaming (non-temporal) stores of the
// cross-entropy gradient (core/stream_stores.h; the fused gradient of
// cross_entropy and cross_entropy_backward's dsrc) change no bit: forced on
// vs forced off, on every target, on 1 and 2 threads, with the gradient 0,
// 3 and 8 floats past a 64-byte boundary (the kernel peels to an aligned
// vector), rows long enough to stream and rows too short for the peel, NaN /
// -inf / signed-zero data, and the options that change the kernel's
// instantiation or its coefficients: class weights, label smoothing with a
// softcap, an additive mask, z-loss, ignored rows, probability targets (with
// and without class weights). And "auto" decides the
// cross-entropy site from its own calls, leaving the others measuring.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/stream_stores.h"
#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

enum class Variant { kPlain, kWeights, kSmoothCap, kMask, kZLoss, kProbs, kProbsWeights };
constexpr Variant kVariants[] = {Variant::kPlain, Variant::kWeights, Variant::kSmoothCap,
                                 Variant::kMask,  Variant::kZLoss,   Variant::kProbs,
                                 Variant::kProbsWeights};

class StreamStoresXent : public TargetTest {};

TEST_P(StreamStoresXent, SameBitsOnAndOff) {
  StreamModeGuard guard;
  Rng rng(seed_for("StreamStoresXent.SameBitsOnAndOff"));
  struct Shape {
    int64_t rows, n;
  };
  const Shape shapes[] = {{7, 4096}, {5, 9000}, {9, 255}, {4, 100}, {3, 130}};
  for (const Shape& shape : shapes) {
    const size_t count = static_cast<size_t>(shape.rows * shape.n);
    const int64_t dims[2] = {shape.rows, shape.n};
    const int64_t rows_dim[1] = {shape.rows};
    const int64_t class_dim[1] = {shape.n};
    std::vector<int64_t> target(static_cast<size_t>(shape.rows));
    for (size_t r = 0; r < target.size(); ++r) {
      target[r] = r % 4 == 3 ? -100 : static_cast<int64_t>(rng.uniform(0.0f, 1.0f) * shape.n) % shape.n;
    }
    std::vector<float> weight(static_cast<size_t>(shape.n)), mask(count), probs(count);
    for (auto& v : weight) v = rng.uniform(0.25f, 2.0f);
    for (auto& v : mask) v = rng.uniform(0.0f, 1.0f) < 0.1f ? -kInfF : rng.uniform(-1.0f, 1.0f);
    for (int64_t r = 0; r < shape.rows; ++r) {
      double sum = 0.0;
      for (int64_t j = 0; j < shape.n; ++j) sum += probs[r * shape.n + j] = rng.uniform(0.0f, 1.0f);
      for (int64_t j = 0; j < shape.n; ++j) probs[r * shape.n + j] /= static_cast<float>(sum);
    }
    std::vector<float> dloss(static_cast<size_t>(shape.rows));
    for (auto& v : dloss) v = rng.uniform(-2.0f, 2.0f);
    for (int kind = 0; kind < kAdversarialRowKinds; ++kind) {
      const std::vector<float> x = adversarial_row(kind, static_cast<int64_t>(count), rng);
      PlacedFloats src(count, 5);
      std::memcpy(src.data, x.data(), count * sizeof(float));
      for (Variant variant : kVariants) {
        for (size_t offset : {size_t{0}, size_t{3}, size_t{8}}) {
          for (int threads : {1, 2}) {
            SCOPED_TRACE(testing::Message() << shape.rows << "x" << shape.n << " kind " << kind
                                            << " variant " << static_cast<int>(variant)
                                            << " offset " << offset << " threads " << threads);
            auto view = [&](float* p) {
              return smax::make_view(p, smax::DType::kF32, 2, dims, nullptr);
            };
            smax::SoftmaxOptions o;
            o.threads = threads;
            smax::CrossEntropyOptions ce;
            ce.loss.reduction = smax::Reduction::kNone;
            smax::TensorView tgt = smax::make_view(target.data(), smax::DType::kI64, 1, rows_dim, nullptr);
            switch (variant) {
              case Variant::kPlain:
                break;
              case Variant::kWeights:
                ce.loss.weight = smax::make_view(weight.data(), smax::DType::kF32, 1, class_dim, nullptr);
                break;
              case Variant::kSmoothCap:
                ce.label_smoothing = 0.1f;
                ce.softcap = 30.0f;
                break;
              case Variant::kMask:
                o.additive_mask = view(mask.data());
                break;
              case Variant::kZLoss:
                ce.lse_square_scale = 1e-4f;
                break;
              case Variant::kProbs:
                tgt = view(probs.data());
                break;
              case Variant::kProbsWeights:  // with label smoothing: bq and b both non-zero
                tgt = view(probs.data());
                ce.loss.weight = smax::make_view(weight.data(), smax::DType::kF32, 1, class_dim, nullptr);
                ce.label_smoothing = 0.05f;
                break;
            }
            PlacedFloats grad[2] = {{count, offset}, {count, offset}};
            PlacedFloats fused[2] = {{count, offset}, {count, offset}};
            std::vector<float> loss(static_cast<size_t>(shape.rows));
            for (int k = 0; k < 2; ++k) {
              smax::set_streaming_stores(k == 0 ? "off" : "on");
              smax::cross_entropy_backward(
                  view(src.data), tgt,
                  smax::make_view(dloss.data(), smax::DType::kF32, 1, rows_dim, nullptr),
                  view(grad[k].data), ce, o);
              smax::CrossEntropyOptions with_grad = ce;
              with_grad.grad = view(fused[k].data);
              smax::cross_entropy(view(src.data), tgt,
                                  smax::make_view(loss.data(), smax::DType::kF32, 1, rows_dim, nullptr),
                                  with_grad, o);
            }
            ASSERT_EQ(std::memcmp(grad[0].data, grad[1].data, count * sizeof(float)), 0)
                << "cross_entropy_backward";
            ASSERT_EQ(std::memcmp(fused[0].data, fused[1].data, count * sizeof(float)), 0)
                << "cross_entropy grad";
          }
        }
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(StreamStoresXent);

// "auto": cross_entropy_backward calls whose logits + gradient exceed the
// last-level cache are measured and decide the cross-entropy site within a
// few calls, with the same bits meanwhile; the other sites keep measuring.
TEST(StreamStoresXentAuto, DecidesOnItsOwn) {
  StreamModeGuard guard;
  using smax::detail::StoreSite;
  const int64_t llc = smax::detail::last_level_cache_bytes();
  const int64_t n = 8192;
  const int64_t rows = std::max((llc * 5 / 4) / (8 * n) + 1, (int64_t{1} << 23) / n);
  const size_t count = static_cast<size_t>(rows * n);
  const int64_t dims[2] = {rows, n};
  const int64_t rows_dim[1] = {rows};
  Rng rng(seed_for("StreamStoresXentAuto"));
  const std::vector<float> x = adversarial_row(0, static_cast<int64_t>(count), rng);
  std::vector<int64_t> target(static_cast<size_t>(rows));
  for (size_t r = 0; r < target.size(); ++r) target[r] = static_cast<int64_t>(r * 7919 % n);
  std::vector<float> dloss(static_cast<size_t>(rows), 0.5f), expected(count), grad(count);
  auto view = [&](const float* p) {
    return smax::make_view(const_cast<float*>(p), smax::DType::kF32, 2, dims, nullptr);
  };
  const smax::TensorView tgt =
      smax::make_view(target.data(), smax::DType::kI64, 1, rows_dim, nullptr);
  const smax::TensorView dl =
      smax::make_view(dloss.data(), smax::DType::kF32, 1, rows_dim, nullptr);
  smax::CrossEntropyOptions ce;
  ce.loss.reduction = smax::Reduction::kNone;
  smax::SoftmaxOptions o;
  o.threads = 1;
  smax::set_streaming_stores("off");
  smax::cross_entropy_backward(view(x.data()), tgt, dl, view(expected.data()), ce, o);
  smax::set_streaming_stores("auto");
  auto state = [](StoreSite site) { return std::string(smax::detail::store_site_state(site)); };
  int calls = 0;
  for (; calls < 20 && state(StoreSite::kCrossEntropy) == "measuring"; ++calls) {
    std::memset(grad.data(), 0xff, count * sizeof(float));
    smax::cross_entropy_backward(view(x.data()), tgt, dl, view(grad.data()), ce, o);
    ASSERT_EQ(std::memcmp(expected.data(), grad.data(), count * sizeof(float)), 0)
        << "call " << calls;
  }
  const std::string decided = state(StoreSite::kCrossEntropy);
  EXPECT_TRUE(decided == "stream" || decided == "regular") << decided << " after " << calls;
  EXPECT_LE(calls, 6);
  EXPECT_EQ(state(StoreSite::kSoftmax), "measuring");
  EXPECT_EQ(state(StoreSite::kLogSoftmax), "measuring");
  EXPECT_EQ(state(StoreSite::kBackward), "measuring");
}

}  // namespace
}  // namespace smax_test

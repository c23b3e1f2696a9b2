// tests/test_stream_stores.cc: streaming (non-temporal) stores of batched
// softmax and log_softmax and of the softmax / log_softmax backward
// (core/stream_stores.h) change no bit:
//  * forced on vs forced off (smax::set_streaming_stores), on 1 and 2
//    threads, for rows long enough to stream and rows too short for the
//    aligned peel, with dst 0, 3, 8 and 16 floats past a 64-byte boundary
//    (src at another offset: a streamed pass aligns its loop on dst), with
//    masks and scales, NaN, -inf and signed zeros; softmax and log_softmax
//    run the three-pass reload algorithm explicitly (the one that streams),
//    whatever this host's cache sizes make of "auto";
//  * the measurement ("auto") reaches a decision after a few calls whose
//    footprint exceeds the last-level cache, with the same bits meanwhile,
//    for softmax's and log_softmax's sites, each alone (each site decides
//    on its own);
//  * long rows (the segment kernels' log store and backward sweep) likewise,
//    and a site whose calls give one sample each (one long row) decides;
//  * pipelined softmax around rows that end early or scale on their own;
//  * an unknown mode is an error naming it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/stream_stores.h"
#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

bool same_bits(const float* a, const float* b, size_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

class StreamStores : public TargetTest {};

// softmax, log_softmax, softmax_backward and log_softmax_backward with
// streaming forced on give the bits of forced off.
TEST_P(StreamStores, SameBitsOnAndOff) {
  StreamModeGuard guard;
  Rng rng(seed_for("StreamStores.SameBitsOnAndOff"));
  struct Shape {
    int64_t rows, n;
  };
  // Batched rows, rows too short for the peel, and long rows (segments:
  // n >= 65536, a last segment of 100 or 112). Calls that fit one task of
  // the grid take the short path, which never streams (core/dense_rows.h):
  // the batched shapes have more rows than a task (rows_per_task(n) =
  // 65536 / n) so that they stream. {40, 4096} has every dst row 64-byte
  // aligned at offsets 0 and 16 (the backward streams only such calls, and
  // {2, 65648}); softmax's pipelined path streams from the head that aligns
  // dst, so the offsets 3 and 8 exercise its head and tail stores; {9, 9000}
  // alternates aligned and unaligned rows (36000 bytes each); {4, 33} and
  // {3, 16} are too short for the peel.
  const Shape shapes[] = {{40, 4096}, {9, 9000}, {300, 255}, {4, 33},
                          {3, 16},    {6, 1},    {2, 65636}, {2, 65648}};
  for (const Shape& shape : shapes) {
    const size_t count = static_cast<size_t>(shape.rows * shape.n);
    const int64_t dims[2] = {shape.rows, shape.n};
    for (int kind = 0; kind < kAdversarialRowKinds; ++kind) {
      const std::vector<float> x = adversarial_row(kind, static_cast<int64_t>(count), rng);
      std::vector<float> dyv(count);
      for (auto& v : dyv) v = rng.uniform(-2.0f, 2.0f);
      for (size_t offset : {size_t{0}, size_t{3}, size_t{8}, size_t{16}}) {
        for (int threads : {1, 2}) {
          for (bool scaled : {false, true}) {
            SCOPED_TRACE(testing::Message() << shape.rows << "x" << shape.n << " kind " << kind
                                            << " offset " << offset << " threads " << threads
                                            << " scaled " << scaled);
            smax::SoftmaxOptions o;
            o.threads = threads;
            if (scaled) o.scale = 0.75f;
            smax::SoftmaxOptions forward = o;
            forward.algorithm = smax::Algorithm::kThreePassReload;
            PlacedFloats src(count, (offset + 5) % 16), out[2] = {{count, offset}, {count, offset}};
            PlacedFloats grad[2] = {{count, offset}, {count, offset}}, dy(count, (offset + 9) % 16);
            std::memcpy(src.data, x.data(), count * sizeof(float));
            std::memcpy(dy.data, dyv.data(), count * sizeof(float));
            auto view = [&](float* p) {
              return smax::make_view(p, smax::DType::kF32, 2, dims, nullptr);
            };
            for (int k = 0; k < 2; ++k) {
              smax::set_streaming_stores(k == 0 ? "off" : "on");
              smax::softmax(view(src.data), view(out[k].data), forward);
            }
            ASSERT_TRUE(same_bits(out[0].data, out[1].data, count)) << "softmax";
            for (int k = 0; k < 2; ++k) {
              smax::set_streaming_stores(k == 0 ? "off" : "on");
              smax::log_softmax(view(src.data), view(out[k].data), forward);
            }
            ASSERT_TRUE(same_bits(out[0].data, out[1].data, count)) << "log_softmax";
            for (bool log : {false, true}) {
              for (int k = 0; k < 2; ++k) {
                smax::set_streaming_stores(k == 0 ? "off" : "on");
                if (log) {
                  smax::log_softmax_backward(view(out[0].data), view(dy.data), view(grad[k].data), o);
                } else {
                  smax::softmax_backward(view(out[0].data), view(dy.data), view(grad[k].data), o);
                }
              }
              ASSERT_TRUE(same_bits(grad[0].data, grad[1].data, count))
                  << (log ? "log_softmax_backward" : "softmax_backward");
            }
          }
        }
      }
    }
  }
}

// With an additive mask (another Logits instantiation of the streamed pass).
TEST_P(StreamStores, SameBitsWithMask) {
  StreamModeGuard guard;
  Rng rng(seed_for("StreamStores.SameBitsWithMask"));
  const int64_t rows = 6, n = 5000;
  const size_t count = static_cast<size_t>(rows * n);
  const int64_t dims[2] = {rows, n};
  const std::vector<float> x = adversarial_row(0, static_cast<int64_t>(count), rng);
  std::vector<float> mask(count);
  for (auto& v : mask) v = rng.uniform(0.0f, 1.0f) < 0.2f ? -kInfF : rng.uniform(-1.0f, 1.0f);
  for (bool log : {false, true}) {
    std::vector<float> out[2] = {std::vector<float>(count), std::vector<float>(count)};
    for (int k = 0; k < 2; ++k) {
      smax::set_streaming_stores(k == 0 ? "off" : "on");
      smax::SoftmaxOptions o;
      o.algorithm = smax::Algorithm::kThreePassReload;
      o.additive_mask = smax::make_view(mask.data(), smax::DType::kF32, 2, dims, nullptr);
      const smax::TensorView src =
          smax::make_view(const_cast<float*>(x.data()), smax::DType::kF32, 2, dims, nullptr);
      const smax::TensorView dst = smax::make_view(out[k].data(), smax::DType::kF32, 2, dims, nullptr);
      if (log) {
        smax::log_softmax(src, dst, o);
      } else {
        smax::softmax(src, dst, o);
      }
    }
    EXPECT_TRUE(same_bits(out[0].data(), out[1].data(), count)) << (log ? "log_softmax" : "softmax");
  }
}

// Rows that end early or take their own scale pass, after every other kind
// of row: pipelined softmax (softmax_rows.cc, PipelinedSoftmaxRows) leaves
// a row's scale pass pending until the next row's exp pass, so a NaN row,
// an empty row (all -inf: both policies), a row with +inf, a row whose
// outputs need the flush below FLT_MIN (its own scale pass), a one-hot row
// and an ordinary row each follow each other kind at least once (a de
// Bruijn-like cycle through all ordered pairs), first and last in a range
// included. Streamed and regular runs give the same bits, on 1 and 2
// threads, at dst offsets that do and do not align the rows.
TEST_P(StreamStores, SoftmaxPipelineAroundRowsThatEndEarly) {
  StreamModeGuard guard;
  Rng rng(seed_for("StreamStores.SoftmaxPipelineAroundRowsThatEndEarly"));
  constexpr int kKinds = 6;
  std::vector<int> order;  // every ordered pair (a, b) of kinds appears as consecutive rows
  for (int a = 0; a < kKinds; ++a) {
    for (int b = 0; b < kKinds; ++b) {
      order.push_back(a);
      order.push_back(b);
    }
  }
  const int64_t rows = static_cast<int64_t>(order.size()), n = 3001;  // > rows_per_task(n) = 21
  const size_t count = static_cast<size_t>(rows * n);
  std::vector<float> x(count);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * n;
    for (int64_t i = 0; i < n; ++i) {
      switch (order[static_cast<size_t>(r)]) {
        case 0: row[i] = rng.uniform(-8.0f, 8.0f); break;                      // ordinary
        case 1:  // NaN
          row[i] = i == n / 2 ? std::numeric_limits<float>::quiet_NaN() : rng.uniform(-8.0f, 8.0f);
          break;
        case 2: row[i] = -kInfF; break;                                        // empty
        case 3: row[i] = i == 7 ? kInfF : rng.uniform(-8.0f, 8.0f); break;      // +inf
        case 4: row[i] = rng.uniform(-150.0f, 0.0f); break;                    // flushes
        case 5: row[i] = i == n - 1 ? 0.0f : -kInfF; break;                    // one-hot
      }
    }
  }
  const int64_t dims[2] = {rows, n};
  for (size_t offset : {size_t{0}, size_t{3}}) {
    for (int threads : {1, 2}) {
      for (smax::EmptyRow empty : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
        SCOPED_TRACE(testing::Message() << "offset " << offset << " threads " << threads
                                        << " empty " << smax::empty_row_name(empty));
        PlacedFloats src(count, 5), out[2] = {{count, offset}, {count, offset}};
        std::memcpy(src.data, x.data(), count * sizeof(float));
        smax::SoftmaxOptions o;
        o.threads = threads;
        o.algorithm = smax::Algorithm::kThreePassReload;
        o.empty_row = empty;
        for (int k = 0; k < 2; ++k) {
          smax::set_streaming_stores(k == 0 ? "off" : "on");
          smax::softmax(smax::make_view(src.data, smax::DType::kF32, 2, dims, nullptr),
                        smax::make_view(out[k].data, smax::DType::kF32, 2, dims, nullptr), o);
        }
        EXPECT_TRUE(same_bits(out[0].data, out[1].data, count));
        // The streamed run's constant rows hold their constants (a pending
        // scale pass must not write over them, nor they over it).
        for (int64_t r = 0; r < rows; ++r) {
          const float* y = out[1].data + r * n;
          const int kind = order[static_cast<size_t>(r)];
          if (kind == 1 || kind == 3 || (kind == 2 && empty == smax::EmptyRow::kNan)) {
            EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[n - 1])) << "row " << r;
          } else if (kind == 2) {
            EXPECT_TRUE(y[0] == 0.0f && y[n - 1] == 0.0f) << "row " << r;
          } else if (kind == 5) {
            EXPECT_TRUE(y[n - 1] == 1.0f && y[0] == 0.0f) << "row " << r;
          }
        }
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(StreamStores);

// "auto" measures the first calls whose input + output exceed the
// last-level cache and then decides; the bits never change. Softmax and
// log_softmax each decide on their own.
TEST(StreamStoresAuto, DecidesAfterLargeCalls) {
  StreamModeGuard guard;
  smax::set_streaming_stores("off");
  const int64_t llc = smax::detail::last_level_cache_bytes();
  // Rows of 8192 floats, footprint (src + dst) >= 1.25x the LLC and >= 2^23
  // elements, so that every call gives each kind half its elements in 4
  // timed samples (1 thread: 4 tasks) and the decision (6 samples and 2^23
  // elements of each kind) comes within 3 calls on any host.
  const int64_t n = 8192;
  const int64_t rows = std::max((llc * 5 / 4) / (8 * n) + 1, (int64_t{1} << 23) / n);
  const size_t count = static_cast<size_t>(rows * n);
  const int64_t dims[2] = {rows, n};
  Rng rng(seed_for("StreamStoresAuto"));
  std::vector<float> x = adversarial_row(0, static_cast<int64_t>(count), rng);
  std::vector<float> expected(count), y(count);
  auto view = [&](float* p) { return smax::make_view(p, smax::DType::kF32, 2, dims, nullptr); };
  smax::SoftmaxOptions o;
  o.threads = 1;
  o.algorithm = smax::Algorithm::kThreePassReload;
  using smax::detail::StoreChoice;
  using smax::detail::StoreSite;
  auto site_state = [](StoreSite site) { return std::string(smax::detail::store_site_state(site)); };
  EXPECT_EQ(smax::streaming_stores(), "forced off");
  EXPECT_EQ(site_state(StoreSite::kLogSoftmax), "forced off");
  EXPECT_EQ(site_state(StoreSite::kSoftmax), "forced off");
  for (bool log : {true, false}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    const StoreSite site = log ? StoreSite::kLogSoftmax : StoreSite::kSoftmax;
    const StoreSite other = log ? StoreSite::kSoftmax : StoreSite::kLogSoftmax;
    auto call = [&](float* out) {
      if (log) {
        smax::log_softmax(view(x.data()), view(out), o);
      } else {
        smax::softmax(view(x.data()), view(out), o);
      }
    };
    smax::set_streaming_stores("off");
    call(expected.data());
    smax::set_streaming_stores("auto");
    EXPECT_EQ(smax::streaming_stores(),
              "softmax=measuring, log_softmax=measuring, backward=measuring, "
              "cross_entropy=measuring");
    int calls = 0;
    for (; calls < 20 && site_state(site) == "measuring"; ++calls) {
      std::memset(y.data(), 0xff, count * sizeof(float));
      call(y.data());
      ASSERT_TRUE(same_bits(expected.data(), y.data(), count)) << "call " << calls;
    }
    const std::string state = site_state(site);
    EXPECT_TRUE(state == "stream" || state == "regular") << state << " after " << calls;
    EXPECT_LE(calls, 6);
    // Each site decides on its own: this op's calls left the others measuring.
    EXPECT_EQ(site_state(other), "measuring");
    EXPECT_EQ(site_state(StoreSite::kBackward), "measuring");
    EXPECT_EQ(site_state(StoreSite::kCrossEntropy), "measuring");
    EXPECT_EQ(smax::streaming_stores(),
              log ? "softmax=measuring, log_softmax=" + state +
                        ", backward=measuring, cross_entropy=measuring"
                  : "softmax=" + state +
                        ", log_softmax=measuring, backward=measuring, cross_entropy=measuring");
    // A footprint within the LLC is never measured nor streamed, whatever was
    // decided; beyond it, the decision holds.
    EXPECT_EQ(smax::detail::choose_stores(site, llc), StoreChoice::kRegular);
    EXPECT_EQ(smax::detail::choose_stores(site, llc + 1),
              state == "stream" ? StoreChoice::kStream : StoreChoice::kRegular);
    EXPECT_EQ(smax::detail::choose_stores(other, llc + 1), StoreChoice::kMeasure);
    smax::set_streaming_stores("auto");
    EXPECT_EQ(smax::detail::choose_stores(site, llc), StoreChoice::kRegular);
    EXPECT_EQ(smax::detail::choose_stores(site, llc + 1), StoreChoice::kMeasure);
  }
  smax::set_streaming_stores("on");
  EXPECT_EQ(smax::detail::choose_stores(StoreSite::kCrossEntropy, 1), StoreChoice::kStream);
  smax::set_streaming_stores("off");
  EXPECT_EQ(smax::detail::choose_stores(StoreSite::kCrossEntropy, llc + 1), StoreChoice::kRegular);
}

// One long row per call is one timed sample per call (the calling thread
// runs it): the kinds must still alternate from call to call (each call's
// first sample on a thread takes the kind of the call's parity), or the
// site would never see both kinds and never decide. log_softmax (its long
// rows stream their log pass) decides after exactly kMinSamples calls of
// each kind, 12 in all, with the same bits meanwhile.
TEST(StreamStoresAuto, OneSamplePerCallStillDecides) {
  StreamModeGuard guard;
  const int64_t llc = smax::detail::last_level_cache_bytes();
  // Footprint (src + dst) >= 1.25x the LLC; 6 samples cover >= 2^23 elements.
  const int64_t n = std::max(llc * 5 / 4 / 8 + 1, int64_t{1} << 21);
  const size_t count = static_cast<size_t>(n);
  Rng rng(seed_for("StreamStoresAuto.OneSamplePerCall"));
  std::vector<float> x = adversarial_row(0, n, rng);
  std::vector<float> expected(count), y(count);
  const smax::TensorView src = smax::make_view(x.data(), {1, n});
  smax::SoftmaxOptions o;
  o.threads = 1;
  o.algorithm = smax::Algorithm::kThreePassReload;
  smax::set_streaming_stores("off");
  smax::log_softmax(src, smax::make_view(expected.data(), {1, n}), o);
  smax::set_streaming_stores("auto");
  using smax::detail::StoreSite;
  int calls = 0;
  for (; calls < 30 && std::string(smax::detail::store_site_state(StoreSite::kLogSoftmax)) ==
                           "measuring";
       ++calls) {
    std::memset(y.data(), 0xff, count * sizeof(float));
    smax::log_softmax(src, smax::make_view(y.data(), {1, n}), o);
    ASSERT_TRUE(same_bits(expected.data(), y.data(), count)) << "call " << calls;
  }
  const std::string state = smax::detail::store_site_state(StoreSite::kLogSoftmax);
  EXPECT_TRUE(state == "stream" || state == "regular") << state << " after " << calls;
  EXPECT_EQ(calls, 12);
}

TEST(StreamStoresErrors, UnknownModeIsNamed) {
  StreamModeGuard guard;
  EXPECT_TRUE(throws_invalid([] { smax::set_streaming_stores("sometimes"); }, "sometimes"));
  EXPECT_TRUE(throws_invalid([] { smax::set_streaming_stores("ON"); }, "ON"));
}

}  // namespace
}  // namespace smax_test

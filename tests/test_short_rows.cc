// tests/test_short_rows.cc: the short path of the softmax family (dense f32
// rows that fit one task: forward.cc / backward.cc try_short_rows) and the
// aligned starts of the kernels' scans and elementwise passes
// (kernels/pass-inl.h, HeadToAlign) change no bit and no error:
//  * a dense [rows, n] call over its last axis (the short path) gives the
//    bits of the same rows seen as [rows, n, 1] over axis 1 (the general
//    path: geometry, rows mode), on 1 and 2 threads, in place too;
//  * a row's outputs do not depend on where it starts in memory (0..16
//    floats past a 64-byte boundary), NaN, signed zeros and -inf included;
//  * an invalid option with dense views raises the general path's message
//    and writes nothing.
#include <cstring>
#include <string>
#include <vector>

#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

enum class Fwd { kSoftmax, kLogSoftmax, kLogSumExp };


void run_forward(Fwd op, const TensorView& src, const TensorView& dst, const SoftmaxOptions& o) {
  switch (op) {
    case Fwd::kSoftmax: smax::softmax(src, dst, o); break;
    case Fwd::kLogSoftmax: smax::log_softmax(src, dst, o); break;
    case Fwd::kLogSumExp: smax::logsumexp(src, dst, o); break;
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ShortRows : public TargetTest {};

TEST_P(ShortRows, ForwardMatchesTheGeneralPath) {
  Rng rng(seed_for());
  const Algorithm algorithms[] = {Algorithm::kAuto, Algorithm::kThreePassReload,
                                  Algorithm::kThreePassRecompute, Algorithm::kTwoPass,
                                  Algorithm::kOnline};
  for (int64_t n : {1, 3, 16, 17, 100, 1000, 1024, 1027, 4096, 16383}) {
    for (int64_t rows : {int64_t{1}, int64_t{3}, std::min<int64_t>(9, 65536 / n)}) {
      const std::vector<float> x = adversarial_row(static_cast<int>((n + rows) % kAdversarialRowKinds), rows * n, rng);
      for (Fwd op : {Fwd::kSoftmax, Fwd::kLogSoftmax, Fwd::kLogSumExp}) {
        for (Algorithm a : algorithms) {
          SoftmaxOptions o;
          o.algorithm = a;
          if (n % 2 == 1) o.scale = 0.75f;
          const int64_t out = op == Fwd::kLogSumExp ? rows : rows * n;
          std::vector<float> y_short(static_cast<size_t>(out), 7.0f), y_general = y_short;
          const std::vector<int64_t> out_short =
              op == Fwd::kLogSumExp ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, n};
          const std::vector<int64_t> out_general =
              op == Fwd::kLogSumExp ? std::vector<int64_t>{rows, 1} : std::vector<int64_t>{rows, n, 1};
          run_forward(op, smax::make_view(x.data(), {rows, n}),
                      smax::make_view(y_short.data(), DType::kF32, static_cast<int>(out_short.size()),
                                      out_short.data(), nullptr),
                      o);
          SoftmaxOptions g = o;
          g.axis = 1;
          g.threads = 2;
          run_forward(op, smax::make_view(x.data(), {rows, n, 1}),
                      smax::make_view(y_general.data(), DType::kF32,
                                      static_cast<int>(out_general.size()), out_general.data(),
                                      nullptr),
                      g);
          ASSERT_TRUE(same_bits(y_short, y_general))
              << "op " << static_cast<int>(op) << " " << smax::algorithm_name(a) << " rows "
              << rows << " n " << n;
          if (op != Fwd::kLogSumExp && a == Algorithm::kAuto) {  // in place
            std::vector<float> z = x;
            const TensorView zv = smax::make_view(z.data(), {rows, n});
            run_forward(op, zv, zv, o);
            ASSERT_TRUE(same_bits(z, y_general)) << "in place, rows " << rows << " n " << n;
          }
        }
      }
    }
  }
}

TEST_P(ShortRows, BackwardMatchesTheGeneralPath) {
  Rng rng(seed_for());
  for (int64_t n : {1, 5, 16, 1000, 1024, 4097}) {
    for (int64_t rows : {int64_t{1}, int64_t{4}}) {
      std::vector<float> logits = adversarial_row(0, rows * n, rng), y(logits.size());
      std::vector<float> dy = adversarial_row(0, rows * n, rng);
      for (bool log : {false, true}) {
        const TensorView lv = smax::make_view(logits.data(), {rows, n});
        const TensorView yv = smax::make_view(y.data(), {rows, n});
        if (log) {
          smax::log_softmax(lv, yv);
        } else {
          smax::softmax(lv, yv);
        }
        SoftmaxOptions o;
        o.temperature = 1.5f;
        std::vector<float> dx_short(y.size(), 7.0f), dx_general = dx_short;
        auto backward = [&](const TensorView& yy, const TensorView& d, const TensorView& dx,
                            const SoftmaxOptions& opt) {
          if (log) {
            smax::log_softmax_backward(yy, d, dx, opt);
          } else {
            smax::softmax_backward(yy, d, dx, opt);
          }
        };
        backward(yv, smax::make_view(dy.data(), {rows, n}),
                 smax::make_view(dx_short.data(), {rows, n}), o);
        SoftmaxOptions g = o;
        g.axis = 1;
        g.threads = 2;
        backward(smax::make_view(y.data(), {rows, n, 1}), smax::make_view(dy.data(), {rows, n, 1}),
                 smax::make_view(dx_general.data(), {rows, n, 1}), g);
        ASSERT_TRUE(same_bits(dx_short, dx_general)) << "log " << log << " rows " << rows << " n " << n;
        std::vector<float> in_place = dy;  // dx = dy
        const TensorView iv = smax::make_view(in_place.data(), {rows, n});
        backward(yv, iv, iv, o);
        ASSERT_TRUE(same_bits(in_place, dx_general)) << "in place, rows " << rows << " n " << n;
      }
    }
  }
}

// Aligned starts (HeadToAlign) peel a different head at each offset; the
// results must not move.
TEST_P(ShortRows, BitsDoNotDependOnAlignment) {
  Rng rng(seed_for());
  constexpr int64_t kMaxOffset = 16;  // floats: 64 bytes
  for (int64_t n : {100, 1000, 1024, 4099}) {
    for (int kind = 0; kind < kAdversarialRowKinds; ++kind) {
      const int64_t rows = 3;
      const std::vector<float> x = adversarial_row(kind, rows * n, rng);
      const std::vector<float> dy = adversarial_row(0, rows * n, rng);
      std::vector<float> first[5];
      for (int64_t offset = 0; offset <= kMaxOffset; ++offset) {
        // 64-byte aligned storage (vector's), shifted by `offset` floats.
        std::vector<float> in_buf(static_cast<size_t>(rows * n + 32));
        std::vector<float> out_buf(in_buf.size(), 7.0f), dy_buf(in_buf.size()), dx_buf = out_buf;
        auto at = [&](std::vector<float>& b) {
          const auto a = reinterpret_cast<uintptr_t>(b.data());
          return b.data() + (64 - a % 64) % 64 / sizeof(float) + offset;
        };
        float* xs = at(in_buf);
        float* ys = at(out_buf);
        float* dys = at(dy_buf);
        float* dxs = at(dx_buf);
        std::memcpy(xs, x.data(), x.size() * sizeof(float));
        std::memcpy(dys, dy.data(), dy.size() * sizeof(float));
        const TensorView xv = smax::make_view(xs, {rows, n}), yv = smax::make_view(ys, {rows, n});
        std::vector<float> results[5];
        smax::softmax(xv, yv);
        results[0].assign(ys, ys + rows * n);
        smax::softmax_backward(yv, smax::make_view(dys, {rows, n}), smax::make_view(dxs, {rows, n}));
        results[1].assign(dxs, dxs + rows * n);
        smax::log_softmax(xv, yv);
        results[2].assign(ys, ys + rows * n);
        smax::logsumexp(xv, smax::make_view(ys, {rows}));
        results[3].assign(ys, ys + rows);
        std::memcpy(ys, xs, x.size() * sizeof(float));
        smax::softmax(yv, yv);  // in place
        results[4].assign(ys, ys + rows * n);
        for (int r = 0; r < 5; ++r) {
          if (offset == 0) {
            first[r] = results[r];
          } else {
            ASSERT_TRUE(same_bits(first[r], results[r]))
                << "result " << r << " kind " << kind << " n " << n << " offset " << offset;
          }
        }
      }
    }
  }
}

// An invalid option with valid dense views fails in the short path's
// check_options: the message must be the general path's, dst untouched.
TEST(ShortRowsErrors, MessagesAreTheGeneralPaths) {
  std::vector<float> x(6, 0.5f), y(6, 7.0f);
  auto message = [&](const TensorView& src, const TensorView& dst, const SoftmaxOptions& o) {
    try {
      smax::softmax(src, dst, o);
    } catch (const smax::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<SoftmaxOptions> bad(5);
  bad[0].scale = 0.0f;
  bad[1].temperature = -kInfF;
  bad[2].threads = -2;
  bad[3].algorithm = static_cast<Algorithm>(42);
  bad[4].empty_row = static_cast<EmptyRow>(-1);
  for (const SoftmaxOptions& o : bad) {
    SoftmaxOptions g = o;
    g.axis = 1;
    const std::string short_path =
        message(smax::make_view(x.data(), {2, 3}), smax::make_view(y.data(), {2, 3}), o);
    const std::string general =
        message(smax::make_view(x.data(), {2, 3, 1}), smax::make_view(y.data(), {2, 3, 1}), g);
    EXPECT_NE(short_path, "no error");
    EXPECT_EQ(short_path, general);
    for (float v : y) ASSERT_EQ(v, 7.0f);
  }
}

SMAX_INSTANTIATE_PER_TARGET(ShortRows);

}  // namespace
}  // namespace smax_test

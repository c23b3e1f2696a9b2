// tests/test_determinism.cc: bitwise-identical results for any thread count,
// any parallel_for pool and any pointer alignment; plus the one-row 2^24 + 3
// cases (one op / algorithm per test to bound the run time), checked against
// the reference and across thread counts.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "reference/reference.h"
#include "test_util.h"

namespace smax_test {
namespace {

/// Inputs of one case: the logits, and for backward ops the saved output y
/// (reference forward rounded to f32) and a random upstream gradient dy,
/// computed once so repeated runs only time the library.
struct Inputs {
  Inputs(Op op_, const Tensor& src_, const SoftmaxOptions& o, int64_t misalign = 0)
      : op(op_), src(src_) {
    if (is_backward(op)) {
      y = Tensor(src.shape(), {}, misalign);
      dy = Tensor(src.shape(), {}, misalign);
      make_saved_output(op, src, o, y);
      Rng rng(uint64_t{12345});
      fill_normal(dy, rng);
    }
  }
  Op op;
  const Tensor& src;
  Tensor y, dy;
};

/// Runs the op into a fresh dst and returns dst's logical contents as raw
/// f32 bits (so NaN payloads and -0 compare exactly).
std::vector<uint32_t> run_bits(const Inputs& in, const SoftmaxOptions& o, int64_t misalign = 0) {
  const std::vector<int64_t> shape = in.src.shape();
  const std::vector<int64_t> dshape =
      in.op == Op::kLogsumexp ? drop_axis(shape, static_cast<int>(o.axis)) : shape;
  Tensor dst(dshape, {}, misalign);
  if (!is_backward(in.op)) {
    library_forward(in.op, in.src.view(), dst.view(), o);
  } else {
    library_backward(in.op, in.y.view(), in.dy.view(), dst.view(), o);
  }
  const std::vector<float> d = dst.dense();
  std::vector<uint32_t> bits(d.size());
  std::memcpy(bits.data(), d.data(), d.size() * sizeof(float));
  return bits;
}

/// Index of the first differing element, or -1.
int64_t first_difference(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

class Determinism : public TargetTest {};

// Multi-row batches and long rows (which ops split across threads in
// segments of 2^16): threads = 1 and threads = 2 give the same bits.
TEST_P(Determinism, ThreadCounts) {
  Rng rng("threads");
  const std::vector<std::vector<int64_t>> shapes = {
      {64, 1000}, {7, 65537}, {1, 3 * 65536 + 5}, {300, 7, 9}};
  for (const auto& shape : shapes) {
    Tensor src(shape);
    fill_rows(src, -1, Data::kWide, rng);
    for (Op op : all_ops()) {
      for (int axis : {-1, 0}) {
        if (axis == 0 && shape.size() != 3) continue;  // strided axis for the 3-D case
        SoftmaxOptions base;
        base.axis = axis;
        const Inputs in(op, src, base);
        for (Algorithm a : all_algorithms()) {
          SoftmaxOptions o = base;
          o.algorithm = a;
          o.threads = 1;
          const std::vector<uint32_t> one = run_bits(in, o);
          o.threads = 2;
          const std::vector<uint32_t> two = run_bits(in, o);
          o.threads = 3;  // more threads than cores
          const std::vector<uint32_t> three = run_bits(in, o);
          EXPECT_EQ(first_difference(one, two), -1)
              << op_name(op) << " " << algo_str(a) << " " << shape_str(shape) << " axis " << axis
              << ": threads 1 vs 2 differ";
          EXPECT_EQ(first_difference(one, three), -1)
              << op_name(op) << " " << algo_str(a) << " " << shape_str(shape) << " axis " << axis
              << ": threads 1 vs 3 differ";
        }
      }
    }
  }
}

// Kernels process blocks on a grid relative to the row start: the same data
// at a different alignment gives the same bits.
TEST_P(Determinism, Alignment) {
  Rng rng("alignment");
  for (int64_t n : {5, 63, 1000, 4099, 65537}) {
    Tensor a({3, n}, {}, 0), b({3, n}, {}, 1), c({3, n}, {}, 3);
    fill_rows(a, -1, Data::kWide, rng);
    b.fill([&](int64_t i) { return a.at(i); });
    c.fill([&](int64_t i) { return a.at(i); });
    for (Op op : all_ops()) {
      const Inputs ia(op, a, {}, 0), ib(op, b, {}, 1), ic(op, c, {}, 2);
      for (Algorithm alg : all_algorithms()) {
        SoftmaxOptions o;
        o.algorithm = alg;
        const std::vector<uint32_t> ra = run_bits(ia, o, 0), rb = run_bits(ib, o, 1),
                                    rc = run_bits(ic, o, 2);
        EXPECT_EQ(first_difference(ra, rb), -1) << op_name(op) << " " << algo_str(alg) << " n=" << n;
        EXPECT_EQ(first_difference(ra, rc), -1) << op_name(op) << " " << algo_str(alg) << " n=" << n;
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(Determinism);

// ---- the parallel_for seam ----------------------------------------------------

/// A toy pool: `threads` std::threads take tasks in reverse order, strided.
struct ReversePool {
  std::atomic<int64_t>* calls;
  std::atomic<int64_t>* tasks_run;
  void operator()(int64_t n_tasks, int threads,
                  const std::function<void(int64_t)>& task) const {
    calls->fetch_add(1);
    const int t = std::max(1, threads);
    std::vector<std::thread> pool;
    for (int w = 0; w < t; ++w) {
      pool.emplace_back([&, w] {
        for (int64_t i = n_tasks - 1 - w; i >= 0; i -= t) {
          task(i);
          tasks_run->fetch_add(1);
        }
      });
    }
    for (auto& th : pool) th.join();
  }
};

class ParallelForHook : public ::testing::Test {
 protected:
  void TearDown() override { smax::set_parallel_for({}); }
};

TEST_F(ParallelForHook, CustomPoolGivesTheSameBits) {
  Rng rng("pool");
  std::atomic<int64_t> calls{0}, tasks{0};
  const std::vector<std::vector<int64_t>> shapes = {{64, 1000}, {1, 3 * 65536 + 5}, {50, 9, 33}};
  for (const auto& shape : shapes) {
    Tensor src(shape);
    fill_rows(src, -1, Data::kUniform, rng);
    for (Op op : all_ops()) {
      const Inputs in(op, src, {});
      for (Algorithm a : {Algorithm::kAuto, Algorithm::kTwoPass, Algorithm::kOnline}) {
        SoftmaxOptions o;
        o.algorithm = a;
        o.threads = 1;
        smax::set_parallel_for({});
        const std::vector<uint32_t> base = run_bits(in, o);
        o.threads = 2;
        smax::set_parallel_for(ReversePool{&calls, &tasks});
        const std::vector<uint32_t> pooled = run_bits(in, o);
        smax::set_parallel_for({});
        EXPECT_EQ(first_difference(base, pooled), -1)
            << op_name(op) << " " << algo_str(a) << " " << shape_str(shape);
      }
    }
  }
  EXPECT_GT(calls.load(), 0) << "the installed parallel_for was never called";
  EXPECT_GT(tasks.load(), 0);
}

TEST_F(ParallelForHook, MaxThreadsDefault) {
  const int saved = smax::max_threads();
  EXPECT_GE(saved, 1);
  Rng rng("max-threads");
  Tensor src({32, 5000});
  fill_rows(src, -1, Data::kWide, rng);
  SoftmaxOptions o;  // threads = 0: use max_threads()
  const Inputs in(Op::kSoftmax, src, o);
  smax::set_max_threads(1);
  EXPECT_EQ(smax::max_threads(), 1);
  const std::vector<uint32_t> one = run_bits(in, o);
  smax::set_max_threads(2);
  const std::vector<uint32_t> two = run_bits(in, o);
  smax::set_max_threads(saved);
  EXPECT_EQ(first_difference(one, two), -1);
}

// ---- one row of 2^24 + 3 elements ---------------------------------------------
//
// The sums run over 256 blocks of 2^16 (and many 1024-element blocks), so a
// naive f32 accumulation would lose ~1e-3 relative here. One op / algorithm
// per test; every one also checks threads 1 vs 2 bitwise.

constexpr int64_t kHuge = (int64_t{1} << 24) + 3;

void long_row_case(Op op, Algorithm a, Data data) {
  Rng rng(std::string("huge/") + op_name(op));
  Tensor src({1, kHuge});
  fill_rows(src, 1, data, rng);
  SoftmaxOptions o;
  o.algorithm = a;
  const Inputs in(op, src, o);
  o.threads = 2;
  const std::vector<uint32_t> two_bits = run_bits(in, o);
  o.threads = 1;
  const std::vector<uint32_t> one_bits = run_bits(in, o);
  EXPECT_EQ(first_difference(one_bits, two_bits), -1) << "threads 1 vs 2 differ";
  // Accuracy of the threads = 2 result against the reference.
  std::vector<double> out(two_bits.size());
  for (size_t i = 0; i < out.size(); ++i) {
    float f;
    std::memcpy(&f, &two_bits[i], sizeof(f));
    out[i] = f;
  }
  const std::string what = std::string(op_name(op)) + " one row of 2^24+3 " + algo_str(a);
  if (!is_backward(op)) {
    const std::vector<double> ref = reference_forward(op, src.view(), o);
    EXPECT_TRUE(op == Op::kSoftmax ? check_softmax(out, ref, what) : check_log(out, ref, what));
  } else {
    const std::vector<double> ref = reference_backward(op, in.y.view(), in.dy.view(), o);
    EXPECT_TRUE(check_backward(op == Op::kLogSoftmaxBackward, out, ref, to_dense(in.y.view()),
                               to_dense(in.dy.view()), Geometry({1, kHuge}, -1), 1.0, what));
  }
}

TEST(LongRow, SoftmaxAuto) { long_row_case(Op::kSoftmax, Algorithm::kAuto, Data::kWide); }

TEST(LongRow, LogSoftmaxTwoPass) {
  long_row_case(Op::kLogSoftmax, Algorithm::kTwoPass, Data::kUniform);
}

TEST(LongRow, LogSumExpOnline) {
  long_row_case(Op::kLogsumexp, Algorithm::kOnline, Data::kHigh);
}

TEST(LongRow, SoftmaxBackward) {
  long_row_case(Op::kSoftmaxBackward, Algorithm::kAuto, Data::kUniform);
}

}  // namespace
}  // namespace smax_test

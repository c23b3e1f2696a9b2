// tests/test_concurrency.cc: many application threads calling smax at once.
//
// Eight std::threads run a shuffled list of cases each (every op, several
// shapes and layouts, axes, algorithms, masks, scale/temperature, empty_row,
// threads = 1..4), all at the same time, each into its own outputs, and every
// result must be bitwise identical to the same case run serially with
// threads = 1 before the threads started. Two variants: the default OpenMP
// pool, and an application pool installed with smax::set_parallel_for (a
// plain std::thread fan-out). scripts/test_sanitizers.sh runs the std::thread
// variants under ThreadSanitizer (libgomp is not TSan-instrumented, so the
// OpenMP variant would report false races there; see docs/reliability.md).
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "test_util.h"

namespace smax_test {
namespace {

struct Case {
  Op op;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // src / y layout (empty = row-major)
  SoftmaxOptions options;
  bool add_mask = false;
  bool bool_mask = false;
};

// Inputs of one case, shared read-only by every thread.
struct Inputs {
  Tensor src, dy, add_mask;
  BoolTensor keep;
};

std::vector<Case> make_cases() {
  std::vector<Case> cases;
  const std::vector<std::vector<int64_t>> shapes = {
      {7, 33}, {3, 1000}, {2, 3, 17}, {64, 64}, {5, 70000}, {1}, {0, 5}, {300, 3}};
  int k = 0;
  for (Op op : all_ops()) {
    for (const auto& shape : shapes) {
      for (int variant = 0; variant < 2; ++variant, ++k) {
        Case c;
        c.op = op;
        c.shape = shape;
        const int rank = static_cast<int>(shape.size());
        c.options.axis = (variant == 1 && rank > 1) ? 0 : -1;
        c.options.algorithm = all_algorithms()[static_cast<size_t>(k) % all_algorithms().size()];
        c.options.empty_row = (k % 3 == 0) ? smax::EmptyRow::kNan : smax::EmptyRow::kZero;
        c.options.threads = 1 + k % 4;
        if (k % 5 == 1) c.options.temperature = 0.7f;
        if (k % 7 == 2) c.options.scale = 1.5f;
        if (rank == 2 && variant == 1) c.strides = permuted_strides(shape, {1, 0}, 3);
        if (!is_backward(op) && k % 4 == 3) c.add_mask = true;
        if (!is_backward(op) && k % 6 == 5) c.bool_mask = true;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

Inputs make_inputs(const Case& c, uint64_t seed) {
  Rng rng(seed);
  Inputs in;
  in.src = Tensor(c.shape, c.strides, 1);
  const int axis = static_cast<int>(c.options.axis);
  fill_rows(in.src, axis < 0 ? axis + static_cast<int>(c.shape.size()) : axis,
            (seed % 3 == 0) ? Data::kSomeNegInf : Data::kWide, rng);
  if (is_backward(c.op)) {
    Tensor y(c.shape, c.strides, 1);
    SoftmaxOptions o = c.options;
    make_saved_output(c.op, in.src, o, y);
    in.src = std::move(y);
    in.dy = Tensor(c.shape);
    fill_normal(in.dy, rng);
  }
  if (c.add_mask) {
    in.add_mask = Tensor({c.shape.back()});
    in.add_mask.fill([&](int64_t i) { return i % 5 == 0 ? -kInfF : rng.normal(); });
  }
  if (c.bool_mask) {
    in.keep = BoolTensor(c.shape);
    in.keep.fill([&](int64_t) { return static_cast<uint8_t>(rng.bernoulli(0.8)); });
  }
  return in;
}

Tensor output_for(const Case& c) {
  if (c.op != Op::kLogsumexp) return Tensor(c.shape);
  return Tensor(drop_axis(c.shape, static_cast<int>(c.options.axis)));
}

void run_case(const Case& c, const Inputs& in, Tensor& out, int threads) {
  SoftmaxOptions o = c.options;
  o.threads = threads;
  if (c.add_mask) o.additive_mask = in.add_mask.view();
  if (c.bool_mask) o.bool_mask = in.keep.view();
  if (is_backward(c.op)) {
    library_backward(c.op, in.src.view(), in.dy.view(), out.view(), o);
  } else {
    library_forward(c.op, in.src.view(), out.view(), o);
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.dense(), y = b.dense();
  // memcmp with an empty vector's null data() is undefined (UBSan), even for 0 bytes.
  return x.size() == y.size() &&
         (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

// A minimal application pool: one std::thread per worker, tasks handed out
// through an atomic counter.
void std_thread_parallel_for(int64_t n_tasks, int threads,
                             const std::function<void(int64_t)>& task) {
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t i = next++; i < n_tasks; i = next++) task(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

void many_threads_match_serial() {
  const std::vector<Case> cases = make_cases();
  std::vector<Inputs> inputs;
  std::vector<Tensor> serial;
  for (size_t i = 0; i < cases.size(); ++i) {
    inputs.push_back(make_inputs(cases[i], seed_for("case" + std::to_string(i))));
    serial.push_back(output_for(cases[i]));
    run_case(cases[i], inputs[i], serial[i], 1);
  }
  constexpr int kThreads = 8;
  constexpr int kRounds = 2;
  std::vector<std::vector<std::string>> failures(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the cases in its own order, so different ops,
      // shapes and thread counts overlap in time.
      std::vector<size_t> order(cases.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = (i * 7 + static_cast<size_t>(t) * 13) % order.size();
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int round = 0; round < kRounds; ++round) {
        for (size_t i : order) {
          Tensor out = output_for(cases[i]);
          const int threads_here = 1 + static_cast<int>((i + static_cast<size_t>(t) + round) % 4);
          try {
            run_case(cases[i], inputs[i], out, threads_here);
          } catch (const std::exception& e) {
            failures[static_cast<size_t>(t)].push_back("case " + std::to_string(i) + " threw " + e.what());
            continue;
          }
          if (!same_bits(out, serial[i]) || !out.guards_intact()) {
            failures[static_cast<size_t>(t)].push_back(
                "case " + std::to_string(i) + " (" + op_name(cases[i].op) + " " +
                shape_str(cases[i].shape) + " axis " + std::to_string(cases[i].options.axis) +
                " threads " + std::to_string(threads_here) + ") differs from the serial result");
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  size_t total = 0;
  for (const auto& f : failures) {
    for (const auto& msg : f) {
      if (total++ < 20) ADD_FAILURE() << msg;
    }
  }
  EXPECT_EQ(total, 0u) << "seed " << base_seed();
}

TEST(Concurrency, ManyThreadsOpenMP) { many_threads_match_serial(); }

TEST(Concurrency, ManyThreadsStdThreadPool) {
  smax::set_parallel_for(std_thread_parallel_for);
  many_threads_match_serial();
  smax::set_parallel_for(nullptr);
}

TEST(Concurrency, ThreadCountsGiveTheSameBitsStdThreadPool) {
  // Determinism across thread counts, through the std::thread pool (the
  // TSan-checkable version of tests/test_determinism.cc's thread sweep).
  smax::set_parallel_for(std_thread_parallel_for);
  const std::vector<Case> cases = make_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Inputs in = make_inputs(cases[i], seed_for("det" + std::to_string(i)));
    Tensor one = output_for(cases[i]);
    run_case(cases[i], in, one, 1);
    for (int threads : {2, 3, 5}) {
      Tensor many = output_for(cases[i]);
      run_case(cases[i], in, many, threads);
      EXPECT_TRUE(same_bits(one, many)) << "case " << i << " " << op_name(cases[i].op) << " "
                                        << shape_str(cases[i].shape) << " threads " << threads;
    }
  }
  smax::set_parallel_for(nullptr);
}

}  // namespace
}  // namespace smax_test

// bench/bench_calls.cc: what one call costs on short rows and on the decode
// shapes (smax_bench_calls, Google Benchmark; docs/benchmarking.md, "Short
// rows and per-call overhead").
//
// Names: <group>/<op>/<shape>/threads:<N|default>
//   call    one call on a short row or a small batch: 1x1 (the per-call
//           overhead: validation, dispatch, a trivial kernel), 1x16, 1x1024,
//           1x4096, 1x16384, 8x1024, 64x1024
//   decode  the decoding step's shapes: 1, 2, 4, 8 rows of 32000, 128256,
//           256000 floats
//   views   call/softmax_views/1x1024: the same call with both views built
//           by make_view inside the timed loop (what a caller that makes
//           its views per call pays)
//   threads:default  SoftmaxOptions::threads = 0 (the library's default
//           count), as most callers leave it; threads:N sets it.
// The views are built once, outside the timed loop (a caller keeps its
// tensors), so the time is smax's own: validation, geometry, dispatch,
// threads and kernels. Counters: per_call, per_element (seconds). Inputs: bench/data.h's
// logits (uniform on [-8, 8)), in cache after the first call.
//
// Quote ratios between rows of one run: the machines are shared and noisy.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "data.h"
#include "smax/smax.h"

namespace {

enum class Op { kSoftmax, kLogSoftmax, kLogSumExp };

const char* op_name(Op op) {
  switch (op) {
    case Op::kSoftmax: return "softmax";
    case Op::kLogSoftmax: return "log_softmax";
    case Op::kLogSumExp: return "logsumexp";
  }
  return "?";
}

int all_threads() {
  const char* env = std::getenv("SMAX_BENCH_THREADS");
  if (env && std::atoi(env) >= 1) return std::atoi(env);
  const unsigned hc = std::thread::hardware_concurrency();
  return hc >= 1 ? static_cast<int>(hc) : 1;
}

void set_counters(benchmark::State& state, int64_t elements) {
  // Inverted rates: seconds per call and per element, printed with SI
  // prefixes ("187.7ns", "505.6ps") and as seconds in the JSON output.
  const double calls = static_cast<double>(state.iterations());
  state.counters["per_call"] =
      benchmark::Counter(calls, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["per_element"] =
      benchmark::Counter(calls * static_cast<double>(elements),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// threads: SoftmaxOptions::threads (0 = the library's default).
void run_call(benchmark::State& state, Op op, int64_t rows, int64_t cols, int threads) {
  const std::vector<float> x = smax_bench::logits(static_cast<size_t>(rows * cols), 1);
  std::vector<float> y(op == Op::kLogSumExp ? static_cast<size_t>(rows) : x.size());
  const smax::TensorView src = smax::make_view(x.data(), {rows, cols});
  const smax::TensorView dst =
      op == Op::kLogSumExp ? smax::make_view(y.data(), {rows}) : smax::make_view(y.data(), {rows, cols});
  smax::SoftmaxOptions options;
  options.threads = threads;
  try {
    for (auto _ : state) {
      switch (op) {
        case Op::kSoftmax: smax::softmax(src, dst, options); break;
        case Op::kLogSoftmax: smax::log_softmax(src, dst, options); break;
        case Op::kLogSumExp: smax::logsumexp(src, dst, options); break;
      }
      benchmark::ClobberMemory();
    }
  } catch (const smax::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, rows * cols);
}

// The 1x1024 softmax with both views made inside the timed loop.
void run_call_with_views(benchmark::State& state, int threads) {
  const int64_t n = 1024;
  const std::vector<float> x = smax_bench::logits(static_cast<size_t>(n), 1);
  std::vector<float> y(x.size());
  smax::SoftmaxOptions options;
  options.threads = threads;
  for (auto _ : state) {
    smax::softmax(smax::make_view(x.data(), {1, n}), smax::make_view(y.data(), {1, n}), options);
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

std::string threads_name(int threads) {
  return threads == 0 ? "default" : std::to_string(threads);
}

void register_all() {
  const Op ops[] = {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp};
  struct Shape {
    int64_t rows, cols;
  };
  const Shape calls[] = {{1, 1},    {1, 16}, {1, 1024}, {1, 4096},
                         {1, 16384}, {8, 1024}, {64, 1024}};
  for (Op op : ops) {
    for (const Shape& s : calls) {
      for (int threads : {1, 0}) {
        const std::string name = std::string("call/") + op_name(op) + "/" +
                                 std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                                 "/threads:" + threads_name(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_call, op, s.rows, s.cols, threads)
            ->UseRealTime()
            ->Unit(benchmark::kNanosecond);
      }
    }
  }
  for (int threads : {1, 0}) {
    const std::string name = "call/softmax_views/1x1024/threads:" + threads_name(threads);
    benchmark::RegisterBenchmark(name.c_str(), run_call_with_views, threads)
        ->UseRealTime()
        ->Unit(benchmark::kNanosecond);
  }
  // Decode steps (every time is wall time: a call may use several threads).
  const int tall = all_threads();
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
    for (int64_t rows : {1, 2, 4, 8}) {
      for (int64_t cols : {32000, 128256, 256000}) {
        for (int threads : {1, tall}) {
          if (threads == tall && tall == 1) continue;
          const std::string name = std::string("decode/") + op_name(op) + "/" +
                                   std::to_string(rows) + "x" + std::to_string(cols) +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), run_call, op, rows, cols, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// bench/bench_ops.cc: Google Benchmark of every normaliser, loss and sampler
// (the op table of testing/op_table.h, which `smax run --op` uses too), on
// the shapes the issues name: 256x32000 (LLM vocabulary rows) and 4096x128
// (attention rows), plus 64x128256 for losses and samplers.
//
// Names: ops/<op>/<shape>[/threads:N]; counters elements/s (source elements
// per second). Each op runs with its default parameters (see
// `smax info --ops`); losses with reduction mean.
//
//   build/bench/smax_bench_ops                                  # everything
//   build/bench/smax_bench_ops --benchmark_filter='ops/sparsemax/'
// Quote ratios between rows of one run: the machines are shared and noisy.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "op_table.h"

namespace {

using smax_cli::ExtOp;

void run_op(benchmark::State& state, const ExtOp* op, std::vector<int64_t> shape, int threads) {
  smax_cli::ExtCall call;
  call.params = smax_cli::parse_params(*op, "");
  call.options.axis = -1;
  call.options.threads = threads;
  call.loss.reduction = smax::Reduction::kMean;
  std::unique_ptr<smax_cli::ExtInstance> inst;
  try {
    inst = smax_cli::make_instance(*op, shape, call, smax_cli::Dist{}, 1);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    op->run(inst->call);
    benchmark::ClobberMemory();
  }
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  state.counters["elements/s"] = benchmark::Counter(static_cast<double>(count) * state.iterations(),
                                                     benchmark::Counter::kIsRate);
}

std::string shape_name(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

void register_all() {
  int all = static_cast<int>(std::thread::hardware_concurrency());
  if (const char* env = std::getenv("SMAX_BENCH_THREADS")) all = std::atoi(env);
  if (all < 1) all = 1;
  const std::vector<std::vector<int64_t>> shapes = {{256, 32000}, {4096, 128}};
  for (const ExtOp& op : smax_cli::ext_ops()) {
    std::vector<std::vector<int64_t>> these = shapes;
    if (op.needs_target || op.index_output) these.push_back({64, 128256});
    for (const auto& shape : these) {
      for (int threads : {1, all}) {
        std::string name = "ops/" + op.name + "/" + shape_name(shape);
        if (threads != 1) name += "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_op, &op, shape, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
        if (all == 1) break;
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

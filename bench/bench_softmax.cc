// bench/bench_softmax.cc: first Google Benchmark suite for the softmax family.
//
// Benchmarks are named <op>/<algo>/<rows>x<cols>, e.g.
// "softmax/three-pass-reload/1x16384", and report two rate counters:
//   elements/s  source elements processed per second;
//   bytes/s     the op's ideal memory traffic per second (read + written:
//               softmax / log_softmax 8 B per element, logsumexp 4,
//               backward 12), comparable with the memcpy rows (the
//               read + write floor of this machine).
// The label is the kernel that smax::kernel_name reports. Buffers are warm
// (the same buffers every iteration): rows up to 256K elements run from
// cache, 4M-element rows from memory. Time is wall time (UseRealTime), since
// smax may run a call on several threads: SMAX_BENCH_THREADS (default 1).
//
// Quote ratios between rows of one run, not absolute times: the machines
// are shared and noisy.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "smax/smax.h"

namespace {

enum class Op { kSoftmax, kLogSoftmax, kLogsumexp, kSoftmaxBackward, kLogSoftmaxBackward,
                kNaiveSoftmax, kMemcpy };

const char* op_name(Op op) {
  switch (op) {
    case Op::kSoftmax: return "softmax";
    case Op::kLogSoftmax: return "log_softmax";
    case Op::kLogsumexp: return "logsumexp";
    case Op::kSoftmaxBackward: return "softmax_backward";
    case Op::kLogSoftmaxBackward: return "log_softmax_backward";
    case Op::kNaiveSoftmax: return "naive_softmax";
    case Op::kMemcpy: return "memcpy";
  }
  return "?";
}

int bytes_per_element(Op op) {
  switch (op) {
    case Op::kLogsumexp: return 4;
    case Op::kSoftmaxBackward:
    case Op::kLogSoftmaxBackward: return 12;
    default: return 8;
  }
}

int bench_threads() {
  const char* env = std::getenv("SMAX_BENCH_THREADS");
  const int n = env ? std::atoi(env) : 1;
  return n >= 1 ? n : 1;
}

// The baseline: max, std::exp and sum in float, divide; no vectorised exp.
void naive_softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r, x += cols, y += cols) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < cols; ++i) m = x[i] > m ? x[i] : m;
    float sum = 0.0f;
    for (int64_t i = 0; i < cols; ++i) sum += (y[i] = std::exp(x[i] - m));
    for (int64_t i = 0; i < cols; ++i) y[i] = y[i] / sum;
  }
}

std::vector<float> normal_data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

void run(benchmark::State& state, Op op, smax::Algorithm algo, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const bool backward = op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward;
  std::vector<float> x = normal_data(n, 1);
  std::vector<float> dst(static_cast<size_t>(op == Op::kLogsumexp ? rows : n));
  std::vector<float> y, dy;
  const smax::TensorView xv = smax::make_view(x.data(), {rows, cols});
  const smax::TensorView dv = op == Op::kLogsumexp ? smax::make_view(dst.data(), {rows})
                                                   : smax::make_view(dst.data(), {rows, cols});
  smax::SoftmaxOptions options;
  options.algorithm = algo;
  options.threads = bench_threads();
  smax::TensorView yv = xv, dyv = xv;
  if (backward) {
    y.resize(x.size());
    yv = smax::make_view(y.data(), {rows, cols});
    if (op == Op::kSoftmaxBackward) {
      smax::softmax(xv, yv, options);
    } else {
      smax::log_softmax(xv, yv, options);
    }
    dy = normal_data(n, 2);
    dyv = smax::make_view(dy.data(), {rows, cols});
  }

  try {
    for (auto _ : state) {
      switch (op) {
        case Op::kSoftmax: smax::softmax(xv, dv, options); break;
        case Op::kLogSoftmax: smax::log_softmax(xv, dv, options); break;
        case Op::kLogsumexp: smax::logsumexp(xv, dv, options); break;
        case Op::kSoftmaxBackward: smax::softmax_backward(yv, dyv, dv, options); break;
        case Op::kLogSoftmaxBackward: smax::log_softmax_backward(yv, dyv, dv, options); break;
        case Op::kNaiveSoftmax: naive_softmax_rows(x.data(), dst.data(), rows, cols); break;
        case Op::kMemcpy:
          std::memcpy(dst.data(), x.data(), static_cast<size_t>(n) * sizeof(float));
          break;
      }
      benchmark::ClobberMemory();
    }
  } catch (const smax::Error& e) {
    state.SkipWithError(e.what());
    return;
  }

  // Sanity check (not a test): the first softmax row sums to 1.
  if (op == Op::kSoftmax || op == Op::kNaiveSoftmax) {
    double sum = 0;
    for (int64_t i = 0; i < cols; ++i) sum += dst[static_cast<size_t>(i)];
    if (!(std::fabs(sum - 1.0) < 1e-3)) {
      state.SkipWithError(("softmax row sums to " + std::to_string(sum)).c_str());
      return;
    }
  }

  const double elements = static_cast<double>(state.iterations()) * static_cast<double>(n);
  state.counters["elements/s"] = benchmark::Counter(elements, benchmark::Counter::kIsRate);
  state.counters["bytes/s"] =
      benchmark::Counter(elements * bytes_per_element(op), benchmark::Counter::kIsRate);
  if (op != Op::kNaiveSoftmax && op != Op::kMemcpy) {
    state.SetLabel(smax::kernel_name(op_name(op), smax::algorithm_name(algo), cols) +
                   " threads=" + std::to_string(options.threads));
  }
}

struct Shape {
  int64_t rows, cols;
};
// Single rows from L1 to far beyond the last-level cache, and an LLM
// vocabulary batch.
const Shape kShapes[] = {{1, 1024}, {1, 16384}, {1, 262144}, {1, 4194304}, {256, 32000}};

void register_one(Op op, smax::Algorithm algo, const char* algo_label) {
  for (const Shape& s : kShapes) {
    const std::string name = std::string(op_name(op)) + "/" + algo_label + "/" +
                             std::to_string(s.rows) + "x" + std::to_string(s.cols);
    benchmark::RegisterBenchmark(name.c_str(), run, op, algo, s.rows, s.cols)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

void register_all() {
  const smax::Algorithm algos[] = {smax::Algorithm::kAuto, smax::Algorithm::kThreePassReload,
                                   smax::Algorithm::kThreePassRecompute,
                                   smax::Algorithm::kTwoPass, smax::Algorithm::kOnline};
  for (smax::Algorithm a : algos) register_one(Op::kSoftmax, a, smax::algorithm_name(a));
  register_one(Op::kNaiveSoftmax, smax::Algorithm::kAuto, "scalar");
  register_one(Op::kMemcpy, smax::Algorithm::kAuto, "floor");
  for (Op op : {Op::kLogSoftmax, Op::kLogsumexp, Op::kSoftmaxBackward,
                Op::kLogSoftmaxBackward}) {
    register_one(op, smax::Algorithm::kAuto, "auto");
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("smax_version", smax::version());
  benchmark::AddCustomContext("smax_target", smax::active_target());
  benchmark::AddCustomContext("smax_threads", std::to_string(bench_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

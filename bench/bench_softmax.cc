// bench/bench_softmax.cc: the Google Benchmark suite of the softmax family.
//
// Names: <group>/<op>/<algo>/<shape>[/cold][/threads:N][/big]
//   group  row (one row, 1K..32M elements), llm (1, 64, 256 rows of LLM
//          vocabularies), attn (16x2048 rows of 2048, 4096 rows of 128),
//          col ([32, 81, 8732] over dim 1), floor (machine floors)
//   op     softmax, log_softmax, logsumexp, softmax_backward,
//          log_softmax_backward, naive_softmax (std::exp loop)
//   algo   auto, three-pass-reload, three-pass-recompute, two-pass, online
//   cold   buffer rotation: as many copies of (src, dst) as make >= 2 x LLC
//          (64 MiB here), used in turn, so each call starts from DRAM
//   threads:N  smax runs each call on N threads (default run: 1 and all)
//   big    left out of the default run (shapes of >= 16M elements other
//          than the goal shapes); `--benchmark_filter=/big` runs them,
//          `--benchmark_filter=.` runs everything.
// Counters: elements/s (source elements per second) and bytes/s (the op's
// ideal traffic: softmax / log_softmax 8 B per element, logsumexp 4,
// backward 12). The floor/* rows give, in the same run, the read-only and
// read+write bandwidth (bytes/s) and the exp throughput (elements/s) of
// this machine (bench/floors.h). The label is the kernel smax ran.
// Time is wall time (UseRealTime), since smax may use several threads.
//
// Quote ratios between rows of one run, not absolute times: the machines
// are shared and noisy.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "data.h"
#include "floors.h"
#include "smax/smax.h"

namespace {

// Row-major view of a runtime shape (the generic make_view).
smax::TensorView view_of(const float* data, const std::vector<int64_t>& dims) {
  return smax::make_view(const_cast<float*>(data), smax::DType::kF32, static_cast<int>(dims.size()),
                         dims.data(), nullptr);
}

// The library ops are those of testing/check.h (smax_cli::Op, the CLI's,
// with their names and ideal traffic), in its order; the bench adds the
// naive baseline after them.
enum class Op { kSoftmax, kLogSoftmax, kLogsumexp, kSoftmaxBackward, kLogSoftmaxBackward,
                kNaiveSoftmax };
constexpr bool SameOp(Op a, smax_cli::Op b) { return static_cast<int>(a) == static_cast<int>(b); }
static_assert(SameOp(Op::kSoftmax, smax_cli::Op::kSoftmax) &&
                  SameOp(Op::kLogSoftmax, smax_cli::Op::kLogSoftmax) &&
                  SameOp(Op::kLogsumexp, smax_cli::Op::kLogsumexp) &&
                  SameOp(Op::kSoftmaxBackward, smax_cli::Op::kSoftmaxBackward) &&
                  SameOp(Op::kLogSoftmaxBackward, smax_cli::Op::kLogSoftmaxBackward),
              "Op lists smax_cli::Op's ops in its order");

const char* op_name(Op op) {
  if (op == Op::kNaiveSoftmax) return "naive_softmax";
  return smax_cli::op_name(static_cast<smax_cli::Op>(op));
}

int bytes_per_element(Op op) {
  return op == Op::kNaiveSoftmax ? 8 : smax_cli::bytes_per_element(static_cast<smax_cli::Op>(op));
}

int all_threads() {
  const char* env = std::getenv("SMAX_BENCH_THREADS");
  if (env && std::atoi(env) >= 1) return std::atoi(env);
  const unsigned hc = std::thread::hardware_concurrency();
  return hc >= 1 ? static_cast<int>(hc) : 1;
}

constexpr int64_t kColdBytes = int64_t{64} << 20;  // 2 x the 32 MiB LLC

struct Shape {
  std::vector<int64_t> dims;
  int axis;  // reduced axis
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  std::string name() const {
    std::string s;
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
    if (axis != static_cast<int>(dims.size()) - 1) s += "/dim" + std::to_string(axis);
    return s;
  }
};

// The naive baseline: max, std::exp and sum in float, divide, along `axis`.
void naive_softmax(const float* x, float* y, const Shape& s) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < s.axis; ++i) outer *= s.dims[i];
  for (size_t i = s.axis + 1; i < s.dims.size(); ++i) inner *= s.dims[i];
  const int64_t n = s.dims[s.axis];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const float* xr = x + o * n * inner + in;
      float* yr = y + o * n * inner + in;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) m = xr[i * inner] > m ? xr[i * inner] : m;
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) sum += (yr[i * inner] = std::exp(xr[i * inner] - m));
      for (int64_t i = 0; i < n; ++i) yr[i * inner] = yr[i * inner] / sum;
    }
  }
}

struct Buffers {
  std::vector<float> x, y, dy, dst;
};

void run(benchmark::State& state, Op op, smax::Algorithm algo, Shape shape, bool cold,
         int threads) {
  const int64_t n = shape.elements();
  const bool backward = op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward;
  std::vector<int64_t> out_dims = shape.dims;
  if (op == Op::kLogsumexp) out_dims.erase(out_dims.begin() + shape.axis);
  const int64_t out_n = op == Op::kLogsumexp ? n / shape.dims[shape.axis] : n;
  const int64_t footprint =
      4 * (n * (backward ? 2 : 1) + out_n);
  const int copies =
      cold ? static_cast<int>(std::max<int64_t>(2, (kColdBytes + footprint - 1) / footprint)) : 1;

  smax::SoftmaxOptions options;
  options.algorithm = algo;
  options.threads = threads;
  options.axis = shape.axis;
  std::vector<Buffers> bufs(static_cast<size_t>(copies));
  const std::vector<float> x0 = smax_bench::logits(static_cast<size_t>(n), 1);
  for (Buffers& b : bufs) {
    b.x = x0;
    b.dst.assign(static_cast<size_t>(out_n), 0.0f);
    if (backward) {
      b.y.resize(b.x.size());
      const auto xv = view_of(b.x.data(), shape.dims);
      const auto yv = view_of(b.y.data(), shape.dims);
      if (op == Op::kSoftmaxBackward) {
        smax::softmax(xv, yv, options);
      } else {
        smax::log_softmax(xv, yv, options);
      }
      b.dy = smax_bench::logits(static_cast<size_t>(n), 2);
    }
  }

  int next = 0;
  try {
    for (auto _ : state) {
      Buffers& b = bufs[static_cast<size_t>(next)];
      next = next + 1 == copies ? 0 : next + 1;
      const auto xv = view_of(b.x.data(), shape.dims);
      const auto dv = view_of(b.dst.data(), out_dims);
      switch (op) {
        case Op::kSoftmax: smax::softmax(xv, dv, options); break;
        case Op::kLogSoftmax: smax::log_softmax(xv, dv, options); break;
        case Op::kLogsumexp: smax::logsumexp(xv, dv, options); break;
        case Op::kSoftmaxBackward:
          smax::softmax_backward(view_of(b.y.data(), shape.dims),
                                 view_of(b.dy.data(), shape.dims), dv, options);
          break;
        case Op::kLogSoftmaxBackward:
          smax::log_softmax_backward(view_of(b.y.data(), shape.dims),
                                     view_of(b.dy.data(), shape.dims), dv, options);
          break;
        case Op::kNaiveSoftmax: naive_softmax(b.x.data(), b.dst.data(), shape); break;
      }
      benchmark::ClobberMemory();
    }
  } catch (const smax::Error& e) {
    state.SkipWithError(e.what());
    return;
  }

  // Sanity check (not a test): the first softmax row sums to 1.
  if ((op == Op::kSoftmax || op == Op::kNaiveSoftmax) && shape.axis + 1 == static_cast<int>(shape.dims.size())) {
    double sum = 0;
    for (int64_t i = 0; i < shape.dims.back(); ++i) sum += bufs[0].dst[static_cast<size_t>(i)];
    if (!(std::fabs(sum - 1.0) < 1e-3)) {
      state.SkipWithError(("softmax row sums to " + std::to_string(sum)).c_str());
      return;
    }
  }

  const double elements = static_cast<double>(state.iterations()) * static_cast<double>(n);
  state.counters["elements/s"] = benchmark::Counter(elements, benchmark::Counter::kIsRate);
  state.counters["bytes/s"] =
      benchmark::Counter(elements * bytes_per_element(op), benchmark::Counter::kIsRate);
  if (op != Op::kNaiveSoftmax) {
    const char* kop = backward ? op_name(op) : op_name(op);
    state.SetLabel(smax::kernel_name(kop, smax::algorithm_name(algo), shape.dims[shape.axis]) +
                   " threads=" + std::to_string(threads) + (cold ? " cold" : ""));
  }
}

// ---- floors -----------------------------------------------------------------
enum class Floor { kRead, kReadWrite, kExp };

void run_floor(benchmark::State& state, Floor kind, int64_t n, bool cold) {
  const int64_t per_copy = n * (kind == Floor::kReadWrite ? 8 : 4);
  const int copies =
      cold ? static_cast<int>(std::max<int64_t>(2, (kColdBytes + per_copy - 1) / per_copy)) : 1;
  std::vector<std::vector<float>> src(static_cast<size_t>(copies)), dst(src.size());
  for (size_t c = 0; c < src.size(); ++c) {
    src[c] = smax_bench::logits(static_cast<size_t>(n), 3);
    if (kind == Floor::kReadWrite) dst[c].assign(static_cast<size_t>(n), 0.0f);
  }
  int next = 0;
  float sink = 0;
  for (auto _ : state) {
    const size_t c = static_cast<size_t>(next);
    next = next + 1 == copies ? 0 : next + 1;
    switch (kind) {
      case Floor::kRead: sink += smax_bench::read_floor(src[c].data(), static_cast<size_t>(n)); break;
      case Floor::kReadWrite:
        smax_bench::read_write_floor(src[c].data(), dst[c].data(), static_cast<size_t>(n));
        break;
      case Floor::kExp: sink += smax_bench::exp_floor(src[c].data(), static_cast<size_t>(n)); break;
    }
    benchmark::DoNotOptimize(sink);
    benchmark::ClobberMemory();
  }
  const double elements = static_cast<double>(state.iterations()) * static_cast<double>(n);
  state.counters["elements/s"] = benchmark::Counter(elements, benchmark::Counter::kIsRate);
  state.counters["bytes/s"] = benchmark::Counter(
      elements * (kind == Floor::kReadWrite ? 8 : 4), benchmark::Counter::kIsRate);
  state.SetLabel(smax_bench::floor_target());
}

// ---- storage dtypes ----------------------------------------------------------
// dtype/<op>/<f32|bf16|f16>/<shape>: every operand of the op in that dtype
// (forward: src, dst; backward: y, dy, dx), 1 thread, algorithm auto. The
// bytes moved per element halve from f32 to bf16 / f16 (bytes/s counts the
// op's ideal traffic in the dtype).
void run_dtype(benchmark::State& state, Op op, smax::DType dtype, Shape s) {
  const int64_t n = s.elements();
  const int size = smax::dtype_size(dtype);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i % 10007)) * 4.0f;
  auto make = [&](bool fill) {
    std::vector<uint8_t> b(static_cast<size_t>(n * size));
    for (int64_t i = 0; i < n && fill; ++i) {
      const float v = op == Op::kSoftmaxBackward ? 1.0f / static_cast<float>(s.dims.back()) : x[static_cast<size_t>(i)];
      uint32_t u;
      std::memcpy(&u, &v, 4);
      if (size == 4) {
        std::memcpy(b.data() + i * 4, &v, 4);
      } else {
        const uint16_t h = dtype == smax::DType::kBF16 ? static_cast<uint16_t>(u >> 16)
                                                        : static_cast<uint16_t>(0x3c00 - (i % 3));
        std::memcpy(b.data() + i * 2, &h, 2);
      }
    }
    return b;
  };
  std::vector<uint8_t> a = make(true), b = make(true), c = make(false);
  auto view = [&](std::vector<uint8_t>& buf) {
    return smax::make_view(buf.data(), dtype, static_cast<int>(s.dims.size()), s.dims.data(), nullptr);
  };
  smax::SoftmaxOptions o;
  o.axis = s.axis;
  o.threads = 1;
  for (auto _ : state) {
    switch (op) {
      case Op::kSoftmax: smax::softmax(view(a), view(c), o); break;
      case Op::kLogSoftmax: smax::log_softmax(view(a), view(c), o); break;
      case Op::kSoftmaxBackward: smax::softmax_backward(view(a), view(b), view(c), o); break;
      default: break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["ns/element"] = benchmark::Counter(
      static_cast<double>(n) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["bytes/s"] = benchmark::Counter(
      static_cast<double>(n) * static_cast<double>(state.iterations()) *
          (op == Op::kSoftmaxBackward ? 3 : 2) * size,
      benchmark::Counter::kIsRate);
}

// ---- registration -------------------------------------------------------------
void add(const std::string& group, Op op, smax::Algorithm algo, const Shape& s, bool cold,
         int threads, bool big) {
  std::string name = group + "/" + op_name(op) + "/" +
                     (op == Op::kNaiveSoftmax ? "scalar" : smax::algorithm_name(algo)) + "/" +
                     s.name();
  if (cold) name += "/cold";
  name += "/threads:" + std::to_string(threads);
  if (big) name += "/big";
  benchmark::RegisterBenchmark(name.c_str(), run, op, algo, s, cold, threads)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

void register_all() {
  using A = smax::Algorithm;
  const A algos[] = {A::kAuto, A::kThreePassReload, A::kThreePassRecompute, A::kTwoPass,
                     A::kOnline};
  const Op fwd[] = {Op::kSoftmax, Op::kLogSoftmax, Op::kLogsumexp};
  const int tall = all_threads();
  const int64_t kBig = int64_t{1} << 24;

  // Floors: bandwidth in L2 (256K elements = 1 MiB), and from DRAM (32M,
  // rotated), exp throughput in L1.
  for (int64_t n : {int64_t{262144}, int64_t{33554432}}) {
    const bool cold = n > 262144;
    for (Floor f : {Floor::kRead, Floor::kReadWrite}) {
      const std::string name = std::string("floor/") + (f == Floor::kRead ? "read" : "read_write") +
                               "/1x" + std::to_string(n) + (cold ? "/cold" : "");
      benchmark::RegisterBenchmark(name.c_str(), run_floor, f, n, cold)
          ->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RegisterBenchmark("floor/exp/1x4096", run_floor, Floor::kExp, int64_t{4096}, false)
      ->UseRealTime()->Unit(benchmark::kMicrosecond);

  // Single rows, 1K .. 32M: every forward op x every algorithm; backward.
  const int64_t rows[] = {1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 33554432};
  for (int64_t n : rows) {
    const Shape s{{1, n}, 1};
    const bool big = n >= kBig && n != 33554432;
    for (Op op : fwd) {
      for (A a : algos) add("row", op, a, s, false, 1, big);
      add("row", op, A::kAuto, s, false, tall, big);
    }
    add("row", Op::kSoftmaxBackward, A::kAuto, s, false, 1, big);
    add("row", Op::kLogSoftmaxBackward, A::kAuto, s, false, 1, big);
    add("row", Op::kNaiveSoftmax, A::kAuto, s, false, 1, big);
    // Cold cache where the row would otherwise sit in L2 / L3.
    if (n >= 16384 && n <= 4194304) {
      for (A a : algos) add("row", Op::kSoftmax, a, s, true, 1, false);
      add("row", Op::kLogSoftmax, A::kAuto, s, true, 1, false);
      add("row", Op::kLogsumexp, A::kAuto, s, true, 1, false);
    }
  }

  // Batched LLM vocabularies.
  for (int64_t b : {1, 64, 256}) {
    for (int64_t v : {32000, 128256, 152064, 256000}) {
      const Shape s{{b, v}, 1};
      const bool goal = (b == 256 && v == 32000) || (b == 64 && v == 128256);
      const bool big = b * v >= kBig && !goal;
      for (Op op : fwd) {
        add("llm", op, A::kAuto, s, false, 1, big);
        add("llm", op, A::kAuto, s, false, tall, big);
      }
      add("llm", Op::kSoftmax, A::kThreePassReload, s, false, 1, big);
      add("llm", Op::kSoftmax, A::kTwoPass, s, false, 1, big);
      add("llm", Op::kSoftmaxBackward, A::kAuto, s, false, 1, big);
      add("llm", Op::kNaiveSoftmax, A::kAuto, s, false, 1, big);
      if (b == 1) add("llm", Op::kSoftmax, A::kAuto, s, true, 1, false);
    }
  }
  {
    const Shape s{{1000, 1000}, 1};
    for (Op op : fwd) add("llm", op, A::kAuto, s, false, 1, false);
    add("llm", Op::kNaiveSoftmax, A::kAuto, s, false, 1, false);
  }

  // Attention-like: 16 heads x 2048 queries over 2048 keys; 4096 rows of 128.
  for (const Shape& s : {Shape{{16 * 2048, 2048}, 1}, Shape{{4096, 128}, 1}}) {
    for (Op op : fwd) {
      add("attn", op, A::kAuto, s, false, 1, false);
      add("attn", op, A::kAuto, s, false, tall, false);
    }
    add("attn", Op::kSoftmaxBackward, A::kAuto, s, false, 1, false);
    add("attn", Op::kNaiveSoftmax, A::kAuto, s, false, 1, false);
  }

  // Storage dtypes on the goal shapes, 1 thread: f32 beside bf16 and f16.
  for (const Shape& s : {Shape{{256, 32000}, 1}, Shape{{64, 128256}, 1}}) {
    for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kSoftmaxBackward}) {
      for (smax::DType t : {smax::DType::kF32, smax::DType::kBF16, smax::DType::kF16}) {
        const std::string name = std::string("dtype/") + op_name(op) + "/" + smax::dtype_name(t) +
                                 "/" + s.name();
        benchmark::RegisterBenchmark(name.c_str(), run_dtype, op, t, s)
            ->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
    }
  }

  // Column softmax: SSD-like [32, 81, 8732] over dim 1.
  {
    const Shape s{{32, 81, 8732}, 1};
    for (Op op : fwd) {
      add("col", op, A::kAuto, s, false, 1, false);
      add("col", op, A::kAuto, s, false, tall, false);
    }
    add("col", Op::kSoftmaxBackward, A::kAuto, s, false, 1, false);
    add("col", Op::kNaiveSoftmax, A::kAuto, s, false, 1, false);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  // Default run: everything but the /big shapes.
  std::vector<char*> args(argv, argv + argc);
  bool has_filter = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_filter", 18) == 0) has_filter = true;
  }
  static char default_filter[] = "--benchmark_filter=-/big";
  if (!has_filter) args.push_back(default_filter);
  int args_count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 1;
  benchmark::AddCustomContext("smax_version", smax::version());
  benchmark::AddCustomContext("smax_target", smax::active_target());
  benchmark::AddCustomContext("smax_all_threads", std::to_string(all_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

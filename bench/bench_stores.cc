// bench/bench_stores.cc: streaming (non-temporal) stores, per kernel, on
// this host: each case with regular stores, with streaming stores, and as
// "auto" decides (docs/design.md, "Streaming stores"; docs/benchmarking.md,
// "Batched rows at one sweep").
//
//   smax_bench_stores [--threads N] [--reps R] [--cases op:RxC,...]
//
// ops: softmax, log_softmax (three-pass reload, the algorithm that
// streams), softmax_backward, log_softmax_backward, cross_entropy (the forward with
// its fused gradient, class-index targets), cross_entropy_probs (the same
// with probability targets: softmax of a second logits tensor),
// cross_entropy_backward.
// Every round runs "off" and "on" (SMAX_STREAM_STORES's two forced modes,
// set with smax::set_streaming_stores; which goes first alternates) for
// >= 50 ms each, plus the one-sweep streaming copy of the same number of
// floats on the same threads (bench/floors.h); the median round is reported, in ns per
// element. Then "auto": the measurement restarted and run on this case's
// calls alone until its kernel decides (at most 20 calls), with the
// decision and the time per call after it. Inputs: bench/data.h's logits.
// Quote ratios between columns of one run: the machines are shared.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "data.h"
#include "floors.h"
#include "smax/smax.h"

namespace {

const char* kDefaultCases =
    "softmax:256x32000,log_softmax:256x32000,softmax_backward:256x32000,log_softmax_backward:256x32000,"
    "softmax_backward:64x128256,log_softmax_backward:64x128256,cross_entropy:256x32000,"
    "cross_entropy_probs:256x32000,cross_entropy_backward:256x32000";

// 64-byte aligned storage (the backward streams only aligned dx rows).
struct Aligned {
  std::vector<float> storage;
  float* data;
  explicit Aligned(size_t count) : storage(count + 16) {
    const auto address = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + (64 - address % 64) % 64 / sizeof(float);
  }
};

struct Case {
  std::string op;
  int64_t rows = 0, cols = 0;
};

std::vector<Case> parse_cases(const std::string& text) {
  std::vector<Case> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    Case c;
    const size_t colon = item.find(':'), x = item.find('x', colon);
    if (colon == std::string::npos || x == std::string::npos || x < colon) {
      std::fprintf(stderr, "smax_bench_stores: bad case '%s' (op:RxC)\n", item.c_str());
      std::exit(2);
    }
    c.op = item.substr(0, colon);
    c.rows = std::atoll(item.substr(colon + 1, x - colon - 1).c_str());
    c.cols = std::atoll(item.substr(x + 1).c_str());
    if (c.rows <= 0 || c.cols <= 0) {
      std::fprintf(stderr, "smax_bench_stores: bad shape in '%s'\n", item.c_str());
      std::exit(2);
    }
    out.push_back(c);
    start = end + 1;
  }
  return out;
}

// Seconds per call of fn, over back-to-back calls lasting >= min_seconds.
double time_calls(const std::function<void()>& fn, double min_seconds) {
  using clock = std::chrono::steady_clock;
  int64_t calls = 0;
  const auto start = clock::now();
  double took = 0.0;
  do {
    fn();
    ++calls;
    took = std::chrono::duration<double>(clock::now() - start).count();
  } while (took < min_seconds);
  return took / static_cast<double>(calls);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The decided state of the kernel `op` runs, from smax::streaming_stores().
std::string site_state(const std::string& op) {
  const std::string site = op.rfind("cross_entropy", 0) == 0 ? "cross_entropy"
                           : op == "log_softmax" || op == "softmax" ? op
                                                                    : "backward";
  const std::string all = ", " + smax::streaming_stores();
  size_t at = all.find(", " + site + "=");
  if (at == std::string::npos) return all.substr(2);
  at += 2;
  const size_t end = all.find(',', at);
  return all.substr(at + site.size() + 1, end == std::string::npos ? std::string::npos
                                                                      : end - at - site.size() - 1);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 5;
  std::string cases_text = kDefaultCases;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--cases" && i + 1 < argc) {
      cases_text = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: smax_bench_stores [--threads N] [--reps R] [--cases op:RxC,...]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "smax_bench_stores: --threads and --reps must be >= 1\n");
    return 2;
  }
  omp_set_num_threads(threads);
  std::printf("# smax_bench_stores, %d thread(s), %d rounds, ns per element (median round)\n",
              threads, reps);
  std::printf("%-24s %-10s %8s %8s %7s %8s  %-8s %8s\n", "op", "shape", "regular", "stream",
              "ratio", "copy", "auto", "after");
  for (const Case& c : parse_cases(cases_text)) {
    const size_t count = static_cast<size_t>(c.rows * c.cols);
    const int64_t dims[2] = {c.rows, c.cols};
    const int64_t row_dims[1] = {c.rows};
    Aligned x(count), y(count), log_y(count), dy(count), out(count), probs(count);
    smax_bench::fill_logits(x.data, count, 1);
    smax_bench::fill_logits(dy.data, count, 2);
    std::vector<int64_t> target(static_cast<size_t>(c.rows));
    for (size_t r = 0; r < target.size(); ++r) {
      target[r] = static_cast<int64_t>(smax_bench::splitmix64(r) % static_cast<uint64_t>(c.cols));
    }
    std::vector<float> loss(static_cast<size_t>(c.rows)), dloss(static_cast<size_t>(c.rows), 1.0f);
    auto view = [&](float* p) { return smax::make_view(p, smax::DType::kF32, 2, dims, nullptr); };
    const smax::TensorView tgt =
        smax::make_view(target.data(), smax::DType::kI64, 1, row_dims, nullptr);
    const smax::TensorView loss_view =
        smax::make_view(loss.data(), smax::DType::kF32, 1, row_dims, nullptr);
    const smax::TensorView dloss_view =
        smax::make_view(dloss.data(), smax::DType::kF32, 1, row_dims, nullptr);
    smax::SoftmaxOptions o;
    o.threads = threads;
    smax::softmax(view(x.data), view(y.data), o);  // the backward ops' forward outputs
    smax::log_softmax(view(x.data), view(log_y.data), o);
    smax::softmax(view(dy.data), view(probs.data), o);  // cross_entropy_probs' targets
    smax::CrossEntropyOptions ce;
    ce.loss.reduction = smax::Reduction::kNone;
    smax::CrossEntropyOptions ce_grad = ce;
    ce_grad.grad = view(out.data);
    std::function<void()> call;
    smax::SoftmaxOptions reload = o;
    reload.algorithm = smax::Algorithm::kThreePassReload;
    if (c.op == "softmax") {
      call = [&, reload] { smax::softmax(view(x.data), view(out.data), reload); };
    } else if (c.op == "log_softmax") {
      call = [&, reload] { smax::log_softmax(view(x.data), view(out.data), reload); };
    } else if (c.op == "softmax_backward") {
      call = [&] { smax::softmax_backward(view(y.data), view(dy.data), view(out.data), o); };
    } else if (c.op == "log_softmax_backward") {
      call = [&] {
        smax::log_softmax_backward(view(log_y.data), view(dy.data), view(out.data), o);
      };
    } else if (c.op == "cross_entropy") {
      call = [&] { smax::cross_entropy(view(x.data), tgt, loss_view, ce_grad, o); };
    } else if (c.op == "cross_entropy_probs") {
      call = [&] { smax::cross_entropy(view(x.data), view(probs.data), loss_view, ce_grad, o); };
    } else if (c.op == "cross_entropy_backward") {
      call = [&] {
        smax::cross_entropy_backward(view(x.data), tgt, dloss_view, view(out.data), ce, o);
      };
    } else {
      std::fprintf(stderr, "smax_bench_stores: unknown op '%s'\n", c.op.c_str());
      return 2;
    }
    std::vector<double> regular, streamed, copy;
    for (int round = 0; round < reps; ++round) {
      for (int k = 0; k < 2; ++k) {
        const bool on = (k == 0) == (round % 2 == 1);
        smax::set_streaming_stores(on ? "on" : "off");
        call();  // warm
        (on ? streamed : regular).push_back(time_calls(call, 0.05));
      }
      copy.push_back(time_calls([&] {
        // N chunks of whole cache lines on N threads (as smax_peers).
        const size_t per = ((count + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int k = 0; k < threads; ++k) {
          const size_t begin = std::min(count, k * per), end = std::min(count, begin + per);
          if (end > begin) smax_bench::stream_copy_floor(x.data + begin, out.data + begin, end - begin);
        }
      }, 0.05));
    }
    smax::set_streaming_stores("auto");
    int calls = 0;
    for (; calls < 20 && site_state(c.op) == "measuring"; ++calls) call();
    const std::string decided = site_state(c.op);
    const double after = time_calls(call, 0.05);
    const double per = 1e9 / static_cast<double>(count);
    const double reg = median(regular) * per, str = median(streamed) * per;
    char shape[32];
    std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(c.rows),
                  static_cast<long long>(c.cols));
    std::printf("%-24s %-10s %8.3f %8.3f %7.2f %8.3f  %-8s %8.3f  (decided after %d calls)\n",
                c.op.c_str(), shape, reg, str, str / reg, median(copy) * per, decided.c_str(),
                after * per, calls);
    std::fflush(stdout);
  }
  return 0;
}

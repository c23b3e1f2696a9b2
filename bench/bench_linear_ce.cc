// bench/bench_linear_ce.cc: time and peak extra memory of the fused linear
// cross-entropy (include/smax/linear_cross_entropy.h) against the
// materialising baseline it replaces, in the same run (issue 5, part 2).
//
//   build/bench/smax_bench_linear_ce                      # N=4096 D=2048 V=128256
//   build/bench/smax_bench_linear_ce --n 512 --v 32000    # smaller
//   build/bench/smax_bench_linear_ce --modes fwd --json lce.json
//
// Variants (each in its own child process, so that its peak RSS is its own):
//   base_fwd     cblas_sgemm into a materialised [N, V] logits buffer, then
//                smax::cross_entropy
//   lce_fwd      smax::linear_cross_entropy
//   base_fwdbwd  cblas_sgemm, smax::cross_entropy with the fused unit
//                gradient written in place over the logits
//                (CrossEntropyOptions::grad = logits), then the two GEMMs of
//                the gradients: dhidden = dlogits W, dweight = dlogits^T H
//   lce_fused    smax::linear_cross_entropy_fused (loss + dhidden + dweight,
//                dloss = 1)
// Memory: the child allocates and touches its inputs and gradient outputs
// (hidden, weight, targets, dhidden, dweight: what any variant needs), reads
// VmRSS, resets the peak (writes "5" to /proc/self/clear_refs; Linux >= 4.0),
// runs the variant once (the warm-up), and reports VmHWM - VmRSS-before as
// "peak extra" (with the logits buffer for the baselines). Time: median of
// --reps further runs (steady_clock). Loss: reduction mean, no bias,
// h ~ N(0, 1), w ~ N(0, 0.02^2), targets uniform. Ratios (variant /
// baseline) are what to read: machines are shared and noisy.
#include <cblas.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "flag_value.h"
#include "smax/cross_entropy.h"
#include "smax/linear_cross_entropy.h"
#include "smax/runtime.h"

namespace {

struct Config {
  int64_t n = 4096, d = 2048, v = 128256;
  int reps = 1;
  int threads = 0;  // 0 = smax's default (all)
  std::vector<std::string> modes = {"fwd", "fwdbwd"};
  std::string json;
};

// kB value of a /proc/self/status field, -1 if missing.
int64_t status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t len = std::strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, len, field) == 0 && line.size() > len && line[len] == ':') {
      return std::atoll(line.c_str() + len + 1);
    }
  }
  return -1;
}

bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

smax::TensorView view2(float* p, int64_t r, int64_t c) {
  smax::TensorView t;
  t.data = p;
  t.dtype = smax::DType::kF32;
  t.rank = 2;
  t.shape[0] = r;
  t.shape[1] = c;
  t.strides[0] = c;
  t.strides[1] = 1;
  return t;
}
smax::TensorView view1(void* p, int64_t n, smax::DType dt) {
  smax::TensorView t;
  t.data = p;
  t.dtype = dt;
  t.rank = n < 0 ? 0 : 1;
  t.shape[0] = n < 0 ? 1 : n;
  t.strides[0] = 1;
  return t;
}

struct Result {
  double seconds = 0.0;  // median
  double extra_mib = 0.0;
  double loss = 0.0;
  bool peak_reset = false;
};

// Runs one variant in this (child) process.
Result run_variant(const Config& c, const std::string& variant) {
  const int64_t N = c.n, D = c.d, V = c.v;
  std::vector<float> h(static_cast<size_t>(N * D)), w(static_cast<size_t>(V * D));
  std::vector<int64_t> t(static_cast<size_t>(N));
  std::vector<float> dh(static_cast<size_t>(N * D)), dw(static_cast<size_t>(V * D));
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : h) x = nd(rng);
  for (float& x : w) x = 0.02f * nd(rng);
  for (int64_t& y : t) y = static_cast<int64_t>(rng() % static_cast<uint64_t>(V));
  std::fill(dh.begin(), dh.end(), 0.0f);
  std::fill(dw.begin(), dw.end(), 0.0f);
  float loss = 0.0f, one = 1.0f;
  smax::SoftmaxOptions o;
  o.threads = c.threads;
  const smax::TensorView hv = view2(h.data(), N, D), wv = view2(w.data(), V, D);
  const smax::TensorView tv = view1(t.data(), N, smax::DType::kI64);
  const smax::TensorView lv = view1(&loss, -1, smax::DType::kF32);
  const smax::TensorView onev = view1(&one, -1, smax::DType::kF32);
  const smax::TensorView dhv = view2(dh.data(), N, D), dwv = view2(dw.data(), V, D);

  Result r;
  const int64_t rss0 = status_kb("VmRSS");
  r.peak_reset = reset_peak();
  float* logits = nullptr;
  if (variant.rfind("base", 0) == 0) {
    logits = static_cast<float*>(std::malloc(static_cast<size_t>(N * V) * sizeof(float)));
    if (logits == nullptr) {
      std::fprintf(stderr, "bench_linear_ce: cannot allocate the [N, V] logits\n");
      std::exit(3);
    }
  }
  auto once = [&] {
    if (variant == "base_fwd" || variant == "base_fwdbwd") {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(V),
                  static_cast<int>(D), 1.0f, h.data(), static_cast<int>(D), w.data(),
                  static_cast<int>(D), 0.0f, logits, static_cast<int>(V));
      smax::CrossEntropyOptions ce;
      const smax::TensorView xv = view2(logits, N, V);
      if (variant == "base_fwdbwd") ce.grad = xv;  // fused unit gradient, in place
      smax::cross_entropy(xv, tv, lv, ce, o);
      if (variant == "base_fwdbwd") {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N),
                    static_cast<int>(D), static_cast<int>(V), 1.0f, logits, static_cast<int>(V),
                    w.data(), static_cast<int>(D), 0.0f, dh.data(), static_cast<int>(D));
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(V),
                    static_cast<int>(D), static_cast<int>(N), 1.0f, logits, static_cast<int>(V),
                    h.data(), static_cast<int>(D), 0.0f, dw.data(), static_cast<int>(D));
      }
    } else if (variant == "lce_fwd") {
      smax::linear_cross_entropy(hv, wv, tv, std::nullopt, lv, {}, {}, o);
    } else if (variant == "lce_fused") {
      smax::linear_cross_entropy_fused(hv, wv, tv, std::nullopt, lv, onev, dhv, dwv, std::nullopt,
                                       {}, {}, o);
    } else {
      std::fprintf(stderr, "bench_linear_ce: unknown variant %s\n", variant.c_str());
      std::exit(2);
    }
  };
  std::vector<double> times;
  for (int i = 0; i <= c.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    const auto t1 = std::chrono::steady_clock::now();
    if (i == 0 && c.reps > 0) {
      // The first run (page faults of the logits, BLAS buffers) counts for
      // memory; its time is kept only when no further runs are asked for.
      const int64_t hwm = status_kb("VmHWM");
      r.extra_mib = static_cast<double>(hwm - rss0) / 1024.0;
      continue;
    }
    times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  if (c.reps == 0) r.extra_mib = static_cast<double>(status_kb("VmHWM") - rss0) / 1024.0;
  std::sort(times.begin(), times.end());
  r.seconds = times[times.size() / 2];
  r.loss = loss;
  std::free(logits);
  return r;
}

// Forks, runs `variant` in the child, returns its Result through a pipe.
bool run_child(const Config& c, const std::string& variant, Result* out) {
  int fd[2];
  if (pipe(fd) != 0) return false;
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(fd[0]);
    const Result r = run_variant(c, variant);
    const ssize_t w = write(fd[1], &r, sizeof r);
    _exit(w == static_cast<ssize_t>(sizeof r) ? 0 : 1);
  }
  close(fd[1]);
  const ssize_t got = read(fd[0], out, sizeof *out);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return got == static_cast<ssize_t>(sizeof *out) && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    v.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return smax_bench::flag_value(argc, argv, &i, "bench_linear_ce"); };
    if (a == "--n") {
      c.n = std::atoll(next().c_str());
    } else if (a == "--d") {
      c.d = std::atoll(next().c_str());
    } else if (a == "--v") {
      c.v = std::atoll(next().c_str());
    } else if (a == "--reps") {
      c.reps = std::atoi(next().c_str());
    } else if (a == "--threads") {
      c.threads = std::atoi(next().c_str());
    } else if (a == "--modes") {
      c.modes = split(next());
    } else if (a == "--json") {
      c.json = next();
    } else {
      std::fprintf(stderr,
                   "usage: %s [--n N] [--d D] [--v V] [--reps R] [--threads T] "
                   "[--modes fwd,fwdbwd] [--json FILE]\n",
                   argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (c.n <= 0 || c.d <= 0 || c.v <= 0 || c.reps < 0) {
    std::fprintf(stderr, "bench_linear_ce: sizes must be > 0 and reps >= 0\n");
    return 2;
  }
  const double logits_mib = static_cast<double>(c.n) * static_cast<double>(c.v) * 4.0 / 1048576.0;
  std::printf("linear cross-entropy, N=%lld D=%lld V=%lld (f32 logits %.1f MiB), reps %d, "
              "smax threads %d, target %s\n",
              static_cast<long long>(c.n), static_cast<long long>(c.d),
              static_cast<long long>(c.v), logits_mib, c.reps,
              c.threads > 0 ? c.threads : smax::max_threads(), smax::active_target().c_str());
  std::string json = "[\n";
  bool first = true, ok = true;
  for (const std::string& mode : c.modes) {
    const bool fwd = mode == "fwd";
    if (!fwd && mode != "fwdbwd") {
      std::fprintf(stderr, "bench_linear_ce: unknown mode %s (fwd, fwdbwd)\n", mode.c_str());
      return 2;
    }
    const std::string base = fwd ? "base_fwd" : "base_fwdbwd";
    const std::string ours = fwd ? "lce_fwd" : "lce_fused";
    Result rb, ro;
    if (!run_child(c, base, &rb) || !run_child(c, ours, &ro)) {
      std::fprintf(stderr, "bench_linear_ce: a child failed (%s)\n", mode.c_str());
      ok = false;
      continue;
    }
    const double ratio = ro.seconds / rb.seconds;
    const double mem_frac = ro.extra_mib / logits_mib;
    std::printf("%-7s %-12s %9.3f s  peak extra %9.1f MiB (%5.1f%% of logits)  loss %.6f\n",
                mode.c_str(), base.c_str(), rb.seconds, rb.extra_mib,
                100.0 * rb.extra_mib / logits_mib, rb.loss);
    std::printf("%-7s %-12s %9.3f s  peak extra %9.1f MiB (%5.1f%% of logits)  loss %.6f\n",
                mode.c_str(), ours.c_str(), ro.seconds, ro.extra_mib, 100.0 * mem_frac, ro.loss);
    std::printf("%-7s time %s / %s = %.3fx (goal <= 1.3x: %s); peak extra %.1f%% of the "
                "logits (goal < 10%%: %s)%s\n",
                mode.c_str(), ours.c_str(), base.c_str(), ratio, ratio <= 1.3 ? "holds" : "does not hold",
                100.0 * mem_frac, mem_frac < 0.1 ? "holds" : "does not hold",
                ro.peak_reset ? "" : " [peak not reset: VmHWM includes the setup]");
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s {\"mode\": \"%s\", \"n\": %lld, \"d\": %lld, \"v\": %lld, "
                  "\"baseline_s\": %.6f, \"smax_s\": %.6f, \"ratio\": %.4f, "
                  "\"baseline_extra_mib\": %.1f, \"smax_extra_mib\": %.1f, "
                  "\"smax_extra_fraction\": %.4f, \"baseline_loss\": %.7f, \"smax_loss\": %.7f}",
                  first ? "" : ",\n", mode.c_str(), static_cast<long long>(c.n),
                  static_cast<long long>(c.d), static_cast<long long>(c.v), rb.seconds, ro.seconds,
                  ratio, rb.extra_mib, ro.extra_mib, mem_frac, rb.loss, ro.loss);
    json += buf;
    first = false;
    std::fflush(stdout);
  }
  json += "\n]\n";
  if (!c.json.empty()) {
    std::ofstream f(c.json);
    f << json;
  }
  return ok ? 0 : 1;
}

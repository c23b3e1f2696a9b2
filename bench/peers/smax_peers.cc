// bench/peers/smax_peers.cc: smax against its C++ peers on the same inputs,
// in one process, interleaved (docs/benchmarking.md).
//
//   smax_peers [--threads N] [--reps R] [--quick] [--check]
//              [--cases op:AxB[:dimK],...] [--libs smax,onednn,xnnpack,naive]
//              [--json FILE] [--csv FILE]
//
// For every case the input is bench/data.h's logits (uniform on [-8, 8),
// reproducible in numpy), every library computes the op on it, and:
//  * time: R rounds; in each round every library runs (in a rotated order)
//    enough back-to-back calls for >= 2 ms and the mean per call is one
//    sample; the reported time is the median sample (ns per element).
//  * floor: in the same rounds, the memory floor of the op on this machine:
//    read_floor (one read of the source) + read_write_floor (read + write
//    of a row) for softmax / log_softmax, read_floor alone for logsumexp;
//    and the one-sweep copy floor (copy_ns): the faster of a copy with
//    regular stores and one with streaming stores; and the exp floor
//    (exp_ns): smax's logsumexp over L1-resident rows of 4096 (one exp per
//    element, nothing stored, no memory traffic; its max scan, sum and
//    call overhead included, a few % of it), what computing each exp once
//    costs with this library's exp on these cores: an estimate of the
//    compute floor, as copy_ns is of the memory floor, so that the
//    algorithms of the softmax family here cannot run much below
//    max(copy_ns, exp_ns). With --threads N the floors run on N threads.
//  * error against the float64 reference (src/reference): softmax max
//    relative error over outputs >= 1e-30; log_softmax / logsumexp max of
//    |y - ref| / (1 + |ref|), the library's documented bounds (2e-6).
// A library that is not built in, or does not offer the op / axis, gets a
// record with status "missing" or "unsupported" (never dropped).
// --check exits 1 if smax is out of bounds (the smoke test uses it).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "data.h"
#include "flag_value.h"
#include "floors.h"
#include "reference/reference.h"
#include "smax/smax.h"

#ifdef SMAX_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef SMAX_HAVE_XNNPACK
#include <pthreadpool.h>
#include <xnnpack.h>
#endif

namespace {

// Row-major view of a runtime shape (the generic make_view).
smax::TensorView view_of(const float* data, const std::vector<int64_t>& dims) {
  return smax::make_view(const_cast<float*>(data), smax::DType::kF32, static_cast<int>(dims.size()),
                         dims.data(), nullptr);
}

using Clock = std::chrono::steady_clock;

struct Case {
  std::string op;  // softmax, log_softmax, logsumexp
  std::vector<int64_t> dims;
  int axis;
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  int64_t out_elements() const { return op == "logsumexp" ? elements() / dims[axis] : elements(); }
  bool last_axis() const { return axis + 1 == static_cast<int>(dims.size()); }
  int64_t axis_len() const { return dims[axis]; }
  std::string shape() const {
    std::string s;
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
    return s;
  }
};

Case parse_case(const std::string& text) {
  Case c;
  std::stringstream ss(text);
  std::string op, shape, dim;
  std::getline(ss, op, ':');
  std::getline(ss, shape, ':');
  std::getline(ss, dim, ':');
  c.op = op;
  std::stringstream sh(shape);
  std::string part;
  while (std::getline(sh, part, 'x')) c.dims.push_back(std::stoll(part));
  c.axis = dim.empty() ? static_cast<int>(c.dims.size()) - 1 : std::stoi(dim.substr(3));
  if (c.op != "softmax" && c.op != "log_softmax" && c.op != "logsumexp") {
    std::fprintf(stderr, "smax_peers: unknown op in case '%s'\n", text.c_str());
    std::exit(2);
  }
  return c;
}

// The default case list; bench/peers/bench_peers.py has the same one.
const char* kDefaultCases =
    "softmax:1x1024,softmax:1x4096,softmax:1x16384,softmax:1x65536,softmax:1x262144,"
    "softmax:1x1048576,softmax:1x4194304,softmax:1x16777216,softmax:1x33554432,"
    "softmax:1000x1000,softmax:256x32000,softmax:64x128256,softmax:4096x128,"
    "softmax:32x81x8732:dim1,"
    "log_softmax:1x16384,log_softmax:1000x1000,log_softmax:256x32000,log_softmax:64x128256,"
    "log_softmax:1x33554432,"
    "logsumexp:1x16384,logsumexp:1000x1000,logsumexp:256x32000,logsumexp:64x128256,"
    "logsumexp:1x33554432";
const char* kQuickCases = "softmax:4x1000,log_softmax:3x333,logsumexp:5x100,softmax:4x7x5:dim1";

// ---- libraries ------------------------------------------------------------------
// A runner computes the case's op from `x` into `y`; prepare() returns
// "ok", "missing" (not built in) or "unsupported" (op / layout not offered).
struct Runner {
  virtual ~Runner() = default;
  virtual std::string prepare(const Case& c, const float* x, float* y, int threads) = 0;
  virtual void run() = 0;
};

// The views are made once in prepare(), as the oneDNN runner makes its
// memory objects there: run() times the call alone (it made a std::vector
// of the output dims per call, ~10% of a 1x1024 softmax).
struct SmaxRunner : Runner {
  enum class Op { kSoftmax, kLogSoftmax, kLogSumExp } op = Op::kSoftmax;
  smax::TensorView xv, yv;
  smax::SoftmaxOptions opt;
  std::string prepare(const Case& c, const float* x, float* y, int threads) override {
    op = c.op == "softmax" ? Op::kSoftmax : c.op == "log_softmax" ? Op::kLogSoftmax : Op::kLogSumExp;
    std::vector<int64_t> od = c.dims;
    if (op == Op::kLogSumExp) od.erase(od.begin() + c.axis);
    xv = view_of(x, c.dims);
    yv = view_of(y, od);
    opt.axis = c.axis;
    opt.threads = threads;
    return "ok";
  }
  void run() override {
    switch (op) {
      case Op::kSoftmax: smax::softmax(xv, yv, opt); break;
      case Op::kLogSoftmax: smax::log_softmax(xv, yv, opt); break;
      case Op::kLogSumExp: smax::logsumexp(xv, yv, opt); break;
    }
  }
};

// max, std::exp and sum in float along the axis; always one thread.
struct NaiveRunner : Runner {
  Case c;
  const float* x = nullptr;
  float* y = nullptr;
  std::string prepare(const Case& cc, const float* xx, float* yy, int) override {
    c = cc;
    x = xx;
    y = yy;
    return "ok";
  }
  void run() override {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < c.axis; ++i) outer *= c.dims[i];
    for (size_t i = c.axis + 1; i < c.dims.size(); ++i) inner *= c.dims[i];
    const int64_t n = c.axis_len();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const float* xr = x + o * n * inner + in;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) m = std::max(m, xr[i * inner]);
        if (c.op == "logsumexp") {
          float s = 0.0f;
          for (int64_t i = 0; i < n; ++i) s += std::exp(xr[i * inner] - m);
          y[o * inner + in] = m + std::log(s);
          continue;
        }
        float* yr = y + o * n * inner + in;
        if (c.op == "log_softmax") {
          float s = 0.0f;
          for (int64_t i = 0; i < n; ++i) s += std::exp(xr[i * inner] - m);
          const float l = std::log(s);
          for (int64_t i = 0; i < n; ++i) yr[i * inner] = xr[i * inner] - m - l;
          continue;
        }
        float s = 0.0f;
        for (int64_t i = 0; i < n; ++i) s += (yr[i * inner] = std::exp(xr[i * inner] - m));
        for (int64_t i = 0; i < n; ++i) yr[i * inner] /= s;
      }
    }
  }
};

#ifdef SMAX_HAVE_DNNL
// oneDNN 2.6: softmax_v2_forward, algorithm softmax_accurate / softmax_log,
// any axis, plain (row-major) layout. Threads: OpenMP (omp_set_num_threads).
struct DnnlRunner : Runner {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> args;
  std::string prepare(const Case& c, const float* x, float* y, int) override {
    if (c.op == "logsumexp") return "unsupported";
    dnnl::memory::dims dims(c.dims.begin(), c.dims.end());
    dnnl::memory::format_tag tag = c.dims.size() == 2   ? dnnl::memory::format_tag::ab
                                   : c.dims.size() == 3 ? dnnl::memory::format_tag::abc
                                                        : dnnl::memory::format_tag::a;
    dnnl::memory::desc md(dims, dnnl::memory::data_type::f32, tag);
    const auto alg = c.op == "softmax" ? dnnl::algorithm::softmax_accurate
                                       : dnnl::algorithm::softmax_log;
    dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, md, c.axis);
    dnnl::softmax_v2_forward::primitive_desc pd(d, eng);
    prim = dnnl::softmax_v2_forward(pd);
    args = {{DNNL_ARG_SRC, dnnl::memory(md, eng, const_cast<float*>(x))},
            {DNNL_ARG_DST, dnnl::memory(md, eng, y)}};
    return "ok";
  }
  void run() override {
    prim.execute(strm, args);
    strm.wait();
  }
};
#endif

#ifdef SMAX_HAVE_XNNPACK
// XNNPACK (Debian 2022 snapshot): xnn_create_softmax_nc_f32 (softmax over the
// last axis only; no log-softmax operator). Threads: a pthreadpool.
struct XnnRunner : Runner {
  xnn_operator_t op = nullptr;
  pthreadpool_t pool = nullptr;
  ~XnnRunner() override {
    if (op) xnn_delete_operator(op);
    if (pool) pthreadpool_destroy(pool);
  }
  std::string prepare(const Case& c, const float* x, float* y, int threads) override {
    if (c.op != "softmax" || !c.last_axis()) return "unsupported";
    static const bool init = xnn_initialize(nullptr) == xnn_status_success;
    if (!init) return "missing";
    if (threads > 1) pool = pthreadpool_create(static_cast<size_t>(threads));
    const size_t ch = static_cast<size_t>(c.axis_len());
    if (xnn_create_softmax_nc_f32(ch, ch, ch, 0, &op) != xnn_status_success) return "unsupported";
    if (xnn_setup_softmax_nc_f32(op, static_cast<size_t>(c.elements()) / ch, x, y, pool) !=
        xnn_status_success) {
      return "unsupported";
    }
    return "ok";
  }
  void run() override { xnn_run_operator(op, pool); }
};
#endif

std::unique_ptr<Runner> make_runner(const std::string& lib) {
  if (lib == "smax") return std::make_unique<SmaxRunner>();
  if (lib == "naive") return std::make_unique<NaiveRunner>();
#ifdef SMAX_HAVE_DNNL
  if (lib == "onednn") return std::make_unique<DnnlRunner>();
#endif
#ifdef SMAX_HAVE_XNNPACK
  if (lib == "xnnpack") return std::make_unique<XnnRunner>();
#endif
  return nullptr;
}

// ---- errors --------------------------------------------------------------------
double max_error(const Case& c, const std::vector<float>& y, const std::vector<double>& ref) {
  double e = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], v = y[i];
    double err;
    if (c.op == "softmax") {
      if (!(std::fabs(r) >= 1e-30)) {
        err = std::fabs(v - r) <= 1e-30 ? 0.0 : 0.0;  // bound applies to outputs >= 1e-30
      } else {
        err = std::fabs(v - r) / std::fabs(r);
      }
    } else {
      err = std::fabs(v - r) / (1.0 + std::fabs(r));
    }
    if (std::isnan(v) != std::isnan(r)) err = std::numeric_limits<double>::infinity();
    e = std::max(e, err);
  }
  return e;
}

// ---- timing --------------------------------------------------------------------
// Runs fn enough times for >= min_s and returns seconds per call.
double time_calls(const std::function<void()>& fn, int calls) {
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t0).count() / calls;
}
int calibrate(const std::function<void()>& fn, double min_s) {
  const double one = time_calls(fn, 1);
  if (one >= min_s) return 1;
  return static_cast<int>(std::min(1e6, std::ceil(min_s / std::max(one, 1e-9))));
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Record {
  std::string op, shape, lib, status, note;
  int axis = 0, threads = 1;
  int64_t elements = 0, axis_len = 0;
  double ns_per_elem = NAN, ns_min = NAN, floor_ns = NAN, max_err = NAN;
  double copy_ns = NAN;  // one-sweep copy floor: faster of regular and streaming stores
  double exp_ns = NAN;   // exp floor: logsumexp of L1-resident rows, per element
  int samples = 0;
};

// The host, for tables read side by side: CPU model (/proc/cpuinfo), L2
// and L3 sizes (sysfs, cpu0), smax's streaming-store choice.
std::string host_line() {
  std::string model = "unknown CPU";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "model name", 10) == 0) {
        const char* colon = std::strchr(line, ':');
        if (colon != nullptr) model = colon + 2;
        while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
        break;
      }
    }
    std::fclose(f);
  }
  auto cache = [](int level) {
    for (int index = 0; index < 8; ++index) {
      const std::string dir =
          "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
      FILE* f = std::fopen((dir + "level").c_str(), "r");
      if (f == nullptr) continue;
      int found = 0;
      const bool ok = std::fscanf(f, "%d", &found) == 1;
      std::fclose(f);
      if (!ok || found != level) continue;
      char size[64] = "?";
      if (FILE* s = std::fopen((dir + "size").c_str(), "r")) {
        if (std::fscanf(s, "%63s", size) != 1) std::strcpy(size, "?");
        std::fclose(s);
      }
      return std::string(size);
    }
    return std::string("?");
  };
  return model + ", L2 " + cache(2) + " per core, L3 " + cache(3);
}

std::string num(double v) {
  if (std::isnan(v)) return "null";
  if (std::isinf(v)) return "1e308";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 7;
  bool quick = false, check = false;
  std::string cases_text, libs_text = "smax,onednn,xnnpack,naive", json_path, csv_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return smax_bench::flag_value(argc, argv, &i, "smax_peers"); };
    if (a == "--threads") threads = std::max(1, std::atoi(value().c_str()));
    else if (a == "--reps") reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--cases") cases_text = value();
    else if (a == "--libs") libs_text = value();
    else if (a == "--json") json_path = value();
    else if (a == "--csv") csv_path = value();
    else if (a == "--quick") quick = true;
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr,
                   "usage: smax_peers [--threads N] [--reps R] [--quick] [--check] "
                   "[--cases op:AxB[:dimK],...] [--libs smax,onednn,xnnpack,naive] "
                   "[--json FILE] [--csv FILE]\n");
      return 2;
    }
  }
  if (cases_text.empty()) cases_text = quick ? kQuickCases : kDefaultCases;
  omp_set_num_threads(threads);  // oneDNN's OpenMP runtime

  std::vector<Case> cases;
  {
    std::stringstream ss(cases_text);
    std::string t;
    while (std::getline(ss, t, ',')) if (!t.empty()) cases.push_back(parse_case(t));
  }
  std::vector<std::string> libs;
  {
    std::stringstream ss(libs_text);
    std::string t;
    while (std::getline(ss, t, ',')) if (!t.empty()) libs.push_back(t);
  }

  std::vector<Record> records;
  bool failed = false;
  std::fprintf(stderr, "smax_peers: %zu cases, threads=%d, reps=%d, smax target %s\n",
               cases.size(), threads, reps, std::string(smax::active_target()).c_str());
  std::fprintf(stderr, "host: %s\n", host_line().c_str());
  for (const Case& c : cases) {
    const int64_t n = c.elements();
    const std::vector<float> x = smax_bench::logits(static_cast<size_t>(n), 1);
    smax::SoftmaxOptions ropt;
    ropt.axis = c.axis;
    const auto xv = view_of(x.data(), c.dims);
    const std::vector<double> ref = c.op == "softmax"       ? smax::reference::softmax(xv, ropt)
                                    : c.op == "log_softmax" ? smax::reference::log_softmax(xv, ropt)
                                                            : smax::reference::logsumexp(xv, ropt);
    std::vector<std::unique_ptr<Runner>> runners;
    std::vector<std::vector<float>> outs;
    std::vector<Record> recs;
    for (const std::string& lib : libs) {
      Record r;
      r.op = c.op;
      r.shape = c.shape();
      r.lib = lib;
      r.axis = c.axis;
      r.threads = lib == "naive" ? 1 : threads;
      r.elements = n;
      r.axis_len = c.axis_len();
      outs.emplace_back(static_cast<size_t>(c.out_elements()), 0.0f);
      auto runner = make_runner(lib);
      if (!runner) {
        r.status = "missing";
        r.note = "not built in (install the peer, see docs/benchmarking.md)";
      } else {
        try {
          r.status = runner->prepare(c, x.data(), outs.back().data(), threads);
          if (r.status == "ok") {
            runner->run();
            r.max_err = max_error(c, outs.back(), ref);
          }
        } catch (const std::exception& e) {
          r.status = "error";
          r.note = e.what();
        }
      }
      if (r.status != "ok") runner.reset();
      runners.push_back(std::move(runner));
      recs.push_back(r);
    }
    // Floor buffers. With --threads N the floors run on N threads (OpenMP,
    // N chunks of whole cache lines), the bandwidth N cores can draw.
    std::vector<float> fsrc = x, fdst(static_cast<size_t>(n));
    float sink = 0;
    // One thread runs on the calling thread: an OpenMP region of one thread
    // still costs ~0.3 us a call, as much as a 1x1024 copy takes.
    auto chunked = [&](auto&& fn) {
      if (threads == 1) {
        fn(0, size_t{0}, static_cast<size_t>(n));
        return;
      }
      const int64_t per = ((n + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int k = 0; k < threads; ++k) {
        const int64_t begin = std::min<int64_t>(n, k * per), end = std::min<int64_t>(n, begin + per);
        if (end > begin) fn(k, static_cast<size_t>(begin), static_cast<size_t>(end - begin));
      }
    };
    // One-sweep copy floors (one read + one write of the tensor): regular
    // and streaming stores, timed in the same rounds.
    auto copy_fn = [&] {
      chunked([&](int, size_t b, size_t len) {
        smax_bench::read_write_floor(fsrc.data() + b, fdst.data() + b, len);
      });
    };
    auto stream_copy_fn = [&] {
      chunked([&](int, size_t b, size_t len) {
        smax_bench::stream_copy_floor(fsrc.data() + b, fdst.data() + b, len);
      });
    };
    auto floor_fn = [&] {
      std::vector<float> partial(static_cast<size_t>(threads), 0.0f);
      chunked([&](int k, size_t b, size_t len) {
        partial[static_cast<size_t>(k)] = smax_bench::read_floor(fsrc.data() + b, len);
      });
      for (float p : partial) sink += p;  // keeps the sums alive
      if (c.op != "logsumexp") copy_fn();
    };
    // The exp floor: every thread runs logsumexp over its own 4096 floats
    // (16 KB: L1) kExpRepeats times, nothing stored but one float per call.
    constexpr int64_t kExpRow = 4096;
    constexpr int kExpRepeats = 16;
    std::vector<std::vector<float>> exp_rows(static_cast<size_t>(threads));
    std::vector<float> exp_out(static_cast<size_t>(threads) * 16);
    for (int k = 0; k < threads; ++k) {
      exp_rows[static_cast<size_t>(k)].assign(x.begin(), x.begin() + std::min<int64_t>(n, kExpRow));
      exp_rows[static_cast<size_t>(k)].resize(kExpRow, 0.0f);
    }
    auto exp_row = [&](int k) {
      const int64_t row_dims[2] = {1, kExpRow}, out_dims[1] = {1};
      smax::SoftmaxOptions one;
      one.threads = 1;
      const smax::TensorView xv = smax::make_view(exp_rows[static_cast<size_t>(k)].data(),
                                                  smax::DType::kF32, 2, row_dims, nullptr);
      const smax::TensorView yv = smax::make_view(exp_out.data() + 16 * k, smax::DType::kF32,
                                                  1, out_dims, nullptr);
      for (int rep = 0; rep < kExpRepeats; ++rep) smax::logsumexp(xv, yv, one);
    };
    auto exp_fn = [&] {
      if (threads == 1) return exp_row(0);
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int k = 0; k < threads; ++k) exp_row(k);
    };
    const double exp_elements = static_cast<double>(threads) * kExpRepeats * kExpRow;
    const double min_s = quick ? 1e-4 : 2e-3;
    std::vector<int> calls(runners.size(), 0);
    for (size_t k = 0; k < runners.size(); ++k) {
      if (runners[k]) calls[k] = calibrate([&] { runners[k]->run(); }, min_s);
    }
    const int floor_calls = calibrate(floor_fn, min_s);
    const int copy_calls = calibrate(copy_fn, min_s);
    const int stream_copy_calls = calibrate(stream_copy_fn, min_s);
    const int exp_calls = calibrate(exp_fn, min_s);
    std::vector<std::vector<double>> samples(runners.size());
    std::vector<double> floor_samples, copy_samples, stream_copy_samples, exp_samples;
    for (int rep = 0; rep < reps; ++rep) {
      floor_samples.push_back(time_calls(floor_fn, floor_calls));
      copy_samples.push_back(time_calls(copy_fn, copy_calls));
      stream_copy_samples.push_back(time_calls(stream_copy_fn, stream_copy_calls));
      exp_samples.push_back(time_calls(exp_fn, exp_calls));
      for (size_t j = 0; j < runners.size(); ++j) {
        const size_t k = (j + static_cast<size_t>(rep)) % runners.size();  // rotate the order
        if (runners[k]) samples[k].push_back(time_calls([&] { runners[k]->run(); }, calls[k]));
      }
    }
    const double floor_ns = median(floor_samples) * 1e9 / static_cast<double>(n);
    const double copy_ns =
        std::min(median(copy_samples), median(stream_copy_samples)) * 1e9 / static_cast<double>(n);
    const double exp_ns = median(exp_samples) * 1e9 / exp_elements;
    for (size_t k = 0; k < runners.size(); ++k) {
      Record& r = recs[k];
      r.floor_ns = floor_ns;
      r.copy_ns = copy_ns;
      r.exp_ns = exp_ns;
      if (runners[k]) {
        r.samples = static_cast<int>(samples[k].size());
        r.ns_per_elem = median(samples[k]) * 1e9 / static_cast<double>(n);
        r.ns_min = *std::min_element(samples[k].begin(), samples[k].end()) * 1e9 /
                   static_cast<double>(n);
      }
      if (r.lib == "smax" && r.status == "ok" && !(r.max_err <= 2e-6)) failed = true;
      // The case's floor: the copy (memory) or the exp (compute), the larger.
      char of_floor[48] = "";
      if (!std::isnan(r.ns_per_elem)) {
        const bool compute = exp_ns > copy_ns;
        std::snprintf(of_floor, sizeof of_floor, "%.2fx %s floor", r.ns_per_elem / std::max(copy_ns, exp_ns),
                      compute ? "exp" : "copy");
      }
      std::fprintf(stderr, "  %-11s %-16s axis %d %-8s %-11s %8s ns/elem %-17s err %s\n",
                   r.op.c_str(), r.shape.c_str(), r.axis, r.lib.c_str(), r.status.c_str(),
                   num(r.ns_per_elem).c_str(), of_floor, num(r.max_err).c_str());
      records.push_back(r);
    }
    (void)sink;
  }

  std::fprintf(stderr, "smax streaming stores: %s\n", smax::streaming_stores().c_str());

  // Output: JSON (list of records) and CSV.
  std::string json = "{\"harness\": \"smax_peers\", \"smax_version\": \"" +
                     std::string(smax::version()) + "\", \"smax_target\": \"" +
                     std::string(smax::active_target()) + "\", \"floor_target\": \"" +
                     smax_bench::floor_target() + "\", \"threads\": " + std::to_string(threads) +
                     ", \"host\": \"" + host_line() + "\", \"streaming_stores\": \"" +
                     smax::streaming_stores() + "\", \"records\": [\n";
  std::string csv =
      "op,shape,axis,lib,threads,status,ns_per_elem,ns_min,floor_ns,copy_ns,exp_ns,max_err,"
      "elements\n";
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    json += "  {\"op\": \"" + r.op + "\", \"shape\": \"" + r.shape + "\", \"axis\": " +
            std::to_string(r.axis) + ", \"axis_len\": " + std::to_string(r.axis_len) +
            ", \"elements\": " + std::to_string(r.elements) + ", \"lib\": \"" + r.lib +
            "\", \"threads\": " + std::to_string(r.threads) + ", \"status\": \"" + r.status +
            "\", \"ns_per_elem\": " + num(r.ns_per_elem) + ", \"ns_min\": " + num(r.ns_min) +
            ", \"floor_ns\": " + num(r.floor_ns) + ", \"copy_ns\": " + num(r.copy_ns) +
            ", \"exp_ns\": " + num(r.exp_ns) +
            ", \"max_err\": " + num(r.max_err) +
            ", \"samples\": " + std::to_string(r.samples) + ", \"note\": \"" + r.note + "\"}" +
            (i + 1 < records.size() ? ",\n" : "\n");
    csv += r.op + "," + r.shape + "," + std::to_string(r.axis) + "," + r.lib + "," +
           std::to_string(r.threads) + "," + r.status + "," + num(r.ns_per_elem) + "," +
           num(r.ns_min) + "," + num(r.floor_ns) + "," + num(r.copy_ns) + "," + num(r.exp_ns) + "," +
           num(r.max_err) + "," +
           std::to_string(r.elements) + "\n";
  }
  json += "]}\n";
  auto write = [](const std::string& path, const std::string& text) {
    if (path.empty()) return;
    FILE* f = path == "-" ? stdout : std::fopen(path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "smax_peers: cannot write %s\n", path.c_str());
      std::exit(2);
    }
    std::fputs(text.c_str(), f);
    if (f != stdout) std::fclose(f);
  };
  write(json_path, json);
  write(csv_path, csv);
  if (json_path.empty() && csv_path.empty()) std::fputs(csv.c_str(), stdout);
  if (check && failed) {
    std::fprintf(stderr, "smax_peers: smax out of its error bound\n");
    return 1;
  }
  return 0;
}

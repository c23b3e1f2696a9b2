// tools/smax/cmd_compare.cc: `smax compare` - the project's main job.
//
// Softmax over one row of each size, every smax algorithm and auto against
// a naive scalar loop and memcpy (the memory floor of a read + write pass),
// with speed and the max relative error against the float64 reference. The
// reference is computed once per size and shared by every variant.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "args.h"
#include "check.h"
#include "commands.h"
#include "cpu.h"
#include "data.h"
#include "json.h"
#include "progress.h"
#include "reference/reference.h"
#include "smax/smax.h"
#include "timing.h"

namespace smax_cli {
namespace {

constexpr int kBytesPerElement = 8;  // softmax: read 4 + write 4

struct Variant {
  std::string name;    // "naive", "auto", "three-pass-reload", ..., "memcpy"
  bool is_smax = false;
  bool checked = true;  // memcpy is not a softmax
};

struct Row {
  int64_t size = 0;
  std::string algo;
  std::string kernel;
  double ns_per_elem = 0;
  double gbps = 0;
  double speedup = 0;  // naive time / this time
  bool checked = false;
  ErrorStats err;
  int samples = 0;
  int64_t calls_per_sample = 1;
  double spread_pct = 0;  // Timing::spread_pct()
  bool noisy = false;     // spread_pct > kNoisySpreadPct
};

// "3.2%", or "12.5%!" for a noisy measurement.
std::string spread_text(double pct, bool noisy) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%%s", pct, noisy ? "!" : "");
  return buf;
}

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string sci(double v) {
  if (!std::isfinite(v)) return "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

}  // namespace

int cmd_compare(int argc, char** argv, int first) {
  const Args args("smax compare",
                  {{"sizes", true}, {"threads", true}, {"target", true}, {"dist", true},
                   {"seed", true}, {"min-time", true}, {"format", true}, {"help", false}},
                  argc, argv, first);
  const std::vector<int64_t> sizes = parse_sizes(args.get("sizes", "1K..32M"));
  const int threads = parse_threads(args.get("threads", "1"));
  const Dist dist = parse_dist(args.get("dist", "normal"));
  const int64_t seed = parse_int("--seed", args.get("seed", "1"));
  if (seed < 0) throw UsageError("--seed: expected an integer >= 0, got '" + args.get("seed", "") + "'");
  const double min_time = parse_min_time(args.get("min-time", "0.25"));
  const Format format = parse_format(args.get("format", "text"));
  for (int64_t n : sizes) {
    if (n > (int64_t{1} << 30)) {
      throw UsageError("--sizes: " + std::to_string(n) + " is above the limit of 1G elements");
    }
  }
  if (args.has("target")) apply_target(args.get("target", ""));

  const std::vector<Variant> variants = {
      {"naive", false, true},
      {"auto", true, true},
      {"three-pass-reload", true, true},
      {"three-pass-recompute", true, true},
      {"two-pass", true, true},
      {"online", true, true},
      {"memcpy", false, false},
  };
  const std::string target = smax::active_target();
  const bool text = format == Format::kText;
  if (text) {
    std::printf("smax %s compare: softmax over one row, float32\n", smax::version());
    std::printf("cpu %s; target %s; smax threads %d (naive and memcpy: 1); data %s, seed %lld\n",
                cpu_model().c_str(), target.c_str(), threads, format_dist(dist).c_str(),
                static_cast<long long>(seed));
    std::printf("ns/elem: median time / elements; GB/s: %d bytes per element (read + write) / "
                "time;\nx naive: naive loop time / this time; max rel err: vs float64 reference, "
                "bound %g\n\n",
                kBytesPerElement, kRelBound);
    std::printf("%8s  %-21s %9s %7s %8s %8s %12s  %-3s  %s\n", "size", "algo", "ns/elem",
                "spread", "GB/s", "x naive", "max rel err", "ok", "kernel");
    std::fflush(stdout);
  }

  // The text table already shows progress on a terminal: no progress line
  // on top of it there.
  Progress progress(static_cast<int>(sizes.size()), !(text && isatty(1)));
  std::vector<Row> rows;
  for (size_t size_index = 0; size_index < sizes.size(); ++size_index) {
    const int64_t n = sizes[size_index];
    progress.step("softmax over " + format_size(n) + " elements");
    FloatBuffer src(static_cast<size_t>(n));
    FloatBuffer dst(static_cast<size_t>(n));
    fill(src.data(), src.size(), dist, static_cast<uint64_t>(seed));
    const smax::TensorView sv = smax::make_view(src.data(), smax::DType::kF32, 1, &n, nullptr);
    const smax::TensorView dv = smax::make_view(dst.data(), smax::DType::kF32, 1, &n, nullptr);
    const std::vector<double> ref = smax::reference::softmax(sv);

    TimingConfig tc;
    tc.min_time_s = min_time;
    tc.min_samples = n >= (int64_t{1} << 22) ? 3 : 5;

    double naive_s = 0;
    for (const Variant& v : variants) {
      smax::SoftmaxOptions options;
      options.threads = threads;
      std::function<void()> call;
      std::string kernel = "-";
      if (v.name == "naive") {
        call = [&] { naive_softmax(src.data(), dst.data(), n); };
      } else if (v.name == "memcpy") {
        call = [&] { std::memcpy(dst.data(), src.data(), static_cast<size_t>(n) * sizeof(float)); };
      } else {
        options.algorithm = static_cast<smax::Algorithm>(parse_algo(v.name));
        kernel = smax::kernel_name("softmax", v.name, n);
        call = [&, options] { smax::softmax(sv, dv, options); };
      }
      // A variant that forgot to write would show up as NaN errors.
      std::fill(dst.data(), dst.data() + n, std::numeric_limits<float>::quiet_NaN());
      const Timing t = measure(call, tc);
      Row row;
      row.size = n;
      row.algo = v.name;
      row.kernel = kernel;
      row.samples = t.samples;
      row.calls_per_sample = t.calls_per_sample;
      row.spread_pct = t.spread_pct();
      row.noisy = t.noisy();
      row.ns_per_elem = t.median_s * 1e9 / static_cast<double>(n);
      row.gbps = kBytesPerElement * static_cast<double>(n) / t.median_s * 1e-9;
      if (v.name == "naive") naive_s = t.median_s;
      row.speedup = naive_s / t.median_s;
      row.checked = v.checked;
      if (v.checked) row.err = check_forward(Op::kSoftmax, dst.data(), ref);
      rows.push_back(row);
      if (text) {
        std::printf("%8s  %-21s %9s %7s %8s %8s %12s  %-3s  %s\n", format_size(n).c_str(),
                    v.name.c_str(), fixed(row.ns_per_elem, 3).c_str(),
                    spread_text(row.spread_pct, row.noisy).c_str(), fixed(row.gbps, 2).c_str(),
                    fixed(row.speedup, 2).c_str(),
                    v.checked ? sci(row.err.max_rel_err).c_str() : "-",
                    v.checked ? (row.err.within_bounds() ? "yes" : "NO") : "-", kernel.c_str());
        std::fflush(stdout);
      }
    }
    if (text && size_index + 1 < sizes.size()) std::printf("\n");
  }

  progress.finish();
  if (text) {
    std::printf("\nok: yes when every element is within the documented bound (relative error "
                "<= %g for outputs >= %g).\n", kRelBound, kTinyOutput);
    std::printf("spread: (p90 - p10) / median of the per-call time over the samples; '!' marks "
                "a spread above %g%% (noisy: rerun with a larger --min-time or on a quieter "
                "machine).\n", kNoisySpreadPct);
    return kExitOk;
  }
  std::string results = "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    JsonObject o;
    o.integer("size", r.size)
        .str("algo", r.algo)
        .str("kernel", r.kernel)
        .integer("samples", r.samples)
        .integer("calls_per_sample", r.calls_per_sample)
        .num("ns_per_elem", r.ns_per_elem)
        .num("spread_pct", r.spread_pct)
        .boolean("noisy", r.noisy)
        .num("gbps", r.gbps)
        .num("speedup_vs_naive", r.speedup);
    if (r.checked) {
      o.num("max_rel_err", r.err.max_rel_err)
          .num("max_abs_err", r.err.max_abs_err)
          .boolean("within_bounds", r.err.within_bounds());
    } else {
      o.null("max_rel_err").null("max_abs_err").null("within_bounds");
    }
    results += "    " + o.compact() + (i + 1 < rows.size() ? ",\n" : "\n");
  }
  results += "  ]";
  JsonObject out;
  out.str("version", smax::version())
      .str("op", "softmax")
      .str("cpu", cpu_model())
      .str("target", target)
      .integer("threads", threads)
      .str("dist", format_dist(dist))
      .integer("seed", seed)
      .integer("bytes_per_elem", kBytesPerElement)
      .num("noisy_spread_pct", kNoisySpreadPct)
      .raw("results", results);
  std::printf("%s\n", out.pretty().c_str());
  return kExitOk;
}

}  // namespace smax_cli

// tools/smax/cmd_compare.cc: `smax compare` - the project's main job.
//
// Softmax over one row of each size, every smax algorithm and auto against
// a naive scalar loop and memcpy (the memory floor of a read + write pass),
// with speed and the max relative error against the float64 reference. The
// reference is computed once per size and shared by every variant.
// --dtype D stores the row in D (compare_row.h: generation, reference and
// error per dtype); f32, the default, prints exactly what it always did, the
// other dtypes add an ulps column (text) / max_ulps and dtype keys (JSON).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "args.h"
#include "check.h"
#include "commands.h"
#include "compare_row.h"
#include "cpu.h"
#include "data.h"
#include "json.h"
#include "kernels/softmax_f64.h"
#include "progress.h"
#include "smax/smax.h"
#include "timing.h"
#include "typed_call.h"

namespace smax_cli {
namespace {

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
  RowError err;
  std::string rejected;  // the library's message when it refused the call
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

// The error columns of a text row: "max rel err  ok" (f32, as always) or
// "max rel err  ulps  ok" (other dtypes); "-" for a row that is not checked.
std::string error_cells(const std::string& rel, const std::string& ulps, const std::string& ok,
                        bool f32) {
  char buf[96];
  if (f32) {
    std::snprintf(buf, sizeof buf, "%12s  %-3s", rel.c_str(), ok.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%12s %5s  %-3s", rel.c_str(), ulps.c_str(), ok.c_str());
  }
  return buf;
}

std::string error_cells(const Row& r, bool f32) {
  if (!r.checked) return error_cells("-", "-", "-", f32);
  std::string ulps = "-";
  if (r.err.has_ulps) {
    ulps = r.err.max_ulps == RowError::kNoUlps ? "inf" : std::to_string(r.err.max_ulps);
  }
  return error_cells(sci(r.err.err.max_rel_err), ulps, r.err.err.within_bounds() ? "yes" : "NO",
                     f32);
}

// The kernel an algorithm runs for a row of n in `dtype`: f32, f16 and bf16
// run the f32 kernels (narrow rows widened on load, rounded on store); f64
// has one float64 kernel, whatever the algorithm.
std::string kernel_for(smax::DType dtype, const std::string& algo, int64_t n) {
  if (dtype == smax::DType::kF64) return smax::kernels::kernel_name_f64("softmax");
  return smax::kernel_name("softmax", algo, n);
}

}  // namespace

int cmd_compare(int argc, char** argv, int first) {
  const Args args("smax compare",
                  {{"sizes", true}, {"threads", true}, {"target", true}, {"dist", true},
                   {"seed", true}, {"min-time", true}, {"format", true}, {"dtype", true},
                   {"help", false}},
                  argc, argv, first);
  const std::vector<int64_t> sizes = parse_sizes(args.get("sizes", "1K..32M"));
  const int threads = parse_threads(args.get("threads", "1"));
  const Dist dist = parse_dist(args.get("dist", "normal"));
  const int64_t seed = parse_int("--seed", args.get("seed", "1"));
  if (seed < 0) throw UsageError("--seed: expected an integer >= 0, got '" + args.get("seed", "") + "'");
  const double min_time = parse_min_time(args.get("min-time", "0.25"));
  const Format format = parse_format(args.get("format", "text"));
  const smax::DType dtype = parse_float_dtype(args.get("dtype", "f32"));
  const bool f32 = dtype == smax::DType::kF32;
  const int bytes_per_elem = 2 * smax::dtype_size(dtype);  // softmax: read + write one row
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
    std::printf("smax %s compare: softmax over one row, %s\n", smax::version(),
                dtype_long_name(dtype));
    std::printf("cpu %s; target %s; smax threads %d (naive and memcpy: 1); data %s, seed %lld\n",
                cpu_model().c_str(), target.c_str(), threads, format_dist(dist).c_str(),
                static_cast<long long>(seed));
    std::printf("ns/elem: median time / elements; GB/s: %d bytes per element (read + write) / "
                "time;\nx naive: naive loop time / this time; ",
                bytes_per_elem);
    if (f32) {
      std::printf("max rel err: vs float64 reference, bound %g\n\n", kRelBound);
    } else {
      std::printf("max rel err: vs %s reference on the %s inputs;\n"
                  "ulps: max distance in %s values from the reference rounded to %s; ok: the %s "
                  "bound (below)\n\n",
                  dtype == smax::DType::kF64 ? "long double" : "float64", smax::dtype_name(dtype),
                  smax::dtype_name(dtype), smax::dtype_name(dtype), smax::dtype_name(dtype));
    }
    std::printf("%8s  %-21s %9s %7s %8s %8s %s  %s\n", "size", "algo", "ns/elem", "spread",
                "GB/s", "x naive", error_cells("max rel err", "ulps", "ok", f32).c_str(),
                "kernel");
    std::fflush(stdout);
  }

  // The text table already shows progress on a terminal: no progress line
  // on top of it there.
  Progress progress(static_cast<int>(sizes.size()), !(text && isatty(1)));
  std::vector<Row> rows;
  for (size_t size_index = 0; size_index < sizes.size(); ++size_index) {
    const int64_t n = sizes[size_index];
    progress.step("softmax over " + format_size(n) + " elements");
    CompareRow row_data(dtype, n, dist, static_cast<uint64_t>(seed));
    const smax::TensorView sv = row_data.src_view();
    const smax::TensorView dv = row_data.dst_view();

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
        call = [&] { row_data.naive(); };
      } else if (v.name == "memcpy") {
        call = [&] { row_data.copy(); };
      } else {
        options.algorithm = static_cast<smax::Algorithm>(parse_algo(v.name));
        kernel = kernel_for(dtype, v.name, n);
        call = [&, options] { smax::softmax(sv, dv, options); };
      }
      // A variant that forgot to write would show up as NaN errors.
      row_data.poison();
      Row row;
      row.size = n;
      row.algo = v.name;
      row.kernel = kernel;
      Timing t;
      try {
        t = measure(call, tc);
      } catch (const smax::Error& e) {  // the library refuses this dtype / algorithm
        row.rejected = e.what();
        rows.push_back(row);
        if (text) {
          std::printf("%8s  %-21s rejected by smax for %s: %s\n", format_size(n).c_str(),
                      v.name.c_str(), smax::dtype_name(dtype), e.what());
          std::fflush(stdout);
        }
        continue;
      }
      row.samples = t.samples;
      row.calls_per_sample = t.calls_per_sample;
      row.spread_pct = t.spread_pct();
      row.noisy = t.noisy();
      row.ns_per_elem = t.median_s * 1e9 / static_cast<double>(n);
      row.gbps = bytes_per_elem * static_cast<double>(n) / t.median_s * 1e-9;
      if (v.name == "naive") naive_s = t.median_s;
      row.speedup = naive_s / t.median_s;
      row.checked = v.checked;
      if (v.checked) row.err = row_data.check();
      rows.push_back(row);
      if (text) {
        std::printf("%8s  %-21s %9s %7s %8s %8s %s  %s\n", format_size(n).c_str(),
                    v.name.c_str(), fixed(row.ns_per_elem, 3).c_str(),
                    spread_text(row.spread_pct, row.noisy).c_str(), fixed(row.gbps, 2).c_str(),
                    fixed(row.speedup, 2).c_str(), error_cells(row, f32).c_str(), kernel.c_str());
        std::fflush(stdout);
      }
    }
    if (text && size_index + 1 < sizes.size()) std::printf("\n");
  }

  progress.finish();
  if (text) {
    std::printf("\nok: yes when every element is within the documented bound (%s).\n",
                row_bound_text(dtype).c_str());
    if (!f32) {
      std::printf("naive: the float%s loop on %s rows%s.\n",
                  dtype == smax::DType::kF64 ? "64 (double)" : "32",
                  smax::dtype_name(dtype),
                  dtype == smax::DType::kF64
                      ? ""
                      : " (each exp stored rounded to the row's type, then divided: two roundings)");
    }
    std::printf("spread: (p90 - p10) / median of the per-call time over the samples; '!' marks "
                "a spread above %g%% (noisy: rerun with a larger --min-time or on a quieter "
                "machine).\n", kNoisySpreadPct);
    return kExitOk;
  }
  std::string results = "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    JsonObject o;
    o.integer("size", r.size).str("algo", r.algo).str("kernel", r.kernel);
    if (!r.rejected.empty()) {  // the library refused the call: no measurement
      o.str("rejected", r.rejected);
      results += "    " + o.compact() + (i + 1 < rows.size() ? ",\n" : "\n");
      continue;
    }
    o
        .integer("samples", r.samples)
        .integer("calls_per_sample", r.calls_per_sample)
        .num("ns_per_elem", r.ns_per_elem)
        .num("spread_pct", r.spread_pct)
        .boolean("noisy", r.noisy)
        .num("gbps", r.gbps)
        .num("speedup_vs_naive", r.speedup);
    if (r.checked) {
      o.num("max_rel_err", r.err.err.max_rel_err).num("max_abs_err", r.err.err.max_abs_err);
      if (r.err.has_ulps && r.err.max_ulps != RowError::kNoUlps) {
        o.integer("max_ulps", static_cast<int64_t>(r.err.max_ulps));
      } else if (r.err.has_ulps) {
        o.null("max_ulps");
      }
      o.boolean("within_bounds", r.err.err.within_bounds());
    } else {
      o.null("max_rel_err").null("max_abs_err");
      if (!f32) o.null("max_ulps");
      o.null("within_bounds");
    }
    results += "    " + o.compact() + (i + 1 < rows.size() ? ",\n" : "\n");
  }
  results += "  ]";
  JsonObject out;
  out.str("version", smax::version())
      .str("op", "softmax");
  if (!f32) out.str("dtype", smax::dtype_name(dtype));
  out
      .str("cpu", cpu_model())
      .str("target", target)
      .integer("threads", threads)
      .str("dist", format_dist(dist))
      .integer("seed", seed)
      .integer("bytes_per_elem", bytes_per_elem)
      .num("noisy_spread_pct", kNoisySpreadPct)
      .raw("results", results);
  std::printf("%s\n", out.pretty().c_str());
  return kExitOk;
}

}  // namespace smax_cli

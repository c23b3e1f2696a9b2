// tools/smax/cmd_attention.cc: `smax attention`: times smax::attention or
// smax::attention_backward on one problem (contiguous [B, H, L, D] tensors)
// and optionally checks the result against the float64 oracle
// (src/reference/attention.h) with the bounds of include/smax/attention.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "check.h"
#include "core/convert.h"
#include "typed_call.h"
#include "commands.h"
#include "cpu.h"
#include "data.h"
#include "json.h"
#include "progress.h"
#include "reference/attention.h"
#include "smax/attention.h"
#include "smax/smax.h"
#include "timing.h"

namespace smax_cli {
namespace {

namespace ref = smax::reference;

// A contiguous tensor of `shape` with its view: f32 `data`, or (--dtype)
// `bytes` in another storage dtype holding `data` rounded to it.
struct Buf {
  std::vector<int64_t> shape;
  std::vector<float> data;
  smax::DType dtype = smax::DType::kF32;
  std::vector<unsigned char> bytes;
  explicit Buf(std::vector<int64_t> s) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.assign(static_cast<size_t>(n), 0.0f);
  }
  // Switches to `dt`: data rounds to it in place (the values the typed
  // views hold, so the reference sees them too).
  void retype(smax::DType dt) {
    dtype = dt;
    if (dt == smax::DType::kF32) return;
    const size_t size = static_cast<size_t>(smax::dtype_size(dt));
    bytes.assign(std::max<size_t>(data.size(), 1) * size, 0);
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = smax::detail::round_to(dt, data[i]);
      smax::detail::store_f32(bytes.data() + i * size, dt, data[i]);
    }
  }
  // data = the typed output, widened (exact for f16 / bf16, and for f64
  // holding f32 results).
  void sync_from_typed() {
    if (dtype == smax::DType::kF32) return;
    const size_t size = static_cast<size_t>(smax::dtype_size(dtype));
    for (size_t i = 0; i < data.size(); ++i) data[i] = smax::detail::load_f32(bytes.data() + i * size, dtype);
  }
  // The f32 values (the rounded inputs / widened outputs), for the reference.
  smax::TensorView f32_view() {
    return smax::make_view(static_cast<void*>(data.data()), smax::DType::kF32,
                           static_cast<int>(shape.size()), shape.data(), nullptr);
  }
  smax::TensorView view() {
    void* p = dtype == smax::DType::kF32 ? static_cast<void*>(data.data())
                                         : static_cast<void*>(bytes.data());
    return smax::make_view(p, dtype, static_cast<int>(shape.size()), shape.data(), nullptr);
  }
};

struct CheckStats {
  double max_abs = 0, worst_ratio = 0, worst_got = 0, worst_ref = 0;
  int64_t violations = 0, worst = -1;
  std::string worst_what;
  smax::DType out_dtype = smax::DType::kF32;  // narrow outputs add half an ulp
  void add(const char* what, int64_t i, double got, double want, double bound) {
    bound += smax_cli::half_ulp(out_dtype, std::max(std::abs(got), std::abs(want)));
    double ratio = 0;
    if (std::isnan(want) || std::isnan(got)) {
      ratio = std::isnan(want) == std::isnan(got) ? 0 : INFINITY;
    } else if (std::isinf(want) || std::isinf(got)) {
      ratio = want == got ? 0 : INFINITY;
    } else {
      const double err = std::abs(got - want);
      max_abs = std::max(max_abs, err);
      ratio = err / bound;
    }
    if (ratio > 1) ++violations;
    if (ratio > worst_ratio || worst < 0) {
      worst_ratio = ratio;
      worst = i;
      worst_got = got;
      worst_ref = want;
      worst_what = what;
    }
  }
};

// Forward: |out_ic - ref_ic| <= E_i W_ic + 1e-30 (src/reference/attention.h,
// "error bounds").
void check_forward(const ref::AttentionProblem& p, const ref::AttentionResult& r,
                   const std::vector<float>& out, CheckStats& st) {
  const std::vector<double> bound = ref::attention_forward_bounds(p, r);
  for (size_t i = 0; i < bound.size(); ++i) {
    st.add("out", static_cast<int64_t>(i), out[i], r.out[i], bound[i]);
  }
}

// Visible (query, key) pairs of one sequence with `keys` keys whose query i
// sits at position offset + i (0 without a KV cache; keys - Lq with one).
int64_t visible_pairs(int64_t Lq, int64_t keys, int64_t offset, bool causal) {
  if (!causal) return Lq * keys;
  int64_t n = 0;
  for (int64_t i = 0; i < Lq; ++i) n += std::clamp<int64_t>(offset + i + 1, 0, keys);
  return n;
}

}  // namespace

const char* const kAttentionHelp = R"(usage: smax attention [OPTIONS]

Times smax::attention (or its backward) on contiguous q [B, H, Lq, D],
k, v [B, Hkv, Lk, D / Dv] and prints the median time per call and GFLOP/s
(forward 2 H P (D + Dv), backward 2 H P (3 D + 2 Dv), P = visible
(query, key) pairs summed over the batch: Lq Lk, or the causal triangle;
with --seqlens each sequence's keys and bottom-right positions).

  --shape S        B,H,Lq,Lk,D[,Dv] (default 1,8,1024,1024,64; Dv = D)
  --kv-heads N     k / v heads Hkv, a divisor of H (default H; < H is GQA)
  --normalizer N   softmax (default), sigmoid, softpick, ssmax, stablemax, softplus, power
  --causal         mask j > i (top-left aligned)
  --sigmoid-bias-mode M
                   sigmoid's default bias b = -ln n: per_sequence (default, n = Lk,
                   one b per call) or per_row_visible (n = each row's visible keys)
  --softcap X      t = X tanh(t / X), X > 0 (default 0 = off)
  --scale X        multiplies <q, k> (default 1/sqrt(D))
  --backward       time attention_backward (dq, dk, dv from dout ~ N(0,1))
  --lse            (softmax) give the forward's lse to the backward: P = e^(t - lse)
                   and delta = <dout, out> in key-block tiles (FlashAttention-2's
                   backward; f32 only, else the full-row backward runs)
  --threads N      threads, 1..4096 (default: smax::max_threads())
  --target T       cap the SIMD target: avx3, avx2, sse4, ssse3, scalar
  --dist D         q, k, v entries: normal (default), normal:MEAN,STD, uniform:LO,HI
                   (--data is the same option)
  --seed N         data seed (default 1)
  --dtype T        storage dtype of q, k, v, out and the gradients: f32 (default),
                   f64, f16, bf16 (inputs are rounded to it; --check adds half an
                   ulp of T to the bound: docs/dtypes.md)
  --reps N         take exactly N timed samples (--repeat is the same option)
  --min-time SEC   otherwise sample for at least SEC seconds (default 0.5)
  --check          compare with the float64 reference (src/reference/attention.h):
                   max abs error and worst error / bound, with the bounds of
                   include/smax/attention.h (exit status 1 when out of bounds)
  --seqlens N[,N..] KV cache: cache_seqlens, the keys each sequence holds (one value
                   for every sequence, or B values), <= Lk (Lk is the cache's
                   capacity); the Lq queries are the last tokens (bottom-right causal)
  --page-size P    paged KV cache: k, v are pools of pages [B Lk / P, Hkv, P, D] with
                   a shuffled block table [B, Lk / P] (P divides Lk)
  --unified-max X  (decode driver) FlashDecoding++'s unified max phi = X (default off)
  --ssmax-s S      --normalizer ssmax: s (default 0.43)
  --power-p P      --normalizer power: the even power p (default 2)
  --floor          also measure this core's peak FMA rate and print the compute
                   floor (the FLOPs at that rate x threads) and the fraction of peak;
                   forward: also the read bandwidth (from memory, --threads
                   threads each sweeping a share) and the memory floor: the time
                   to read q, the visible K and V rows and write out once, and
                   time / floor
  --format F       text (default) or json
)";

int cmd_attention(int argc, char** argv, int first) {
  const Args args("smax attention",
                  {{"shape", true}, {"kv-heads", true}, {"normalizer", true}, {"causal", false},
                   {"softcap", true}, {"scale", true}, {"backward", false}, {"lse", false}, {"threads", true},
                   {"target", true}, {"dist", true}, {"data", true}, {"seed", true},
                   {"reps", true}, {"repeat", true}, {"min-time", true}, {"check", false},
                   {"format", true}, {"sigmoid-bias-mode", true}, {"dtype", true},
                   {"seqlens", true}, {"page-size", true}, {"floor", false},
                   {"unified-max", true}, {"ssmax-s", true}, {"power-p", true},
                   {"help", false}},
                  argc, argv, first);
  const std::vector<int64_t> shape = parse_shape(args.get("shape", "1,8,1024,1024,64"));
  if (shape.size() != 5 && shape.size() != 6) {
    throw UsageError("--shape: expected B,H,Lq,Lk,D[,Dv], got '" + args.get("shape", "") + "'");
  }
  const int64_t B = shape[0], H = shape[1], Lq = shape[2], Lk = shape[3], D = shape[4];
  const int64_t Dv = shape.size() == 6 ? shape[5] : D;
  const int64_t Hkv = args.has("kv-heads") ? parse_int("--kv-heads", args.get("kv-heads", "")) : H;
  if (Hkv < 1 || H % Hkv != 0) {
    throw UsageError("--kv-heads: expected a divisor of H = " + std::to_string(H) + ", got " +
                     std::to_string(Hkv));
  }
  smax::AttentionOptions o;
  try {
    o.normalizer = smax::parse_attention_normalizer(args.get("normalizer", "softmax"));
  } catch (const smax::Error& e) {
    throw UsageError(std::string("--normalizer: ") + e.what());
  }
  if (args.has("sigmoid-bias-mode")) {
    const std::string mode = args.get("sigmoid-bias-mode", "");
    if (o.normalizer != smax::AttentionNormalizer::kSigmoid) {
      throw UsageError("--sigmoid-bias-mode applies only to --normalizer sigmoid");
    }
    if (mode == "per_sequence") {
      o.sigmoid_bias_mode = smax::SigmoidBiasMode::kPerSequence;
    } else if (mode == "per_row_visible") {
      o.sigmoid_bias_mode = smax::SigmoidBiasMode::kPerRowVisible;
    } else {
      throw UsageError("--sigmoid-bias-mode: expected per_sequence or per_row_visible, got '" +
                       mode + "'");
    }
  }
  if (args.has("ssmax-s")) {
    if (o.normalizer != smax::AttentionNormalizer::kSsmax) {
      throw UsageError("--ssmax-s applies only to --normalizer ssmax");
    }
    const double sv = parse_double("--ssmax-s", args.get("ssmax-s", ""));
    if (!std::isfinite(static_cast<float>(sv))) {
      throw UsageError("--ssmax-s: expected a finite number, got '" + args.get("ssmax-s", "") +
                       "'");
    }
    o.ssmax_s = static_cast<float>(sv);
  }
  if (args.has("power-p")) {
    if (o.normalizer != smax::AttentionNormalizer::kPower) {
      throw UsageError("--power-p applies only to --normalizer power");
    }
    const int64_t pv = parse_int("--power-p", args.get("power-p", ""));
    if (pv < 2 || pv % 2 != 0 || pv > 64) {
      throw UsageError("--power-p: expected an even integer in [2, 64], got '" +
                       args.get("power-p", "") + "'");
    }
    o.power_p = static_cast<int>(pv);
  }
  o.is_causal = args.has("causal");
  if (args.has("softcap")) {
    const double c = parse_double("--softcap", args.get("softcap", ""));
    if (!(c >= 0) || !std::isfinite(static_cast<float>(c))) {
      throw UsageError("--softcap: expected a finite number >= 0, got '" +
                       args.get("softcap", "") + "'");
    }
    o.softcap = static_cast<float>(c);
  }
  if (args.has("scale")) {
    const double s = parse_double("--scale", args.get("scale", ""));
    if (!std::isfinite(static_cast<float>(s))) {
      throw UsageError("--scale: expected a finite number, got '" + args.get("scale", "") + "'");
    }
    o.scale = static_cast<float>(s);
  }
  if (args.has("unified-max")) {
    const double phi = parse_double("--unified-max", args.get("unified-max", ""));
    if (!std::isfinite(static_cast<float>(phi))) {
      throw UsageError("--unified-max: expected a finite number, got '" +
                       args.get("unified-max", "") + "'");
    }
    o.unified_max = static_cast<float>(phi);
  }
  const bool backward = args.has("backward");
  const int threads =
      args.has("threads") ? parse_threads(args.get("threads", "")) : smax::max_threads();
  o.threads = threads;
  if (args.has("dist") && args.has("data")) {
    throw UsageError("--dist and --data are the same option; give one");
  }
  const Dist dist = parse_dist(args.has("data") ? args.get("data", "") : args.get("dist", "normal"));
  const uint64_t seed = parse_seed(args.get("seed", "1"));
  if (args.has("reps") && args.has("repeat")) {
    throw UsageError("--reps and --repeat are the same option; give one");
  }
  TimingConfig timing;
  if (args.has("reps") || args.has("repeat")) {
    const std::string text = args.has("reps") ? args.get("reps", "") : args.get("repeat", "");
    timing.repeat = parse_repeat("--reps", text);
  }
  if (args.has("min-time")) timing.min_time_s = parse_min_time(args.get("min-time", ""));
  const bool check = args.has("check");
  const Format format = parse_format(args.get("format", "text"));
  const smax::DType dtype = parse_float_dtype(args.get("dtype", "f32"));
  if (args.has("target")) apply_target(args.get("target", ""));

  // KV cache forms.
  std::vector<int32_t> seqlens;
  if (args.has("seqlens")) {
    std::vector<int64_t> lens;  // comma-separated integers (0 allowed, unlike --shape)
    {
      const std::string text = args.get("seqlens", "");
      size_t at = 0;
      while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        lens.push_back(parse_int("--seqlens", text.substr(at, comma - at)));
        at = comma + 1;
      }
    }
    if (lens.size() != 1 && static_cast<int64_t>(lens.size()) != B) {
      throw UsageError("--seqlens: expected one length or B = " + std::to_string(B) + " lengths");
    }
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = lens[lens.size() == 1 ? 0 : static_cast<size_t>(b)];
      if (n < 0 || n > Lk) {
        throw UsageError("--seqlens: each length must be in [0, Lk = " + std::to_string(Lk) +
                         "], got " + std::to_string(n));
      }
      seqlens.push_back(static_cast<int32_t>(n));
    }
  }
  const int64_t page = args.has("page-size") ? parse_int("--page-size", args.get("page-size", "")) : 0;
  if (args.has("page-size") && (page < 1 || Lk % page != 0)) {
    throw UsageError("--page-size: expected a divisor of Lk = " + std::to_string(Lk) + ", got " +
                     args.get("page-size", ""));
  }
  if ((page > 0 || !seqlens.empty()) && backward) {
    throw UsageError("--seqlens / --page-size (the KV cache forms) are forward-only");
  }
  const int64_t slots = page > 0 ? Lk / page : 0;
  std::vector<int32_t> table;
  if (page > 0) {  // a shuffled page of the pool for each (sequence, slot)
    table.resize(static_cast<size_t>(B * slots));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = table.size(); i > 1; --i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::swap(table[i - 1], table[static_cast<size_t>(x % i)]);
    }
  }
  const int64_t seqlen_shape[1] = {B}, table_shape[2] = {B, slots};
  if (!seqlens.empty()) {
    o.cache_seqlens = smax::make_view(seqlens.data(), smax::DType::kI32, 1, seqlen_shape, nullptr);
  }
  if (page > 0) {
    o.block_table = smax::make_view(table.data(), smax::DType::kI32, 2, table_shape, nullptr);
  }
  const std::vector<int64_t> kshape = page > 0 ? std::vector<int64_t>{B * slots, Hkv, page, D}
                                               : std::vector<int64_t>{B, Hkv, Lk, D};
  std::vector<int64_t> vshape = kshape;
  vshape[3] = Dv;

  Buf q({B, H, Lq, D}), k(kshape), v(vshape), out({B, H, Lq, Dv});
  const uint64_t s0 = seed * 4;
  fill(q.data.data(), q.data.size(), dist, s0);
  fill(k.data.data(), k.data.size(), dist, s0 + 1);
  fill(v.data.data(), v.data.size(), dist, s0 + 2);
  Buf dout({B, H, Lq, Dv}), dq({B, H, Lq, D}), dk(backward ? kshape : std::vector<int64_t>{0}),
      dv(backward ? vshape : std::vector<int64_t>{0});
  if (backward) fill(dout.data.data(), dout.data.size(), Dist{}, s0 + 3);
  for (Buf* b : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) b->retype(dtype);
  const bool with_lse = args.has("lse");
  if (with_lse && (!backward || o.normalizer != smax::AttentionNormalizer::kSoftmax)) {
    throw UsageError("--lse: the backward of the softmax normalizer only (with --backward)");
  }
  std::vector<float> lse(with_lse ? static_cast<size_t>(B * H * Lq) : 0);
  const int64_t lse_shape[3] = {B, H, Lq};
  if (with_lse) {
    o.lse = smax::make_view(lse.data(), smax::DType::kF32, 3, lse_shape, nullptr);
    o.backward_from_lse = true;
  }
  smax::attention(q.view(), k.view(), v.view(), out.view(), o);  // validates; out for backward
  out.sync_from_typed();

  Progress progress(check ? (backward ? 4 : 3) : 1);
  progress.step(backward ? "timing attention_backward" : "timing attention");
  const Timing t = backward ? measure([&] {
    smax::attention_backward(q.view(), k.view(), v.view(), out.view(), dout.view(), dq.view(),
                             dk.view(), dv.view(), o);
  }, timing)
                            : measure([&] {
                                smax::attention(q.view(), k.view(), v.view(), out.view(), o);
                              }, timing);
  double pairs = 0, kv_rows = 0;  // per head; kv_rows: key rows read (per kv head)
  for (int64_t b = 0; b < B; ++b) {
    const int64_t keys = seqlens.empty() ? Lk : seqlens[static_cast<size_t>(b)];
    const int64_t offset = seqlens.empty() ? 0 : keys - Lq;
    pairs += static_cast<double>(visible_pairs(Lq, keys, offset, o.is_causal));
    kv_rows += static_cast<double>(
        o.is_causal ? std::clamp<int64_t>(offset + Lq, 0, keys) : keys);
  }
  const double flops = 2.0 * static_cast<double>(H) * pairs *
                       static_cast<double>(backward ? 3 * D + 2 * Dv : D + Dv);
  const double gflops = t.median_s > 0 ? flops / t.median_s * 1e-9 : 0.0;
  // The memory floor (--floor): q read, the visible K / V rows read once,
  // out written, at the read bandwidth measured now.
  double floor_bytes = 0, read_gbs = 0, floor_s = 0;
  if (args.has("floor") && !backward) {
    const double es = static_cast<double>(smax::dtype_size(dtype));
    floor_bytes = es * (static_cast<double>(B * H * Lq * (D + Dv)) +
                        kv_rows * static_cast<double>(Hkv * (D + Dv)));
    read_gbs = read_bandwidth_gbs(static_cast<int64_t>(floor_bytes), threads);
    floor_s = read_gbs > 0 ? floor_bytes / (read_gbs * 1e9) : 0;
  }
  // The compute floor (--floor): the FLOPs at this core's measured FMA peak
  // times the thread count.
  double peak_gflops = 0, compute_floor_s = 0;
  if (args.has("floor")) {
    peak_gflops = fma_peak_gflops() * threads;
    compute_floor_s = peak_gflops > 0 ? flops / (peak_gflops * 1e9) : 0;
  }

  for (Buf* b : {&out, &dq, &dk, &dv}) b->sync_from_typed();
  CheckStats st;
  st.out_dtype = dtype;
  double rel = 0;
  if (check) {
    progress.step("float64 reference (forward)");
    const auto p = ref::attention_problem(q.f32_view(), k.f32_view(), v.f32_view(), o);
    const auto r = ref::attention_forward(p);
    if (!backward) {
      progress.step("checking the output against the reference");
      check_forward(p, r, out.data, st);
    } else {
      progress.step("float64 reference (backward)");
      std::vector<double> g(dout.data.begin(), dout.data.end());
      const auto want = ref::attention_backward(p, g);
      progress.step("checking dq, dk, dv against the reference");
      rel = ref::attention_backward_rel(p, r, with_lse ? ref::attention_backward_lse_extra(p) : 0);
      auto grad = [&](const char* what, const std::vector<float>& got,
                      const std::vector<double>& w, const std::vector<double>& mag) {
        for (size_t i = 0; i < w.size(); ++i) {
          st.add(what, static_cast<int64_t>(i), got[i], w[i], rel * mag[i] + 1e-30);
        }
      };
      grad("dq", dq.data, want.dq, want.dq_mag);
      grad("dk", dk.data, want.dk, want.dk_mag);
      grad("dv", dv.data, want.dv, want.dv_mag);
    }
  }
  progress.finish();
  const std::string bound =
      backward ? "|d - ref| <= (base + 2 (Lq + Lk + D + Dv) u + 4 max Delta) * mag + 1e-30"
               : "|out - ref| <= (sens Delta_i + e_norm + (L_acc + 16) u) * W_ic + 1e-30";
  const char* norm = smax::attention_normalizer_name(o.normalizer);
  if (format == Format::kJson) {
    JsonObject j;
    j.str("op", backward ? "attention_backward" : "attention")
        .raw("shape", json_int_array({B, H, Lq, Lk, D, Dv}))
        .integer("kv_heads", Hkv)
        .str("normalizer", norm)
        .str("sigmoid_bias_mode", o.sigmoid_bias_mode == smax::SigmoidBiasMode::kPerSequence
                                      ? "per_sequence"
                                      : "per_row_visible")
        .boolean("causal", o.is_causal)
        .num("softcap", o.softcap)
        .str("target", smax::active_target())
        .integer("threads", threads)
        .str("dtype", smax::dtype_name(dtype))
        .str("dist", format_dist(dist));
    if (!seqlens.empty()) {
      j.raw("seqlens", json_int_array(std::vector<int64_t>(seqlens.begin(), seqlens.end())));
    }
    if (page > 0) j.integer("page_size", page);
    if (!std::isnan(o.unified_max)) j.num("unified_max", o.unified_max);
    json_timing(j, t)
        .num("gflop_per_call", flops * 1e-9)
        .num("gflops", gflops);
    if (floor_s > 0) {
      j.num("floor_bytes", floor_bytes)
          .num("read_gbs", read_gbs)
          .num("floor_ms", floor_s * 1e3)
          .num("time_over_floor", t.median_s / floor_s);
    }
    if (compute_floor_s > 0) {
      j.num("fma_peak_gflops", peak_gflops)
          .num("compute_floor_ms", compute_floor_s * 1e3)
          .num("fraction_of_peak", compute_floor_s / t.median_s);
    }
    if (check) {
      j.num("max_abs_err", st.max_abs)
          .num("worst_err_over_bound", st.worst_ratio)
          .integer("violations", st.violations)
          .boolean("within_bounds", st.violations == 0);
    } else {
      j.null("max_abs_err").null("worst_err_over_bound").null("violations").null("within_bounds");
    }
    j.str("bound", bound).str("version", smax::version());
    std::printf("%s\n", j.pretty().c_str());
  } else {
    std::printf("op         %s (%s%s%s), B=%lld H=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld Dv=%lld\n",
                backward ? "attention_backward" : "attention", norm,
                o.is_causal ? ", causal" : "", o.softcap > 0 ? ", softcap" : "",
                static_cast<long long>(B), static_cast<long long>(H),
                static_cast<long long>(Hkv), static_cast<long long>(Lq),
                static_cast<long long>(Lk), static_cast<long long>(D),
                static_cast<long long>(Dv));
    std::printf("target     %s, threads %d, dtype %s\n", smax::active_target().c_str(), threads,
                smax::dtype_name(dtype));
    std::printf("time       %s\n", format_timing(t).c_str());
    std::printf("speed      %.4g GFLOP/s (%.4g GFLOP per call)\n", gflops, flops * 1e-9);
    if (!seqlens.empty() || page > 0) {
      std::printf("kv cache   %s%s\n",
                  seqlens.empty() ? "every sequence holds Lk keys"
                                  : ("seqlens " + args.get("seqlens", "")).c_str(),
                  page > 0 ? (", pages of " + std::to_string(page) + " keys").c_str() : "");
    }
    if (floor_s > 0) {
      std::printf("floor      %.4g MB read once at %.3g GB/s (%d thread(s), measured now): "
                  "%.4g ms; time / floor %.2f\n",
                  floor_bytes * 1e-6, read_gbs, threads, floor_s * 1e3, t.median_s / floor_s);
    }
    if (compute_floor_s > 0) {
      std::printf("compute    FMA peak %.4g GFLOP/s (%d thread(s) x one core's, measured now): "
                  "floor %.4g ms; %.0f%% of peak\n",
                  peak_gflops, threads, compute_floor_s * 1e3, 100.0 * compute_floor_s / t.median_s);
    }
    if (check) {
      std::printf("check      max abs err %.3g, worst err/bound %.3g: %s\n", st.max_abs,
                  st.worst_ratio, st.violations == 0 ? "within bounds" : "OUT OF BOUNDS");
      std::printf("bound      %s\n", bound.c_str());
      if (st.violations) {
        std::printf("worst      %s element %lld: got %.9g, reference %.17g (%.3g x the bound), "
                    "%lld elements out of bounds\n",
                    st.worst_what.c_str(), static_cast<long long>(st.worst), st.worst_got,
                    st.worst_ref, st.worst_ratio, static_cast<long long>(st.violations));
      }
    }
  }
  return check && st.violations ? kExitCheckFailed : kExitOk;
}

}  // namespace smax_cli

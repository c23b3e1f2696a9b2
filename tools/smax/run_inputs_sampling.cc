// tools/smax/run_inputs_sampling.cc: `smax run --op` for the samplers whose
// inputs or outputs are not one logits tensor in and one out
// (include/smax/sampling.h, include/smax/detection.h):
//
//   gumbel_noise             --shape S: the noise g(seed, row, i) of a tensor
//                            of shape S (rows along the last axis), no input;
//                            --check: the float64 noise of
//                            src/reference/sampling.h, rounded once to f32
//                            (bound: half an f32 ulp, 2^-24 |g|)
//   gumbel_softmax_backward  --shape S (rows along the last axis): y = softmax(x)
//                            (a soft sample), dy ~ N(0, 1), tau = 1; --check:
//                            softmax_backward's bound (include/smax/sampling.h)
//   sampling_filter          --shape S: logits x, temperature 1, top_k 50,
//                            top_p 0.9, seed --seed; --check: the kept set
//                            equal to the oracle's (rows whose top-p cut lies
//                            within 2e-6 of the boundary skipped, as the
//                            header allows either answer) and kept values
//                            within half an f32 ulp
//   soft_nms                 --shape N: N boxes (x1, y1 uniform in [0, 100),
//                            width, height uniform in [1, 50)), scores
//                            uniform in (0, 1), linear decay, Nt 0.3,
//                            score threshold 0.001; --check: the kept indices
//                            equal the oracle's in order, their scores within
//                            half an f32 ulp (include/smax/detection.h)
#include <cmath>
#include <limits>
#include <string>

#include "args.h"
#include "progress.h"
#include "op_table.h"
#include "reference/sampling.h"
#include "run_inputs.h"
#include "smax/detection.h"
#include "smax/sampling.h"

namespace smax_cli {
namespace {

constexpr double kHalfUlp = 1.0 / 16777216.0;  // 2^-24: f32 rounding, relative

smax::TensorView f32(float* p, const std::vector<int64_t>& shape) {
  return smax::make_view(p, smax::DType::kF32, static_cast<int>(shape.size()), shape.data(), nullptr);
}

// got vs ref within half an f32 ulp of ref (2^-24 |ref|, widened by 2^-40
// relative for a float64 evaluation that differs from the oracle's in its
// last bits); equal infinities agree.
void record_rounded(ErrorStats& st, int64_t i, double got, double ref) {
  const bool same_inf = std::isinf(got) && std::isinf(ref) && (got > 0) == (ref > 0);
  const double err = same_inf ? 0.0 : std::fabs(got - ref);
  record_error(st, i, got, ref, err, kHalfUlp * (1.0 + 0x1p-40) * std::fabs(ref) + 1e-45, kTinyOutput);
}

std::string shape_text(const std::vector<int64_t>& s) { return "[" + format_shape(s) + "]"; }

InputsResult run_gumbel_noise(const InputsConfig& c) {
  InputsResult r;
  const int64_t count = product(c.shape);
  std::vector<float> out(static_cast<size_t>(count));
  const smax::TensorView ov = f32(out.data(), c.shape);
  r.inputs = "noise " + shape_text(c.shape) + ", rows along the last axis, seed " + std::to_string(c.seed);
  r.elements = count;
  r.per = "element";
  r.bound = "the float64 noise rounded once to f32: 2^-24 |g| (include/smax/sampling.h)";
  Progress progress(c.check ? 3 : 1);
  progress.step("timing gumbel_noise");
  r.timing = measure([&] { smax::gumbel_noise(ov, c.seed, -1); }, c.timing);
  if (c.check) {
    progress.step("float64 reference");
    const std::vector<double> ref = smax::reference::gumbel_noise(c.shape, -1, c.seed);
    progress.step("checking against the reference");
    for (int64_t i = 0; i < count; ++i) record_rounded(r.st, i, out[static_cast<size_t>(i)], ref[static_cast<size_t>(i)]);
  }
  progress.finish();
  return r;
}

InputsResult run_gumbel_softmax_backward(const InputsConfig& c) {
  InputsResult r;
  const int64_t count = product(c.shape);
  std::vector<float> x(static_cast<size_t>(count)), y(x.size()), dy(x.size()), dx(x.size());
  fill(x.data(), x.size(), c.dist, c.seed);
  fill(dy.data(), dy.size(), Dist{}, c.seed + 0x5eed);
  smax::SoftmaxOptions options;
  options.threads = c.threads;
  const smax::TensorView xv = f32(x.data(), c.shape), yv = f32(y.data(), c.shape),
                         dyv = f32(dy.data(), c.shape), dxv = f32(dx.data(), c.shape);
  smax::softmax(xv, yv, options);
  r.inputs = "y_soft = softmax(x) " + shape_text(c.shape) + ", dy ~ N(0, 1), tau 1, rows along the last axis";
  r.elements = count;
  r.per = "element";
  r.bound = "softmax_backward's bound (include/smax/sampling.h, include/smax/softmax.h)";
  Progress progress(c.check ? 3 : 1);
  progress.step("timing gumbel_softmax_backward");
  r.timing = measure([&] { smax::gumbel_softmax_backward(yv, dyv, dxv, 1.0f, options); }, c.timing);
  if (c.check) {
    progress.step("float64 reference");
    const std::vector<double> ref = smax::reference::gumbel_softmax_backward(yv, dyv, 1.0f, options);
    progress.step("checking against the reference");
    r.st = check_backward(Op::kSoftmaxBackward, dx.data(), ref, y.data(), dy.data(),
                          make_geometry(c.shape, -1), 1.0);
  }
  progress.finish();
  return r;
}

InputsResult run_sampling_filter(const InputsConfig& c) {
  InputsResult r;
  const int64_t count = product(c.shape);
  std::vector<float> x(static_cast<size_t>(count)), out(x.size());
  fill(x.data(), x.size(), c.dist, c.seed);
  smax::SoftmaxOptions options;
  options.threads = c.threads;
  smax::SampleOptions sample;
  sample.top_k = 50;
  sample.top_p = 0.9f;
  sample.seed = c.seed;
  const smax::TensorView xv = f32(x.data(), c.shape), ov = f32(out.data(), c.shape);
  r.inputs = "logits " + shape_text(c.shape) + ", rows along the last axis, temperature 1, top_k 50, top_p 0.9";
  r.elements = count;
  r.per = "element";
  r.bound = "the oracle's kept set exactly, kept values within 2^-24 |z| (include/smax/sampling.h)";
  Progress progress(c.check ? 3 : 1);
  progress.step("timing sampling_filter");
  r.timing = measure([&] { smax::sampling_filter(xv, ov, sample, options); }, c.timing);
  if (c.check) {
    progress.step("float64 reference");
    const smax::reference::FilterRef ref = smax::reference::sampling_filter(xv, sample, options);
    progress.step("checking against the reference");
    const int64_t n = c.shape.back(), rows = count / n;
    for (int64_t row = 0; row < rows; ++row) {
      if (ref.fragile[static_cast<size_t>(row)]) continue;  // either cut is allowed
      for (int64_t i = row * n; i < (row + 1) * n; ++i) {
        record_rounded(r.st, i, out[static_cast<size_t>(i)], ref.values[static_cast<size_t>(i)]);
      }
    }
  }
  progress.finish();
  return r;
}

InputsResult run_soft_nms(const InputsConfig& c) {
  if (c.shape.size() != 1) {
    throw UsageError("--shape: op soft_nms takes N (the number of boxes), got " + format_shape(c.shape));
  }
  const int64_t N = c.shape[0];
  std::vector<float> boxes(static_cast<size_t>(N * 4)), scores(static_cast<size_t>(N));
  uint64_t state = c.seed * 0x9E3779B97F4A7C15ull + 11;
  auto uniform = [&state] {  // in [0, 1), 24 bits: exact in f32
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(state >> 40) / 16777216.0f;
  };
  for (int64_t b = 0; b < N; ++b) {
    const float x1 = 100.0f * uniform(), y1 = 100.0f * uniform();
    boxes[static_cast<size_t>(4 * b)] = x1;
    boxes[static_cast<size_t>(4 * b + 1)] = y1;
    boxes[static_cast<size_t>(4 * b + 2)] = x1 + 1.0f + 49.0f * uniform();
    boxes[static_cast<size_t>(4 * b + 3)] = y1 + 1.0f + 49.0f * uniform();
    scores[static_cast<size_t>(b)] = 1e-3f + (1.0f - 1e-3f) * uniform();
  }
  const std::vector<int64_t> bs{N, 4}, ss{N};
  const smax::TensorView bv = f32(boxes.data(), bs), sv = f32(scores.data(), ss);
  InputsResult r;
  r.inputs = "boxes [" + std::to_string(N) + ", 4], scores [" + std::to_string(N) +
             "], linear decay, iou_threshold 0.3, score_threshold 0.001";
  r.elements = N;
  r.per = "box";
  r.bound = "kept indices equal the oracle's in order; scores within 2^-24 |score| (include/smax/detection.h)";
  Progress progress(c.check ? 3 : 1);
  progress.step("timing soft_nms");
  smax::SoftNmsResult got;
  r.timing = measure([&] { got = smax::soft_nms(bv, sv); }, c.timing);
  if (c.check) {
    progress.step("float64 reference");
    const smax::SoftNmsResult ref = smax::reference::soft_nms(bv, sv);
    progress.step("checking against the reference");
    const size_t m = std::max(got.indices.size(), ref.indices.size());
    for (size_t i = 0; i < m; ++i) {
      const double gi = i < got.indices.size() ? static_cast<double>(got.indices[i]) : -1.0;
      const double ri = i < ref.indices.size() ? static_cast<double>(ref.indices[i]) : -1.0;
      record_error(r.st, static_cast<int64_t>(i), gi, ri, std::fabs(gi - ri), 0.0, kTinyOutput);
      const double gs = i < got.scores.size() ? got.scores[i] : std::numeric_limits<double>::quiet_NaN();
      const double rs = i < ref.scores.size() ? ref.scores[i] : std::numeric_limits<double>::quiet_NaN();
      record_rounded(r.st, static_cast<int64_t>(1000000 + i), gs, rs);
    }
  }
  progress.finish();
  return r;
}

}  // namespace

void add_sampling_inputs_ops(std::vector<InputsOp>& ops) {
  InputsOp noise;
  noise.name = "gumbel_noise";
  noise.summary = "the Gumbel noise g(seed, row, i) of a tensor (no input)";
  noise.convention = "S: the noise tensor's shape, rows along the last axis; --seed picks the noise";
  noise.default_shape = "256x32000";
  noise.example_shape = "7x333";
  noise.run = run_gumbel_noise;
  ops.push_back(std::move(noise));

  InputsOp gsb;
  gsb.name = "gumbel_softmax_backward";
  gsb.summary = "VJP of gumbel_softmax from its soft sample y (tau 1)";
  gsb.convention = "S: y_soft = softmax(x) and dy ~ N(0, 1) of shape S, rows along the last axis";
  gsb.default_shape = "256x32000";
  gsb.example_shape = "7x333";
  gsb.run = run_gumbel_softmax_backward;
  ops.push_back(std::move(gsb));

  InputsOp filter;
  filter.name = "sampling_filter";
  filter.summary = "the logits sample() draws from: top_k 50, then top_p 0.9 (others -inf)";
  filter.convention = "S: logits of shape S, rows along the last axis (temperature 1, top_k 50, top_p 0.9)";
  filter.default_shape = "64x128256";
  filter.example_shape = "7x333";
  filter.run = run_sampling_filter;
  ops.push_back(std::move(filter));

  InputsOp nms;
  nms.name = "soft_nms";
  nms.summary = "Soft-NMS of N random boxes (linear decay)";
  nms.convention = "N: boxes [N, 4] (x1, y1, x2, y2) and scores [N], random";
  nms.default_shape = "2000";
  nms.example_shape = "300";
  nms.run = run_soft_nms;
  ops.push_back(std::move(nms));
}

}  // namespace smax_cli

// src/ops/detection/soft_nms.cc: greedy Soft-NMS (Bodla et al., "Soft-NMS - Improving
// Object Detection With One Line of Code", ICCV 2017; reference code
// bharatsingh430/soft-nms cpu_soft_nms). See include/smax/detection.h.
//
// Float64 throughout (IoU, weights, running scores; boxes and scores of any
// dtype read exactly, kept scores rounded once to their view's dtype); O(N^2) with a compact
// list of the remaining boxes kept in ascending index order, so the strict
// max picks the lower index on ties. Everything is computed before any
// output view is written.
#include <cmath>
#include <limits>
#include <new>
#include <utility>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/enum_names.h"
#include "core/errors.h"
#include "core/internal.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/detection.h"

namespace smax {
namespace {

using detail::fail;
using detail::num;

constexpr const char* kOp = "soft_nms";

struct Box {
  double x1, y1, x2, y2, area;
};

// IoU of m and x (widths + one): in place when the areas and the union are
// normal doubles; otherwise (f64 boxes near 1e200 whose areas overflow, or
// near 1e-200 whose areas underflow) on the pair's coordinates scaled by
// 2^-e, e = ilogb of their largest magnitude (IoU is scale-free; `one`
// scales with them).
double iou(const Box& m, const Box& x, double one) {
  auto plain = [](const Box& a, const Box& b, double o, double area_a, double area_b) {
    const double iw = std::fmin(a.x2, b.x2) - std::fmax(a.x1, b.x1) + o;
    const double ih = std::fmin(a.y2, b.y2) - std::fmax(a.y1, b.y1) + o;
    const double inter = (iw > 0.0 && ih > 0.0) ? iw * ih : 0.0;
    const double uni = area_a + area_b - inter;
    return std::pair<double, double>{inter, uni};
  };
  const auto [inter, uni] = plain(m, x, one, m.area, x.area);
  constexpr double kMin = std::numeric_limits<double>::min();
  if (std::isfinite(uni) && uni >= kMin && (inter == 0.0 || inter >= kMin)) return inter / uni;
  double big = 0.0;
  for (double v : {m.x1, m.y1, m.x2, m.y2, x.x1, x.y1, x.x2, x.y2}) big = std::fmax(big, std::fabs(v));
  if (big == 0.0) return 0.0;  // every coordinate 0: zero-area boxes (one = 0)
  // e: the largest coordinate in [1, 2) (then widths < 4, areas < 16); for
  // an all-zero-area pair the scaled union is still 0: IoU 0.
  const int e = std::ilogb(big);
  auto scaled = [e](const Box& b) {
    return Box{std::scalbn(b.x1, -e), std::scalbn(b.y1, -e), std::scalbn(b.x2, -e),
               std::scalbn(b.y2, -e), 0.0};
  };
  const Box a = scaled(m), b = scaled(x);
  const double o = std::scalbn(one, -e);
  const auto [si, su] = plain(a, b, o, (a.x2 - a.x1 + o) * (a.y2 - a.y1 + o),
                              (b.x2 - b.x1 + o) * (b.y2 - b.y1 + o));
  return su > 0.0 ? si / su : 0.0;
}

// Element (i, j) of a floating view (any storage dtype), exactly.
double read(const TensorView& v, int64_t i, int64_t j) {
  const auto* p = static_cast<const char*>(v.data);
  const int64_t off = i * v.strides[0] + (v.rank > 1 ? j * v.strides[1] : 0);
  return detail::load_f64(p + off * dtype_size(v.dtype), v.dtype);
}

void check_inputs(const TensorView& boxes, const TensorView& scores, const SoftNmsOptions& o) {
  detail::ensure_runtime_initialized();
  detail::check_float_view(boxes, "soft_nms", "boxes");
  detail::check_float_view(scores, "soft_nms", "scores");
  if (boxes.rank != 2 || boxes.shape[1] != 4) {
    fail(kOp, "boxes must have shape [N, 4] (x1, y1, x2, y2), got " + boxes.describe());
  }
  if (scores.rank != 1 || scores.shape[0] != boxes.shape[0]) {
    fail(kOp, "scores must have shape [N] with N = " + std::to_string(boxes.shape[0]) +
              " (boxes' rows), got " + scores.describe());
  }
  const int method = static_cast<int>(o.method);
  if (method < 0 || method > static_cast<int>(SoftNmsMethod::kGaussian)) {
    fail(kOp, "unknown method value " + std::to_string(method));
  }
  if (!(std::isfinite(o.sigma) && o.sigma > 0.0f)) {
    fail(kOp, "sigma must be finite and > 0, got " + num(o.sigma));
  }
  if (!(o.iou_threshold >= 0.0f && o.iou_threshold <= 1.0f)) {
    fail(kOp, "iou_threshold must be in [0, 1], got " + num(o.iou_threshold));
  }
  if (!std::isfinite(o.score_threshold)) {
    fail(kOp, "score_threshold must be finite, got " + num(o.score_threshold));
  }
}

void run(const TensorView& boxes, const TensorView& scores, const SoftNmsOptions& o,
         std::vector<int64_t>& kept, std::vector<double>& kept_scores) {
  check_inputs(boxes, scores, o);
  const int64_t n = boxes.shape[0];
  const double one = o.plus_one ? 1.0 : 0.0;
  try {
    std::vector<Box> b(static_cast<size_t>(n));
    std::vector<double> s(static_cast<size_t>(n));
    std::vector<int64_t> alive;
    alive.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      Box& x = b[static_cast<size_t>(i)];
      x.x1 = read(boxes, i, 0);
      x.y1 = read(boxes, i, 1);
      x.x2 = read(boxes, i, 2);
      x.y2 = read(boxes, i, 3);
      if (!(std::isfinite(x.x1) && std::isfinite(x.y1) && std::isfinite(x.x2) &&
            std::isfinite(x.y2))) {
        fail(kOp, "box " + std::to_string(i) + " has a non-finite coordinate");
      }
      const double w = x.x2 - x.x1 + one, h = x.y2 - x.y1 + one;
      if (w < 0.0 || h < 0.0) {
        fail(kOp, "box " + std::to_string(i) + " = (" + num(x.x1) + ", " + num(x.y1) + ", " +
                  num(x.x2) + ", " + num(x.y2) + ") has x2 < x1 or y2 < y1" +
                  (o.plus_one ? " - 1 (plus_one)" : ""));
      }
      x.area = w * h;
      const double si = read(scores, i, 0);
      if (!std::isfinite(si)) {
        fail(kOp, "score " + std::to_string(i) + " is not finite: " + num(si));
      }
      s[static_cast<size_t>(i)] = si;
      alive.push_back(i);
    }
    kept.clear();
    kept_scores.clear();
    const double nt = o.iou_threshold, sigma = o.sigma, thr = o.score_threshold;
    for (;;) {
      // Drop boxes below the threshold; find the best remaining one.
      size_t w = 0;
      int64_t best = -1;
      size_t best_pos = 0;
      for (int64_t i : alive) {
        if (s[static_cast<size_t>(i)] < thr) continue;
        if (best < 0 || s[static_cast<size_t>(i)] > s[static_cast<size_t>(best)]) {
          best = i;
          best_pos = w;
        }
        alive[w++] = i;
      }
      alive.resize(w);
      if (best < 0) break;
      kept.push_back(best);
      kept_scores.push_back(s[static_cast<size_t>(best)]);
      alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(best_pos));
      const Box& m = b[static_cast<size_t>(best)];
      for (int64_t i : alive) {
        const Box& x = b[static_cast<size_t>(i)];
        const double ov = iou(m, x, one);
        double weight = 1.0;
        switch (o.method) {
          case SoftNmsMethod::kHard: weight = ov > nt ? 0.0 : 1.0; break;
          case SoftNmsMethod::kLinear: weight = ov > nt ? 1.0 - ov : 1.0; break;
          case SoftNmsMethod::kGaussian: weight = std::exp(-(ov * ov) / sigma); break;
        }
        s[static_cast<size_t>(i)] *= weight;
      }
    }
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, "soft_nms: cannot allocate work space for " +
                                          std::to_string(n) + " boxes");
  }
}

}  // namespace

SoftNmsResult soft_nms(const TensorView& boxes, const TensorView& scores,
                       const SoftNmsOptions& options) {
  SoftNmsResult r;
  std::vector<double> kept;
  run(boxes, scores, options, r.indices, kept);
  r.scores.assign(kept.begin(), kept.end());  // rounded once to f32
  return r;
}

int64_t soft_nms(const TensorView& boxes, const TensorView& scores, const TensorView& indices,
                 const TensorView& kept_scores, const SoftNmsOptions& options) {
  check_inputs(boxes, scores, options);
  const int64_t n = boxes.shape[0];
  detail::check_view(indices, "soft_nms", "indices", DType::kI64);
  detail::check_float_view(kept_scores, "soft_nms", "kept_scores");
  if (indices.rank != 1 || indices.shape[0] != n) {
    fail(kOp, "indices must have shape [N] with N = " + std::to_string(n) + ", got " +
              indices.describe());
  }
  if (kept_scores.rank != 1 || kept_scores.shape[0] != n) {
    fail(kOp, "kept_scores must have shape [N] with N = " + std::to_string(n) + ", got " +
              kept_scores.describe());
  }
  const char* op = "soft_nms";
  detail::check_no_self_overlap(indices, "indices", op);
  detail::check_no_self_overlap(kept_scores, "kept_scores", op);
  detail::check_disjoint_or_same(indices, "indices", boxes, "boxes", op, false);
  detail::check_disjoint_or_same(indices, "indices", scores, "scores", op, false);
  detail::check_disjoint_or_same(kept_scores, "kept_scores", boxes, "boxes", op, false);
  detail::check_disjoint_or_same(kept_scores, "kept_scores", scores, "scores", op, false);
  detail::check_disjoint_or_same(kept_scores, "kept_scores", indices, "indices", op, false);
  std::vector<int64_t> idx;
  std::vector<double> sc;
  run(boxes, scores, options, idx, sc);
  auto* pi = static_cast<int64_t*>(indices.data);
  auto* ps = static_cast<char*>(kept_scores.data);
  const int score_size = dtype_size(kept_scores.dtype);
  const auto count = static_cast<int64_t>(idx.size());
  for (int64_t j = 0; j < n; ++j) {
    pi[j * indices.strides[0]] = j < count ? idx[static_cast<size_t>(j)] : -1;
    detail::store_f64(ps + j * kept_scores.strides[0] * score_size, kept_scores.dtype,
                      j < count ? sc[static_cast<size_t>(j)] : 0.0);
  }
  return count;
}

namespace {
constexpr auto kMethodNames = detail::name_table<SoftNmsMethod>(
    "parse_soft_nms_method", "soft_nms method",
    {{SoftNmsMethod::kHard, "hard"},
     {SoftNmsMethod::kLinear, "linear"},
     {SoftNmsMethod::kGaussian, "gaussian"}});
}  // namespace

SoftNmsMethod parse_soft_nms_method(std::string_view name) { return kMethodNames.parse(name); }
const char* soft_nms_method_name(SoftNmsMethod method) noexcept {
  return kMethodNames.name(method);
}

}  // namespace smax

// tests/test_softmax_narrow_ops.cc: bf16 / f16 (and f64 output) storage
// through the public softmax API, on every SIMD target: results are
// round(f32 op on the widened input) bit for bit in rows mode (short rows:
// the fused kernels; 70000-element rows: the narrow segment kernels, every
// algorithm and the special rows;
// log_softmax rows into bf16 / f16 whose max dominates: within 1 ulp of the
// exact value instead, and the same bits in every layout),
// with f32 and narrow additive masks; transposed / padded layouts give the
// contiguous bits; threads 1, 2, 7 give the same bits; bf16 / f16 outputs
// are within 1 ulp of their type of the float64 softmax of the f32 logits
// (f32 outputs: the f32 bounds of smax/softmax.h); errors name the dtype
// and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/convert.h"
#include "smax/softmax.h"
#include "narrow_exact.h"
#include "test_util.h"

namespace {

using smax::DType;
using smax::SoftmaxOptions;
using smax::TensorView;
using smax::detail::load_f32;
using smax::detail::store_f32;

// A dense or strided tensor of any floating dtype over its own bytes.
struct T {
  DType t;
  std::vector<int64_t> shape, strides;
  std::vector<uint8_t> bytes;
  T(DType type, std::vector<int64_t> shp, std::vector<int64_t> str = {}) : t(type), shape(shp) {
    strides = str.empty() ? smax_test::row_major_strides(shape) : str;
    int64_t span = 1;
    for (size_t d = 0; d < shape.size(); ++d) span += (shape[d] - 1) * strides[d];
    bytes.assign(static_cast<size_t>(span * smax::dtype_size(t)), 0xA5);
  }
  // Element (r, i) of a 2-D tensor (no index vector: these loops run over
  // whole 70000-element rows, millions of times under the sanitizers).
  int64_t off(int64_t r, int64_t i) const { return r * strides[0] + i * strides[1]; }
  float get(int64_t o) const { return load_f32(bytes.data() + o * smax::dtype_size(t), t); }
  void set(int64_t o, float v) { store_f32(bytes.data() + o * smax::dtype_size(t), t, v); }
  TensorView view() {
    return smax::make_view(bytes.data(), t, static_cast<int>(shape.size()), shape.data(),
                           strides.data());
  }
};

enum class Op { kSoftmax, kLogSoftmax, kLogSumExp };
void call(Op op, const TensorView& s, const TensorView& d, const SoftmaxOptions& o) {
  if (op == Op::kSoftmax) smax::softmax(s, d, o);
  if (op == Op::kLogSoftmax) smax::log_softmax(s, d, o);
  if (op == Op::kLogSumExp) smax::logsumexp(s, d, o);
}

// [rows, n] logits of src type st; returns the output of `op` as dtype dt
// (row-major [rows, n] or [rows]) with options o, the src laid out
// contiguously or transposed ([n, rows] storage, axis 0 of a permuted view).
T run_2d(Op op, DType st, DType dt, int64_t rows, int64_t n, const std::vector<float>& x,
         SoftmaxOptions o, bool transposed = false, int64_t pad = 0) {
  T src(st, {rows, n}, transposed ? std::vector<int64_t>{1, rows + pad}
                                  : std::vector<int64_t>{n + pad, 1});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) src.set(src.off(r, i), x[static_cast<size_t>(r * n + i)]);
  }
  T dst = op == Op::kLogSumExp ? T(dt, {rows}) : T(dt, {rows, n});
  o.axis = 1;
  call(op, src.view(), dst.view(), o);
  return dst;
}

std::vector<float> logits(int64_t count, float sd, smax_test::Rng& rng) {
  std::vector<float> x(static_cast<size_t>(count));
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 17 == 5 ? -INFINITY : rng.normal(0.0f, sd);
  return x;
}

bool same_bits(const T& a, const T& b) { return a.t == b.t && a.bytes == b.bytes; }

using smax_test::ulp_of;

class NarrowOps : public smax_test::TargetTest {};

constexpr smax::Algorithm kAlgorithms[] = {
    smax::Algorithm::kAuto, smax::Algorithm::kThreePassReload, smax::Algorithm::kTwoPass,
    smax::Algorithm::kOnline, smax::Algorithm::kThreePassRecompute};

// `want` = the f32 result `ref` rounded to got's dtype.
T rounded(const T& ref, const T& got) {
  T want(got.t, got.shape);
  for (size_t i = 0; i < ref.bytes.size() / 4; ++i) {
    want.set(static_cast<int64_t>(i), ref.get(static_cast<int64_t>(i)));
  }
  return want;
}

TEST_P(NarrowOps, ResultsAreTheRoundedF32Results) {
  smax_test::Rng rng("narrow_ops_contract");
  for (int64_t n : {1, 37, 1000, 70000}) {
    const int64_t rows = n > 10000 ? 2 : 6;
    for (DType st : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<float> x = logits(rows * n, 4.0f, rng);
      for (float& v : x) v = smax::detail::round_to(st, v);  // the widened input
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64}) {
        if (st == DType::kF32 && dt == DType::kF32) continue;
        for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
          for (smax::Algorithm a : kAlgorithms) {
            // Every algorithm on the segment grid, the main two elsewhere.
            if (n < 65536 && a != smax::Algorithm::kAuto && a != smax::Algorithm::kTwoPass) {
              continue;
            }
            SoftmaxOptions o;
            o.algorithm = a;
            o.scale = 1.25f;
            const T got = run_2d(op, st, dt, rows, n, x, o);
            const T ref = run_2d(op, DType::kF32, DType::kF32, rows, n, x, o);
            T want = rounded(ref, got);
            if (op == Op::kLogSoftmax && (dt == DType::kBF16 || dt == DType::kF16)) {
              // Dominant rows: within 1 ulp of the exact value, then taken as is.
              std::vector<float> t(static_cast<size_t>(n));
              for (int64_t r = 0; r < rows; ++r) {
                std::vector<float> y(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = ref.get(r * n + i);
                if (!smax_test::dominant_max_row(y.data(), n)) continue;
                for (int64_t i = 0; i < n; ++i) {
                  t[static_cast<size_t>(i)] = x[static_cast<size_t>(r * n + i)] * o.scale;
                }
                const smax_test::ExactLogSoftmax exact_row(t.data(), n);
                for (int64_t i = 0; i < n; ++i) {
                  const double exact = exact_row.at(t[static_cast<size_t>(i)]);
                  const double g = got.get(r * n + i);
                  want.set(r * n + i, static_cast<float>(g));
                  if (g == smax::detail::round_to(dt, static_cast<float>(exact))) continue;
                  EXPECT_LE(std::fabs(g - exact), ulp_of(dt, exact)) << "row " << r << " i " << i;
                }
              }
            }
            EXPECT_TRUE(same_bits(got, want))
                << smax::dtype_name(st) << "->" << smax::dtype_name(dt) << " op "
                << static_cast<int>(op) << " n " << n;
          }
        }
      }
    }
  }
}

TEST_P(NarrowOps, MasksOfEveryTypeGiveTheF32MaskBits) {
  smax_test::Rng rng("narrow_ops_masks");
  const int64_t rows = 4, n = 300;
  std::vector<float> x = logits(rows * n, 2.0f, rng);
  for (float& v : x) v = smax::detail::round_to(DType::kBF16, v);
  for (DType mt : {DType::kF32, DType::kBF16, DType::kF16}) {
    T mask(mt, {n});
    for (int64_t i = 0; i < n; ++i) mask.set(i, i % 9 == 3 ? -INFINITY : rng.normal());
    T mask32(DType::kF32, {n});
    for (int64_t i = 0; i < n; ++i) mask32.set(i, mask.get(i));
    SoftmaxOptions o;
    o.additive_mask = mask.view();
    SoftmaxOptions o32;
    o32.additive_mask = mask32.view();
    const T got = run_2d(Op::kSoftmax, DType::kBF16, DType::kF16, rows, n, x, o);
    const T ref = run_2d(Op::kSoftmax, DType::kF32, DType::kF32, rows, n, x, o32);
    T want(DType::kF16, got.shape);
    for (int64_t i = 0; i < rows * n; ++i) want.set(i, ref.get(i));
    EXPECT_TRUE(same_bits(got, want)) << "mask " << smax::dtype_name(mt);
  }
}

// Rows on the segment grid (n >= 65536: read in their own type, no f32
// copy) with the rows that take the special branches: an empty row, NaN,
// +inf, |t| beyond the two-pass split and the exact-reduction range, softmax
// outputs below FLT_MIN (the scale pass's flush), and an f32 additive mask;
// every algorithm, src bf16 / f16 / f32 into every other type: round(f32).
TEST_P(NarrowOps, LongRowsWithSpecialValuesGiveTheRoundedF32Results) {
  smax_test::Rng rng("narrow_ops_long_special");
  const int64_t n = 70001, rows = 6;
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      float v = rng.normal(0.0f, 2.0f);
      if (r == 0) v = -INFINITY;                              // empty row
      if (r == 1 && i == 66000) v = NAN;                       // NaN in the second segment
      if (r == 2 && i == 12) v = INFINITY;                     // +inf
      if (r == 3) v = 3400.0f + v;                             // beyond the exact ranges
      if (r == 4) v = -static_cast<float>(i % 997) * 0.125f;   // outputs below FLT_MIN
      x[static_cast<size_t>(r * n + i)] = v;
    }
  }
  T mask(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) mask.set(i, i % 13 == 4 ? -INFINITY : rng.normal());
  for (DType st : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<float> xs = x;
    for (float& v : xs) v = smax::detail::round_to(st, v);
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      if (st == DType::kF32 && dt == DType::kF32) continue;
      for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
        // Rows whose max dominates are more accurate than round(f32) for
        // log_softmax into bf16 / f16 (LogSoftmaxNearZero... covers them):
        // no row here has a gap above ~1 between its two largest logits.
        for (smax::Algorithm a : kAlgorithms) {
          for (bool masked : {false, true}) {
            if (masked && a != smax::Algorithm::kAuto && a != smax::Algorithm::kTwoPass) continue;
            SoftmaxOptions o;
            o.algorithm = a;
            o.scale = 0.75f;
            if (masked) o.additive_mask = mask.view();
            const T got = run_2d(op, st, dt, rows, n, xs, o);
            const T want = rounded(run_2d(op, DType::kF32, DType::kF32, rows, n, xs, o), got);
            EXPECT_TRUE(same_bits(got, want))
                << smax::dtype_name(st) << "->" << smax::dtype_name(dt) << " op "
                << static_cast<int>(op) << " algo " << static_cast<int>(a) << " mask " << masked;
          }
        }
      }
    }
  }
}

// In place (dst == src, the same narrow type) on the segment grid: every
// pass reads x[i] before writing dst[i] and every reduction ends before the
// first write, so the bits are the out-of-place ones; a row whose max
// dominates takes log_softmax's near-zero refinement in place too.
TEST_P(NarrowOps, LongRowsInPlaceGiveTheOutOfPlaceBits) {
  smax_test::Rng rng("narrow_ops_long_in_place");
  const int64_t n = 70001, rows = 3;
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (int64_t i = 0; i < rows * n; ++i) x[static_cast<size_t>(i)] = rng.normal(0.0f, 2.0f);
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(n + i)] -= 40.0f;  // row 1: max dominates
  x[static_cast<size_t>(n + 5)] = 0.0f;
  x[static_cast<size_t>(2 * n + 66000)] = NAN;                            // row 2: NaN
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
      for (smax::Algorithm a : kAlgorithms) {
        SoftmaxOptions o;
        o.algorithm = a;
        o.threads = 2;
        const T want = run_2d(op, t, t, rows, n, x, o);
        T buf(t, {rows, n});
        for (int64_t i = 0; i < rows * n; ++i) buf.set(i, x[static_cast<size_t>(i)]);
        o.axis = 1;
        call(op, buf.view(), buf.view(), o);
        EXPECT_TRUE(same_bits(buf, want))
            << smax::dtype_name(t) << " op " << static_cast<int>(op) << " algo "
            << static_cast<int>(a);
      }
    }
  }
}

TEST_P(NarrowOps, LayoutsAndThreadCountsGiveTheSameBits) {
  smax_test::Rng rng("narrow_ops_layouts");
  for (int64_t n : {33, 1000, 70000}) {
    const int64_t rows = n > 10000 ? 3 : 40;
    const std::vector<float> x = logits(rows * n, 3.0f, rng);
    for (auto [st, dt] : {std::pair{DType::kBF16, DType::kBF16}, std::pair{DType::kF16, DType::kF32},
                          std::pair{DType::kF32, DType::kF16}}) {
      for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
        SoftmaxOptions o;
        o.threads = 1;
        const T base = run_2d(op, st, dt, rows, n, x, o);
        EXPECT_TRUE(same_bits(base, run_2d(op, st, dt, rows, n, x, o, true))) << "transposed " << n;
        EXPECT_TRUE(same_bits(base, run_2d(op, st, dt, rows, n, x, o, false, 3))) << "padded " << n;
        for (int threads : {2, 7}) {
          o.threads = threads;
          EXPECT_TRUE(same_bits(base, run_2d(op, st, dt, rows, n, x, o))) << threads << " " << n;
        }
      }
    }
  }
}

TEST_P(NarrowOps, NarrowOutputsAreWithinTheF32BoundPlusHalfAnUlp) {
  smax_test::Rng rng("narrow_ops_accuracy");
  const int64_t rows = 8;
  for (int64_t n : {5, 300, 32000}) {
    for (DType st : {DType::kBF16, DType::kF16}) {
      std::vector<float> x = logits(rows * n, 6.0f, rng);
      for (float& v : x) v = smax::detail::round_to(st, v);
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
          const T got = run_2d(op, st, dt, rows, n, x, SoftmaxOptions{});
          int bad = 0;
          for (int64_t r = 0; r < rows && bad < 5; ++r) {
            double m = -INFINITY, s = 0.0;
            for (int64_t i = 0; i < n; ++i) m = std::max<double>(m, x[static_cast<size_t>(r * n + i)]);
            for (int64_t i = 0; i < n; ++i) s += std::exp(x[static_cast<size_t>(r * n + i)] - m);
            const double lse = m + std::log(s);
            for (int64_t i = 0; i < (op == Op::kLogSumExp ? 1 : n); ++i) {
              const double t = x[static_cast<size_t>(r * n + i)];
              const double exact = op == Op::kSoftmax ? std::exp(t - m) / s
                                   : op == Op::kLogSoftmax ? (t - m) - std::log(s) : lse;
              const double g = got.get(op == Op::kLogSumExp ? r : r * n + i);
              if (std::isinf(exact) && g == exact) continue;
              // The f32 bound, plus half an ulp of a narrow output type (its
              // rounding: docs/dtypes.md). That is within one ulp of the
              // type wherever the f32 bound is below half an ulp: every
              // softmax and logsumexp output, and log_softmax values with
              // |value| above ~1e-4 (nearer 0, the f32 absolute error
              // 2e-6 (1 + |v|) is more than an ulp of v: docs/numerics.md).
              const double f32_bound = op == Op::kSoftmax ? (exact >= 1e-30 ? 2e-6 * exact : 1e-36)
                                                          : 2e-6 * (1 + std::fabs(exact));
              // log_softmax into bf16 / f16: 1 ulp of the type everywhere
              // (values near 0 by log1p: kernels/softmax_narrow.h).
              const double bound = dt == DType::kF32        ? f32_bound
                                   : op == Op::kLogSoftmax ? ulp_of(dt, exact)
                                                           : f32_bound + 0.5 * ulp_of(dt, exact);
              if (!(std::fabs(g - exact) <= bound)) {
                ++bad;
                ADD_FAILURE() << smax::dtype_name(st) << "->" << smax::dtype_name(dt) << " op "
                              << static_cast<int>(op) << " n " << n << " got " << g << " exact "
                              << exact << " bound " << bound;
              }
            }
          }
        }
      }
    }
  }
}

// Rows whose max dominates by 3..100 (at n = 2, log_softmax values from
// -1e-44 to -0.05 at the max), every algorithm, the fused rows (n < 65536)
// and the converting path (70000, transposed): each bf16 / f16 output within
// 1 ulp of its type of the exact log_softmax (or its correct rounding, e.g.
// f16 overflow to -inf), and the transposed layout gives the contiguous bits.
TEST_P(NarrowOps, LogSoftmaxNearZeroIsWithinOneUlpOfItsType) {
  smax_test::Rng rng("narrow_ops_near_zero");
  const float gaps[] = {3.0f, 6.0f, 9.0f, 12.5f, 17.0f, 30.0f, 60.0f, 88.0f, 100.0f};
  const int64_t rows = 9;
  for (int64_t n : {2, 13, 4000, 70000}) {
    for (DType st : {DType::kBF16, DType::kF16}) {
      std::vector<float> x(static_cast<size_t>(rows * n));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < n; ++i) {
          float v = rng.normal(0.0f, 0.5f) - gaps[r];
          if (i == (r * 7) % n) v = 0.0f;  // the dominant max
          if (i % 29 == 11 && i != (r * 7) % n) v = -INFINITY;
          x[static_cast<size_t>(r * n + i)] = smax::detail::round_to(st, v);
        }
      }
      for (DType dt : {DType::kBF16, DType::kF16}) {
        for (smax::Algorithm a : {smax::Algorithm::kAuto, smax::Algorithm::kThreePassReload,
                                  smax::Algorithm::kTwoPass, smax::Algorithm::kOnline,
                                  smax::Algorithm::kThreePassRecompute}) {
          for (bool transposed : {false, true}) {
            if (transposed && n != 4000 && n != 70000) continue;
            SoftmaxOptions o;
            o.algorithm = a;
            const T got = run_2d(Op::kLogSoftmax, st, dt, rows, n, x, o, transposed);
            if (transposed) {  // the converting path gives the fused rows' bits
              EXPECT_TRUE(same_bits(got, run_2d(Op::kLogSoftmax, st, dt, rows, n, x, o)))
                  << "transposed n " << n;
            }
            int bad = 0;
            for (int64_t r = 0; r < rows && bad < 5; ++r) {
              const float* t = &x[static_cast<size_t>(r * n)];
              const smax_test::ExactLogSoftmax exact_row(t, n);
              for (int64_t i = 0; i < n && bad < 5; ++i) {
                const double exact = exact_row.at(t[i]);
                const double g = got.get(r * n + i);
                if (std::isinf(exact) && g == exact) continue;
                if (!(std::fabs(g - exact) <= ulp_of(dt, exact))) {
                  ++bad;
                  ADD_FAILURE() << smax::dtype_name(st) << "->" << smax::dtype_name(dt)
                                << " n " << n << " algo " << static_cast<int>(a) << " row " << r
                                << " i " << i << " got " << g << " exact " << exact;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(NarrowOps, BackwardResultsAreTheRoundedF32ResultsInEveryLayout) {
  smax_test::Rng rng("narrow_ops_backward");
  for (int64_t n : {9, 1000, 70000}) {
    const int64_t rows = n > 10000 ? 2 : 5;
    for (bool log : {false, true}) {
      for (auto [yt, dyt, dxt] : {std::tuple{DType::kBF16, DType::kBF16, DType::kBF16},
                                  std::tuple{DType::kF16, DType::kF32, DType::kF16},
                                  std::tuple{DType::kF32, DType::kBF16, DType::kF64}}) {
        std::vector<float> y(static_cast<size_t>(rows * n)), dy(y.size());
        for (size_t i = 0; i < y.size(); ++i) {
          const float p = rng.uniform(0.0f, 2.0f / static_cast<float>(n));
          y[i] = smax::detail::round_to(yt, log ? std::log(p + 1e-20f) : p);
          dy[i] = smax::detail::round_to(dyt, rng.normal());
        }
        auto run = [&](DType a, DType b, DType c, bool transposed, int threads) {
          auto make = [&](DType t, const std::vector<float>* v) {
            T out(t, {rows, n}, transposed ? std::vector<int64_t>{1, rows} : std::vector<int64_t>{});
            if (v) {
              for (int64_t r = 0; r < rows; ++r) {
                for (int64_t i = 0; i < n; ++i) out.set(out.off(r, i), (*v)[static_cast<size_t>(r * n + i)]);
              }
            }
            return out;
          };
          T ty = make(a, &y), tdy = make(b, &dy), tdx = make(c, nullptr);
          SoftmaxOptions o;
          o.threads = threads;
          o.scale = 0.75f;
          if (log) smax::log_softmax_backward(ty.view(), tdy.view(), tdx.view(), o);
          else smax::softmax_backward(ty.view(), tdy.view(), tdx.view(), o);
          T dense(c, {rows, n});
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = 0; i < n; ++i) dense.set(r * n + i, tdx.get(tdx.off(r, i)));
          }
          return dense;
        };
        const T got = run(yt, dyt, dxt, false, 1);
        const T ref = run(DType::kF32, DType::kF32, DType::kF32, false, 1);
        T want(dxt, {rows, n});
        for (int64_t i = 0; i < rows * n; ++i) want.set(i, ref.get(i));
        EXPECT_TRUE(same_bits(got, want)) << "log " << log << " n " << n;
        EXPECT_TRUE(same_bits(got, run(yt, dyt, dxt, true, 1))) << "transposed n " << n;
        EXPECT_TRUE(same_bits(got, run(yt, dyt, dxt, false, 7))) << "threads 7 n " << n;
      }
    }
  }
}

TEST_P(NarrowOps, ErrorsNameTheDtypeAndWriteNothing) {
  T src(DType::kBF16, {2, 8});
  T dst(DType::kF16, {2, 8});
  for (int64_t i = 0; i < 16; ++i) src.set(i, 0.5f * static_cast<float>(i));
  const std::vector<uint8_t> before = dst.bytes;
  T bad(DType::kI32, {2, 8});
  EXPECT_TRUE(smax_test::throws_invalid([&] { smax::softmax(bad.view(), dst.view()); }, "i32"));
  // dst over src's bytes with another dtype is an overlap, not in-place.
  TensorView alias = src.view();
  alias.dtype = DType::kF16;
  EXPECT_TRUE(smax_test::throws_invalid([&] { smax::softmax(src.view(), alias); }, "overlaps"));
  T dx(DType::kI32, {2, 8});
  EXPECT_TRUE(smax_test::throws_invalid(
      [&] { smax::softmax_backward(src.view(), src.view(), dx.view()); }, "i32"));
  EXPECT_EQ(before, dst.bytes);
}

SMAX_INSTANTIATE_PER_TARGET(NarrowOps);

}  // namespace

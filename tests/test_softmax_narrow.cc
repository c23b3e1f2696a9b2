// tests/test_softmax_narrow.cc: bf16 / f16 storage for softmax, log_softmax,
// logsumexp and their backward, on every SIMD target.
//
// Contracts tested (kernels/softmax_narrow.h, docs/numerics.md "bf16 and f16"):
//  * kernels: narrow kernel == round_to(dst type, f32 kernel on the widened
//    input, same algorithm), bit for bit, for every (src, dst) type pair,
//    all four algorithms, n = 1..300, 1000, 4099, 32000, masks, scale != 1,
//    NaN / +inf / all-masked rows with both empty_row policies, wide ranges
//    (f16 subnormal outputs, f32 flushes), |max| beyond ExpRef's range, f16
//    overflow of logsumexp and log_softmax; backward likewise for every
//    (y, dy, dx) type triple. Exception: log_softmax rows into bf16 / f16
//    whose max dominates are checked within 1 ulp of the exact value
//    (take_dominant_rows).
//  * ops: the same contract through the public API (rows mode, long rows of
//    70000 through the segments, f64 outputs), transposed and padded
//    layouts give the contiguous bits, threads 1 / 2 / 7 give the same
//    bits, narrow outputs within 1 ulp of their type of the float64 result,
//    errors name the dtype and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/convert.h"
#include "kernels/kernels.h"
#include "kernels/softmax_narrow.h"
#include "smax/softmax.h"
#include "narrow_exact.h"
#include "test_util.h"

namespace {

using smax::Algorithm;
using smax::DType;
using smax::EmptyRow;
using smax::detail::load_f32;
using smax::detail::store_f32;
namespace k = smax::kernels;

constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();
const Algorithm kAlgorithms[] = {Algorithm::kThreePassReload, Algorithm::kThreePassRecompute,
                                 Algorithm::kTwoPass, Algorithm::kOnline};
const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// A buffer of `n` elements of a floating dtype (+ guard elements after).
struct Buf {
  DType t;
  int64_t n;
  std::vector<uint8_t> bytes;
  static constexpr int64_t kGuard = 9;
  Buf(DType type, int64_t count) : t(type), n(count) {
    bytes.assign(static_cast<size_t>((n + kGuard) * smax::dtype_size(t)), 0xA5);
  }
  void* data() { return bytes.data(); }
  void* at(int64_t i) { return bytes.data() + i * smax::dtype_size(t); }
  float get(int64_t i) const { return load_f32(bytes.data() + i * smax::dtype_size(t), t); }
  void set(int64_t i, float v) { store_f32(at(i), t, v); }
  bool guard_intact() const {
    for (size_t b = static_cast<size_t>(n * smax::dtype_size(t)); b < bytes.size(); ++b) {
      if (bytes[b] != 0xA5) return false;
    }
    return true;
  }
  bool same_bits(int64_t i, const Buf& o, int64_t j) const {
    const int s = smax::dtype_size(t);
    return t == o.t && std::memcmp(bytes.data() + i * s, o.bytes.data() + j * s, s) == 0;
  }
};

// Logits of kind `kind` for row r of n (f32, before rounding to the src type).
float logit(int kind, int64_t r, int64_t i, int64_t n, smax_test::Rng& rng) {
  switch (kind) {
    case 0: return rng.normal(0.0f, 3.0f);
    case 1: return rng.uniform(-150.0f, 10.0f);       // subnormal / flushed outputs
    case 2: return rng.uniform(-3000.0f, 3000.0f);    // |max| beyond ExpRef's range
    case 3: {                                          // special rows
      const int64_t which = r % 5;
      if (which == 0 && i == n / 2) return kNaNF;
      if (which == 1 && i == n / 3) return kInfF;
      if (which == 2) return -kInfF;                   // all masked
      if (which == 3 && i % 3 == 0) return -kInfF;
      return i % 7 == 0 ? -0.0f : rng.normal();
    }
    case 4: return rng.uniform(65000.0f, 65504.0f);   // logsumexp past f16's max
    case 5: return rng.uniform(-70000.0f, 0.0f);       // log_softmax past -65504
    default: return static_cast<float>(rng.index(3));  // repeated values
  }
}

// log_softmax into bf16 / f16: rows whose max dominates are computed by
// log1p (smax_test::dominant_max_row), not rounded from the f32 kernel:
// each of their outputs must be within 1 ulp of the exact value, and is
// then taken into `want` as it is.
void take_dominant_rows(const k::Rows& fr, const Buf& got, Buf* want) {
  const int64_t n = fr.cols;
  std::vector<float> t(static_cast<size_t>(n));
  for (int64_t r = 0; r < fr.rows; ++r) {
    if (!smax_test::dominant_max_row(fr.dst + r * n, n)) continue;
    for (int64_t i = 0; i < n; ++i) {  // t = fl(fl(x * scale) + mask), as the kernels
      float v = fr.src[r * n + i];
      if (fr.scale != 1.0f) v = v * fr.scale;
      if (fr.mask != nullptr) v = v + fr.mask[r * n + i];
      t[static_cast<size_t>(i)] = v;
    }
    const smax_test::ExactLogSoftmax ref(t.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double exact = ref.at(t[static_cast<size_t>(i)]);
      const double g = got.get(r * n + i);
      want->set(r * n + i, static_cast<float>(g));
      if (g == smax::detail::round_to(got.t, static_cast<float>(exact))) continue;  // overflow, -inf
      EXPECT_LE(std::fabs(g - exact), smax_test::ulp_of(got.t, exact))
          << smax::dtype_name(got.t) << " n " << n << " row " << r << " [" << i << "]";
    }
  }
}

enum class Op { kSoftmax, kLogSoftmax, kLogSumExp };

void f32_kernel(Op op, const k::Rows& rows, Algorithm a) {
  switch (op) {
    case Op::kSoftmax: k::softmax_rows(rows, a); break;
    case Op::kLogSoftmax: k::log_softmax_rows(rows, a); break;
    case Op::kLogSumExp: k::logsumexp_rows(rows, a); break;
  }
}
void narrow_kernel(Op op, const k::NarrowRows& rows, Algorithm a) {
  switch (op) {
    case Op::kSoftmax: k::softmax_rows_narrow(rows, a); break;
    case Op::kLogSoftmax: k::log_softmax_rows_narrow(rows, a); break;
    case Op::kLogSumExp: k::logsumexp_rows_narrow(rows, a); break;
  }
}

class NarrowKernels : public smax_test::RecordingTargetTest {
 protected:
  // One (op, algorithm, types, shape, data) case: returns false on mismatch.
  void run_forward_case(Op op, Algorithm a, DType st, DType dt, int64_t rows, int64_t n, int kind,
                        bool masked, float scale, EmptyRow empty, smax_test::Rng& rng) {
    Buf src(st, rows * n);
    std::vector<float> wide(static_cast<size_t>(rows * n)), mask;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i) src.set(r * n + i, logit(kind, r, i, n, rng));
    }
    for (int64_t i = 0; i < rows * n; ++i) wide[static_cast<size_t>(i)] = src.get(i);
    if (masked) {
      mask.resize(static_cast<size_t>(rows * n));
      for (int64_t i = 0; i < rows * n; ++i) {
        mask[static_cast<size_t>(i)] = i % 5 == 2 ? -kInfF : rng.normal(0.0f, 0.5f);
      }
    }
    const int64_t out_n = op == Op::kLogSumExp ? rows : rows * n;
    const int64_t out_stride = op == Op::kLogSumExp ? 1 : n;
    std::vector<float> ref(static_cast<size_t>(out_n));
    k::Rows fr;
    fr.src = wide.data();
    fr.src_stride = n;
    fr.dst = ref.data();
    fr.dst_stride = out_stride;
    fr.mask = masked ? mask.data() : nullptr;
    fr.mask_stride = n;
    fr.rows = rows;
    fr.cols = n;
    fr.scale = scale;
    fr.empty_row = empty;
    f32_kernel(op, fr, a);
    Buf got(dt, out_n);
    k::NarrowRows nr;
    nr.src = src.data();
    nr.src_type = st;
    nr.src_stride = n;
    nr.dst = got.data();
    nr.dst_type = dt;
    nr.dst_stride = out_stride;
    nr.mask = fr.mask;
    nr.mask_stride = n;
    nr.rows = rows;
    nr.cols = n;
    nr.scale = scale;
    nr.empty_row = empty;
    narrow_kernel(op, nr, a);
    Buf want(dt, out_n);
    for (int64_t i = 0; i < out_n; ++i) want.set(i, ref[static_cast<size_t>(i)]);
    if (op == Op::kLogSoftmax && dt != DType::kF32) take_dominant_rows(fr, got, &want);
    const std::string what = std::string("op ") + std::to_string(static_cast<int>(op)) +
                             " alg " + std::to_string(static_cast<int>(a)) + " " +
                             smax::dtype_name(st) + "->" + smax::dtype_name(dt) + " n " +
                             std::to_string(n) + " kind " + std::to_string(kind) + " mask " +
                             std::to_string(masked) + " scale " + std::to_string(scale);
    record(::testing::AssertionResult(got.guard_intact()) << what << " wrote past the end");
    for (int64_t i = 0; i < out_n; ++i) {
      if (!got.same_bits(i, want, i)) {
        record(::testing::AssertionFailure() << what << " [" << i << "] got " << got.get(i)
                                             << " want " << want.get(i));
        return;
      }
    }
  }
};

TEST_P(NarrowKernels, ForwardIsTheRoundedF32KernelBitForBit) {
  smax_test::Rng rng("narrow_forward_kernels");
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 300; ++n) sizes.push_back(n);
  for (int64_t n : {1000, 4099}) sizes.push_back(n);
  for (DType st : kTypes) {
    for (DType dt : kTypes) {
      if (st == DType::kF32 && dt == DType::kF32) continue;
      for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
        for (Algorithm a : kAlgorithms) {
          for (int64_t n : sizes) {
            const int kind = static_cast<int>(n % 7);
            const bool masked = n % 3 == 1;
            const float scale = n % 4 == 3 ? 0.7f : n % 4 == 1 ? 2.5f : 1.0f;
            const EmptyRow empty = n % 2 ? EmptyRow::kZero : EmptyRow::kNan;
            const int64_t rows = n > 1000 ? 2 : 5;
            run_forward_case(op, a, st, dt, rows, n, kind, masked, scale, empty, rng);
            if (stop()) return;
          }
          run_forward_case(op, a, st, dt, 3, 32000, 0, true, 1.0f, EmptyRow::kZero, rng);
          run_forward_case(op, a, st, dt, 2, 32000, 1, false, 0.5f, EmptyRow::kZero, rng);
          if (stop()) return;
        }
      }
    }
  }
}

TEST_P(NarrowKernels, BackwardIsTheRoundedF32KernelBitForBit) {
  smax_test::Rng rng("narrow_backward_kernels");
  for (DType yt : kTypes) {
    for (DType dyt : kTypes) {
      for (DType dxt : kTypes) {
        if (yt == DType::kF32 && dyt == DType::kF32 && dxt == DType::kF32) continue;
        for (bool log : {false, true}) {
          for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 1000, 32000}) {
            for (float scale : {1.0f, 2.5f, 1e-3f}) {
              const int64_t rows = 3;
              Buf y(yt, rows * n), dy(dyt, rows * n);
              for (int64_t i = 0; i < rows * n; ++i) {
                const float p = rng.uniform(0.0f, 2.0f / static_cast<float>(n));
                y.set(i, log ? (i % 11 == 4 ? -kInfF : std::log(p + 1e-30f)) : p);
                dy.set(i, rng.normal(0.0f, 1.0f) * (i % 13 == 0 ? 1e30f : 1.0f));
              }
              std::vector<float> wy(static_cast<size_t>(rows * n)), wdy(wy.size()), ref(wy.size());
              for (int64_t i = 0; i < rows * n; ++i) {
                wy[static_cast<size_t>(i)] = y.get(i);
                wdy[static_cast<size_t>(i)] = dy.get(i);
              }
              k::BackwardRows fr;
              fr.y = wy.data();
              fr.y_stride = n;
              fr.dy = wdy.data();
              fr.dy_stride = n;
              fr.dx = ref.data();
              fr.dx_stride = n;
              fr.rows = rows;
              fr.cols = n;
              fr.scale = scale;
              if (log) k::log_softmax_backward_rows(fr); else k::softmax_backward_rows(fr);
              Buf dx(dxt, rows * n);
              k::NarrowBackwardRows nr;
              nr.y = y.data();
              nr.y_type = yt;
              nr.y_stride = n;
              nr.dy = dy.data();
              nr.dy_type = dyt;
              nr.dy_stride = n;
              nr.dx = dx.data();
              nr.dx_type = dxt;
              nr.dx_stride = n;
              nr.rows = rows;
              nr.cols = n;
              nr.scale = scale;
              if (log) k::log_softmax_backward_rows_narrow(nr); else k::softmax_backward_rows_narrow(nr);
              Buf want(dxt, rows * n);
              for (int64_t i = 0; i < rows * n; ++i) want.set(i, ref[static_cast<size_t>(i)]);
              record(::testing::AssertionResult(dx.guard_intact()) << "guard");
              for (int64_t i = 0; i < rows * n; ++i) {
                if (!dx.same_bits(i, want, i)) {
                  record(::testing::AssertionFailure()
                         << "log " << log << " " << smax::dtype_name(yt) << ","
                         << smax::dtype_name(dyt) << "->" << smax::dtype_name(dxt) << " n " << n
                         << " scale " << scale << " [" << i << "] got " << dx.get(i) << " want "
                         << want.get(i));
                  break;
                }
              }
              if (stop()) return;
            }
          }
        }
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(NarrowKernels);

}  // namespace

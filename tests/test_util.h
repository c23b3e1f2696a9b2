// tests/test_util.h: shared helpers for the smax test suite.
//
//  * Seeds: every random generator derives from one base seed, taken from the
//    environment variable SMAX_TEST_SEED, else --gtest_random_seed (when not
//    0), else a fixed default, mixed with the running test's full name and a
//    tag, so a test gives the same data whatever runs before it. The base seed
//    is printed at start and, with the test name, whenever a test fails
//    (tests/test_main.cc).
//  * Tensor: an owning strided f32 (or bool) array with arbitrary strides
//    (permuted, padded, negative), misaligned starts and a sentinel-filled
//    guard region, so tests can check that nothing outside the view is
//    written.
//  * Error metrics: the exact bounds of include/smax/softmax.h, written out
//    below, plus exact matching of NaN / +-inf / required zeros.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "check.h"
#include "reference/bounds.h"
#include "smax/smax.h"

namespace smax_test {

using smax::Algorithm;
using smax::DType;
using smax::EmptyRow;
using smax::SoftmaxOptions;
using smax::TensorView;

constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNanF = std::numeric_limits<float>::quiet_NaN();
constexpr double kInfD = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------

inline uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("SMAX_TEST_SEED"); env != nullptr && *env) {
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    }
    const int32_t flag = GTEST_FLAG_GET(random_seed);
    if (flag != 0) return static_cast<uint64_t>(flag);
    return uint64_t{20240611};
  }();
  return seed;
}

inline uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

/// Seed for the running test and `tag`: depends only on the base seed, the
/// test's full name and the tag.
inline uint64_t seed_for(const std::string& tag = "") {
  std::string name;
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name = std::string(info->test_suite_name()) + "." + info->name();
  }
  return fnv1a(name + "/" + tag, base_seed() * 0x9E3779B97F4A7C15ull + 1);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  explicit Rng(const std::string& tag) : gen_(seed_for(tag)) {}
  float uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(gen_);
  }
  float normal(float mean = 0.0f, float sd = 1.0f) {
    return std::normal_distribution<float>(mean, sd)(gen_);
  }
  int64_t index(int64_t n) {  // uniform in [0, n)
    return std::uniform_int_distribution<int64_t>(0, n - 1)(gen_);
  }
  bool bernoulli(double p) { return std::bernoulli_distribution(p)(gen_); }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// Row contents by `kind` (0..kAdversarialRowKinds-1): uniform on [-8, 8),
// wide (flushes), with -inf, with NaN, with zeros of both signs at the max,
// all -inf but zeros of both signs.
inline std::vector<float> adversarial_row(int kind, int64_t count, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(count));
  for (auto& v : x) {
    const double u = rng.uniform(0.0f, 1.0f);
    switch (kind) {
      case 0: v = static_cast<float>(16.0 * u - 8.0); break;
      case 1: v = static_cast<float>(1300.0 * u - 1000.0); break;
      case 2: v = u < 0.1 ? -kInfF : static_cast<float>(10.0 * u); break;
      case 3: v = u < 0.02 ? kNanF : static_cast<float>(u); break;
      case 4: v = u < 0.3 ? (u < 0.15 ? 0.0f : -0.0f) : static_cast<float>(-8.0 * u); break;
      default: v = u < 0.2 ? (u < 0.1 ? 0.0f : -0.0f) : -kInfF; break;
    }
  }
  return x;
}
inline constexpr int kAdversarialRowKinds = 6;

// `count` floats starting `offset` floats past a 64-byte boundary (the
// streaming-store tests place outputs at chosen alignments).
struct PlacedFloats {
  std::vector<float> storage;
  float* data;
  PlacedFloats(size_t count, size_t offset) : storage(count + 32) {
    const auto address = reinterpret_cast<uintptr_t>(storage.data());
    const size_t lead = (64 - address % 64) % 64 / sizeof(float);
    data = storage.data() + lead + offset;
  }
};

// Restores smax::set_streaming_stores("auto") whatever a test forced.
struct StreamModeGuard {
  ~StreamModeGuard() { smax::set_streaming_stores("auto"); }
};

// ---------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------

constexpr float kSentinel = -12345.678f;
constexpr uint8_t kSentinelByte = 0xA5;

/// Row-major strides of `shape`: testing/check.h's.
using smax_cli::row_major_strides;

/// Strides for a layout whose memory order (outermost first) is `order`, with
/// `pad` extra elements added to the extent of each dim after the innermost.
inline std::vector<int64_t> permuted_strides(const std::vector<int64_t>& shape,
                                             const std::vector<int>& order,
                                             int64_t pad = 0) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t i = order.size(); i-- > 0;) {
    const int d = order[i];
    st[static_cast<size_t>(d)] = s;
    s *= std::max<int64_t>(shape[static_cast<size_t>(d)], 1) + (i + 1 < order.size() ? pad : 0);
  }
  return st;
}

/// Owning strided array. `storage` holds the view plus `guard` sentinel
/// elements on both sides; `misalign` shifts the first element by that many
/// elements (so data is not 16/32/64-byte aligned).
template <typename T>
class Array {
 public:
  Array() = default;
  Array(std::vector<int64_t> shape, std::vector<int64_t> strides = {}, int64_t misalign = 0,
        int64_t guard = 16)
      : shape_(std::move(shape)), strides_(std::move(strides)) {
    if (strides_.empty()) strides_ = row_major_strides(shape_);
    int64_t lo = 0, hi = 0, n = 1;
    for (size_t d = 0; d < shape_.size(); ++d) {
      n *= shape_[d];
      if (shape_[d] == 0) continue;
      const int64_t ext = (shape_[d] - 1) * strides_[d];
      (ext < 0 ? lo : hi) += ext;
    }
    numel_ = n;
    const int64_t span = n == 0 ? 0 : hi - lo + 1;
    // Over-align the allocation so `misalign` is meaningful.
    storage_.assign(static_cast<size_t>(span + 2 * guard + misalign + 64), sentinel());
    auto addr = reinterpret_cast<uintptr_t>(storage_.data());
    const int64_t align_fix =
        static_cast<int64_t>(((64 - addr % 64) % 64) / sizeof(T));
    origin_ = align_fix + guard + misalign - lo;
  }

  static T sentinel() {
    if constexpr (std::is_same_v<T, float>) {
      return kSentinel;
    } else {
      return static_cast<T>(kSentinelByte);
    }
  }

  TensorView view() const {
    TensorView v;
    v.data = const_cast<T*>(storage_.data() + origin_);
    v.dtype = std::is_same_v<T, float>     ? DType::kF32
              : std::is_same_v<T, int64_t> ? DType::kI64
                                           : DType::kBool;
    v.rank = static_cast<int>(shape_.size());
    for (size_t d = 0; d < shape_.size(); ++d) {
      v.shape[d] = shape_[d];
      v.strides[d] = strides_[d];
    }
    return v;
  }

  int64_t numel() const { return numel_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }

  /// Storage offset of the element with row-major logical index `i`.
  int64_t offset_of(int64_t i) const {
    int64_t off = origin_;
    for (size_t d = shape_.size(); d-- > 0;) {
      off += (i % shape_[d]) * strides_[d];
      i /= shape_[d];
    }
    return off;
  }
  T& at(int64_t i) { return storage_[static_cast<size_t>(offset_of(i))]; }
  T at(int64_t i) const { return storage_[static_cast<size_t>(offset_of(i))]; }

  /// Sets element i (logical row-major index) to f(i).
  void fill(const std::function<T(int64_t)>& f) {
    for (int64_t i = 0; i < numel_; ++i) at(i) = f(i);
  }
  /// Logical contents, row-major.
  std::vector<T> dense() const {
    std::vector<T> out(static_cast<size_t>(numel_));
    for (int64_t i = 0; i < numel_; ++i) out[static_cast<size_t>(i)] = at(i);
    return out;
  }
  /// Overwrites the whole storage (view and guards) with the sentinel.
  void poison() { std::fill(storage_.begin(), storage_.end(), sentinel()); }
  const std::vector<T>& storage() const { return storage_; }
  std::vector<T>& storage() { return storage_; }

  /// True when every storage element outside the view still holds the
  /// sentinel (nothing written out of bounds).
  bool guards_intact() const {
    std::vector<char> inside(storage_.size(), 0);
    for (int64_t i = 0; i < numel_; ++i) inside[static_cast<size_t>(offset_of(i))] = 1;
    const T s = sentinel();
    for (size_t k = 0; k < storage_.size(); ++k) {
      if (!inside[k] && std::memcmp(&storage_[k], &s, sizeof(T)) != 0) return false;
    }
    return true;
  }

 private:
  std::vector<int64_t> shape_, strides_;
  int64_t numel_ = 0;
  int64_t origin_ = 0;
  std::vector<T> storage_;
};

using Tensor = Array<float>;
using BoolTensor = Array<uint8_t>;

/// A float64 view of `p` (strides in elements; empty: contiguous), for the
/// float64-path tests.
inline smax::TensorView f64_view(double* p, std::vector<int64_t> shape,
                                 std::vector<int64_t> strides = {}) {
  return smax::make_view(p, smax::DType::kF64, static_cast<int>(shape.size()), shape.data(),
                         strides.empty() ? nullptr : strides.data());
}

inline std::vector<int64_t> drop_axis(const std::vector<int64_t>& shape, int axis) {
  std::vector<int64_t> out;
  const int r = static_cast<int>(shape.size());
  const int a = axis < 0 ? axis + r : axis;
  for (int d = 0; d < r; ++d) {
    if (d != a) out.push_back(shape[static_cast<size_t>(d)]);
  }
  return out;
}

/// (outer, n, inner) of `shape` around `axis`.
struct Geometry {
  int64_t outer = 1, n = 1, inner = 1;
  Geometry(const std::vector<int64_t>& shape, int axis) {
    const int r = static_cast<int>(shape.size());
    const int a = axis < 0 ? axis + r : axis;
    for (int d = 0; d < a; ++d) outer *= shape[static_cast<size_t>(d)];
    n = shape[static_cast<size_t>(a)];
    for (int d = a + 1; d < r; ++d) inner *= shape[static_cast<size_t>(d)];
  }
  int64_t index(int64_t o, int64_t k, int64_t j) const { return (o * n + k) * inner + j; }
};

// ---------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------

/// Named row distributions (adversarial ones included).
enum class Data {
  kUniform,      ///< U[-4, 4]
  kHigh,         ///< U[90, 100]: naive exp overflows
  kWide,         ///< normal * 20: |t - m| > 16 often (the f32 t - m rounding trap)
  kNegative,     ///< U[-100, -1]
  kConstant,     ///< all 3.25
  kPosInf,       ///< normal, one +inf per row
  kNan,          ///< normal, one NaN per row
  kAllNegInf,    ///< every entry -inf
  kNanInNegInf,  ///< every entry -inf but one NaN (no finite max to carry it)
  kSomeNegInf,   ///< normal, ~30% -inf (and the first entry)
  kDenormal,     ///< denormal magnitudes of both signs
  kHuge,         ///< mixture of +-1e30, +-FLT_MAX, small values
};

inline const char* data_name(Data d) {
  switch (d) {
    case Data::kUniform: return "uniform[-4,4]";
    case Data::kHigh: return "uniform[90,100]";
    case Data::kWide: return "normal*20";
    case Data::kNegative: return "uniform[-100,-1]";
    case Data::kConstant: return "constant";
    case Data::kPosInf: return "one+inf";
    case Data::kNan: return "one-nan";
    case Data::kAllNegInf: return "all-inf";
    case Data::kNanInNegInf: return "nan-in-all-inf";
    case Data::kSomeNegInf: return "some-inf";
    case Data::kDenormal: return "denormal";
    case Data::kHuge: return "huge";
  }
  return "?";
}

inline const std::vector<Data>& all_data() {
  static const std::vector<Data> v = {
      Data::kUniform, Data::kHigh,       Data::kWide,       Data::kNegative,
      Data::kConstant, Data::kPosInf,    Data::kNan,        Data::kAllNegInf,
      Data::kNanInNegInf, Data::kSomeNegInf, Data::kDenormal, Data::kHuge};
  return v;
}

/// Fills `t` row by row along `axis` with distribution `d`.
inline void fill_rows(Tensor& t, int axis, Data d, Rng& rng) {
  const Geometry g(t.shape(), axis);
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t j = 0; j < g.inner; ++j) {
      const int64_t special = g.n > 0 ? rng.index(g.n) : 0;
      for (int64_t k = 0; k < g.n; ++k) {
        float v = 0.0f;
        switch (d) {
          case Data::kUniform: v = rng.uniform(-4.0f, 4.0f); break;
          case Data::kHigh: v = rng.uniform(90.0f, 100.0f); break;
          case Data::kWide: v = 20.0f * rng.normal(); break;
          case Data::kNegative: v = rng.uniform(-100.0f, -1.0f); break;
          case Data::kConstant: v = 3.25f; break;
          case Data::kPosInf: v = k == special ? kInfF : rng.normal(); break;
          case Data::kNan: v = k == special ? kNanF : rng.normal(); break;
          case Data::kAllNegInf: v = -kInfF; break;
          case Data::kNanInNegInf: v = k == special ? kNanF : -kInfF; break;
          case Data::kSomeNegInf:
            v = (k == 0 || rng.bernoulli(0.3)) ? -kInfF : 3.0f * rng.normal();
            break;
          case Data::kDenormal:
            v = rng.uniform(-1.0f, 1.0f) * 1e-39f;  // |v| < FLT_MIN
            break;
          case Data::kHuge: {
            const float choices[] = {1e30f, -1e30f, FLT_MAX, -FLT_MAX, 0.0f, -5.0f};
            v = rng.bernoulli(0.5) ? choices[rng.index(6)] : rng.normal();
            break;
          }
        }
        t.at(g.index(o, k, j)) = v;
      }
    }
  }
}

/// Upstream gradient: normal, never all ones.
inline void fill_normal(Tensor& t, Rng& rng) {
  t.fill([&](int64_t) { return rng.normal(); });
}

// ---------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------

/// The softmax family and its names, as the CLI has them (testing/check.h);
/// all_ops(): softmax, log_softmax, logsumexp, then the two backward ops.
using Op = smax_cli::Op;
using smax_cli::op_name;
inline const std::vector<Op>& all_ops() { return smax_cli::softmax_family(); }
inline bool is_backward(Op op) {
  return op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward;
}

inline const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> v = {Algorithm::kAuto, Algorithm::kThreePassReload,
                                           Algorithm::kThreePassRecompute,
                                           Algorithm::kTwoPass, Algorithm::kOnline};
  return v;
}

inline std::string algo_str(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kThreePassReload: return "three-pass-reload";
    case Algorithm::kThreePassRecompute: return "three-pass-recompute";
    case Algorithm::kTwoPass: return "two-pass";
    case Algorithm::kOnline: return "online";
  }
  return "algorithm(" + std::to_string(static_cast<int>(a)) + ")";
}

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

/// f32 scale the library uses: fl(scale / temperature).
inline float eff_scale(const SoftmaxOptions& o) { return o.scale / o.temperature; }

// ---------------------------------------------------------------------------
// Error metrics. These are the bounds of include/smax/softmax.h, enforced
// exactly (never loosened to make a test pass); the formulas live in
// src/reference/bounds.h (shared with the fuzz harness and `smax run --check`):
//
//  softmax:      |out - ref| <= 1e-36 + 2e-6 * |ref|
//                (relative 2e-6 for ref >= 1e-30; absolute 1e-36 below).
//  log_softmax, logsumexp:
//                |out - ref| <= 2e-6 * (1 + |ref|).
//  softmax_backward (s = fl(scale / temperature), y and dy the f32 inputs,
//  D = <dy, y> of the row):
//                |dx - ref| <= 2e-6 * s * |y| * (|dy| + |D|) + 1e-30,
//  which is the header's bound. Derivation for an f32 kernel: dx is
//  fl(s * fl(y * fl(dy - fl(D^)))) where D^ is the blocked dot; the three f32
//  roundings and the rounding of D^ to f32 cost <= 4u (u = 2^-24 = 6e-8)
//  relative to |y|(|dy| + |D|). The dot itself: f32 products summed in lane
//  chains of <= 16 adds, chains summed in float64, has worst-case error
//  gamma_17 * sum_j |dy_j y_j| (~1e-6 * sum |dy_j y_j|); the header states
//  that term separately (1.02e-6 |y| sum |dy_j y_j| "where <dy, y>
//  cancels") and these tests leave it out. It matters only where |D| and |dy_i| are both tiny
//  next to sum |dy_j y_j| (a cancelling dot). Rounding errors in a chain are
//  of order u * |partial sum| and partial sums of a random gradient are
//  O(|D|), so in practice the error stays within 2e-6 * |D|; a failure of
//  this check is reported together with sum |dy_j y_j| so that case can be
//  told apart from a real bug.
//  log_softmax_backward (S = sum dy, A = sum |dy|, e = exp(y)):
//                |dx - ref| <= 2e-6 * s * (|dy| + e * |S| + e * A) + 1e-30.
//  Derivation: dx = fl(s * fl(dy - fl(e^ * S^))) with e^ the f32 exp (<= 4
//  ulp), S^ the blocked f32/float64 sum rounded to f32: |S^ - S| <=
//  gamma_17 * A + u |S| (gamma_17 = 17u / (1 - 17u) ~ 1.01e-6). Collecting:
//  |err| <= s * (3u |dy| + 7u e |S| + gamma_17 e A) + O(u^2), and every
//  coefficient is below 2e-6. The 1e-30 covers f32 underflow of tiny
//  products and exp(y) flushed to 0 for y < ln(FLT_MIN).
//  Everywhere: NaN in ref <=> NaN in out; a ref of +-inf must be matched
//  exactly (an out of +-inf is accepted for a finite ref only when the ref
//  rounds to +-inf in f32); a ref of exactly 0 where the contract requires it
//  (softmax of -inf / masked logits; backward where y = 0 or y = -inf) must
//  be exactly 0.
// ---------------------------------------------------------------------------

struct CheckResult {
  int64_t failures = 0;
  double worst_ratio = 0.0;  ///< max |err| / bound over finite elements
  std::string first;         ///< description of the first failures
  void fail(int64_t i, double out, double ref, double bound, const std::string& extra = {}) {
    if (failures < 5) {
      std::ostringstream os;
      os.precision(10);
      os << "  [" << i << "] out=" << out << " ref=" << ref << " |err|=" << std::fabs(out - ref)
         << " bound=" << bound << extra << "\n";
      first += os.str();
    }
    ++failures;
  }
};

inline std::string no_extra() { return {}; }

/// Compares one element: special values exactly, finite ones within `bound`.
/// `extra()` describes the element; it is only called on failure.
template <typename Extra = std::string (*)()>
inline void check_element(CheckResult& r, int64_t i, float out_f, double ref, double bound,
                          bool require_exact_zero, Extra extra = no_extra) {
  const double out = static_cast<double>(out_f);
  if (std::isnan(ref) || std::isnan(out)) {
    if (std::isnan(ref) != std::isnan(out)) r.fail(i, out, ref, bound, " (NaN mismatch)" + extra());
    return;
  }
  if (std::isinf(ref)) {
    if (out != ref) r.fail(i, out, ref, bound, " (inf mismatch)" + extra());
    return;
  }
  if (std::isinf(out)) {
    if (static_cast<double>(static_cast<float>(ref)) != out) {
      r.fail(i, out, ref, bound, " (unexpected inf)" + extra());
    }
    return;
  }
  if (require_exact_zero && ref == 0.0) {
    if (out != 0.0) r.fail(i, out, ref, 0.0, " (exact 0 required)" + extra());
    return;
  }
  const double err = std::fabs(out - ref);
  if (bound > 0) r.worst_ratio = std::max(r.worst_ratio, err / bound);
  if (!(err <= bound)) r.fail(i, out, ref, bound, extra());
}

inline ::testing::AssertionResult to_assertion(const CheckResult& r, const std::string& what) {
  if (r.failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << r.failures << " element(s) out of bounds (seed " << base_seed()
         << ")\n"
         << r.first;
}

/// Every element of `out` against `ref` with the bound `bound(ref[i])`.
inline ::testing::AssertionResult check_with_bound(const std::vector<double>& out,
                                                   const std::vector<double>& ref,
                                                   double (*bound)(double), bool require_exact_zero,
                                                   const std::string& what) {
  if (out.size() != ref.size()) {
    return ::testing::AssertionFailure() << what << ": size " << out.size() << " vs "
                                         << ref.size();
  }
  CheckResult r;
  for (size_t i = 0; i < ref.size(); ++i) {
    check_element(r, static_cast<int64_t>(i), static_cast<float>(out[i]), ref[i], bound(ref[i]),
                  require_exact_zero);
  }
  return to_assertion(r, what);
}

inline ::testing::AssertionResult check_softmax(const std::vector<double>& out,
                                                const std::vector<double>& ref,
                                                const std::string& what) {
  return check_with_bound(out, ref, smax::reference::softmax_bound, /*require_exact_zero=*/true,
                          what);
}

/// log_softmax and logsumexp.
inline ::testing::AssertionResult check_log(const std::vector<double>& out,
                                            const std::vector<double>& ref,
                                            const std::string& what) {
  return check_with_bound(out, ref, smax::reference::log_softmax_bound,
                          /*require_exact_zero=*/false, what);
}

/// Backward bounds (see the comment above). y, dy: dense logical f32 inputs.
inline ::testing::AssertionResult check_backward(bool log, const std::vector<double>& out,
                                                 const std::vector<double>& ref,
                                                 const std::vector<double>& y,
                                                 const std::vector<double>& dy,
                                                 const Geometry& g, double s,
                                                 const std::string& what) {
  if (out.size() != ref.size()) {
    return ::testing::AssertionFailure() << what << ": size " << out.size() << " vs "
                                         << ref.size();
  }
  CheckResult r;
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t j = 0; j < g.inner; ++j) {
      smax::reference::BackwardRow row;
      for (int64_t k = 0; k < g.n; ++k) {
        const size_t i = static_cast<size_t>(g.index(o, k, j));
        row.add(y[i], dy[i]);
      }
      for (int64_t k = 0; k < g.n; ++k) {
        const size_t i = static_cast<size_t>(g.index(o, k, j));
        bool exact_zero;
        const double bound = smax_cli::backward_element_bound(log, s, y[i], dy[i], row, &exact_zero);
        auto extra = [&] {
          std::ostringstream os;
          os.precision(10);
          os << " y=" << y[i] << " dy=" << dy[i] << " <dy,y>=" << row.dot
             << " sum|dy*y|=" << row.abs_dot << " sum(dy)=" << row.sum
             << " sum|dy|=" << row.abs_sum;
          return os.str();
        };
        if (exact_zero && !std::isnan(ref[i]) && !std::isnan(out[i])) {
          if (out[i] != 0.0) r.fail(static_cast<int64_t>(i), out[i], ref[i], 0.0, " (exact 0 required)");
          continue;
        }
        check_element(r, static_cast<int64_t>(i), static_cast<float>(out[i]), ref[i], bound,
                      false, extra);
      }
    }
  }
  return to_assertion(r, what);
}

// ---------------------------------------------------------------------------
// Running an op against the reference.
// ---------------------------------------------------------------------------

std::vector<double> reference_forward(Op op, const TensorView& src, const SoftmaxOptions& o);
std::vector<double> reference_backward(Op op, const TensorView& y, const TensorView& dy,
                                       const SoftmaxOptions& o);
void library_forward(Op op, const TensorView& src, const TensorView& dst,
                     const SoftmaxOptions& o);
void library_backward(Op op, const TensorView& y, const TensorView& dy, const TensorView& dx,
                      const SoftmaxOptions& o);
std::vector<double> to_dense(const TensorView& v);

/// For a backward op: the saved forward output y (softmax or log_softmax of
/// `src`, the float64 reference rounded to f32) in `y`'s layout.
void make_saved_output(Op op, const Tensor& src, const SoftmaxOptions& o, Tensor& y);

/// Full check of one case: for a forward op, runs the library on `src` into
/// `dst` (poisoned first) and compares with the reference; for a backward op,
/// `src` holds the logits, y is derived from it (make_saved_output), `dy` is
/// drawn from `rng`, and the library writes into `dst` (dx). Also checks that
/// nothing outside dst's view changed. `what` labels failures.
::testing::AssertionResult check_op(Op op, const Tensor& src, Tensor& dst,
                                    const SoftmaxOptions& o, Rng& rng,
                                    const std::string& what);

/// Convenience: contiguous src of `shape` filled with `data`, contiguous dst.
::testing::AssertionResult check_contiguous(Op op, const std::vector<int64_t>& shape,
                                            int axis, Data data, const SoftmaxOptions& o,
                                            Rng& rng, int64_t misalign = 0);

/// Runs `f` and checks that it throws smax::Error with kInvalidArgument and a
/// message containing `needle`.
::testing::AssertionResult throws_invalid(const std::function<void()>& f,
                                          const std::string& needle);

// ---------------------------------------------------------------------------
// Per-target fixture: value-parameterised over smax::supported_targets().
// ---------------------------------------------------------------------------

/// The best target at program start (the cap from SMAX_MAX_TARGET, if any).
const std::string& initial_target();

class TargetTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;
  void TearDown() override;
};

/// A hand-vector row: |got - want| <= rel |want| + 1e-7 element-wise.
inline void expect_row(const std::vector<float>& got, const std::vector<double>& want,
                       double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + 1e-7) << what << " [" << i << "]";
  }
}

/// Options of the strided 3-D cases with both masks: `axis` counted from the
/// end (axis - 3), scale and temperature, `keep` and `add` as the masks.
inline SoftmaxOptions masked_options(int axis, float scale, float temperature,
                                     const Array<uint8_t>& keep, const Array<float>& add) {
  SoftmaxOptions o;
  o.axis = axis - 3;
  o.scale = scale;
  o.temperature = temperature;
  o.bool_mask = keep.view();
  o.additive_mask = add.view();
  return o;
}

/// The masks of the strided [4, 9, 6] cases: `keep` [9, 1] hides every fourth
/// index of axis 1 from 1 on; `add` [6] is -inf at 2, standard normal elsewhere.
struct AxisMasks {
  Array<uint8_t> keep{std::vector<int64_t>{9, 1}};
  Array<float> add{std::vector<int64_t>{6}};
  explicit AxisMasks(Rng& rng) {
    keep.fill([&](int64_t i) { return static_cast<uint8_t>(i % 4 != 1); });
    add.fill([&](int64_t i) { return i == 2 ? -INFINITY : rng.normal(); });
  }
  SoftmaxOptions options(int axis, float scale, float temperature) const {
    return masked_options(axis, scale, temperature, keep, add);
  }
};

/// Inputs of the thread-count tests: [rows, n] logits, Data::kWide along
/// axis 1 (37 rows, 5 when n > 10000), then a standard normal upstream
/// gradient of the same shape, from `rng`.
struct WideRows {
  int64_t rows;
  Array<float> src, dy;
  WideRows(int64_t n, Rng& rng) : rows(n > 10000 ? 5 : 37), src({rows, n}), dy({rows, n}) {
    fill_rows(src, 1, Data::kWide, rng);
    fill_normal(dy, rng);
  }
};

/// Thread-count tests: the outputs of run(threads, in_place) with 2 and 3
/// threads, and in place with 2, are bit for bit those of run(1, false).
inline void expect_threads_bitwise_equal(
    const std::function<std::vector<float>(int threads, bool in_place)>& run, int64_t n) {
  const std::vector<float> one = run(1, false);
  for (int threads : {2, 3}) {
    const std::vector<float> other = run(threads, false);
    ASSERT_EQ(one.size(), other.size());
    EXPECT_EQ(0, std::memcmp(one.data(), other.data(), one.size() * sizeof(float)))
        << "threads " << threads << " n " << n;
  }
  const std::vector<float> inplace = run(2, true);
  ASSERT_EQ(one.size(), inplace.size());
  EXPECT_EQ(0, std::memcmp(one.data(), inplace.data(), one.size() * sizeof(float)))
      << "in place, n " << n;
}

/// Row lengths of the op sweeps (empty, tiny, around SIMD widths, 32000) and
/// a vocabulary row (128256); sizes_with_vocab(): both.
const std::vector<int64_t> kSweepSizes = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000};
constexpr int64_t kVocab = 128256;
inline std::vector<int64_t> sizes_with_vocab() {
  std::vector<int64_t> v = kSweepSizes;
  v.push_back(kVocab);
  return v;
}

/// Per-target fixture that counts failing checks: record(r) expects r and
/// counts a failure; stop() is true after 10, so one bug does not flood the log.
class RecordingTargetTest : public TargetTest {
 protected:
  int failures_ = 0;
  void record(const ::testing::AssertionResult& r) {
    EXPECT_TRUE(r) << "target " << GetParam();
    if (!r) ++failures_;
  }
  bool stop() const { return failures_ >= 10; }
};

/// gtest name generator for target parameters.
struct TargetName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& info) const {
    std::string s = info.param;
    for (char& c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return s;
  }
};

/// The zero-weight-sum mean problem of the losses (docs/losses.md): 3 rows x
/// 4 classes, targets {1, ignored, 3} whose class weights are both 0, and a
/// bool mask hiding entry (0, 2). Under Reduction::kMean the denominator is
/// 0: with EmptyMean::kNan (zero = false) every unmasked entry of the counted
/// rows 0 and 2 has a NaN gradient, as in PyTorch; every other entry, and
/// every entry with EmptyMean::kZero (zero = true), is exactly 0.
struct ZeroWeightSumProblem {
  const float xv[12] = {1, 2, 3, 0.5f, -1, 2, 0, 0, 0.25f, -0.5f, 1, 2};
  const int64_t tv[3] = {1, -100, 3};
  const float wv[4] = {1, 0, 1, 0};
  const uint8_t keep[12] = {1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const float one = 1.0f;

  ZeroWeightSumProblem() = default;
  ZeroWeightSumProblem(const ZeroWeightSumProblem&) = delete;  // views point inside
  ZeroWeightSumProblem& operator=(const ZeroWeightSumProblem&) = delete;

  smax::TensorView x() const { return smax::make_view(xv, {3, 4}); }
  smax::TensorView target() const { return smax::make_index_view(tv, {3}); }
  smax::TensorView weight() const { return smax::make_view(wv, {4}); }
  smax::TensorView dloss() const { return smax::make_view(&one, {}); }
  smax::SoftmaxOptions options() const {
    smax::SoftmaxOptions o;
    o.bool_mask = smax::make_bool_view(keep, {3, 4});
    return o;
  }
  smax::LossOptions loss_options(bool zero) const {
    smax::LossOptions lo;
    lo.weight = weight();
    if (zero) lo.empty_mean = smax::EmptyMean::kZero;
    return lo;
  }
  /// Checks a library gradient `got` and the oracle's `want` (12 entries,
  /// row-major) against the pattern above.
  void expect_gradient(const float* got, const std::vector<double>& want, bool zero,
                       const std::string& what) const {
    for (int i = 0; i < 12; ++i) {
      const bool nan = !zero && i / 4 != 1 && keep[i] != 0;
      const std::string at = what + (zero ? " kZero " : " kNan ") + std::to_string(i);
      if (nan) {
        EXPECT_TRUE(std::isnan(got[i])) << at << ": " << got[i];
        EXPECT_TRUE(std::isnan(want[static_cast<size_t>(i)])) << at << " oracle";
      } else {
        EXPECT_EQ(got[i], 0.0f) << at;
        EXPECT_EQ(want[static_cast<size_t>(i)], 0.0) << at << " oracle";
      }
    }
  }
};


#define SMAX_INSTANTIATE_PER_TARGET(suite)                                          \
  INSTANTIATE_TEST_SUITE_P(Targets, suite, ::testing::ValuesIn(smax::supported_targets()), \
                           ::smax_test::TargetName())

}  // namespace smax_test

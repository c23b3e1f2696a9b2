// tools/smax/compare_row.cc: see compare_row.h.
#include "compare_row.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "core/convert.h"
#include "reference/reference.h"
#include "typed_call.h"

namespace smax_cli {
namespace {

constexpr double kF64RelBound = 1e-14;   // include/smax/softmax.h, "float64"
constexpr double kF64TinyOutput = 1e-300;

// Floats that hold n elements of `dtype` (FloatBuffer is the aligned store).
size_t words(smax::DType dtype, int64_t n) {
  return (static_cast<size_t>(n) * static_cast<size_t>(smax::dtype_size(dtype)) + 3) / 4;
}

// Softmax of x[0..n) in long double: max, a Kahan-compensated sum of the
// exps, divide. The generated logits are finite, so no special values.
std::vector<long double> softmax_long_double(const float* x, int64_t n) {
  std::vector<long double> out(static_cast<size_t>(n));
  long double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max<long double>(m, x[i]);
  long double sum = 0, comp = 0;
  for (int64_t i = 0; i < n; ++i) {
    const long double e = std::exp(static_cast<long double>(x[i]) - m);
    out[static_cast<size_t>(i)] = e;
    const long double y = e - comp;
    const long double t = sum + y;
    comp = (t - sum) - y;
    sum = t;
  }
  for (long double& v : out) v /= sum;
  return out;
}

// Sign-magnitude bits of a `width`-bit float mapped to an unsigned integer
// that counts representable values in order (+0 and -0 coincide).
uint64_t ordered(uint64_t bits, int width) {
  const uint64_t base = uint64_t{1} << (width - 1);
  const uint64_t magnitude = bits & (base - 1);
  return (bits & base) != 0 ? base - magnitude : base + magnitude;
}

uint64_t ulp_distance(uint64_t got_bits, uint64_t ref_bits, int width, bool got_nan) {
  if (got_nan) return RowError::kNoUlps;  // the reference is never NaN here
  const uint64_t a = ordered(got_bits, width), b = ordered(ref_bits, width);
  return a > b ? a - b : b - a;
}

uint16_t bits16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// One f64 element against the long double reference, as check.cc's
// accumulate does for f32 (NaN where the reference is a number: infinite).
void add_f64(ErrorStats& st, int64_t i, double got, long double want) {
  const double err = std::isnan(got) ? HUGE_VAL : static_cast<double>(std::fabs(got - want));
  const double ref = static_cast<double>(want);
  const double bound = ref >= kF64TinyOutput ? kF64RelBound * ref : kF64TinyOutput;
  record_error(st, i, got, ref, err, bound, kF64TinyOutput);
}

}  // namespace

CompareRow::CompareRow(smax::DType dtype, int64_t n, const Dist& dist, uint64_t seed)
    : dtype_(dtype), n_(n), src_(words(dtype, n)), dst_(words(dtype, n)) {
  if (dtype == smax::DType::kF32) {
    fill(src_.data(), src_.size(), dist, seed);
    ref_ = smax::reference::softmax(src_view());
    return;
  }
  FloatBuffer values(static_cast<size_t>(n));
  fill(values.data(), values.size(), dist, seed);
  const std::vector<unsigned char> bytes = round_to_dtype(values.data(), values.size(), dtype);
  std::memcpy(src_.data(), bytes.data(), row_bytes());
  if (dtype == smax::DType::kF64) {
    ref_ld_ = softmax_long_double(values.data(), n);
  } else {
    ref_ = smax::reference::softmax(
        smax::make_view(values.data(), smax::DType::kF32, 1, &n_, nullptr));
  }
}

size_t CompareRow::row_bytes() const {
  return static_cast<size_t>(n_) * static_cast<size_t>(smax::dtype_size(dtype_));
}

smax::TensorView CompareRow::src_view() {
  return smax::make_view(src_.data(), dtype_, 1, &n_, nullptr);
}

smax::TensorView CompareRow::dst_view() {
  return smax::make_view(dst_.data(), dtype_, 1, &n_, nullptr);
}

void CompareRow::naive() {
  void* s = src_.data();
  void* d = dst_.data();
  switch (dtype_) {
    case smax::DType::kF64:
      naive_softmax_f64(static_cast<const double*>(s), static_cast<double*>(d), n_);
      return;
    case smax::DType::kBF16:
      naive_softmax_bf16(static_cast<const uint16_t*>(s), static_cast<uint16_t*>(d), n_);
      return;
    case smax::DType::kF16:
      naive_softmax_f16(static_cast<const uint16_t*>(s), static_cast<uint16_t*>(d), n_);
      return;
    default: naive_softmax(src_.data(), dst_.data(), n_); return;
  }
}

void CompareRow::copy() { std::memcpy(dst_.data(), src_.data(), row_bytes()); }

void CompareRow::poison() {
  const size_t size = static_cast<size_t>(smax::dtype_size(dtype_));
  auto* d = static_cast<unsigned char*>(static_cast<void*>(dst_.data()));
  for (int64_t i = 0; i < n_; ++i) {
    smax::detail::store_f32(d + static_cast<size_t>(i) * size, dtype_,
                            std::numeric_limits<float>::quiet_NaN());
  }
}

RowError CompareRow::check() const {
  RowError r;
  const auto* d = static_cast<const unsigned char*>(static_cast<const void*>(dst_.data()));
  if (dtype_ == smax::DType::kF32) {
    r.err = check_forward(Op::kSoftmax, dst_.data(), ref_);
    return r;
  }
  r.has_ulps = true;
  if (dtype_ == smax::DType::kF64) {
    for (int64_t i = 0; i < n_; ++i) {
      double got;
      std::memcpy(&got, d + static_cast<size_t>(i) * 8, 8);
      const long double want = ref_ld_[static_cast<size_t>(i)];
      add_f64(r.err, i, got, want);
      const double rounded = static_cast<double>(want);  // to nearest, once
      uint64_t got_bits, ref_bits;
      std::memcpy(&got_bits, &got, 8);
      std::memcpy(&ref_bits, &rounded, 8);
      r.max_ulps = std::max(r.max_ulps, ulp_distance(got_bits, ref_bits, 64, std::isnan(got)));
    }
    return r;
  }
  // f16 / bf16: the reference rounded once (round-to-odd f32, then nearest
  // even: convert.h's store_f64) and the output, as bit patterns.
  const bool bf16 = dtype_ == smax::DType::kBF16;
  std::vector<double> got(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) {
    const uint16_t out = bits16(d + static_cast<size_t>(i) * 2);
    const float value = bf16 ? smax::detail::bf16_to_f32(out) : smax::detail::f16_to_f32(out);
    got[static_cast<size_t>(i)] = value;
    const float odd = smax::detail::f64_to_f32_round_odd(ref_[static_cast<size_t>(i)]);
    const uint16_t ref = bf16 ? smax::detail::f32_to_bf16(odd) : smax::detail::f32_to_f16(odd);
    r.max_ulps = std::max(r.max_ulps, ulp_distance(out, ref, 16, std::isnan(value)));
  }
  r.err = check_forward(Op::kSoftmax, got.data(), ref_, dtype_);
  return r;
}

std::string row_bound_text(smax::DType dtype) {
  char buf[128];
  if (dtype == smax::DType::kF64) {
    std::snprintf(buf, sizeof buf, "relative error <= %g for outputs >= %g", kF64RelBound,
                  kF64TinyOutput);
  } else if (dtype == smax::DType::kF32) {
    std::snprintf(buf, sizeof buf, "relative error <= %g for outputs >= %g", kRelBound,
                  kTinyOutput);
  } else {
    std::snprintf(buf, sizeof buf, "relative error <= %g for outputs >= %g, plus half an ulp of %s",
                  kRelBound, kTinyOutput, smax::dtype_name(dtype));
  }
  return buf;
}

const char* dtype_long_name(smax::DType dtype) {
  switch (dtype) {
    case smax::DType::kF64: return "float64";
    case smax::DType::kF16: return "float16";
    case smax::DType::kBF16: return "bfloat16";
    default: return "float32";
  }
}

}  // namespace smax_cli

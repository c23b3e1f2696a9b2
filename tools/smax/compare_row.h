// tools/smax/compare_row.h: one row of `smax compare` in its storage dtype
// (--dtype f32, f64, f16 or bf16): the buffers, the naive loop on them, and
// the error of an output against the reference.
//
// Contract:
//  * The row is generated in f32 (data.h: --dist, --seed), then rounded to
//    the dtype once (testing/typed_call.h round_to_dtype); src and dst hold
//    n elements of the dtype, 64-byte aligned. f64 holds the f32 values
//    exactly.
//  * The reference is computed once, at construction, from those rounded
//    values: float64 (smax::reference::softmax) for f32, f16 and bf16; long
//    double with a compensated sum for f64 (the float64 bound needs more
//    bits than float64 has).
//  * check() compares dst with it: f32 and f16 / bf16 through check.h's
//    check_forward (the f32 bound, plus half an ulp of f16 / bf16), f64
//    against the float64 bound of include/smax/softmax.h (relative
//    <= 1e-14 for outputs >= 1e-300, absolute <= 1e-300 below); for every
//    dtype but f32 it also counts the max distance in ulps: the number of
//    representable values of the dtype between an output and the reference
//    rounded to nearest in the dtype.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "check.h"
#include "data.h"
#include "smax/tensor.h"

namespace smax_cli {

/// Error of one output row.
struct RowError {
  ErrorStats err;
  bool has_ulps = false;  ///< false for f32 (its output format has no ulps column)
  uint64_t max_ulps = 0;  ///< kNoUlps when some element is NaN where the reference is not
  static constexpr uint64_t kNoUlps = std::numeric_limits<uint64_t>::max();
};

class CompareRow {
 public:
  CompareRow(smax::DType dtype, int64_t n, const Dist& dist, uint64_t seed);

  smax::DType dtype() const { return dtype_; }
  int64_t size() const { return n_; }
  /// Bytes of one row in the dtype (what memcpy copies).
  size_t row_bytes() const;
  smax::TensorView src_view();
  smax::TensorView dst_view();

  /// The naive loop of the dtype (commands.h) from src into dst.
  void naive();
  /// memcpy of the row's bytes from src into dst.
  void copy();
  /// Fills dst with NaN (a variant that forgot to write shows up as errors).
  void poison();
  /// dst against the reference.
  RowError check() const;

 private:
  smax::DType dtype_;
  int64_t n_;
  FloatBuffer src_, dst_;           // the row in its dtype (f32: floats)
  std::vector<double> ref_;         // f32, f16, bf16
  std::vector<long double> ref_ld_;  // f64
};

/// The bound `ok` applies for the dtype, as one phrase for the report,
/// e.g. "relative error <= 2e-06 for outputs >= 1e-30, plus half an ulp of bf16".
std::string row_bound_text(smax::DType dtype);

/// "float32", "float64", "float16", "bfloat16".
const char* dtype_long_name(smax::DType dtype);

}  // namespace smax_cli

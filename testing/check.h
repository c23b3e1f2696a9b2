// testing/check.h: compare an op's f32 output with the float64 reference
// against the error bounds documented in include/smax/softmax.h (the
// formulas: src/reference/bounds.h, shared with the tests and the fuzz
// harnesses).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/bounds.h"

namespace smax_cli {

/// The documented bounds' constants (include/smax/softmax.h), for the text
/// that states them (bound_text, `smax compare`).
inline constexpr double kRelBound = 2e-6;        ///< softmax relative / log ops absolute factor
inline constexpr double kTinyOutput = 1e-30;     ///< softmax: relative error only above this
inline constexpr double kTinyAbsBound = 1e-36;   ///< softmax: absolute error below kTinyOutput
inline constexpr double kBackwardFloor = 1e-30;  ///< backward: absolute slack

enum class Op { kSoftmax, kLogSoftmax, kLogsumexp, kSoftmaxBackward, kLogSoftmaxBackward };

/// "softmax" ... "log_softmax_backward" -> Op. Any other name throws
/// UsageError: "unknown op 'X'; did you mean 'Y'? (`smax info --ops` lists
/// all ops)" (the suggestion is drawn from every op, table ops included).
Op parse_op(const std::string& name);
const char* op_name(Op op);
/// One line for `smax info --ops`, e.g. "exp(x - max) / sum exp(x - max)".
const char* op_summary(Op op);
/// The softmax family in help order (the ops that take --algo).
const std::vector<Op>& softmax_family();
/// Ideal memory traffic per source element: bytes read + bytes written
/// (softmax / log_softmax 8, logsumexp 4, backward 12).
int bytes_per_element(Op op);
/// One line stating the bound, e.g. "rel <= 2e-06 (outputs >= 1e-30)".
std::string bound_text(Op op);

/// A contiguous row-major tensor seen as (outer, n, inner) around `axis`.
struct Geometry {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
  int axis = 0;  ///< normalised (non-negative)
};
/// Throws UsageError when `axis` is out of range for the shape's rank.
Geometry make_geometry(const std::vector<int64_t>& shape, int64_t axis);

/// Row-major strides (in elements) of `shape`; a 0-sized dim counts as 1.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape);

struct ErrorStats {
  double max_rel_err = 0;   ///< max |got - ref| / |ref| over |ref| >= kTinyOutput
  double max_abs_err = 0;   ///< max |got - ref|
  int64_t violations = 0;   ///< elements whose error exceeds their bound
  int64_t worst = -1;       ///< index with the largest error / bound ratio
  double worst_ratio = 0;   ///< that ratio (<= 1 means within bounds)
  double worst_got = 0, worst_ref = 0;
  bool within_bounds() const { return violations == 0; }
};

/// Adds element i (its error err = |got - ref|, computed by the caller, and
/// its bound) to st: max_abs_err, max_rel_err over |ref| >= tiny_output,
/// violations (err > bound) and the worst err / bound ratio.
void record_error(ErrorStats& st, int64_t i, double got, double ref, double err, double bound,
                  double tiny_output);

/// Forward ops: `got` and `ref` hold the same number of elements in the same
/// (logical, row-major) order.
ErrorStats check_forward(Op op, const float* got, const std::vector<double>& ref);

/// Backward ops: y and dy are the op's f32 inputs (contiguous, geometry g),
/// s = |scale / temperature| as rounded by the library (f32). The bounds are
/// src/reference/bounds.h's (softmax_backward: its bound plus the header's
/// dot term; log_softmax_backward: its bound).
ErrorStats check_backward(Op op, const float* got, const std::vector<double>& ref,
                          const float* y, const float* dy, const Geometry& g, double s);

/// The same for an output stored in `out_dtype` (`got` widened to double):
/// each bound plus half an ulp of `out_dtype` (docs/dtypes.md; f32 and f64:
/// the f32 bound as is).
ErrorStats check_forward(Op op, const double* got, const std::vector<double>& ref,
                         smax::DType out_dtype);
ErrorStats check_backward(Op op, const double* got, const std::vector<double>& ref,
                          const float* y, const float* dy, const Geometry& g, double s,
                          smax::DType out_dtype);

/// One element's backward bound of softmax_backward (log = false) or
/// log_softmax_backward (log = true), reference/bounds.h's without the
/// separate dot term; *exact_zero: whether the element must be exactly 0
/// (y = 0, resp. y = -inf).
double backward_element_bound(bool log, double s, double y, double dy,
                              const smax::reference::BackwardRow& row, bool* exact_zero);

}  // namespace smax_cli

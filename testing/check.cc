// testing/check.cc: error metrics against the float64 reference.
#include "check.h"

#include "typed_call.h"
#include "op_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "args.h"
#include "reference/bounds.h"
#include "suggest.h"

namespace smax_cli {
namespace {

// Accumulates one element with its own bound. Matching special values (both
// NaN, or the same infinity) count as exact.
void accumulate(ErrorStats& st, int64_t i, double got, double ref, double bound) {
  const double g = got;
  double err;
  if (std::isnan(ref) || std::isnan(g)) {
    err = (std::isnan(ref) && std::isnan(g)) ? 0.0 : HUGE_VAL;
  } else if (std::isinf(ref) || std::isinf(g)) {
    err = (g == ref) ? 0.0 : HUGE_VAL;
  } else {
    err = std::fabs(g - ref);
  }
  record_error(st, i, g, ref, err, bound, kTinyOutput);
}

}  // namespace

void record_error(ErrorStats& st, int64_t i, double got, double ref, double err, double bound,
                  double tiny_output) {
  if (err > st.max_abs_err || std::isnan(err)) st.max_abs_err = err;
  if (std::fabs(ref) >= tiny_output && !std::isinf(ref)) {
    const double rel = err / std::fabs(ref);
    if (rel > st.max_rel_err) st.max_rel_err = rel;
  }
  const double ratio = err == 0 ? 0.0 : err / bound;
  if (!(ratio <= 1.0)) ++st.violations;
  if (ratio > st.worst_ratio || st.worst < 0) {
    st.worst_ratio = ratio;
    st.worst = i;
    st.worst_got = got;
    st.worst_ref = ref;
  }
}

Op parse_op(const std::string& name) {
  if (name == "softmax") return Op::kSoftmax;
  if (name == "log_softmax") return Op::kLogSoftmax;
  if (name == "logsumexp") return Op::kLogsumexp;
  if (name == "softmax_backward") return Op::kSoftmaxBackward;
  if (name == "log_softmax_backward") return Op::kLogSoftmaxBackward;
  throw UsageError("unknown op '" + name + "'" + did_you_mean(name, all_op_names()) +
                   " (`smax info --ops` lists all ops)");
}

const char* op_summary(Op op) {
  switch (op) {
    case Op::kSoftmax: return "exp(x - max) / sum exp(x - max)";
    case Op::kLogSoftmax: return "x - logsumexp(x)";
    case Op::kLogsumexp: return "log sum exp(x), one value per row";
    case Op::kSoftmaxBackward: return "VJP of softmax (from y)";
    case Op::kLogSoftmaxBackward: return "VJP of log_softmax (from y)";
  }
  return "?";
}

const std::vector<Op>& softmax_family() {
  static const std::vector<Op> ops = {Op::kSoftmax, Op::kLogSoftmax, Op::kLogsumexp,
                                      Op::kSoftmaxBackward, Op::kLogSoftmaxBackward};
  return ops;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kSoftmax: return "softmax";
    case Op::kLogSoftmax: return "log_softmax";
    case Op::kLogsumexp: return "logsumexp";
    case Op::kSoftmaxBackward: return "softmax_backward";
    case Op::kLogSoftmaxBackward: return "log_softmax_backward";
  }
  return "?";
}

int bytes_per_element(Op op) {
  switch (op) {
    case Op::kSoftmax:
    case Op::kLogSoftmax: return 8;
    case Op::kLogsumexp: return 4;
    case Op::kSoftmaxBackward:
    case Op::kLogSoftmaxBackward: return 12;
  }
  return 0;
}

std::string bound_text(Op op) {
  switch (op) {
    case Op::kSoftmax:
      return "abs <= " + format_number(kTinyAbsBound) + " + " + format_number(kRelBound) + " * |ref|";
    case Op::kLogSoftmax:
    case Op::kLogsumexp:
      return "abs <= " + format_number(kRelBound) + " * (1 + |value|)";
    case Op::kSoftmaxBackward:
      return "abs <= " + format_number(kRelBound) + " * s * |y| * (|dy| + |<dy,y>|) + " +
             format_number(kBackwardFloor) + " + 1.02e-06 * s * |y| * sum |dy*y| (dot term)";
    case Op::kLogSoftmaxBackward:
      return "abs <= " + format_number(kRelBound) + " * s * (|dy| + exp(y) * (|sum dy| + sum |dy|)) + " +
             format_number(kBackwardFloor);
  }
  return "";
}

Geometry make_geometry(const std::vector<int64_t>& shape, int64_t axis) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < -rank || axis >= rank) {
    throw UsageError("--axis: axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(rank) + " (shape " + format_shape(shape) + ")");
  }
  Geometry g;
  g.axis = static_cast<int>(axis < 0 ? axis + rank : axis);
  for (int d = 0; d < g.axis; ++d) g.outer *= shape[d];
  g.n = shape[g.axis];
  for (int64_t d = g.axis + 1; d < rank; ++d) g.inner *= shape[d];
  return g;
}

namespace {

// A narrow output's rounding: half an ulp of its dtype (typed_call.h).
double rounding(smax::DType dtype, double got, double ref) {
  return half_ulp(dtype, std::max(std::fabs(got), std::fabs(ref)));
}

template <typename T>
ErrorStats forward_stats(Op op, const T* got, const std::vector<double>& ref, smax::DType dtype) {
  ErrorStats st;
  const int64_t count = static_cast<int64_t>(ref.size());
  for (int64_t i = 0; i < count; ++i) {
    const double r = ref[i];
    const double bound = op == Op::kSoftmax ? smax::reference::softmax_bound(r)
                                            : smax::reference::log_softmax_bound(r);
    accumulate(st, i, got[i], r, bound + rounding(dtype, got[i], r));
  }
  return st;
}

template <typename T>
ErrorStats backward_stats(Op op, const T* got, const std::vector<double>& ref, const float* y,
                          const float* dy, const Geometry& g, double s, smax::DType dtype) {
  ErrorStats st;
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t j = 0; j < g.inner; ++j) {
      const int64_t base = o * g.n * g.inner + j;
      smax::reference::BackwardRow row;
      for (int64_t k = 0; k < g.n; ++k) {
        const int64_t i = base + k * g.inner;
        row.add(y[i], dy[i]);
      }
      for (int64_t k = 0; k < g.n; ++k) {
        const int64_t i = base + k * g.inner;
        const double yi = y[i], dyi = dy[i];
        // softmax_backward: the header's bound plus its documented dot term.
        const double bound =
            op == Op::kSoftmaxBackward
                ? smax::reference::softmax_backward_bound(s, yi, dyi, row) +
                      smax::reference::softmax_backward_dot_gap(s, yi, row)
                : smax::reference::log_softmax_backward_bound(s, yi, dyi, row);
        accumulate(st, i, got[i], ref[i], bound + rounding(dtype, got[i], ref[i]));
      }
    }
  }
  return st;
}

}  // namespace

ErrorStats check_forward(Op op, const float* got, const std::vector<double>& ref) {
  return forward_stats(op, got, ref, smax::DType::kF32);
}
ErrorStats check_forward(Op op, const double* got, const std::vector<double>& ref,
                         smax::DType out_dtype) {
  return forward_stats(op, got, ref, out_dtype);
}
ErrorStats check_backward(Op op, const float* got, const std::vector<double>& ref,
                          const float* y, const float* dy, const Geometry& g, double s) {
  return backward_stats(op, got, ref, y, dy, g, s, smax::DType::kF32);
}
ErrorStats check_backward(Op op, const double* got, const std::vector<double>& ref,
                          const float* y, const float* dy, const Geometry& g, double s,
                          smax::DType out_dtype) {
  return backward_stats(op, got, ref, y, dy, g, s, out_dtype);
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    st[d] = s;
    s *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

double backward_element_bound(bool log, double s, double y, double dy,
                              const smax::reference::BackwardRow& row, bool* exact_zero) {
  if (!log) {
    *exact_zero = y == 0.0;
    return smax::reference::softmax_backward_bound(s, y, dy, row);
  }
  *exact_zero = y == -INFINITY;
  return smax::reference::log_softmax_backward_bound(s, y, dy, row);
}

}  // namespace smax_cli

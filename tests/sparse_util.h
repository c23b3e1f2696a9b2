// tests/sparse_util.h: helpers and the per-target fixture shared by
// tests/test_sparse*.cc, which test
// sparse normalisers (include/smax/sparse.h) against
// the float64 oracles of src/reference/sparse.h and the hand vectors of
// docs/vectors.md, on every SIMD target. Bounds (u = 2^-24), as stated in the header:
//   sparsemax / entmax15 / entmax_bisect:  |y - ref| <= 2u |ref| + 1e-16 (64 + n) max(1, p),
//                                          p = 1/(alpha-1) (sparsemax 1, entmax15 2)
//   sparse_softmax:                        |y - ref| <= 2e-6 |ref| + 1e-36,
//                                          exact 0 off the kept set
//   backward:  |dx - ref| <= 2u |ref| + 1e-15 (n + 100 (1 + |2 - alpha|)) s w_i G + 1e-30
//              (w_i = y_i^(2-alpha), G = sum_j w_j |dy_j| / sum w; top-k:
//              2e-6 s w_i (|dy_i| + |q|) + 1e-30, q = <dy,w>/sum w); dalpha:
//              1e-6 (|ref| + sum_i |dy_i| (|y_i - p~_i|/(a-1)^2 + |S_i - p~_i H|/(a-1)))
//   losses:    |L - ref| <= 1e-6 (1 + |ref|) (top-k 2e-6 (1 + |ref|));
//              gradients 2u |ref| + |c s| A (A the forward's absolute term;
//              top-k 2e-6 (|ref| + |c s|))
// and exact 0 (output and gradient) at masked entries.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "reference/bounds.h"
#include "reference/reference.h"
#include "reference/rows.h"
#include "kernels/sparse.h"
#include "ops/sparse/sparse_rows.h"
#include "reference/sparse.h"
#include "smax/sparse.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::EntmaxBisectOptions;
using smax::LossOptions;
using smax::Reduction;
namespace ref = smax::reference;
using RefSpec = ref::SparseLossSpec;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

// ---------------------------------------------------------------------------
// The ops under test, as one family of cases.
// ---------------------------------------------------------------------------
struct Case {
  enum Which { kSparsemax, kEntmax15, kBisect, kTopK } which;
  double alpha = 2.0;  // kBisect
  int64_t k = 1;       // kTopK
  std::string name() const {
    switch (which) {
      case kSparsemax: return "sparsemax";
      case kEntmax15: return "entmax15";
      case kBisect: return "entmax_bisect(alpha=" + std::to_string(alpha) + ")";
      case kTopK: return "sparse_softmax(k=" + std::to_string(k) + ")";
    }
    return "?";
  }
  bool topk() const { return which == kTopK; }
  double grad_alpha() const {
    // The library's alpha is an f32 parameter.
    return which == kSparsemax ? 2.0
           : which == kEntmax15 ? 1.5
           : which == kBisect   ? static_cast<double>(static_cast<float>(alpha))
                                : 1.0;
  }
  EntmaxBisectOptions bisect() const {
    EntmaxBisectOptions p;
    p.alpha = static_cast<float>(alpha);
    return p;
  }
  RefSpec spec() const {
    RefSpec s;
    s.which = static_cast<RefSpec::Which>(which);
    s.bisect = bisect();
    s.k = k;
    return s;
  }
};

inline const std::vector<Case>& all_cases() {
  static const std::vector<Case> v = {
      {Case::kSparsemax},      {Case::kEntmax15},      {Case::kBisect, 1.5}, {Case::kBisect, 1.25},
      {Case::kBisect, 2.0},    {Case::kBisect, 3.0},   {Case::kBisect, 1.1}, {Case::kTopK, 2.0, 1},
      {Case::kTopK, 2.0, 3},   {Case::kTopK, 2.0, 40}};
  return v;
}

inline void forward(const Case& c, const TensorView& src, const TensorView& dst, const SoftmaxOptions& o) {
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax(src, dst, o); break;
    case Case::kEntmax15: smax::entmax15(src, dst, o); break;
    case Case::kBisect: smax::entmax_bisect(src, dst, c.bisect(), o); break;
    case Case::kTopK: smax::sparse_softmax(src, dst, c.k, o); break;
  }
}

inline std::vector<double> reference_fwd(const Case& c, const TensorView& src, const SoftmaxOptions& o) {
  switch (c.which) {
    case Case::kSparsemax: return ref::sparsemax(src, o);
    case Case::kEntmax15: return ref::entmax15(src, o);
    case Case::kBisect: return ref::entmax_bisect(src, c.bisect(), o);
    case Case::kTopK: return ref::sparse_softmax(src, c.k, o);
  }
  return {};
}

inline void backward(const Case& c, const TensorView& y, const TensorView& dy, const TensorView& dx,
              const SoftmaxOptions& o) {
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax_backward(y, dy, dx, o); break;
    case Case::kEntmax15: smax::entmax15_backward(y, dy, dx, o); break;
    case Case::kBisect: smax::entmax_bisect_backward(y, dy, dx, std::nullopt, c.bisect(), o); break;
    case Case::kTopK: smax::sparse_softmax_backward(y, dy, dx, o); break;
  }
}

// Elementwise check of a forward output. `masked` marks entries whose logit
// is -inf (they must be exactly 0 unless the row is NaN).
// Absolute term of the candidate-set ops: the float64 thresholds of the
// library and of the oracle differ by rounding ~n * 1e-16, amplified by the
// power p = 1/(alpha-1) (>= 1) of the output map (ref::entmax_forward_bound
// at 0).
// The alpha of the forward bound (top-k: p = 1, as sparsemax).
inline double bound_alpha(const Case& c) { return c.topk() ? 2.0 : c.grad_alpha(); }
inline double abs_term(const Case& c, int64_t n) { return ref::entmax_forward_bound(0.0, bound_alpha(c), n); }
// The forward bound of the candidate-set ops (include/smax/sparse.h).
inline double entmax_bound(const Case& c, double e, int64_t n) {
  return ref::entmax_forward_bound(e, bound_alpha(c), n);
}

inline ::testing::AssertionResult check_fwd(const Case& c, const std::vector<double>& out,
                                     const std::vector<double>& expect,
                                     const std::string& what, int64_t n) {
  if (out.size() != expect.size()) return ::testing::AssertionFailure() << what << ": size";
  CheckResult r;
  for (size_t i = 0; i < expect.size(); ++i) {
    const double e = expect[i];
    const double bound = c.topk() ? ref::softmax_bound(e) : entmax_bound(c, e, n);
    check_element(r, static_cast<int64_t>(i), static_cast<float>(out[i]), e, bound,
                  /*require_exact_zero=*/c.topk());
  }
  return to_assertion(r, what + " " + c.name());
}

// Zeros required at masked entries of a dense logits array.
inline ::testing::AssertionResult check_masked_zero(const std::vector<double>& logits,
                                             const std::vector<double>& out,
                                             const std::vector<double>& expect) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == -kInfD && !std::isnan(expect[i]) && out[i] != 0.0) {
      return ::testing::AssertionFailure() << "masked entry " << i << " = " << out[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs one forward case on a tensor; checks values and guards.
inline ::testing::AssertionResult run_case(const Case& c, const Tensor& src, Tensor& dst,
                                    const SoftmaxOptions& o, const std::string& what) {
  dst.poison();
  forward(c, src.view(), dst.view(), o);
  if (!dst.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const auto expect = reference_fwd(c, src.view(), o);
  std::vector<double> out(static_cast<size_t>(dst.numel()));
  for (int64_t i = 0; i < dst.numel(); ++i) out[static_cast<size_t>(i)] = dst.at(i);
  const int64_t n = src.shape()[static_cast<size_t>(o.axis < 0 ? o.axis + static_cast<int64_t>(src.shape().size()) : o.axis)];
  auto res = check_fwd(c, out, expect, what, n);
  if (!res) return res;
  SoftmaxOptions lo = o;
  const auto R = ref::ref_rows("t", src.view(), lo);
  return check_masked_zero(R.scatter(R.values), out, expect);
}

inline std::vector<double> dense(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.at(i);
  return v;
}

// Rows with many ties: small integers.
inline void fill_ties(Tensor& t, Rng& rng) {
  t.fill([&](int64_t) { return static_cast<float>(rng.index(4)) * 0.5f; });
}

class Sparse : public TargetTest {};

}  // namespace
}  // namespace smax_test

// src/reference/rows.h: the row view of an input that every float64 oracle
// of a row-wise op starts from (normalisers, losses, samplers).
//
// ref_rows() validates like the library and returns, for each row of `src`
// over options.axis (rows in row-major order over the other dims, the same
// order as the library's RowArgs::row), the row's values widened to double:
//  * with `logits` true: the f32 logits the library forms,
//    t = fl(fl(x * s) + mask) with s = fl(scale / temperature), and -inf
//    where the bool mask is 0 (exactly SoftmaxOptions' semantics);
//  * with `logits` false: x itself (saved outputs, upstream gradients).
// Under Float64Semantics (below) the oracles model the float64 paths the
// ops take for f64 inputs instead: logits t = x s + mask in double with
// s = double(scale) / double(temperature), and each oracle's own f32
// roundings of derived quantities (SSMax's c, softplus's lambda and z, the
// sigmoid bias, Gumbel-softmax's t + g, the samplers' t / T) kept in double.
// scatter() puts rows x n values back into the dense row-major logical
// layout of src's shape (what every oracle returns); map_rows() runs a row
// oracle over every row and scatters the results.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::reference {

/// True while a Float64Semantics(true) is alive on this thread.
bool float64_semantics() noexcept;
/// Scoped switch (thread-local, nests): the oracles called while it is alive
/// model the float64 paths (`on`) or the f32 ones (`on` false, the default).
class Float64Semantics {
 public:
  explicit Float64Semantics(bool on);
  ~Float64Semantics();
  Float64Semantics(const Float64Semantics&) = delete;
  Float64Semantics& operator=(const Float64Semantics&) = delete;

 private:
  bool saved_;
};

struct RefRows {
  int64_t rows = 0;
  int64_t n = 0;
  int axis = 0;
  std::vector<int64_t> shape;   ///< src's logical shape (rank >= 1)
  std::vector<double> values;   ///< rows * n, row r at [r * n, (r + 1) * n)
  double scale = 1.0;           ///< s as a double (the f32 value; float64 semantics: the double)

  const double* row(int64_t r) const { return values.data() + r * n; }
  /// Row r's n values as a vector.
  std::vector<double> row_copy(int64_t r) const { return {row(r), row(r) + n}; }
  /// rows x n (row-major) -> dense logical layout of `shape`.
  std::vector<double> scatter(const std::vector<double>& by_row) const;
};

/// Runs fn(r) -> n values for every row r of R, in row order, and
/// scatters the rows to the dense logical layout of R's shape (scatter()).
template <class F>
std::vector<double> map_rows(const RefRows& R, F&& fn) {
  std::vector<double> by_row(static_cast<size_t>(R.rows * R.n));
  for (int64_t r = 0; r < R.rows; ++r) {
    const std::vector<double> y = fn(r);
    std::copy(y.begin(), y.end(), by_row.begin() + r * R.n);
  }
  return R.scatter(by_row);
}

RefRows ref_rows(const char* fn, const TensorView& src, const SoftmaxOptions& options,
                 bool logits = true);

/// 1 where options' masks hide element (row, k) of src's row view (bool
/// mask 0 or additive mask -inf), else 0; rows * n entries in RefRows order.
/// Backward oracles zero those gradients whatever y / dy hold there, as the
/// library does (masks win over NaN in a backward pass).
std::vector<char> ref_masked(const char* fn, const TensorView& src, const SoftmaxOptions& options);

/// The elements of an i64 view in row-major logical order (what to_dense
/// gives for f32 / bool views); a rank-0 view gives one element.
std::vector<int64_t> i64_dense(const TensorView& view);

/// Per-row values of a view broadcast (NumPy rules) to src's shape with the
/// axis of size 1 (keepdim), in row order; i64 or f32 views, widened to
/// double (targets, alpha, s...).
std::vector<double> ref_row_values(const char* fn, const TensorView& view, const RefRows& rows);

/// Throws smax::Error(kInvalidArgument, "FN: MESSAGE"): how every oracle
/// rejects a call the library would reject.
[[noreturn]] void fail(const char* fn, const std::string& message);

}  // namespace smax::reference

// tests/distributed_util.h: helpers of the vocabulary-parallel tests
// (tests/test_distributed_*.cc): a dense [R, V] buffer of any floating dtype
// whose rank-k shard is a strided view of columns [offset_k, offset_k + n_k)
// (so the single-process op runs on the whole buffer and the sharded op on
// its column slices, with no copy), shard layouts, and error capture.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/convert.h"
#include "smax/distributed.h"
#include "smax/error.h"
#include "smax/tensor.h"
#include "thread_communicator.h"

namespace smax::testing {

/// Row-major [rows, cols] values of dtype dt; shard(off, n) is the columns
/// [off, off + n) of every row.
class Dense {
 public:
  Dense(DType dt, int64_t rows, int64_t cols, double fill = 0.0)
      : dt_(dt), rows_(rows), cols_(cols),
        bytes_(static_cast<size_t>(rows * cols * dtype_size(dt)) + 64, 0) {
    for (int64_t i = 0; i < rows * cols; ++i) set(i, fill);
  }
  DType dtype() const { return dt_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  void* at(int64_t i) { return bytes_.data() + i * dtype_size(dt_); }
  const void* at(int64_t i) const { return bytes_.data() + i * dtype_size(dt_); }
  /// Stores v rounded to the dtype.
  void set(int64_t i, double v) { detail::store_f64(at(i), dt_, v); }
  double get(int64_t i) const { return detail::load_f64(at(i), dt_); }
  double get(int64_t r, int64_t c) const { return get(r * cols_ + c); }
  TensorView full() const { return shard(0, cols_); }
  TensorView shard(int64_t offset, int64_t n) const {
    const int64_t shape[2] = {rows_, n};
    const int64_t strides[2] = {cols_, 1};
    return make_view(const_cast<unsigned char*>(bytes_.data()) + offset * dtype_size(dt_), dt_,
                     2, shape, strides);
  }
  /// One value per row ([rows]).
  TensorView rows_view() const {
    const int64_t shape[1] = {rows_};
    const int64_t strides[1] = {cols_};
    return make_view(const_cast<unsigned char*>(bytes_.data()), dt_, 1, shape, strides);
  }
  bool same_bits(const Dense& o) const { return bytes_ == o.bytes_; }

 private:
  DType dt_;
  int64_t rows_, cols_;
  std::vector<unsigned char> bytes_;
};

/// Offsets (size + 1 entries) of shards of the given sizes.
inline std::vector<int64_t> offsets_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> off(sizes.size() + 1, 0);
  for (size_t k = 0; k < sizes.size(); ++k) off[k + 1] = off[k] + sizes[k];
  return off;
}

/// Runs fn on every rank and requires that none threw.
inline void run_ok(int ranks,
                   const std::function<void(distributed::Communicator&, int)>& fn) {
  const auto errors = run_ranks(ranks, fn);
  for (size_t k = 0; k < errors.size(); ++k) {
    EXPECT_EQ(message_of(errors[k]), "") << "rank " << k;
  }
}

/// The shard layouts the tests sweep for V classes: P = 1..4, even, uneven
/// and with empty shards.
inline std::vector<std::vector<int64_t>> layouts_for(int64_t V) {
  std::vector<std::vector<int64_t>> out;
  out.push_back({V});
  out.push_back({V / 2, V - V / 2});
  out.push_back({0, V});
  out.push_back({V / 3, 0, V - V / 3});
  out.push_back({1, V / 3, V - V / 3 - 1});
  out.push_back({V / 4, V / 4 + 1, V / 4 - 1, V - 3 * (V / 4) - 0});
  out.push_back({V - 1, 0, 1, 0});
  return out;
}

}  // namespace smax::testing

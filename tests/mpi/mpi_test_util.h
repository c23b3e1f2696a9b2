// tests/mpi/mpi_test_util.h: what the MPI tests of the vocabulary-parallel
// ops (include/smax/distributed.h over smax/mpi.h) share. Each test program
// runs under `mpirun -np N` (tests/mpi/CMakeLists.txt); every rank runs every
// test, in the same order, so each collective is entered by every rank.
//
// The pattern of an op test: every rank draws the FULL rows from the same
// seed (rows x V logits, targets, weights), slices its shard of the classes
// (shard_sizes: even, uneven, an empty shard, more ranks than classes), runs
// the distributed op on the shard, runs the single-process smax op on the
// whole rows, and compares: per-class outputs against the matching columns
// of the whole-row result, replicated outputs against the whole-row result
// AND bit for bit across ranks (expect_replicated). Both results are within
// the op's stated bound of the exact value, so they differ by at most twice
// the bound (the tolerances below say which bound).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "smax/error.h"
#include "smax/mpi.h"
#include "smax/tensor.h"

namespace smax_mpi_test {

/// The world's MpiCommunicator, made once after MPI_Init (main.cc).
smax::distributed::MpiCommunicator& world();
/// The seed of this run: SMAX_TEST_SEED or a fixed default, rank 0's value on
/// every rank (printed by main.cc).
uint64_t seed();

inline int rank() { return world().rank(); }
inline int ranks() { return world().size(); }

/// How the V classes are split over the ranks.
enum class Split {
  kEven,      ///< V / P each, the remainder on the first ranks
  kUneven,    ///< rank k gets a share proportional to k + 1
  kEmptyOne,  ///< rank 1 (rank 0 when P == 1) holds no class, the others uneven
};

/// Class counts of every rank (sum V), rank order.
inline std::vector<int64_t> shard_sizes(int64_t v, int p, Split split) {
  std::vector<int64_t> n(p, 0);
  if (split == Split::kEven) {
    for (int k = 0; k < p; ++k) n[k] = v / p + (k < v % p ? 1 : 0);
    return n;
  }
  const int empty = split == Split::kEmptyOne ? (p > 1 ? 1 : 0) : -1;
  int64_t weight_sum = 0;
  for (int k = 0; k < p; ++k) weight_sum += k == empty ? 0 : k + 1;
  int64_t given = 0;
  for (int k = 0; k < p; ++k) {
    n[k] = k == empty || weight_sum == 0 ? 0 : v * (k + 1) / weight_sum;
    given += n[k];
  }
  // The remainder goes to the last non-empty rank.
  for (int k = p - 1; k >= 0; --k) {
    if (k != empty || p == 1) {
      n[k] += v - given;
      break;
    }
  }
  return n;
}

/// This rank's [offset, offset + n) of a split.
struct Shard {
  int64_t offset = 0;
  int64_t n = 0;
};
inline Shard my_shard(const std::vector<int64_t>& sizes) {
  Shard s;
  for (int k = 0; k < rank(); ++k) s.offset += sizes[k];
  s.n = sizes[rank()];
  return s;
}

/// Columns [offset, offset + n) of a row-major rows x cols matrix.
template <class T>
std::vector<T> columns(const std::vector<T>& full, int64_t rows, int64_t cols, Shard s) {
  std::vector<T> out(static_cast<size_t>(rows * s.n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < s.n; ++j) out[r * s.n + j] = full[r * cols + s.offset + j];
  }
  return out;
}

/// Rows [offset, offset + n) of a row-major matrix with `cols` columns.
template <class T>
std::vector<T> row_block(const std::vector<T>& full, int64_t cols, Shard s) {
  return std::vector<T>(full.begin() + s.offset * cols, full.begin() + (s.offset + s.n) * cols);
}

/// Normal(0, sigma) values from (seed, salt): the same on every rank.
inline std::vector<float> normal(size_t count, uint64_t salt, float sigma = 3.0f) {
  std::mt19937_64 g(seed() * 1000003u + salt);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(count);
  for (float& x : v) x = d(g);
  return v;
}
inline std::vector<double> normal64(size_t count, uint64_t salt, double sigma = 3.0) {
  std::mt19937_64 g(seed() * 1000003u + salt);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<double> v(count);
  for (double& x : v) x = d(g);
  return v;
}
/// Class indices in [0, v) from (seed, salt); every `ignore_every`-th is
/// `ignore` (0: none).
inline std::vector<int64_t> targets(int64_t rows, int64_t v, uint64_t salt, int ignore_every = 0,
                                    int64_t ignore = -100) {
  std::mt19937_64 g(seed() * 7919u + salt);
  std::uniform_int_distribution<int64_t> d(0, v - 1);
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    t[r] = ignore_every > 0 && r % ignore_every == ignore_every - 1 ? ignore : d(g);
  }
  return t;
}

inline smax::TensorView f32(std::vector<float>& v, std::vector<int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return smax::make_view(v.data(), smax::DType::kF32, static_cast<int>(shape.size()), shape.data(),
                         strides.data());
}
inline smax::TensorView f64(std::vector<double>& v, std::vector<int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return smax::make_view(v.data(), smax::DType::kF64, static_cast<int>(shape.size()), shape.data(),
                         strides.data());
}
inline smax::TensorView i64(std::vector<int64_t>& v, std::vector<int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return smax::make_view(v.data(), smax::DType::kI64, static_cast<int>(shape.size()), shape.data(),
                         strides.data());
}

/// Every rank's bytes of `v` equal rank 0's, bit for bit (a collective:
/// every rank calls it with the same size).
template <class T>
void expect_replicated(const std::vector<T>& v, const char* what) {
  const size_t bytes = v.size() * sizeof(T);
  std::vector<unsigned char> all(bytes * ranks());
  world().allgather(v.data(), all.data(), bytes);
  for (int k = 1; k < ranks(); ++k) {
    EXPECT_EQ(std::memcmp(all.data(), all.data() + k * bytes, bytes), 0)
        << what << ": rank " << k << "'s replicated output differs from rank 0's";
  }
}

/// |got - want| <= rel * |want| + abs elementwise (NaN must match NaN,
/// infinities must match exactly).
template <class A, class B>
void expect_close(const std::vector<A>& got, const std::vector<B>& want, double rel, double abs,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = static_cast<double>(want[i]);
    bool ok;
    if (std::isnan(w) || std::isinf(w)) {
      ok = std::isnan(w) ? std::isnan(g) : g == w;
    } else {
      ok = std::fabs(g - w) <= rel * std::fabs(w) + abs;
    }
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << g << ", want " << w << " (rank "
                    << rank() << " of " << ranks() << ")";
    }
  }
}

/// Runs f on every rank and returns this rank's smax::Error message ("" when
/// f returned; "not an smax::Error: ..." for another exception).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const smax::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an smax::Error: ") + e.what();
  }
  return "";
}

/// The splits every op is tested with on this world (kEmptyOne needs P >= 2).
inline std::vector<Split> splits() {
  std::vector<Split> s = {Split::kEven, Split::kUneven};
  if (ranks() >= 2) s.push_back(Split::kEmptyOne);
  return s;
}
inline const char* split_name(Split s) {
  return s == Split::kEven ? "even" : s == Split::kUneven ? "uneven" : "one empty shard";
}

}  // namespace smax_mpi_test

// src/core/execution.h: the task grid and scratch buffers shared by the ops,
// and the row / run / column / gathered-row schedules built on them
// (softmax and log_softmax forward and backward use all of them).
//
// Determinism: the task grid depends only on the shape (never on the thread
// count), and every task computes its rows exactly as a serial run would, so
// results are bitwise identical for any number of threads. The one grid that
// depends on the thread count, for_each_row_stream, serves only row kernels
// whose per-row bits do not depend on how rows are grouped (see there).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "kernels/kernels.h"
#include "core/geometry.h"
#include "core/internal.h"
#include "smax/error.h"

namespace smax::detail {

/// Elements one task should cover: large enough to amortise scheduling,
/// small enough to balance 2..64 threads on 256 x 32000.
inline constexpr int64_t kTaskElements = int64_t{1} << 16;

/// Rows per task for rows of n elements.
inline int64_t rows_per_task(int64_t n) {
  return n >= kTaskElements ? 1 : kTaskElements / (n > 0 ? n : 1);
}

/// Calls fn(first_row, count, offsets) for maximal runs of consecutive rows
/// in [row_begin, row_end) that differ only in the innermost batch dim, so a
/// run is a strided batch (stride g.batch_stride[k][last]).
template <typename Fn>
void for_each_run(const Geometry& g, int64_t row_begin, int64_t row_end, Fn&& fn) {
  const int64_t inner = g.batch_dims > 0 ? g.batch_size[g.batch_dims - 1] : 1;
  int64_t offsets[kMaxOperands];
  for (int64_t row = row_begin; row < row_end;) {
    const int64_t count = std::min(row_end - row, inner - row % inner);
    g.row_offsets(row, offsets);
    fn(row, count, offsets);
    row += count;
  }
}

/// Stride of operand k between consecutive rows of a run.
inline int64_t run_stride(const Geometry& g, int k) {
  return g.batch_dims > 0 ? g.batch_stride[k][g.batch_dims - 1] : 0;
}

/// Runs fn(begin, end) over the fixed grid of row ranges (rows_per_task(n)
/// rows each), in parallel.
template <typename Fn>
void for_each_row_task(const Geometry& g, int threads, Fn&& fn) {
  const int64_t per_task = rows_per_task(g.n);
  const int64_t tasks = (g.rows + per_task - 1) / per_task;
  run_parallel(tasks, threads, [&](int64_t task) {
    const int64_t begin = task * per_task;
    fn(begin, std::min(g.rows, begin + per_task));
  });
}

inline constexpr int64_t kStreamTasksPerThread = 4;

/// Rows too long for one task: calls fn(row, threads_for_the_row, next) for
/// every row, spreading rows over threads when there are enough of them (in
/// about kStreamTasksPerThread ranges of consecutive rows per thread, each
/// range on one thread in order; one row per task when there are fewer
/// than 2 kStreamTasksPerThread rows per thread, where ranges of 2 would
/// unbalance the threads more than the prefetch gains) and giving every
/// thread to each row otherwise. `next` is the row the calling thread computes after this one,
/// or -1: a prefetch hint. Both give the same bits, because a long row's
/// result depends neither on its thread count nor on its neighbours.
template <typename Fn>
void for_each_long_row(const Geometry& g, int threads, Fn&& fn) {
  if (g.rows >= threads) {
    const int64_t slots = kStreamTasksPerThread * std::max(threads, 1);
    const int64_t per_task = g.rows < 2 * slots ? 1 : (g.rows + slots - 1) / slots;
    const int64_t tasks = (g.rows + per_task - 1) / per_task;
    run_parallel(tasks, threads, [&](int64_t task) {
      const int64_t begin = task * per_task, end = std::min(g.rows, begin + per_task);
      for (int64_t row = begin; row < end; ++row) fn(row, 1, row + 1 < end ? row + 1 : -1);
    });
  } else {
    for (int64_t row = 0; row < g.rows; ++row) fn(row, threads, row + 1 < g.rows ? row + 1 : -1);
  }
}

/// Operand k's float at byte offset `offset` (from Geometry::row_offsets).
inline float* f32_at(const Geometry& g, int k, int64_t offset) {
  return reinterpret_cast<float*>(g.at(k, offset));
}

/// Whether operand k's reduced axis is contiguous (or has one element).
inline bool axis_contiguous(const Geometry& g, int k) {
  return g.n == 1 || g.axis_stride[k] == 1;
}

/// Runs fn(begin, end) over row ranges of at least rows_per_task(n) rows,
/// about kStreamTasksPerThread ranges per thread: for batched row kernels
/// that fuse a row's last pass with the next row's first and prefetch the
/// next row during the compute-bound pass (kernels/softmax_rows.cc), which
/// stream only within a range. The grid depends on `threads`, so only
/// kernels whose per-row result does not depend on how rows are grouped may
/// use it (their bits stay the same for any thread count).
template <typename Fn>
void for_each_row_stream(const Geometry& g, int threads, Fn&& fn) {
  const int64_t slots = kStreamTasksPerThread * std::max(threads, 1);
  const int64_t per_task = std::max(rows_per_task(g.n), (g.rows + slots - 1) / slots);
  const int64_t tasks = (g.rows + per_task - 1) / per_task;
  run_parallel(tasks, threads, [&](int64_t task) {
    const int64_t begin = task * per_task;
    fn(begin, std::min(g.rows, begin + per_task));
  });
}

/// Rows mode (every operand's axis contiguous): rows of n >= kernels::kSegment
/// go one at a time to long_row(offsets, threads_for_the_row, next_offsets)
/// (see for_each_long_row; next_offsets: the next row's, or nullptr);
/// shorter rows go to runs(count, offsets) in runs of
/// consecutive rows (for_each_run) over the streaming grid
/// (for_each_row_stream: the softmax-family row kernels' bits do not depend
/// on the grouping).
template <typename LongRow, typename Runs>
void for_each_contiguous_row(const Geometry& g, int threads, LongRow&& long_row, Runs&& runs) {
  if (g.n >= kernels::kSegment) {
    for_each_long_row(g, threads, [&](int64_t row, int row_threads, int64_t next) {
      int64_t off[kMaxOperands], next_off[kMaxOperands];
      g.row_offsets(row, off);
      if (next >= 0) g.row_offsets(next, next_off);
      long_row(static_cast<const int64_t*>(off), row_threads,
               next >= 0 ? static_cast<const int64_t*>(next_off) : nullptr);
    });
    return;
  }
  for_each_row_stream(g, threads, [&](int64_t begin, int64_t end) {
    for_each_run(g, begin, end,
                 [&](int64_t, int64_t count, const int64_t* off) { runs(count, off); });
  });
}

/// Column mode: batch dim `cdim` has unit stride in every operand. Calls
/// fn(offsets, j0, count) for blocks of `count` consecutive columns starting
/// at column j0 of that dim, for every index of the other batch dims, in
/// parallel. Blocks are multiples of 64 columns, about kTaskElements each;
/// every column is computed independently, so the grid does not change bits.
template <typename Fn>
void for_each_column_block(const Geometry& g, int cdim, int threads, Fn&& fn) {
  Geometry outer = g;
  outer.batch_dims = 0;
  outer.rows = 1;
  for (int b = 0; b < g.batch_dims; ++b) {
    if (b == cdim) continue;
    const int o = outer.batch_dims++;
    outer.batch_size[o] = g.batch_size[b];
    for (int k = 0; k < g.operands; ++k) outer.batch_stride[k][o] = g.batch_stride[k][b];
    outer.rows *= g.batch_size[b];
  }
  const int64_t inner = g.batch_size[cdim];
  int64_t block = std::max<int64_t>(64, kTaskElements / std::max<int64_t>(g.n, 1));
  block = (block + 63) / 64 * 64;
  const int64_t blocks = (inner + block - 1) / block;
  run_parallel(outer.rows * blocks, threads, [&](int64_t task) {
    const int64_t j0 = (task % blocks) * block;
    int64_t off[kMaxOperands];
    outer.row_offsets(task / blocks, off);
    fn(static_cast<const int64_t*>(off), j0, std::min(block, inner - j0));
  });
}

/// A fixed set of scratch buffers, one per concurrently running task,
/// allocated before any output is written (so allocation failure leaves the
/// outputs untouched). Tasks borrow one with Lease. A buffer is raw bytes
/// (new std::byte[], aligned to the default new alignment, 16 here), so
/// it may hold values of any type (floats, doubles, indices):
/// Lease::as<T>() views it as T; data() is as<float>().
class ScratchPool {
 public:
  ScratchPool(int buffers, int64_t floats_each) {
    if (buffers <= 0 || floats_each <= 0) return;
    try {
      for (int i = 0; i < buffers; ++i) {
        buffers_.emplace_back(new std::byte[static_cast<size_t>(floats_each) * sizeof(float)]);
        free_.push_back(i);
      }
    } catch (const std::bad_alloc&) {
      throw Error(Status::kOutOfMemory, "smax: cannot allocate " + std::to_string(buffers) +
                                            " scratch rows of " + std::to_string(floats_each) +
                                            " floats");
    }
  }
  class Lease {
   public:
    explicit Lease(ScratchPool& pool) : pool_(pool) {
      std::lock_guard<std::mutex> lock(pool_.mutex_);
      index_ = pool_.free_.back();
      pool_.free_.pop_back();
    }
    ~Lease() {
      std::lock_guard<std::mutex> lock(pool_.mutex_);
      pool_.free_.push_back(index_);
    }
    template <class T>
    T* as() const {
      return static_cast<T*>(static_cast<void*>(pool_.buffers_[index_].get()));
    }
    float* data() const { return as<float>(); }

   private:
    ScratchPool& pool_;
    int index_;
  };

 private:
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
  std::vector<int> free_;
  std::mutex mutex_;
};

/// Gather mode (some operand's axis is strided): calls
/// fn(row, threads_for_the_row, scratch) for every row, `scratch` a leased
/// buffer of `floats_per_row` floats. Short rows (n < kernels::kSegment), or
/// at least `threads` rows, are split over the task grid with one thread per
/// row; otherwise rows run one after another with every thread each (a long
/// row's result does not depend on its thread count). The pool holds one
/// buffer per row that can run at once and is allocated before any row runs.
template <typename Fn>
void for_each_gathered_row(const Geometry& g, int threads, int64_t floats_per_row, Fn&& fn) {
  const bool split_rows = g.n < kernels::kSegment || g.rows >= threads;
  const int buffers = split_rows ? static_cast<int>(std::min<int64_t>(threads, g.rows)) : 1;
  ScratchPool pool(buffers, floats_per_row);
  auto one_row = [&](int64_t row, int row_threads) {
    ScratchPool::Lease lease(pool);
    fn(row, row_threads, lease.data());
  };
  if (split_rows) {
    for_each_row_task(g, threads, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) one_row(row, 1);
    });
  } else {
    for (int64_t row = 0; row < g.rows; ++row) one_row(row, threads);
  }
}

}  // namespace smax::detail

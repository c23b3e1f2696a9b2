// src/ops/distributed/sharded_common.h: what the sharded softmax family
// (softmax_sharded.cc) and cross-entropy (cross_entropy_sharded.cc) share
// around group.h's handshake:
//  * row_shape_agreed: the Agreed values of a class-sharded operand's row
//    shape (rank, resolved axis, every dim but the class axis), computed
//    without trusting the view (a bad view is rejected by validate; the
//    values of a rejected rank are never compared);
//  * chunk_rows: the rows of one chunk. The ops scan a chunk, allgather its
//    records, then make their output pass over the same rows while the
//    chunk's operands are still in cache (L2 / L3). Every rank must make the
//    same number of allgathers, so the chunk depends only on values every
//    rank has after the handshake: the widest shard and the bytes per class.
//    Results do not depend on the chunking (each row is merged on its own).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/distributed/group.h"
#include "smax/tensor.h"

namespace smax::detail::dist {

/// Bytes of operands a chunk aims to keep in cache (the last-level cache:
/// the output pass re-reads the chunk from there). A fixed value, not the
/// host's cache size: every rank must make the same number of collectives,
/// and ranks may run on different hosts. 8 MiB: a 64128-class f32 shard
/// takes 32 rows per chunk, so 4096 rows make 128 allgathers (one per row,
/// at 1 MiB chunks, cost more in gloo's ~0.1-0.7 ms latency than the
/// rows' compute). Tests lower it (set_chunk_bytes) to run many chunks.
inline constexpr int64_t kDefaultChunkBytes = int64_t{8} << 20;
/// The chunk size in force (kDefaultChunkBytes unless set_chunk_bytes).
int64_t chunk_bytes();
/// For tests: every rank of a group must use the same value (in-process
/// ranks share it). bytes <= 0 restores the default.
void set_chunk_bytes(int64_t bytes);

/// Appends "rank", "axis (resolved)" and kMaxRank dims (the class axis and
/// dims past the rank as -1) to `agreed`.
inline void row_shape_agreed(const TensorView& view, int64_t axis_option,
                             std::vector<Agreed>& agreed) {
  static const char* const kDims[kMaxRank] = {
      "row shape (dim 0)", "row shape (dim 1)", "row shape (dim 2)", "row shape (dim 3)",
      "row shape (dim 4)", "row shape (dim 5)", "row shape (dim 6)", "row shape (dim 7)"};
  const int rank = view.rank < 1 ? 1 : std::min(view.rank, kMaxRank);
  int64_t axis = axis_option < 0 ? axis_option + rank : axis_option;
  if (axis < 0 || axis >= rank) axis = -1;
  agreed.push_back({"rank", view.rank});
  agreed.push_back({"axis (resolved)", axis});
  for (int d = 0; d < kMaxRank; ++d) {
    const bool row_dim = d < view.rank && d < kMaxRank && d != axis;
    agreed.push_back({kDims[d], row_dim ? view.shape[d] : -1});
  }
}

/// This rank's class count: the view's size along the class axis (rank 0:
/// 1); 0 where the view or axis is invalid (validate rejects those).
inline int64_t shard_classes(const TensorView& view, int64_t axis_option) {
  if (view.rank == 0) return 1;
  if (view.rank < 0 || view.rank > kMaxRank) return 0;
  const int64_t axis = axis_option < 0 ? axis_option + view.rank : axis_option;
  if (axis < 0 || axis >= view.rank) return 0;
  return std::max<int64_t>(view.shape[axis], 0);
}

/// At most this many chunks per call (unless a chunk is a single row): each
/// chunk is one collective, and gloo's latency (~0.1-0.7 ms on one host) times
/// 4096 / 10 chunks cost more than re-reading a bigger chunk from DRAM
/// (bench/peers/bench_distributed.py: 411 collectives made the sharded
/// cross-entropy 1.9x the shard's single-process time).
inline constexpr int64_t kMaxChunks = 32;

/// Rows per chunk (>= 1) for `bytes_per_class` bytes of operands per class
/// and `rows` rows (agreed): chunk_bytes() of operands, or rows / kMaxChunks
/// rows when that is more.
inline int64_t chunk_rows(const Group& g, int64_t bytes_per_class, int64_t rows) {
  int64_t widest = 1;
  for (int k = 0; k < g.size; ++k) widest = std::max(widest, g.offsets[k + 1] - g.offsets[k]);
  const int64_t budget = chunk_bytes();
  const int64_t per_row = widest > budget ? budget : widest * bytes_per_class;
  const int64_t by_cache = std::max<int64_t>(1, budget / std::max<int64_t>(per_row, 1));
  const int64_t by_count = (std::max<int64_t>(rows, 0) + kMaxChunks - 1) / kMaxChunks;
  return std::max(by_cache, by_count);
}

}  // namespace smax::detail::dist

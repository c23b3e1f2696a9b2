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

/// Bytes of operands per row a chunk aims to keep in cache.
inline constexpr int64_t kChunkBytes = int64_t{1} << 20;

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

/// Rows per chunk (>= 1) for `bytes_per_class` bytes of operands per class.
inline int64_t chunk_rows(const Group& g, int64_t bytes_per_class) {
  int64_t widest = 1;
  for (int k = 0; k < g.size; ++k) widest = std::max(widest, g.offsets[k + 1] - g.offsets[k]);
  const int64_t per_row = widest > kChunkBytes ? kChunkBytes : widest * bytes_per_class;
  return std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(per_row, 1));
}

}  // namespace smax::detail::dist

// src/ops/distributed/lce_shard_rows.h: the per-row algebra of the
// vocabulary-parallel linear cross-entropy (linear_cross_entropy_sharded.cc):
// the record each rank sends per token, their merge in rank order, the
// row's results (cross_entropy's formulas with C = V), the gradient row of a
// shard, and the deterministic reduction of dhidden over the ranks.
//
// Records. A rank's per-token statistics over its shard (lce::RowStat from
// the single-process tiles: online (m, d), the entropy sum s1, the
// smoothing sums, the first argmax, the target logit where the target lies
// in the shard) travel as kRecordFields doubles; merge_record adds one into
// a running RowStat with lce::merge's formula (the one the single-process
// op uses between vocabulary chunks), ranks in order, so one rank gives
// exactly the single-process statistics and every rank the same bits.
// Internal to src/ops; nothing here throws except reduce_rows (transport).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/distributed/group.h"
#include "ops/losses/linear_cross_entropy_tiles.h"

namespace smax::detail::dist {

/// m, d, s1, sum_t, sum_w, best, arg (global), ty (NaN: not this shard's),
/// w_y (0: not this shard's), nan flag.
inline constexpr int kRecordFields = 10;

/// What every rank knows of token r once the records are merged.
struct GlobalRows {
  std::vector<int64_t> y;     ///< global target (or ignore_index)
  std::vector<char> active;   ///< y != ignore_index
  std::vector<double> wy;     ///< class weight of y (0 when inactive)
  double denominator = 0.0;   ///< sum of wy in row order (kMean)
  int64_t vocab = 0;          ///< C = V, the classes of every rank
};

/// Appends token gr's record (st: its statistics over this shard, whose
/// first class is `offset`; wy_here: the class weight of its target when the
/// target is this shard's, else 0) to out[r * kRecordFields ...].
void put_record(const lce::RowStat& st, int64_t offset, double wy_here, double* out);

/// st += the record (lce::merge's formula with the record as the chunk).
void merge_record(lce::RowStat& st, const double* rec);

/// cross_entropy's row results (lce::finalize_row with C = rows.vocab and
/// the global target / weight of the row).
lce::RowResult finalize_global(const lce::Setup& s, const GlobalRows& rows,
                               const lce::RowStat& rs, int64_t gr);

/// dz of a tile row of this shard in place over u (lce::grad_row with the
/// global coefficients): y_local the target's index in this shard or -1.
void grad_row_shard(const lce::Setup& s, const GlobalRows& rows, float* row, int64_t vc,
                    int64_t v0, int64_t gr, int64_t y_local, double L, double sum_w, double g);

/// The reduced outputs (dst, z_loss, accuracy) from per-row values, as
/// lce::write_reduced with the global active rows.
void write_reduced_global(const lce::Setup& s, const GlobalRows& rows,
                          const std::vector<double>& values, double denominator,
                          const TensorView& v, const char* name);

/// The buffers of reduce_rows, allocated before anything is written.
struct ReduceBuffers {
  int64_t slab = 0, part = 0;  ///< rows per round, rows per rank per round
  std::vector<float> send, recv, mine, gathered;
  ReduceBuffers(const char* op, int ranks, int64_t N, int64_t D);
};

/// data[N x D] (row step ld) becomes the sum over the ranks of every rank's
/// data, the same bits on every rank: rounds of `slab` rows, each split into
/// one block of `part` rows per rank (alltoall), each rank sums its block's
/// P pieces in float64 in rank order and rounds once to f32, then the blocks
/// are allgathered. One rank: data unchanged.
void reduce_rows(const Group& g, ReduceBuffers& b, float* data, int64_t ld, int64_t N, int64_t D);

}  // namespace smax::detail::dist

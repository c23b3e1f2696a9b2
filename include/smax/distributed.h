// smax/distributed.h: vocabulary-parallel ops. Each rank of a group holds a
// shard of the classes (a slice of the class axis) and the ops return what
// the single-process op returns on the whole row, moving only a few numbers
// per row between ranks (docs/distributed.md: the merges, the bytes sent,
// how to run).
//
// Shards. The ranks' shards tile the classes in rank order: rank k holds the
// classes [offset_k, offset_k + n_k) where n_k is the length of its tensor's
// class axis (options.axis) and offset_k = n_0 + ... + n_(k-1); V = the sum
// of every n_k. Uneven shards and empty shards (n_k = 0) are allowed. Every
// other dimension (the rows) is the same on every rank.
//
// Common contract of the ops below (they take a Communicator first, then the
// arguments of the single-process op of the same name in smax::)
// * Collective: every rank of `comm` calls the same op with the same options
//   (scalars, reduction, k, seed, ...) and row shape. The first thing each op
//   does is validate its arguments locally and then exchange a small fixed
//   header (one allgather): when a rank's arguments are bad, or the ranks
//   disagree (row shape, options, op), EVERY rank throws smax::Error
//   (kInvalidArgument) naming the problem and the rank(s) - no rank hangs.
//   Nothing is written to any output on error.
// * Inputs and outputs per class (softmax's dst, masks, probability targets,
//   class weights, gradients w.r.t. logits, the weight rows of linear
//   cross-entropy) are this rank's shard. Class indices (targets, top-k
//   indices, samples) are GLOBAL indices in [0, V). Per-row outputs (loss,
//   lse, entropy, logsumexp, top-k, samples) are replicated: every rank
//   writes the same bits.
// * Determinism: for a given world size and shard sizes the bits do not
//   depend on the run, the thread count or the rank; the per-rank partial
//   results are merged in float64 in rank order on every rank.
// * Accuracy: within the single-process op's bound (stated in its header)
//   plus the rounding of the exchanged partials (docs/distributed.md states
//   each op's bound). With one rank the result is bit-equal to the
//   single-process op.
// * Threads: `options.threads` as in the single-process ops (the local work
//   of each rank); the Communicator's calls are made from the calling thread.
// * One rank gives the single-process op's bits, except `sample` with top-p
//   and top-k off, whose nucleus uses exact fixed-point masses here (the same
//   token for every P; see docs/distributed.md).
// * Failures after the handshake (a scratch allocation failing on one rank,
//   a transport error) are not made collective: that rank throws and the
//   others wait in their next collective until the engine ends them
//   (MPI_Abort / mpirun, torch.distributed's timeout), as with any MPI
//   program. Argument errors never reach that point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "smax/error.h"
#include "smax/linear_cross_entropy.h"
#include "smax/losses.h"
#include "smax/options.h"
#include "smax/sampling.h"
#include "smax/tensor.h"

namespace smax::distributed {

/// The collective engine smax runs on (MPI: smax/mpi.h; torch.distributed:
/// smax.distributed in Python; tests: an in-process one). smax needs only
/// these two blocking collectives and never links the engine itself.
/// Implementations throw any std::exception on a transport failure; smax
/// lets it propagate.
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This process's rank in [0, size()).
  virtual int rank() const = 0;
  /// Number of ranks, >= 1.
  virtual int size() const = 0;
  /// Every rank contributes `bytes` bytes at `send`; afterwards `recv`
  /// (size() * bytes) holds rank k's bytes at recv + k * bytes, on every
  /// rank. bytes is the same on every rank (smax guarantees it).
  virtual void allgather(const void* send, void* recv, size_t bytes) = 0;
  /// Personalised exchange: send + j * bytes goes to rank j; afterwards
  /// recv + j * bytes holds what rank j sent to this rank.
  virtual void alltoall(const void* send, void* recv, size_t bytes) = 0;
};

/// Where this rank's shard lies (collective: one allgather of n_k).
struct ShardLayout {
  int64_t offset = 0;  ///< first global class of this rank's shard
  int64_t classes = 0; ///< n_k, this rank's class count
  int64_t vocab = 0;   ///< V, the classes of all ranks together
};
ShardLayout shard_layout(Communicator& comm, int64_t local_classes);

// ---- the softmax family ----------------------------------------------------
void softmax(Communicator& comm, const TensorView& src, const TensorView& dst,
             const SoftmaxOptions& options = {});
void log_softmax(Communicator& comm, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& options = {});
/// dst: one value per row (replicated), as smax::logsumexp.
void logsumexp(Communicator& comm, const TensorView& src, const TensorView& dst,
               const SoftmaxOptions& options = {});
/// y, dy, dx: this rank's shard (<dy, y> is summed over every rank).
void softmax_backward(Communicator& comm, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const SoftmaxOptions& options = {});
void log_softmax_backward(Communicator& comm, const TensorView& y, const TensorView& dy,
                          const TensorView& dx, const SoftmaxOptions& options = {});

// ---- cross-entropy ---------------------------------------------------------
/// As smax::cross_entropy on the whole row. `target`: global class indices
/// (replicated) or this shard's probability columns; `ce.loss.weight`: the
/// weights of this shard's classes [n_k]; label smoothing's C is V. Every
/// per-row / reduced output (dst, z_loss, lse, entropy, target_logprob,
/// accuracy) is replicated; `ce.grad` is this shard's gradient.
void cross_entropy(Communicator& comm, const TensorView& src, const TensorView& target,
                   const TensorView& dst, const CrossEntropyOptions& ce = {},
                   const SoftmaxOptions& options = {});
void cross_entropy_backward(Communicator& comm, const TensorView& src, const TensorView& target,
                            const TensorView& dloss, const TensorView& dsrc,
                            const CrossEntropyOptions& ce = {},
                            const SoftmaxOptions& options = {});

// ---- linear cross-entropy --------------------------------------------------
/// `weight` (and `bias`, dweight, dbias) are this rank's rows of the LM head
/// [n_k, D]; `hidden` [N, D] is replicated; dhidden is the full gradient
/// (summed over ranks, replicated).
void linear_cross_entropy(Communicator& comm, const TensorView& hidden,
                          const TensorView& weight, const TensorView& target,
                          const std::optional<TensorView>& bias, const TensorView& dst,
                          const CrossEntropyOptions& ce = {},
                          const LinearCrossEntropyOptions& lce = {},
                          const SoftmaxOptions& options = {});
void linear_cross_entropy_backward(Communicator& comm, const TensorView& hidden,
                                   const TensorView& weight, const TensorView& target,
                                   const std::optional<TensorView>& bias,
                                   const TensorView& dloss, const TensorView& dhidden,
                                   const TensorView& dweight,
                                   const std::optional<TensorView>& dbias,
                                   const CrossEntropyOptions& ce = {},
                                   const LinearCrossEntropyOptions& lce = {},
                                   const SoftmaxOptions& options = {});
void linear_cross_entropy_fused(Communicator& comm, const TensorView& hidden,
                                const TensorView& weight, const TensorView& target,
                                const std::optional<TensorView>& bias, const TensorView& dst,
                                const TensorView& dloss, const TensorView& dhidden,
                                const TensorView& dweight, const std::optional<TensorView>& dbias,
                                const CrossEntropyOptions& ce = {},
                                const LinearCrossEntropyOptions& lce = {},
                                const SoftmaxOptions& options = {});

// ---- top-k and sampling ----------------------------------------------------
/// Replicated outputs with global indices, as smax::softmax_topk on the whole
/// row (each rank's local top-k, then a merge of k x P candidates).
void softmax_topk(Communicator& comm, const TensorView& src, const TensorView& probs,
                  const TensorView& indices, const SoftmaxTopkOptions& topk,
                  const SoftmaxOptions& options = {});
/// As smax::sample on the whole row: the same global index for a seed,
/// whatever the number of ranks (the Gumbel noise is keyed by the global
/// class index); replicated.
void sample(Communicator& comm, const TensorView& src, const TensorView& indices,
            const SampleOptions& sample = {}, const SoftmaxOptions& options = {});

}  // namespace smax::distributed

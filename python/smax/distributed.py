"""smax.distributed: vocabulary-parallel softmax, cross-entropy, linear
cross-entropy, top-k and sampling over torch.distributed (the C++ ops of
smax/distributed.h).

Each rank holds a shard of the classes (a slice of the class dim; shards
tile the classes in rank order, uneven and empty shards allowed) and gets
what the single-process op returns on the whole row, while only a few
numbers per row travel between ranks. Per-class outputs and gradients are
this rank's shard; per-row outputs (loss, lse, top-k, samples) are
replicated, class indices (targets, top-k indices, samples) are global.

    import torch.distributed as dist, smax.distributed as sd
    dist.init_process_group("gloo")                  # CPU tensors: gloo
    logits = my_shard.requires_grad_()               # [N, V_rank]
    loss = sd.cross_entropy(logits, targets)         # targets: global, replicated
    loss.backward()                                  # logits.grad: this shard's

Contract (every op)
* Collective: every rank of ``group`` calls the same op with the same
  options and row shape, and runs its backward (as with any tensor-parallel
  layer). Bad arguments on one rank, or ranks that disagree, raise on EVERY
  rank (ValueError naming the rank), never a hang.
* ``group``: a torch.distributed process group (None = the default group;
  CPU tensors need a gloo group), or a ``Communicator`` (any transport).
* ``vocab_offset``: optional, this shard's first global class. When given
  (on every rank, or on none) it is checked against the layout in rank
  order, collectively (one allgather of 16 bytes).
* DTensor: ``softmax``, ``log_softmax`` and ``cross_entropy`` accept a
  DTensor sharded on the class dim (``Shard(dim)`` on a 1-D DeviceMesh,
  torch's ``loss_parallel()`` layout): the local shard and the mesh's group
  are used, results come back as DTensors (Shard for softmax / log_softmax,
  Replicate for the loss), gradients flow back to the DTensor.
* Accuracy: the single-process op's bound plus the rounding of the
  exchanged partials (docs/distributed.md); with one rank, bit-equal to it.
* Threads: the op runs with the GIL released on ``threads`` smax threads;
  the collectives run on the calling thread (holding the GIL).
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, NamedTuple, Optional, Tuple

import numpy as _np
import torch
import torch.distributed as dist

from . import _smax as _C
from . import _distributed_autograd as _A
from ._common import _reduction, loss_options, softmax_options

__all__ = ["Communicator", "TorchCommunicator", "ShardLayout", "shard_layout", "softmax",
           "log_softmax", "logsumexp", "cross_entropy", "linear_cross_entropy",
           "softmax_topk", "sample"]

#: The base class of the collectives smax calls (a nanobind trampoline of
#: smax::distributed::Communicator). A subclass defines ``rank()``,
#: ``size()``, ``allgather(send, recv)`` (every rank's ``send`` bytes, in rank
#: order, into ``recv``) and ``alltoall(send, recv)`` (block j of ``send`` to
#: rank j; block j of ``recv`` from rank j). ``send`` / ``recv`` are 1-D numpy
#: uint8 arrays over smax's buffers, valid during the call only; ``send`` is
#: read-only. Its ``__init__`` must call ``super().__init__()``.
Communicator = _C._distributed.Communicator


def _as_tensor(a: _np.ndarray) -> torch.Tensor:
    """The torch view of a collective's numpy buffer (no copy). ``send`` is a
    read-only array: torch has no read-only tensors and warns; the collectives
    only read it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


class TorchCommunicator(Communicator):
    """smax's collectives on a torch.distributed process group (``None`` =
    the default group): allgather = ``all_gather_into_tensor``, alltoall =
    ``all_to_all_single``, on uint8 tensors over smax's buffers (CPU: a gloo
    group). Called by smax with the GIL held."""

    def __init__(self, group: Any = None) -> None:
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("smax.distributed.TorchCommunicator: torch.distributed is not "
                               "initialised (call torch.distributed.init_process_group first)")
        rank = dist.get_rank(group)
        if rank < 0:
            raise ValueError("smax.distributed.TorchCommunicator: this process is not a member "
                             "of the group")
        self.group = group
        self._rank = int(rank)
        self._size = int(dist.get_world_size(group))

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def allgather(self, send: _np.ndarray, recv: _np.ndarray) -> None:
        if send.size == 0:  # the same count on every rank: nobody sends
            return
        dist.all_gather_into_tensor(_as_tensor(recv), _as_tensor(send), group=self.group)

    def alltoall(self, send: _np.ndarray, recv: _np.ndarray) -> None:
        if send.size == 0:
            return
        dist.all_to_all_single(_as_tensor(recv), _as_tensor(send), group=self.group)

    def __repr__(self) -> str:
        return f"TorchCommunicator(rank={self._rank}, size={self._size})"


def _comm(group: Any) -> Any:
    return group if isinstance(group, Communicator) else TorchCommunicator(group)


class ShardLayout(NamedTuple):
    offset: int   #: this rank's first global class
    classes: int  #: this rank's class count
    vocab: int    #: the classes of all ranks together


def shard_layout(local_classes: int, group: Any = None) -> ShardLayout:
    """Where this rank's shard lies (collective: one allgather)."""
    return ShardLayout(*_C._distributed.shard_layout(_comm(group), int(local_classes)))


def _check_offset(comm: Any, op: str, n: int, vocab_offset: Optional[int]) -> int:
    """Collective check of ``vocab_offset`` (every rank passes one): every
    rank raises the same ValueError when some rank's offset is not where its
    shard starts in rank order. Returns this rank's offset."""
    try:
        want = operator.index(vocab_offset)
    except TypeError:
        raise TypeError(f"smax.distributed.{op}: vocab_offset must be an int or None, got "
                        f"{type(vocab_offset).__name__}") from None
    p = comm.size()
    mine = _np.array([n, want], dtype=_np.int64)
    every = _np.empty(2 * p, dtype=_np.int64)
    comm.allgather(mine.view(_np.uint8), every.view(_np.uint8))
    starts = _np.concatenate([[0], _np.cumsum(every[0::2])[:-1]])
    bad = [f"rank {k} passed {int(every[2 * k + 1])}, its shard starts at {int(starts[k])}"
           for k in range(p) if every[2 * k + 1] != starts[k]]
    if bad:
        raise ValueError(f"smax.distributed.{op}: vocab_offset disagrees with the shard layout "
                         f"(shards tile the classes in rank order): " + "; ".join(bad))
    return int(starts[comm.rank()])


def _dim(x: torch.Tensor, dim: Any, op: str) -> int:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"smax.distributed.{op}: expected a torch.Tensor, got "
                        f"{type(x).__name__}")
    nd = max(x.dim(), 1)
    try:
        d = operator.index(dim)
    except TypeError:
        raise TypeError(f"smax.distributed.{op}: dim must be an int, got "
                        f"{type(dim).__name__}") from None
    if not -nd <= d < nd:
        raise ValueError(f"smax.distributed.{op}: dim {d} is out of range for a tensor of "
                         f"rank {x.dim()}")
    return d % nd


def _setup(op: str, x: torch.Tensor, d: int, group: Any,
           vocab_offset: Optional[int]) -> Tuple[Any, Optional[int]]:
    comm = _comm(group)
    n = x.shape[d] if x.dim() else 1
    offset = None if vocab_offset is None else _check_offset(comm, op, n, vocab_offset)
    return comm, offset


# ---- DTensor (torch.distributed.tensor): Shard(class dim) on a 1-D mesh ----------------------


def _dtensor_type() -> Any:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch without DTensor
        return None
    return DTensor


def _is_dtensor(x: Any) -> bool:
    t = _dtensor_type()
    return t is not None and isinstance(x, t)


def _dtensor_local(x: Any, d: int, op: str) -> Tuple[torch.Tensor, Any]:
    """(local shard, the mesh's group) of a DTensor sharded on dim d."""
    from torch.distributed.tensor import Shard
    mesh = x.device_mesh
    if mesh.ndim != 1:
        raise ValueError(f"smax.distributed.{op}: the DTensor's DeviceMesh has {mesh.ndim} "
                         f"dims; smax takes a 1-D mesh (the class-sharding group)")
    (pl,) = x.placements
    if not isinstance(pl, Shard) or pl.dim % x.dim() != d:
        raise ValueError(f"smax.distributed.{op}: the DTensor is placed as {pl}; smax takes "
                         f"the classes sharded: Shard({d}) (or Shard(-1) for the last dim)")
    return x.to_local(), mesh.get_group()


def _replicated_local(t: Any) -> Any:
    """A target (or weight) given as a replicated DTensor: its local tensor."""
    if _is_dtensor(t):
        from torch.distributed.tensor import Replicate
        if not all(isinstance(p, Replicate) for p in t.placements):
            raise ValueError(f"smax.distributed: a DTensor target must be replicated, got "
                             f"{t.placements}")
        return t.to_local()
    return t


def _as_dtensor(local: torch.Tensor, like: Any, placements: Any, shape: Any = None) -> Any:
    DTensor = _dtensor_type()
    if shape is None:
        return DTensor.from_local(local, like.device_mesh, placements, run_check=False)
    return DTensor.from_local(local, like.device_mesh, placements, run_check=False,
                              shape=torch.Size(shape),
                              stride=torch.empty(shape, device="meta").stride())


# ---- the softmax family ----------------------------------------------------------------------


def _normalize(op: str, x: Any, dim: int, group: Any, vocab_offset: Optional[int], scale: float,
               temperature: float, empty_row: str, threads: int) -> Any:
    if _is_dtensor(x):
        d = _dim(x, dim, op)
        local, group = _dtensor_local(x, d, op)
        y = _normalize(op, local, d, group, vocab_offset, scale, temperature, empty_row, threads)
        return _as_dtensor(y, x, x.placements, tuple(x.shape))
    d = _dim(x, dim, op)
    comm, _ = _setup(op, x, d, group, vocab_offset)
    co = softmax_options(op, d, scale, temperature, None, empty_row, threads)
    return _A.Normalize.apply(x, comm, co, op)


def softmax(x: Any, dim: int = -1, *, group: Any = None, vocab_offset: Optional[int] = None,
            scale: float = 1.0, temperature: float = 1.0, empty_row: str = "zero",
            threads: int = 0) -> Any:
    """softmax over the classes of every rank; ``x`` this rank's shard (or a
    DTensor Shard(dim)); returns this shard's probabilities. Differentiable
    (the backward is collective)."""
    return _normalize("softmax", x, dim, group, vocab_offset, scale, temperature, empty_row,
                      threads)


def log_softmax(x: Any, dim: int = -1, *, group: Any = None, vocab_offset: Optional[int] = None,
                scale: float = 1.0, temperature: float = 1.0, empty_row: str = "zero",
                threads: int = 0) -> Any:
    """log_softmax over the classes of every rank (this shard's values)."""
    return _normalize("log_softmax", x, dim, group, vocab_offset, scale, temperature, empty_row,
                      threads)


def logsumexp(x: torch.Tensor, dim: int = -1, keepdim: bool = False, *, group: Any = None,
              vocab_offset: Optional[int] = None, scale: float = 1.0, temperature: float = 1.0,
              empty_row: str = "zero", threads: int = 0) -> torch.Tensor:
    """logsumexp over the classes of every rank, one value per row
    (replicated). Differentiable: d lse / d x = softmax (collective)."""
    op = "logsumexp"
    d = _dim(x, dim, op)
    comm, _ = _setup(op, x, d, group, vocab_offset)
    shape = tuple(x.shape)
    out_shape = (shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]) if shape else ()
    co = softmax_options(op, d, scale, temperature, None, empty_row, threads)
    return _A.LogSumExp.apply(x, comm, co, out_shape)


# ---- losses ----------------------------------------------------------------------------------


def cross_entropy(input: Any, target: Any, weight: Optional[torch.Tensor] = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, *, group: Any = None, dim: Optional[int] = None,
                  vocab_offset: Optional[int] = None, lse_square_scale: float = 0.0,
                  softcap: Optional[float] = None, return_z_loss: bool = False,
                  return_lse: bool = False, return_accuracy: bool = False,
                  empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                  empty_row: str = "zero", threads: int = 0, fused: bool = True) -> Any:
    """``F.cross_entropy`` over the classes of every rank: ``input`` this
    rank's logit shard (or a DTensor Shard(class dim)), ``target`` global
    class indices (replicated) or this shard's probability columns,
    ``weight`` this shard's class weights. label_smoothing's C is the whole
    vocabulary. ``lse_square_scale``: the z-loss coefficient (adds
    ``c * lse^2`` per row); ``return_z_loss`` / ``return_lse`` /
    ``return_accuracy`` also return those (replicated, without gradient).
    ``fused``: the forward also writes the gradient (one read of the logits),
    the backward scales it. The loss is replicated; ``input.grad`` is this
    shard's gradient."""
    op = "cross_entropy"
    if _is_dtensor(input):
        d = _dim(input, 1 if dim is None and input.dim() >= 2 else (0 if dim is None else dim),
                 op)
        local, g = _dtensor_local(input, d, op)
        res = cross_entropy(local, _replicated_local(target), _replicated_local(weight),
                            ignore_index, reduction, label_smoothing, group=g, dim=d,
                            vocab_offset=vocab_offset, lse_square_scale=lse_square_scale,
                            softcap=softcap, return_z_loss=return_z_loss, return_lse=return_lse,
                            return_accuracy=return_accuracy, empty_mean=empty_mean, scale=scale,
                            temperature=temperature, empty_row=empty_row, threads=threads,
                            fused=fused)
        from torch.distributed.tensor import Replicate
        if isinstance(res, tuple):
            return tuple(_as_dtensor(r, input, [Replicate()]) for r in res)
        return _as_dtensor(res, input, [Replicate()])
    d = _dim(input, 1 if dim is None and isinstance(input, torch.Tensor) and input.dim() >= 2
             else (0 if dim is None else dim), op)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"smax.distributed.{op}: target must be a torch.Tensor, got "
                        f"{type(target).__name__}")
    comm, _ = _setup(op, input, d, group, vocab_offset)
    red = _reduction(reduction)
    shape = tuple(input.shape)
    rows = shape[:d] + shape[d + 1:] if shape else ()
    co = softmax_options(op, d, scale, temperature, None, empty_row, threads)
    lo = loss_options(ignore_index, red, None if weight is None else weight.detach(), empty_mean)
    args = (float(label_smoothing), float(lse_square_scale),
            0.0 if softcap is None else float(softcap), red)
    want = (bool(return_z_loss), bool(return_lse), False, False, bool(return_accuracy))
    return _A.CrossEntropy.apply(input, target, weight, comm, args, want, lo, co, rows,
                                 bool(fused))


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                         bias: Optional[torch.Tensor] = None,
                         ce_weight: Optional[torch.Tensor] = None, ignore_index: int = -100,
                         lse_square_scale: float = 0.0, label_smoothing: float = 0.0,
                         reduction: str = "mean", softcap: Optional[float] = None, *,
                         group: Any = None, vocab_offset: Optional[int] = None,
                         return_z_loss: bool = False, return_lse: bool = False,
                         return_accuracy: bool = False, token_chunk: int = 0,
                         vocab_chunk: int = 0, empty_mean: str = "nan", scale: float = 1.0,
                         temperature: float = 1.0, empty_row: str = "zero",
                         threads: int = 0) -> Any:
    """``smax.linear_cross_entropy`` with the LM head split by rows over the
    ranks: ``hidden`` [N, D] replicated, ``weight`` this rank's rows [n_k, D]
    (and ``bias`` / ``ce_weight`` its [n_k]); no rank builds more than a tile
    of its logits. Gradients: ``hidden.grad`` the full gradient (summed over
    the ranks, replicated), ``weight.grad`` / ``bias.grad`` this shard's."""
    op = "linear_cross_entropy"
    if not isinstance(hidden, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"smax.distributed.{op}: hidden and weight must be torch.Tensors")
    comm, _ = _setup(op, weight, 0, group, vocab_offset)
    red = _reduction(reduction)
    co = softmax_options(op, -1, scale, temperature, None, empty_row, threads)
    lo = loss_options(ignore_index, red, None if ce_weight is None else ce_weight.detach(),
                      empty_mean)
    args = (float(label_smoothing), float(lse_square_scale),
            0.0 if softcap is None else float(softcap), red, int(token_chunk), int(vocab_chunk))
    want = (bool(return_z_loss), bool(return_lse), False, False, bool(return_accuracy))
    return _A.LinearCrossEntropy.apply(hidden, weight, bias, target, comm, args, want, lo, co)


# ---- top-k and sampling ----------------------------------------------------------------------


def softmax_topk(x: torch.Tensor, k: int, dim: int = -1, *, group: Any = None,
                 renormalize: bool = False, vocab_offset: Optional[int] = None,
                 scale: float = 1.0, temperature: float = 1.0, empty_row: str = "zero",
                 threads: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(probs, indices)`` of the k largest logits of the whole row
    (replicated; indices global), as ``smax.softmax_topk`` on the whole row.
    Differentiable in ``probs`` (this shard's gradient)."""
    op = "softmax_topk"
    d = _dim(x, dim, op)
    comm, offset = _setup(op, x, d, group, vocab_offset)
    if offset is None and torch.is_grad_enabled() and x.requires_grad:
        offset = shard_layout(x.shape[d] if x.dim() else 1, comm).offset
    co = softmax_options(op, d, scale, temperature, None, empty_row, threads)
    return _A.SoftmaxTopk.apply(x, comm, int(k), d, bool(renormalize), co,
                                0 if offset is None else offset)


def sample(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           dim: int = -1, keepdim: bool = False, *, group: Any = None,
           vocab_offset: Optional[int] = None, min_p: float = 0.0, min_tokens_to_keep: int = 1,
           top_k_ties: str = "exact", seed: Optional[int] = None, scale: float = 1.0,
           threads: int = 0) -> torch.Tensor:
    """``smax.sample`` on the whole row: one GLOBAL class index per row,
    replicated, the same for a seed whatever the number of ranks. ``seed``
    must be the same on every rank (the op checks); None draws it from
    torch's generator, which is then the same only where every rank seeded
    torch alike (``torch.manual_seed``): pass a seed otherwise."""
    op = "sample"
    d = _dim(logits, dim, op)
    comm, _ = _setup(op, logits, d, group, vocab_offset)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (), dtype=torch.int64).item())
    shape = tuple(logits.shape)
    out_shape = (shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]) if shape else ()
    out = torch.empty(out_shape, dtype=torch.int64)
    co = softmax_options(op, d, scale, 1.0, None, "zero", threads)
    _A._binding("sample")(comm, logits.detach(), out, float(temperature), int(top_k),
                          float(top_p), float(min_p), int(min_tokens_to_keep), str(top_k_ties),
                          int(seed), co)
    return out

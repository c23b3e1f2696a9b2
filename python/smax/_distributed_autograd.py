"""The torch.autograd.Functions of ``smax.distributed`` (the vocabulary-
parallel ops of smax/distributed.h on a local shard of the classes).

Each ``forward`` allocates its outputs with torch and calls the op's binding
in ``smax._smax._distributed`` with a ``Communicator`` (the op runs with the
GIL released; the communicator's collectives take it back); each
``backward`` calls the op's distributed backward, so it is collective too:
every rank of the group must run the backward of the same graph, as in any
tensor-parallel model. Backward passes are first order (``first_order``).

Gradients: per-class inputs (logits, class weights excluded) get this
shard's gradient; linear_cross_entropy's replicated ``hidden`` gets the full
gradient (summed over the ranks by the op). The extras (z_loss, lse,
accuracy) are returned without gradient (marked non-differentiable): the
z-loss is part of the loss, whose gradient includes it.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as _np
import torch

from . import _smax as _C
from ._autograd import first_order

Tensor = torch.Tensor
_D = _C._distributed


def _binding(op: str) -> Any:
    """The binding of a vocabulary-parallel op, or NotImplementedError when
    this build has none (smax/distributed.h's ops land in groups:
    SMAX_DISTRIBUTED_GROUPS in CMakeLists.txt)."""
    fn = getattr(_D, op, None)
    if fn is None:
        raise NotImplementedError(
            f"smax.distributed.{op}: this build of smax has no vocabulary-parallel {op} "
            f"(built groups: {list(_D.groups) or 'none'}; SMAX_DISTRIBUTED_GROUPS)")
    return fn


def _sigma(co: Any) -> float:
    """s = fl(scale / temperature), the factor of the logits."""
    return float(_np.float32(co.scale) / _np.float32(co.temperature))


def _acc(dtype: Any) -> Any:
    return torch.float64 if dtype == torch.float64 else torch.float32



def _loss_outputs(ctx: Any, loss: Tensor, extras: Any, want: Any, keep_lse: bool,
                  dtype: torch.dtype) -> Any:
    """The forward's return of the cross-entropies: the loss, then the extras
    asked for (``want``), non-differentiable. The lse (extras[1]) is also
    saved for the backward when ``keep_lse``, so the caller gets a copy in
    ``dtype``."""
    outs = [e if i != 1 or not keep_lse else e.to(dtype, copy=True)
            for i, (e, k) in enumerate(zip(extras, want)) if k]
    for o in outs:
        ctx.mark_non_differentiable(o)
    ctx.set_materialize_grads(False)
    return (loss, *outs) if outs else loss

class Normalize(torch.autograd.Function):
    """softmax / log_softmax: y = op(x) over the whole row; backward
    ``<op>_backward(y, dy)`` (one allgather of a per-row sum)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, comm: Any, co: Any, op: str) -> Tensor:
        fn = _binding(op)
        y = torch.empty(tuple(x.shape), dtype=x.dtype)
        fn(comm, x.detach(), y, co)
        ctx.save_for_backward(y)
        ctx.meta = (comm, co, op)
        return y

    @staticmethod
    @first_order("distributed.softmax / log_softmax")
    def backward(ctx: Any, dy: Tensor) -> Tuple[Optional[Tensor], ...]:
        (y,) = ctx.saved_tensors
        comm, co, op = ctx.meta
        dx = torch.empty(tuple(y.shape), dtype=y.dtype)
        _binding(op + "_backward")(comm, y, dy, dx, co)
        return dx, None, None, None


class LogSumExp(torch.autograd.Function):
    """lse = logsumexp(x) per row (replicated); d lse / d x = s * softmax(x)
    (the distributed softmax of the shard)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, comm: Any, co: Any, out_shape: Tuple[int, ...]) -> Tensor:
        out = torch.empty(out_shape, dtype=x.dtype)
        _binding("logsumexp")(comm, x.detach(), out, co)
        ctx.save_for_backward(x)
        ctx.meta = (comm, co)
        return out

    @staticmethod
    @first_order("distributed.logsumexp")
    def backward(ctx: Any, g: Tensor) -> Tuple[Optional[Tensor], ...]:
        (x,) = ctx.saved_tensors
        comm, co = ctx.meta
        p = torch.empty(tuple(x.shape), dtype=x.dtype)
        _binding("softmax")(comm, x.detach(), p, co)
        d = co.dim % x.dim() if x.dim() else 0
        gk = g.reshape(tuple(1 if i == d else s for i, s in enumerate(x.shape))) if x.dim() else g
        dx = (p.to(_acc(x.dtype)) * gk.to(_acc(x.dtype)) * _sigma(co)).to(x.dtype)
        return dx, None, None, None


#: cross_entropy's extras, in the binding's order (z_loss, lse, entropy,
#: target_logprob, accuracy); smax.distributed returns z_loss, lse, accuracy.
_EXTRAS = ("z_loss", "lse", "entropy", "target_logprob", "accuracy")


class CrossEntropy(torch.autograd.Function):
    """Fused (default with a gradient): the forward also writes this shard's
    d loss / d x for a unit upstream gradient, the backward scales it.
    Two-call (fused=False): the backward runs cross_entropy_backward with the
    forward's lse (no smoothing) or a fresh scan."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, target: Tensor, weight: Optional[Tensor], comm: Any,
                args: tuple, want: Tuple[bool, ...], lo: Any, co: Any, rows: Tuple[int, ...],
                fused: bool) -> Any:
        (label_smoothing, lse_square_scale, softcap, reduction) = args
        need_grad = ctx.needs_input_grad[0]
        fused = need_grad and fused
        reduced = rows if reduction == "none" else ()
        loss = torch.empty(reduced, dtype=x.dtype)
        keep_lse = (need_grad and not fused and label_smoothing == 0.0
                    and target.dtype == torch.int64)
        w = list(want)
        w[1] = w[1] or keep_lse
        shapes = (reduced, rows, rows, rows, reduced)
        lse_dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        extras = [torch.empty(s, dtype=lse_dtype if i == 1 else x.dtype) if k else None
                  for i, (s, k) in enumerate(zip(shapes, w))]
        grad = torch.empty(tuple(x.shape), dtype=x.dtype) if fused else None
        _binding("cross_entropy")(comm, x.detach(), target, loss, float(label_smoothing),
                                  float(lse_square_scale), float(softcap), *extras, lo, co, grad)
        ctx.fused = fused
        ctx.unit_grad = grad
        ctx.meta = (comm, args, lo, co)
        ctx.save_for_backward(None if fused else x, None if fused else target,
                              extras[1] if keep_lse else None)
        return _loss_outputs(ctx, loss, extras, want, keep_lse, x.dtype)

    @staticmethod
    @first_order("distributed.cross_entropy")
    def backward(ctx: Any, dloss: Optional[Tensor], *_dextras: Any) -> Tuple[Optional[Tensor], ...]:
        none = (None,) * 9
        if dloss is None:
            return (None,) + none
        comm, args, lo, co = ctx.meta
        (label_smoothing, lse_square_scale, softcap, reduction) = args
        if ctx.fused:
            dx = ctx.unit_grad
            if dx is None:
                raise RuntimeError(
                    "smax.distributed.cross_entropy: the fused path's gradient was already "
                    "handed to an earlier backward; call with fused=False to run backward more "
                    "than once (retain_graph=True)")
            ctx.unit_grad = None
            if reduction == "none":
                d = co.dim % dx.dim() if dx.dim() else 0
                dx.mul_(dloss.unsqueeze(d) if dx.dim() >= 2 else dloss)
            elif float(dloss) != 1.0:
                dx.mul_(dloss)
            return (dx,) + none
        x, target, lse = ctx.saved_tensors
        dx = torch.empty(tuple(x.shape), dtype=x.dtype)
        _binding("cross_entropy_backward")(comm, x.detach(), target, dloss, dx,
                                           float(label_smoothing), float(lse_square_scale),
                                           float(softcap), lse, lo, co)
        return (dx,) + none


class LinearCrossEntropy(torch.autograd.Function):
    """loss of cross_entropy(hidden @ weight_shard^T + bias_shard) over every
    rank's classes; backward: dhidden (full, replicated), dweight and dbias of
    this shard."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                comm: Any, args: tuple, want: Tuple[bool, ...], lo: Any, co: Any) -> Any:
        (label_smoothing, lse_square_scale, softcap, reduction, token_chunk, vocab_chunk) = args
        rows = tuple(hidden.shape[:1])
        reduced = rows if reduction == "none" else ()
        loss = torch.empty(reduced, dtype=hidden.dtype)
        keep_lse = label_smoothing == 0.0
        w = list(want)
        w[1] = w[1] or keep_lse
        shapes = (reduced, rows, rows, rows, reduced)
        lse_dtype = (torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16)
                     else hidden.dtype)
        extras = [torch.empty(s, dtype=lse_dtype if i == 1 else hidden.dtype) if k else None
                  for i, (s, k) in enumerate(zip(shapes, w))]
        _binding("linear_cross_entropy")(
            comm, hidden.detach(), weight.detach(), target,
            None if bias is None else bias.detach(), loss, float(label_smoothing),
            float(lse_square_scale), float(softcap), *extras, int(token_chunk), int(vocab_chunk),
            lo, co)
        lse = extras[1] if keep_lse else None
        ctx.save_for_backward(hidden, weight, bias, target, lse)
        ctx.meta = (comm, args, lo, co)
        return _loss_outputs(ctx, loss, extras, want, keep_lse, hidden.dtype)

    @staticmethod
    @first_order("distributed.linear_cross_entropy")
    def backward(ctx: Any, dloss: Optional[Tensor], *_dextras: Any) -> Tuple[Optional[Tensor], ...]:
        none = (None,) * 5
        if dloss is None:
            return (None, None, None, None) + none
        hidden, weight, bias, target, lse = ctx.saved_tensors
        comm, args, lo, co = ctx.meta
        (label_smoothing, lse_square_scale, softcap, reduction, token_chunk, vocab_chunk) = args
        want_db = ctx.needs_input_grad[2]
        dh = torch.empty(tuple(hidden.shape), dtype=hidden.dtype)
        dw = torch.empty(tuple(weight.shape), dtype=weight.dtype)
        db = torch.empty((weight.shape[0],), dtype=bias.dtype) if want_db else None
        _binding("linear_cross_entropy_backward")(
            comm, hidden.detach(), weight.detach(), target,
            None if bias is None else bias.detach(), dloss, dh, dw, db, float(label_smoothing),
            float(lse_square_scale), float(softcap), lse, int(token_chunk), int(vocab_chunk),
            lo, co)
        return (dh if ctx.needs_input_grad[0] else None,
                dw if ctx.needs_input_grad[1] else None, db, None) + none


class SoftmaxTopk(torch.autograd.Function):
    """(probs, indices) of the k largest logits of the whole row (replicated,
    global indices). Gradient on this shard's logits: with p the row's softmax
    and g the upstream gradient of probs, dt = scatter(g p_K) - p <g, p_K>
    (renormalised: dt_K = p_K (g - <g, p_K>)), the scatter keeping the winners
    that lie in this shard."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, comm: Any, k: int, d: int, renormalize: bool, co: Any,
                offset: int) -> Tuple[Tensor, Tensor]:
        shape = tuple(x.shape)
        oshape = shape[:d] + (k,) + shape[d + 1:]
        probs = torch.empty(oshape, dtype=x.dtype)
        idx = torch.empty(oshape, dtype=torch.int64)
        _binding("softmax_topk")(comm, x.detach(), probs, idx, int(k), bool(renormalize), co)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, probs, idx)
        ctx.meta = (comm, d, renormalize, co, offset)
        return probs, idx

    @staticmethod
    @first_order("distributed.softmax_topk")
    def backward(ctx: Any, dp: Tensor, _didx: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
        x, probs, idx = ctx.saved_tensors
        comm, d, renormalize, co, offset = ctx.meta
        acc = _acc(x.dtype)
        pk = probs.to(acc)
        gp = dp.to(acc) * pk
        p = None
        if not renormalize:  # collective: every rank computes it, an empty shard too
            p = torch.empty(tuple(x.shape), dtype=x.dtype)
            _binding("softmax")(comm, x.detach(), p, co)
        n = x.shape[d]
        if n == 0:
            return torch.zeros_like(x), None, None, None, None, None, None
        local = idx - offset
        inside = (local >= 0) & (local < n)
        # winners of other shards scatter a 0 onto column 0 (a no-op of scatter_add_)
        at = torch.where(inside, local, torch.zeros_like(local))
        contrib = torch.where(inside, gp, torch.zeros_like(gp))
        if renormalize:
            contrib = torch.where(inside, gp - pk * gp.sum(d, True), torch.zeros_like(gp))
            dt = torch.zeros(tuple(x.shape), dtype=acc).scatter_add_(d, at, contrib)
        else:
            dt = (p.to(acc) * (-gp.sum(d, True))).scatter_add_(d, at, contrib)
        return (dt * _sigma(co)).to(x.dtype), None, None, None, None, None, None

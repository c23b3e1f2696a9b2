"""Array functions of the losses: cross-entropy, linear cross-entropy,
z-losses and the sparse / StableMax losses (re-exported by ``smax``;
conventions: ``help(smax._ops)``)."""
from __future__ import annotations

from typing import Any, Optional, Union

from ._common import (
    Array,
    _cross_entropy_fwd,
    _linear_cross_entropy_fwd,
    _loss,
    _opt,
    _scalar_or_array,
    _wants_grad,
    loss_options,
    softmax_options,
)
from ._route import autograd, learnable_logit_scale

__all__ = [
    "cross_entropy", "linear_cross_entropy", "z_loss", "spherical_z_loss",
    "sparsemax_loss", "entmax15_loss", "entmax_bisect_loss", "sparse_softmax_loss",
    "stablemax_cross_entropy",
]


# ---- losses ---------------------------------------------------------------------------------

_LOSS_DOC = """
    Loss conventions (PyTorch's): ``target`` holds int64 class indices with
    ``x``'s shape without ``dim``; a target equal to ``ignore_index``
    contributes 0 loss and 0 gradient, any other target outside [0, C) raises
    ValueError. ``weight``: optional float32 [C] class weights (a row's loss is
    scaled by ``weight[target]``). ``reduction``: ``"none"`` (one value per
    row), ``"sum"``, or ``"mean"`` (divided by the summed weights of the
    non-ignored rows; ``"elementwise_mean"`` is accepted as an alias).
    ``empty_mean``: what a mean over zero rows gives, ``"nan"`` (PyTorch) or
    ``"zero"``."""


def _loss_entry(op: str, x: Any, target: Any, dim: Any, params: tuple, ignore_index: int,
                reduction: str, weight: Any, empty_mean: str, scale: float, temperature: float,
                mask: Any, empty_row: str, threads: int, out: Any) -> Any:
    lo = loss_options(ignore_index, reduction, weight, empty_mean)
    co = softmax_options(op, dim, scale, temperature, None, empty_row, threads)
    if out is None and _wants_grad(x, mask):
        return autograd().loss(op, x, mask, target, dim, params, lo, co)
    co.mask = _opt(mask)
    return _loss(op, x, target, dim, params, lo, co, out)


@learnable_logit_scale()
def sparsemax_loss(x: Array, target: Array, dim: int = -1, ignore_index: int = -100,
                   reduction: str = "mean", weight: Any = None, *, empty_mean: str = "nan",
                   scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                   empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Sparsemax loss (Martins & Astudillo 2016), ``entmax.SparsemaxLoss``:
    ``(1 - |p|^2) / 2 + <p, t> - t_target``, ``p = sparsemax(t)``; >= 0, 0 iff
    p is the one-hot of the target. Gradient ``p - onehot(target)``. A masked
    target gives +inf. Per-row error <= 1e-6 (1 + |loss|)."""
    return _loss_entry("sparsemax_loss", x, target, dim, (), ignore_index, reduction, weight,
                       empty_mean, scale, temperature, mask, empty_row, threads, out)


sparsemax_loss.__doc__ = (sparsemax_loss.__doc__ or "") + _LOSS_DOC


@learnable_logit_scale()
def entmax15_loss(x: Array, target: Array, dim: int = -1, ignore_index: int = -100,
                  reduction: str = "mean", weight: Any = None, *, empty_mean: str = "nan",
                  scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                  empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """1.5-entmax loss, ``entmax.Entmax15Loss``:
    ``(1 - sum p^1.5) / 0.75 + <p, t> - t_target``, ``p = entmax15(t)``.
    Gradient ``p - onehot(target)``."""
    return _loss_entry("entmax15_loss", x, target, dim, (), ignore_index, reduction, weight,
                       empty_mean, scale, temperature, mask, empty_row, threads, out)


entmax15_loss.__doc__ = (entmax15_loss.__doc__ or "") + _LOSS_DOC


@learnable_logit_scale()
def entmax_bisect_loss(x: Array, target: Array, alpha: Union[float, Array] = 1.5,
                       dim: int = -1, n_iter: int = 50, ignore_index: int = -100,
                       reduction: str = "mean", weight: Any = None, *,
                       empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                       mask: Any = None, empty_row: str = "zero", threads: int = 0,
                       out: Any = None) -> Array:
    """alpha-entmax loss, ``entmax.EntmaxBisectLoss``:
    ``(1 - sum p^alpha) / (alpha (alpha - 1)) + <p, t> - t_target`` with
    ``p = entmax_bisect(t, alpha)`` (normalised). ``alpha == 1``: the
    cross-entropy. Gradient ``p - onehot(target)`` (no gradient for alpha)."""
    a, a_t = _scalar_or_array(alpha, "alpha", "entmax_bisect_loss")
    return _loss_entry("entmax_bisect_loss", x, target, dim, (a, a_t, int(n_iter)),
                       ignore_index, reduction, weight, empty_mean, scale, temperature, mask,
                       empty_row, threads, out)


entmax_bisect_loss.__doc__ = (entmax_bisect_loss.__doc__ or "") + _LOSS_DOC


@learnable_logit_scale()
def sparse_softmax_loss(x: Array, target: Array, k: int, dim: int = -1, *,
                        force_target: bool = False, ignore_index: int = -100,
                        reduction: str = "mean", weight: Any = None, empty_mean: str = "nan",
                        scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                        empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Top-k softmax loss: ``log sum_{j in K} exp(t_j) - t_target`` (K = the k
    largest logits). ``force_target``: K also holds the target (the loss is
    then a cross-entropy over K + target, >= 0). Gradient
    ``p - onehot(target)`` with p the top-k softmax."""
    return _loss_entry("sparse_softmax_loss", x, target, dim, (int(k), bool(force_target)),
                       ignore_index, reduction, weight, empty_mean, scale, temperature, mask,
                       empty_row, threads, out)


sparse_softmax_loss.__doc__ = (sparse_softmax_loss.__doc__ or "") + _LOSS_DOC


@learnable_logit_scale()
def stablemax_cross_entropy(x: Array, target: Array, dim: int = -1, ignore_index: int = -100,
                            reduction: str = "mean", weight: Any = None, *,
                            empty_mean: str = "nan", scale: float = 1.0,
                            temperature: float = 1.0, mask: Any = None,
                            empty_row: str = "zero", threads: int = 0,
                            out: Any = None) -> Array:
    """StableMax cross-entropy (Prieto et al. 2025):
    ``-log stablemax(t)[target]``, computed without cancellation. Per-row
    relative error <= 1e-6."""
    return _loss_entry("stablemax_cross_entropy", x, target, dim, (), ignore_index, reduction,
                       weight, empty_mean, scale, temperature, mask, empty_row, threads, out)


stablemax_cross_entropy.__doc__ = (stablemax_cross_entropy.__doc__ or "") + _LOSS_DOC


@learnable_logit_scale()
def spherical_z_loss(x: Array, target: Array, a: float, b: float, dim: int = -1,
                     ignore_index: int = -100, reduction: str = "mean", weight: Any = None, *,
                     empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                     mask: Any = None, empty_row: str = "zero", threads: int = 0,
                     out: Any = None) -> Array:
    """The Z-loss of de Brebisson & Vincent (ICLR 2016):
    ``softplus(a (b - z_target)) / a`` with ``z = (t - mean t) / std t``
    (population std over the unmasked logits). ``a > 0``, ``b`` finite (no
    defaults: the paper tunes both). A constant row gives NaN."""
    return _loss_entry("spherical_z_loss", x, target, dim, (float(a), float(b)), ignore_index,
                       reduction, weight, empty_mean, scale, temperature, mask, empty_row,
                       threads, out)


spherical_z_loss.__doc__ = (spherical_z_loss.__doc__ or "") + _LOSS_DOC


@learnable_logit_scale()
def z_loss(x: Array, target: Optional[Array] = None, coefficient: float = 1e-4, dim: int = -1,
           ignore_index: int = -100, reduction: str = "mean", weight: Any = None, *,
           empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
           mask: Any = None, empty_row: str = "zero", threads: int = 0,
           out: Any = None) -> Array:
    """PaLM z-loss ``coefficient * logsumexp(t)^2`` per row. Without ``target``
    every row counts with weight 1; with ``target`` (class indices) ignored
    rows are skipped and rows are weighted by ``weight[target]``: exactly the
    z-loss part of ``cross_entropy(..., lse_square_scale=coefficient)``."""
    return _loss_entry("z_loss", x, target, dim, (float(coefficient),), ignore_index,
                       reduction, weight, empty_mean, scale, temperature, mask, empty_row,
                       threads, out)


z_loss.__doc__ = (z_loss.__doc__ or "") + _LOSS_DOC

_CE_EXTRAS = ("z_loss", "lse", "entropy", "target_logprob", "accuracy")


@learnable_logit_scale()
def cross_entropy(input: Array, target: Array, weight: Any = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0, *,
                  dim: Optional[int] = None, lse_square_scale: float = 0.0,
                  softcap: Optional[float] = None, return_z_loss: bool = False,
                  return_lse: bool = False, return_entropy: bool = False,
                  return_target_logprob: bool = False, return_accuracy: bool = False,
                  empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                  mask: Any = None, empty_row: str = "zero", threads: int = 0,
                  out: Any = None) -> Any:
    """Fused cross-entropy from logits, ``torch.nn.functional.cross_entropy``'s
    signature and results (one read of the logits, no log-softmax tensor).

    Args:
        input: float32 logits ``[C]``, ``[N, C]`` or ``[N, C, d1, ...]``.
        target: int64 class indices (``input``'s shape without the class dim)
            or float32 class probabilities (``input``'s shape).
        weight, ignore_index, reduction, label_smoothing: as PyTorch.
        dim: the class dimension; None = PyTorch's (1, or 0 for 1-D input).
        lse_square_scale: PaLM z-loss coefficient: adds ``c * lse^2`` per row.
        softcap: Gemma 2 logit soft-capping ``softcap * tanh(t / softcap)``
            (None / 0 = off).
        return_z_loss, return_lse, return_entropy, return_target_logprob,
        return_accuracy: also return these (in that order, after the loss):
            z_loss (reduced like the loss, already included in it), per-row
            lse and softmax entropy, per-row log p(target), and the top-1
            accuracy (per row for reduction "none", else the mean over
            non-ignored rows, or the count for "sum"). With ``smax.torch`` every
            extra but accuracy is differentiable (accuracy is piecewise constant).
        empty_mean: a mean over zero non-ignored rows gives NaN (PyTorch) or
            0 (``"zero"``).
        scale, temperature, mask, empty_row, threads, out: as ``smax.softmax``
            (masks are an smax extension: a masked class has probability 0).

    Returns the loss, or a tuple ``(loss, *extras)`` when extras are asked for.
    Per-row error vs float64 <= 4e-6 (1 + |lse| + |t_target|) (weighted).
    """
    want = (return_z_loss, return_lse, return_entropy, return_target_logprob, return_accuracy)
    cap = 0.0 if softcap is None else float(softcap)
    if out is None and _wants_grad(input, mask):
        return autograd().cross_entropy(input, target, weight, ignore_index, reduction,
                                   label_smoothing, dim=dim, lse_square_scale=lse_square_scale,
                                   softcap=softcap, return_z_loss=return_z_loss,
                                   return_lse=return_lse, return_entropy=return_entropy,
                                   return_target_logprob=return_target_logprob,
                                   return_accuracy=return_accuracy, empty_mean=empty_mean,
                                   scale=scale, temperature=temperature, mask=mask,
                                   empty_row=empty_row, threads=threads)
    loss, extras = _cross_entropy_fwd(input, target, weight, ignore_index, reduction,
                                      label_smoothing, dim, lse_square_scale, cap, want,
                                      empty_mean, scale, temperature, mask, empty_row, threads,
                                      out)
    if not any(want):
        return loss
    return (loss,) + tuple(e for e, w in zip(extras, want) if w)


@learnable_logit_scale("hidden", "bias")
def linear_cross_entropy(hidden: Array, weight: Array, target: Array, bias: Any = None,
                         ce_weight: Any = None, ignore_index: int = -100,
                         lse_square_scale: float = 0.0, label_smoothing: float = 0.0,
                         reduction: str = "mean", softcap: Optional[float] = None,
                         return_z_loss: bool = False, *, return_lse: bool = False,
                         return_entropy: bool = False, return_target_logprob: bool = False,
                         return_accuracy: bool = False, token_chunk: int = 0,
                         vocab_chunk: int = 0, empty_mean: str = "nan", scale: float = 1.0,
                         temperature: float = 1.0, empty_row: str = "zero",
                         threads: int = 0) -> Any:
    """Fused linear layer + cross-entropy (LM head) that never materialises the
    ``[N, V]`` logits: ``cross_entropy(hidden @ weight.T + bias, target)``.

    Signature as Liger-Kernel's ``liger_fused_linear_cross_entropy``:
    ``hidden [N, D]``, ``weight [V, D]``, ``target`` int64 ``[N]``, ``bias
    [V]``, ``ce_weight`` the class weights ``[V]``; the other options and the
    extras as ``cross_entropy``. Memory O(N + token_chunk * vocab_chunk)
    (0 = auto tiles). With ``smax.torch`` hidden, weight and bias get
    gradients. Masks are not supported (give padding classes a -inf bias).
    dtypes: hidden, weight, bias and ce_weight may each be float32, float64,
    float16 or bfloat16 (the logits and the loss are computed in float32);
    the loss and the extras have hidden's dtype, each gradient its input's.
    """
    want = (return_z_loss, return_lse, return_entropy, return_target_logprob, return_accuracy)
    cap = 0.0 if softcap is None else float(softcap)
    if _wants_grad(hidden, weight, bias):
        args = (int(ignore_index), float(lse_square_scale), float(label_smoothing),
                str(reduction), cap, int(token_chunk), int(vocab_chunk), str(empty_mean))
        co = softmax_options("linear_cross_entropy", -1, scale, temperature, None, empty_row,
                             threads)
        return autograd().linear_cross_entropy(hidden, weight, bias, target, ce_weight, args,
                                               tuple(bool(w) for w in want), co)
    loss, extras = _linear_cross_entropy_fwd(hidden, weight, target, bias, ce_weight,
                                             ignore_index, lse_square_scale, label_smoothing,
                                             reduction, cap, want, token_chunk, vocab_chunk,
                                             empty_mean, scale, temperature, empty_row, threads)
    if not any(want):
        return loss
    return (loss,) + tuple(e for e, w in zip(extras, want) if w)

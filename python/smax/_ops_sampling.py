"""Array functions of the samplers: Gumbel noise / softmax / max, fused
top-k softmax, sampling filters and Soft-NMS (re-exported by ``smax``;
conventions: ``help(smax._ops)``)."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

from . import _smax as _C
from ._common import (
    Array,
    _alloc,
    _arg,
    _check_out,
    _norm_dim,
    _opt,
    _prep,
    _rows_shape,
    _seed,
    _shape_of,
    _wants_grad,
    softmax_options,
)
from ._route import autograd, learnable_logit_scale

__all__ = ["gumbel_noise", "gumbel_softmax", "gumbel_max", "softmax_topk", "sampling_filter",
           "sample", "soft_nms"]


# ---- sampling ---------------------------------------------------------------------------------


def gumbel_noise(shape: Sequence[int], seed: int = 0, dim: int = -1, *, like: Any = None,
                 out: Any = None) -> Array:
    """The Gumbel noise ``g(seed, row, i) = -log(-log U)`` that gumbel_softmax,
    gumbel_max and sample draw for an input of ``shape`` (rows along ``dim``):
    Philox4x32-10 keyed by ``seed``, evaluated in float64, rounded to float32.
    Returns numpy, or ``like``'s array type, or writes ``out``."""
    shape = tuple(int(s) for s in shape)
    if out is None:
        out = _alloc(like, shape)
    else:
        _check_out(out, "gumbel_noise", shape)
    _C.gumbel_noise(_arg(out), int(seed), int(dim))
    return out


@learnable_logit_scale()
def gumbel_softmax(logits: Array, tau: float = 1.0, hard: bool = False, dim: int = -1, *,
                   seed: Optional[int] = None, noise: Any = None, return_soft: bool = False,
                   scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                   empty_row: str = "zero", threads: int = 0, out: Any = None) -> Any:
    """Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017),
    ``torch.nn.functional.gumbel_softmax``'s signature:
    ``y = softmax((t + g) / tau)`` with Gumbel noise g.

    ``hard=True``: a one-hot of ``argmax(t + g)`` (exactly ``gumbel_max``'s
    index for the same seed); with ``smax.torch`` its gradient is the soft
    sample's (straight-through). ``seed``: the noise seed (the same seed
    always gives the same sample, for any thread count or layout); None draws
    one from torch's (torch inputs) or numpy's global generator. ``noise``: an
    explicit float32 noise array of ``logits``' shape instead.
    ``return_soft``: also return the soft sample, ``(y, y_soft)`` (with
    ``smax.torch`` both are differentiable).
    """
    op = "gumbel_softmax"
    co = softmax_options(op, dim, scale, temperature, None, empty_row, threads)
    if out is None and _wants_grad(logits, mask):
        return autograd().gumbel_softmax(logits, mask, float(tau), bool(hard),
                                         _seed(seed, logits), noise, dim, bool(return_soft), co)
    co.mask = _opt(mask)
    shape, _, out = _prep(op, logits, dim, out, what="logits")
    y_soft = _alloc(logits, shape) if (hard and return_soft) else None
    _C.gumbel_softmax(_arg(logits), _arg(out), float(tau), bool(hard), _seed(seed, logits),
                      None if noise is None else _arg(noise),
                      None if y_soft is None else _arg(y_soft), co)
    if return_soft:
        return out, (out if y_soft is None else y_soft)
    return out


def gumbel_max(logits: Array, dim: int = -1, keepdim: bool = False, *,
               seed: Optional[int] = None, scale: float = 1.0, temperature: float = 1.0,
               mask: Any = None, threads: int = 0, out: Any = None) -> Array:
    """One exact sample of ``softmax(t)`` per row by the Gumbel-max trick:
    ``argmax(t + g)`` (int64, ``logits``' shape without ``dim``, or keepdim).
    -1 for empty, all-masked and NaN / +inf rows. ``seed`` as gumbel_softmax."""
    op = "gumbel_max"
    shape = _shape_of(logits, "logits", op)
    d = _norm_dim(dim, len(shape), op)
    _, _, out = _prep(op, logits, dim, out, _rows_shape(shape, d, keepdim), "i64", "logits")
    _C.gumbel_max(_arg(logits), _arg(out), _seed(seed, logits),
                  softmax_options(op, dim, scale, temperature, mask, "zero", threads))
    return out


@learnable_logit_scale()
def softmax_topk(x: Array, k: int, dim: int = -1, *, renormalize: bool = False,
                 scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                 empty_row: str = "zero", threads: int = 0) -> Tuple[Array, Array]:
    """Fused softmax + top-k in one read of each row: ``(probs, indices)`` like
    ``torch.topk(torch.softmax(x, dim), k, dim)``.

    Order: descending logit, ties by the lower index. ``probs`` are the full
    row's softmax probabilities of the k winners (summing to <= 1), or with
    ``renormalize`` the softmax over the k winners. ``indices`` are int64.
    Relative error <= 2e-6. With ``smax.torch``, probs are differentiable
    with respect to x.
    """
    op = "softmax_topk"
    co = softmax_options(op, dim, scale, temperature, None, empty_row, threads)
    if _wants_grad(x, mask):
        return autograd().softmax_topk(x, mask, int(k), dim, bool(renormalize), co)
    co.mask = _opt(mask)
    shape = _shape_of(x, "x", op)
    d = _norm_dim(dim, len(shape), op)
    oshape = shape[:d] + (int(k),) + shape[d + 1:] if shape else (int(k),)
    probs = _alloc(x, oshape)
    idx = _alloc(x, oshape, "i64")
    _C.softmax_topk(_arg(x), _arg(probs), _arg(idx), int(k), bool(renormalize), co)
    return probs, idx


_FILTER_DOC = """
    Filters, in the order of Hugging Face transformers' logits warpers
    (``GenerationMixin._get_logits_processor``: temperature, top-k, top-p,
    min-p), with their names and semantics:

    * ``top_k``: keep the ``max(top_k, min_tokens_to_keep)`` largest logits
      (0 = off). ``top_k_ties="exact"`` (default): exactly that many, ties
      by the lower index; ``"keep"``: every entry equal to the k-th too
      (``TopKLogitsWarper``'s rule).
    * ``top_p``: the shortest prefix (descending, ties by the lower index)
      of what top-k kept whose probability mass reaches ``top_p``, at least
      ``min_tokens_to_keep`` entries (``TopPLogitsWarper``). In (0, 1].
    * ``min_p``: keep the entries with ``p >= min_p * max p`` of what top-p
      kept, decided exactly as ``z - z_max >= log(min_p)`` in float64, at
      least ``min_tokens_to_keep`` (``MinPLogitsWarper``). In [0, 1];
      0 = off.
    * ``min_tokens_to_keep``: the floor of every filter (>= 1).

    Bad values (``min_p`` NaN or outside [0, 1], ``min_tokens_to_keep < 1``,
    an unknown ``top_k_ties``) raise ValueError naming the option. The
    top-k and min-p decisions are exact; top-p's masses are float64 (a cut
    within 1e-6 of ``top_p`` may move by one entry when only top_p and
    top_k are set, see include/smax/sampling.h).
"""


def sampling_filter(logits: Array, temperature: float = 1.0, top_k: int = 0,
                    top_p: float = 1.0, dim: int = -1, *, min_p: float = 0.0,
                    min_tokens_to_keep: int = 1, top_k_ties: str = "exact",
                    scale: float = 1.0, mask: Any = None, threads: int = 0,
                    out: Any = None) -> Array:
    op = "sampling_filter"
    _, _, out = _prep(op, logits, dim, out, what="logits")
    _C.sampling_filter(_arg(logits), _arg(out), float(temperature), int(top_k), float(top_p),
                       float(min_p), int(min_tokens_to_keep), str(top_k_ties),
                       softmax_options(op, dim, scale, 1.0, mask, "zero", threads))
    return out


sampling_filter.__doc__ = """The tempered, filtered logits that ``sample`` draws from:
    ``t / temperature`` where an entry survives top-k, top-p and min-p, -inf
    elsewhere. ``temperature == 0``: greedy (only the argmax kept; the
    filters are ignored).
""" + _FILTER_DOC


def sample(logits: Array, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           dim: int = -1, keepdim: bool = False, *, min_p: float = 0.0,
           min_tokens_to_keep: int = 1, top_k_ties: str = "exact", seed: Optional[int] = None,
           scale: float = 1.0, mask: Any = None, threads: int = 0, out: Any = None) -> Array:
    op = "sample"
    shape = _shape_of(logits, "logits", op)
    d = _norm_dim(dim, len(shape), op)
    _, _, out = _prep(op, logits, dim, out, _rows_shape(shape, d, keepdim), "i64", "logits")
    _C.sample(_arg(logits), _arg(out), float(temperature), int(top_k), float(top_p),
              float(min_p), int(min_tokens_to_keep), str(top_k_ties),
              _seed(seed, logits), softmax_options(op, dim, scale, 1.0, mask, "zero", threads))
    return out


sample.__doc__ = """One token per row from ``softmax(sampling_filter(logits, ...))``
    (temperature, top-k, top-p, min-p), by Gumbel-max with the
    counter-based noise of ``seed`` (reproducible for any thread count).
    int64 indices, ``logits``' shape without ``dim`` (or keepdim); -1 for
    empty / all-masked / NaN rows. ``temperature == 0`` is greedy.
""" + _FILTER_DOC


def soft_nms(boxes: Array, scores: Array, *, method: str = "linear", sigma: float = 0.5,
             iou_threshold: float = 0.3, score_threshold: float = 0.001,
             plus_one: bool = False) -> Tuple[Array, Array]:
    """Soft-NMS (Bodla et al., ICCV 2017) over ``boxes`` (float32 [N, 4] as x1,
    y1, x2, y2) and ``scores`` (float32 [N]).

    ``method``: ``"hard"`` (classic NMS), ``"linear"`` (score * (1 - iou)
    above ``iou_threshold``) or ``"gaussian"`` (score * exp(-iou^2 / sigma)).
    Boxes whose score falls below ``score_threshold`` are dropped. Returns
    ``(indices, scores)``: the kept boxes (int64) in selection order and their
    decayed scores, in ``boxes``' array type.
    """
    op = "soft_nms"
    bs = _shape_of(boxes, "boxes", op)
    _shape_of(scores, "scores", op)
    n = bs[0] if bs else 0
    idx = _alloc(boxes, (n,), "i64")
    kept = _alloc(scores if type(scores) is type(boxes) else boxes, (n,))  # scores' dtype
    count = _C.soft_nms(_arg(boxes), _arg(scores), _arg(idx), _arg(kept), str(method),
                        float(sigma), float(iou_threshold), float(score_threshold),
                        bool(plus_one))
    return idx[:count], kept[:count]

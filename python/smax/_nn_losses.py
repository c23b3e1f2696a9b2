"""The loss modules of ``smax.nn`` (re-exported there; also ``smax.torch``'s).

``CrossEntropyLoss`` is ``torch.nn.CrossEntropyLoss`` (same constructor,
positional order and ``state_dict``: ``weight`` is a buffer), computed by
``smax.torch.cross_entropy`` with its extras (z-loss, softcap, logit scale).
``LinearCrossEntropyLoss`` is the LM-head loss
``cross_entropy(hidden @ weight.T + bias, target)`` through
``smax.torch.linear_cross_entropy``: the ``[N, V]`` logits are never
materialised. The entmax losses keep the ``entmax`` package's constructors.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

import smax.torch as _st
from smax._nn_common import _LogitScale

__all__ = ["CrossEntropyLoss", "LinearCrossEntropyLoss", "SparsemaxLoss", "Entmax15Loss",
           "EntmaxBisectLoss", "SparseSoftmaxLoss", "StableMaxCrossEntropyLoss", "ZLoss",
           "SphericalZLoss"]


def _reduction(size_average: Optional[bool], reduce: Optional[bool], reduction: str) -> str:
    """torch.nn's rule for the deprecated size_average / reduce arguments."""
    if size_average is None and reduce is None:
        return reduction
    from torch.nn import _reduction as _red
    return _red.legacy_get_string(size_average, reduce)


def _cross_entropy_repr(m: Any) -> str:
    """The cross-entropy options of CrossEntropyLoss / LinearCrossEntropyLoss
    for extra_repr (the ones that differ from their defaults, then the rest)."""
    s = f"ignore_index={m.ignore_index}, reduction={m.reduction!r}"
    if m.label_smoothing:
        s += f", label_smoothing={m.label_smoothing}"
    if m.lse_square_scale:
        s += f", lse_square_scale={m.lse_square_scale}"
    if m.softcap is not None:
        s += f", softcap={m.softcap}"
    s += m._logit_scale_repr()
    return s + "".join(f", {k}={v!r}" for k, v in m.options.items())


class CrossEntropyLoss(_LogitScale, torch.nn.Module):
    """``torch.nn.CrossEntropyLoss(weight=None, size_average=None,
    ignore_index=-100, reduce=None, reduction="mean", label_smoothing=0.0)``
    with smax (``smax.torch.cross_entropy``): class-index or probability
    targets, class weights, ignore_index, label smoothing, every reduction,
    ``[N, C]`` or ``[N, C, d1, ...]`` input, like PyTorch.

    smax's extras are keyword-only: ``lse_square_scale`` (the z-loss
    coefficient: adds ``lse_square_scale * lse^2`` per row, PaLM's z-loss),
    ``softcap`` (logits become ``softcap * tanh(t / softcap)``), ``scale`` /
    ``temperature`` (logits ``x * scale / temperature``; one-element tensors
    that require grad get gradients) and any other keyword of
    ``smax.torch.cross_entropy`` (``fused``, ``inplace_backward``,
    ``empty_mean``, ``return_z_loss`` ...).
    """

    def __init__(self, weight: Optional[torch.Tensor] = None, size_average: Optional[bool] = None,
                 ignore_index: int = -100, reduce: Optional[bool] = None, reduction: str = "mean",
                 label_smoothing: float = 0.0, *, lse_square_scale: float = 0.0,
                 softcap: Optional[float] = None, **options: Any) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = _reduction(size_average, reduce, reduction)
        self.label_smoothing = label_smoothing
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap
        self._init_logit_scale(options)
        self.options = options

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Any:
        return _st.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                                 self.label_smoothing, lse_square_scale=self.lse_square_scale,
                                 softcap=self.softcap, **self._logit_scale(), **self.options)

    def extra_repr(self) -> str:
        return _cross_entropy_repr(self)


class LinearCrossEntropyLoss(_LogitScale, torch.nn.Module):
    """The LM-head loss ``cross_entropy(hidden @ weight.T + bias, target)``
    without materialising the logits (``smax.torch.linear_cross_entropy``).

    Three ways to give the head:

    * ``LinearCrossEntropyLoss(in_features, num_classes, bias=False)`` owns a
      ``weight [num_classes, in_features]`` (and ``bias``) parameter,
      initialised like ``torch.nn.Linear``;
    * ``LinearCrossEntropyLoss.from_linear(lm_head)`` shares an existing
      ``nn.Linear``'s weight and bias (the same ``Parameter`` objects: tied,
      so they also appear in this module's ``state_dict``);
    * ``LinearCrossEntropyLoss()`` holds none: pass ``weight`` (and ``bias``)
      to ``forward``, e.g. ``loss_fn(h, y, model.lm_head.weight)``.

    ``forward(hidden, target, weight=None, bias=None)``: ``hidden [..., D]``,
    ``target`` int64 ``[...]`` (the same leading shape); arguments given to
    ``forward`` take precedence over the held ones. ``reduction="none"``
    returns the loss in ``target``'s shape. Options as
    ``torch.nn.CrossEntropyLoss`` (``ce_weight`` is the class weight, since
    ``weight`` is the head's), plus ``lse_square_scale``, ``softcap`` and the
    other keywords of ``smax.torch.linear_cross_entropy`` (``scale``,
    ``temperature``, ``token_chunk``, ``vocab_chunk``, ``empty_mean``).
    Gradients flow to hidden, weight and bias.
    """

    def __init__(self, in_features: Optional[int] = None, num_classes: Optional[int] = None,
                 bias: bool = False, *, ce_weight: Optional[torch.Tensor] = None,
                 ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0, lse_square_scale: float = 0.0,
                 softcap: Optional[float] = None, device: Any = None, dtype: Any = None,
                 **options: Any) -> None:
        super().__init__()
        if (in_features is None) != (num_classes is None):
            raise ValueError("smax.nn.LinearCrossEntropyLoss: give both in_features and "
                             f"num_classes or neither, got {in_features!r}, {num_classes!r}")
        if in_features is not None:
            kw = {"device": device, "dtype": dtype}
            self.weight = torch.nn.Parameter(torch.empty(num_classes, in_features, **kw))
            self.bias = torch.nn.Parameter(torch.empty(num_classes, **kw)) if bias else None
            self.reset_parameters()
        else:
            if bias:
                raise ValueError("smax.nn.LinearCrossEntropyLoss: bias=True needs in_features "
                                 "and num_classes (or use from_linear)")
            self.weight = None
            self.bias = None
        self.register_buffer("ce_weight", ce_weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap
        self._init_logit_scale(options)
        self.options = options

    def reset_parameters(self) -> None:
        """torch.nn.Linear's initialisation of weight and bias."""
        if self.weight is None:
            return
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.weight.shape[1]) if self.weight.shape[1] > 0 else 0
            torch.nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, **kwargs: Any) -> "LinearCrossEntropyLoss":
        """A loss that shares ``linear``'s weight and bias parameters."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError("smax.nn.LinearCrossEntropyLoss.from_linear: expected an "
                            f"nn.Linear, got {type(linear).__name__}")
        loss = cls(**kwargs)
        loss.weight = linear.weight
        loss.bias = linear.bias
        return loss

    def forward(self, hidden: torch.Tensor, target: torch.Tensor,
                weight: Optional[torch.Tensor] = None,
                bias: Optional[torch.Tensor] = None) -> Any:
        w = self.weight if weight is None else weight
        b = self.bias if weight is None and bias is None else bias
        if w is None:
            raise ValueError("smax.nn.LinearCrossEntropyLoss: no weight: construct it with "
                             "in_features / num_classes or from_linear(), or pass weight to "
                             "forward")
        if hidden.shape[:-1] != target.shape:
            raise ValueError("smax.nn.LinearCrossEntropyLoss: hidden [..., D] and target [...] "
                             f"must share the leading shape, got {tuple(hidden.shape)} and "
                             f"{tuple(target.shape)}")
        res = _st.linear_cross_entropy(
            hidden.reshape(-1, hidden.shape[-1]), w, target.reshape(-1), b, self.ce_weight,
            self.ignore_index, self.lse_square_scale, self.label_smoothing, self.reduction,
            self.softcap, **self._logit_scale(), **self.options)
        if self.reduction == "none":
            if isinstance(res, tuple):
                return (res[0].reshape(target.shape),) + res[1:]
            return res.reshape(target.shape)
        return res

    def extra_repr(self) -> str:
        s = ""
        if self.weight is not None:
            s = (f"in_features={self.weight.shape[1]}, num_classes={self.weight.shape[0]}, "
                 f"bias={self.bias is not None}, ")
        return s + _cross_entropy_repr(self)


class _LossModule(_LogitScale, torch.nn.Module):
    """Base of the entmax-package losses: ``[N, C]`` logits, ``[N]`` int64
    targets, class dim -1."""

    _fn = ""

    def __init__(self, weight: Optional[torch.Tensor] = None, ignore_index: int = -100,
                 reduction: str = "elementwise_mean", **options: Any) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self._init_logit_scale(options)
        self.options = options

    def _kw(self) -> dict:
        return {**self._logit_scale(), **self.options}

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return getattr(_st, self._fn)(x, target, dim=-1, ignore_index=self.ignore_index,
                                      reduction=self.reduction, weight=self.weight, **self._kw())

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}"
                + self._logit_scale_repr()
                + "".join(f", {k}={v!r}" for k, v in self.options.items()))


class SparsemaxLoss(_LossModule):
    """``entmax.SparsemaxLoss(weight=None, ignore_index=-100,
    reduction="elementwise_mean")`` with smax (``"mean"`` also accepted).
    Unlike the package, ``ignore_index`` applies whatever its sign (PyTorch's
    rule)."""

    _fn = "sparsemax_loss"


class Entmax15Loss(_LossModule):
    """``entmax.Entmax15Loss`` with smax (see SparsemaxLoss)."""

    _fn = "entmax15_loss"


class StableMaxCrossEntropyLoss(_LossModule):
    """StableMax cross-entropy (Prieto et al. 2025) as a module, arguments as
    SparsemaxLoss (``reduction="mean"`` default)."""

    _fn = "stablemax_cross_entropy"

    def __init__(self, weight: Optional[torch.Tensor] = None, ignore_index: int = -100,
                 reduction: str = "mean", **options: Any) -> None:
        super().__init__(weight, ignore_index, reduction, **options)


class EntmaxBisectLoss(_LossModule):
    """``entmax.EntmaxBisectLoss(alpha=1.5, n_iter=50, weight=None,
    ignore_index=-100, reduction="elementwise_mean")`` with smax (alpha gets
    no gradient in the loss)."""

    _fn = "entmax_bisect_loss"

    def __init__(self, alpha: Any = 1.5, n_iter: int = 50, weight: Optional[torch.Tensor] = None,
                 ignore_index: int = -100, reduction: str = "elementwise_mean",
                 **options: Any) -> None:
        super().__init__(weight, ignore_index, reduction, **options)
        self.alpha = alpha
        self.n_iter = n_iter

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return _st.entmax_bisect_loss(x, target, self.alpha, -1, self.n_iter, self.ignore_index,
                                      self.reduction, self.weight, **self._kw())


class SparseSoftmaxLoss(_LossModule):
    """Top-k sparse softmax loss: ``SparseSoftmaxLoss(k, weight=None,
    ignore_index=-100, reduction="mean", force_target=False)``."""

    _fn = "sparse_softmax_loss"

    def __init__(self, k: int, weight: Optional[torch.Tensor] = None, ignore_index: int = -100,
                 reduction: str = "mean", **options: Any) -> None:
        super().__init__(weight, ignore_index, reduction, **options)
        self.k = int(k)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return _st.sparse_softmax_loss(x, target, self.k, -1, ignore_index=self.ignore_index,
                                       reduction=self.reduction, weight=self.weight,
                                       **self._kw())


class ZLoss(_LossModule):
    """PaLM's z-loss ``coefficient * logsumexp(x)^2`` per row:
    ``ZLoss(coefficient=1e-4, weight=None, ignore_index=-100,
    reduction="mean")``; ``forward(x, target=None)`` (without a target every
    row counts; with one, ignored rows are skipped and rows weighted by
    ``weight[target]``)."""

    _fn = "z_loss"

    def __init__(self, coefficient: float = 1e-4, weight: Optional[torch.Tensor] = None,
                 ignore_index: int = -100, reduction: str = "mean", **options: Any) -> None:
        super().__init__(weight, ignore_index, reduction, **options)
        self.coefficient = float(coefficient)

    def forward(self, x: torch.Tensor, target: Optional[torch.Tensor] = None) -> torch.Tensor:
        return _st.z_loss(x, target, self.coefficient, -1, self.ignore_index, self.reduction,
                          self.weight, **self._kw())

    def extra_repr(self) -> str:
        return f"coefficient={self.coefficient}, " + super().extra_repr()


class SphericalZLoss(_LossModule):
    """The Z-loss of de Brebisson & Vincent (2016), ``softplus(a (b -
    z_target)) / a`` on standardised logits: ``SphericalZLoss(a, b,
    weight=None, ignore_index=-100, reduction="mean")``."""

    _fn = "spherical_z_loss"

    def __init__(self, a: float, b: float, weight: Optional[torch.Tensor] = None,
                 ignore_index: int = -100, reduction: str = "mean", **options: Any) -> None:
        super().__init__(weight, ignore_index, reduction, **options)
        self.a, self.b = float(a), float(b)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return _st.spherical_z_loss(x, target, self.a, self.b, -1, self.ignore_index,
                                    self.reduction, self.weight, **self._kw())

    def extra_repr(self) -> str:
        return f"a={self.a}, b={self.b}, " + super().extra_repr()

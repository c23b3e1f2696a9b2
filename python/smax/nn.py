"""smax.nn: ``torch.nn.Module`` versions of smax's differentiable ops.

Constructor names and semantics are PyTorch's (``torch.nn.Softmax(dim)``,
``torch.nn.CrossEntropyLoss(weight, size_average, ignore_index, reduce,
reduction, label_smoothing)``) or, for the sparse normalisers, the
``entmax`` package's (``EntmaxBisect(alpha=1.5, dim=-1, n_iter=50)``); each
module's ``forward`` calls the matching function of ``smax.torch``, so values,
gradients and error messages are those of the functions (docs/python.md).
Extra smax options are keyword-only and go to the function unchanged.

Learnable knobs. Every normaliser reads its logits as ``x * scale /
temperature``; ``learn_scale=True`` / ``learn_temperature=True`` make that
knob an ``nn.Parameter`` (a one-element tensor initialised from ``scale`` /
``temperature``) that gets gradients. The op-specific knobs that have a
gradient are learnable the same way: ``EntmaxBisect``'s ``alpha``
(``learn_alpha=True``) and ``SSMax``'s ``s`` (``learn_s=True``); these may
also be tensors broadcastable to the input with ``dim`` of size 1 (one alpha
per head: ``alpha=torch.full((H, 1, 1), 1.5)``). A knob given as an
``nn.Parameter`` is registered as is; a plain tensor without ``learn_*`` is
registered as a buffer (it follows ``.to()`` and is in the ``state_dict``).
Knobs that have no gradient in smax (``SigmoidNormalizer``'s bias,
``ProbabilityTemperature``'s ``T``, ``PowerSoftmax``'s ``p`` ...) are plain
attributes. The loss modules take ``scale`` / ``temperature`` /
``learn_scale`` / ``learn_temperature`` as keywords the same way.
``OP_MODULES`` maps each differentiable normaliser and loss of the op list
to its module.

The losses (``CrossEntropyLoss``, ``LinearCrossEntropyLoss`` and the entmax
losses) are in ``smax/_nn_losses.py`` and re-exported here. ``smax.torch``
keeps its module names (``smax.torch.Softmax`` is ``smax.nn.Softmax``).
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, Optional

import torch

import smax.torch as _st
from smax._nn_common import _is_one, _knob, _knob_repr
from smax._nn_losses import (CrossEntropyLoss, Entmax15Loss, EntmaxBisectLoss,  # noqa: F401
                             LinearCrossEntropyLoss, SparsemaxLoss, SparseSoftmaxLoss,
                             SphericalZLoss, StableMaxCrossEntropyLoss, ZLoss)

__all__ = ["Softmax", "LogSoftmax", "LogSumExp", "Sparsemax", "Entmax15", "EntmaxBisect",
           "SparseSoftmax", "SSMax", "Softpick", "StableMax", "SelfAdjustSoftmax",
           "SigmoidNormalizer", "SoftplusNormalizer", "PowerSoftmax", "ProbabilityTemperature",
           "LogitStandardization", "ClippedSoftmax",
           "CrossEntropyLoss", "LinearCrossEntropyLoss", "SparsemaxLoss", "Entmax15Loss",
           "EntmaxBisectLoss", "SparseSoftmaxLoss", "StableMaxCrossEntropyLoss", "ZLoss",
           "SphericalZLoss"]

#: The smax.torch function each module calls: every differentiable normaliser
#: and loss of the op list has one (python/tests/test_nn.py checks it).
OP_MODULES = {"softmax": "Softmax", "log_softmax": "LogSoftmax", "logsumexp": "LogSumExp",
              "sparsemax": "Sparsemax", "entmax15": "Entmax15", "entmax_bisect": "EntmaxBisect",
              "sparse_softmax": "SparseSoftmax", "ssmax": "SSMax", "softpick": "Softpick",
              "stablemax": "StableMax", "self_adjust_softmax": "SelfAdjustSoftmax",
              "sigmoid_normalizer": "SigmoidNormalizer",
              "softplus_normalizer": "SoftplusNormalizer", "power_softmax": "PowerSoftmax",
              "probability_temperature": "ProbabilityTemperature",
              "logit_standardization": "LogitStandardization",
              "clipped_softmax": "ClippedSoftmax", "cross_entropy": "CrossEntropyLoss",
              "linear_cross_entropy": "LinearCrossEntropyLoss", "sparsemax_loss": "SparsemaxLoss",
              "entmax15_loss": "Entmax15Loss", "entmax_bisect_loss": "EntmaxBisectLoss",
              "sparse_softmax_loss": "SparseSoftmaxLoss",
              "stablemax_cross_entropy": "StableMaxCrossEntropyLoss", "z_loss": "ZLoss",
              "spherical_z_loss": "SphericalZLoss"}


def _legacy_dim(ndim: int, name: str) -> int:
    """torch.nn.Softmax(dim=None)'s implicit dim (and its warning)."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class _Normalizer(torch.nn.Module):
    """Base of the normaliser modules: ``forward(x, mask=None)`` calls
    ``smax.torch.<_fn>(x, dim=self.dim, mask=mask, **knobs, **options)``.

    ``_knobs`` names the keyword arguments held as attributes (numbers,
    buffers or parameters, see ``_knob``); ``options`` are the other keyword
    arguments of the function (``algorithm``, ``empty_row``, ``threads`` ...).
    """

    _fn = ""
    _knobs: tuple = ("scale", "temperature")
    _legacy_dim = False  # dim=None picks torch.nn.Softmax's implicit dim

    def __init__(self, dim: Optional[int] = -1, *, scale: Any = 1.0, temperature: Any = 1.0,
                 learn_scale: bool = False, learn_temperature: bool = False,
                 **options: Any) -> None:
        super().__init__()
        if dim is None and not self._legacy_dim:
            raise ValueError(f"smax.nn.{type(self).__name__}: dim must be an int, got None")
        self.dim = dim
        if "scale" in self._knobs:
            _knob(self, "scale", scale, learn_scale)
        elif learn_scale or not _is_one(scale):
            raise ValueError(f"smax.nn.{type(self).__name__}: has no scale option")
        if "temperature" in self._knobs:
            _knob(self, "temperature", temperature, learn_temperature)
        elif learn_temperature or not _is_one(temperature):
            raise ValueError(f"smax.nn.{type(self).__name__}: has no logit temperature option")
        self.options: Dict[str, Any] = options

    def _dim(self, x: torch.Tensor) -> int:
        return _legacy_dim(x.dim(), type(self).__name__) if self.dim is None else self.dim

    def _kwargs(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in self._knobs}

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        fn = getattr(_st, self._fn)
        return fn(x, dim=self._dim(x), mask=mask, **self._kwargs(), **self.options)

    def extra_repr(self) -> str:
        parts = [f"dim={self.dim}"] + _knob_repr(self, self._knobs)
        parts += [f"{k}={v!r}" for k, v in self.options.items()]
        return ", ".join(parts)


class Softmax(_Normalizer):
    """``torch.nn.Softmax(dim)`` with smax: ``y = softmax(x * scale /
    temperature + mask)`` along ``dim``. ``dim=None`` picks torch's implicit
    dim with its deprecation warning; the default is -1 (torch has no
    default). Extra options (``algorithm``, ``empty_row``, ``threads``) go to
    ``smax.torch.softmax``."""

    _fn = "softmax"
    _legacy_dim = True


class LogSoftmax(Softmax):
    """``torch.nn.LogSoftmax(dim)`` with smax (see ``Softmax``)."""

    _fn = "log_softmax"


class LogSumExp(_Normalizer):
    """``torch.logsumexp(x, dim, keepdim)`` as a module: ``LogSumExp(dim=-1,
    keepdim=False, **options)``."""

    _fn = "logsumexp"

    def __init__(self, dim: int = -1, keepdim: bool = False, **kwargs: Any) -> None:
        super().__init__(dim, **kwargs)
        self.keepdim = keepdim

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return _st.logsumexp(x, self.dim, self.keepdim, mask=mask, **self._kwargs(),
                             **self.options)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", keepdim={self.keepdim}"


class Sparsemax(_Normalizer):
    """``entmax.Sparsemax(dim=-1)`` with smax: the Euclidean projection of
    ``x`` onto the simplex (Martins & Astudillo 2016)."""

    _fn = "sparsemax"


class Entmax15(_Normalizer):
    """``entmax.Entmax15(dim=-1)`` with smax (1.5-entmax, exact threshold)."""

    _fn = "entmax15"


class EntmaxBisect(_Normalizer):
    """``entmax.EntmaxBisect(alpha=1.5, dim=-1, n_iter=50)`` with smax.
    ``alpha`` is a number or a tensor broadcastable to ``x`` with ``dim`` of
    size 1; ``learn_alpha=True`` (or an ``nn.Parameter`` alpha) makes it a
    parameter that gets gradients."""

    _fn = "entmax_bisect"
    _knobs = ("alpha", "scale", "temperature")

    def __init__(self, alpha: Any = 1.5, dim: int = -1, n_iter: int = 50,
                 ensure_sum_one: bool = True, *, learn_alpha: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(dim, **kwargs)
        _knob(self, "alpha", alpha, learn_alpha)
        self.options.update(n_iter=n_iter, ensure_sum_one=ensure_sum_one)


class SparseSoftmax(_Normalizer):
    """Top-k sparse softmax: ``SparseSoftmax(k, dim=-1)`` (``smax.torch.sparse_softmax``)."""

    _fn = "sparse_softmax"

    def __init__(self, k: int, dim: int = -1, **kwargs: Any) -> None:
        super().__init__(dim, **kwargs)
        self.options = {"k": int(k), **self.options}


class SSMax(_Normalizer):
    """Scalable-Softmax (Nakanishi 2025): ``softmax(s * log(n) * x)``;
    ``SSMax(s=0.43, dim=-1, fixed_n=0)``. ``s`` is a number or a tensor
    broadcastable to ``x`` with ``dim`` of size 1 (one s per head);
    ``learn_s=True`` (or an ``nn.Parameter`` s) makes it learnable."""

    _fn = "ssmax"
    _knobs = ("s", "scale", "temperature")

    def __init__(self, s: Any = 0.43, dim: int = -1, *, fixed_n: int = 0,
                 learn_s: bool = False, **kwargs: Any) -> None:
        super().__init__(dim, **kwargs)
        _knob(self, "s", s, learn_s)
        self.options = {"fixed_n": int(fixed_n), **self.options}


def _simple(name: str, fn: str, doc: str, knobs: tuple = ("scale", "temperature"),
            **defaults: Any) -> type:
    """A normaliser module whose op-specific options are keyword arguments
    with ``defaults`` (the function's own defaults)."""

    def __init__(self: Any, dim: int = -1, **kwargs: Any) -> None:
        own = {k: kwargs.pop(k, v) for k, v in defaults.items()}
        _Normalizer.__init__(self, dim, **kwargs)
        self.options = {**own, **self.options}

    cls = type(name, (_Normalizer,), {"_fn": fn, "_knobs": knobs, "__init__": __init__,
                                      "__doc__": doc, "__module__": __name__})
    return cls


Softpick = _simple("Softpick", "softpick", "Softpick (Zuhri et al. 2025): ``Softpick(dim=-1, "
                   "eps=1e-6)``: ``relu(e^x - 1) / (sum |e^x - 1| + eps)``.", eps=1e-6)
StableMax = _simple("StableMax", "stablemax", "StableMax (Prieto et al. 2025): "
                    "``StableMax(dim=-1)``, ``s(x) / sum s(x)`` with ``s(x) = x + 1`` for "
                    "``x >= 0``, ``1 / (1 - x)`` otherwise.")
SelfAdjustSoftmax = _simple("SelfAdjustSoftmax", "self_adjust_softmax",
                            "Self-Adjust Softmax (Zheng et al. 2025): ``SelfAdjustSoftmax(dim=-1, "
                            "normalized=False, grad_through_bounds=True)``: ``x * softmax(x)``.",
                            normalized=False, grad_through_bounds=True)
SigmoidNormalizer = _simple("SigmoidNormalizer", "sigmoid_normalizer",
                            "Sigmoid attention's row map (Ramapuram et al. 2024): "
                            "``SigmoidNormalizer(dim=-1, bias=None, n_fixed=0, "
                            "count_visible=False)``: ``sigmoid(x + b)``, b = -ln n by default "
                            "(``bias`` has no gradient: a fixed float).",
                            bias=None, n_fixed=0, count_visible=False)
SoftplusNormalizer = _simple("SoftplusNormalizer", "softplus_normalizer",
                             "Softplus normaliser: ``SoftplusNormalizer(dim=-1, lambd=None, "
                             "head_dim=None, power=1.0)`` (smax.softplus_normalizer).",
                             lambd=None, head_dim=None, power=1.0)
ClippedSoftmax = _simple("ClippedSoftmax", "clipped_softmax",
                         "Clipped softmax (Bondarenko et al. 2023): ``ClippedSoftmax(dim=-1, "
                         "gamma=-0.025, zeta=1.0)``: ``clip((zeta - gamma) softmax(x) + gamma, "
                         "0, 1)``.", gamma=-0.025, zeta=1.0)
LogitStandardization = _simple(
    "LogitStandardization", "logit_standardization",
    "Logit standardisation (Sun et al. 2024): ``LogitStandardization(dim=-1, temperature=1.0, "
    "eps=1e-7, unbiased=True)``: ``softmax((x - mean) / (std + eps) / temperature)``; its "
    "``temperature`` acts after standardising and is a fixed float (``scale`` is learnable).",
    knobs=("scale",), temperature=1.0, eps=1e-7, unbiased=True)


class PowerSoftmax(_Normalizer):
    """Power-Softmax: ``PowerSoftmax(p=2, dim=-1)``, ``x^p / sum x^p`` for an
    even int ``p`` (smax.power_softmax)."""

    _fn = "power_softmax"

    def __init__(self, p: int = 2, dim: int = -1, **kwargs: Any) -> None:
        super().__init__(dim, **kwargs)
        self.options = {"p": p, **self.options}


class ProbabilityTemperature(_Normalizer):
    """Temperature on probabilities: ``ProbabilityTemperature(T, dim=-1)``,
    ``p^(1/T) / sum p^(1/T)`` (``T`` is a fixed float; no logit scale)."""

    _fn = "probability_temperature"
    _knobs = ()

    def __init__(self, T: float, dim: int = -1, **kwargs: Any) -> None:
        super().__init__(dim, **kwargs)
        self.options = {"T": float(T), **self.options}

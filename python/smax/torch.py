"""smax.torch: differentiable smax ops for PyTorch (CPU tensors of float32,
float64, float16 or bfloat16).

Drop-in replacements for ``torch.softmax`` / ``torch.log_softmax`` /
``torch.logsumexp`` (plus smax's options), each a ``torch.autograd.Function``
whose backward runs smax's backward kernels::

    import smax.torch as st
    logp = st.log_softmax(logits, dim=-1)            # like F.log_softmax
    loss = torch.nn.functional.nll_loss(logp, target)
    loss.backward()

Gradients flow to ``x``, to a float ``mask`` that requires grad (e.g. a
learned attention bias; its gradient is summed over broadcast dimensions),
and to ``scale`` / ``temperature`` given as one-element tensors that require
grad (a learnable temperature; docs/python.md).
Backward passes are first-order only: a double backward raises
``RuntimeError("smax.<op>: double backward is not supported ...")``. Inputs
are float32, float64, float16 or bfloat16 CPU tensors (every op, attention
and linear_cross_entropy included), gradients in their dtype. The modules ``Softmax``,
``LogSoftmax`` and ``LogSumExp`` wrap the functions for ``nn.Sequential``.

Every differentiable op of the op list (``smax.op_list()``, kind "diff") is
here, made from its array function in ``smax`` by ``_autograd.differentiable``
(the same signature minus ``out=``; autograd Functions in
``smax/_autograd.py``): the sparse normalisers (drop-ins for the ``entmax``
package's ``sparsemax``, ``entmax15``, ``entmax_bisect``, with alpha
gradients), the other normalisers, ``gumbel_softmax`` (straight-through for
``hard=True``), ``softmax_topk`` and every loss: ``cross_entropy`` is a
drop-in for ``F.cross_entropy`` (``st.cross_entropy(logits, target,
ignore_index=-100, label_smoothing=0.1)``), ``linear_cross_entropy`` gives
gradients for hidden / weight / bias. Modules: ``Sparsemax``, ``Entmax15``,
``EntmaxBisect``, ``CrossEntropyLoss``, ``SparsemaxLoss``, ``Entmax15Loss``,
``EntmaxBisectLoss`` (the entmax package's constructor arguments).

torch.compile / torch.export: every function here is also the custom op
``torch.ops.smax.<op>`` (``smax/_library.py``: typed schema, fake and
autograd registrations), which it emits while a graph is traced, so
``torch.compile(fn, fullgraph=True)`` has no graph break; eager calls run
the autograd Functions directly. Every returned tensor that can go into a
loss is differentiable (cross_entropy's extras but accuracy included).

Adding an op: nothing here. Its array function routes a tensor that
requires grad to an autograd Function of ``smax/_autograd.py`` (the generic
normaliser / loss Functions need nothing new), and the op list's "diff" kind
puts it in this module.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

import smax as _smax
from smax import _library
from smax._attention import torch_attention as attention
from smax._autograd import cross_entropy, differentiable, first_order  # noqa: F401
from smax._route import learnable_logit_scale

# Hand-written here: cross_entropy (extra fused / inplace_backward arguments)
# and attention (no out / return_lse); every other "diff" op of the op list is
# its array function made differentiable.
_HAND = {"cross_entropy": learnable_logit_scale()(cross_entropy), "attention": attention}
_OPS = [op.name for op in _smax.op_list() if op.kind == "diff"]
for _name in _OPS:
    # each op also a torch.library custom op, torch.ops.smax.<name> (smax/_library.py),
    # which this function emits while torch.compile / torch.export trace it
    globals()[_name] = _library.routed(
        _name, _HAND.get(_name) or differentiable(getattr(_smax, _name)))
del _name

__all__ = ["Softmax", "LogSoftmax", "LogSumExp", "Sparsemax", "Entmax15", "EntmaxBisect",
           "CrossEntropyLoss", "SparsemaxLoss", "Entmax15Loss", "EntmaxBisectLoss"] + _OPS


class Softmax(torch.nn.Module):
    """``nn.Softmax`` with smax: ``Softmax(dim=-1, **options)``."""

    def __init__(self, dim: int = -1, **options: Any) -> None:
        super().__init__()
        self.dim = dim
        self.options = options

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return softmax(x, self.dim, mask=mask, **self.options)

    def extra_repr(self) -> str:
        return f"dim={self.dim}" + "".join(f", {k}={v!r}" for k, v in self.options.items())


class LogSoftmax(Softmax):
    """``nn.LogSoftmax`` with smax: ``LogSoftmax(dim=-1, **options)``."""

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return log_softmax(x, self.dim, mask=mask, **self.options)


class LogSumExp(torch.nn.Module):
    """``torch.logsumexp`` as a module: ``LogSumExp(dim=-1, keepdim=False, **options)``."""

    def __init__(self, dim: int = -1, keepdim: bool = False, **options: Any) -> None:
        super().__init__()
        self.dim = dim
        self.keepdim = keepdim
        self.options = options

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return logsumexp(x, self.dim, self.keepdim, mask=mask, **self.options)


# ---- modules of the entmax package / torch.nn ------------------------------------------------


class Sparsemax(torch.nn.Module):
    """``entmax.Sparsemax(dim=-1)`` with smax."""

    def __init__(self, dim: int = -1, **options: Any) -> None:
        super().__init__()
        self.dim = dim
        self.options = options

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sparsemax(x, self.dim, **self.options)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Entmax15(Sparsemax):
    """``entmax.Entmax15(dim=-1)`` with smax (exact threshold)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return entmax15(x, self.dim, **self.options)


class EntmaxBisect(torch.nn.Module):
    """``entmax.EntmaxBisect(alpha=1.5, dim=-1, n_iter=50)`` with smax; alpha may
    be a tensor / ``nn.Parameter`` (it then gets gradients)."""

    def __init__(self, alpha: Any = 1.5, dim: int = -1, n_iter: int = 50,
                 **options: Any) -> None:
        super().__init__()
        self.alpha = alpha
        self.dim = dim
        self.n_iter = n_iter
        self.options = options

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return entmax_bisect(x, self.alpha, self.dim, self.n_iter, **self.options)


class _LossModule(torch.nn.Module):
    def __init__(self, weight: Optional[torch.Tensor] = None, ignore_index: int = -100,
                 reduction: str = "elementwise_mean", **options: Any) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.options = options


class SparsemaxLoss(_LossModule):
    """``entmax.SparsemaxLoss(weight=None, ignore_index=-100,
    reduction="elementwise_mean")`` with smax (``"mean"`` also accepted).
    Inputs ``[N, C]`` logits and ``[N]`` int64 targets. Unlike the package,
    ``ignore_index`` applies whatever its sign (PyTorch's rule)."""

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return sparsemax_loss(x, target, -1, self.ignore_index, self.reduction, self.weight,
                              **self.options)


class Entmax15Loss(_LossModule):
    """``entmax.Entmax15Loss`` with smax (see SparsemaxLoss)."""

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return entmax15_loss(x, target, -1, self.ignore_index, self.reduction, self.weight,
                             **self.options)


class EntmaxBisectLoss(_LossModule):
    """``entmax.EntmaxBisectLoss(alpha=1.5, n_iter=50, ...)`` with smax."""

    def __init__(self, alpha: Any = 1.5, n_iter: int = 50, weight: Optional[torch.Tensor] = None,
                 ignore_index: int = -100, reduction: str = "elementwise_mean",
                 **options: Any) -> None:
        super().__init__(weight, ignore_index, reduction, **options)
        self.alpha = alpha
        self.n_iter = n_iter

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return entmax_bisect_loss(x, target, self.alpha, -1, self.n_iter, self.ignore_index,
                                  self.reduction, self.weight, **self.options)


class CrossEntropyLoss(torch.nn.Module):
    """``torch.nn.CrossEntropyLoss(weight=None, ignore_index=-100,
    reduction="mean", label_smoothing=0.0)`` with smax; extra keyword options
    (``lse_square_scale``, ``softcap``, ``scale``, ...) go to
    ``cross_entropy``."""

    def __init__(self, weight: Optional[torch.Tensor] = None, ignore_index: int = -100,
                 reduction: str = "mean", label_smoothing: float = 0.0, **options: Any) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.options = options

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Any:
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                             self.label_smoothing, **self.options)

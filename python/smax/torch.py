"""smax.torch: differentiable smax ops for PyTorch (CPU, float32).

Drop-in replacements for ``torch.softmax`` / ``torch.log_softmax`` /
``torch.logsumexp`` (plus smax's options), each a ``torch.autograd.Function``
whose backward runs smax's backward kernels::

    import smax.torch as st
    logp = st.log_softmax(logits, dim=-1)            # like F.log_softmax
    loss = torch.nn.functional.nll_loss(logp, target)
    loss.backward()

Gradients flow to ``x`` and to a float ``mask`` that requires grad (e.g. a
learned attention bias; its gradient is summed over broadcast dimensions).
Backward passes are first-order only: a double backward raises
``RuntimeError("smax.<op>: double backward is not supported ...")``. Inputs
must be float32 CPU tensors (float64 raises ``TypeError``; smax has no
float64 kernels). The modules ``Softmax``,
``LogSoftmax`` and ``LogSumExp`` wrap the functions for ``nn.Sequential``.

Every other differentiable op is here too (autograd Functions in
``smax/_torch_ops.py``), with the same signature as the array function in
``smax`` minus ``out=``: the sparse normalisers (drop-ins for the ``entmax``
package's ``sparsemax``, ``entmax15``, ``entmax_bisect``, with alpha
gradients), the other normalisers, ``gumbel_softmax`` (straight-through for
``hard=True``), ``softmax_topk`` and every loss: ``cross_entropy`` is a
drop-in for ``F.cross_entropy`` (``st.cross_entropy(logits, target,
ignore_index=-100, label_smoothing=0.1)``), ``linear_cross_entropy`` gives
gradients for hidden / weight / bias. Modules: ``Sparsemax``, ``Entmax15``,
``EntmaxBisect``, ``CrossEntropyLoss``, ``SparsemaxLoss``, ``Entmax15Loss``,
``EntmaxBisectLoss`` (the entmax package's constructor arguments).

Adding an op: an ``autograd.Function`` whose ``forward`` calls the array
function in ``smax`` and whose ``backward`` calls its backward kernel, then a
thin public function below (or in ``smax/_torch_ops.py``).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

import smax as _smax

from smax._torch_ops import first_order
from smax._torch_ops import (  # noqa: E402,F401
    clipped_softmax,
    cross_entropy,
    entmax15,
    entmax15_loss,
    entmax_bisect,
    entmax_bisect_loss,
    gumbel_softmax,
    linear_cross_entropy,
    logit_standardization,
    power_softmax,
    probability_temperature,
    self_adjust_softmax,
    sigmoid_normalizer,
    softmax_topk,
    softplus_normalizer,
    softpick,
    sparse_softmax,
    sparse_softmax_loss,
    sparsemax,
    sparsemax_loss,
    spherical_z_loss,
    ssmax,
    stablemax,
    stablemax_cross_entropy,
    z_loss,
)
from smax._torch_ops import __all__ as _ops_all  # noqa: E402

__all__ = ["softmax", "log_softmax", "logsumexp", "Softmax", "LogSoftmax", "LogSumExp",
           "Sparsemax", "Entmax15", "EntmaxBisect", "CrossEntropyLoss", "SparsemaxLoss",
           "Entmax15Loss", "EntmaxBisectLoss"] + list(_ops_all)

from smax._attention import torch_attention as attention  # noqa: E402

__all__ += ["attention"]


def _mask_grad(dt: torch.Tensor, mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """d(loss)/d(additive mask) from d(loss)/d(logits), reduced to the mask's shape."""
    if mask is None:
        return None
    return dt.sum_to_size(mask.shape) if dt.shape != mask.shape else dt


def _needs_mask_grad(ctx: Any, mask: Optional[torch.Tensor]) -> bool:
    return (
        mask is not None
        and mask.dtype == torch.float32
        and len(ctx.needs_input_grad) > 4
        and bool(ctx.needs_input_grad[4])
    )


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, scale: float, temperature: float,
                mask: Optional[torch.Tensor], algorithm: str, empty_row: str,
                threads: int) -> torch.Tensor:
        y = _smax._forward(_smax._C.softmax, "softmax", x, None, dim, scale, temperature,
                           mask, algorithm, empty_row, threads, None)
        ctx.save_for_backward(y, mask)
        ctx.opts = (dim, scale, temperature, threads)
        return y

    @staticmethod
    @first_order("softmax")
    def backward(ctx: Any, dy: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        y, mask = ctx.saved_tensors
        dim, scale, temperature, threads = ctx.opts
        dx = dmask = None
        if ctx.needs_input_grad[0]:
            dx = _smax.softmax_backward(y, dy, dim, scale=scale, temperature=temperature,
                                        threads=threads)
        if _needs_mask_grad(ctx, mask):
            dt = _smax.softmax_backward(y, dy, dim, threads=threads)
            dmask = _mask_grad(dt, mask)
        return dx, None, None, None, dmask, None, None, None


class _LogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, scale: float, temperature: float,
                mask: Optional[torch.Tensor], algorithm: str, empty_row: str,
                threads: int) -> torch.Tensor:
        y = _smax._forward(_smax._C.log_softmax, "log_softmax", x, None, dim, scale,
                           temperature, mask, algorithm, empty_row, threads, None)
        ctx.save_for_backward(y, mask)
        ctx.opts = (dim, scale, temperature, threads)
        return y

    @staticmethod
    @first_order("log_softmax")
    def backward(ctx: Any, dy: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        y, mask = ctx.saved_tensors
        dim, scale, temperature, threads = ctx.opts
        dx = dmask = None
        if ctx.needs_input_grad[0]:
            dx = _smax.log_softmax_backward(y, dy, dim, scale=scale, temperature=temperature,
                                            threads=threads)
        if _needs_mask_grad(ctx, mask):
            dt = _smax.log_softmax_backward(y, dy, dim, threads=threads)
            dmask = _mask_grad(dt, mask)
        return dx, None, None, None, dmask, None, None, None


class _LogSumExp(torch.autograd.Function):
    # d lse / d x_i = s * softmax(t)_i: the backward recomputes the softmax
    # with smax (same options), so nothing of x's size is saved but x itself.
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, keepdim: bool, scale: float,
                temperature: float, mask: Optional[torch.Tensor], algorithm: str,
                empty_row: str, threads: int) -> torch.Tensor:
        shape = tuple(x.shape)
        out_shape: Tuple[int, ...] = ()
        if shape:
            d = _smax._norm_dim(dim, len(shape), "logsumexp")
            out_shape = shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]
        out = _smax._forward(_smax._C.logsumexp, "logsumexp", x, out_shape, dim, scale,
                             temperature, mask, algorithm, empty_row, threads, None)
        ctx.save_for_backward(x, mask)
        ctx.opts = (dim, keepdim, scale, temperature, algorithm, empty_row, threads)
        return out

    @staticmethod
    @first_order("logsumexp")
    def backward(ctx: Any, dout: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        x, mask = ctx.saved_tensors
        dim, keepdim, scale, temperature, algorithm, empty_row, threads = ctx.opts
        p = _smax.softmax(x, dim, scale=scale, temperature=temperature, mask=mask,
                          algorithm=algorithm, empty_row=empty_row, threads=threads)
        if x.dim() > 0:
            d = dim % x.dim()
            g = dout if keepdim else dout.unsqueeze(d)
        else:
            g = dout.reshape(p.shape)
        dt = p.mul_(g)  # d loss / d logits
        dx = dmask = None
        if _needs_mask_grad_lse(ctx, mask):
            dmask = _mask_grad(dt, mask)
        if ctx.needs_input_grad[0]:
            s = scale / temperature
            dx = dt * s if s != 1.0 else (dt.clone() if dmask is not None else dt)
        return dx, None, None, None, None, dmask, None, None, None


def _needs_mask_grad_lse(ctx: Any, mask: Optional[torch.Tensor]) -> bool:
    return mask is not None and mask.dtype == torch.float32 and bool(ctx.needs_input_grad[5])


def _check(x: Any, op: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"smax.torch.{op}: expected a torch.Tensor, got {type(x).__name__}")


def softmax(x: torch.Tensor, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
            mask: Optional[torch.Tensor] = None, algorithm: str = "auto",
            empty_row: str = "zero", threads: int = 0) -> torch.Tensor:
    """Differentiable ``smax.softmax`` (see its docstring for the options).

    Same result as ``torch.softmax(x * scale / temperature + mask, dim)``
    within 2e-6 relative, except that rows with every entry masked give 0
    (``empty_row="zero"``; ``"nan"`` gives torch's NaN).
    """
    _check(x, "softmax")
    return _Softmax.apply(x, dim, scale, temperature, mask, algorithm, empty_row, threads)


def log_softmax(x: torch.Tensor, dim: int = -1, *, scale: float = 1.0,
                temperature: float = 1.0, mask: Optional[torch.Tensor] = None,
                algorithm: str = "auto", empty_row: str = "zero",
                threads: int = 0) -> torch.Tensor:
    """Differentiable ``smax.log_softmax``; a drop-in for ``F.log_softmax(x, dim)``."""
    _check(x, "log_softmax")
    return _LogSoftmax.apply(x, dim, scale, temperature, mask, algorithm, empty_row, threads)


def logsumexp(x: torch.Tensor, dim: int = -1, keepdim: bool = False, *, scale: float = 1.0,
              temperature: float = 1.0, mask: Optional[torch.Tensor] = None,
              algorithm: str = "auto", empty_row: str = "zero",
              threads: int = 0) -> torch.Tensor:
    """Differentiable ``smax.logsumexp``; a drop-in for ``torch.logsumexp(x, dim, keepdim)``."""
    _check(x, "logsumexp")
    return _LogSumExp.apply(x, dim, keepdim, scale, temperature, mask, algorithm, empty_row,
                            threads)


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

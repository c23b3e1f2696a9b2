"""torch.autograd.Function's of the ops beyond the softmax family (normalisers,
losses, samplers); the public functions are re-exported by ``smax.torch``.

Each Function's ``forward`` runs the array function of ``smax._ops`` (no
copies; float32 CPU tensors) and its ``backward`` the op's C++ backward kernel
(first order only, ``first_order``: a double backward raises a RuntimeError
naming the op). Gradients reach ``x``, a float
``mask`` that requires grad (summed over its broadcast dims), and the learnable
parameters the C++ API differentiates: ``alpha`` of entmax_bisect and ``s`` of
ssmax (per-row values summed to the parameter's shape), ``hidden`` / ``weight``
/ ``bias`` of linear_cross_entropy. Class-index targets, class weights,
probability targets and noise get no gradient.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple, Union

import numpy as _np
import torch

from . import _ops as O
from . import _smax as _C

Tensor = torch.Tensor


def first_order(op: Optional[str] = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for the ``backward`` of smax's autograd Functions (they are
    first order). Like ``torch.autograd.function.once_differentiable``, the
    backward runs without grad; when a graph is being built
    (``create_graph=True``) its gradients get a node that raises
    ``RuntimeError("smax.<op>: double backward is not supported (the op's
    backward is first-order)")`` when differentiated. ``once_differentiable``
    adds such a node only if an incoming gradient requires grad, so a double
    backward otherwise failed with torch's generic "element 0 of tensors does
    not require grad"; and its message does not name the op. ``op`` None:
    the name is ``ctx.smax_op`` (set by generic Functions in forward)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(ctx: Any, *args: Any) -> Any:
            with torch.no_grad():
                outputs = fn(ctx, *args)
            if not torch.is_grad_enabled():
                return outputs
            name = op if op is not None else getattr(ctx, "smax_op", "op")
            msg = (f"smax.{name}: double backward is not supported (the op's backward is "
                   f"first-order)")
            single = not isinstance(outputs, tuple)
            outs = [outputs] if single else list(outputs)
            idx = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor)]
            if not idx:
                return outputs
            delayed = getattr(getattr(torch._C, "_functions", None), "DelayedError", None)
            if delayed is None:  # pragma: no cover  (private torch API gone: fail now)
                raise RuntimeError(msg)
            res = delayed(msg.encode(), len(idx))(
                *[outs[i].detach().requires_grad_() for i in idx])
            if not isinstance(res, tuple):
                res = (res,)
            for i, r in zip(idx, res):
                outs[i] = r
            return outs[0] if single else tuple(outs)

        return wrapper

    return deco


def _sigma(co: tuple) -> float:
    """s = fl(scale / temperature), the factor backward passes multiply by."""
    return float(_np.float32(co[1]) / _np.float32(co[2]))


def _with_mask(co: tuple, mask: Optional[Tensor]) -> tuple:
    return co[:3] + (None if mask is None else mask.detach(),) + co[4:]


def _check(x: Any, op: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"smax.torch.{op}: expected a torch.Tensor, got {type(x).__name__}")


def _mask_grad(ctx: Any, idx: int, mask: Optional[Tensor], dx: Optional[Tensor],
               co: tuple) -> Optional[Tensor]:
    """d loss / d (float additive mask) = dx / s, summed to the mask's shape."""
    if (mask is None or dx is None or mask.dtype != torch.float32
            or not ctx.needs_input_grad[idx]):
        return None
    s = _sigma(co)
    dt = dx / s if s != 1.0 else dx.clone()
    return dt.sum_to_size(mask.shape) if dt.shape != mask.shape else dt


def _row_grad(d: Tensor, like: Tensor) -> Tensor:
    """Per-row gradients (keepdim shape) reduced to a broadcast parameter's shape."""
    return d.sum_to_size(like.shape) if tuple(d.shape) != tuple(like.shape) else d


# ---- normalisers ---------------------------------------------------------------------------


class _Norm(torch.autograd.Function):
    """y = op(x, *params); backward `bwd(a, dy, dx, *bparams, co)` with a = y
    (from_y) or x."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], op: str, bwd: str, from_y: bool,
                dim: int, params: tuple, co: tuple) -> Tensor:
        co = _with_mask(co, mask)
        y = O._normalize(op, x, dim, params, co, None)
        ctx.smax_op = op
        ctx.save_for_backward(y if from_y else x, mask)
        ctx.meta = (bwd, from_y, dim, params)
        ctx.co = co[:3] + (None,) + co[4:]
        return y

    @staticmethod
    @first_order()
    def backward(ctx: Any, dy: Tensor) -> Tuple[Optional[Tensor], ...]:
        a, mask = ctx.saved_tensors
        bwd, from_y, dim, params = ctx.meta
        co = _with_mask(ctx.co, mask)
        dx = O._vjp(bwd, a, dy, dim, () if from_y else params, co, None)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return (dx if ctx.needs_input_grad[0] else None), dmask, None, None, None, None, None, None


def _norm(op: str, bwd: str, from_y: bool, x: Tensor, mask: Optional[Tensor], dim: int,
          params: tuple, scale: float, temperature: float, empty_row: str, threads: int,
          algorithm: str = "auto") -> Tensor:
    _check(x, op)
    co = O._co(op, dim, scale, temperature, None, empty_row, threads, algorithm)
    return _Norm.apply(x, mask, op, bwd, from_y, dim, params, co)


def sparsemax(x: Tensor, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
              mask: Optional[Tensor] = None, empty_row: str = "zero",
              threads: int = 0) -> Tensor:
    """Differentiable ``smax.sparsemax``; a drop-in for ``entmax.sparsemax(x, dim)``."""
    return _norm("sparsemax", "sparsemax_backward", True, x, mask, dim, (), scale, temperature,
                 empty_row, threads)


def entmax15(x: Tensor, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
             mask: Optional[Tensor] = None, empty_row: str = "zero",
             threads: int = 0) -> Tensor:
    """Differentiable ``smax.entmax15``; a drop-in for ``entmax.entmax15(x, dim)``."""
    return _norm("entmax15", "entmax15_backward", True, x, mask, dim, (), scale, temperature,
                 empty_row, threads)


def sparse_softmax(x: Tensor, k: int, dim: int = -1, *, scale: float = 1.0,
                   temperature: float = 1.0, mask: Optional[Tensor] = None,
                   algorithm: str = "auto", empty_row: str = "zero",
                   threads: int = 0) -> Tensor:
    """Differentiable ``smax.sparse_softmax`` (top-k softmax)."""
    return _norm("sparse_softmax", "sparse_softmax_backward", True, x, mask, dim, (int(k),),
                 scale, temperature, empty_row, threads, algorithm)


def stablemax(x: Tensor, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
              mask: Optional[Tensor] = None, empty_row: str = "zero",
              threads: int = 0) -> Tensor:
    """Differentiable ``smax.stablemax``."""
    return _norm("stablemax", "stablemax_backward", False, x, mask, dim, (), scale, temperature,
                 empty_row, threads)


def softpick(x: Tensor, dim: int = -1, *, eps: float = 1e-6, scale: float = 1.0,
             temperature: float = 1.0, mask: Optional[Tensor] = None, empty_row: str = "zero",
             threads: int = 0) -> Tensor:
    """Differentiable ``smax.softpick``."""
    return _norm("softpick", "softpick_backward", False, x, mask, dim, (float(eps),), scale,
                 temperature, empty_row, threads)


def clipped_softmax(x: Tensor, dim: int = -1, *, gamma: float = -0.025, zeta: float = 1.0,
                    scale: float = 1.0, temperature: float = 1.0,
                    mask: Optional[Tensor] = None, empty_row: str = "zero",
                    threads: int = 0) -> Tensor:
    """Differentiable ``smax.clipped_softmax``."""
    return _norm("clipped_softmax", "clipped_softmax_backward", False, x, mask, dim,
                 (float(gamma), float(zeta)), scale, temperature, empty_row, threads)


def self_adjust_softmax(x: Tensor, dim: int = -1, *, normalized: bool = False,
                        grad_through_bounds: bool = True, scale: float = 1.0,
                        temperature: float = 1.0, mask: Optional[Tensor] = None,
                        empty_row: str = "zero", threads: int = 0) -> Tensor:
    """Differentiable ``smax.self_adjust_softmax``."""
    return _norm("self_adjust_softmax", "self_adjust_softmax_backward", False, x, mask, dim,
                 (bool(normalized), bool(grad_through_bounds)), scale, temperature, empty_row,
                 threads)


def sigmoid_normalizer(x: Tensor, dim: int = -1, *, bias: Optional[float] = None,
                       n_fixed: int = 0, count_visible: bool = False, scale: float = 1.0,
                       temperature: float = 1.0, mask: Optional[Tensor] = None,
                       empty_row: str = "zero", threads: int = 0) -> Tensor:
    """Differentiable ``smax.sigmoid_normalizer``."""
    return _norm("sigmoid_normalizer", "sigmoid_normalizer_backward", True, x, mask, dim,
                 (None if bias is None else float(bias), int(n_fixed), bool(count_visible)),
                 scale, temperature, empty_row, threads)


def softplus_normalizer(x: Tensor, dim: int = -1, *, lambd: Optional[float] = None,
                        head_dim: Optional[int] = None, power: float = 1.0, scale: float = 1.0,
                        temperature: float = 1.0, mask: Optional[Tensor] = None,
                        empty_row: str = "zero", threads: int = 0) -> Tensor:
    """Differentiable ``smax.softplus_normalizer`` (lambda: ``lambd``, else
    ``log N / log head_dim``, else 1)."""
    from ._ops_normalizers import _softplus_params
    return _norm("softplus_normalizer", "softplus_normalizer_backward", False, x, mask, dim,
                 _softplus_params(lambd, head_dim, power), scale, temperature, empty_row,
                 threads)


def power_softmax(x: Tensor, p: int = 2, dim: int = -1, *, scale: float = 1.0,
                  temperature: float = 1.0, mask: Optional[Tensor] = None,
                  empty_row: str = "zero", threads: int = 0) -> Tensor:
    """Differentiable ``smax.power_softmax``."""
    return _norm("power_softmax", "power_softmax_backward", False, x, mask, dim, (int(p),),
                 scale, temperature, empty_row, threads)


def probability_temperature(p: Tensor, T: float, dim: int = -1, *,
                            mask: Optional[Tensor] = None, empty_row: str = "zero",
                            threads: int = 0) -> Tensor:
    """Differentiable ``smax.probability_temperature`` (gradient with respect to p)."""
    return _norm("probability_temperature", "probability_temperature_backward", False, p, mask,
                 dim, (float(T),), 1.0, 1.0, empty_row, threads)


def logit_standardization(x: Tensor, dim: int = -1, *, temperature: float = 1.0,
                          eps: float = 1e-7, unbiased: bool = True, scale: float = 1.0,
                          mask: Optional[Tensor] = None, empty_row: str = "zero",
                          threads: int = 0) -> Tensor:
    """Differentiable ``smax.logit_standardization`` (full Jacobian through mean and std)."""
    return _norm("logit_standardization", "logit_standardization_backward", False, x, mask,
                 dim, (float(temperature), float(eps), bool(unbiased)), scale, 1.0, empty_row,
                 threads)


# ---- normalisers with a learnable parameter ---------------------------------------------------


class _EntmaxBisect(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], alpha_t: Optional[Tensor],
                alpha: float, dim: int, n_iter: int, ensure_sum_one: bool,
                co: tuple) -> Tensor:
        co = _with_mask(co, mask)
        a_t = None if alpha_t is None else alpha_t.detach()
        y = O._normalize("entmax_bisect", x, dim, (alpha, a_t, n_iter, ensure_sum_one), co, None)
        ctx.save_for_backward(y, mask, alpha_t)
        ctx.meta = (alpha, dim, n_iter, ensure_sum_one)
        ctx.co = co[:3] + (None,) + co[4:]
        return y

    @staticmethod
    @first_order("entmax_bisect")
    def backward(ctx: Any, dy: Tensor) -> Tuple[Optional[Tensor], ...]:
        y, mask, alpha_t = ctx.saved_tensors
        alpha, dim, n_iter, ensure_sum_one = ctx.meta
        co = _with_mask(ctx.co, mask)
        want_alpha = alpha_t is not None and ctx.needs_input_grad[2]
        d = O._norm_dim(dim, y.dim(), "entmax_bisect")
        dx = torch.empty_like(y)
        da = torch.empty(O._rows_shape(tuple(y.shape), d, True)) if want_alpha else None
        _C.entmax_bisect_backward(y, dy, dx, da, alpha,
                                  None if alpha_t is None else alpha_t.detach(), n_iter,
                                  ensure_sum_one, co)
        dalpha = _row_grad(da, alpha_t) if want_alpha else None
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, dalpha, None, None, None, None, None


def entmax_bisect(x: Tensor, alpha: Union[float, Tensor] = 1.5, dim: int = -1,
                  n_iter: int = 50, ensure_sum_one: bool = True, *, scale: float = 1.0,
                  temperature: float = 1.0, mask: Optional[Tensor] = None,
                  empty_row: str = "zero", threads: int = 0) -> Tensor:
    """Differentiable ``smax.entmax_bisect``; a drop-in for
    ``entmax.entmax_bisect(x, alpha, dim, n_iter, ensure_sum_one)``. A tensor
    ``alpha`` that requires grad gets d loss / d alpha."""
    _check(x, "entmax_bisect")
    a, a_t = (float(alpha), None) if not isinstance(alpha, torch.Tensor) else (0.0, alpha)
    co = O._co("entmax_bisect", dim, scale, temperature, None, empty_row, threads)
    return _EntmaxBisect.apply(x, mask, a_t, a, dim, int(n_iter), bool(ensure_sum_one), co)


class _Ssmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], s_t: Optional[Tensor], s: float,
                dim: int, fixed_n: int, co: tuple) -> Tensor:
        co = _with_mask(co, mask)
        y = O._normalize("ssmax", x, dim, (s, None if s_t is None else s_t.detach(), fixed_n),
                         co, None)
        ctx.save_for_backward(x, y, mask, s_t)
        ctx.meta = (s, dim, fixed_n)
        ctx.co = co[:3] + (None,) + co[4:]
        return y

    @staticmethod
    @first_order("ssmax")
    def backward(ctx: Any, dy: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, y, mask, s_t = ctx.saved_tensors
        s, dim, fixed_n = ctx.meta
        co = _with_mask(ctx.co, mask)
        want_s = s_t is not None and ctx.needs_input_grad[2]
        d = O._norm_dim(dim, x.dim(), "ssmax")
        dx = torch.empty(tuple(x.shape))
        ds = torch.empty(O._rows_shape(tuple(x.shape), d, True)) if want_s else None
        _C.ssmax_backward(x.detach(), y, dy, dx, ds, s,
                          None if s_t is None else s_t.detach(), fixed_n, co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, (_row_grad(ds, s_t) if want_s else None), None, None, None, None


def ssmax(x: Tensor, s: Union[float, Tensor] = 0.43, dim: int = -1, *, fixed_n: int = 0,
          scale: float = 1.0, temperature: float = 1.0, mask: Optional[Tensor] = None,
          algorithm: str = "auto", empty_row: str = "zero", threads: int = 0) -> Tensor:
    """Differentiable ``smax.ssmax``; a tensor ``s`` (e.g. a learnable
    ``nn.Parameter`` of shape ``[heads, 1, 1]``) gets its gradient."""
    _check(x, "ssmax")
    sv, s_t = (float(s), None) if not isinstance(s, torch.Tensor) else (0.0, s)
    co = O._co("ssmax", dim, scale, temperature, None, empty_row, threads, algorithm)
    return _Ssmax.apply(x, mask, s_t, sv, dim, int(fixed_n), co)


# ---- sampling ---------------------------------------------------------------------------------


class _GumbelSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], tau: float, hard: bool, seed: int,
                noise: Optional[Tensor], dim: int, return_soft: bool, co: tuple) -> Any:
        co = _with_mask(co, mask)
        shape = tuple(x.shape)
        O._norm_dim(dim, len(shape), "gumbel_softmax")
        out = torch.empty(shape)
        y_soft = torch.empty(shape) if hard else out
        _C.gumbel_softmax(x.detach(), out, float(tau), bool(hard), int(seed),
                          None if noise is None else noise.detach(),
                          y_soft if hard else None, co)
        ctx.save_for_backward(y_soft, mask)
        ctx.meta = (tau, dim)
        ctx.co = co[:3] + (None,) + co[4:]
        if not return_soft:
            return out
        soft = y_soft.detach().clone()
        ctx.mark_non_differentiable(soft)
        return out, soft

    @staticmethod
    @first_order("gumbel_softmax")
    def backward(ctx: Any, dy: Tensor, *_: Any) -> Tuple[Optional[Tensor], ...]:
        y_soft, mask = ctx.saved_tensors
        tau, dim = ctx.meta
        co = _with_mask(ctx.co, mask)
        dx = torch.empty(tuple(y_soft.shape))
        _C.gumbel_softmax_backward(y_soft, dy, dx, float(tau), co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, None, None, None, None, None, None, None


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, dim: int = -1, *,
                   seed: Optional[int] = None, noise: Optional[Tensor] = None,
                   return_soft: bool = False, scale: float = 1.0, temperature: float = 1.0,
                   mask: Optional[Tensor] = None, empty_row: str = "zero",
                   threads: int = 0) -> Any:
    """Differentiable ``smax.gumbel_softmax``; a drop-in for
    ``F.gumbel_softmax(logits, tau, hard, dim=dim)`` (straight-through for
    ``hard=True``). ``return_soft``: also return the soft sample (detached)."""
    _check(logits, "gumbel_softmax")
    co = O._co("gumbel_softmax", dim, scale, temperature, None, empty_row, threads)
    return _GumbelSoftmax.apply(logits, mask, float(tau), bool(hard), O._seed(seed, logits),
                                noise, dim, bool(return_soft), co)


class _SoftmaxTopk(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], k: int, dim: int,
                renormalize: bool, co: tuple) -> Tuple[Tensor, Tensor]:
        co = _with_mask(co, mask)
        shape = tuple(x.shape)
        d = O._norm_dim(dim, len(shape), "softmax_topk")
        oshape = shape[:d] + (k,) + shape[d + 1:] if shape else (k,)
        probs = torch.empty(oshape)
        idx = torch.empty(oshape, dtype=torch.int64)
        _C.softmax_topk(x.detach(), probs, idx, k, renormalize, co)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, mask, probs, idx)
        ctx.meta = (d, renormalize)
        ctx.co = co[:3] + (None,) + co[4:]
        return probs, idx

    @staticmethod
    @first_order("softmax_topk")
    def backward(ctx: Any, dp: Tensor, _didx: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
        x, mask, probs, idx = ctx.saved_tensors
        d, renormalize = ctx.meta
        co = _with_mask(ctx.co, mask)
        if x.dim() == 0:
            return torch.zeros(()), None, None, None, None, None
        gp = dp * probs
        if renormalize:  # softmax over the k winners: dt_K = p_K (g - <g, p_K>)
            dt = torch.zeros(tuple(x.shape)).scatter_(d, idx, gp - probs * gp.sum(d, True))
        else:  # dt = scatter(g p_K) - p <g, p_K>, p the full row's softmax
            p = torch.empty(tuple(x.shape))
            _C.softmax(x.detach(), p, d, co[1], co[2], co[3], co[4], co[5], co[6])
            dt = (p * (-gp.sum(d, True))).scatter_add_(d, idx, gp)
        dx = dt * _sigma(co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, None, None, None, None


def softmax_topk(x: Tensor, k: int, dim: int = -1, *, renormalize: bool = False,
                 scale: float = 1.0, temperature: float = 1.0, mask: Optional[Tensor] = None,
                 empty_row: str = "zero", threads: int = 0) -> Tuple[Tensor, Tensor]:
    """Differentiable ``smax.softmax_topk``: ``(probs, indices)``, probs
    differentiable with respect to x (and a float mask)."""
    _check(x, "softmax_topk")
    co = O._co("softmax_topk", dim, scale, temperature, None, empty_row, threads)
    return _SoftmaxTopk.apply(x, mask, int(k), dim, bool(renormalize), co)


# ---- losses -----------------------------------------------------------------------------------


class _Loss(torch.autograd.Function):
    """loss = op(x, target, *params); backward `op_backward(x, target, dloss, dx,
    *params, lo, co)`."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], target: Optional[Tensor], op: str,
                dim: int, params: tuple, lo: tuple, co: tuple) -> Tensor:
        co = _with_mask(co, mask)
        out = O._loss(op, x, target, dim, params, lo, co, None)
        ctx.smax_op = op
        ctx.save_for_backward(x, mask, target)
        ctx.meta = (op, dim, params, lo)
        ctx.co = co[:3] + (None,) + co[4:]
        return out

    @staticmethod
    @first_order()
    def backward(ctx: Any, dloss: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, mask, target = ctx.saved_tensors
        op, dim, params, lo = ctx.meta
        co = _with_mask(ctx.co, mask)
        dx = torch.empty(tuple(x.shape))
        getattr(_C, op + "_backward")(x.detach(), target, dloss, dx, *params, lo, co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, None, None, None, None, None, None


def generic_loss(op: str, x: Tensor, target: Optional[Tensor], dim: int, params: tuple,
                 ignore_index: int, reduction: str, weight: Optional[Tensor], empty_mean: str,
                 scale: float, temperature: float, mask: Optional[Tensor], empty_row: str,
                 threads: int) -> Tensor:
    """A differentiable smax loss by name (used by the array functions)."""
    _check(x, op)
    lo = O._lo(ignore_index, reduction, weight, empty_mean)
    co = O._co(op, dim, scale, temperature, None, empty_row, threads)
    return _Loss.apply(x, mask, target, op, dim, params, lo, co)


def sparsemax_loss(x: Tensor, target: Tensor, dim: int = -1, ignore_index: int = -100,
                   reduction: str = "mean", weight: Optional[Tensor] = None, *,
                   empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                   mask: Optional[Tensor] = None, empty_row: str = "zero",
                   threads: int = 0) -> Tensor:
    """Differentiable ``smax.sparsemax_loss`` (``entmax.SparsemaxLoss`` as a function)."""
    return generic_loss("sparsemax_loss", x, target, dim, (), ignore_index, reduction, weight,
                        empty_mean, scale, temperature, mask, empty_row, threads)


def entmax15_loss(x: Tensor, target: Tensor, dim: int = -1, ignore_index: int = -100,
                  reduction: str = "mean", weight: Optional[Tensor] = None, *,
                  empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                  mask: Optional[Tensor] = None, empty_row: str = "zero",
                  threads: int = 0) -> Tensor:
    """Differentiable ``smax.entmax15_loss`` (``entmax.Entmax15Loss`` as a function)."""
    return generic_loss("entmax15_loss", x, target, dim, (), ignore_index, reduction, weight,
                        empty_mean, scale, temperature, mask, empty_row, threads)


def entmax_bisect_loss(x: Tensor, target: Tensor, alpha: Union[float, Tensor] = 1.5,
                       dim: int = -1, n_iter: int = 50, ignore_index: int = -100,
                       reduction: str = "mean", weight: Optional[Tensor] = None, *,
                       empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                       mask: Optional[Tensor] = None, empty_row: str = "zero",
                       threads: int = 0) -> Tensor:
    """Differentiable ``smax.entmax_bisect_loss`` (``entmax.EntmaxBisectLoss``);
    no gradient for alpha."""
    a, a_t = O._scalar_or_array(alpha, "alpha", "entmax_bisect_loss")
    return generic_loss("entmax_bisect_loss", x, target, dim, (a, a_t, int(n_iter)),
                        ignore_index, reduction, weight, empty_mean, scale, temperature, mask,
                        empty_row, threads)


def sparse_softmax_loss(x: Tensor, target: Tensor, k: int, dim: int = -1, *,
                        force_target: bool = False, ignore_index: int = -100,
                        reduction: str = "mean", weight: Optional[Tensor] = None,
                        empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                        mask: Optional[Tensor] = None, empty_row: str = "zero",
                        threads: int = 0) -> Tensor:
    """Differentiable ``smax.sparse_softmax_loss``."""
    return generic_loss("sparse_softmax_loss", x, target, dim, (int(k), bool(force_target)),
                        ignore_index, reduction, weight, empty_mean, scale, temperature, mask,
                        empty_row, threads)


def stablemax_cross_entropy(x: Tensor, target: Tensor, dim: int = -1,
                            ignore_index: int = -100, reduction: str = "mean",
                            weight: Optional[Tensor] = None, *, empty_mean: str = "nan",
                            scale: float = 1.0, temperature: float = 1.0,
                            mask: Optional[Tensor] = None, empty_row: str = "zero",
                            threads: int = 0) -> Tensor:
    """Differentiable ``smax.stablemax_cross_entropy``."""
    return generic_loss("stablemax_cross_entropy", x, target, dim, (), ignore_index, reduction,
                        weight, empty_mean, scale, temperature, mask, empty_row, threads)


def spherical_z_loss(x: Tensor, target: Tensor, a: float, b: float, dim: int = -1,
                     ignore_index: int = -100, reduction: str = "mean",
                     weight: Optional[Tensor] = None, *, empty_mean: str = "nan",
                     scale: float = 1.0, temperature: float = 1.0,
                     mask: Optional[Tensor] = None, empty_row: str = "zero",
                     threads: int = 0) -> Tensor:
    """Differentiable ``smax.spherical_z_loss``."""
    return generic_loss("spherical_z_loss", x, target, dim, (float(a), float(b)), ignore_index,
                        reduction, weight, empty_mean, scale, temperature, mask, empty_row,
                        threads)


def z_loss(x: Tensor, target: Optional[Tensor] = None, coefficient: float = 1e-4,
           dim: int = -1, ignore_index: int = -100, reduction: str = "mean",
           weight: Optional[Tensor] = None, *, empty_mean: str = "nan", scale: float = 1.0,
           temperature: float = 1.0, mask: Optional[Tensor] = None, empty_row: str = "zero",
           threads: int = 0) -> Tensor:
    """Differentiable ``smax.z_loss``."""
    return generic_loss("z_loss", x, target, dim, (float(coefficient),), ignore_index,
                        reduction, weight, empty_mean, scale, temperature, mask, empty_row,
                        threads)


class _CrossEntropy(torch.autograd.Function):
    """Two paths. Fused (the default when a gradient is needed): the forward
    also writes d loss / d x for a unit upstream gradient
    (smax::CrossEntropyOptions::grad; one read and one write of the logits,
    into a new tensor or, with inplace_backward, over the logits) and the
    backward only scales it by grad_output. Two-call (fused=False): the
    forward computes the loss, the backward runs cross_entropy_backward
    (a second scan of the logits; no [N, C] tensor held between the passes)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], target: Tensor,
                weight: Optional[Tensor], dim: int, args: tuple, want: tuple,
                co: tuple, fused: bool, inplace: bool) -> Any:
        (ignore_index, reduction, label_smoothing, lse_square_scale, softcap, empty_mean) = args
        co = _with_mask(co, mask)
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        fused = need_grad and (fused or inplace)
        grad = None
        if fused:
            grad = x.detach() if inplace else torch.empty(tuple(x.shape))
        # The forward's lse lets the two-call backward skip its scan (no smoothing).
        keep_lse = (not fused and label_smoothing == 0.0 and target.dtype == torch.int64)
        w = list(want)
        w[1] = w[1] or keep_lse
        loss, extras = O._cross_entropy_fwd(x, target, weight, ignore_index, reduction,
                                            label_smoothing, dim, lse_square_scale, softcap, w,
                                            empty_mean, co[1], co[2], co[3], co[5], co[6], None,
                                            grad)
        lse = extras[1] if keep_lse else None
        ctx.fused = fused
        ctx.unit_grad = grad
        if fused:
            ctx.save_for_backward(None, mask, None, None, None)
        else:
            ctx.save_for_backward(x, mask, target, weight, lse)
        ctx.meta = (dim, args)
        ctx.co = co[:3] + (None,) + co[4:]
        outs = [e for e, k in zip(extras, want) if k]
        outs = [e.clone() if (e is lse and e is not None) else e for e in outs]
        ctx.mark_non_differentiable(*outs)
        return (loss, *outs) if outs else loss

    @staticmethod
    @first_order("cross_entropy")
    def backward(ctx: Any, dloss: Tensor, *_: Any) -> Tuple[Optional[Tensor], ...]:
        x, mask, target, weight, lse = ctx.saved_tensors
        dim, args = ctx.meta
        (ignore_index, reduction, label_smoothing, lse_square_scale, softcap, empty_mean) = args
        co = _with_mask(ctx.co, mask)
        if ctx.fused:
            dx = ctx.unit_grad
            if dx is None:
                raise RuntimeError(
                    "smax.torch.cross_entropy: the fused path's gradient was already handed "
                    "to an earlier backward (it is scaled in place); call cross_entropy with "
                    "fused=False to run backward more than once (retain_graph=True)")
            ctx.unit_grad = None  # hand the tensor over: autograd can keep it without a copy
            if O._reduction(reduction) == "none":
                d = O._ce_dim(dx, dim, "cross_entropy")
                dx.mul_(dloss.unsqueeze(d) if dx.dim() >= 2 else dloss)
            elif float(dloss) != 1.0:
                dx.mul_(dloss)
            dmask = _mask_grad(ctx, 1, mask, dx, co)
            return dx, dmask, None, None, None, None, None, None, None, None
        d = O._ce_dim(x, dim, "cross_entropy")
        co = (d,) + co[1:]
        dx = torch.empty(tuple(x.shape))
        _C.cross_entropy_backward(x.detach(), target, dloss, dx, float(label_smoothing),
                                  float(lse_square_scale), float(softcap), lse,
                                  O._lo(ignore_index, reduction, weight, empty_mean), co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, None, None, None, None, None, None, None, None


def cross_entropy(input: Tensor, target: Tensor, weight: Optional[Tensor] = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, *, dim: Optional[int] = None,
                  lse_square_scale: float = 0.0, softcap: Optional[float] = None,
                  return_z_loss: bool = False, return_lse: bool = False,
                  return_entropy: bool = False, return_target_logprob: bool = False,
                  return_accuracy: bool = False, empty_mean: str = "nan", scale: float = 1.0,
                  temperature: float = 1.0, mask: Optional[Tensor] = None,
                  empty_row: str = "zero", threads: int = 0, fused: bool = True,
                  inplace_backward: bool = False) -> Any:
    """Differentiable ``smax.cross_entropy``; a drop-in for
    ``F.cross_entropy(input, target, weight, ignore_index=..., reduction=...,
    label_smoothing=...)`` (class-index or probability targets; the gradient
    flows to ``input`` and a float mask; extras are not differentiable).

    When a gradient is needed the forward is fused with the backward
    (``fused=True``, the default): it also computes d loss / d input for a
    unit upstream gradient while each row is still in cache (one read and one
    write of the logits in total; Liger-Kernel, flash-attn's
    ``CrossEntropyLoss``) and backward only multiplies it by ``grad_output``
    (skipped when that is exactly 1; per row for ``reduction="none"``). The
    gradient tensor is held from forward to backward. ``fused=False``: the
    classic two calls (backward scans the logits again). Backward runs once
    per forward on the fused path (``retain_graph`` double calls raise);
    double backward raises (the backward is first-order).

    ``inplace_backward=True`` (flash-attn's name): the gradient overwrites the
    logits' storage during the forward, so no [N, C] gradient is allocated;
    ``input`` must not be used afterwards (it holds the gradient, and
    ``input.grad`` shares its storage), nor saved by another op for its
    backward."""
    _check(input, "cross_entropy")
    want = (bool(return_z_loss), bool(return_lse), bool(return_entropy),
            bool(return_target_logprob), bool(return_accuracy))
    args = (int(ignore_index), str(reduction), float(label_smoothing), float(lse_square_scale),
            0.0 if softcap is None else float(softcap), str(empty_mean))
    d = O._ce_dim(input, dim, "cross_entropy")
    co = O._co("cross_entropy", d, scale, temperature, None, empty_row, threads)
    w = None if weight is None else weight.detach()
    return _CrossEntropy.apply(input, mask, target, w, d, args, want, co, bool(fused),
                               bool(inplace_backward))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, bias: Optional[Tensor],
                target: Tensor, ce_weight: Optional[Tensor], args: tuple, want: tuple,
                co: tuple) -> Any:
        (ignore_index, lse_square_scale, label_smoothing, reduction, softcap, token_chunk,
         vocab_chunk, empty_mean) = args
        keep_lse = label_smoothing == 0.0
        w = list(want)
        w[1] = w[1] or keep_lse
        loss, extras = O._linear_cross_entropy_fwd(
            hidden, weight, target, bias, ce_weight, ignore_index, lse_square_scale,
            label_smoothing, reduction, softcap, w, token_chunk, vocab_chunk, empty_mean,
            co[1], co[2], co[5], co[6])
        lse = extras[1] if keep_lse else None
        ctx.save_for_backward(hidden, weight, bias, target, ce_weight, lse)
        ctx.meta = args
        ctx.co = co
        outs = [e for e, k in zip(extras, want) if k]
        outs = [e.clone() if (e is lse and e is not None) else e for e in outs]
        ctx.mark_non_differentiable(*outs)
        return (loss, *outs) if outs else loss

    @staticmethod
    @first_order("linear_cross_entropy")
    def backward(ctx: Any, dloss: Tensor, *_: Any) -> Tuple[Optional[Tensor], ...]:
        hidden, weight, bias, target, ce_weight, lse = ctx.saved_tensors
        (ignore_index, lse_square_scale, label_smoothing, reduction, softcap, token_chunk,
         vocab_chunk, empty_mean) = ctx.meta
        dh = torch.empty(tuple(hidden.shape))
        dw = torch.empty(tuple(weight.shape))
        want_db = ctx.needs_input_grad[2]
        db = torch.empty((weight.shape[0],)) if want_db else None
        _C.linear_cross_entropy_backward(
            hidden.detach(), weight.detach(), target, None if bias is None else bias.detach(),
            dloss, dh, dw, db, float(label_smoothing), float(lse_square_scale), float(softcap),
            lse, int(token_chunk), int(vocab_chunk),
            O._lo(ignore_index, reduction, ce_weight, empty_mean), ctx.co)
        return (dh if ctx.needs_input_grad[0] else None,
                dw if ctx.needs_input_grad[1] else None, db, None, None, None, None, None)


def linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor,
                         bias: Optional[Tensor] = None, ce_weight: Optional[Tensor] = None,
                         ignore_index: int = -100, lse_square_scale: float = 0.0,
                         label_smoothing: float = 0.0, reduction: str = "mean",
                         softcap: Optional[float] = None, return_z_loss: bool = False, *,
                         return_lse: bool = False, return_entropy: bool = False,
                         return_target_logprob: bool = False, return_accuracy: bool = False,
                         token_chunk: int = 0, vocab_chunk: int = 0, empty_mean: str = "nan",
                         scale: float = 1.0, temperature: float = 1.0,
                         empty_row: str = "zero", threads: int = 0) -> Any:
    """Differentiable ``smax.linear_cross_entropy`` (gradients for hidden,
    weight and bias; Liger-Kernel's ``liger_fused_linear_cross_entropy``
    signature)."""
    _check(hidden, "linear_cross_entropy")
    want = (bool(return_z_loss), bool(return_lse), bool(return_entropy),
            bool(return_target_logprob), bool(return_accuracy))
    args = (int(ignore_index), float(lse_square_scale), float(label_smoothing), str(reduction),
            0.0 if softcap is None else float(softcap), int(token_chunk), int(vocab_chunk),
            str(empty_mean))
    co = O._co("linear_cross_entropy", -1, scale, temperature, None, empty_row, threads)
    cw = None if ce_weight is None else ce_weight.detach()
    return _LinearCrossEntropy.apply(hidden, weight, bias, target, cw, args, want, co)


__all__ = [
    "sparsemax", "entmax15", "entmax_bisect", "sparse_softmax", "ssmax", "softpick",
    "clipped_softmax", "stablemax", "self_adjust_softmax", "sigmoid_normalizer", "softplus_normalizer",
    "power_softmax", "probability_temperature", "logit_standardization", "gumbel_softmax",
    "softmax_topk", "cross_entropy", "linear_cross_entropy", "z_loss", "spherical_z_loss",
    "sparsemax_loss", "entmax15_loss", "entmax_bisect_loss", "sparse_softmax_loss",
    "stablemax_cross_entropy",
]

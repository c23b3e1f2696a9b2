"""The torch.autograd.Function's of smax (imported when a caller holds a
tensor that requires grad, or by ``smax.torch``).

Each Function's ``forward`` runs the array path of ``smax/_common.py`` (no
copies; float32, float64, float16 or bfloat16 CPU tensors, results and
gradients in the input's dtype) and its ``backward`` the op's C++ backward kernel
(first order only, ``first_order``: a double backward raises a RuntimeError
naming the op). Gradients reach ``x``, a float ``mask`` that requires grad
(summed over its broadcast dims), and the learnable parameters the C++ API
differentiates: ``alpha`` of entmax_bisect and ``s`` of ssmax (per-row values
summed to the parameter's shape), ``hidden`` / ``weight`` / ``bias`` of
linear_cross_entropy, and a ``scale`` / ``temperature`` tensor that requires
grad (``logit_scale_call``: every op's logits are ``x * scale /
temperature``). The extras of cross_entropy / linear_cross_entropy (but accuracy)
and gumbel_softmax's soft sample are differentiable too
(``smax/_extras_grad.py``). Class-index targets, class weights,
probability targets and noise get no gradient.

The array functions (``smax._ops_*``) call the entry points here (their
arguments already checked and their option objects built); ``differentiable``
makes the ``smax.torch`` function of an array function.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as _np
import torch

from . import _smax as _C
from ._extras_grad import cross_entropy_extras_grad, linear_cross_entropy_extras_grad
from ._common import (
    _replayed,
    _ce_dim,
    _cross_entropy_fwd,
    _linear_cross_entropy_fwd,
    _loss,
    _norm_dim,
    _normalize,
    _reduce_rows,
    _reduction,
    _rows_shape,
    _vjp,
    def_signature,
    loss_options,
    softmax_options,
    with_options,
)

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


def _sigma(co: Any) -> float:
    """s = fl(scale / temperature), the factor backward passes multiply by."""
    return float(_np.float32(co.scale) / _np.float32(co.temperature))


def _check(x: Any, op: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"smax.torch.{op}: expected a torch.Tensor, got {type(x).__name__}")


def _mask_grad(ctx: Any, idx: int, mask: Optional[Tensor], dx: Optional[Tensor],
               co: Any) -> Optional[Tensor]:
    """d loss / d (float additive mask) = dx / s, summed to the mask's shape
    (in the mask's dtype)."""
    if (mask is None or dx is None or not mask.is_floating_point()
            or not ctx.needs_input_grad[idx]):
        return None
    s = _sigma(co)
    dt = dx.to(_acc(dx.dtype))
    dt = dt / s if s != 1.0 else dt.clone()
    dt = dt.sum_to_size(mask.shape) if dt.shape != mask.shape else dt
    return dt.to(mask.dtype)


def _acc(dtype: Any) -> Any:
    """The dtype torch-side gradient arithmetic runs in: float64 for float64,
    float32 for the others (float16 / bfloat16 values widen, as in smax)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _narrow(dtype: Any) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def _softmax_for_grad(x: Tensor, dim: int, co: Any) -> Tensor:
    """smax's softmax of x (options co) for a backward pass, in _acc(x.dtype).
    Written straight into a float32 result where smax's softmax takes x's
    dtype with a float32 output; where it does not (a build whose softmax
    family is float32-only), from x widened to float32 (float64: rounded to
    float32, as the row-wise forward passes compute)."""
    p = torch.empty(tuple(x.shape), dtype=_acc(x.dtype))
    try:
        _C.softmax(x.detach(), p, with_options(co, dim=dim))
    except TypeError:
        if x.dtype == torch.float32:
            raise
        p = torch.empty(tuple(x.shape), dtype=torch.float32)
        _C.softmax(x.detach().float(), p, with_options(co, dim=dim))
    return p


def _param_dtype(param: Any, x: Tensor) -> Any:
    """The dtype of a per-row parameter's gradient: the parameter's (floating)
    dtype, else x's."""
    if isinstance(param, torch.Tensor) and param.is_floating_point():
        return param.dtype
    return x.dtype


def _row_grad(d: Tensor, like: Tensor) -> Tensor:
    """Per-row gradients (keepdim shape) reduced to a broadcast parameter's shape."""
    return d.sum_to_size(like.shape) if tuple(d.shape) != tuple(like.shape) else d


# ---- learnable scale / temperature ----------------------------------------------------------


def _knob_value(v: Any, name: str, fn_name: str) -> float:
    """A scale / temperature given as a number or a one-element tensor, as a float."""
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError(f"smax.{fn_name}: {name} must be a number or a one-element tensor, "
                             f"got a {v.dtype} tensor of shape {tuple(v.shape)}")
        return float(v.detach())
    return v


class _LogitScaleTap(torch.autograd.Function):
    """x -> x (a view, no copy) on the way into an op whose logits are
    x * scale / temperature; backward hands the op's dx on unchanged and turns
    it into d loss / d scale and d loss / d temperature (smax's
    logit_scale_gradients: -(1/T) sum x dx and (1/scale) sum x dx, terms
    with dx == 0 left out)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale_t: Optional[Tensor], temp_t: Optional[Tensor],
                co: Any) -> Tensor:
        ctx.save_for_backward(x, scale_t, temp_t)
        ctx.co = co
        return x.view_as(x)

    @staticmethod
    @first_order("logit_scale_gradients")
    def backward(ctx: Any, dx: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, scale_t, temp_t = ctx.saved_tensors
        want_s, want_t = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        ds = dt = None
        if want_s or want_t:
            g_s, g_t = _C.logit_scale_gradients(x.detach(), dx, ctx.co)
            if want_s:
                ds = torch.full(scale_t.shape, g_s, dtype=scale_t.dtype)
            if want_t:
                dt = torch.full(temp_t.shape, g_t, dtype=temp_t.dtype)
        return (dx if ctx.needs_input_grad[0] else None), ds, dt, None


def logit_scale_call(fn: Callable[..., Any], sig: inspect.Signature, taps: Sequence[str],
                     knobs: Sequence[str], args: tuple, kwargs: dict) -> Any:
    """Calls the array function fn with tensor knobs (scale / temperature, see
    smax/_route.py's learnable_logit_scale) replaced by their values; a knob
    that requires grad (grad mode on) gets its gradient through a
    _LogitScaleTap on each argument named in taps (the op's inputs that the
    logits are linear in: x, or linear_cross_entropy's hidden and bias)."""
    name = fn.__name__
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    tensors = {k: a[k] for k in knobs if isinstance(a.get(k), torch.Tensor)}
    for k in knobs:
        if k in a:
            a[k] = _knob_value(a[k], k, name)
    learn = torch.is_grad_enabled() and any(t.requires_grad for t in tensors.values())
    if learn:
        if a.get("inplace_backward"):
            raise ValueError(f"smax.{name}: inplace_backward=True overwrites the logits, which "
                             f"the gradient of a scale / temperature that requires grad needs; "
                             f"use the default fused=True instead")
        # An op's own temperature (not in knobs) is not a logit scale.
        co = softmax_options("logit_scale_gradients", -1, a.get("scale", 1.0),
                             a["temperature"] if "temperature" in knobs else 1.0, None, "zero",
                             a.get("threads", 0))
        for k in taps:
            v = a.get(k)
            if v is None:
                continue
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"smax.{name}: a scale / temperature that requires grad needs "
                                f"{k} as a torch tensor, got {type(v).__name__}")
            a[k] = _LogitScaleTap.apply(v, tensors.get("scale"), tensors.get("temperature"), co)
    return fn(*bound.args, **bound.kwargs)


# ---- normalisers ---------------------------------------------------------------------------


#: Backward passes the C++ library runs on the softmax family's kernels.
_SOFTMAX_KERNEL_BACKWARDS = frozenset({"sparse_softmax_backward"})


class _Norm(torch.autograd.Function):
    """y = op(x, *params); backward `<op>_backward(a, dy, dx, *bparams, co)` with
    a = y (from_y; no bparams) or x (bparams = params)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], op: str, from_y: bool, dim: int,
                params: tuple, co: Any) -> Tensor:
        y = _normalize(op, x, dim, params, with_options(co, mask=mask), None)
        ctx.smax_op = op
        ctx.save_for_backward(y if from_y else x, mask)
        ctx.meta = (op + "_backward", from_y, dim, params)
        ctx.co = co
        return y

    @staticmethod
    @first_order()
    def backward(ctx: Any, dy: Tensor) -> Tuple[Optional[Tensor], ...]:
        a, mask = ctx.saved_tensors
        bwd, from_y, dim, params = ctx.meta
        co = with_options(ctx.co, mask=mask)
        bparams = () if from_y else params
        try:
            dx = _vjp(bwd, a, dy, dim, bparams, co, None)
        except TypeError:
            # A backward the C++ library computes with the softmax family's
            # kernel (sparse_softmax_backward), in a build where that kernel
            # is float32-only: float32 copies, the gradient rounded to a's dtype.
            if a.dtype == torch.float32 or bwd not in _SOFTMAX_KERNEL_BACKWARDS:
                raise
            dx = _vjp(bwd, a.float(), dy.float(), dim, bparams, co, None).to(a.dtype)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return (dx if ctx.needs_input_grad[0] else None), dmask, None, None, None, None, None


def normalizer(op: str, from_y: bool, x: Tensor, mask: Optional[Tensor], dim: int,
               params: tuple, co: Any) -> Tensor:
    """A normaliser through autograd (`co` without the mask)."""
    _check(x, op)
    return _Norm.apply(x, mask, op, from_y, dim, params, co)


class _LogSumExp(torch.autograd.Function):
    # d lse / d x_i = s * softmax(t)_i: the backward recomputes the softmax
    # with smax (same options), so nothing of x's size is saved but x itself.
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], dim: int, keepdim: bool,
                co: Any) -> Tensor:
        out = _reduce_rows("logsumexp", x, dim, keepdim, with_options(co, mask=mask), None)
        ctx.save_for_backward(x, mask)
        ctx.meta = (dim, keepdim)
        ctx.co = co
        return out

    @staticmethod
    @first_order("logsumexp")
    def backward(ctx: Any, dout: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, mask = ctx.saved_tensors
        dim, keepdim = ctx.meta
        co = with_options(ctx.co, mask=mask)
        if x.dim() > 0:
            d = dim % x.dim()
            g = dout if keepdim else dout.unsqueeze(d)
        else:
            d = 0
            g = dout
        p = _softmax_for_grad(x, d, co)  # float32, or float64 for float64 x
        g = g.reshape(p.shape) if x.dim() == 0 else g
        dt = p.mul_(g.to(p.dtype))  # d loss / d logits
        dx = dmask = None
        if mask is not None and mask.is_floating_point() and ctx.needs_input_grad[1]:
            dm = dt.sum_to_size(mask.shape) if dt.shape != mask.shape else dt
            dmask = dm.to(mask.dtype, copy=dm is dt)
        if ctx.needs_input_grad[0]:
            s = co.scale / co.temperature
            dx = (dt * s if s != 1.0 else dt).to(x.dtype)
        return dx, dmask, None, None, None


def logsumexp(x: Tensor, mask: Optional[Tensor], dim: int, keepdim: bool, co: Any) -> Tensor:
    _check(x, "logsumexp")
    return _LogSumExp.apply(x, mask, dim, keepdim, co)


# ---- normalisers with a learnable parameter ---------------------------------------------------


class _EntmaxBisect(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], alpha_t: Optional[Tensor],
                dim: int, params: tuple, co: Any) -> Tensor:
        y = _normalize("entmax_bisect", x, dim, params, with_options(co, mask=mask), None)
        ctx.save_for_backward(y, mask, alpha_t)
        ctx.meta = (dim, params)
        ctx.co = co
        return y

    @staticmethod
    @first_order("entmax_bisect")
    def backward(ctx: Any, dy: Tensor) -> Tuple[Optional[Tensor], ...]:
        y, mask, alpha_t = ctx.saved_tensors
        dim, params = ctx.meta
        co = with_options(ctx.co, mask=mask)
        want_alpha = alpha_t is not None and ctx.needs_input_grad[2]
        d = _norm_dim(dim, y.dim(), "entmax_bisect")
        dx = torch.empty(tuple(y.shape), dtype=y.dtype)
        da = (torch.empty(_rows_shape(tuple(y.shape), d, True), dtype=_param_dtype(alpha_t, y))
              if want_alpha else None)
        _C.entmax_bisect_backward(y, dy, dx, da, *params, co)
        dalpha = _row_grad(da, alpha_t) if want_alpha else None
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, dalpha, None, None, None


def entmax_bisect(x: Tensor, mask: Optional[Tensor], alpha: Any, dim: int, params: tuple,
                  co: Any) -> Tensor:
    """params = (alpha or 0, the alpha array or None, n_iter, ensure_sum_one);
    a tensor `alpha` that requires grad gets d loss / d alpha."""
    _check(x, "entmax_bisect")
    alpha_t = alpha if isinstance(alpha, torch.Tensor) else None
    return _EntmaxBisect.apply(x, mask, alpha_t, dim, params, co)


class _Ssmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], s_t: Optional[Tensor], dim: int,
                params: tuple, co: Any) -> Tensor:
        y = _normalize("ssmax", x, dim, params, with_options(co, mask=mask), None)
        ctx.save_for_backward(x, y, mask, s_t)
        ctx.meta = (dim, params)
        ctx.co = co
        return y

    @staticmethod
    @first_order("ssmax")
    def backward(ctx: Any, dy: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, y, mask, s_t = ctx.saved_tensors
        dim, params = ctx.meta
        co = with_options(ctx.co, mask=mask)
        want_s = s_t is not None and ctx.needs_input_grad[2]
        d = _norm_dim(dim, x.dim(), "ssmax")
        dx = torch.empty(tuple(x.shape), dtype=x.dtype)
        ds = (torch.empty(_rows_shape(tuple(x.shape), d, True), dtype=_param_dtype(s_t, x))
              if want_s else None)
        _C.ssmax_backward(x.detach(), y, dy, dx, ds, *params, co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, (_row_grad(ds, s_t) if want_s else None), None, None, None


def ssmax(x: Tensor, mask: Optional[Tensor], s: Any, dim: int, params: tuple,
          co: Any) -> Tensor:
    """params = (s or 0, the s array or None, fixed_n); a tensor `s` (e.g. a
    learnable ``nn.Parameter`` of shape ``[heads, 1, 1]``) gets its gradient."""
    _check(x, "ssmax")
    s_t = s if isinstance(s, torch.Tensor) else None
    return _Ssmax.apply(x, mask, s_t, dim, params, co)


# ---- sampling ---------------------------------------------------------------------------------


class _GumbelSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], tau: float, hard: bool, seed: int,
                noise: Optional[Tensor], dim: int, return_soft: bool, co: Any) -> Any:
        shape = tuple(x.shape)
        _norm_dim(dim, len(shape), "gumbel_softmax")
        out = torch.empty(shape, dtype=x.dtype)
        y_soft = torch.empty(shape, dtype=x.dtype) if hard else out
        _C.gumbel_softmax(x.detach(), out, float(tau), bool(hard), int(seed),
                          None if noise is None else noise.detach(),
                          y_soft if hard else None, with_options(co, mask=mask))
        ctx.save_for_backward(y_soft, mask)
        ctx.meta = (tau, dim)
        ctx.co = co
        if not return_soft:
            return out
        # The soft sample is differentiable too: its gradient is what the
        # straight-through output's is (both go through y_soft's Jacobian).
        ctx.set_materialize_grads(False)
        return out, y_soft.detach().clone()

    @staticmethod
    @first_order("gumbel_softmax")
    def backward(ctx: Any, dy: Optional[Tensor], dsoft: Optional[Tensor] = None
                 ) -> Tuple[Optional[Tensor], ...]:
        y_soft, mask = ctx.saved_tensors
        tau, dim = ctx.meta
        if dy is None or dsoft is None:
            dy = dsoft if dy is None else dy
            if dy is None:
                return (None,) * 9
        else:
            dy = dy + dsoft
        co = with_options(ctx.co, mask=mask)
        dx = torch.empty(tuple(y_soft.shape), dtype=y_soft.dtype)
        _C.gumbel_softmax_backward(y_soft, dy, dx, float(tau), co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, None, None, None, None, None, None, None


def gumbel_softmax(x: Tensor, mask: Optional[Tensor], tau: float, hard: bool, seed: int,
                   noise: Optional[Tensor], dim: int, return_soft: bool, co: Any) -> Any:
    _check(x, "gumbel_softmax")
    return _GumbelSoftmax.apply(x, mask, tau, hard, seed, noise, dim, return_soft, co)


class _SoftmaxTopk(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], k: int, dim: int,
                renormalize: bool, co: Any) -> Tuple[Tensor, Tensor]:
        shape = tuple(x.shape)
        d = _norm_dim(dim, len(shape), "softmax_topk")
        oshape = shape[:d] + (k,) + shape[d + 1:] if shape else (k,)
        probs = _replayed()  # smax/_library.py's backward: the saved (probs, idx)
        if probs is not None:
            idx = _replayed()
        else:
            probs = torch.empty(oshape, dtype=x.dtype)
            idx = torch.empty(oshape, dtype=torch.int64)
            _C.softmax_topk(x.detach(), probs, idx, k, renormalize, with_options(co, mask=mask))
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, mask, probs, idx)
        ctx.meta = (d, renormalize)
        ctx.co = co
        return probs, idx

    @staticmethod
    @first_order("softmax_topk")
    def backward(ctx: Any, dp: Tensor, _didx: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
        x, mask, probs, idx = ctx.saved_tensors
        d, renormalize = ctx.meta
        co = with_options(ctx.co, mask=mask)
        if x.dim() == 0:
            return torch.zeros((), dtype=x.dtype), None, None, None, None, None
        acc = _acc(x.dtype)  # float16 / bfloat16: the arithmetic in float32
        pk = probs.to(acc)
        gp = dp.to(acc) * pk
        if renormalize:  # softmax over the k winners: dt_K = p_K (g - <g, p_K>)
            dt = torch.zeros(tuple(x.shape), dtype=acc).scatter_(
                d, idx, gp - pk * gp.sum(d, True))
        else:  # dt = scatter(g p_K) - p <g, p_K>, p the full row's softmax
            p = _softmax_for_grad(x, d, co).to(acc)
            dt = (p * (-gp.sum(d, True))).scatter_add_(d, idx, gp)
        dx = (dt * _sigma(co)).to(x.dtype)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, None, None, None, None


def softmax_topk(x: Tensor, mask: Optional[Tensor], k: int, dim: int, renormalize: bool,
                 co: Any) -> Tuple[Tensor, Tensor]:
    _check(x, "softmax_topk")
    return _SoftmaxTopk.apply(x, mask, k, dim, renormalize, co)


# ---- losses -----------------------------------------------------------------------------------


class _Loss(torch.autograd.Function):
    """loss = op(x, target, *params); backward `op_backward(x, target, dloss, dx,
    *params, lo, co)`."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Optional[Tensor], target: Optional[Tensor], op: str,
                dim: int, params: tuple, lo: Any, co: Any) -> Tensor:
        out = _loss(op, x, target, dim, params, lo, with_options(co, mask=mask), None)
        ctx.smax_op = op
        ctx.save_for_backward(x, mask, target)
        ctx.meta = (op, params, lo)
        ctx.co = co
        return out

    @staticmethod
    @first_order()
    def backward(ctx: Any, dloss: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, mask, target = ctx.saved_tensors
        op, params, lo = ctx.meta
        co = with_options(ctx.co, mask=mask)
        dx = torch.empty(tuple(x.shape), dtype=x.dtype)
        getattr(_C, op + "_backward")(x.detach(), target, dloss, dx, *params, lo, co)
        dmask = _mask_grad(ctx, 1, mask, dx, co)
        return dx, dmask, None, None, None, None, None, None


def loss(op: str, x: Tensor, mask: Optional[Tensor], target: Optional[Tensor], dim: int,
         params: tuple, lo: Any, co: Any) -> Tensor:
    """A differentiable smax loss by name (`co` without the mask)."""
    _check(x, op)
    return _Loss.apply(x, mask, target, op, dim, params, lo, co)


def _with_lse(want: tuple, keep_lse: bool) -> list:
    """The extras a cross-entropy forward computes (z_loss, lse, entropy,
    target_logprob, accuracy): those asked for, and lse when the backward
    reuses it."""
    w = list(want)
    w[1] = w[1] or keep_lse
    return w


#: The extras of cross_entropy / linear_cross_entropy, in their order.
_EXTRAS = ("z_loss", "lse", "entropy", "target_logprob", "accuracy")


def _loss_and_extras(ctx: Any, loss: Tensor, extras: Sequence[Optional[Tensor]], want: tuple,
                     lse: Optional[Tensor]) -> Any:
    """A cross-entropy forward's result: the loss, then the extras asked for
    (the lse kept for the backward is handed out as a copy). Every extra but
    accuracy is differentiable (smax/_extras_grad.py); accuracy is marked
    non-differentiable. Gradients of unused outputs reach backward as None."""
    outs = [e for e, k in zip(extras, want) if k]
    outs = [e.to(loss.dtype, copy=True) if (e is lse and e is not None) else e for e in outs]
    if want[4]:
        ctx.mark_non_differentiable(outs[-1])
    ctx.set_materialize_grads(False)
    ctx.extras = tuple(n for n, k in zip(_EXTRAS, want) if k)
    return (loss, *outs) if outs else loss


def _extra_grads(ctx: Any, dextras: Sequence[Optional[Tensor]]) -> dict:
    """{name: incoming gradient} of the differentiable extras that got one."""
    return {n: g for n, g in zip(ctx.extras, dextras) if g is not None and n != "accuracy"}


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
                co: Any, fused: bool, inplace: bool) -> Any:
        (ignore_index, reduction, label_smoothing, lse_square_scale, softcap, empty_mean) = args
        co = with_options(co, mask=mask)
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        fused = need_grad and (fused or inplace)
        grad = None
        if fused:
            grad = x.detach() if inplace else torch.empty(tuple(x.shape), dtype=x.dtype)
        # The forward's lse lets the two-call backward skip its scan (no smoothing).
        keep_lse = (not fused and label_smoothing == 0.0 and target.dtype == torch.int64)
        w = _with_lse(want, keep_lse)
        loss, extras = _cross_entropy_fwd(x, target, weight, ignore_index, reduction,
                                            label_smoothing, dim, lse_square_scale, softcap, w,
                                            empty_mean, co.scale, co.temperature, co.mask, co.empty_row,
                                         co.threads, None,
                                            grad, "f32" if keep_lse and _narrow(x.dtype) else None)
        lse = extras[1] if keep_lse else None
        ctx.fused = fused
        ctx.unit_grad = grad
        ctx.inplace = fused and inplace
        # The extras' gradients (smax/_extras_grad.py) read the logits and targets.
        diff_extras = need_grad and any(want[:4])
        if fused:
            keep = diff_extras and not inplace
            ctx.save_for_backward(x if keep else None, mask, target if keep else None,
                                  weight if keep else None, None)
        else:
            ctx.save_for_backward(x, mask, target, weight, lse)
        ctx.meta = (dim, args)
        ctx.co = with_options(co, mask=None)
        return _loss_and_extras(ctx, loss, extras, want, lse)

    @staticmethod
    @first_order("cross_entropy")
    def backward(ctx: Any, dloss: Optional[Tensor], *dextras: Any) -> Tuple[Optional[Tensor], ...]:
        x, mask, target, weight, lse = ctx.saved_tensors
        dim, args = ctx.meta
        (ignore_index, reduction, label_smoothing, lse_square_scale, softcap, empty_mean) = args
        co = with_options(ctx.co, mask=mask)
        gx = _extra_grads(ctx, dextras)
        dx, dmask = (None, None) if dloss is None else _CrossEntropy._loss_grad(
            ctx, dloss, x, mask, target, weight, lse, co)
        if gx:
            if ctx.inplace:
                raise RuntimeError(
                    f"smax.torch.cross_entropy: the gradient of {', '.join(gx)} needs the "
                    f"logits, which inplace_backward=True overwrote; use inplace_backward=False "
                    f"to differentiate the extras")
            ex, em = cross_entropy_extras_grad(
                x, target, weight, mask, dim, _sigma(co), float(softcap),
                float(lse_square_scale), int(ignore_index), _reduction(reduction),
                str(empty_mean), gx)
            dx = ex.to(x.dtype) if dx is None else (dx.to(ex.dtype) + ex).to(x.dtype)
            if em is not None and ctx.needs_input_grad[1]:
                dmask = em.to(mask.dtype) if dmask is None else (dmask + em).to(mask.dtype)
        return dx, dmask, None, None, None, None, None, None, None, None

    @staticmethod
    def _loss_grad(ctx: Any, dloss: Tensor, x: Optional[Tensor], mask: Optional[Tensor],
                   target: Optional[Tensor], weight: Optional[Tensor], lse: Optional[Tensor],
                   co: Any) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """(d / d input, d / d mask) of the loss for the upstream dloss."""
        dim, args = ctx.meta
        (ignore_index, reduction, label_smoothing, lse_square_scale, softcap, empty_mean) = args
        if ctx.fused:
            dx = ctx.unit_grad
            if dx is None:
                raise RuntimeError(
                    "smax.torch.cross_entropy: the fused path's gradient was already handed "
                    "to an earlier backward (it is scaled in place); call cross_entropy with "
                    "fused=False to run backward more than once (retain_graph=True)")
            ctx.unit_grad = None  # hand the tensor over: autograd can keep it without a copy
            if _reduction(reduction) == "none":
                d = _ce_dim(dx, dim, "cross_entropy")
                dx.mul_(dloss.unsqueeze(d) if dx.dim() >= 2 else dloss)
            elif float(dloss) != 1.0:
                dx.mul_(dloss)
            return dx, _mask_grad(ctx, 1, mask, dx, co)
        d = _ce_dim(x, dim, "cross_entropy")
        co = with_options(co, dim=d)
        dx = torch.empty(tuple(x.shape), dtype=x.dtype)
        _C.cross_entropy_backward(x.detach(), target, dloss, dx, float(label_smoothing),
                                  float(lse_square_scale), float(softcap), lse,
                                  loss_options(ignore_index, reduction, weight, empty_mean), co)
        return dx, _mask_grad(ctx, 1, mask, dx, co)


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
    flows to ``input`` and a float mask; every extra but accuracy is
    differentiable, smax/_extras_grad.py).

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
    d = _ce_dim(input, dim, "cross_entropy")
    co = softmax_options("cross_entropy", d, scale, temperature, None, empty_row, threads)
    w = None if weight is None else weight.detach()
    return _CrossEntropy.apply(input, mask, target, w, d, args, want, co, bool(fused),
                               bool(inplace_backward))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, bias: Optional[Tensor],
                target: Tensor, ce_weight: Optional[Tensor], args: tuple, want: tuple,
                co: Any) -> Any:
        (ignore_index, lse_square_scale, label_smoothing, reduction, softcap, token_chunk,
         vocab_chunk, empty_mean) = args
        # The forward's lse lets the backward skip its recomputing pass (no
        # smoothing); float32 for float16 / bfloat16 hidden (see _cross_entropy_fwd).
        keep_lse = label_smoothing == 0.0
        w = _with_lse(want, keep_lse)
        loss, extras = _linear_cross_entropy_fwd(
            hidden, weight, target, bias, ce_weight, ignore_index, lse_square_scale,
            label_smoothing, reduction, softcap, w, token_chunk, vocab_chunk, empty_mean,
            co.scale, co.temperature, co.empty_row, co.threads,
            "f32" if keep_lse and _narrow(hidden.dtype) else None)
        lse = extras[1] if keep_lse else None
        ctx.save_for_backward(hidden, weight, bias, target, ce_weight, lse)
        ctx.meta = args
        ctx.co = co
        return _loss_and_extras(ctx, loss, extras, want, lse)

    @staticmethod
    @first_order("linear_cross_entropy")
    def backward(ctx: Any, dloss: Optional[Tensor], *dextras: Any) -> Tuple[Optional[Tensor], ...]:
        hidden, weight, bias, target, ce_weight, lse = ctx.saved_tensors
        (ignore_index, lse_square_scale, label_smoothing, reduction, softcap, token_chunk,
         vocab_chunk, empty_mean) = ctx.meta
        want_db = ctx.needs_input_grad[2]
        dh = dw = db = None
        if dloss is not None:
            # each gradient in its input's dtype (the library rounds the f32 result once)
            dh = torch.empty(tuple(hidden.shape), dtype=hidden.dtype)
            dw = torch.empty(tuple(weight.shape), dtype=weight.dtype)
            db = torch.empty((weight.shape[0],), dtype=bias.dtype) if want_db else None
            _C.linear_cross_entropy_backward(
                hidden.detach(), weight.detach(), target,
                None if bias is None else bias.detach(), dloss, dh, dw, db,
                float(label_smoothing), float(lse_square_scale), float(softcap), lse,
                int(token_chunk), int(vocab_chunk),
                loss_options(ignore_index, reduction, ce_weight, empty_mean), ctx.co)
        gx = _extra_grads(ctx, dextras)
        if gx:  # the extras' gradients (smax/_extras_grad.py)
            eh, ew, eb = linear_cross_entropy_extras_grad(
                hidden, weight, bias, target, ce_weight, _sigma(ctx.co), float(softcap),
                float(lse_square_scale), int(ignore_index), _reduction(reduction),
                str(empty_mean), gx)

            def add(a: Optional[Tensor], e: Optional[Tensor], like: Optional[Tensor]) -> Any:
                if e is None or like is None:
                    return a
                return e.to(like.dtype) if a is None else (a.to(e.dtype) + e).to(like.dtype)

            dh, dw = add(dh, eh, hidden), add(dw, ew, weight)
            db = add(db, eb, bias) if want_db else None
        return (dh if ctx.needs_input_grad[0] else None,
                dw if ctx.needs_input_grad[1] else None, db, None, None, None, None, None)


def linear_cross_entropy(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                         ce_weight: Optional[Tensor], args: tuple, want: tuple,
                         co: Any) -> Any:
    """args = (ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
    token_chunk, vocab_chunk, empty_mean); gradients for hidden, weight, bias."""
    _check(hidden, "linear_cross_entropy")
    cw = None if ce_weight is None else ce_weight.detach()
    return _LinearCrossEntropy.apply(hidden, weight, bias, target, cw, args, want, co)


# ---- smax.torch's functions ---------------------------------------------------------------------


def differentiable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``smax.torch`` version of an array function of smax: the same
    signature without ``out``, a torch.Tensor first argument (else TypeError
    naming ``smax.torch.<op>``); a tensor that requires grad goes through the
    op's autograd Function (the array function routes it)."""
    name = fn.__name__
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name != "out"]
    text, call, defaults = def_signature(params)
    first = params[0].name
    src = (f"def {name}({text}):\n"
           f"    _check({first}, {name!r})\n"
           f"    return _fn({call})\n")
    ns: dict = {"_check": _check, "_fn": fn, **defaults}
    exec(src, ns)  # a real signature: inspect, help() and call errors as a def's
    wrapper = ns[name]
    wrapper.__module__ = "smax.torch"
    wrapper.__qualname__ = name
    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "out"}
    wrapper.__doc__ = (f"Differentiable ``smax.{name}`` (a torch.autograd Function; the "
                       f"same arguments without ``out``).\n\n" + (fn.__doc__ or ""))
    return wrapper

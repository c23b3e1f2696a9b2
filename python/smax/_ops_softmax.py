"""The softmax family: softmax, log_softmax, logsumexp and their backward
passes (re-exported by ``smax``; conventions: ``help(smax)``)."""
from __future__ import annotations

from typing import Any

from . import _smax as _C
from ._common import (
    _arg,
    _vjp,
    _wants_grad,
    softmax_options,
    _reduce_rows,
    _opt,
)
from ._route import autograd, learnable_logit_scale, normalizer

__all__ = ["softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward",
           "logit_scale_gradients"]


# ---- the softmax family ----------------------------------------------------------

_COMMON_DOC = """
    Args:
        x: float32 array (numpy, torch CPU tensor or any DLPack array), any
            rank <= 8 and any strides; never copied, never written (unless it
            is also ``out``).
        dim: the reduced dimension; negative counts from the end.
        scale: multiplies the logits (finite, > 0).
        temperature: divides the logits (finite, > 0). The logits are
            ``t = x * (scale / temperature) + mask``.
        mask: ``None``; a bool / uint8 array (False / 0 = masked out, the
            logit becomes -inf); or a float32 array added to the scaled
            logits. Broadcast to ``x`` by NumPy rules.
        algorithm: one of ``smax.ALGORITHMS``; every algorithm meets the same
            error bounds (docs/numerics.md).
        empty_row: ``"zero"`` (a row with every entry masked or -inf gives
            softmax 0, log_softmax / logsumexp -inf, like SDPA) or ``"nan"``
            (NaN, like ``torch.softmax``).
        threads: 0 = ``smax.max_threads()``; results do not depend on it.
        out: optional float32 output of the result's shape, any strides; may
            be ``x`` itself (in place). Returned.
"""


def _row_normalizer(op: str, doc: str) -> Any:
    """softmax / log_softmax: the same signature, backward from y."""

    def fn(
        x: Any,
        dim: int = -1,
        *,
        scale: float = 1.0,
        temperature: float = 1.0,
        mask: Any = None,
        algorithm: str = "auto",
        empty_row: str = "zero",
        threads: int = 0,
        out: Any = None,
    ) -> Any:
        return normalizer(op, True, x, dim, (),
                          softmax_options(op, dim, scale, temperature, None, empty_row,
                                          threads, algorithm), mask, out)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = doc + _COMMON_DOC
    return learnable_logit_scale()(fn)


softmax = _row_normalizer("softmax", """Softmax along ``dim``: ``exp(t - max t) / sum exp(t - max t)``.

    Exact within a relative error of 2e-6 of the float64 result (outputs >=
    1e-30). Returns an array of ``x``'s shape and array type.
""")

log_softmax = _row_normalizer("log_softmax", """Log-softmax along ``dim``: ``(t - m) - log(sum exp(t - m))``, ``m = max t``.

    Absolute error <= 2e-6 * (1 + |value|). Masked / -inf entries give -inf.
    Returns an array of ``x``'s shape and array type.
""")


@learnable_logit_scale()
def logsumexp(
    x: Any,
    dim: int = -1,
    keepdim: bool = False,
    *,
    scale: float = 1.0,
    temperature: float = 1.0,
    mask: Any = None,
    algorithm: str = "auto",
    empty_row: str = "zero",
    threads: int = 0,
    out: Any = None,
) -> Any:
    co = softmax_options("logsumexp", dim, scale, temperature, None, empty_row, threads,
                         algorithm)
    if out is None and _wants_grad(x, mask):
        return autograd().logsumexp(x, mask, dim, bool(keepdim), co)
    co.mask = _opt(mask)
    return _reduce_rows("logsumexp", x, dim, keepdim, co, out)


logsumexp.__doc__ = (
    """``log(sum(exp(t)))`` along ``dim``, computed as ``m + log(sum exp(t - m))``.

    The result has ``x``'s shape without ``dim`` (``keepdim=True``: ``dim``
    kept with size 1). An empty row or an all-masked row gives -inf
    (``empty_row="nan"``: NaN for the all-masked case).
"""
    + _COMMON_DOC.replace("result's shape", "result's shape (with or without dim)")
)


def softmax_backward(
    y: Any,
    dy: Any,
    dim: int = -1,
    *,
    scale: float = 1.0,
    temperature: float = 1.0,
    threads: int = 0,
    out: Any = None,
) -> Any:
    """Vector-Jacobian product of softmax: ``dx = s * y * (dy - <dy, y>)``.

    Args:
        y: the softmax output (float32, any strides).
        dy: the upstream gradient, ``y``'s shape (zero strides allowed, e.g.
            an expanded tensor).
        dim, scale, temperature, threads: as given to the forward call;
            ``s = scale / temperature``. Masks are not needed (masked entries
            have ``y == 0`` and get ``dx == 0``).
        out: optional output (``y``'s shape); may be ``dy`` itself.

    Returns ``dx`` in ``y``'s array type.
    """
    return _vjp("softmax_backward", y, dy, dim, (),
                softmax_options("softmax_backward", dim, scale, temperature, None, "zero",
                                threads), out, "y")


def log_softmax_backward(
    y: Any,
    dy: Any,
    dim: int = -1,
    *,
    scale: float = 1.0,
    temperature: float = 1.0,
    threads: int = 0,
    out: Any = None,
) -> Any:
    """Vector-Jacobian product of log_softmax: ``dx = s * (dy - exp(y) * sum(dy))``.

    ``dx == 0`` where ``y == -inf`` (masked or -inf logits). Arguments as
    ``softmax_backward`` (``y`` is the log_softmax output).
    """
    return _vjp("log_softmax_backward", y, dy, dim, (),
                softmax_options("log_softmax_backward", dim, scale, temperature, None, "zero",
                                threads), out, "y")




def logit_scale_gradients(x: Any, dx: Any, *, scale: float = 1.0, temperature: float = 1.0,
                          threads: int = 0) -> Any:
    """Gradients of ``scale`` and ``temperature`` for any smax op, from its
    input ``x`` and the input gradient ``dx`` its backward gave: every op
    reads its logits as ``t = x * scale / temperature + mask``, so with
    ``S = sum(x * dx)`` (terms with ``dx == 0`` left out, so masked and -inf
    entries add nothing; float64, a fixed order: the same bits for any
    thread count) it returns ``(S / scale, -S / temperature)`` as floats.

    ``x`` and ``dx``: same shape, any floating dtypes and strides.
    ``smax.torch`` uses it when ``scale`` or ``temperature`` is a tensor that
    requires grad (a learnable temperature); call it directly with numpy.
    """
    co = softmax_options("logit_scale_gradients", -1, scale, temperature, None, "zero", threads)
    ds, dt = _C.logit_scale_gradients(_arg(x), _arg(dx), co)
    return float(ds), float(dt)

"""smax: the fastest exact softmax family on CPUs, from Python.

Every op takes numpy arrays, PyTorch CPU tensors or any DLPack-capable CPU
array **without copying** (any strides, including transposed, sliced and
negative-stride views) and returns the caller's array type:

* numpy in -> numpy out;
* torch in -> torch out (allocated with ``torch.empty``);
* any other DLPack array in -> numpy out (convert back without a copy with
  your library's ``from_dlpack``, e.g. ``jnp.from_dlpack(y)``).

Outputs are allocated contiguous by the caller's framework, or written into
``out=`` (any strides; ``out`` may be ``x`` itself for an in-place call).
Kernels run with the GIL released.

dtypes: ``float32`` only (the fast, exact path; error bounds in
docs/numerics.md). ``float64`` and other dtypes raise ``TypeError``: cast first.
Masks are ``bool`` / ``uint8`` (keep where true / non-zero) or ``float32``
(added to the scaled logits), broadcast to ``x`` by NumPy rules.

Errors: invalid arguments raise ``ValueError``, wrong dtypes / devices /
array types ``TypeError``, unsupported requests ``NotImplementedError``,
failed allocations ``MemoryError``.

Autograd: ``smax.torch`` has ``torch.autograd.Function`` versions. The
functions here also route a torch tensor that requires grad (with grad mode
on) through ``smax.torch``, so they are differentiable in that case too.

Beyond the softmax family (``smax/_ops.py``): sparse normalisers
(``sparsemax``, ``entmax15``, ``entmax_bisect``, ``sparse_softmax``),
rescaled / re-weighting normalisers (``ssmax``, ``softpick``, ``stablemax``,
``self_adjust_softmax``, ``sigmoid_normalizer``, ``softplus_normalizer``,
``power_softmax``, ``probability_temperature``, ``logit_standardization``),
losses (``cross_entropy`` with PyTorch's signature, ``linear_cross_entropy``,
``z_loss``, ``spherical_z_loss``, ``sparsemax_loss``, ``entmax15_loss``,
``entmax_bisect_loss``, ``sparse_softmax_loss``, ``stablemax_cross_entropy``)
and samplers (``gumbel_softmax``, ``gumbel_max``, ``gumbel_noise``,
``softmax_topk``, ``sampling_filter``, ``sample``, ``soft_nms``), plus
``softmax_collapse_fraction``. See docs/python.md.
"""
from __future__ import annotations

import operator
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as _np

from . import _smax as _C

__all__ = [
    "softmax",
    "log_softmax",
    "logsumexp",
    "softmax_backward",
    "log_softmax_backward",
    "info",
    "set_max_target",
    "set_max_threads",
    "max_threads",
    "kernel_name",
    "op_list",
    "OpInfo",
    "ALGORITHMS",
    "EMPTY_ROW_POLICIES",
]  # extended with smax._ops.__all__ at the end of this file

__version__: str = _C.version()

#: Accepted values of ``algorithm=``.
ALGORITHMS: Tuple[str, ...] = (
    "auto",
    "three-pass-reload",
    "three-pass-recompute",
    "two-pass",
    "online",
)
#: Accepted values of ``empty_row=`` (what a row that is all masked / -inf gives).
EMPTY_ROW_POLICIES: Tuple[str, ...] = ("zero", "nan")


# ---- array-type plumbing ------------------------------------------------------


def _torch_module() -> Any:
    return sys.modules.get("torch")


def _is_torch(x: Any) -> bool:
    t = _torch_module()
    return t is not None and isinstance(x, t.Tensor)


def _shape_of(x: Any, what: str, op: str) -> Tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None or not (
        isinstance(x, _np.ndarray) or _is_torch(x) or hasattr(x, "__dlpack__")
    ):
        raise TypeError(
            f"smax.{op}: {what} must be a numpy array, a torch tensor or a DLPack-capable "
            f"array, got {type(x).__name__}"
        )
    return tuple(int(s) for s in shape)


def _arg(x: Any) -> Any:
    """What the extension gets: the same memory, no autograd wrapper."""
    if _is_torch(x):
        if x.requires_grad:
            x = x.detach()  # a view: same storage, no copy
        if x.is_conj() or x.is_neg():
            raise TypeError("smax: lazily conjugated / negated tensors are not supported")
    return x


def _empty_like(x: Any, shape: Sequence[int]) -> Any:
    """A float32 output of `shape`, from the framework `x` came from."""
    if _is_torch(x):
        t = _torch_module()
        if x.device.type != "cpu":
            raise TypeError(f"smax: tensors must be on the CPU, got device {x.device}")
        return t.empty(tuple(shape), dtype=t.float32)
    return _np.empty(tuple(shape), dtype=_np.float32)


def _fmt_shape(shape: Sequence[int]) -> str:
    return str(tuple(int(s) for s in shape))


def _check_out(out: Any, op: str, shape: Optional[Sequence[int]] = None,
               dtype: str = "float32") -> None:
    """Check a caller's `out=`: an array (numpy, torch or DLPack) of the
    result's `shape` (when given), not requiring grad. Errors name `out`."""
    if not (isinstance(out, _np.ndarray) or _is_torch(out) or hasattr(out, "__dlpack__")):
        want = "" if shape is None else f" of shape {_fmt_shape(shape)}"
        raise TypeError(
            f"smax.{op}: out must be None or a preallocated {dtype} array{want} (a numpy "
            f"array, a torch tensor or a DLPack-capable array), got {type(out).__name__}"
        )
    if _is_torch(out) and out.requires_grad:
        raise RuntimeError(
            f"smax.{op}: out= does not support automatic differentiation (out requires grad)"
        )
    if shape is not None:
        got = tuple(int(s) for s in out.shape)
        if got != tuple(int(s) for s in shape):
            raise ValueError(
                f"smax.{op}: out has shape {_fmt_shape(got)}, expected {_fmt_shape(shape)} "
                f"(the result's shape)"
            )


def _wants_grad(*tensors: Any) -> bool:
    t = _torch_module()
    if t is None or not t.is_grad_enabled():
        return False
    return any(_is_torch(a) and a.requires_grad for a in tensors)


def _norm_dim(dim: Any, rank: int, op: str) -> int:
    try:
        d = operator.index(dim)
    except TypeError:
        raise TypeError(f"smax.{op}: dim must be an int, got {type(dim).__name__}") from None
    if rank == 0:
        if d not in (0, -1):
            raise ValueError(f"smax.{op}: dim {d} is out of range for rank 0")
        return 0
    if not -rank <= d < rank:
        raise ValueError(f"smax.{op}: dim {d} is out of range for rank {rank}")
    return d + rank if d < 0 else d


def _forward(
    fn: Any,
    op: str,
    x: Any,
    out_shape: Optional[Tuple[int, ...]],
    dim: int,
    scale: float,
    temperature: float,
    mask: Any,
    algorithm: str,
    empty_row: str,
    threads: int,
    out: Any,
) -> Any:
    shape = _shape_of(x, "x", op)
    _norm_dim(dim, len(shape), op)
    want = shape if out_shape is None else out_shape
    if out is None:
        out = _empty_like(x, want)
    else:
        _check_out(out, op, want)
    m = None if mask is None else _arg(mask)
    fn(_arg(x), _arg(out), int(dim), float(scale), float(temperature), m,
       str(algorithm), str(empty_row), int(threads))
    return out


def _backward(
    fn: Any, op: str, y: Any, dy: Any, dim: int, scale: float, temperature: float,
    threads: int, out: Any,
) -> Any:
    shape = _shape_of(y, "y", op)
    _shape_of(dy, "dy", op)
    _norm_dim(dim, len(shape), op)
    if out is None:
        out = _empty_like(y, shape)
    else:
        _check_out(out, op, shape)
    fn(_arg(y), _arg(dy), _arg(out), int(dim), float(scale), float(temperature), int(threads))
    return out


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


def softmax(
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
    if out is None and _wants_grad(x, mask):
        from . import torch as _st
        return _st.softmax(x, dim, scale=scale, temperature=temperature, mask=mask,
                           algorithm=algorithm, empty_row=empty_row, threads=threads)
    return _forward(_C.softmax, "softmax", x, None, dim, scale, temperature, mask,
                    algorithm, empty_row, threads, out)


softmax.__doc__ = (
    """Softmax along ``dim``: ``exp(t - max t) / sum exp(t - max t)``.

    Exact within a relative error of 2e-6 of the float64 result (outputs >=
    1e-30). Returns an array of ``x``'s shape and array type.
"""
    + _COMMON_DOC
)


def log_softmax(
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
    if out is None and _wants_grad(x, mask):
        from . import torch as _st
        return _st.log_softmax(x, dim, scale=scale, temperature=temperature, mask=mask,
                               algorithm=algorithm, empty_row=empty_row, threads=threads)
    return _forward(_C.log_softmax, "log_softmax", x, None, dim, scale, temperature, mask,
                    algorithm, empty_row, threads, out)


log_softmax.__doc__ = (
    """Log-softmax along ``dim``: ``(t - m) - log(sum exp(t - m))``, ``m = max t``.

    Absolute error <= 2e-6 * (1 + |value|). Masked / -inf entries give -inf.
    Returns an array of ``x``'s shape and array type.
"""
    + _COMMON_DOC
)


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
    if out is None and _wants_grad(x, mask):
        from . import torch as _st
        return _st.logsumexp(x, dim, keepdim, scale=scale, temperature=temperature, mask=mask,
                             algorithm=algorithm, empty_row=empty_row, threads=threads)
    shape = _shape_of(x, "x", "logsumexp")
    out_shape: Tuple[int, ...] = ()
    if shape:
        d = _norm_dim(dim, len(shape), "logsumexp")
        out_shape = shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]
    return _forward(_C.logsumexp, "logsumexp", x, out_shape, dim, scale, temperature, mask,
                    algorithm, empty_row, threads, out)


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
    return _backward(_C.softmax_backward, "softmax_backward", y, dy, dim, scale,
                     temperature, threads, out)


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
    return _backward(_C.log_softmax_backward, "log_softmax_backward", y, dy, dim, scale,
                     temperature, threads, out)


# ---- runtime ------------------------------------------------------------------------


def info() -> Dict[str, Any]:
    """What this build has and what it runs now.

    Returns a dict: ``version``; ``compiled_targets`` (SIMD targets built in,
    best first); ``supported_targets`` (those this CPU runs, after any cap);
    ``active_target`` (what kernels dispatch to now); ``max_threads`` (the
    default thread count); ``kernels`` (op -> kernel name for a row of 32000
    with ``algorithm="auto"``).
    """
    ops = ("softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward")  # noqa: E501
    return {
        "version": __version__,
        "compiled_targets": list(_C.compiled_targets()),
        "supported_targets": list(_C.supported_targets()),
        "active_target": _C.active_target(),
        "max_threads": _C.max_threads(),
        "kernels": {op: _C.kernel_name(op) for op in ops},
    }


def set_max_target(name: Optional[str]) -> None:
    """Cap the SIMD target kernels dispatch to.

    ``name``: ``"avx3"``, ``"avx2"``, ``"sse4"``, ``"ssse3"``, ``"scalar"``
    (case-insensitive), or ``None`` / ``""`` / ``"none"`` to lift the cap.
    Raises ``ValueError`` for an unknown name or one not compiled in. Call it
    between calls, not while other threads run smax ops. The environment
    variable ``SMAX_MAX_TARGET`` does the same at start-up.
    """
    _C.set_max_target("" if name is None else str(name))


def set_max_threads(n: int) -> None:
    """Default thread count for calls with ``threads=0`` (``n >= 1``)."""
    _C.set_max_threads(int(n))


def max_threads() -> int:
    """The default thread count (hardware concurrency unless changed)."""
    return int(_C.max_threads())


class OpInfo(NamedTuple):
    """One public op of smax, as the op list states it (docs/design.md,
    "Adding an op"): ``group`` is "softmax", "normalizers", "losses",
    "sampling" or "attention"; ``kind`` "diff" (a forward op with a gradient:
    ``smax.<name>`` and ``smax.torch.<name>``), "nodiff" (``smax.<name>``),
    "backward" (the VJP of a forward op, reached through ``smax.torch``'s
    autograd) or "fused" (forward and backward in one call); ``cli`` how
    the ``smax`` command reaches it ("run", "run_unchecked", "attention",
    "none")."""

    name: str
    group: str
    kind: str
    cli: str


def op_list() -> List[OpInfo]:
    """Every public op of the library, in the op list's order."""
    return [OpInfo(*entry) for entry in _C.op_list()]


def kernel_name(op: str, algorithm: str = "auto", cols: int = 32000) -> str:
    """The kernel ``op`` runs with ``algorithm`` on the active target for rows of ``cols``."""
    return str(_C.kernel_name(op, algorithm, int(cols)))


# ---- every other op (smax/_ops.py; imported last: it uses the helpers above) -----------

from ._ops import *  # noqa: E402,F401,F403
from ._ops import __all__ as _ops_all  # noqa: E402

__all__ += list(_ops_all)

from ._attention import ATTENTION_NORMALIZERS, attention  # noqa: E402,F401

__all__ += ["attention", "ATTENTION_NORMALIZERS"]

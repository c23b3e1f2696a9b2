"""Plumbing shared by the array functions of ``smax._ops_*`` (argument
checks, output allocation, option tuples for the extension)."""
from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Tuple

import numpy as _np

from . import _smax as _C
from . import (  # noqa: F401  (helpers defined before this module is imported)
    _arg,
    _check_out,
    _is_torch,
    _norm_dim,
    _shape_of,
    _torch_module,
)

#: Accepted values of ``reduction=`` (``"elementwise_mean"``, the entmax
#: package's name, is accepted as ``"mean"``).
REDUCTIONS: Tuple[str, ...] = ("none", "mean", "sum")

Array = Any


# ---- plumbing ---------------------------------------------------------------------------


def _st() -> Any:
    from . import _torch_ops
    return _torch_ops


def _alloc(like: Any, shape: Sequence[int], dtype: str = "f32") -> Any:
    """An uninitialised array of `shape` in the framework of `like`."""
    if _is_torch(like):
        t = _torch_module()
        if like.device.type != "cpu":
            raise TypeError(f"smax: tensors must be on the CPU, got device {like.device}")
        return t.empty(tuple(shape), dtype=t.float32 if dtype == "f32" else t.int64)
    return _np.empty(tuple(shape), dtype=_np.float32 if dtype == "f32" else _np.int64)


def _co(op: str, dim: Any, scale: float, temperature: float, mask: Any, empty_row: str,
        threads: int, algorithm: str = "auto") -> tuple:
    """The options tuple of the extension: (dim, scale, temperature, mask, algorithm,
    empty_row, threads)."""
    try:
        d = int(dim)
    except TypeError:
        raise TypeError(f"smax.{op}: dim must be an int, got {type(dim).__name__}") from None
    return (d, float(scale), float(temperature), None if mask is None else _arg(mask),
            str(algorithm), str(empty_row), int(threads))


def _reduction(reduction: str) -> str:
    return "mean" if reduction == "elementwise_mean" else str(reduction)


def _lo(ignore_index: int, reduction: str, weight: Any, empty_mean: str) -> tuple:
    """The loss tuple of the extension: (ignore_index, reduction, weight, empty_mean)."""
    return (int(ignore_index), _reduction(reduction), None if weight is None else _arg(weight),
            str(empty_mean))


def _rows_shape(shape: Tuple[int, ...], d: int, keepdim: bool) -> Tuple[int, ...]:
    if not shape:
        return ()
    return shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]


def _prep(op: str, x: Any, dim: Any, out: Any, out_shape: Optional[Tuple[int, ...]] = None,
          dtype: str = "f32", what: str = "x") -> Tuple[Tuple[int, ...], int, Any]:
    """Check x (called `what` in errors) and dim; allocate (or check) the output."""
    shape = _shape_of(x, what, op)
    d = _norm_dim(dim, len(shape), op)
    want = shape if out_shape is None else out_shape
    if out is None:
        out = _alloc(x, want, dtype)
    else:
        _check_out(out, op, want, "float32" if dtype == "f32" else "int64")
    return shape, d, out


def _normalize(op: str, x: Any, dim: Any, params: tuple, co: tuple, out: Any) -> Any:
    """A row normaliser: out = op(x) of x's shape."""
    _, _, out = _prep(op, x, dim, out)
    getattr(_C, op)(_arg(x), _arg(out), *params, co)
    return out


def _vjp(op: str, a: Any, dy: Any, dim: Any, params: tuple, co: tuple, out: Any) -> Any:
    """A backward pass `op(a, dy, out, *params, co)`; `a` is y or x (see the op)."""
    shape = _shape_of(a, "a", op)
    _shape_of(dy, "dy", op)
    _norm_dim(dim, len(shape), op)
    if out is None:
        out = _alloc(a, shape)
    else:
        _check_out(out, op, shape)
    getattr(_C, op)(_arg(a), _arg(dy), _arg(out), *params, co)
    return out


def _scalar_or_array(v: Any, what: str, op: str) -> Tuple[float, Any]:
    """(scalar, None) for a Python / numpy number, (default, array) for an array
    (per-row parameter, broadcast to x's shape with dim of size 1)."""
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        return float(v), None
    if isinstance(v, _np.generic):
        return float(v), None
    _shape_of(v, what, op)
    return 0.0, _arg(v)


def _loss_shape(op: str, x: Any, dim: Any, reduction: str) -> Tuple[Tuple[int, ...], int, Tuple[int, ...]]:
    shape = _shape_of(x, "x", op)
    d = _norm_dim(dim, len(shape), op)
    rows = _rows_shape(shape, d, False)
    return shape, d, rows if _reduction(reduction) == "none" else ()


def _loss(op: str, x: Any, target: Any, dim: Any, params: tuple, lo: tuple, co: tuple,
          out: Any) -> Any:
    """A loss `op(x, target, out, *params, lo, co)`."""
    _, _, out_shape = _loss_shape(op, x, dim, lo[1])
    if target is not None:
        _shape_of(target, "target", op)
    if out is None:
        out = _alloc(x, out_shape)
    else:
        _check_out(out, op, out_shape)
    getattr(_C, op)(_arg(x), None if target is None else _arg(target), _arg(out), *params, lo, co)
    return out


def _seed(seed: Optional[int], like: Any) -> int:
    """The seed to use: `seed`, or one drawn from torch's global generator (torch
    inputs: torch.manual_seed makes runs reproducible) or numpy's global one."""
    if seed is not None:
        return int(seed)
    if _is_torch(like):
        t = _torch_module()
        return int(t.randint(0, 2**62, (), dtype=t.int64).item())
    return int(_np.random.randint(0, 2**62, dtype=_np.int64))


_OPTS_DOC = """
    Common options (see ``help(smax._ops)``): ``scale``, ``temperature``, ``mask``,
    ``empty_row``, ``threads``, ``out``."""

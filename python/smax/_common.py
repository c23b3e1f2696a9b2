"""Plumbing shared by every array function and autograd Function of smax (a
leaf module: it imports nothing from the package but the extension).

Argument checks, output allocation in the caller's framework, the option
objects of the extension (``_smax.SoftmaxOptions`` / ``LossOptions``, built
once per call by ``softmax_options`` / ``loss_options``) and the generic
calls (``_normalize``, ``_vjp``, ``_loss``). ``_route.py`` sends a tensor that
requires grad to the torch Functions (``_autograd.py``)."""
from __future__ import annotations

import contextlib
import copy
import inspect
import numbers
import operator
import sys
import threading
from typing import Any, Iterator, Optional, Sequence, Tuple

import numpy as _np

from . import _smax as _C

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
#: Accepted values of ``reduction=`` (``"elementwise_mean"``, the entmax
#: package's name, is accepted as ``"mean"``).
REDUCTIONS: Tuple[str, ...] = ("none", "mean", "sum")

Array = Any

_OPTS_DOC = """
    Common options (see ``help(smax._ops)``): ``scale``, ``temperature``, ``mask``,
    ``empty_row``, ``threads``, ``out``."""


# ---- array types ------------------------------------------------------------------------


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


#: The floating dtypes smax takes (and returns): views of their own dtype.
FLOAT_DTYPES: Tuple[str, ...] = ("float32", "float64", "float16", "bfloat16")


def _is_np_bfloat16(x: Any) -> bool:
    """A numpy array of ml_dtypes' bfloat16 (numpy has no bfloat16 of its own)."""
    # dtype.name costs 2-6 us (numpy builds it per call); ml_dtypes' types
    # are of kind "V", numpy's own floats "f", so the name is asked only there.
    return isinstance(x, _np.ndarray) and x.dtype.kind == "V" and x.dtype.name == "bfloat16"


def _held(x: Any) -> Any:
    """What the extension keeps (an options field, a per-row parameter): the
    same memory, no autograd wrapper, as an array the extension may read
    more than once. A numpy bfloat16 array (ml_dtypes) exports neither
    DLPack nor a buffer: it goes as a bfloat16 DLPack view of the same
    memory (``_smax._bfloat16_view``)."""
    if _is_torch(x):
        if x.requires_grad:
            x = x.detach()  # a view: same storage, no copy
        if x.is_conj() or x.is_neg():
            raise TypeError("smax: lazily conjugated / negated tensors are not supported")
    elif _is_np_bfloat16(x):
        return _C._bfloat16_view(x.view(_np.uint16), x)
    return x


def _arg(x: Any) -> Any:
    """An array argument of one extension call: ``_held(x)``, a torch tensor
    as a DLPack capsule of its memory (torch's C export costs ~0.4 us a
    call, ``Tensor.__dlpack__``, which the extension would call, ~3 us; a
    capsule is consumed by the call it is passed to, so never keep one)."""
    x = _held(x)
    if _is_torch(x) and x.layout is _torch_module().strided and x.device.type == "cpu":
        return _torch_module().utils.dlpack.to_dlpack(x)
    return x  # anything else: the extension's own DLPack import, and its TypeError


def _opt(x: Any) -> Any:
    return None if x is None else _held(x)


def _np_bfloat16() -> Any:
    """ml_dtypes.bfloat16 (the numpy dtype of bfloat16 results), or None."""
    try:
        import ml_dtypes  # optional: only for numpy bfloat16 arrays
    except ImportError:  # pragma: no cover
        return None
    return ml_dtypes.bfloat16


def _float_dtype_name(x: Any) -> Optional[str]:
    """The name of x's floating dtype if smax takes it ("float32", "float64",
    "float16", "bfloat16"), else None."""
    d = getattr(x, "dtype", None)
    if d is None:
        return None
    try:
        return _DTYPE_NAMES[d]
    except KeyError:
        pass
    except TypeError:  # an unhashable dtype object: named each time
        return _dtype_name(d)
    name = _DTYPE_NAMES[d] = _dtype_name(d)
    return name


def _dtype_name(d: Any) -> Optional[str]:
    name = str(d).rsplit(".", 1)[-1]  # torch.bfloat16 -> bfloat16
    return name if name in FLOAT_DTYPES else None


#: _float_dtype_name's answers by dtype object (numpy's and torch's are
#: hashable and few): str(numpy dtype) costs 2-6 us a call.
_DTYPE_NAMES: dict = {}


def _alloc(like: Any, shape: Sequence[int], dtype: Optional[str] = None, op: str = "") -> Any:
    """An uninitialised array of `shape` in the framework of `like`. dtype:
    None = like's floating dtype (float32 when like has none: its own dtype
    error comes from the extension), "f32" = float32, "i64" = int64."""
    if dtype == "i64":
        name = "int64"
    elif dtype == "f32" or like is None:
        name = "float32"
    else:
        name = _float_dtype_name(like) or "float32"
    if _is_torch(like):
        t = _torch_module()
        if like.device.type != "cpu":
            raise TypeError(f"smax{'.' + op if op else ''}: tensors must be on the CPU, got "
                            f"device {like.device}")
        return t.empty(tuple(shape), dtype=getattr(t, name))
    if name == "bfloat16":
        bf16 = _np_bfloat16()
        if bf16 is None:  # pragma: no cover
            raise TypeError(f"smax{'.' + op if op else ''}: a bfloat16 result as a numpy array "
                            f"needs ml_dtypes (pip install ml_dtypes), or pass out=")
        return _np.empty(tuple(shape), dtype=bf16)
    return _np.empty(tuple(shape), dtype=name)


def _fmt_shape(shape: Sequence[int]) -> str:
    return str(tuple(int(s) for s in shape))


def _check_out(out: Any, op: str, shape: Optional[Sequence[int]] = None,
               dtype: str = "floating") -> None:
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


def _rows_shape(shape: Tuple[int, ...], d: int, keepdim: bool) -> Tuple[int, ...]:
    if not shape:
        return ()
    return shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]


# ---- the option objects of the extension --------------------------------------------------


def _number(v: Any, op: str, name: str) -> float:
    """float(v), refusing a tensor that requires grad: a learnable knob this
    op does not differentiate would otherwise lose its gradient silently."""
    if _wants_grad(v):
        raise TypeError(f"smax.{op}: {name} is a tensor that requires grad, but {op} has no "
                        f"gradient for it (pass a number, or a tensor without grad)")
    return float(v)


def softmax_options(op: str, dim: Any, scale: float = 1.0, temperature: float = 1.0,
                    mask: Any = None, empty_row: str = "zero", threads: int = 0,
                    algorithm: str = "auto") -> Any:
    """The ``_smax.SoftmaxOptions`` of a call (``mask``: an array or None)."""
    try:
        d = operator.index(dim)
    except TypeError:
        raise TypeError(f"smax.{op}: dim must be an int, got {type(dim).__name__}") from None
    return _C.SoftmaxOptions(dim=d, scale=_number(scale, op, "scale"),
                             temperature=_number(temperature, op, "temperature"),
                             mask=_opt(mask), algorithm=str(algorithm),
                             empty_row=str(empty_row), threads=int(threads))


def with_options(co: Any, **fields: Any) -> Any:
    """A copy of an options object with `fields` replaced (arrays detached)."""
    c = copy.copy(co)
    for k, v in fields.items():
        setattr(c, k, _opt(v))
    return c


def _reduction(reduction: str) -> str:
    return "mean" if reduction == "elementwise_mean" else str(reduction)


def loss_options(ignore_index: int, reduction: str, weight: Any, empty_mean: str) -> Any:
    """The ``_smax.LossOptions`` of a call."""
    return _C.LossOptions(ignore_index=int(ignore_index), reduction=_reduction(reduction),
                          weight=_opt(weight), empty_mean=str(empty_mean))


# ---- generic calls ----------------------------------------------------------------------------


def _prep(op: str, x: Any, dim: Any, out: Any, out_shape: Optional[Tuple[int, ...]] = None,
          dtype: Optional[str] = None, what: str = "x") -> Tuple[Tuple[int, ...], int, Any]:
    """Check x (called `what` in errors) and dim; allocate (or check) the output."""
    shape = _shape_of(x, what, op)
    d = _norm_dim(dim, len(shape), op)
    want = shape if out_shape is None else out_shape
    if out is None:
        out = _alloc(x, want, dtype)
    else:
        _check_out(out, op, want, "int64" if dtype == "i64" else "floating")
    return shape, d, out


# ---- replay (smax/_library.py) ----------------------------------------------------------------

_REPLAY = threading.local()


@contextlib.contextmanager
def replaying(outputs: Sequence[Any]) -> Iterator[list]:
    """Within the block, the generic forward calls (``_normalize``,
    ``_reduce_rows``, ``_loss``) return the given ``outputs`` in order instead
    of running their kernels: smax/_library.py's backward op re-runs an
    autograd Function's forward on the saved inputs to rebuild its backward
    state, with the saved forward outputs in place of a second forward pass.
    Yields the list of outputs not yet used (the caller checks it is empty)."""
    pending = list(outputs)
    previous = getattr(_REPLAY, "pending", None)
    _REPLAY.pending = pending
    try:
        yield pending
    finally:
        _REPLAY.pending = previous


def _replayed() -> Any:
    """The next output to replay (see ``replaying``), or None."""
    pending = getattr(_REPLAY, "pending", None)
    return pending.pop(0) if pending else None


def _normalize(op: str, x: Any, dim: Any, params: tuple, co: Any, out: Any) -> Any:
    """A row normaliser: out = op(x) of x's shape."""
    if out is None and (r := _replayed()) is not None:
        return r
    _, _, out = _prep(op, x, dim, out)
    getattr(_C, op)(_arg(x), _arg(out), *params, co)
    return out


def _reduce_rows(op: str, x: Any, dim: Any, keepdim: bool, co: Any, out: Any) -> Any:
    """A row reduction (logsumexp): out has x's shape without dim (or keepdim)."""
    shape = _shape_of(x, "x", op)
    out_shape: Tuple[int, ...] = ()
    if shape:
        out_shape = _rows_shape(shape, _norm_dim(dim, len(shape), op), keepdim)
    return _normalize_into(op, x, dim, co, out, out_shape)


def _normalize_into(op: str, x: Any, dim: Any, co: Any, out: Any,
                    out_shape: Tuple[int, ...]) -> Any:
    if out is None and (r := _replayed()) is not None:
        return r
    _, _, out = _prep(op, x, dim, out, out_shape)
    getattr(_C, op)(_arg(x), _arg(out), co)
    return out


def _vjp(op: str, a: Any, dy: Any, dim: Any, params: tuple, co: Any, out: Any,
         what: str = "a") -> Any:
    """A backward pass `op(a, dy, out, *params, co)`; `a` is y or x (see the op),
    called `what` in errors."""
    shape = _shape_of(a, what, op)
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
    return 0.0, _held(v)


def _loss_shape(op: str, x: Any, dim: Any, reduction: str) -> Tuple[Tuple[int, ...], int, Tuple[int, ...]]:
    shape = _shape_of(x, "x", op)
    d = _norm_dim(dim, len(shape), op)
    rows = _rows_shape(shape, d, False)
    return shape, d, rows if _reduction(reduction) == "none" else ()


def _loss(op: str, x: Any, target: Any, dim: Any, params: tuple, lo: Any, co: Any,
          out: Any) -> Any:
    """A loss `op(x, target, out, *params, lo, co)`."""
    if out is None and (r := _replayed()) is not None:
        return r
    _, _, out_shape = _loss_shape(op, x, dim, lo.reduction)
    if target is not None:
        _shape_of(target, "target", op)
    if out is None:
        out = _alloc(x, out_shape)
    else:
        _check_out(out, op, out_shape)
    getattr(_C, op)(_arg(x), None if target is None else _arg(target), _arg(out),
                    *[_opt(p) for p in params], lo, co)
    return out


def _ce_dim(x: Any, dim: Optional[int], op: str) -> int:
    shape = _shape_of(x, "input", op)
    if dim is None:
        return 1 if len(shape) >= 2 else 0
    return _norm_dim(dim, len(shape), op)


# ---- the forward passes of cross_entropy and linear_cross_entropy (numpy and torch) ---------


def _cross_entropy_fwd(input: Any, target: Any, weight: Any, ignore_index: int,
                       reduction: str, label_smoothing: float, dim: Optional[int],
                       lse_square_scale: float, softcap: float, want: Sequence[bool],
                       empty_mean: str, scale: float, temperature: float, mask: Any,
                       empty_row: str, threads: int, out: Any,
                       grad: Any = None, lse_dtype: Optional[str] = None) -> Tuple[Any, list]:
    """cross_entropy's forward; `extras` holds an array for every True in `want`
    (z_loss, lse, entropy, target_logprob, accuracy), else None. `grad`: an
    f32 array of input's shape (or input itself) that receives d loss / d input
    for a unit upstream gradient (the fused path, smax::CrossEntropyOptions::grad).
    Results are in input's dtype; ``lse_dtype="f32"`` allocates the lse in
    float32 (the two-call backward reuses it: a float16 / bfloat16 lse would
    cost the gradient its float32 accuracy)."""
    op = "cross_entropy"
    shape = _shape_of(input, "input", op)
    d = _ce_dim(input, dim, op)
    _shape_of(target, "target", op)
    rows = _rows_shape(shape, d, False)
    red = _reduction(reduction)
    reduced = rows if red == "none" else ()
    if out is None:
        out = _alloc(input, reduced)
    else:
        _check_out(out, op, reduced)
    shapes = (reduced, rows, rows, rows, reduced)
    dtypes = (None, lse_dtype, None, None, None)
    extras = [_alloc(input, s, dt) if w else None for s, w, dt in zip(shapes, want, dtypes)]
    _C.cross_entropy(_arg(input), _arg(target), _arg(out), float(label_smoothing),
                     float(lse_square_scale), float(softcap),
                     *[_opt(e) for e in extras],
                     loss_options(ignore_index, reduction, weight, empty_mean),
                     softmax_options(op, d, scale, temperature, mask, empty_row, threads),
                     None if grad is None else _arg(grad))
    return out, extras


def _linear_cross_entropy_fwd(hidden: Any, weight: Any, target: Any, bias: Any, ce_weight: Any,
                              ignore_index: int, lse_square_scale: float,
                              label_smoothing: float, reduction: str, softcap: float,
                              want: Sequence[bool], token_chunk: int, vocab_chunk: int,
                              empty_mean: str, scale: float, temperature: float,
                              empty_row: str, threads: int,
                              lse_dtype: Optional[str] = None) -> Tuple[Any, list]:
    """linear_cross_entropy's forward (extras as ``_cross_entropy_fwd``).
    Results are in hidden's dtype; ``lse_dtype="f32"`` allocates the lse in
    float32 (the backward reuses it: a float16 / bfloat16 lse would cost the
    gradients their float32 accuracy)."""
    op = "linear_cross_entropy"
    hs = _shape_of(hidden, "hidden", op)
    _shape_of(weight, "weight", op)
    _shape_of(target, "target", op)
    rows = hs[:1] if hs else ()
    reduced = rows if _reduction(reduction) == "none" else ()
    out = _alloc(hidden, reduced)
    shapes = (reduced, rows, rows, rows, reduced)
    dtypes = (None, lse_dtype, None, None, None)
    extras = [_alloc(hidden, s, dt) if w else None for s, w, dt in zip(shapes, want, dtypes)]
    _C.linear_cross_entropy(_arg(hidden), _arg(weight), _arg(target),
                            None if bias is None else _arg(bias), _arg(out),
                            float(label_smoothing), float(lse_square_scale), float(softcap),
                            *[_opt(e) for e in extras],
                            int(token_chunk), int(vocab_chunk),
                            loss_options(ignore_index, reduction, ce_weight, empty_mean),
                            softmax_options(op, -1, scale, temperature, None, empty_row, threads))
    return out, extras


def _seed(seed: Optional[int], like: Any) -> int:
    """The seed to use: `seed`, or one drawn from torch's global generator (torch
    inputs: torch.manual_seed makes runs reproducible) or numpy's global one."""
    if seed is not None:
        return int(seed)
    if _is_torch(like):
        t = _torch_module()
        return int(t.randint(0, 2**62, (), dtype=t.int64).item())
    return int(_np.random.randint(0, 2**62, dtype=_np.int64))


def def_signature(params: Sequence[inspect.Parameter]) -> Tuple[str, str, dict]:
    """For a wrapper generated with exec (a real def: inspect, help() and
    call errors as a def's): the parameter list text (``a, b=_d1, *, c=_d2``),
    the forwarding call's argument text (``a, b, c=c``) and the defaults'
    namespace (``{"_d1": ..., "_d2": ...}``) for ``params``."""
    defaults = {f"_d{i}": p.default for i, p in enumerate(params)
                if p.default is not inspect.Parameter.empty}
    text, call, star = [], [], False
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not star:
            text.append("*")
            star = True
        text.append(p.name + (f"=_d{i}" if f"_d{i}" in defaults else ""))
        call.append(f"{p.name}={p.name}" if p.kind is p.KEYWORD_ONLY else p.name)
    return ", ".join(text), ", ".join(call), defaults

"""Array functions of smax beyond the softmax family: sparse and re-weighting
normalisers, losses, samplers. Re-exported by ``smax`` (see its docstring for
the array-type, zero-copy, dtype and error conventions); differentiable
versions for PyTorch live in ``smax.torch``.

Every function takes ``x`` as a float32 numpy array, torch CPU tensor or any
DLPack array (any rank <= 8, any strides; never copied) and returns results of
the caller's array type. The keyword options shared by all of them:

    scale, temperature: the logits are ``t = x * (scale / temperature) + mask``
        (both finite and > 0; ops with a temperature of their own name it
        differently, see each function);
    mask: None, a bool / uint8 array (False = masked out: the logit becomes
        -inf) or a float32 array added to the scaled logits; broadcast to
        ``x`` by NumPy rules. Masked entries get exactly 0 output and 0
        gradient;
    empty_row: what a row whose entries are all masked / -inf gives:
        ``"zero"`` (0, like SDPA) or ``"nan"``;
    threads: 0 = ``smax.max_threads()``; results are bitwise identical for
        any thread count;
    out: optional preallocated output (any strides; may be ``x`` for the
        normalisers: in place).

A torch tensor that requires grad (with grad mode on) is routed through the
autograd Function of ``smax.torch``, so these functions are differentiable in
that case too.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as _np

from . import _smax as _C
from . import (  # noqa: F401  (helpers defined before this module is imported)
    _arg,
    _check_out,
    _is_torch,
    _norm_dim,
    _shape_of,
    _torch_module,
    _wants_grad,
)

__all__ = [
    # sparse normalisers
    "sparsemax", "entmax15", "entmax_bisect", "sparse_softmax",
    "sparsemax_backward", "entmax15_backward", "entmax_bisect_backward",
    "sparse_softmax_backward",
    # rescaled / rectified
    "ssmax", "softpick", "stablemax", "softmax_collapse_fraction",
    # re-weighting
    "self_adjust_softmax", "sigmoid_normalizer", "softplus_normalizer", "power_softmax",
    "probability_temperature", "logit_standardization",
    # losses
    "cross_entropy", "linear_cross_entropy", "z_loss", "spherical_z_loss",
    "sparsemax_loss", "entmax15_loss", "entmax_bisect_loss", "sparse_softmax_loss",
    "stablemax_cross_entropy",
    # sampling
    "gumbel_noise", "gumbel_softmax", "gumbel_max", "softmax_topk", "sampling_filter",
    "sample", "soft_nms",
    "REDUCTIONS",
]

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
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}") from None
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
          dtype: str = "f32") -> Tuple[Tuple[int, ...], int, Any]:
    """Check x and dim; allocate (or check) the output."""
    shape = _shape_of(x, "x", op)
    d = _norm_dim(dim, len(shape), op)
    if out is None:
        out = _alloc(x, shape if out_shape is None else out_shape, dtype)
    else:
        _shape_of(out, "out", op)
        _check_out(out, op)
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
        _check_out(out, op)
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
        _check_out(out, op)
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


# ---- sparse normalisers ---------------------------------------------------------------------


def sparsemax(x: Array, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
              mask: Any = None, empty_row: str = "zero", threads: int = 0,
              out: Any = None) -> Array:
    """Sparsemax (Martins & Astudillo, ICML 2016) along ``dim``.

    ``y = max(t - tau, 0)`` with tau such that ``sum(y) == 1``: the Euclidean
    projection of the logits onto the simplex (sparse: entries below tau are
    exactly 0). Same result as ``entmax.sparsemax(x, dim)``.

    Error vs float64: ``|y - y_ref| <= 2^-23 |y_ref| + 1e-12`` (the threshold
    is found in float64, the output rounded once). NaN / +inf in a row -> NaN
    row; -inf / masked -> 0; n = 1 -> 1. Ties get equal outputs.
    """
    if out is None and _wants_grad(x, mask):
        return _st().sparsemax(x, dim, scale=scale, temperature=temperature, mask=mask,
                               empty_row=empty_row, threads=threads)
    return _normalize("sparsemax", x, dim, (),
                      _co("sparsemax", dim, scale, temperature, mask, empty_row, threads), out)


sparsemax.__doc__ = (sparsemax.__doc__ or "") + _OPTS_DOC


def entmax15(x: Array, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
             mask: Any = None, empty_row: str = "zero", threads: int = 0,
             out: Any = None) -> Array:
    """1.5-entmax (Peters, Niculae & Martins, ACL 2019) along ``dim``, exact.

    ``y = max(t/2 - tau, 0)^2`` with ``sum(y) == 1`` (exact threshold, no
    bisection). Same result as ``entmax.entmax15(x, dim)``. Error and special
    values as ``sparsemax``.
    """
    if out is None and _wants_grad(x, mask):
        return _st().entmax15(x, dim, scale=scale, temperature=temperature, mask=mask,
                              empty_row=empty_row, threads=threads)
    return _normalize("entmax15", x, dim, (),
                      _co("entmax15", dim, scale, temperature, mask, empty_row, threads), out)


entmax15.__doc__ = (entmax15.__doc__ or "") + _OPTS_DOC


def entmax_bisect(x: Array, alpha: Union[float, Array] = 1.5, dim: int = -1, n_iter: int = 50,
                  ensure_sum_one: bool = True, *, scale: float = 1.0, temperature: float = 1.0,
                  mask: Any = None, empty_row: str = "zero", threads: int = 0,
                  out: Any = None) -> Array:
    """alpha-entmax by bisection (Peters et al. 2019), ``entmax.entmax_bisect``'s
    algorithm and signature.

    ``y = max((alpha - 1) t - tau, 0)^(1 / (alpha - 1))``, tau by ``n_iter``
    bisection steps (in float64: 50 steps reach the exact threshold), divided
    by its sum when ``ensure_sum_one``.

    Args:
        alpha: > 1, a number or a float32 array of per-row values broadcastable
            to ``x``'s shape with ``dim`` of size 1 (e.g. ``[B, 1]`` for
            ``x [B, C]``). With ``smax.torch`` an alpha tensor that requires
            grad gets its gradient (Correia et al. 2019). ``alpha == 1`` (a
            number) is softmax; 2 is sparsemax.
        n_iter: bisection steps, >= 1.
    Error vs float64 as ``sparsemax``.
    """
    a, a_t = _scalar_or_array(alpha, "alpha", "entmax_bisect")
    if out is None and _wants_grad(x, mask, alpha):
        return _st().entmax_bisect(x, alpha, dim, n_iter, ensure_sum_one, scale=scale,
                                   temperature=temperature, mask=mask, empty_row=empty_row,
                                   threads=threads)
    return _normalize("entmax_bisect", x, dim, (a, a_t, int(n_iter), bool(ensure_sum_one)),
                      _co("entmax_bisect", dim, scale, temperature, mask, empty_row, threads),
                      out)


entmax_bisect.__doc__ = (entmax_bisect.__doc__ or "") + _OPTS_DOC


def sparse_softmax(x: Array, k: int, dim: int = -1, *, scale: float = 1.0,
                   temperature: float = 1.0, mask: Any = None, algorithm: str = "auto",
                   empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Top-k ("sparse") softmax: softmax over the ``k`` largest logits of each
    row, exactly 0 elsewhere.

    Ties at the k-th value: the lowest indices are kept (exactly k entries);
    -inf entries are never kept. ``k >= n``: plain softmax; ``k < 1``:
    ValueError. Relative error <= 2e-6 (outputs >= 1e-30).
    """
    if out is None and _wants_grad(x, mask):
        return _st().sparse_softmax(x, k, dim, scale=scale, temperature=temperature, mask=mask,
                                    algorithm=algorithm, empty_row=empty_row, threads=threads)
    return _normalize("sparse_softmax", x, dim, (int(k),),
                      _co("sparse_softmax", dim, scale, temperature, mask, empty_row, threads,
                          algorithm), out)


sparse_softmax.__doc__ = (sparse_softmax.__doc__ or "") + _OPTS_DOC


def sparsemax_backward(y: Array, dy: Array, dim: int = -1, *, scale: float = 1.0,
                       temperature: float = 1.0, threads: int = 0, out: Any = None) -> Array:
    """VJP of sparsemax from its output ``y``: on the support ``y > 0``,
    ``dx = s (dy - mean_support(dy))``, 0 elsewhere (``s = scale / temperature``)."""
    return _vjp("sparsemax_backward", y, dy, dim, (),
                _co("sparsemax_backward", dim, scale, temperature, None, "zero", threads), out)


def entmax15_backward(y: Array, dy: Array, dim: int = -1, *, scale: float = 1.0,
                      temperature: float = 1.0, threads: int = 0, out: Any = None) -> Array:
    """VJP of entmax15 from its output ``y``: ``w = sqrt(y)``,
    ``dx = s w (dy - <dy, w> / sum w)``."""
    return _vjp("entmax15_backward", y, dy, dim, (),
                _co("entmax15_backward", dim, scale, temperature, None, "zero", threads), out)


def entmax_bisect_backward(y: Array, dy: Array, alpha: Union[float, Array] = 1.5,
                           dim: int = -1, *, return_dalpha: bool = False, scale: float = 1.0,
                           temperature: float = 1.0, threads: int = 0,
                           out: Any = None) -> Any:
    """VJP of entmax_bisect from its output ``y``: ``w = y^(2 - alpha)`` on the
    support, ``dx = s w (dy - <dy, w> / sum w)``. With ``return_dalpha``,
    returns ``(dx, dalpha)``, dalpha per row (``x``'s shape with ``dim`` of
    size 1): the gradient with respect to each row's alpha (sum it over rows
    that share an alpha)."""
    op = "entmax_bisect_backward"
    a, a_t = _scalar_or_array(alpha, "alpha", op)
    shape = _shape_of(y, "y", op)
    d = _norm_dim(dim, len(shape), op)
    _shape_of(dy, "dy", op)
    da = _alloc(y, _rows_shape(shape, d, True)) if return_dalpha else None
    if out is None:
        out = _alloc(y, shape)
    else:
        _check_out(out, op)
    _C.entmax_bisect_backward(_arg(y), _arg(dy), _arg(out), None if da is None else _arg(da),
                              a, a_t, 50, True,
                              _co(op, dim, scale, temperature, None, "zero", threads))
    return (out, da) if return_dalpha else out


def sparse_softmax_backward(y: Array, dy: Array, dim: int = -1, *, scale: float = 1.0,
                            temperature: float = 1.0, threads: int = 0,
                            out: Any = None) -> Array:
    """VJP of sparse_softmax from its output: ``dx = s y (dy - <dy, y>)``."""
    return _vjp("sparse_softmax_backward", y, dy, dim, (),
                _co("sparse_softmax_backward", dim, scale, temperature, None, "zero", threads),
                out)


# ---- rescaled / rectified softmaxes -------------------------------------------------------------


def ssmax(x: Array, s: Union[float, Array] = 0.43, dim: int = -1, *, fixed_n: int = 0,
          scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
          algorithm: str = "auto", empty_row: str = "zero", threads: int = 0,
          out: Any = None) -> Array:
    """Scalable-Softmax (Nakanishi 2025, arXiv:2501.19399): ``softmax((s ln n) t)``.

    Args:
        s: the scaling parameter (0.43 is the paper's initialisation): a number
            or a float32 array of per-row values broadcastable to ``x``'s shape
            with ``dim`` of size 1 (e.g. ``[heads, 1, 1]``, learnable per head:
            with ``smax.torch`` it gets its gradient).
        fixed_n: 0 = n is the row's number of visible (unmasked) entries, as
            in attention with masking; > 0 = this n for every row.
    Relative error <= 2e-6 vs float64 softmax of the scaled logits.
    """
    sv, s_t = _scalar_or_array(s, "s", "ssmax")
    if out is None and _wants_grad(x, mask, s):
        return _st().ssmax(x, s, dim, fixed_n=fixed_n, scale=scale, temperature=temperature,
                           mask=mask, algorithm=algorithm, empty_row=empty_row, threads=threads)
    return _normalize("ssmax", x, dim, (sv, s_t, int(fixed_n)),
                      _co("ssmax", dim, scale, temperature, mask, empty_row, threads, algorithm),
                      out)


ssmax.__doc__ = (ssmax.__doc__ or "") + _OPTS_DOC


def softpick(x: Array, dim: int = -1, *, eps: float = 1e-6, scale: float = 1.0,
             temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
             threads: int = 0, out: Any = None) -> Array:
    """Softpick (Zuhri et al. 2025, arXiv:2504.20966), the rectified softmax:
    ``y_i = relu(e^t_i - 1) / (sum_j |e^t_j - 1| + eps)``.

    Not sum-to-one; a row whose visible entries are all <= 0 gives 0. Masked
    entries are left out of the denominator. Computed in a shifted form that
    never overflows. Relative error ~2e-6 (see docs/python.md).
    """
    if out is None and _wants_grad(x, mask):
        return _st().softpick(x, dim, eps=eps, scale=scale, temperature=temperature, mask=mask,
                              empty_row=empty_row, threads=threads)
    return _normalize("softpick", x, dim, (float(eps),),
                      _co("softpick", dim, scale, temperature, mask, empty_row, threads), out)


softpick.__doc__ = (softpick.__doc__ or "") + _OPTS_DOC


def stablemax(x: Array, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
              mask: Any = None, empty_row: str = "zero", threads: int = 0,
              out: Any = None) -> Array:
    """StableMax (Prieto et al. 2025, arXiv:2501.04697):
    ``y_i = s(t_i) / sum_j s(t_j)``, ``s(x) = x + 1`` for x >= 0, ``1 / (1 - x)``
    below. Not shift invariant. Relative error <= 1e-6 (outputs >= 1e-30)."""
    if out is None and _wants_grad(x, mask):
        return _st().stablemax(x, dim, scale=scale, temperature=temperature, mask=mask,
                               empty_row=empty_row, threads=threads)
    return _normalize("stablemax", x, dim, (),
                      _co("stablemax", dim, scale, temperature, mask, empty_row, threads), out)


stablemax.__doc__ = (stablemax.__doc__ or "") + _OPTS_DOC


def softmax_collapse_fraction(x: Array, dim: int = -1, precision: str = "f32", *,
                              return_flags: bool = False, scale: float = 1.0,
                              temperature: float = 1.0, mask: Any = None,
                              threads: int = 0) -> Any:
    """Fraction of rows whose softmax has collapsed (Prieto et al. 2025): the
    normaliser ``sum_i exp(t_i - max t)`` rounds to exactly 1 in ``precision``
    (``"f32"``, ``"f16"`` or ``"bf16"``), so the top class gets probability 1
    and a zero cross-entropy gradient.

    Returns a float; with ``return_flags``, ``(fraction, flags)`` where flags
    (float32, ``x``'s shape without ``dim``) is 1 for a collapsed row, else 0.
    """
    op = "softmax_collapse_fraction"
    shape = _shape_of(x, "x", op)
    d = _norm_dim(dim, len(shape), op)
    flags = _alloc(x, _rows_shape(shape, d, False)) if return_flags else None
    frac = _C.softmax_collapse_fraction(_arg(x), str(precision),
                                        None if flags is None else _arg(flags),
                                        _co(op, dim, scale, temperature, mask, "zero", threads))
    return (float(frac), flags) if return_flags else float(frac)


# ---- re-weighting normalisers -----------------------------------------------------------------


def self_adjust_softmax(x: Array, dim: int = -1, *, normalized: bool = False,
                        grad_through_bounds: bool = True, scale: float = 1.0,
                        temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
                        threads: int = 0, out: Any = None) -> Array:
    """SA-Softmax (Zheng et al. 2025, "Self-Adjusting Softmax"): ``y = t * softmax(t)``,
    or with ``normalized=True`` ``y = (t - a) / (b - a) * softmax(t)``,
    ``a = min(min t, 0)``, ``b = max(max t, 0)``.

    ``grad_through_bounds`` (normalised variant): True differentiates a and b
    too (what autograd of a PyTorch implementation gives); False treats them
    as constants. Error <= 2.2e-6 relative.
    """
    if out is None and _wants_grad(x, mask):
        return _st().self_adjust_softmax(x, dim, normalized=normalized,
                                         grad_through_bounds=grad_through_bounds, scale=scale,
                                         temperature=temperature, mask=mask,
                                         empty_row=empty_row, threads=threads)
    return _normalize("self_adjust_softmax", x, dim, (bool(normalized), bool(grad_through_bounds)),
                      _co("self_adjust_softmax", dim, scale, temperature, mask, empty_row,
                          threads), out)


self_adjust_softmax.__doc__ = (self_adjust_softmax.__doc__ or "") + _OPTS_DOC


def sigmoid_normalizer(x: Array, dim: int = -1, *, bias: Optional[float] = None,
                       n_fixed: int = 0, count_visible: bool = False, scale: float = 1.0,
                       temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
                       threads: int = 0, out: Any = None) -> Array:
    """Sigmoid attention normaliser (Ramapuram et al. 2024): ``y = sigmoid(t + b)``
    elementwise, ``b = -ln n`` by default (n = the row length, or ``n_fixed``
    if > 0, or the number of visible entries with ``count_visible``), or the
    given ``bias``. Relative error <= 2e-6."""
    if out is None and _wants_grad(x, mask):
        return _st().sigmoid_normalizer(x, dim, bias=bias, n_fixed=n_fixed,
                                        count_visible=count_visible, scale=scale,
                                        temperature=temperature, mask=mask,
                                        empty_row=empty_row, threads=threads)
    return _normalize("sigmoid_normalizer", x, dim,
                      (None if bias is None else float(bias), int(n_fixed), bool(count_visible)),
                      _co("sigmoid_normalizer", dim, scale, temperature, mask, empty_row,
                          threads), out)


sigmoid_normalizer.__doc__ = (sigmoid_normalizer.__doc__ or "") + _OPTS_DOC


def softplus_normalizer(x: Array, dim: int = -1, *, lambd: Optional[float] = None,
                        head_dim: int = 0, power: float = 1.0, scale: float = 1.0,
                        temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
                        threads: int = 0, out: Any = None) -> Array:
    """Softplus normaliser, LSSA (Gao & Spratling 2025):
    ``y = softplus(lambda t) / sum softplus(lambda t)``.

    ``lambd``: a fixed lambda > 0, or None for ``log N / log head_dim`` (N =
    visible entries; ``head_dim >= 2`` is then required). ``power != 1``:
    the re-weighted variant ``l1norm(A^power)``. Relative error ~2e-6.
    """
    if out is None and _wants_grad(x, mask):
        return _st().softplus_normalizer(x, dim, lambd=lambd, head_dim=head_dim, power=power,
                                         scale=scale, temperature=temperature, mask=mask,
                                         empty_row=empty_row, threads=threads)
    return _normalize("softplus_normalizer", x, dim,
                      (None if lambd is None else float(lambd), int(head_dim), float(power)),
                      _co("softplus_normalizer", dim, scale, temperature, mask, empty_row,
                          threads), out)


softplus_normalizer.__doc__ = (softplus_normalizer.__doc__ or "") + _OPTS_DOC


def power_softmax(x: Array, p: int = 2, dim: int = -1, *, scale: float = 1.0,
                  temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
                  threads: int = 0, out: Any = None) -> Array:
    """Power-Softmax (Zimerman et al. 2024): ``y = t^p / sum t^p`` for an even
    ``p > 0`` (odd or <= 0: ValueError). A row of zeros gives the uniform
    distribution over its visible entries."""
    if out is None and _wants_grad(x, mask):
        return _st().power_softmax(x, p, dim, scale=scale, temperature=temperature, mask=mask,
                                   empty_row=empty_row, threads=threads)
    return _normalize("power_softmax", x, dim, (int(p),),
                      _co("power_softmax", dim, scale, temperature, mask, empty_row, threads),
                      out)


power_softmax.__doc__ = (power_softmax.__doc__ or "") + _OPTS_DOC


def probability_temperature(p: Array, T: float, dim: int = -1, *, mask: Any = None,
                            empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Temperature in the probability domain: ``y = p^(1/T) / sum p^(1/T)``
    (= ``softmax(log p / T)``), T > 0. ``p_i = 0`` stays 0; a negative, +inf or
    NaN entry gives a NaN row. Relative error <= 2e-6."""
    if out is None and _wants_grad(p, mask):
        return _st().probability_temperature(p, T, dim, mask=mask, empty_row=empty_row,
                                             threads=threads)
    return _normalize("probability_temperature", p, dim, (float(T),),
                      _co("probability_temperature", dim, 1.0, 1.0, mask, empty_row, threads),
                      out)


def logit_standardization(x: Array, dim: int = -1, *, temperature: float = 1.0,
                          eps: float = 1e-7, unbiased: bool = True, scale: float = 1.0,
                          mask: Any = None, empty_row: str = "zero", threads: int = 0,
                          out: Any = None) -> Array:
    """Logit standardisation for knowledge distillation (Sun et al., CVPR 2024):
    ``softmax((t - mean t) / (std t + eps) / temperature)`` over the visible
    entries (``unbiased``: std with N - 1). Here ``temperature`` is the
    distillation temperature of the paper (applied after standardising)."""
    if out is None and _wants_grad(x, mask):
        return _st().logit_standardization(x, dim, temperature=temperature, eps=eps,
                                           unbiased=unbiased, scale=scale, mask=mask,
                                           empty_row=empty_row, threads=threads)
    return _normalize("logit_standardization", x, dim,
                      (float(temperature), float(eps), bool(unbiased)),
                      _co("logit_standardization", dim, scale, 1.0, mask, empty_row, threads),
                      out)


# ---- losses ---------------------------------------------------------------------------------

_LOSS_DOC = """
    Loss conventions (PyTorch's): ``target`` holds int64 class indices with
    ``x``'s shape without ``dim``; a target equal to ``ignore_index``
    contributes 0 loss and 0 gradient, any other target outside [0, C) raises
    ValueError. ``weight``: optional float32 [C] class weights (a row's loss is
    scaled by ``weight[target]``). ``reduction``: ``"none"`` (one value per
    row), ``"sum"``, or ``"mean"`` (divided by the summed weights of the
    non-ignored rows; ``"elementwise_mean"`` is accepted as an alias).
    ``empty_mean``: what a mean over zero rows gives, ``"nan"`` (PyTorch) or
    ``"zero"``."""


def _loss_entry(op: str, x: Any, target: Any, dim: Any, params: tuple, ignore_index: int,
                reduction: str, weight: Any, empty_mean: str, scale: float, temperature: float,
                mask: Any, empty_row: str, threads: int, out: Any) -> Any:
    if out is None and _wants_grad(x, mask):
        return _st().generic_loss(op, x, target, dim, params, ignore_index, reduction, weight,
                                  empty_mean, scale, temperature, mask, empty_row, threads)
    return _loss(op, x, target, dim, params, _lo(ignore_index, reduction, weight, empty_mean),
                 _co(op, dim, scale, temperature, mask, empty_row, threads), out)


def sparsemax_loss(x: Array, target: Array, dim: int = -1, ignore_index: int = -100,
                   reduction: str = "mean", weight: Any = None, *, empty_mean: str = "nan",
                   scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                   empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Sparsemax loss (Martins & Astudillo 2016), ``entmax.SparsemaxLoss``:
    ``(1 - |p|^2) / 2 + <p, t> - t_target``, ``p = sparsemax(t)``; >= 0, 0 iff
    p is the one-hot of the target. Gradient ``p - onehot(target)``. A masked
    target gives +inf. Per-row error <= 1e-6 (1 + |loss|)."""
    return _loss_entry("sparsemax_loss", x, target, dim, (), ignore_index, reduction, weight,
                       empty_mean, scale, temperature, mask, empty_row, threads, out)


sparsemax_loss.__doc__ = (sparsemax_loss.__doc__ or "") + _LOSS_DOC


def entmax15_loss(x: Array, target: Array, dim: int = -1, ignore_index: int = -100,
                  reduction: str = "mean", weight: Any = None, *, empty_mean: str = "nan",
                  scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                  empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """1.5-entmax loss, ``entmax.Entmax15Loss``:
    ``(1 - sum p^1.5) / 0.75 + <p, t> - t_target``, ``p = entmax15(t)``.
    Gradient ``p - onehot(target)``."""
    return _loss_entry("entmax15_loss", x, target, dim, (), ignore_index, reduction, weight,
                       empty_mean, scale, temperature, mask, empty_row, threads, out)


entmax15_loss.__doc__ = (entmax15_loss.__doc__ or "") + _LOSS_DOC


def entmax_bisect_loss(x: Array, target: Array, alpha: Union[float, Array] = 1.5,
                       dim: int = -1, n_iter: int = 50, ignore_index: int = -100,
                       reduction: str = "mean", weight: Any = None, *,
                       empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                       mask: Any = None, empty_row: str = "zero", threads: int = 0,
                       out: Any = None) -> Array:
    """alpha-entmax loss, ``entmax.EntmaxBisectLoss``:
    ``(1 - sum p^alpha) / (alpha (alpha - 1)) + <p, t> - t_target`` with
    ``p = entmax_bisect(t, alpha)`` (normalised). ``alpha == 1``: the
    cross-entropy. Gradient ``p - onehot(target)`` (no gradient for alpha)."""
    a, a_t = _scalar_or_array(alpha, "alpha", "entmax_bisect_loss")
    return _loss_entry("entmax_bisect_loss", x, target, dim, (a, a_t, int(n_iter)),
                       ignore_index, reduction, weight, empty_mean, scale, temperature, mask,
                       empty_row, threads, out)


entmax_bisect_loss.__doc__ = (entmax_bisect_loss.__doc__ or "") + _LOSS_DOC


def sparse_softmax_loss(x: Array, target: Array, k: int, dim: int = -1, *,
                        force_target: bool = False, ignore_index: int = -100,
                        reduction: str = "mean", weight: Any = None, empty_mean: str = "nan",
                        scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                        empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Top-k softmax loss: ``log sum_{j in K} exp(t_j) - t_target`` (K = the k
    largest logits). ``force_target``: K also holds the target (the loss is
    then a cross-entropy over K + target, >= 0). Gradient
    ``p - onehot(target)`` with p the top-k softmax."""
    return _loss_entry("sparse_softmax_loss", x, target, dim, (int(k), bool(force_target)),
                       ignore_index, reduction, weight, empty_mean, scale, temperature, mask,
                       empty_row, threads, out)


sparse_softmax_loss.__doc__ = (sparse_softmax_loss.__doc__ or "") + _LOSS_DOC


def stablemax_cross_entropy(x: Array, target: Array, dim: int = -1, ignore_index: int = -100,
                            reduction: str = "mean", weight: Any = None, *,
                            empty_mean: str = "nan", scale: float = 1.0,
                            temperature: float = 1.0, mask: Any = None,
                            empty_row: str = "zero", threads: int = 0,
                            out: Any = None) -> Array:
    """StableMax cross-entropy (Prieto et al. 2025):
    ``-log stablemax(t)[target]``, computed without cancellation. Per-row
    relative error <= 1e-6."""
    return _loss_entry("stablemax_cross_entropy", x, target, dim, (), ignore_index, reduction,
                       weight, empty_mean, scale, temperature, mask, empty_row, threads, out)


stablemax_cross_entropy.__doc__ = (stablemax_cross_entropy.__doc__ or "") + _LOSS_DOC


def spherical_z_loss(x: Array, target: Array, a: float, b: float, dim: int = -1,
                     ignore_index: int = -100, reduction: str = "mean", weight: Any = None, *,
                     empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                     mask: Any = None, empty_row: str = "zero", threads: int = 0,
                     out: Any = None) -> Array:
    """The Z-loss of de Brebisson & Vincent (ICLR 2016):
    ``softplus(a (b - z_target)) / a`` with ``z = (t - mean t) / std t``
    (population std over the unmasked logits). ``a > 0``, ``b`` finite (no
    defaults: the paper tunes both). A constant row gives NaN."""
    return _loss_entry("spherical_z_loss", x, target, dim, (float(a), float(b)), ignore_index,
                       reduction, weight, empty_mean, scale, temperature, mask, empty_row,
                       threads, out)


spherical_z_loss.__doc__ = (spherical_z_loss.__doc__ or "") + _LOSS_DOC


def z_loss(x: Array, target: Optional[Array] = None, coefficient: float = 1e-4, dim: int = -1,
           ignore_index: int = -100, reduction: str = "mean", weight: Any = None, *,
           empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
           mask: Any = None, empty_row: str = "zero", threads: int = 0,
           out: Any = None) -> Array:
    """PaLM z-loss ``coefficient * logsumexp(t)^2`` per row. Without ``target``
    every row counts with weight 1; with ``target`` (class indices) ignored
    rows are skipped and rows are weighted by ``weight[target]``: exactly the
    z-loss part of ``cross_entropy(..., lse_square_scale=coefficient)``."""
    return _loss_entry("z_loss", x, target, dim, (float(coefficient),), ignore_index,
                       reduction, weight, empty_mean, scale, temperature, mask, empty_row,
                       threads, out)


z_loss.__doc__ = (z_loss.__doc__ or "") + _LOSS_DOC

_CE_EXTRAS = ("z_loss", "lse", "entropy", "target_logprob", "accuracy")


def _ce_dim(x: Any, dim: Optional[int], op: str) -> int:
    shape = _shape_of(x, "input", op)
    if dim is None:
        return 1 if len(shape) >= 2 else 0
    return _norm_dim(dim, len(shape), op)


def cross_entropy(input: Array, target: Array, weight: Any = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0, *,
                  dim: Optional[int] = None, lse_square_scale: float = 0.0,
                  softcap: Optional[float] = None, return_z_loss: bool = False,
                  return_lse: bool = False, return_entropy: bool = False,
                  return_target_logprob: bool = False, return_accuracy: bool = False,
                  empty_mean: str = "nan", scale: float = 1.0, temperature: float = 1.0,
                  mask: Any = None, empty_row: str = "zero", threads: int = 0,
                  out: Any = None) -> Any:
    """Fused cross-entropy from logits, ``torch.nn.functional.cross_entropy``'s
    signature and results (one read of the logits, no log-softmax tensor).

    Args:
        input: float32 logits ``[C]``, ``[N, C]`` or ``[N, C, d1, ...]``.
        target: int64 class indices (``input``'s shape without the class dim)
            or float32 class probabilities (``input``'s shape).
        weight, ignore_index, reduction, label_smoothing: as PyTorch.
        dim: the class dimension; None = PyTorch's (1, or 0 for 1-D input).
        lse_square_scale: PaLM z-loss coefficient: adds ``c * lse^2`` per row.
        softcap: Gemma 2 logit soft-capping ``softcap * tanh(t / softcap)``
            (None / 0 = off).
        return_z_loss, return_lse, return_entropy, return_target_logprob,
        return_accuracy: also return these (in that order, after the loss):
            z_loss (reduced like the loss, already included in it), per-row
            lse and softmax entropy, per-row log p(target), and the top-1
            accuracy (per row for reduction "none", else the mean over
            non-ignored rows, or the count for "sum"). Not differentiable.
        empty_mean: a mean over zero non-ignored rows gives NaN (PyTorch) or
            0 (``"zero"``).
        scale, temperature, mask, empty_row, threads, out: as ``smax.softmax``
            (masks are an smax extension: a masked class has probability 0).

    Returns the loss, or a tuple ``(loss, *extras)`` when extras are asked for.
    Per-row error vs float64 <= 4e-6 (1 + |lse| + |t_target|) (weighted).
    """
    want = (return_z_loss, return_lse, return_entropy, return_target_logprob, return_accuracy)
    cap = 0.0 if softcap is None else float(softcap)
    if out is None and _wants_grad(input, mask):
        return _st().cross_entropy(input, target, weight, ignore_index, reduction,
                                   label_smoothing, dim=dim, lse_square_scale=lse_square_scale,
                                   softcap=softcap, return_z_loss=return_z_loss,
                                   return_lse=return_lse, return_entropy=return_entropy,
                                   return_target_logprob=return_target_logprob,
                                   return_accuracy=return_accuracy, empty_mean=empty_mean,
                                   scale=scale, temperature=temperature, mask=mask,
                                   empty_row=empty_row, threads=threads)
    loss, extras = _cross_entropy_fwd(input, target, weight, ignore_index, reduction,
                                      label_smoothing, dim, lse_square_scale, cap, want,
                                      empty_mean, scale, temperature, mask, empty_row, threads,
                                      out)
    if not any(want):
        return loss
    return (loss,) + tuple(e for e, w in zip(extras, want) if w)


def _cross_entropy_fwd(input: Any, target: Any, weight: Any, ignore_index: int,
                       reduction: str, label_smoothing: float, dim: Optional[int],
                       lse_square_scale: float, softcap: float, want: Sequence[bool],
                       empty_mean: str, scale: float, temperature: float, mask: Any,
                       empty_row: str, threads: int, out: Any,
                       grad: Any = None) -> Tuple[Any, list]:
    """cross_entropy's forward; `extras` holds an array for every True in `want`
    (z_loss, lse, entropy, target_logprob, accuracy), else None. `grad`: an
    f32 array of input's shape (or input itself) that receives d loss / d input
    for a unit upstream gradient (the fused path, smax::CrossEntropyOptions::grad)."""
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
        _check_out(out, op)
    shapes = (reduced, rows, rows, rows, reduced)
    extras = [_alloc(input, s) if w else None for s, w in zip(shapes, want)]
    _C.cross_entropy(_arg(input), _arg(target), _arg(out), float(label_smoothing),
                     float(lse_square_scale), float(softcap),
                     *[None if e is None else _arg(e) for e in extras],
                     _lo(ignore_index, reduction, weight, empty_mean),
                     _co(op, d, scale, temperature, mask, empty_row, threads),
                     None if grad is None else _arg(grad))
    return out, extras


def linear_cross_entropy(hidden: Array, weight: Array, target: Array, bias: Any = None,
                         ce_weight: Any = None, ignore_index: int = -100,
                         lse_square_scale: float = 0.0, label_smoothing: float = 0.0,
                         reduction: str = "mean", softcap: Optional[float] = None,
                         return_z_loss: bool = False, *, return_lse: bool = False,
                         return_entropy: bool = False, return_target_logprob: bool = False,
                         return_accuracy: bool = False, token_chunk: int = 0,
                         vocab_chunk: int = 0, empty_mean: str = "nan", scale: float = 1.0,
                         temperature: float = 1.0, empty_row: str = "zero",
                         threads: int = 0) -> Any:
    """Fused linear layer + cross-entropy (LM head) that never materialises the
    ``[N, V]`` logits: ``cross_entropy(hidden @ weight.T + bias, target)``.

    Signature as Liger-Kernel's ``liger_fused_linear_cross_entropy``:
    ``hidden [N, D]``, ``weight [V, D]``, ``target`` int64 ``[N]``, ``bias
    [V]``, ``ce_weight`` the class weights ``[V]``; the other options and the
    extras as ``cross_entropy``. Memory O(N + token_chunk * vocab_chunk)
    (0 = auto tiles). With ``smax.torch`` hidden, weight and bias get
    gradients. Masks are not supported (give padding classes a -inf bias).
    """
    op = "linear_cross_entropy"
    want = (return_z_loss, return_lse, return_entropy, return_target_logprob, return_accuracy)
    cap = 0.0 if softcap is None else float(softcap)
    if _wants_grad(hidden, weight, bias):
        return _st().linear_cross_entropy(
            hidden, weight, target, bias, ce_weight, ignore_index, lse_square_scale,
            label_smoothing, reduction, softcap, return_z_loss, return_lse=return_lse,
            return_entropy=return_entropy, return_target_logprob=return_target_logprob,
            return_accuracy=return_accuracy, token_chunk=token_chunk, vocab_chunk=vocab_chunk,
            empty_mean=empty_mean, scale=scale, temperature=temperature, empty_row=empty_row,
            threads=threads)
    loss, extras = _linear_cross_entropy_fwd(hidden, weight, target, bias, ce_weight,
                                             ignore_index, lse_square_scale, label_smoothing,
                                             reduction, cap, want, token_chunk, vocab_chunk,
                                             empty_mean, scale, temperature, empty_row, threads)
    if not any(want):
        return loss
    return (loss,) + tuple(e for e, w in zip(extras, want) if w)


def _linear_cross_entropy_fwd(hidden: Any, weight: Any, target: Any, bias: Any, ce_weight: Any,
                              ignore_index: int, lse_square_scale: float,
                              label_smoothing: float, reduction: str, softcap: float,
                              want: Sequence[bool], token_chunk: int, vocab_chunk: int,
                              empty_mean: str, scale: float, temperature: float,
                              empty_row: str, threads: int) -> Tuple[Any, list]:
    op = "linear_cross_entropy"
    hs = _shape_of(hidden, "hidden", op)
    _shape_of(weight, "weight", op)
    _shape_of(target, "target", op)
    rows = hs[:1] if hs else ()
    reduced = rows if _reduction(reduction) == "none" else ()
    out = _alloc(hidden, reduced)
    shapes = (reduced, rows, rows, rows, reduced)
    extras = [_alloc(hidden, s) if w else None for s, w in zip(shapes, want)]
    _C.linear_cross_entropy(_arg(hidden), _arg(weight), _arg(target),
                            None if bias is None else _arg(bias), _arg(out),
                            float(label_smoothing), float(lse_square_scale), float(softcap),
                            *[None if e is None else _arg(e) for e in extras],
                            int(token_chunk), int(vocab_chunk),
                            _lo(ignore_index, reduction, ce_weight, empty_mean),
                            _co(op, -1, scale, temperature, None, empty_row, threads))
    return out, extras


# ---- sampling ---------------------------------------------------------------------------------


def gumbel_noise(shape: Sequence[int], seed: int = 0, dim: int = -1, *, like: Any = None,
                 out: Any = None) -> Array:
    """The Gumbel noise ``g(seed, row, i) = -log(-log U)`` that gumbel_softmax,
    gumbel_max and sample draw for an input of ``shape`` (rows along ``dim``):
    Philox4x32-10 keyed by ``seed``, evaluated in float64, rounded to float32.
    Returns numpy, or ``like``'s array type, or writes ``out``."""
    if out is None:
        out = _alloc(like, tuple(int(s) for s in shape))
    else:
        _check_out(out, "gumbel_noise")
    _C.gumbel_noise(_arg(out), int(seed), int(dim))
    return out


def gumbel_softmax(logits: Array, tau: float = 1.0, hard: bool = False, dim: int = -1, *,
                   seed: Optional[int] = None, noise: Any = None, return_soft: bool = False,
                   scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                   empty_row: str = "zero", threads: int = 0, out: Any = None) -> Any:
    """Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017),
    ``torch.nn.functional.gumbel_softmax``'s signature:
    ``y = softmax((t + g) / tau)`` with Gumbel noise g.

    ``hard=True``: a one-hot of ``argmax(t + g)`` (exactly ``gumbel_max``'s
    index for the same seed); with ``smax.torch`` its gradient is the soft
    sample's (straight-through). ``seed``: the noise seed (the same seed
    always gives the same sample, for any thread count or layout); None draws
    one from torch's (torch inputs) or numpy's global generator. ``noise``: an
    explicit float32 noise array of ``logits``' shape instead.
    ``return_soft``: also return the soft sample, ``(y, y_soft)``.
    """
    if out is None and _wants_grad(logits, mask):
        r = _st().gumbel_softmax(logits, tau, hard, dim, seed=seed, noise=noise, scale=scale,
                                 temperature=temperature, mask=mask, empty_row=empty_row,
                                 threads=threads, return_soft=return_soft)
        return r
    op = "gumbel_softmax"
    shape, _, out = _prep(op, logits, dim, out)
    y_soft = _alloc(logits, shape) if (hard and return_soft) else None
    _C.gumbel_softmax(_arg(logits), _arg(out), float(tau), bool(hard), _seed(seed, logits),
                      None if noise is None else _arg(noise),
                      None if y_soft is None else _arg(y_soft),
                      _co(op, dim, scale, temperature, mask, empty_row, threads))
    if return_soft:
        return out, (out if y_soft is None else y_soft)
    return out


def gumbel_max(logits: Array, dim: int = -1, keepdim: bool = False, *,
               seed: Optional[int] = None, scale: float = 1.0, temperature: float = 1.0,
               mask: Any = None, threads: int = 0, out: Any = None) -> Array:
    """One exact sample of ``softmax(t)`` per row by the Gumbel-max trick:
    ``argmax(t + g)`` (int64, ``logits``' shape without ``dim``, or keepdim).
    -1 for empty, all-masked and NaN / +inf rows. ``seed`` as gumbel_softmax."""
    op = "gumbel_max"
    shape = _shape_of(logits, "logits", op)
    d = _norm_dim(dim, len(shape), op)
    _, _, out = _prep(op, logits, dim, out, _rows_shape(shape, d, keepdim), "i64")
    _C.gumbel_max(_arg(logits), _arg(out), _seed(seed, logits),
                  _co(op, dim, scale, temperature, mask, "zero", threads))
    return out


def softmax_topk(x: Array, k: int, dim: int = -1, *, renormalize: bool = False,
                 scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                 empty_row: str = "zero", threads: int = 0) -> Tuple[Array, Array]:
    """Fused softmax + top-k in one read of each row: ``(probs, indices)`` like
    ``torch.topk(torch.softmax(x, dim), k, dim)``.

    Order: descending logit, ties by the lower index. ``probs`` are the full
    row's softmax probabilities of the k winners (summing to <= 1), or with
    ``renormalize`` the softmax over the k winners. ``indices`` are int64.
    Relative error <= 2e-6. With ``smax.torch``, probs are differentiable
    with respect to x.
    """
    if _wants_grad(x, mask):
        return _st().softmax_topk(x, k, dim, renormalize=renormalize, scale=scale,
                                  temperature=temperature, mask=mask, empty_row=empty_row,
                                  threads=threads)
    op = "softmax_topk"
    shape = _shape_of(x, "x", op)
    d = _norm_dim(dim, len(shape), op)
    oshape = shape[:d] + (int(k),) + shape[d + 1:] if shape else (int(k),)
    probs = _alloc(x, oshape)
    idx = _alloc(x, oshape, "i64")
    _C.softmax_topk(_arg(x), _arg(probs), _arg(idx), int(k), bool(renormalize),
                    _co(op, dim, scale, temperature, mask, empty_row, threads))
    return probs, idx


def sampling_filter(logits: Array, temperature: float = 1.0, top_k: int = 0,
                    top_p: float = 1.0, dim: int = -1, *, scale: float = 1.0,
                    mask: Any = None, threads: int = 0, out: Any = None) -> Array:
    """The tempered, filtered logits that ``sample`` draws from: ``t / temperature``
    where an entry survives top-k then top-p (nucleus), -inf elsewhere (the
    order of Hugging Face's logits warpers; exactly ``top_k`` entries on ties,
    lower index first). ``temperature == 0``: greedy (only the argmax kept)."""
    op = "sampling_filter"
    _, _, out = _prep(op, logits, dim, out)
    _C.sampling_filter(_arg(logits), _arg(out), float(temperature), int(top_k), float(top_p),
                       _co(op, dim, scale, 1.0, mask, "zero", threads))
    return out


def sample(logits: Array, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           dim: int = -1, keepdim: bool = False, *, seed: Optional[int] = None,
           scale: float = 1.0, mask: Any = None, threads: int = 0, out: Any = None) -> Array:
    """One token per row from ``softmax(sampling_filter(logits, ...))`` (temperature,
    top-k, top-p), by Gumbel-max with the counter-based noise of ``seed``
    (reproducible for any thread count). int64 indices, ``logits``' shape
    without ``dim`` (or keepdim); -1 for empty / all-masked / NaN rows.
    ``temperature == 0`` is greedy."""
    op = "sample"
    shape = _shape_of(logits, "logits", op)
    d = _norm_dim(dim, len(shape), op)
    _, _, out = _prep(op, logits, dim, out, _rows_shape(shape, d, keepdim), "i64")
    _C.sample(_arg(logits), _arg(out), float(temperature), int(top_k), float(top_p),
              _seed(seed, logits), _co(op, dim, scale, 1.0, mask, "zero", threads))
    return out


def soft_nms(boxes: Array, scores: Array, *, method: str = "linear", sigma: float = 0.5,
             iou_threshold: float = 0.3, score_threshold: float = 0.001,
             plus_one: bool = False) -> Tuple[Array, Array]:
    """Soft-NMS (Bodla et al., ICCV 2017) over ``boxes`` (float32 [N, 4] as x1,
    y1, x2, y2) and ``scores`` (float32 [N]).

    ``method``: ``"hard"`` (classic NMS), ``"linear"`` (score * (1 - iou)
    above ``iou_threshold``) or ``"gaussian"`` (score * exp(-iou^2 / sigma)).
    Boxes whose score falls below ``score_threshold`` are dropped. Returns
    ``(indices, scores)``: the kept boxes (int64) in selection order and their
    decayed scores, in ``boxes``' array type.
    """
    op = "soft_nms"
    bs = _shape_of(boxes, "boxes", op)
    _shape_of(scores, "scores", op)
    n = bs[0] if bs else 0
    idx = _alloc(boxes, (n,), "i64")
    kept = _alloc(boxes, (n,))
    count = _C.soft_nms(_arg(boxes), _arg(scores), _arg(idx), _arg(kept), str(method),
                        float(sigma), float(iou_threshold), float(score_threshold),
                        bool(plus_one))
    return idx[:count], kept[:count]

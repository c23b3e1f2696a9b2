"""Array functions of the sparse, rescaled and re-weighting normalisers
(re-exported by ``smax``; conventions: ``help(smax._ops)``)."""
from __future__ import annotations

from typing import Any, Optional, Union

from . import _smax as _C
from ._common import (
    _OPTS_DOC,
    Array,
    _alloc,
    _arg,
    _check_out,
    _norm_dim,
    _normalize,
    _number,
    _opt,
    _rows_shape,
    _scalar_or_array,
    _shape_of,
    _vjp,
    _wants_grad,
    softmax_options,
)
from ._route import autograd, learnable_logit_scale, normalizer

__all__ = [
    # sparse normalisers
    "sparsemax", "entmax15", "entmax_bisect", "sparse_softmax",
    "sparsemax_backward", "entmax15_backward", "entmax_bisect_backward",
    "sparse_softmax_backward",
    # rescaled / rectified
    "ssmax", "softpick", "clipped_softmax", "stablemax", "softmax_collapse_fraction",
    # re-weighting
    "self_adjust_softmax", "sigmoid_normalizer", "softplus_normalizer", "power_softmax",
    "probability_temperature", "logit_standardization",
]


# ---- sparse normalisers ---------------------------------------------------------------------


@learnable_logit_scale()
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
    return normalizer("sparsemax", True, x, dim, (),
                      softmax_options("sparsemax", dim, scale, temperature, None, empty_row, threads), mask, out)


sparsemax.__doc__ = (sparsemax.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
def entmax15(x: Array, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
             mask: Any = None, empty_row: str = "zero", threads: int = 0,
             out: Any = None) -> Array:
    """1.5-entmax (Peters, Niculae & Martins, ACL 2019) along ``dim``, exact.

    ``y = max(t/2 - tau, 0)^2`` with ``sum(y) == 1`` (exact threshold, no
    bisection). Same result as ``entmax.entmax15(x, dim)``. Error and special
    values as ``sparsemax``.
    """
    return normalizer("entmax15", True, x, dim, (),
                      softmax_options("entmax15", dim, scale, temperature, None, empty_row, threads), mask, out)


entmax15.__doc__ = (entmax15.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
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
    co = softmax_options("entmax_bisect", dim, scale, temperature, None, empty_row, threads)
    params = (a, a_t, int(n_iter), bool(ensure_sum_one))
    if out is None and _wants_grad(x, mask, alpha):
        return autograd().entmax_bisect(x, mask, alpha, dim, params, co)
    co.mask = _opt(mask)
    return _normalize("entmax_bisect", x, dim, params, co, out)


entmax_bisect.__doc__ = (entmax_bisect.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
def sparse_softmax(x: Array, k: int, dim: int = -1, *, scale: float = 1.0,
                   temperature: float = 1.0, mask: Any = None, algorithm: str = "auto",
                   empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Top-k ("sparse") softmax: softmax over the ``k`` largest logits of each
    row, exactly 0 elsewhere.

    Ties at the k-th value: the lowest indices are kept (exactly k entries);
    -inf entries are never kept. ``k >= n``: plain softmax; ``k < 1``:
    ValueError. Relative error <= 2e-6 (outputs >= 1e-30).
    """
    return normalizer("sparse_softmax", True, x, dim, (int(k),),
                      softmax_options("sparse_softmax", dim, scale, temperature, None, empty_row, threads,
                          algorithm), mask, out)


sparse_softmax.__doc__ = (sparse_softmax.__doc__ or "") + _OPTS_DOC


def sparsemax_backward(y: Array, dy: Array, dim: int = -1, *, scale: float = 1.0,
                       temperature: float = 1.0, threads: int = 0, out: Any = None) -> Array:
    """VJP of sparsemax from its output ``y``: on the support ``y > 0``,
    ``dx = s (dy - mean_support(dy))``, 0 elsewhere (``s = scale / temperature``)."""
    return _vjp("sparsemax_backward", y, dy, dim, (),
                softmax_options("sparsemax_backward", dim, scale, temperature, None, "zero", threads), out)


def entmax15_backward(y: Array, dy: Array, dim: int = -1, *, scale: float = 1.0,
                      temperature: float = 1.0, threads: int = 0, out: Any = None) -> Array:
    """VJP of entmax15 from its output ``y``: ``w = sqrt(y)``,
    ``dx = s w (dy - <dy, w> / sum w)``."""
    return _vjp("entmax15_backward", y, dy, dim, (),
                softmax_options("entmax15_backward", dim, scale, temperature, None, "zero", threads), out)


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
        _check_out(out, op, shape)
    _C.entmax_bisect_backward(_arg(y), _arg(dy), _arg(out), None if da is None else _arg(da),
                              a, a_t, 50, True,
                              softmax_options(op, dim, scale, temperature, None, "zero", threads))
    return (out, da) if return_dalpha else out


def sparse_softmax_backward(y: Array, dy: Array, dim: int = -1, *, scale: float = 1.0,
                            temperature: float = 1.0, threads: int = 0,
                            out: Any = None) -> Array:
    """VJP of sparse_softmax from its output: ``dx = s y (dy - <dy, y>)``."""
    return _vjp("sparse_softmax_backward", y, dy, dim, (),
                softmax_options("sparse_softmax_backward", dim, scale, temperature, None, "zero", threads),
                out)


# ---- rescaled / rectified softmaxes -------------------------------------------------------------


@learnable_logit_scale()
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
    co = softmax_options("ssmax", dim, scale, temperature, None, empty_row, threads, algorithm)
    params = (sv, s_t, int(fixed_n))
    if out is None and _wants_grad(x, mask, s):
        return autograd().ssmax(x, mask, s, dim, params, co)
    co.mask = _opt(mask)
    return _normalize("ssmax", x, dim, params, co, out)


ssmax.__doc__ = (ssmax.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
def softpick(x: Array, dim: int = -1, *, eps: float = 1e-6, scale: float = 1.0,
             temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
             threads: int = 0, out: Any = None) -> Array:
    """Softpick (Zuhri et al. 2025, arXiv:2504.20966), the rectified softmax:
    ``y_i = relu(e^t_i - 1) / (sum_j |e^t_j - 1| + eps)``.

    Not sum-to-one; a row whose visible entries are all <= 0 gives 0. Masked
    entries are left out of the denominator. Computed in a shifted form that
    never overflows. Relative error ~2e-6 (see docs/python.md).
    """
    return normalizer("softpick", False, x, dim, (float(eps),),
                      softmax_options("softpick", dim, scale, temperature, None, empty_row, threads), mask, out)


softpick.__doc__ = (softpick.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
def clipped_softmax(x: Array, dim: int = -1, *, gamma: float = -0.025, zeta: float = 1.0,
                    scale: float = 1.0, temperature: float = 1.0, mask: Any = None,
                    empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Clipped softmax (Bondarenko et al. 2023, "Quantizable Transformers",
    arXiv:2306.12929): ``y = clip((zeta - gamma) * softmax(t) + gamma, 0, 1)``.

    ``gamma <= 0`` stretches below 0 so that small probabilities become
    exactly 0 (the paper writes ``gamma = -alpha / T``, T the sequence
    length); ``zeta >= 1`` stretches above 1. The gradient passes where the
    stretched value lies in [0, 1] (as ``torch.clamp``). Error bound in
    docs/normalizers.md.
    """
    return normalizer("clipped_softmax", False, x, dim, (float(gamma), float(zeta)),
                      softmax_options("clipped_softmax", dim, scale, temperature, None, empty_row, threads), mask, out)


clipped_softmax.__doc__ = (clipped_softmax.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
def stablemax(x: Array, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
              mask: Any = None, empty_row: str = "zero", threads: int = 0,
              out: Any = None) -> Array:
    """StableMax (Prieto et al. 2025, arXiv:2501.04697):
    ``y_i = s(t_i) / sum_j s(t_j)``, ``s(x) = x + 1`` for x >= 0, ``1 / (1 - x)``
    below. Not shift invariant. Relative error <= 1e-6 (outputs >= 1e-30)."""
    return normalizer("stablemax", False, x, dim, (),
                      softmax_options("stablemax", dim, scale, temperature, None, empty_row, threads), mask, out)


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
                                        softmax_options(op, dim, scale, temperature, mask, "zero", threads))
    return (float(frac), flags) if return_flags else float(frac)


# ---- re-weighting normalisers -----------------------------------------------------------------


@learnable_logit_scale()
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
    return normalizer("self_adjust_softmax", False, x, dim, (bool(normalized), bool(grad_through_bounds)),
                      softmax_options("self_adjust_softmax", dim, scale, temperature, None, empty_row,
                          threads), mask, out)


self_adjust_softmax.__doc__ = (self_adjust_softmax.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
def sigmoid_normalizer(x: Array, dim: int = -1, *, bias: Optional[float] = None,
                       n_fixed: int = 0, count_visible: bool = False, scale: float = 1.0,
                       temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
                       threads: int = 0, out: Any = None) -> Array:
    """Sigmoid attention normaliser (Ramapuram et al. 2024): ``y = sigmoid(t + b)``
    elementwise, ``b = -ln n`` by default (n = the row length, or ``n_fixed``
    if > 0, or the number of visible entries with ``count_visible``), or the
    given ``bias``. Relative error <= 2e-6."""
    return normalizer("sigmoid_normalizer", True, x, dim,
                      (None if bias is None else float(bias), int(n_fixed), bool(count_visible)),
                      softmax_options("sigmoid_normalizer", dim, scale, temperature, None, empty_row,
                          threads), mask, out)


sigmoid_normalizer.__doc__ = (sigmoid_normalizer.__doc__ or "") + _OPTS_DOC


def _softplus_params(lambd: Optional[float], head_dim: Optional[int], power: float) -> tuple:
    """(lambda or None, head_dim, power) for the extension. Neither lambd nor
    head_dim given (None, or head_dim 0): lambda = 1, the plain softplus
    normaliser (the C++ API has no lambda default without a head dim)."""
    hd = 0 if head_dim is None else int(head_dim)
    if lambd is None and hd == 0:
        return (1.0, 0, float(power))
    return (None if lambd is None else float(lambd), hd, float(power))


@learnable_logit_scale()
def softplus_normalizer(x: Array, dim: int = -1, *, lambd: Optional[float] = None,
                        head_dim: Optional[int] = None, power: float = 1.0, scale: float = 1.0,
                        temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
                        threads: int = 0, out: Any = None) -> Array:
    """Softplus normaliser, LSSA (Gao & Spratling 2025):
    ``y = softplus(lambda t) / sum softplus(lambda t)``.

    lambda: ``lambd`` if given (> 0); else ``log N / log head_dim`` (LSSA's
    length scaling; N = the row's visible entries) if ``head_dim`` (>= 2) is
    given; else 1 (the plain softplus normaliser). ``power != 1``: the
    re-weighted variant ``l1norm(A^power)``. Relative error ~2e-6.
    """
    return normalizer("softplus_normalizer", False, x, dim, _softplus_params(lambd, head_dim, power),
                      softmax_options("softplus_normalizer", dim, scale, temperature, None, empty_row,
                          threads), mask, out)


softplus_normalizer.__doc__ = (softplus_normalizer.__doc__ or "") + _OPTS_DOC


@learnable_logit_scale()
def power_softmax(x: Array, p: int = 2, dim: int = -1, *, scale: float = 1.0,
                  temperature: float = 1.0, mask: Any = None, empty_row: str = "zero",
                  threads: int = 0, out: Any = None) -> Array:
    """Power-Softmax (Zimerman et al. 2024): ``y = t^p / sum t^p`` for an even
    ``p > 0`` (odd or <= 0: ValueError). A row of zeros gives the uniform
    distribution over its visible entries."""
    return normalizer("power_softmax", False, x, dim, (int(p),),
                      softmax_options("power_softmax", dim, scale, temperature, None, empty_row, threads), mask, out)


power_softmax.__doc__ = (power_softmax.__doc__ or "") + _OPTS_DOC


def probability_temperature(p: Array, T: float, dim: int = -1, *, mask: Any = None,
                            empty_row: str = "zero", threads: int = 0, out: Any = None) -> Array:
    """Temperature in the probability domain: ``y = p^(1/T) / sum p^(1/T)``
    (= ``softmax(log p / T)``), T > 0. ``p_i = 0`` stays 0; a negative, +inf or
    NaN entry gives a NaN row. Relative error <= 2e-6."""
    return normalizer("probability_temperature", False, p, dim,
                      (_number(T, "probability_temperature", "T"),),
                      softmax_options("probability_temperature", dim, 1.0, 1.0, None, empty_row, threads), mask, out)


@learnable_logit_scale(knobs=("scale",))
def logit_standardization(x: Array, dim: int = -1, *, temperature: float = 1.0,
                          eps: float = 1e-7, unbiased: bool = True, scale: float = 1.0,
                          mask: Any = None, empty_row: str = "zero", threads: int = 0,
                          out: Any = None) -> Array:
    """Logit standardisation for knowledge distillation (Sun et al., CVPR 2024):
    ``softmax((t - mean t) / (std t + eps) / temperature)`` over the visible
    entries (``unbiased``: std with N - 1). Here ``temperature`` is the
    distillation temperature of the paper (applied after standardising)."""
    return normalizer("logit_standardization", False, x, dim,
                      (_number(temperature, "logit_standardization", "temperature"), float(eps),
                       bool(unbiased)),
                      softmax_options("logit_standardization", dim, scale, 1.0, None, empty_row, threads), mask, out)

"""Fused CPU attention with pluggable normalisers (C++: smax/attention.h).

``smax.attention`` follows ``torch.nn.functional.scaled_dot_product_attention``
(names, defaults, shapes, bool-mask meaning) and adds the normalisers of the
smax family; ``smax.torch.attention`` is the differentiable version (gradients
to q, k, v, the gate and every learnable knob that requires grad: a float
mask, sinks, alibi_slopes, a one-element tensor sigmoid_bias). See
docs/attention.md.
"""
from __future__ import annotations

import contextlib
import copy
import math
import numbers
import threading
from typing import Any, Iterator, List, Optional, Tuple

from . import _smax as _C
from ._common import (_alloc, _check_out, _opt, _replayed, _shape_of, _torch_module,
                      _wants_grad, with_options)

__all__ = ["attention", "ATTENTION_NORMALIZERS"]

#: Accepted values of ``normalizer=``.
ATTENTION_NORMALIZERS: Tuple[str, ...] = (
    "softmax", "sigmoid", "softpick", "ssmax", "stablemax", "softplus", "power")

_NAN = float("nan")


def _as4(x: Any, name: str) -> Tuple[Any, bool]:
    """[B, H, L, D] as is; [H, L, D] as a [1, H, L, D] view (no copy)."""
    shape = _shape_of(x, name, "attention")
    if len(shape) == 4:
        return x, False
    if len(shape) == 3:
        return x[None], True
    raise ValueError(f"smax.attention: {name} must be 4-D [B, H, L, E] (or 3-D [H, L, E]), "
                     f"got shape {list(shape)}")


def _ssmax_arg(op: str, ssmax_s: Any, heads: int) -> Tuple[float, Any]:
    """(s, scales): a number is SSMax's s for every head; an array / tensor
    [H] gives each head its own s (scales, AttentionOptions::ssmax_scales);
    a one-element array / tensor ([] or [1]) is the shared s (a learnable
    scalar under autograd)."""
    if isinstance(ssmax_s, numbers.Real):
        return float(ssmax_s), None
    shape = tuple(int(x) for x in _shape_of(ssmax_s, "ssmax_s", op))
    if shape == (heads,):
        return 0.43, ssmax_s
    if len(shape) <= 1 and (len(shape) == 0 or shape[0] == 1):
        x = ssmax_s.detach() if hasattr(ssmax_s, "detach") else ssmax_s
        return float(x.reshape(()) if hasattr(x, "reshape") else x), None
    raise ValueError(f"smax.{op}: ssmax_s must be a number, one element or [H] = [{heads}], "
                     f"got shape {list(shape)}")


def _prepare(op: str, q: Any, k: Any, v: Any, is_causal: bool, scale: Optional[float],
             enable_gqa: bool, dropout_p: float, normalizer: str, softcap: float,
             sinks: Any, alibi_slopes: Any, sigmoid_bias: Optional[float], softpick_eps: float,
             ssmax_s: float, empty_row: str, threads: Optional[int],
             sigmoid_bias_mode: str = "per_sequence",
             power_p: int = 2) -> Tuple[Any, Any, Any, bool, Any]:
    """(q4, k4, v4, squeeze, ao): the 4-D views of q, k, v (squeeze: q was 3-D)
    and the checked AttentionOptions."""
    q4, squeeze = _as4(q, "q")
    k4, _ = _as4(k, "k")
    v4, _ = _as4(v, "v")
    if not isinstance(dropout_p, numbers.Real) or dropout_p != 0.0:
        raise ValueError(f"smax.{op}: dropout_p must be 0 (dropout is not supported), "
                         f"got {dropout_p!r}")
    if normalizer not in ATTENTION_NORMALIZERS:
        raise ValueError(f"smax.{op}: normalizer must be one of "
                         f"{', '.join(ATTENTION_NORMALIZERS)}, got {normalizer!r}")
    hq, hkv = int(q4.shape[1]), int(k4.shape[1])
    if hq != hkv and not enable_gqa:
        raise ValueError(f"smax.{op}: q has {hq} heads and k/v {hkv}; pass enable_gqa=True for "
                         f"grouped-query attention")
    if scale is not None and (not isinstance(scale, numbers.Real) or math.isnan(scale)):
        raise ValueError(f"smax.{op}: scale must be a finite number or None, got {scale!r}")
    s_value, s_scales = _ssmax_arg(op, ssmax_s, hq)
    if isinstance(power_p, bool) or not isinstance(power_p, numbers.Integral):
        raise TypeError(f"smax.{op}: power_p must be an int, got {type(power_p).__name__}")
    return q4, k4, v4, squeeze, _C.AttentionOptions(
        is_causal=bool(is_causal), scale=_NAN if scale is None else float(scale),
        softcap=float(softcap), sinks=_opt(sinks), alibi_slopes=_opt(alibi_slopes),
        normalizer=str(normalizer),
        sigmoid_bias=_NAN if sigmoid_bias is None else float(sigmoid_bias),
        softpick_eps=float(softpick_eps), ssmax_s=s_value, empty_row=str(empty_row),
        threads=0 if threads is None else int(threads), sigmoid_bias_mode=str(sigmoid_bias_mode),
        ssmax_scales=_opt(s_scales), power_p=int(power_p))


def attention(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
              is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False,
              *, normalizer: str = "softmax", softcap: float = 0.0, sinks: Any = None,
              alibi_slopes: Any = None, sigmoid_bias: Optional[float] = None,
              softpick_eps: float = 1e-6, ssmax_s: Any = 0.43, empty_row: str = "zero",
              return_lse: bool = False, threads: Optional[int] = None,
              out: Any = None, sigmoid_bias_mode: str = "per_sequence",
              cache_seqlens: Any = None, block_table: Any = None, gate: Any = None,
              unified_max: Optional[float] = None, power_p: int = 2) -> Any:
    """Scaled dot-product attention, ``softmax(q k^T * scale + mask) v`` for
    ``normalizer="softmax"`` (the other normalisers replace the softmax row).

    q: [B, H, Lq, D] (or [H, Lq, D]); k: [B, Hkv, Lk, D]; v: [B, Hkv, Lk, Dv];
    any strides (a transposed [B, L, H, D] buffer is read in place). Floating
    operands (q, k, v, an additive mask, sinks, alibi_slopes) may each be
    float32, float64, float16 or bfloat16 (computed in float32); the output
    and lse have q's dtype (``out=`` may have any floating dtype).
    attn_mask: bool (True = attend) or floating (added), broadcastable to
    [B, H, Lq, Lk]. is_causal: SDPA's top-left causal mask (may be combined
    with attn_mask). scale: None = 1/sqrt(D). enable_gqa: required when
    H != Hkv (H % Hkv == 0). dropout_p must be 0.
    smax extras: normalizer ("softmax", "sigmoid", "softpick", "ssmax",
    "stablemax", "softplus", "power": Power-Softmax ``t^p / sum t^p`` with
    the even ``power_p``, default 2), softcap (cap * tanh(t / cap) after scaling),
    sinks ([H] sink logits, softmax only), alibi_slopes ([H] or [B, H]; adds
    -slope * |i - j|), sigmoid_bias (None = -ln n with n = Lk for every row;
    sigmoid_bias_mode="per_row_visible": n = the row's visible keys), softpick_eps,
    ssmax_s (a number, or [H]: one s per head; a tensor that requires grad
    gets its gradient), empty_row ("zero": fully masked queries give 0 like SDPA;
    "nan"), return_lse (softmax only: also return lse [B, H, Lq]), threads.
    A torch tensor that requires grad goes through ``smax.torch.attention``
    (not with ``out=``: an ``out`` call is not differentiable).

    Decoding with a KV cache (forward only; docs/attention.md): cache_seqlens
    (int32 / int64 [B]) gives each sequence's number of valid keys in k / v
    (their L is the cache's capacity); the Lq queries are the last Lq tokens
    of their sequence, so is_causal is bottom-right aligned and ALiBi uses
    those positions (flash_attn_with_kvcache's semantics). block_table
    (int32 / int64 [B, max_pages]) makes k / v pools of pages
    [num_pages, Hkv, page_size, D] (a vLLM [num_pages, page_size, Hkv, D]
    cache passed as ``k.transpose(1, 2)``): key j of sequence b is row
    j % page_size of page block_table[b, j // page_size].
    unified_max (forward-only, softmax decoding): FlashDecoding++'s unified
    max phi, a bound the logits are expected to stay near (None = off): the
    key chunks skip their running max and rescale, with an exact fallback
    for a chunk whose rows stay more than 64 below phi; the result is exact
    either way (other summation orders than without it).

    Gated attention (Qiu et al. 2025, Qwen3-Next): gate broadcastable to
    [B, H, Lq, Dv] ([B, H, Lq, Dv] element-wise, [B, H, Lq, 1] head-wise), any
    floating dtype: out = sigmoid(gate) * attention, fused in the output's
    store; differentiable through ``smax.torch.attention`` (gate.grad too).
    """
    kv_cache = cache_seqlens is not None or block_table is not None
    knobs = (q, k, v, gate, attn_mask, sinks, alibi_slopes, sigmoid_bias, ssmax_s)
    if kv_cache and _wants_grad(*knobs):
        raise ValueError("smax.attention: cache_seqlens / block_table (the KV cache forms) are "
                         "forward-only; call it under torch.no_grad()")
    if unified_max is not None:
        if not isinstance(unified_max, numbers.Real) or not math.isfinite(unified_max):
            raise ValueError("smax.attention: unified_max must be a finite number or None, "
                             f"got {unified_max!r}")
        if _wants_grad(*knobs):
            raise ValueError("smax.attention: unified_max is a decoding option (forward-only); "
                             "call it under torch.no_grad()")
    if out is None and _wants_grad(*knobs):
        if return_lse:
            raise ValueError("smax.attention: return_lse is not supported with autograd; "
                             "call it under torch.no_grad()")
        return torch_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                               normalizer=normalizer, softcap=softcap, sinks=sinks,
                               alibi_slopes=alibi_slopes, sigmoid_bias=sigmoid_bias,
                               softpick_eps=softpick_eps, ssmax_s=ssmax_s,
                               empty_row=empty_row, threads=threads,
                               sigmoid_bias_mode=sigmoid_bias_mode, gate=gate, power_p=power_p)
    q4, k4, v4, squeeze, ao = _prepare(
        "attention", q, k, v, is_causal, scale, enable_gqa, dropout_p, normalizer, softcap, sinks,
        alibi_slopes, sigmoid_bias, softpick_eps, ssmax_s, empty_row, threads, sigmoid_bias_mode,
        power_p)
    if unified_max is not None:
        ao.unified_max = float(unified_max)
    shape = (int(q4.shape[0]), int(q4.shape[1]), int(q4.shape[2]), int(v4.shape[3]))
    if out is None:
        res = _alloc(q, shape, op="attention")
        o4 = res
    else:
        _check_out(out, "attention")
        want = shape[1:] if squeeze else shape
        if tuple(int(s) for s in out.shape) != shape:  # a 3-D call may pass a [1, H, L, Dv] out
            _check_out(out, "attention", want)
        res = out
        o4, _ = _as4(out, "out")
    lse = _alloc(q, shape[:3], op="attention") if return_lse else None
    _C.attention(_opt(q4), _opt(k4), _opt(v4), _opt(o4), _opt(attn_mask), _opt(lse), ao,
                 _opt(cache_seqlens), _opt(block_table), _opt(gate), None)
    if out is None and squeeze:
        res = res[0]
        if lse is not None:
            lse = lse[0]
    return (res, lse) if return_lse else res


# ---- torch autograd --------------------------------------------------------------------

_FUNCTION: Any = None
_LSE_CAPTURE = threading.local()


@contextlib.contextmanager
def capturing_lse() -> Iterator[List[Any]]:
    """Within the block, the attention autograd forward appends the lse it
    saved for its backward (f32 softmax; else None) to the yielded list:
    smax/_library.py makes it the custom op's second output, so that its
    backward, which replays the saved outputs, runs from lse as eager does."""
    slot: List[Any] = []
    previous = getattr(_LSE_CAPTURE, "slot", None)
    _LSE_CAPTURE.slot = slot
    try:
        yield slot
    finally:
        _LSE_CAPTURE.slot = previous


def lse_shape(q: Any, normalizer: str) -> Optional[Tuple[int, ...]]:
    """The shape of the lse smax.torch.attention saves ([B, H, Lq]; 3-D
    inputs are [1, H, Lq]), or None where it saves none (not softmax / f32)."""
    import torch
    if normalizer != "softmax" or q.dtype != torch.float32:
        return None
    shape = tuple(q.shape) if q.dim() == 4 else (1,) + tuple(q.shape)
    return shape[:3]


def _function() -> Any:
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION
    torch = _torch_module()
    if torch is None:  # pragma: no cover
        import torch  # noqa: F811
    from ._autograd import first_order

    class _Attention(torch.autograd.Function):
        """out = attention(q, k, v); the backward recomputes P, or for the f32
        softmax takes it from the saved lse (first order only)."""

        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, mask: Any, sinks: Any, alibi: Any,
                    gate: Any, bias: Any, ssmax: Any, ao: Any) -> Any:
            if bias is not None:  # a learnable sigmoid bias: a one-element tensor
                ao = copy.copy(ao)
                ao.sigmoid_bias = float(bias.detach().reshape(()))
            # SSMax's s as a tensor: _prepare (_ssmax_arg) put [H] into
            # ao.ssmax_scales or a one-element s into ao.ssmax_s.
            ctx.ssmax_scales = ao.ssmax_scales is not None
            shape = (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
            ao = with_options(ao, sinks=sinks, alibi_slopes=alibi)
            # smax/_library.py's backward replays the saved output (never with a gate)
            replay = _replayed() if gate is None else None
            lse = None
            if replay is not None:
                out, ungated = replay.reshape(shape), None
                saved_lse = _replayed()  # the custom op's second output (smax/_library.py)
                if saved_lse is not None and saved_lse.numel() > 0:
                    lse = saved_lse.reshape(shape[:3])
            else:
                out = torch.empty(shape, dtype=q.dtype)  # like q (the backward reads it)
                # With a gate the backward needs the output before it (dgate =
                # dout * a * sigmoid'(gate)).
                ungated = None if gate is None else torch.empty(shape, dtype=q.dtype)
                # Softmax in f32: the forward's lse lets the backward run from it
                # (P = e^(t - lse), delta = <dout, out>: FlashAttention-2's tiles).
                if ao.normalizer == "softmax" and q.dtype == torch.float32:
                    lse = torch.empty(shape[:3], dtype=torch.float32)
                _C.attention(q.detach(), k.detach(), v.detach(), out,
                             None if mask is None else mask.detach(), lse, ao, None, None,
                             None if gate is None else gate.detach(), ungated)
            ctx.save_for_backward(q, k, v, out, mask, sinks, alibi, gate, ungated, bias, ssmax,
                                  lse)
            slot = getattr(_LSE_CAPTURE, "slot", None)
            if slot is not None:
                slot.append(lse)
            ctx.ao = with_options(ao, sinks=None, alibi_slopes=None, ssmax_scales=None)
            return out

        @staticmethod
        @first_order("attention")
        def backward(ctx: Any, dout: Any) -> Tuple[Optional[Any], ...]:
            q, k, v, out, mask, sinks, alibi, gate, ungated, bias, ssmax, lse = ctx.saved_tensors
            ao = with_options(ctx.ao, sinks=sinks, alibi_slopes=alibi,
                              ssmax_scales=ssmax if ctx.ssmax_scales else None)
            dq = torch.empty(q.shape, dtype=q.dtype)  # each gradient in its input's dtype
            dk = torch.empty(k.shape, dtype=k.dtype)
            dv = torch.empty(v.shape, dtype=v.dtype)
            need = ctx.needs_input_grad

            def grad_of(t: Any, i: int) -> Any:
                return torch.empty(t.shape, dtype=t.dtype) if t is not None and need[i] else None

            # The learnable knobs: a floating mask, sinks, ALiBi slopes, the
            # gate and the sigmoid bias, each when it requires grad.
            dmask = grad_of(mask, 3) if mask is not None and mask.is_floating_point() else None
            dsinks, dalibi, dgate = grad_of(sinks, 4), grad_of(alibi, 5), grad_of(gate, 6)
            dbias, dssmax = grad_of(bias, 7), grad_of(ssmax, 8)
            # A one-element s: its gradient as [1] (dssmax_scales' scalar form).
            ds_out = dssmax if dssmax is None or ctx.ssmax_scales else dssmax.reshape(-1)
            _C.attention_backward(q.detach(), k.detach(), v.detach(), out, dout.detach(), dq,
                                  dk, dv, None if mask is None else mask.detach(), ao,
                                  None if gate is None else gate.detach(), ungated, dgate,
                                  dmask, dsinks, dalibi,
                                  None if dbias is None else dbias.reshape(-1), ds_out, lse)
            return dq, dk, dv, dmask, dsinks, dalibi, dgate, dbias, dssmax, None

    _FUNCTION = _Attention
    return _FUNCTION


def torch_attention(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                    is_causal: bool = False, scale: Optional[float] = None,
                    enable_gqa: bool = False, *, normalizer: str = "softmax",
                    softcap: float = 0.0, sinks: Any = None, alibi_slopes: Any = None,
                    sigmoid_bias: Optional[float] = None, softpick_eps: float = 1e-6,
                    ssmax_s: Any = 0.43, empty_row: str = "zero",
                    threads: Optional[int] = None,
                    sigmoid_bias_mode: str = "per_sequence", gate: Any = None,
                    power_p: int = 2) -> Any:
    """Differentiable ``smax.attention`` for CPU torch tensors (float32,
    float64, float16 or bfloat16, each of q, k, v its own): same arguments
    (no ``out`` / ``return_lse`` / KV cache); the output has q's dtype, and
    gradients flow in their dtypes to q, k, v and to every learnable knob
    that requires grad: a floating attn_mask, sinks, alibi_slopes, the gate,
    sigmoid_bias passed as a one-element tensor, and ssmax_s passed as a
    tensor ([H] per head, or one element)."""
    torch = _torch_module()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if torch is None or not isinstance(t, torch.Tensor):
            raise TypeError(f"smax.torch.attention: {name} must be a torch.Tensor, "
                            f"got {type(t).__name__}")
    q4, k4, v4, squeeze, ao = _prepare(
        "attention", q, k, v, is_causal, scale, enable_gqa, dropout_p, normalizer, softcap, sinks,
        alibi_slopes, None if isinstance(sigmoid_bias, torch.Tensor) else sigmoid_bias,
        softpick_eps, ssmax_s, empty_row, threads, sigmoid_bias_mode, power_p)

    def as_t(x: Any) -> Any:
        return x if x is None or isinstance(x, torch.Tensor) else torch.as_tensor(x)

    bias = sigmoid_bias if isinstance(sigmoid_bias, torch.Tensor) else None
    if bias is not None and (normalizer != "sigmoid" or bias.numel() != 1):
        raise ValueError("smax.torch.attention: a tensor sigmoid_bias must hold one element "
                         f"and needs normalizer='sigmoid', got {tuple(bias.shape)} with "
                         f"normalizer={normalizer!r}")
    ssmax = None if isinstance(ssmax_s, numbers.Real) else as_t(ssmax_s)
    if ssmax is not None and normalizer != "ssmax":
        raise ValueError("smax.torch.attention: a tensor ssmax_s needs normalizer='ssmax'")
    res = _function().apply(q4, k4, v4, as_t(attn_mask), as_t(sinks), as_t(alibi_slopes),
                            as_t(gate), bias, ssmax, ao)
    return res[0] if squeeze else res

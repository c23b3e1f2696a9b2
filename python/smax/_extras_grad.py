"""Gradients of cross_entropy's per-row extras (smax/_autograd.py), so that
``loss + f(lse)`` (a z-loss of your own), ``entropy`` regularisers and
``target_logprob`` terms train: each extra a user can put in a loss is
differentiable. ``accuracy`` (piecewise constant) is not: it is marked
non-differentiable, as ``torch.argmax``'s result is.

With the logits formed as the C++ library does (include/smax/losses.h: u =
x * s, c = softcap * tanh(u / softcap) when softcap > 0, t = c + additive
mask, -inf where a bool mask is False), L = LSE(t), p = softmax(t), per row
(G the incoming gradient of that extra):

  lse:            dt = G p
  entropy H:      dt = -G p (log p + H)          (0 where p = 0)
  target_logprob: dt = G (onehot(y) - p)          (class indices; 0 on ignored rows)
                  dt = G (q - (sum q) p)          (probabilities q; masked classes left out)
  z_loss:         dt = G' 2 zs w_y L p            (w_y = weight[y] or 1, 0 on ignored
                  rows; probabilities: w = 1; G' = G per row ("none"), G ("sum"),
                  G / sum of the counted weights ("mean"; a zero sum: NaN, or 0 with
                  empty_mean="zero"))

and dx = dt * s * (1 - tanh^2(u / softcap)) (softcap > 0) or dt * s, the
additive mask's gradient dt summed to its shape. Computed with torch in
float64 for float64 logits, else float32, from the saved logits (an [N, C]
temporary, only in a backward that has such a gradient).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

Tensor = torch.Tensor


def cross_entropy_extras_grad(x: Tensor, target: Tensor, weight: Optional[Tensor],
                              mask: Optional[Tensor], dim: int, s: float, softcap: float,
                              lse_square_scale: float, ignore_index: int, reduction: str,
                              empty_mean: str, grads: Dict[str, Tensor]
                              ) -> Tuple[Tensor, Optional[Tensor]]:
    """(d / dx, d / d additive mask or None) of sum(grads[name] * extra[name])
    over the extras named in ``grads`` (z_loss, lse, entropy, target_logprob);
    dx in float64 for float64 x, else float32."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    u = x.detach().to(acc) * s
    dcap = None
    if softcap > 0.0:
        th = torch.tanh(u / softcap)
        finite = torch.isfinite(u)
        c = torch.where(finite, softcap * th, u)  # +-inf u are not capped
        dcap = torch.where(finite, 1.0 - th * th, torch.zeros_like(u))
    else:
        c = u
    t = c
    if mask is not None:
        m = mask.detach()
        if m.is_floating_point():
            t = t + m.to(acc)
        else:
            t = t.masked_fill(~m.bool(), float("-inf"))
    scalar_row = t.dim() <= 1  # [C] logits: one row
    t = t.movedim(dim, -1) if t.dim() > 0 else t.reshape(1)
    L = torch.logsumexp(t, -1, keepdim=True)
    p = torch.exp(t - L)
    p = torch.where(torch.isneginf(L), torch.zeros_like(p), p)  # empty / all-masked rows
    dt = torch.zeros_like(t)

    def g(name: str) -> Tensor:
        v = grads[name].detach().to(acc)
        return v.reshape(()) if scalar_row and v.numel() == 1 else v

    def per_row(v: Tensor) -> Tensor:  # a rows-shaped tensor as [..., 1]
        return v.unsqueeze(-1)

    classes = not target.is_floating_point()
    if classes:
        tgt = target.reshape(t.shape[:-1])
        valid = tgt != ignore_index
        y = torch.where(valid, tgt, torch.zeros_like(tgt))
        w = (weight.detach().to(acc)[y] if weight is not None
             else torch.ones(y.shape, dtype=acc))
        w = torch.where(valid, w, torch.zeros_like(w))
    if "lse" in grads:
        dt = dt + per_row(g("lse")) * p
    if "entropy" in grads:
        logp = t - L
        plogp = torch.where(p > 0, p * logp, torch.zeros_like(p))
        H = -plogp.sum(-1, keepdim=True)
        dt = dt - per_row(g("entropy")) * torch.where(p > 0, p * (logp + H), torch.zeros_like(p))
    if "target_logprob" in grads:
        gt = per_row(g("target_logprob"))
        if classes:
            onehot = torch.zeros_like(p).scatter_(-1, y.unsqueeze(-1), 1.0)
            dt = dt + gt * per_row(valid.to(acc)) * (onehot - p)
        else:
            q = target.detach().to(acc).movedim(dim, -1).reshape(t.shape)
            q = torch.where(torch.isneginf(t), torch.zeros_like(q), q)
            dt = dt + gt * (q - q.sum(-1, keepdim=True) * p)
    if "z_loss" in grads:
        gz = g("z_loss")
        wz = w if classes else torch.ones(t.shape[:-1], dtype=acc)
        if reduction == "mean":
            denom = wz.sum() if classes else torch.tensor(float(wz.numel()), dtype=acc)
            if float(denom) == 0.0:
                gz = gz * (0.0 if empty_mean == "zero" else float("nan"))
            else:
                gz = gz / denom
        # L * p with p = 0 where L = -inf (a fully masked row): 0, not NaN.
        dt = dt + per_row(gz * wz * 2.0 * lse_square_scale) * torch.where(p > 0, L * p, 0.0)
    dt = dt.reshape(t.shape)
    dt = dt.movedim(-1, dim) if x.dim() > 0 else dt.reshape(())
    dx = dt * s if dcap is None else dt * s * dcap
    dmask = None
    if mask is not None and mask.is_floating_point():
        dmask = dt.sum_to_size(mask.shape) if dt.shape != mask.shape else dt
    return dx, dmask


#: Logit elements per row chunk of linear_cross_entropy_extras_grad (16 MiB in float32).
_CHUNK_ELEMENTS = 1 << 22


def linear_cross_entropy_extras_grad(hidden: Tensor, weight: Tensor, bias: Optional[Tensor],
                                     target: Tensor, ce_weight: Optional[Tensor], s: float,
                                     softcap: float, lse_square_scale: float,
                                     ignore_index: int, reduction: str, empty_mean: str,
                                     grads: Dict[str, Tensor]
                                     ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """(d / d hidden, d / d weight, d / d bias or None) of sum(grads[name] *
    extra[name]) for linear_cross_entropy (logits = hidden @ weight.T + bias),
    in float64 for float64 hidden, else float32. The logits are rebuilt in row
    chunks of at most ``_CHUNK_ELEMENTS`` (never the whole [N, V] at once);
    a "mean" z-loss is divided by the denominator of all rows first."""
    acc = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    h = hidden.detach().to(acc)
    w = weight.detach().to(acc)
    b = None if bias is None else bias.detach().to(acc)
    n, v = int(h.shape[0]), int(w.shape[0])
    grads = dict(grads)
    if "z_loss" in grads and reduction == "mean":
        valid = target != ignore_index
        y = torch.where(valid, target, torch.zeros_like(target))
        wz = (ce_weight.detach().to(acc)[y] if ce_weight is not None
              else torch.ones(y.shape, dtype=acc))
        denom = float(torch.where(valid, wz, torch.zeros_like(wz)).sum())
        gz = grads["z_loss"].detach().to(acc)
        grads["z_loss"] = (gz / denom if denom != 0.0
                           else gz * (0.0 if empty_mean == "zero" else float("nan")))
        reduction = "sum"
    dh = torch.zeros(h.shape, dtype=acc)
    dw = torch.zeros(w.shape, dtype=acc)
    db = None if b is None else torch.zeros(b.shape, dtype=acc)
    step = max(1, _CHUNK_ELEMENTS // max(v, 1))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        logits = h[r0:r1] @ w.T
        if b is not None:
            logits = logits + b
        part = {k: g[r0:r1] if g.dim() > 0 else g for k, g in grads.items()}  # per row / scalar
        dl, _ = cross_entropy_extras_grad(logits, target[r0:r1], ce_weight, None, 1, s,
                                          softcap, lse_square_scale, ignore_index, reduction,
                                          empty_mean, part)
        dh[r0:r1] = dl @ w
        dw += dl.T @ h[r0:r1]
        if db is not None:
            db += dl.sum(0)
    return dh, dw, db

"""The gradients of attention's learnable knobs through smax.torch.attention
(docs/attention.md, "Gradients of masks, sinks, ALiBi slopes, the sigmoid
bias and SSMax's s"): a float attn_mask, per-head sinks, ALiBi slopes, the sigmoid bias and
SSMax's s (per head or shared), against autograd through the same attention
composed from torch ops."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import smax  # noqa: E402


def composed(q, k, v, mask=None, sinks=None, slopes=None, bias=None, causal=False):
    """Reference attention from torch ops (float64): softmax (with a sink
    column) or, with `bias`, the unnormalised sigmoid normaliser."""
    L, S = q.shape[-2], k.shape[-2]
    t = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    if slopes is not None:
        t = t - slopes.reshape(-1, 1, 1) * (i - j).abs()
    if mask is not None:
        t = t + mask
    if causal:
        t = t.masked_fill(j > i, float("-inf"))
    if bias is not None:
        return torch.sigmoid(t + bias).masked_fill(t == float("-inf"), 0.0) @ v
    if sinks is not None:
        col = sinks.reshape(1, -1, 1, 1).expand(*t.shape[:-1], 1)
        return torch.softmax(torch.cat([t, col], dim=-1), dim=-1)[..., :-1] @ v
    return torch.softmax(t, dim=-1) @ v


def grads(fn, tensors, w):
    for t in tensors:
        t.grad = None
    (fn() * w).sum().backward()
    return [t.grad.clone() for t in tensors]


@pytest.mark.parametrize("causal", [False, True])
def test_mask_sinks_slopes_gradients(causal):
    gen = torch.Generator().manual_seed(21)
    B, H, L, D = 2, 4, 12, 8
    q, k, v = (torch.randn(B, H, L, D, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.randn(1, H, L, L, generator=gen, dtype=torch.float64)   # broadcast over B
    sinks = torch.randn(H, generator=gen, dtype=torch.float64)
    slopes = torch.rand(H, generator=gen, dtype=torch.float64) * 0.2
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, mask, sinks, slopes)]
    w = torch.randn(B, H, L, D, generator=gen, dtype=torch.float64)
    got = grads(lambda: smax.attention(*leaves[:3], attn_mask=leaves[3], is_causal=causal,
                                       sinks=leaves[4], alibi_slopes=leaves[5]), leaves, w)
    want = grads(lambda: composed(*leaves[:3], mask=leaves[3], sinks=leaves[4],
                                  slopes=leaves[5], causal=causal), leaves, w)
    for name, a, b in zip(("q", "k", "v", "mask", "sinks", "slopes"), got, want):
        assert a.dtype == torch.float64 and a.shape == b.shape, name
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-4, msg=name)


def test_mask_gradient_matches_sdpa_float_mask():
    gen = torch.Generator().manual_seed(22)
    q, k, v = (torch.randn(1, 2, 9, 16, generator=gen) for _ in range(3))
    mask = torch.randn(1, 2, 9, 9, generator=gen).requires_grad_(True)
    smax.attention(q, k, v, attn_mask=mask).square().sum().backward()
    got = mask.grad.clone()
    mask.grad = None
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).square().sum().backward()
    torch.testing.assert_close(got, mask.grad, atol=1e-5, rtol=1e-4)


def test_sigmoid_bias_gradient():
    gen = torch.Generator().manual_seed(23)
    q, k, v = (torch.randn(1, 2, 7, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    bias = torch.tensor(-1.25, dtype=torch.float64, requires_grad=True)
    w = torch.randn(1, 2, 7, 8, generator=gen, dtype=torch.float64)
    (smax.attention(q, k, v, normalizer="sigmoid", sigmoid_bias=bias, is_causal=True) * w) \
        .sum().backward()
    got = bias.grad.clone()
    bias.grad = None
    (composed(q, k, v, bias=bias, causal=True) * w).sum().backward()
    torch.testing.assert_close(got, bias.grad, atol=1e-5, rtol=1e-4)


def ssmax_composed(q, k, v, s, causal):
    """SSMax attention from torch ops: softmax(s_h ln(n_i) t) over the n_i
    visible keys of row i; s is [H] or a scalar."""
    L, S = q.shape[-2], k.shape[-2]
    t = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    hidden = (j > i) if causal else torch.zeros(L, S, dtype=torch.bool)
    n = (~hidden).sum(-1, keepdim=True).to(t.dtype)
    c = s.reshape(-1, 1, 1) * torch.log(n) if s.dim() == 1 else s * torch.log(n)
    return torch.softmax((c * t).masked_fill(hidden, float("-inf")), dim=-1) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_head", [True, False])
def test_ssmax_scales_gradient(causal, per_head):
    gen = torch.Generator().manual_seed(24)
    B, H, L, D = 2, 3, 11, 8
    q, k, v = (torch.randn(B, H, L, D, generator=gen, dtype=torch.float64) for _ in range(3))
    s0 = torch.tensor([0.3, 0.5, 0.9], dtype=torch.float64) if per_head \
        else torch.tensor(0.6, dtype=torch.float64)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, s0)]
    w = torch.randn(B, H, L, D, generator=gen, dtype=torch.float64)
    got = grads(lambda: smax.attention(*leaves[:3], is_causal=causal, normalizer="ssmax",
                                       ssmax_s=leaves[3]), leaves, w)
    want = grads(lambda: ssmax_composed(*leaves[:3], leaves[3], causal), leaves, w)
    for name, a, b in zip(("q", "k", "v", "s"), got, want):
        assert a.dtype == torch.float64 and a.shape == b.shape, name
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-4, msg=name)
    # Without autograd: numpy [H] scales give the per-head forward.
    if per_head:
        with torch.no_grad():
            out = smax.attention(q, k, v, is_causal=causal, normalizer="ssmax",
                                 ssmax_s=s0.numpy())
            torch.testing.assert_close(out, ssmax_composed(q, k, v, s0, causal), atol=1e-5,
                                       rtol=1e-4)


def test_ssmax_scales_errors():
    q = torch.randn(1, 3, 4, 8)
    with pytest.raises(ValueError, match="ssmax_s must be a number, one element or"):
        smax.attention(q, q, q, normalizer="ssmax", ssmax_s=torch.ones(2))
    with pytest.raises(ValueError, match="ssmax_scales are supported with the ssmax"):
        smax.attention(q, q, q, ssmax_s=torch.ones(3))

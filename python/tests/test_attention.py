"""smax.attention / smax.torch.attention against
torch.nn.functional.scaled_dot_product_attention (float32 results vs a
float64 torch reference, values and gradients), the other normalisers against
a float64 torch composition of their formulas, strided inputs without copies,
and errors."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import smax  # noqa: E402
import smax.torch as st  # noqa: E402
from conftest import torch_close, torch_grad_close  # noqa: E402


pytestmark = pytest.mark.usefixtures("torch_seed")  # torch.manual_seed(0) per test


def close(got, want, rtol=1e-5, atol=2e-6):
    torch_close(got, want, rtol, atol)


def grad_close(got, want, rtol=2e-4):
    torch_grad_close(got, want, rtol)


def qkv(B=2, H=4, Hkv=4, Lq=9, Lk=13, D=16, Dv=None, grad=False):
    Dv = D if Dv is None else Dv
    q = torch.randn(B, H, Lq, D)
    k = torch.randn(B, Hkv, Lk, D)
    v = torch.randn(B, Hkv, Lk, Dv)
    if grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v


def sdpa64(q, k, v, **kw):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)


# ---- softmax vs SDPA ---------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1, 1), (2, 4, 4, 9, 13, 16), (1, 2, 2, 65, 130, 64),
                                   (1, 2, 2, 40, 20, 8)])
def test_softmax_matches_sdpa(causal, shape):
    B, H, Hkv, Lq, Lk, D = shape
    q, k, v = qkv(B, H, Hkv, Lq, Lk, D)
    got = smax.attention(q, k, v, is_causal=causal)
    want = sdpa64(q, k, v, is_causal=causal)
    close(got, want)
    # numpy in, numpy out
    got_np = smax.attention(q.numpy(), k.numpy(), v.numpy(), is_causal=causal)
    assert isinstance(got_np, np.ndarray)
    close(got_np, want)


def test_scale_masks_gqa():
    q, k, v = qkv(2, 8, 2, 11, 17, 32, Dv=24)
    bm = torch.rand(11, 17) > 0.3
    fm = torch.randn(2, 1, 1, 17)
    for kw in ({"scale": 0.3}, {"attn_mask": bm}, {"attn_mask": fm}, {"scale": 1.7, "attn_mask": bm}):
        got = smax.attention(q, k, v, enable_gqa=True, **kw)
        want = sdpa64(q, k, v, enable_gqa=True, **{key: (val.double() if key == "attn_mask" and
                                                            val.dtype != torch.bool else val)
                                                      for key, val in kw.items()})
        close(got, want)


def test_fully_masked_rows_give_zero():
    q, k, v = qkv(1, 2, 2, 4, 6, 8)
    m = torch.ones(4, 6, dtype=torch.bool)
    m[2] = False
    got = smax.attention(q, k, v, attn_mask=m)
    assert torch.all(got[:, :, 2] == 0)
    got_nan = smax.attention(q, k, v, attn_mask=m, empty_row="nan")
    assert torch.all(torch.isnan(got_nan[:, :, 2]))
    keep = [0, 1, 3]
    close(got[:, :, keep], sdpa64(q, k, v, attn_mask=m)[:, :, keep])


def test_transposed_inputs_without_copies():
    B, L, H, D = 2, 19, 4, 16
    base = torch.randn(3, B, L, H, D)
    q, k, v = (base[i].transpose(1, 2) for i in range(3))  # [B, H, L, D] views
    assert not q.is_contiguous()
    out = torch.empty(B, L, H, D).transpose(1, 2)
    res = smax.attention(q, k, v, is_causal=True, out=out)
    assert res.data_ptr() == out.data_ptr()
    close(out, sdpa64(q, k, v, is_causal=True))


def test_rank3_and_lse():
    q, k, v = qkv(1, 3, 3, 5, 7, 8)
    out, lse = smax.attention(q[0], k[0], v[0], return_lse=True)
    assert out.shape == (3, 5, 8) and lse.shape == (3, 5)
    s = (q[0].double() @ k[0].double().transpose(-1, -2)) / math.sqrt(8)
    close(lse, torch.logsumexp(s, -1))
    close(out, sdpa64(q, k, v)[0])


# ---- gradients vs SDPA ----------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_gradients_match_sdpa(causal):
    q, k, v = qkv(2, 4, 2, 21, 33, 16, Dv=8, grad=True)
    out = st.attention(q, k, v, is_causal=causal, enable_gqa=True)
    g = torch.randn_like(out)
    out.backward(g)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    want = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, enable_gqa=True)
    close(out, want)
    want.backward(g.double())
    grad_close(q.grad, q64.grad)
    grad_close(k.grad, k64.grad)
    grad_close(v.grad, v64.grad)


def test_gradients_with_mask_and_scale_through_smax_attention():
    q, k, v = qkv(1, 2, 2, 7, 9, 8, grad=True)
    m = torch.randn(7, 9)
    out = smax.attention(q, k, v, attn_mask=m, scale=0.5)  # routed to autograd
    out.sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    F.scaled_dot_product_attention(q64, k64, v64, attn_mask=m.double(), scale=0.5).sum().backward()
    grad_close(q.grad, q64.grad)
    grad_close(k.grad, k64.grad)
    grad_close(v.grad, v64.grad)


# ---- other normalisers vs float64 torch formulas --------------------------------------------


def normalise64(name, t, D, **kw):
    """Row normaliser on float64 logits t ([..., Lk], -inf = masked)."""
    vis = torch.isfinite(t) | torch.isnan(t)
    n = vis.sum(-1, keepdim=True).double()
    if name == "sigmoid":
        if kw.get("sigmoid_bias_mode", "per_sequence") == "per_sequence":
            n = torch.full_like(n, t.shape[-1])  # one b = -ln Lk for every row
        b = -torch.log(n) if kw.get("sigmoid_bias") is None else kw["sigmoid_bias"]
        return torch.where(vis, torch.sigmoid(t + b), 0.0)
    if name == "softpick":
        eps = kw.get("softpick_eps", 1e-6)
        e = torch.where(vis, torch.expm1(t), 0.0)
        return torch.relu(e) / (e.abs().sum(-1, keepdim=True) + eps)
    if name == "ssmax":
        c = kw.get("ssmax_s", 0.43) * torch.log(n)
        return torch.softmax(torch.where(vis, c * t, -math.inf), -1)
    if name == "stablemax":
        s = torch.where(t >= 0, t + 1, 1 / (1 - torch.clamp(t, max=0)))
        s = torch.where(vis, s, 0.0)
        return s / s.sum(-1, keepdim=True)
    if name == "softplus":
        lam = torch.log(n) / math.log(D)
        s = torch.where(vis, F.softplus(lam * t), 0.0)
        return s / s.sum(-1, keepdim=True)
    if name == "power":  # Power-Softmax (Zimerman et al. 2024): t^p / sum t^p
        s = torch.where(vis, t, 0.0) ** kw.get("power_p", 2)
        return s / s.sum(-1, keepdim=True)
    return torch.softmax(t, -1)


def composed64(q, k, v, name, causal=False, **kw):
    q64, k64, v64 = q.double(), k.double(), v.double()
    D = q.shape[-1]
    t = q64 @ k64.transpose(-1, -2) / math.sqrt(D)
    if causal:
        Lq, Lk = t.shape[-2:]
        t = t.masked_fill(~torch.ones(Lq, Lk, dtype=torch.bool).tril(), -math.inf)
    return normalise64(name, t, D, **kw) @ v64


@pytest.mark.parametrize("name", ["sigmoid", "softpick", "ssmax", "stablemax", "softplus",
                                  "power", "power4"])
@pytest.mark.parametrize("causal", [False, True])
def test_other_normalizers_values_and_gradients(name, causal):
    q, k, v = qkv(2, 2, 2, 10, 12, 8, grad=True)
    kw = {"power_p": 4} if name == "power4" else {}
    name = "power" if name == "power4" else name
    out = st.attention(q, k, v, is_causal=causal, normalizer=name, **kw)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    want = composed64(q64, k64, v64, name, causal, **kw)
    close(out, want, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(out)
    out.backward(g)
    want.backward(g.double())
    grad_close(q.grad, q64.grad, 5e-4)
    grad_close(k.grad, k64.grad, 5e-4)
    grad_close(v.grad, v64.grad, 5e-4)


@pytest.mark.parametrize("mode", ["per_sequence", "per_row_visible"])
def test_sigmoid_bias_mode_causal(mode):
    q, k, v = qkv(1, 2, 2, 6, 9, 8)
    got = smax.attention(q, k, v, is_causal=True, normalizer="sigmoid", sigmoid_bias_mode=mode)
    close(got, composed64(q, k, v, "sigmoid", True, sigmoid_bias_mode=mode), rtol=1e-4,
          atol=1e-5)


def test_softcap_sinks_alibi_against_composition():
    q, k, v = qkv(1, 2, 2, 6, 8, 8)
    sinks = torch.randn(2)
    slopes = torch.tensor([0.25, 0.5])
    got = smax.attention(q, k, v, softcap=3.0, sinks=sinks, alibi_slopes=slopes, is_causal=True)
    t = q.double() @ k.double().transpose(-1, -2) / math.sqrt(8)
    t = 3.0 * torch.tanh(t / 3.0)
    i = torch.arange(6).view(6, 1)
    j = torch.arange(8).view(1, 8)
    t = t - slopes.double().view(1, 2, 1, 1) * (i - j).abs().double()
    t = t.masked_fill(j > i, -math.inf)
    full = torch.cat([t, sinks.double().view(1, 2, 1, 1).expand(1, 2, 6, 1)], -1)
    p = torch.softmax(full, -1)[..., :8]
    close(got, p @ v.double())


def test_softcap_sinks_alibi_mask_gradients():
    q, k, v = qkv(1, 2, 2, 6, 8, 8, grad=True)
    sinks = np.random.default_rng(0).standard_normal(2).astype(np.float32)  # numpy is fine
    slopes = torch.tensor([0.25, 0.5])
    m = torch.rand(6, 8) > 0.3
    out = st.attention(q, k, v, attn_mask=m, softcap=3.0, sinks=sinks, alibi_slopes=slopes)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    t = q64 @ k64.transpose(-1, -2) / math.sqrt(8)
    t = 3.0 * torch.tanh(t / 3.0)
    i = torch.arange(6).view(6, 1)
    j = torch.arange(8).view(1, 8)
    t = t - slopes.double().view(1, 2, 1, 1) * (i - j).abs().double()
    t = t.masked_fill(~m, -math.inf)
    s64 = torch.from_numpy(sinks).double().view(1, 2, 1, 1).expand(1, 2, 6, 1)
    want = torch.softmax(torch.cat([t, s64], -1), -1)[..., :8] @ v64
    close(out, want)
    g = torch.randn_like(out)
    out.backward(g)
    want.backward(g.double())
    grad_close(q.grad, q64.grad)
    grad_close(k.grad, k64.grad)
    grad_close(v.grad, v64.grad)


# ---- errors ----------------------------------------------------------------------------------


def test_errors():
    q, k, v = qkv(1, 4, 2, 3, 5, 8)
    with pytest.raises(ValueError, match="enable_gqa"):
        smax.attention(q, k, v)
    with pytest.raises(ValueError, match="dropout"):
        smax.attention(q, k, v, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(ValueError, match="normalizer"):
        smax.attention(q, k, v, enable_gqa=True, normalizer="bogus")
    with pytest.raises(TypeError, match="q has dtype int32.*floating"):  # any floating dtype goes
        smax.attention(q.int(), k, v, enable_gqa=True)
    with pytest.raises(ValueError, match="attn_mask"):
        smax.attention(q, k, v, enable_gqa=True, attn_mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="sinks"):
        smax.attention(q, k, v, enable_gqa=True, normalizer="softpick", sinks=torch.zeros(4))
    with pytest.raises(ValueError, match="head dim"):
        smax.attention(q, k[..., :4], v, enable_gqa=True)
    with pytest.raises(TypeError):
        st.attention(q.numpy(), k, v, enable_gqa=True)


def test_power_p_errors():
    q, k, v = qkv(1, 1, 1, 3, 4, 8)
    with pytest.raises(ValueError, match="power_p must be an even integer >= 2, got 3"):
        smax.attention(q, k, v, normalizer="power", power_p=3)
    with pytest.raises(TypeError, match="power_p must be an int"):
        smax.attention(q, k, v, normalizer="power", power_p=2.0)

"""Gated attention through smax.attention / smax.torch.attention (gate=;
docs/attention.md "Gated attention"): values and gradients against SDPA *
sigmoid(gate), head-wise and element-wise gates, both drivers, bfloat16 and
float64 gradcheck."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import smax  # noqa: E402


@pytest.mark.parametrize("head_wise", [False, True])
@pytest.mark.parametrize("Lq", [1, 40])
def test_gate_values_and_gradients_match_composition(head_wise, Lq):
    """smax.attention(gate=g) == SDPA(q, k, v) * sigmoid(g), values and the
    gradients of q, k, v and g (decode grid for Lq = 1, prefill for 40)."""
    gen = torch.Generator().manual_seed(10)
    B, H, Hkv, Lk, D = 2, 4, 2, 50, 16
    q, k, v = (torch.randn(B, h, L, D, generator=gen).requires_grad_(True)
               for h, L in ((H, Lq), (Hkv, Lk), (Hkv, Lk)))
    g = (torch.randn(B, H, Lq, 1 if head_wise else D, generator=gen) * 2).requires_grad_(True)
    w = torch.randn(B, H, Lq, D, generator=gen)
    out = smax.attention(q, k, v, is_causal=Lq > 1, enable_gqa=True, gate=g)
    (out * w).sum().backward()
    got = [t.grad.clone() for t in (q, k, v, g)]
    for t in (q, k, v, g):
        t.grad = None
    want = F.scaled_dot_product_attention(q, k, v, is_causal=Lq > 1, enable_gqa=True) * \
        torch.sigmoid(g)
    (want * w).sum().backward()
    torch.testing.assert_close(out, want, atol=2e-6, rtol=1e-5)
    for a, b in zip(got, (q.grad, k.grad, v.grad, g.grad)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_gate_no_grad_bfloat16_and_gradcheck():
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(1, 2, 3, 8, generator=gen)
    k = torch.randn(1, 2, 5, 8, generator=gen)
    g = torch.randn(1, 2, 3, 8, generator=gen)
    with torch.no_grad():
        a = smax.attention(q, k, k, gate=g)
        b = smax.attention(q.bfloat16(), k.bfloat16(), k.bfloat16(), gate=g.bfloat16())
    assert b.dtype == torch.bfloat16
    torch.testing.assert_close(b.float(), a, atol=2e-2, rtol=2e-2)
    # float64 storage, float32 arithmetic: the step and tolerances of
    # test_dtypes.test_gradcheck_float64.
    args = [t.double().requires_grad_(True) for t in (q, k, k.clone(), g)]
    assert torch.autograd.gradcheck(lambda q, k, v, g: smax.attention(q, k, v, gate=g), args,
                                    eps=1e-3, atol=1e-3, rtol=1e-3)

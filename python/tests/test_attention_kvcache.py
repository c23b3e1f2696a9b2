"""smax.attention decoding with a KV cache (docs/attention.md, "Decoding with a
KV cache"): cache_seqlens and paged block tables against torch SDPA in float64
on each sequence's own keys (bottom-right causal positions), GQA, dtypes, the
decode grid without a cache, and the errors."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import smax  # noqa: E402


def sdpa_reference(q, k, v, lens, causal):
    """out[b] = SDPA(q[b], k[b, :, :len_b], v[b, :, :len_b]) in float64, the
    queries at positions len_b - Lq + i (keys j <= position under causal)."""
    B, H, Lq, _ = q.shape
    out = torch.zeros(B, H, Lq, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        n = int(lens[b])
        pos = torch.arange(Lq) + (n - Lq)
        keep = torch.arange(n)[None, :] <= pos[:, None] if causal else torch.ones(Lq, n, dtype=bool)
        rows = keep.any(dim=1)  # a query with no visible key gives 0 (smax's default, SDPA's NaN)
        if n > 0:
            o = F.scaled_dot_product_attention(q[b:b + 1].double(), k[b:b + 1, :, :n].double(),
                                               v[b:b + 1, :, :n].double(), attn_mask=keep,
                                               enable_gqa=True)
            out[b] = torch.where(rows[None, :, None], o[0], 0.0)
    return out


def paged(k, page, gen):
    """A [num_pages, page, Hkv, D] pool (vLLM's layout) holding cache k
    [B, Hkv, Lmax, D] under a shuffled block table [B, Lmax / page]."""
    B, Hkv, L, D = k.shape
    slots = L // page
    perm = torch.randperm(B * slots + 2, generator=gen)
    table = perm[:B * slots].reshape(B, slots).to(torch.int32)
    pool = torch.full((B * slots + 2, page, Hkv, D), float("nan"), dtype=k.dtype)
    for b in range(B):
        for s in range(slots):
            pool[table[b, s]] = k[b, :, s * page:(s + 1) * page].transpose(0, 1)
    return pool, table


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Lq", [1, 4])
def test_cache_seqlens_matches_sdpa(causal, Lq):
    gen = torch.Generator().manual_seed(5)
    B, H, Hkv, L, D = 3, 8, 2, 2500, 32
    q = torch.randn(B, H, Lq, D, generator=gen)
    k = torch.randn(B, Hkv, L, D, generator=gen)
    v = torch.randn(B, Hkv, L, D, generator=gen)
    lens = torch.tensor([L, 700, 2], dtype=torch.int32)
    out = smax.attention(q, k, v, is_causal=causal, enable_gqa=True, cache_seqlens=lens)
    want = sdpa_reference(q, k, v, lens, causal)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("page", [16, 256])
def test_paged_cache_matches_contiguous(page):
    gen = torch.Generator().manual_seed(6)
    B, H, Hkv, L, D = 2, 4, 2, 1024, 64
    q = torch.randn(B, H, 1, D, generator=gen)
    k = torch.randn(B, Hkv, L, D, generator=gen)
    v = torch.randn(B, Hkv, L, D, generator=gen)
    lens = torch.tensor([1000, 37], dtype=torch.int64)
    kp, table = paged(k, page, gen)
    vp = torch.full_like(kp, float("nan"))
    for b in range(B):  # the same table for v
        for s in range(L // page):
            vp[table[b, s]] = v[b, :, s * page:(s + 1) * page].transpose(0, 1)
    got = smax.attention(q, kp.transpose(1, 2), vp.transpose(1, 2), enable_gqa=True,
                         cache_seqlens=lens, block_table=table)
    want = smax.attention(q, k, v, enable_gqa=True, cache_seqlens=lens)
    assert torch.equal(got, want)  # same key blocks: the same bits
    torch.testing.assert_close(got.double(), sdpa_reference(q, k, v, lens, False),
                               atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_cache_in_other_dtypes(dtype):
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, 8, 1, 64, generator=gen).to(dtype)
    k = torch.randn(1, 2, 3000, 64, generator=gen).to(dtype)
    v = torch.randn(1, 2, 3000, 64, generator=gen).to(dtype)
    lens = torch.tensor([2900], dtype=torch.int32)
    out = smax.attention(q, k, v, enable_gqa=True, cache_seqlens=lens)
    assert out.dtype == dtype
    want = sdpa_reference(q, k, v, lens, False)
    tol = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float64: 1e-5}[dtype]
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)


def test_decode_grid_without_cache_matches_sdpa():
    """Lq <= 16 runs the decode grid (key chunks of 2048, G heads per read)."""
    gen = torch.Generator().manual_seed(8)
    q = torch.randn(2, 32, 3, 128, generator=gen)
    k = torch.randn(2, 8, 5000, 128, generator=gen)
    v = torch.randn(2, 8, 5000, 128, generator=gen)
    for causal in (False, True):
        got = smax.attention(q, k, v, is_causal=causal, enable_gqa=True)
        want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                              is_causal=causal, enable_gqa=True)
        torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=1e-5)
    one = smax.attention(q, k, v, enable_gqa=True, threads=1)
    two = smax.attention(q, k, v, enable_gqa=True, threads=2)
    assert torch.equal(one, two)


def test_numpy_cache():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(9)
    q = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    k = rng.standard_normal((1, 4, 100, 16)).astype(np.float32)
    v = rng.standard_normal((1, 4, 100, 16)).astype(np.float32)
    out = smax.attention(q, k, v, cache_seqlens=np.array([40], dtype=np.int32))
    want = smax.attention(q, k[:, :, :40], v[:, :, :40])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def test_kv_cache_errors():
    q = torch.randn(2, 4, 1, 8)
    k = torch.randn(2, 4, 64, 8)
    with pytest.raises(ValueError, match="cache_seqlens"):
        smax.attention(q, k, k, cache_seqlens=torch.tensor([65, 1], dtype=torch.int32))
    with pytest.raises(TypeError, match="int32 or int64"):
        smax.attention(q, k, k, cache_seqlens=torch.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match="block_table"):
        smax.attention(q, k, k, block_table=torch.tensor([[0, 9]], dtype=torch.int32))
    with pytest.raises(ValueError, match="forward-only"):
        smax.attention(q.requires_grad_(True), k, k, cache_seqlens=torch.tensor([3, 3]))


@pytest.mark.parametrize("phi", [0.0, 8.0, 200.0])
def test_unified_max_is_exact(phi):
    # FlashDecoding++'s unified max: the same values as without it, within
    # the bound, whether the logits sit near phi (8), far below it (200: the
    # exact fallback) or above it (0); KV cache and plain decode forms.
    gen = torch.Generator().manual_seed(9)
    B, H, Hkv, L, D = 2, 8, 2, 3000, 64
    q = torch.randn(B, H, 2, D, generator=gen) * 3
    k = torch.randn(B, Hkv, L, D, generator=gen)
    v = torch.randn(B, Hkv, L, D, generator=gen)
    lens = torch.tensor([L, 1000], dtype=torch.int32)
    want = sdpa_reference(q, k, v, lens, True)
    out = smax.attention(q, k, v, is_causal=True, enable_gqa=True, cache_seqlens=lens,
                         unified_max=phi)
    torch.testing.assert_close(out.double(), want, atol=2e-6, rtol=1e-5)
    plain = smax.attention(q, k, v, enable_gqa=True, unified_max=phi)
    torch.testing.assert_close(plain, smax.attention(q, k, v, enable_gqa=True), atol=2e-6,
                               rtol=1e-5)


def test_unified_max_errors():
    q = torch.randn(1, 2, 1, 8)
    k = torch.randn(1, 2, 16, 8)
    with pytest.raises(ValueError, match="unified_max must be a finite number"):
        smax.attention(q, k, k, unified_max=float("inf"))
    with pytest.raises(ValueError, match="forward-only"):
        smax.attention(q.requires_grad_(), k, k, unified_max=1.0)

"""smax.sampling_filter / smax.sample against Hugging Face transformers' own
logits warpers (TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper), applied
in the order of transformers' GenerationMixin._get_logits_processor
(temperature, top-k, top-p, min-p) with the same min_tokens_to_keep:

* the kept support is identical (exact) on random rows, f32 and f64 inputs,
  with top_k_ties="keep" (transformers' rule) and on tie-heavy rows for the
  value-based filters (top-k, min-p);
* for a fixed candidate set, sample's frequencies match the renormalised
  softmax of the warped scores (chi-square at p = 1e-6, fixed seeds);
* bad values raise ValueError naming the option and write nothing.

transformers' warpers run on float64 scores (the f32 logits divided by an
exactly representable temperature), so their decisions are exact up to
~1e-16; the one documented inexact smax path (top_p with only top_k, f32
rows: a full-row normaliser within 1e-6) is compared on rows whose top-p
cut is further than 1e-5 from the boundary.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
lp = pytest.importorskip("transformers.generation.logits_process")
import smax  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_seed")  # torch.manual_seed(0) per test


def f32(v):
    """v rounded to float32, as smax stores the option."""
    return float(np.float32(v))


def hf_kept(z64, top_k, top_p, min_p, keep):
    """transformers' warpers in _get_logits_processor's order on float64 scores."""
    scores = z64.clone()
    if top_k:
        scores = lp.TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=keep)(None, scores)
    if top_p < 1.0:
        scores = lp.TopPLogitsWarper(top_p=f32(top_p), min_tokens_to_keep=keep)(None, scores)
    if min_p > 0.0:
        scores = lp.MinPLogitsWarper(min_p=f32(min_p), min_tokens_to_keep=keep)(None, scores)
    return scores


def smax_kept(x, T, top_k, top_p, min_p, keep, ties="keep"):
    out = smax.sampling_filter(x, temperature=T, top_k=top_k, top_p=top_p, min_p=min_p,
                               min_tokens_to_keep=keep, top_k_ties=ties)
    return out > -math.inf


def nucleus_margin(z64, top_k, top_p):
    """Per row: the distance (relative mass) of the top-p cut from top_p."""
    s = z64.clone()
    if top_k:
        kth = torch.topk(s, min(top_k, s.shape[-1]))[0][..., -1:]
        s = s.masked_fill(s < kth, -math.inf)
    p = torch.softmax(s, -1).sort(-1, descending=True)[0].cumsum(-1)
    return (p - f32(top_p)).abs().min(-1)[0]


def random_rows(rows, n, gen, ties=False):
    x = torch.randn(rows, n, generator=gen) * 2.5
    if ties:
        x = torch.round(x * 2) / 2
    x[torch.rand(rows, n, generator=gen) < 0.1] = -math.inf
    x[:, 0] = x[:, 0].clamp(min=-50)  # at least one visible entry per row
    return x


GRID = [(k, p, m, keep)
        for k in (0, 1, 5, 40)
        for p in (1.0, 0.95, 0.6)
        for m in (0.0, 0.02, 0.3)
        for keep in (1, 2, 9)]


@pytest.mark.parametrize("T", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kept_support_equals_transformers(T, dtype):
    gen = torch.Generator().manual_seed(7)
    x = random_rows(64, 200, gen).to(dtype)
    z64 = (x / T).double()  # T is exact in float32: the same z as smax's fl(t / T)
    compared = 0
    for k, p, m, keep in GRID:
        want = hf_kept(z64, k, p, m, keep) > -math.inf
        got = smax_kept(x, T, k, p, m, keep)
        rows = torch.ones(x.shape[0], dtype=torch.bool)
        fast_path = dtype == torch.float32 and m == 0.0 and keep == 1 and k == 0 and p < 1.0
        if fast_path:  # the documented 1e-6 normaliser of top_p alone
            rows = nucleus_margin(z64, k, p) > 1e-5
        assert torch.equal(got[rows], want[rows]), (k, p, m, keep)
        compared += int(rows.sum())
    assert compared > 0.95 * len(GRID) * x.shape[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ties_value_based_filters_equal_transformers(dtype):
    # Rows on a grid of 1/2: many ties at the k-th and at the min-p threshold.
    gen = torch.Generator().manual_seed(11)
    x = random_rows(128, 60, gen, ties=True).to(dtype)
    z64 = x.double()
    for k in (1, 3, 10, 30):
        for m in (0.0, 0.25, f32(math.exp(-1.0)), 1.0):
            want = hf_kept(z64, k, 1.0, m, 1) > -math.inf
            got = smax_kept(x, 1.0, k, 1.0, m, 1)
            assert torch.equal(got, want), (k, m)
    # top_k_ties="exact" keeps exactly k (lower index first) where transformers
    # keeps more.
    got = smax_kept(x, 1.0, 3, 1.0, 0.0, 1, ties="exact")
    assert torch.equal(got.sum(-1), torch.minimum((x > -math.inf).sum(-1), torch.tensor(3)))
    assert (got <= (hf_kept(z64, 3, 1.0, 0.0, 1) > -math.inf)).all()


def chi2_bound(df):
    """Upper chi-square(df) quantile at tail 1e-6 (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + 4.753424 * math.sqrt(a)) ** 3


@pytest.mark.parametrize("opts", [dict(top_k=8, top_p=0.9, min_p=0.05),
                                  dict(top_k=4, min_p=0.2, min_tokens_to_keep=3),
                                  dict(top_p=0.7, min_tokens_to_keep=5)])
def test_sample_frequencies_match_the_warped_softmax(opts):
    gen = torch.Generator().manual_seed(3)
    row = torch.randn(24, generator=gen) * 1.5
    row[5] = row[9] = row.max()  # a tie at the max
    T = 0.75
    z64 = (row / T).double()[None]
    warped = hf_kept(z64, opts.get("top_k", 0), opts.get("top_p", 1.0), opts.get("min_p", 0.0),
                     opts.get("min_tokens_to_keep", 1))
    p = torch.softmax(warped, -1)[0]
    draws = 200_000
    x = row.expand(draws, -1).contiguous()  # row r draws with the noise of (seed, r)
    idx = smax.sample(x, temperature=T, top_k_ties="keep", seed=1234, **opts)
    counts = torch.bincount(idx, minlength=24).double()
    assert counts[p == 0].sum() == 0, "a sample outside transformers' kept set"
    support = p > 0
    expected = p[support] * draws
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    assert chi2 < chi2_bound(int(support.sum()) - 1), chi2


def test_bad_values_name_the_option_and_write_nothing():
    x = torch.randn(3, 10)
    out = torch.full((3, 10), 42.0)
    idx = torch.full((3,), -7, dtype=torch.int64)
    bad = [dict(min_p=math.nan), dict(min_p=-0.1), dict(min_p=1.0000001), dict(min_p=2.0),
           dict(min_tokens_to_keep=0), dict(min_tokens_to_keep=-3),
           dict(top_k_ties="ties"), dict(top_k_ties="")]
    for kw in bad:
        name = next(iter(kw))
        with pytest.raises(ValueError, match=name):
            smax.sampling_filter(x, top_k=3, out=out, **kw)
        with pytest.raises(ValueError, match=name):
            smax.sample(x, top_k=3, out=idx, **kw)
        assert (out == 42.0).all() and (idx == -7).all(), kw


def test_defaults_and_docstrings():
    x = torch.randn(4, 50)
    base = smax.sampling_filter(x, 0.8, top_k=10, top_p=0.9)
    same = smax.sampling_filter(x, 0.8, top_k=10, top_p=0.9, min_p=0.0, min_tokens_to_keep=1,
                                top_k_ties="exact")
    assert torch.equal(base, same)
    for fn in (smax.sample, smax.sampling_filter):
        for word in ("min_p", "min_tokens_to_keep", "top_k_ties", "MinPLogitsWarper"):
            assert word in fn.__doc__, (fn.__name__, word)

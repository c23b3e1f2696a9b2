"""smax.integrations.transformers on tiny randomly initialised models (no
download): the patched model (smax attention + fused linear cross-entropy)
against its eager twin with the same weights.

Bounds (float32 models, values O(1)): logits, loss and every parameter
gradient agree to rtol 1e-4 with atol 1e-5 (gradients: atol 1e-5 times the
tensor's largest eager gradient). Why that much and no more: both compute in
float32, the only differences are summation orders (smax's blocked GEMM
tiles and online softmax vs. PyTorch's matmul + softmax) and smax's exp
(<= 2 ulp); through 2 layers these give differences of a few 1e-7 (measured
on Llama, Qwen2, Qwen2 with a sliding window, Gemma 2, Cohere and Granite:
logits <= 3e-7 on |logits| <= 0.76, loss <= 5e-7, gradients <= 8e-7 of
the tensor's largest),
so the bounds hold with a >= 10x margin while a real error (a wrong mask,
shift or scale) moves values by 1e-2 or more. Training: 5 AdamW steps (lr
1e-2) keep the two loss curves within 1e-4 relative at every step
(measured: 5e-7 after 5 steps, loss 6.89 -> 4.64 on one repeated batch).
bfloat16 has its own bounds (test_bfloat16_model_within_bf16_rounding).
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face integration needs transformers "
    "(pip install transformers; CI installs it)")

import smax.integrations.transformers as sit  # noqa: E402

VOCAB, B, L = 1000, 2, 24
TOL = dict(rtol=1e-4, atol=1e-5)


def _config(kind):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    if kind == "llama":
        return transformers.LlamaConfig(**common)
    if kind == "qwen2":
        return transformers.Qwen2Config(**common)
    if kind == "qwen2-sliding":  # layer 1 attends to an 8-token window (a mask from transformers)
        return transformers.Qwen2Config(**common, use_sliding_window=True, sliding_window=8,
                                        max_window_layers=1)
    if kind == "gemma2":  # attention softcap, final-logit softcap, sliding layers, tied head
        return transformers.Gemma2Config(**common, head_dim=16, sliding_window=8,
                                         attn_logit_softcapping=20.0,
                                         final_logit_softcapping=10.0)
    if kind == "cohere":  # the head multiplies the logits by logit_scale
        return transformers.CohereConfig(**common, logit_scale=0.5, bos_token_id=1,
                                         eos_token_id=2, pad_token_id=0)
    if kind == "granite":  # the head divides the logits by logits_scaling
        return transformers.GraniteConfig(**common, logits_scaling=4.0)
    raise AssertionError(kind)


def _pair(kind, **apply_kwargs):
    """(eager model, patched copy with the same weights), float32, eval mode."""
    torch.manual_seed(0)
    cfg = _config(kind)
    cfg._attn_implementation = "eager"
    model_cls = transformers.AutoModelForCausalLM.from_config
    eager = model_cls(cfg).eval()
    patched = sit.apply(copy.deepcopy(eager), **apply_kwargs)
    return eager, patched


def _batch(seed=1, pad=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.long)
    if pad:  # right padding of the second sequence, as training batches are padded
        mask[1, -5:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[0, 3] = -100  # and one ignored target mid-sequence
    return ids, mask, labels


def _close_grads(eager, patched):
    for (name, a), (_, b) in zip(eager.named_parameters(), patched.named_parameters()):
        assert b.grad is not None, name
        scale = float(a.grad.abs().max())
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5 * max(scale, 1e-3),
                                   msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen2-sliding", "gemma2", "cohere",
                                  "granite"])
def test_logits_loss_and_gradients_match_eager(kind):
    eager, patched = _pair(kind)
    assert patched.config._attn_implementation == "smax"
    ids, mask, labels = _batch()
    ref = eager(ids, attention_mask=mask, labels=labels)
    out = patched(ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(out.logits, ref.logits, **TOL)
    torch.testing.assert_close(out.loss, ref.loss, **TOL)
    ref.loss.backward()
    out.loss.backward()
    _close_grads(eager, patched)


def test_bfloat16_model_within_bf16_rounding():
    # bfloat16 (8 bits of mantissa, u = 2^-9): eager rounds Q K^T, the
    # probabilities and the logits to bf16, smax computes attention and the
    # loss in float32 from the bf16 operands and rounds once, so the two
    # differ by the eager path's roundings: measured logits 0.0039 (one bf16
    # ulp at |logits| ~ 0.7), loss 2e-5 relative (both float32: transformers
    # upcasts its logits, smax widens the hidden states), gradients 1.3% of
    # the tensor's largest. Bounds: 4 ulps, 1e-3 relative, 5%.
    eager, patched = _pair("llama")
    eager, patched = eager.to(torch.bfloat16), patched.to(torch.bfloat16)
    ids, mask, labels = _batch()
    ref = eager(ids, attention_mask=mask, labels=labels)
    out = patched(ids, attention_mask=mask, labels=labels)
    assert out.loss.dtype == ref.loss.dtype == torch.float32
    assert out.logits.dtype == torch.bfloat16
    torch.testing.assert_close(out.logits.float(), ref.logits.float(), rtol=0, atol=1.6e-2)
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-3, atol=0)
    ref.loss.backward()
    out.loss.backward()
    for (name, a), (_, b) in zip(eager.named_parameters(), patched.named_parameters()):
        scale = float(a.grad.float().abs().max())
        assert float((a.grad.float() - b.grad.float()).abs().max()) <= 0.05 * scale, name


def test_left_padding_logits_match_on_real_tokens():
    # A left-padded query row sees no key: eager averages over the masked
    # keys (its float mask is finite), smax gives 0 (SDPA's convention). Only
    # those pad rows differ; the real tokens' logits agree.
    eager, patched = _pair("llama")
    ids, mask, _ = _batch(pad=False)
    mask[1, :5] = 0
    keep = mask.bool()
    torch.testing.assert_close(patched(ids, attention_mask=mask).logits[keep],
                               eager(ids, attention_mask=mask).logits[keep], **TOL)


def test_loss_path_never_builds_logits_in_training():
    eager, patched = _pair("llama")
    seen = []
    patched.lm_head.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    patched.train()
    ids, mask, labels = _batch()
    out = patched(ids, attention_mask=mask, labels=labels)
    assert out.logits is None and seen == [(B, 0, VOCAB)]  # an empty lm_head call
    out.loss.backward()
    assert patched.lm_head.weight.grad is not None
    # return_logits=True: logits in the output, the loss still fused
    sit.apply(patched, return_logits=True)
    out = patched(ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (B, L, VOCAB)
    torch.testing.assert_close(out.loss, eager(ids, attention_mask=mask, labels=labels).loss,
                               **TOL)


def test_adamw_training_tracks_eager():
    eager, patched = _pair("qwen2")
    curves = []
    for model in (eager, patched):
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        ids, mask, labels = _batch()
        for _ in range(5):
            loss = model(ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(losses)
    torch.testing.assert_close(torch.tensor(curves[1]), torch.tensor(curves[0]), rtol=1e-4,
                               atol=0)
    assert curves[1][-1] < curves[1][0]


def test_hf_loss_options_num_items_shift_labels_return_dict():
    eager, patched = _pair("llama")
    ids, mask, labels = _batch(pad=False)
    n = torch.tensor(17)
    torch.testing.assert_close(patched(ids, labels=labels, num_items_in_batch=n).loss,
                               eager(ids, labels=labels, num_items_in_batch=n).loss, **TOL)
    shifted = torch.roll(labels, 1, dims=1)
    torch.testing.assert_close(patched(ids, labels=labels, shift_labels=shifted).loss,
                               eager(ids, labels=labels, shift_labels=shifted).loss, **TOL)
    tup = patched(ids, labels=labels, return_dict=False)
    assert isinstance(tup, tuple) and tup[0].ndim == 0 and tup[1].shape == (B, L, VOCAB)
    assert patched(ids).loss is None  # no labels: the model's own forward
    positional = patched(ids, None, None, None, None, labels)  # labels by position
    torch.testing.assert_close(positional.loss, eager(ids, labels=labels).loss, **TOL)


def test_generate_with_kv_cache_matches_eager():
    eager, patched = _pair("llama")
    ids = _batch()[0][:1, :6]
    with torch.no_grad():
        ref = eager.generate(ids, max_new_tokens=6, do_sample=False)
        out = patched.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(out, ref)


def test_other_normalizer_trains_and_attention_only_patch():
    _, patched = _pair("llama", normalizer="softpick", loss=None)
    ids, mask, labels = _batch()
    out = patched(ids, attention_mask=mask, labels=labels)
    out.loss.backward()  # transformers' own loss over smax softpick attention
    assert torch.isfinite(out.loss) and "forward" not in vars(patched)
    assert all(torch.isfinite(p.grad).all() for p in patched.parameters() if p.grad is not None)


def test_unapply_and_errors():
    eager, patched = _pair("llama")
    sit.unapply(patched)
    assert patched.config._attn_implementation == "eager" and "forward" not in vars(patched)
    with pytest.raises(ValueError, match="attention must be 'smax' or None"):
        sit.apply(patched, attention="flash")
    with pytest.raises(ValueError, match="normalizer must be one of"):
        sit.apply(patched, normalizer="sparsemax")
    with pytest.raises(TypeError, match="PreTrainedModel"):
        sit.apply(torch.nn.Linear(2, 2))
    cfg = _config("llama")
    cfg.attention_dropout = 0.1
    model = sit.apply(transformers.AutoModelForCausalLM.from_config(cfg)).train()
    with pytest.raises(ValueError, match="dropout=0.1 is not supported"):
        model(_batch()[0])


def test_deepcopy_of_patched_model_uses_the_copys_weights():
    # EMA / reference-model copies: the copy's forward must run the copy's decoder and head
    eager, patched = _pair("llama")
    ids, mask, labels = _batch()
    before = patched(ids, attention_mask=mask, labels=labels).loss
    clone = copy.deepcopy(patched)
    assert clone.forward.model is clone and patched.forward.model is patched
    with torch.no_grad():
        for p in clone.parameters():
            p.zero_()
    # all-zero weights: uniform logits, the loss is log(VOCAB)
    torch.testing.assert_close(clone(ids, attention_mask=mask, labels=labels).loss,
                               torch.log(torch.tensor(float(VOCAB))), **TOL)
    torch.testing.assert_close(patched(ids, attention_mask=mask, labels=labels).loss, before,
                               rtol=0, atol=0)
    torch.testing.assert_close(before, eager(ids, attention_mask=mask, labels=labels).loss,
                               **TOL)


def test_resize_token_embeddings_then_loss_uses_the_new_head():
    eager, patched = _pair("llama")
    for model in (eager, patched):
        model.resize_token_embeddings(VOCAB + 24, mean_resizing=False)
        with torch.no_grad():  # the same new rows in both
            torch.manual_seed(3)
            model.lm_head.weight[VOCAB:].normal_()
    ids, mask, labels = _batch()
    labels = labels.masked_fill(labels == 5, VOCAB + 20)  # a target only the new head has
    labels[0, 7] = VOCAB + 20
    out = patched(ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(out.loss, eager(ids, attention_mask=mask, labels=labels).loss,
                               **TOL)
    out.loss.backward()
    assert patched.lm_head.weight.grad.shape == (VOCAB + 24, 64)
    assert patched.lm_head.weight.grad[VOCAB + 20].abs().sum() > 0


def test_torch_save_load_round_trip_of_a_patched_model():
    import io
    eager, patched = _pair("llama")
    buf = io.BytesIO()
    torch.save(patched, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded.forward.model is loaded and loaded.config._attn_implementation == "smax"
    ids, mask, labels = _batch()
    torch.testing.assert_close(loaded(ids, attention_mask=mask, labels=labels).loss,
                               patched(ids, attention_mask=mask, labels=labels).loss,
                               rtol=0, atol=0)
    sit.unapply(loaded)
    assert "forward" not in vars(loaded) and loaded.config._attn_implementation == "eager"


def test_learnable_tensor_attention_options_are_refused():
    _, patched = _pair("llama")
    s = torch.nn.Parameter(torch.tensor(0.5))
    with pytest.raises(TypeError, match=r"attention_options\['ssmax_s'\] is a tensor that "
                                        "requires grad"):
        sit.apply(patched, normalizer="ssmax", attention_options={"ssmax_s": s})
    assert patched._smax_patch  # the earlier patch is left as it was
    sit.apply(patched, normalizer="ssmax", attention_options={"ssmax_s": 0.5})  # a float is fine
    assert torch.isfinite(patched(*_batch()[:1], labels=_batch()[2]).loss)

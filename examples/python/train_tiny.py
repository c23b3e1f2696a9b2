#!/usr/bin/env python3
"""Train tiny models on synthetic data with smax losses and smax attention.

First with `smax.torch.cross_entropy` (a drop-in for F.cross_entropy; here
with label smoothing and ignored targets), then with the sparsemax loss
(`smax.torch.SparsemaxLoss`, the entmax package's module) whose predictions
are sparse distributions. Then a one-layer attention model
(`smax.torch.attention`, softmax and softpick normalisers, trained with
`smax.torch.cross_entropy`) that must find, in a sequence of tokens, the
one token that carries a flag. Checks the loss, attention and their gradients
against PyTorch once, and asserts that the loss goes down and the models
learn. Runs in a few seconds on a CPU:

    pip install .            # from the repository root
    python examples/python/train_tiny.py
"""
import torch

import smax
import smax.torch as st


class TinyMLP(torch.nn.Module):
    def __init__(self, n_in: int, n_hidden: int, n_classes: int) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(n_in, n_hidden)
        self.out = torch.nn.Linear(n_hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))  # logits


def run_steps(opt, batch_loss, steps, every):
    """`steps` optimizer steps on batch_loss() (a fresh batch each call),
    printing the loss every `every` steps and at the last; returns the losses."""
    losses = []
    for step in range(steps):
        loss = batch_loss()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % every == 0 or step == steps - 1:
            print(f"  step {step:3d}  loss {loss.item():.4f}")
    return losses


def train(loss_fn, x, y, steps=200, seed=0):
    torch.manual_seed(seed)
    model = TinyMLP(x.shape[1], 64, int(y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def batch_loss():
        idx = torch.randint(0, x.shape[0], (128,))
        return loss_fn(model(x[idx]), y[idx])

    return model, run_steps(opt, batch_loss, steps, every=50)


class TinyAttention(torch.nn.Module):
    """Token + position + flag embeddings -> one attention layer (one learned
    query per head reads the whole sequence) -> linear -> logits over the
    vocab."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int, normalizer: str) -> None:
        super().__init__()
        self.heads, self.normalizer = heads, normalizer
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(0.5 * torch.randn(length, dim))
        self.flag = torch.nn.Parameter(0.5 * torch.randn(dim))
        self.query = torch.nn.Parameter(0.5 * torch.randn(heads, 1, dim // heads))
        self.kv = torch.nn.Linear(dim, 2 * dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
        b, length = tokens.shape
        h = self.tok(tokens) + self.pos + flags[..., None] * self.flag  # [B, L, dim]
        k, v = self.kv(h).chunk(2, dim=-1)
        # [B, L, dim] -> [B, heads, L, dim/heads]: a strided view, no copy.
        k = k.view(b, length, self.heads, -1).transpose(1, 2)
        v = v.view(b, length, self.heads, -1).transpose(1, 2)
        q = self.query.expand(b, -1, -1, -1)
        o = st.attention(q, k, v, normalizer=self.normalizer)  # [B, heads, 1, dim/heads]
        return self.out(o.reshape(b, -1))


def flag_task(n: int, vocab: int, length: int, generator: torch.Generator):
    """Random token sequences, one position flagged; the label is the
    flagged token."""
    tokens = torch.randint(0, vocab, (n, length), generator=generator)
    where = torch.randint(0, length, (n,), generator=generator)
    flags = torch.zeros(n, length)
    flags[torch.arange(n), where] = 1.0
    return tokens, flags, tokens[torch.arange(n), where]


def train_attention(normalizer: str) -> None:
    g = torch.Generator().manual_seed(1)
    vocab, length = 12, 10
    x, f, y = flag_task(4096, vocab, length, g)
    torch.manual_seed(0)
    model = TinyAttention(vocab, length, 32, 4, normalizer)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def batch_loss():
        idx = torch.randint(0, x.shape[0], (64,), generator=g)
        return st.cross_entropy(model(x[idx], f[idx]), y[idx])

    losses = run_steps(opt, batch_loss, 120, every=40)
    with torch.no_grad():
        acc = (model(x, f).argmax(-1) == y).float().mean().item()
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    print(f"  mean loss: first 10 steps {first:.4f}, last 10 steps {last:.4f}; "
          f"train accuracy {acc:.3f}")
    assert last < 0.5 * first, "the loss did not decrease"
    assert acc > 0.8, "the attention model did not learn"


def check_attention_against_sdpa() -> None:
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g, requires_grad=True) for _ in range(3))
    ref_qkv = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    ours = st.attention(q, k, v, is_causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(*ref_qkv, is_causal=True)
    dout = torch.randn(ours.shape, generator=g)
    ours.backward(dout)
    ref.backward(dout)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip((q, k, v), ref_qkv):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def main() -> None:
    torch.manual_seed(0)
    n, n_in, n_classes = 2048, 16, 10
    # Synthetic, learnable data: labels from a random linear teacher.
    teacher = torch.randn(n_in, n_classes)
    x = torch.randn(n, n_in)
    y = (x @ teacher).argmax(dim=-1)
    y_ignored = y.clone()
    y_ignored[::17] = -100  # a few unlabelled examples: ignore_index

    # smax's cross-entropy agrees with PyTorch's, values and gradients.
    logits = torch.randn(64, n_classes, requires_grad=True)
    ref_logits = logits.detach().clone().requires_grad_(True)
    ours = st.cross_entropy(logits, y_ignored[:64], label_smoothing=0.1)
    ref = torch.nn.functional.cross_entropy(ref_logits, y_ignored[:64], label_smoothing=0.1)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits.grad, ref_logits.grad, rtol=1e-5, atol=1e-6)

    runs = {
        "cross_entropy (label_smoothing=0.1)":
            lambda z, t: st.cross_entropy(z, t, ignore_index=-100, label_smoothing=0.1),
        "sparsemax loss": st.SparsemaxLoss(ignore_index=-100, reduction="mean"),
    }
    for name, loss_fn in runs.items():
        print(name)
        model, losses = train(loss_fn, x, y_ignored)
        with torch.no_grad():
            z = model(x)
            acc = (z.argmax(-1) == y).float().mean().item()
            p = st.sparsemax(z) if "sparsemax" in name else st.softmax(z)
            support = (p > 0).sum(-1).float().mean().item()
        first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
        print(f"  mean loss: first 10 steps {first:.4f}, last 10 steps {last:.4f}; "
              f"train accuracy {acc:.3f}; mean support {support:.1f} of {n_classes} classes")
        assert last < 0.5 * first, "the loss did not decrease"
        assert acc > 0.8, "the model did not learn"

    check_attention_against_sdpa()
    for normalizer in ("softmax", "softpick"):
        print(f"attention model, normalizer={normalizer}, smax cross_entropy")
        train_attention(normalizer)
    print(f"smax {smax.__version__} on {smax.info()['active_target']}: ok")


if __name__ == "__main__":
    main()

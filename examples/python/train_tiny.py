#!/usr/bin/env python3
"""Train a tiny 2-layer MLP classifier on synthetic data with smax losses.

First with `smax.torch.cross_entropy` (a drop-in for F.cross_entropy; here
with label smoothing and ignored targets), then with the sparsemax loss
(`smax.torch.SparsemaxLoss`, the entmax package's module) whose predictions
are sparse distributions. Checks the loss and its gradient against PyTorch
once, and asserts that the loss goes down and the model learns. Runs in a
few seconds on a CPU:

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


def train(loss_fn, x, y, steps=200, seed=0):
    torch.manual_seed(seed)
    model = TinyMLP(x.shape[1], 64, int(y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, x.shape[0], (128,))
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            print(f"  step {step:3d}  loss {loss.item():.4f}")
    return model, losses


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
    print(f"smax {smax.__version__} on {smax.info()['active_target']}: ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Train a tiny 2-layer MLP classifier on synthetic data with smax.

The model's output layer is `smax.torch.log_softmax` (gradients through
smax's backward kernel) followed by `nll_loss`: together, cross-entropy.
Asserts that the loss goes down and that smax's log-softmax matches
torch's. Runs in a couple of seconds on a CPU:

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
        logits = self.out(torch.relu(self.hidden(x)))
        return st.log_softmax(logits, dim=-1)  # log-probabilities


def main() -> None:
    torch.manual_seed(0)
    n, n_in, n_classes = 2048, 16, 10
    # Synthetic, learnable data: labels from a random linear teacher.
    teacher = torch.randn(n_in, n_classes)
    x = torch.randn(n, n_in)
    y = (x @ teacher).argmax(dim=-1)

    model = TinyMLP(n_in, 64, n_classes)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(200):
        idx = torch.randint(0, n, (128,))
        loss = torch.nn.functional.nll_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == 199:
            print(f"step {step:3d}  loss {loss.item():.4f}")

    with torch.no_grad():
        logp = model(x)
        acc = (logp.argmax(-1) == y).float().mean().item()
        ref = torch.log_softmax(model.out(torch.relu(model.hidden(x))), -1)
        torch.testing.assert_close(logp, ref, rtol=1e-5, atol=1e-5)
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    print(f"mean loss: first 10 steps {first:.4f}, last 10 steps {last:.4f}; "
          f"train accuracy {acc:.3f}; smax {smax.__version__} on {smax.info()['active_target']}")
    assert last < 0.5 * first, "the loss did not decrease"
    assert acc > 0.8, "the model did not learn"
    print("ok")


if __name__ == "__main__":
    main()

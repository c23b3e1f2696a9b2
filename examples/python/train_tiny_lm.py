#!/usr/bin/env python3
"""Train a tiny Hugging Face causal LM a few steps, eager and patched with smax.

The same randomly initialised LlamaForCausalLM (no download) is trained with
AdamW on a synthetic language (each token determines the next one), once as
transformers builds it (eager attention, logits + ForCausalLMLoss) and once
after ``smax.integrations.transformers.apply(model)`` (smax attention, fused
linear cross-entropy: the [tokens, vocab] logits are never built). Prints,
side by side: the loss at every step, tokens/s of a training step, and the
peak memory of the loss step alone (lm_head + loss, forward and backward, on
the same hidden states) and of a whole training step. Checks that the two
loss curves agree and go down.

Each variant runs in its own process, so that the peak resident set size
(``resource.getrusage``'s ru_maxrss) of one does not hide the other's; a
peak is reported as ru_maxrss after the measured work minus the resident
size just before it (what the work added at its peak).

    pip install . transformers        # from the repository root
    python examples/python/train_tiny_lm.py            # vocab 32000, 4 x 256 tokens
    python examples/python/train_tiny_lm.py --quick    # a few seconds (CI)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def rss_mb() -> float:
    """Current resident set size in MiB (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux: KiB units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batch(args, torch):
    """Synthetic language: token i+1 = (7 * token i + 3) mod V from a random
    start; labels = ids (the model shifts them)."""
    start = torch.randint(0, args.vocab, (args.batch, 1),
                          generator=torch.Generator().manual_seed(1))
    ids = start.expand(-1, args.seq).clone()
    for i in range(1, args.seq):
        ids[:, i] = (7 * ids[:, i - 1] + 3) % args.vocab
    return ids, ids.clone()


def worker(variant: str, args) -> dict:
    import torch
    import transformers

    if args.threads:
        import smax
        torch.set_num_threads(args.threads)
        smax.set_max_threads(args.threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                                   intermediate_size=2 * args.hidden, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=args.seq)
    cfg._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    if variant == "smax":
        import smax.integrations.transformers as sit
        sit.apply(model)  # attention="smax", loss="linear_cross_entropy"
    model.train()
    ids, labels = batch(args, torch)

    # 1. The loss step alone on fixed hidden states: lm_head + loss, forward + backward.
    with torch.no_grad():
        hidden = model.model(ids).last_hidden_state
    hidden.requires_grad_(True)
    head = model.lm_head
    before = rss_mb()
    if variant == "smax":
        from smax.integrations.transformers import causal_lm_loss
        loss = causal_lm_loss(hidden, head.weight, labels)
    else:
        loss = model.loss_function(logits=head(hidden), labels=labels, vocab_size=args.vocab)
    loss.backward()
    loss_peak = max(0.0, peak_mb() - before)
    del loss, hidden
    model.zero_grad(set_to_none=True)

    # 2. Training steps (AdamW), the whole model, on the one batch (the loss
    # falls as the model learns it).
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, times = [], []
    before = rss_mb()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = model(ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    step_peak = max(0.0, peak_mb() - before)
    timed = times[1:] or times  # the first step warms up (allocations, thread pools)
    return {"variant": variant, "losses": losses,
            "tokens_per_s": args.batch * args.seq * len(timed) / sum(timed),
            "loss_step_peak_mb": loss_peak, "train_step_peak_mb": step_peak,
            "logits_mb": args.batch * args.seq * args.vocab * 4 / 2**20}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=0,
                   help="torch and smax threads (0: their defaults)")
    p.add_argument("--quick", action="store_true", help="vocab 4000, 2 x 64 tokens, 4 steps")
    p.add_argument("--worker", choices=["eager", "smax"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.vocab, args.seq, args.batch, args.steps = 4000, 64, 2, 4
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return 0

    try:
        import transformers  # noqa: F401
    except ImportError:
        print("train_tiny_lm.py needs transformers: pip install transformers", file=sys.stderr)
        return 2
    flags = [f"--vocab={args.vocab}", f"--seq={args.seq}", f"--batch={args.batch}",
             f"--hidden={args.hidden}", f"--steps={args.steps}", f"--threads={args.threads}"]
    res = {}
    for variant in ("eager", "smax"):
        out = subprocess.run([sys.executable, __file__, "--worker", variant] + flags,
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            sys.stderr.write(out.stdout + out.stderr)
            return 1
        res[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    e, s = res["eager"], res["smax"]
    print(f"tiny Llama (2 layers, hidden {args.hidden}, vocab {args.vocab}), "
          f"{args.batch} x {args.seq} tokens per step, AdamW; f32 logits would be "
          f"{e['logits_mb']:.0f} MiB; threads: {args.threads or 'default'}")
    print(f"{'':24s}{'eager (HF)':>14s}{'smax':>14s}")
    for i, (a, b) in enumerate(zip(e["losses"], s["losses"])):
        print(f"{'loss, step ' + str(i):24s}{a:14.4f}{b:14.4f}")
    print(f"{'tokens/s (train step)':24s}{e['tokens_per_s']:14.0f}{s['tokens_per_s']:14.0f}")
    print(f"{'peak MiB, loss step':24s}{e['loss_step_peak_mb']:14.1f}"
          f"{s['loss_step_peak_mb']:14.1f}")
    print(f"{'peak MiB, train steps':24s}{e['train_step_peak_mb']:14.1f}"
          f"{s['train_step_peak_mb']:14.1f}")
    worst = max(abs(a - b) / abs(a) for a, b in zip(e["losses"], s["losses"]))
    print(f"largest relative loss difference: {worst:.1e}")
    assert worst < 1e-3, "the smax-patched model does not track the eager one"
    assert s["losses"][-1] < s["losses"][0], "the loss did not go down"
    return 0


if __name__ == "__main__":
    sys.exit(main())

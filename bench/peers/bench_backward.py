#!/usr/bin/env python3
"""bench/peers/bench_backward.py: softmax_backward and log_softmax_backward,
smax against PyTorch's CPU kernels, in one process, interleaved
(docs/benchmarking.md, "Batched rows at one sweep").

    bench_backward.py [--threads N] [--reps R] [--cases RxC,...] [--streaming MODE]

Per case and op: y from the forward (torch), dy uniform on [-1, 1), dx a
preallocated output. Each round times every contender (a rotated order),
enough back-to-back calls for >= 20 ms, the mean per call is the round's
sample; reported: the median over rounds in ns per element. Contenders:
  smax      smax.softmax_backward / log_softmax_backward(y, dy, out=dx)
  torch     torch._softmax_backward_data / _log_softmax_backward_data
  add       torch.add(y, dy, out=dx): two reads and one write with regular
            stores, the op's memory floor as PyTorch's own loop reaches it
The smax result is checked against torch's (max |diff| / (1 + |torch|)).
--streaming sets smax's streaming-store choice (on / off / auto; default:
leave it to the measurement, which the first large calls make).
"""
import argparse
import statistics
import time

import torch

import smax
from smax import _smax as _C


def time_calls(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def calibrate(fn, min_s=0.02):
    calls = 1
    while True:
        if time_calls(fn, calls) * calls >= min_s:
            return calls
        calls *= 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--cases", default="256x32000,64x32000,1000x1000,2000x4000")
    ap.add_argument("--streaming", choices=("on", "off", "auto"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.streaming:
        _C.set_streaming_stores(args.streaming)
    g = torch.Generator().manual_seed(1)
    print(f"torch {torch.__version__}, threads {args.threads}, smax {smax.info()['active_target']}")
    for case in args.cases.split(","):
        rows, cols = (int(v) for v in case.split("x"))
        x = torch.rand(rows, cols, generator=g) * 16 - 8
        dy = torch.rand(rows, cols, generator=g) * 2 - 1
        for op in ("softmax_backward", "log_softmax_backward"):
            log = op.startswith("log")
            y = torch.log_softmax(x, -1) if log else torch.softmax(x, -1)
            dx = torch.empty_like(y)
            ref = torch.empty_like(y)
            if log:
                def peer():
                    return torch._log_softmax_backward_data(dy, y, 1, torch.float32)
                def ours():
                    smax.log_softmax_backward(y, dy, threads=args.threads, out=dx)
            else:
                def peer():
                    return torch._softmax_backward_data(dy, y, 1, torch.float32)
                def ours():
                    smax.softmax_backward(y, dy, threads=args.threads, out=dx)
            def floor():
                torch.add(y, dy, out=ref)
            ours()
            want = peer()
            err = ((dx - want).abs() / (1 + want.abs())).max().item()
            fns = {"smax": ours, "torch": peer, "add": floor}
            calls = {k: calibrate(f) for k, f in fns.items()}
            samples = {k: [] for k in fns}
            names = list(fns)
            for rep in range(args.reps):
                for j in range(len(names)):
                    k = names[(j + rep) % len(names)]
                    samples[k].append(time_calls(fns[k], calls[k]))
            ns = {k: statistics.median(v) * 1e9 / (rows * cols) for k, v in samples.items()}
            print(f"{op:21s} {case:10s} smax {ns['smax']:.3f}  torch {ns['torch']:.3f}  "
                  f"add-floor {ns['add']:.3f} ns/elem | smax/torch {ns['torch'] / ns['smax']:.2f}x, "
                  f"smax/floor {ns['smax'] / ns['add']:.2f}  err {err:.1e}")
    print(f"smax streaming stores: {_C.streaming_stores()}")


if __name__ == "__main__":
    main()

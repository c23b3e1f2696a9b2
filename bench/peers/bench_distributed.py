"""smax.distributed (vocabulary-parallel ops over torch.distributed) against
PyTorch's tensor-parallel loss on CPU, on gloo ranks of one machine.

Usage: python3 bench/peers/bench_distributed.py [--ranks 2] [--tokens 4096]
       [--vocab 128256] [--hidden 2048] [--reps 3] [--skip-lce] [--quick]

Each rank runs on one core (torch.set_num_threads(1), smax threads=1) and
holds a [tokens, vocab / ranks] float32 logit shard. Measured per rank
(median of --reps, after a warm-up):
* cross_entropy forward + backward: smax.distributed.cross_entropy (fused
  gradient) against torch's loss_parallel() (F.cross_entropy on a DTensor
  sharded Shard(-1) on a 1-D mesh, the same shards), and against smax's
  single-process cross_entropy on the rank's shard alone (the local work,
  targets folded into the shard): goal smax.distributed <= 1.3x that.
* bytes each rank sends per token in smax's collectives (a counting
  Communicator; the handshake's fixed header is excluded, as it does not
  grow with the tokens): goal <= 3 floats (12 bytes) per rank for plain CE.
* linear cross-entropy (hidden [tokens, D] replicated, weight shard
  [vocab / ranks, D]) forward + backward: the peak extra resident memory
  (VmHWM after resetting it through /proc/self/clear_refs, minus the RSS
  before the call and minus the gradients it returns) against the rank's
  logit shard [tokens, vocab / ranks] float32: goal < 10%. Timed once.
Prints a markdown table (rank 0 and rank 1 rows).
"""
import argparse
import datetime
import gc
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def timeit(fn, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def rss_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rank_main(rank, args, port, queue):
    torch.set_num_threads(1)
    import smax
    import smax.distributed as sd
    smax.set_max_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks, timeout=datetime.timedelta(seconds=600))
    P, N, V = args.ranks, args.tokens, args.vocab
    sizes = [V // P + (1 if k < V % P else 0) for k in range(P)]  # torch.chunk's split for even V
    n = sizes[rank]
    off = sum(sizes[:rank])
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, V, (N,), generator=g)
    row = {"rank": rank, "shard": n}

    # The counting communicator: bytes this rank sends (allgather: its block;
    # alltoall: the P - 1 blocks for the others), per call.
    class Counting(sd.TorchCommunicator):
        def __init__(self):
            super().__init__()
            self.calls = []

        def allgather(self, send, recv):
            self.calls.append(send.size)
            super().allgather(send, recv)

        def alltoall(self, send, recv):
            self.calls.append(send.size * (self.size() - 1) // self.size())
            super().alltoall(send, recv)

    # ---- cross-entropy fwd + bwd ------------------------------------------------------
    x = torch.randn(N, n, generator=torch.Generator().manual_seed(1 + rank)) * 2
    comm = Counting()

    def smax_dist():
        xx = x.detach().requires_grad_()
        sd.cross_entropy(xx, target, group=comm, threads=1).backward()
        return xx.grad

    local_target = (target - off).remainder(max(n, 1))

    def smax_local():
        import smax.torch as st
        xx = x.detach().requires_grad_()
        st.cross_entropy(xx, local_target, threads=1).backward()
        return xx.grad

    try:
        smax_dist()
    except NotImplementedError as e:  # a build without the vocab-parallel cross_entropy
        row["ce"] = f"not in this build: {e}"
    if "ce" not in row:
        cross_entropy_rows(row, args, comm, smax_dist, smax_local, x, target, N, P)
    del x
    gc.collect()
    lce_memory(row, args, sd, target, N, n, rank)
    queue.put(row)
    dist.barrier()
    dist.destroy_process_group()


def cross_entropy_rows(row, args, comm, smax_dist, smax_local, x, target, N, P):
    row["smax_dist_ms"] = timeit(smax_dist, args.reps)
    # bytes per token: one call's collectives after the handshake (the first
    # collective of every op: a fixed-size header, whatever the tokens)
    comm.calls.clear()
    smax_dist()
    row["collectives"] = len(comm.calls)
    row["header_bytes"] = comm.calls[0]
    row["bytes_per_token"] = sum(comm.calls[1:]) / N
    row["smax_local_ms"] = timeit(smax_local, args.reps)
    gc.collect()

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel
    mesh = init_device_mesh("cpu", (P,))

    def torch_lp():
        dx = DTensor.from_local(x.detach(), mesh, [Shard(-1)], run_check=False).requires_grad_()
        with loss_parallel():
            torch.nn.functional.cross_entropy(dx, target).backward()
        return dx.grad

    try:
        row["torch_lp_ms"] = timeit(torch_lp, args.reps)
    except Exception as e:  # noqa: BLE001 (reported in the table)
        row["torch_lp_ms"] = f"failed: {type(e).__name__}: {e}"


def lce_memory(row, args, sd, target, N, n, rank):
    if not args.skip_lce:
        D = args.hidden
        hidden = (torch.randn(N, D, generator=torch.Generator().manual_seed(7)) * 0.05
                  ).requires_grad_()
        w = (torch.randn(n, D, generator=torch.Generator().manual_seed(8 + rank)) * 0.05
             ).requires_grad_()
        gc.collect()
        dist.barrier()
        before = rss_bytes("VmRSS")
        reset_hwm()
        t0 = time.perf_counter()
        try:
            sd.linear_cross_entropy(hidden, w, target, threads=1).backward()
            row["lce_s"] = time.perf_counter() - t0
            peak = rss_bytes("VmHWM")
            grads = hidden.grad.numel() * 4 + w.grad.numel() * 4
            logits = N * n * 4
            row["lce_extra_mib"] = (peak - before - grads) / 2**20
            row["lce_extra_with_grads_mib"] = (peak - before) / 2**20
            row["lce_logits_mib"] = logits / 2**20
        except NotImplementedError as e:
            row["lce_s"] = f"not in this build: {e}"


def fmt(v, spec=".1f"):
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip-lce", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.vocab, args.hidden, args.reps = 256, 8000, 256, 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=rank_main, args=(r, args, port, queue)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit(f"bench_distributed: a rank failed (exit codes {[p.exitcode for p in procs]})")
    rows = sorted((queue.get() for _ in procs), key=lambda r: r["rank"])
    import smax
    print(f"cross_entropy fwd+bwd, {args.tokens} x {args.vocab} float32 logits over {args.ranks} "
          f"gloo ranks (1 thread each; smax target {smax.info()['active_target']}; "
          f"{os.cpu_count()} cores, shared machine: read ratios, not absolutes)\n")
    print("| rank | shard | smax.distributed ms | smax 1-process on the shard ms | ratio (goal <= 1.3) "
          "| torch loss_parallel ms | loss_parallel / smax.distributed | collectives (header bytes) | bytes sent / token (goal <= 12) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "ce" in r:
            print(f"| {r['rank']} | {r['shard']} | {r['ce']} | | | | | | |")
            continue
        lp = r["torch_lp_ms"]
        print(f"| {r['rank']} | {r['shard']} | {fmt(r['smax_dist_ms'])} | {fmt(r['smax_local_ms'])} | "
              f"{fmt(r['smax_dist_ms'] / r['smax_local_ms'], '.2f')} | {fmt(lp)} | "
              f"{fmt(lp / r['smax_dist_ms'], '.2f') if isinstance(lp, float) else '-'} | "
              f"{r['collectives']} ({r['header_bytes']}) | {fmt(r['bytes_per_token'], '.2f')} |")
    if not args.skip_lce:
        print(f"\nlinear_cross_entropy fwd+bwd, N={args.tokens}, D={args.hidden}, V={args.vocab} over "
              f"{args.ranks} ranks: peak extra resident memory per rank (VmHWM - RSS before - "
              f"the returned gradients) vs its float32 logit shard\n")
        print("| rank | logits shard MiB | extra MiB | extra / logits (goal < 10%) "
              "| extra incl. gradients MiB | time s |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            if isinstance(r.get("lce_s"), str):
                print(f"| {r['rank']} | - | - | - | - | {r['lce_s']} |")
                continue
            print(f"| {r['rank']} | {fmt(r['lce_logits_mib'])} | {fmt(r['lce_extra_mib'])} | "
                  f"{fmt(100 * r['lce_extra_mib'] / r['lce_logits_mib'], '.1f')}% | "
                  f"{fmt(r['lce_extra_with_grads_mib'])} | {fmt(r['lce_s'])} |")


if __name__ == "__main__":
    main()

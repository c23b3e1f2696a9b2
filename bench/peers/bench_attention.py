"""smax.attention vs torch.nn.functional.scaled_dot_product_attention on CPU.

Usage: python3 bench/peers/bench_attention.py [--threads 1]
       [--shapes 1,8,1024,64 ...] [--reps 5]
       python3 bench/peers/bench_attention.py --decode [1,32,8,1,8192,128 ...]
       [--threads 1] [--reps 5]
Prints ms per call (median of --reps) for forward and forward+backward, causal
and not, and the ratio torch / smax (> 1: smax faster). Both run with the same
thread count (torch.set_num_threads, smax threads=); smax runs OpenBLAS (its
SGEMMs) on its own threads, whatever OPENBLAS_NUM_THREADS says. --gate adds
"gate fwd" / "gate f+b" rows: smax ungated (in the torch column) against smax
with an element-wise sigmoid gate (ratio = ungated / gated).

--decode B,H,Hkv,Lq,Lk,D: decoding against a KV cache of Lk keys (GQA: H query
heads, Hkv KV heads): torch SDPA (enable_gqa=True) vs smax on the contiguous
cache and on a paged one (pages of 16 keys, a shuffled block table), with the
memory floor: the bytes of K and V (read once) over the read bandwidth
measured in the same run (torch.sum over a buffer larger than the L3, the
same thread count), and smax / floor.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import smax
import smax.torch as st


def timeit(fn, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def read_bandwidth(reps=5):
    """Bytes per second of torch.sum over 256 MiB (from memory, not cache)."""
    x = torch.ones(64 << 20)
    x.sum()
    best = min(timeit(lambda: x.sum(), 1) for _ in range(reps)) / 1e3
    return x.numel() * 4 / best


def paged(k, page, table):
    """k [B, Hkv, L, D] as a pool [pages, page, Hkv, D] under `table`, viewed
    as [pages, Hkv, page, D] (vLLM's layout)."""
    B, Hkv, L, D = k.shape
    pool = torch.empty(table.numel(), page, Hkv, D, dtype=k.dtype)
    for b in range(B):
        for s in range(L // page):
            pool[table[b, s]] = k[b, :, s * page:(s + 1) * page].transpose(0, 1)
    return pool.transpose(1, 2)


def decode(a):
    bw = read_bandwidth()
    print(f"read bandwidth {bw / 1e9:.1f} GB/s ({a.threads} thread(s), torch.sum over 256 MiB)")
    print(f"{'B,H,Hkv,Lq,Lk,D':>20} {'torch ms':>9} {'smax ms':>8} {'paged ms':>9} "
          f"{'floor ms':>9} {'torch/smax':>10} {'smax/floor':>10}")
    for shp in a.decode:
        B, H, Hkv, Lq, Lk, D = (int(x) for x in shp.split(","))
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(B, H, Lq, D, generator=gen)
        k = torch.randn(B, Hkv, Lk, D, generator=gen)
        v = torch.randn(B, Hkv, Lk, D, generator=gen)
        page = 16
        table = torch.randperm(B * Lk // page, generator=gen).reshape(B, Lk // page).int()
        kp, vp = paged(k, page, table), paged(v, page, table)
        lens = torch.full((B,), Lk, dtype=torch.int32)
        with torch.no_grad():
            tt = timeit(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), a.reps)
        ss = timeit(lambda: smax.attention(q, k, v, enable_gqa=True, threads=a.threads), a.reps)
        pp = timeit(lambda: smax.attention(q, kp, vp, enable_gqa=True, threads=a.threads,
                                           cache_seqlens=lens, block_table=table), a.reps)
        floor = (k.numel() + v.numel()) * 4 / bw * 1e3
        print(f"{shp:>20} {tt:9.2f} {ss:8.2f} {pp:9.2f} {floor:9.2f} {tt / ss:10.2f} "
              f"{ss / floor:10.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", nargs="*", default=["1,8,1024,64"])
    ap.add_argument("--normalizers", nargs="*", default=["softmax"])
    ap.add_argument("--gate", action="store_true",
                    help="also time smax gated attention (element-wise gate) against ungated")
    ap.add_argument("--decode", nargs="*", default=None,
                    help="B,H,Hkv,Lq,Lk,D decode shapes (none given: the issue's set)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.decode is not None:
        a.decode = a.decode or ["1,32,8,1,4096,128", "1,32,8,1,8192,128", "1,32,8,1,32768,128",
                                "1,32,8,8,8192,128", "4,32,8,1,4096,128"]
        print(f"torch {torch.__version__}, smax {smax.__version__}, threads {a.threads}, "
              f"target {smax.info().get('active_target', '?')}")
        decode(a)
        return
    print(f"torch {torch.__version__}, smax {smax.__version__}, threads {a.threads}, "
          f"target {smax.info().get('active_target', '?')}")
    print(f"{'shape B,H,L,D':>16} {'norm':>9} {'causal':>6} {'pass':>8} {'torch ms':>9} "
          f"{'smax ms':>9} {'ratio':>6}")
    for shp in a.shapes:
        B, H, L, D = (int(x) for x in shp.split(","))
        q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
        for norm in a.normalizers:
            for causal in (False, True):
                def t_fwd():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def s_fwd():
                    smax.attention(q, k, v, is_causal=causal, normalizer=norm, threads=a.threads)

                qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

                def t_bwd():
                    F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).sum().backward()

                def s_bwd():
                    st.attention(qg, kg, vg, is_causal=causal, normalizer=norm,
                                 threads=a.threads).sum().backward()

                rows = [("fwd", t_fwd, s_fwd), ("fwd+bwd", t_bwd, s_bwd)]
                if a.gate:
                    # Gated (element-wise, sigmoid) against smax ungated: the
                    # "torch ms" column holds smax ungated, the ratio is
                    # ungated / gated (goal: >= 1 / 1.1).
                    g = torch.randn(B, H, L, D).requires_grad_(True)

                    def g_fwd():
                        smax.attention(q, k, v, is_causal=causal, normalizer=norm,
                                       threads=a.threads, gate=g.detach())

                    def g_bwd():
                        st.attention(qg, kg, vg, is_causal=causal, normalizer=norm,
                                     threads=a.threads, gate=g).sum().backward()

                    rows += [("gate fwd", s_fwd, g_fwd), ("gate f+b", s_bwd, g_bwd)]
                for name, tf, sf in rows:
                    tt = timeit(tf, a.reps) if norm == "softmax" or "gate" in name \
                        else float("nan")
                    ss = timeit(sf, a.reps)
                    print(f"{shp:>16} {norm:>9} {str(causal):>6} {name:>8} {tt:9.2f} {ss:9.2f} "
                          f"{tt / ss:6.2f}")


if __name__ == "__main__":
    main()

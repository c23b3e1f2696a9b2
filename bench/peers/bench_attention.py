"""smax.attention vs torch.nn.functional.scaled_dot_product_attention on CPU.

Usage: python3 bench/peers/bench_attention.py [--threads 1]
       [--shapes 1,8,1024,64 ...] [--reps 5]
Prints ms per call (median of --reps) for forward and forward+backward, causal
and not, and the ratio torch / smax (> 1: smax faster). Both run with the same
thread count (torch.set_num_threads, smax threads=); smax runs OpenBLAS (its
SGEMMs) on its own threads, whatever OPENBLAS_NUM_THREADS says.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", nargs="*", default=["1,8,1024,64"])
    ap.add_argument("--normalizers", nargs="*", default=["softmax"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
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
                for name, tf, sf in rows:
                    tt = timeit(tf, a.reps) if norm == "softmax" else float("nan")
                    ss = timeit(sf, a.reps)
                    print(f"{shp:>16} {norm:>9} {str(causal):>6} {name:>8} {tt:9.2f} {ss:9.2f} "
                          f"{tt / ss:6.2f}")


if __name__ == "__main__":
    main()

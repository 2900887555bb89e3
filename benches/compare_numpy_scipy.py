#!/usr/bin/env python3
"""Side-by-side: sparsegate's built-in kernels against numpy (OpenBLAS) and scipy.sparse.

Optional, never needed by the tests. Our numbers come from `sparsegate bench --json` (kernel
and dense comparator interleaved in one process, medians); numpy/scipy are timed here on the
same shapes and densities (median of repeated calls after a warm-up). A ratio against
numpy/scipy comes from `--rounds` alternations (ours, theirs, ours, theirs, …): each round gives
one ratio, the table prints the median round and the range, so that drift on a shared machine
shows up as a wide range instead of a biased number.

Run (the OpenBLAS overrides some machines set slow a current numpy; unset them here only):

    cargo build --release
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 benches/compare_numpy_scipy.py

Convention: GEMM M×N×K = M tokens, N output features, K input features; the weight W is
N×K, the activations X are K×M, the output W·X is N×M (what our kernels compute).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "sparsegate")


def ours(gemm, sparsity, budget, threads=None):
    cmd = [BIN, "bench", "--gemm", gemm, "--sparsity", sparsity, "--time-budget", str(budget), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def timed(f, reps, warmup=2):
    for _ in range(warmup):
        f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def dims(gemm):
    m, n, k = (int(v) for v in gemm.split("x"))
    return m, n, k


def numpy_dense(gemm, reps):
    m, n, k = dims(gemm)
    rng = np.random.default_rng(1)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    x = rng.uniform(-1, 1, (k, m)).astype(np.float32)
    return timed(lambda: w @ x, reps)


def scipy_csr(gemm, density, reps):
    m, n, k = dims(gemm)
    rng = np.random.default_rng(2)
    # Same structure as ours: per-row pruning, round(density*K) kept per row.
    keep = round(density * k)
    cols = np.argsort(rng.random((n, k)), axis=1)[:, :keep]
    cols.sort(axis=1)
    data = rng.uniform(-1, 1, n * keep).astype(np.float32)
    w = sp.csr_matrix((data, cols.ravel(), np.arange(0, n * keep + 1, keep)), shape=(n, k))
    x = rng.uniform(-1, 1, (k, m)).astype(np.float32)
    return timed(lambda: w @ x, reps, warmup=1)


def alternate(rounds, ours_s, theirs_s):
    """Time ours and theirs alternately; returns (median ours s, median theirs s, median ratio,
    lowest ratio, highest ratio), ratio = theirs / ours (above 1: ours is faster)."""
    pairs = []
    for _ in range(rounds):
        pairs.append((ours_s(), theirs_s()))
    ratios = sorted(t / o for o, t in pairs)
    return (
        statistics.median(o for o, _ in pairs),
        statistics.median(t for _, t in pairs),
        statistics.median(ratios),
        ratios[0],
        ratios[-1],
    )


def gflops(gemm, secs, density=1.0):
    m, n, k = dims(gemm)
    return 2.0 * m * n * k * density / secs / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per sparsegate bench")
    ap.add_argument("--reps", type=int, default=7, help="timed numpy/scipy calls per row")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of ours and numpy/scipy per row")
    ap.add_argument("--quick", action="store_true", help="small shapes only (a smoke run)")
    ap.add_argument("--threads", type=int, default=None, help="threads for ours and numpy's BLAS (default: all)")
    args = ap.parse_args()
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} not found: run `cargo build --release` first")

    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            print(
                f"# numpy BLAS: {pool.get('internal_api')} {pool.get('version')} "
                f"{pool.get('architecture')} threads={pool.get('num_threads')}"
            )
    except ImportError:
        print("# threadpoolctl not installed: BLAS kernel unknown")
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"# warning: {var}={os.environ[var]} is set and may slow numpy")

    big, ffn_up, ffn_down = "2048x2048x2048", "512x11008x4096", "512x4096x11008"
    if args.quick:
        big, ffn_up, ffn_down = "256x256x256", "64x512x256", "64x256x512"

    print("\n## Dense f32 vs numpy (OpenBLAS)")
    print(f"{'gemm':>16} {'ours ms':>9} {'GFLOP/s':>8} {'numpy ms':>9} {'GFLOP/s':>8} {'ours/numpy':>10} {'range':>14}")
    per_round = args.budget / args.rounds
    # The two cubes, and the FFN shapes the 2:4 speedups below are measured on: the
    # comparator has to be as fast as numpy wherever a sparse speedup is quoted against it.
    for gemm in (["128x128x128"] if args.quick else ["1024x1024x1024", big, ffn_up, ffn_down]):
        t, t_np, ratio, lo, hi = alternate(
            args.rounds,
            lambda: ours(gemm, "dense", per_round, args.threads)["kernel_s"]["estimate"],
            lambda: numpy_dense(gemm, args.reps),
        )
        print(
            f"{gemm:>16} {t*1e3:9.2f} {gflops(gemm, t):8.1f} {t_np*1e3:9.2f} {gflops(gemm, t_np):8.1f} "
            f"{ratio:9.2f}x [{lo:.2f}, {hi:.2f}]"
        )

    print("\n## Sparse vs our dense (same-process interleaved ratio, 95% bootstrap CI)")
    print(f"{'gemm':>16} {'sparsity':>20} {'path':>8} {'ms':>8} {'dense ms':>9} {'useful GF/s':>11} {'speedup':>8} {'CI':>16}")

    def row(gemm, sparsity):
        r = ours(gemm, sparsity, args.budget, args.threads)
        s = r["speedup"]
        print(
            f"{gemm:>16} {sparsity:>20} {r['path'][:8]:>8} {r['kernel_s']['estimate']*1e3:8.2f} "
            f"{r['comparator_s']['estimate']*1e3:9.2f} {r['gflops_useful']:11.1f} {s['estimate']:7.2f}x "
            f"[{s['low']:.2f}, {s['high']:.2f}]"
        )
        return r

    for gemm in (big, ffn_up, ffn_down):
        row(gemm, "2:4")
    row(big, "block:16x16:0.1")
    crossover = None
    for d in (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.05):
        r = row(big, f"unstructured:{d}")
        if crossover is None and r["speedup"]["low"] > 1.0:
            crossover = d
    if crossover is None:
        print("CSR crossover: CSR never beat our dense at these densities")
    else:
        print(f"CSR crossover: first beats our dense (CI above 1) at density {crossover} = {100*(1-crossover):.0f}% sparsity")

    print("\n## CSR 90% vs scipy.sparse (CSR @ dense, single-threaded in scipy)")
    print(f"{'gemm':>16} {'threads':>7} {'ours ms':>9} {'scipy ms':>9} {'ours/scipy':>10} {'range':>14}")
    for threads in (args.threads, 1):
        t, t_sp, ratio, lo, hi = alternate(
            args.rounds,
            lambda: ours(big, "unstructured:0.1", per_round, threads)["kernel_s"]["estimate"],
            lambda: scipy_csr(big, 0.1, max(3, args.reps // 2)),
        )
        label = threads or os.cpu_count()
        print(f"{big:>16} {label:>7} {t*1e3:9.2f} {t_sp*1e3:9.2f} {ratio:9.2f}x [{lo:.2f}, {hi:.2f}]")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Dense vs 2:4 semi-structured GEMMs on a real NVIDIA GPU (issue 25).

One prepared, rerunnable script: it times dense `torch.matmul` (cuBLAS) against 2:4
semi-structured sparse matmuls (`torch.sparse.to_sparse_semi_structured`, on the cuSPARSELt
backend and on CUTLASS where the GPU supports it) for fp16, bf16, int8 and fp8 (where this
torch can), over a grid of token counts x layer shapes, and writes what it measured as the
fixture `tests/data/sim/gpu-measured/<device>.json` that `tests/sim_validation.rs` and
`sparsegate sim --measured FILE` read (format: `sparsegate-gpu-measurement`, version 1,
documented in tests/data/sim/gpu-measured/README.md).

Shapes follow sparsegate's convention: M tokens, N output features, K reduction; the
weight is N x K (torch.nn.Linear's [out, in]) and is 2:4 along K, the input is M x K.
Timing: CUDA events around each call, warm-up first, dense and sparse interleaved call by
call (A B A B ...) so both see the same clocks; medians with p10/p90 spreads. GPU clocks,
temperature and power are read with nvidia-smi before and after the grid.

Every cell that this torch / GPU cannot run is recorded with its error instead of
stopping the run, so one run always gives a complete, honest fixture.

Usage (about 3-6 minutes on an H200):
    python3 benches/gpu/h200_measure.py --out tests/data/sim/gpu-measured
    python3 benches/gpu/h200_measure.py --quick --out /tmp/gpu   # a small grid, to try it
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zlib

import torch

TOKENS = [1, 16, 128, 512, 2048, 8192]
# (name, N out features, K reduction)
LAYERS = [
    ("llama2-7b.attn_qkvo", 4096, 4096),
    ("llama2-7b.mlp_up_gate", 11008, 4096),
    ("llama2-7b.mlp_down", 4096, 11008),
    ("bert-base.attn", 768, 768),
    ("bert-base.ffn_up", 3072, 768),
    ("bert-base.ffn_down", 768, 3072),
    ("square-8192", 8192, 8192),
]


def smi(fields):
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"error": "nvidia-smi not found"}
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()[0]
    except Exception as e:  # recorded, never fatal
        return {"error": str(e)[:200]}
    return {f: v.strip() for f, v in zip(fields, out.split(","))}


CLOCK_FIELDS = [
    "clocks.sm", "clocks.mem", "clocks.max.sm", "temperature.gpu", "power.draw",
    "power.limit", "clocks_throttle_reasons.active",
]


def stack():
    s = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()),
    }
    s.update({k: v for k, v in smi(["driver_version", "name", "memory.total"]).items()})
    try:
        s["cusparselt"] = str(torch.backends.cusparselt.version())
    except Exception as e:
        s["cusparselt"] = f"unavailable: {str(e)[:120]}"
    return s


def generator(device, *shape):
    """A fresh generator per cell, seeded by its shape: cells do not depend on the order they
    run in, and a failed CUDA-graph capture (which leaves the default CUDA generator refusing
    to advance: "Offset increment outside graph capture", seen on the H200 after fp8 2:4
    failed to capture) cannot stop the cells after it."""
    g = torch.Generator(device=device)
    g.manual_seed(zlib.crc32(repr(shape).encode()))  # hash() of a str is salted per process
    return g


def two_four_mask(n, k, device):
    """Keep the 2 largest of every 4 along K (magnitude pruning, as pruning tools do)."""
    w = torch.randn(n, k, device=device, generator=generator(device, "w", n, k))
    g = w.abs().reshape(n, k // 4, 4)
    idx = g.topk(2, dim=-1).indices
    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, idx, True)
    return w * mask.reshape(n, k), mask.reshape(n, k)


def operands(dtype_name, m, n, k, dev):
    w32, _ = two_four_mask(n, k, dev)
    x32 = torch.randn(m, k, device=dev, generator=generator(dev, "x", m, k))
    if dtype_name in ("fp16", "bf16"):
        dt = torch.float16 if dtype_name == "fp16" else torch.bfloat16
        return w32.to(dt), x32.to(dt)
    if dtype_name == "int8":
        return (w32 * 16).clamp(-127, 127).round().to(torch.int8), (x32 * 16).clamp(-127, 127).round().to(torch.int8)
    if dtype_name == "fp8":
        return w32.to(torch.float8_e4m3fn), x32.to(torch.float8_e4m3fn)
    raise ValueError(dtype_name)


def dense_call(dtype_name, w, x):
    """The dense comparator: what a user would run instead, y = x @ w.T."""
    if dtype_name in ("fp16", "bf16"):
        wt = w.t()
        return lambda: torch.matmul(x, wt), None
    if dtype_name == "int8":
        # torch._int_mm (cuBLASLt int8) needs M > 16 and K, N multiples of 8: pad M.
        m = x.shape[0]
        note = None
        if m <= 16:
            x = torch.nn.functional.pad(x, (0, 0, 0, 32 - m))
            note = f"int8 dense pads {m} tokens to 32 (torch._int_mm needs M > 16)"
            if m < 16:
                note += "; 2:4 pads them to 16 (cuSPARSELt int8 needs 16 dense columns)"
        wt = w.t()  # [K, N] column-major (w is [N, K] row-major), as cuBLASLt int8 wants
        return lambda: torch._int_mm(x, wt), note
    if dtype_name == "fp8":
        one = torch.tensor(1.0, device=x.device)
        m = x.shape[0]
        note = None
        if m % 16:
            x = torch.nn.functional.pad(x.to(torch.float16), (0, 0, 0, 16 - m % 16)).to(torch.float8_e4m3fn)
            note = f"fp8 dense pads {m} tokens to a multiple of 16" + ("; 2:4 pads them to 16" if m < 16 else "")
        wt = w.t()
        return lambda: torch._scaled_mm(x, wt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), note
    raise ValueError(dtype_name)


def compress(w, backend):
    """The weight as torch's 2:4 semi-structured tensor on the named backend."""
    import torch.sparse as ts

    cls = {"cusparselt": "SparseSemiStructuredTensorCUSPARSELT", "cutlass": "SparseSemiStructuredTensorCUTLASS"}[backend]
    if hasattr(ts, cls):
        return getattr(ts, cls).from_dense(w)
    ts.SparseSemiStructuredTensor._FORCE_CUTLASS = backend == "cutlass"  # torch < 2.3
    return ts.to_sparse_semi_structured(w)


def sparse_call(dtype_name, backend, w, x):
    """2:4 weight as the first operand: y.T = W_sparse @ x.T (the layout torch supports)."""
    ws = compress(w, backend)
    if dtype_name in ("int8", "fp8"):
        # cuSPARSELt takes int8 and fp8 only with the dense operand column-major (a transposed
        # view of the row-major input is that) and at least 16 of its columns: pad the tokens.
        if x.shape[0] < 16:
            x = torch.nn.functional.pad(x.to(torch.float16), (0, 0, 0, 16 - x.shape[0])).to(x.dtype)
        xt = x.t()
    else:
        xt = x.t().contiguous()
    if dtype_name == "fp8":
        one = torch.tensor(1.0, device=x.device)
        return lambda: torch._scaled_mm(ws, xt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return lambda: torch.mm(ws, xt)


GRAPH_INNER = 10


def graphed(f, inner=GRAPH_INNER):
    """`inner` calls of f captured in one CUDA graph; replaying it runs the kernels without
    Python or launch gaps between them, so small shapes time the kernels, not the host."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            f()
    torch.cuda.synchronize()
    return g.replay


def time_pair(fa, fb, warmup, reps, budget_s):
    """Interleave A and B call by call; CUDA events around each call."""
    for _ in range(warmup):
        fa()
        fb()
    torch.cuda.synchronize()
    ta, tb = [], []
    start = time.monotonic()
    while len(ta) < reps or (time.monotonic() - start < budget_s and len(ta) < 4 * reps):
        for f, acc in ((fa, ta), (fb, tb)):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            f()
            e1.record()
            e1.synchronize()
            acc.append(e0.elapsed_time(e1) * 1e3)  # ms -> us
        if len(ta) >= reps and time.monotonic() - start > budget_s:
            break
    return ta, tb


def summary(us, per=1):
    s = sorted(u / per for u in us)
    q = lambda p: s[min(len(s) - 1, int(round(p * (len(s) - 1))))]
    return {"median_us": q(0.5), "p10_us": q(0.1), "p90_us": q(0.9), "reps": len(s)}


def copy_bandwidth(dev, gib=1.0, reps=20):
    n = int(gib * (1 << 30))
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    t = sorted(ts)[len(ts) // 2]
    return {"bytes_moved": 2 * n, "median_s": t, "gbps": 2 * n / t / 1e9}


def peak_dense(dev, dtype=torch.bfloat16, size=8192, reps=30):
    a = torch.randn(size, size, device=dev).to(dtype)
    b = torch.randn(size, size, device=dev).to(dtype)
    ta, _ = time_pair(lambda: a @ b, lambda: None, 10, reps, 0.0)
    med = sorted(ta)[len(ta) // 2] / 1e6
    return {"m": size, "n": size, "k": size, "dtype": "bf16", "median_s": med,
            "tflops": 2 * size**3 / med / 1e12}


def trace_one_layer(dev, out_path, m=16, n=4096, k=4096):
    """A PyTorch-profiler Chrome trace of one layer, dense then 2:4, for `backend: import`."""
    from torch.profiler import ProfilerActivity, profile, record_function

    w, x = operands("fp16", m, n, k, dev)
    fd, _ = dense_call("fp16", w, x)
    fs = sparse_call("fp16", "cusparselt", w, x)
    for _ in range(5):
        fd(); fs()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            with record_function("layer0_sparse"):
                fs()
            with record_function("layer0_dense"):
                fd()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for <device>.json and the trace")
    ap.add_argument("--quick", action="store_true", help="a small grid, to try the script")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=30, help="at least this many timed calls")
    ap.add_argument("--budget-s", type=float, default=0.25, help="keep sampling a cell this long")
    ap.add_argument("--dtypes", default="fp16,bf16,int8,fp8")
    ap.add_argument("--deadline-s", type=float, default=0.0,
                    help="stop starting cells after this many seconds (0: never); the rest are recorded as not measured")
    ap.add_argument("--no-graphs", dest="graphs", action="store_false",
                    help="skip the second pass, which times CUDA-graph replays")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("h200_measure.py: no CUDA device visible to torch; nothing measured")
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    props = torch.cuda.get_device_properties(dev)
    tokens = [1, 16, 512] if args.quick else TOKENS
    layers = LAYERS[:2] if args.quick else LAYERS
    dtypes = args.dtypes.split(",")
    t_start = time.monotonic()
    record = {
        "format": "sparsegate-gpu-measurement",
        "version": 1,
        "device": {
            "name": props.name,
            "sm_count": props.multi_processor_count,
            "memory_gib": round(props.total_memory / (1 << 30), 1),
            "compute_capability": f"{props.major}.{props.minor}",
        },
        "stack": stack(),
        "method": {
            "timer": "cuda_event", "interleaved": True, "warmup": args.warmup,
            "min_reps": args.reps, "budget_s_per_cell": args.budget_s,
            "weights": "random normal, magnitude-pruned to 2:4 along K",
            "eager": "each call alone between two events, host dispatch included",
            "graph": f"{GRAPH_INNER} calls captured in one CUDA graph, per-call time = replay / {GRAPH_INNER}",
            "script": "benches/gpu/h200_measure.py",
        },
        "clocks_before": smi(CLOCK_FIELDS),
        "memory_copy": copy_bandwidth(dev),
        "peak_dense": peak_dense(dev),
        "cells": [],
    }
    name = "h200" if "H200" in props.name else props.name.lower().replace(" ", "-")
    path = os.path.join(args.out, f"{name}.json")
    # The eager pass may use 60% of the deadline, so the graph pass always gets a turn.
    limit = args.deadline_s if args.deadline_s > 0 else float("inf")
    eager_deadline, deadline = t_start + 0.6 * limit, t_start + limit
    grid = [(dt, lname, n, k, m) for dt in dtypes for (lname, n, k) in layers for m in tokens]
    # Pass 1, eager: each call timed alone, as a PyTorch user calls it (host dispatch included).
    for (dt, lname, n, k, m) in grid:
        cell = {"layer": lname, "m": m, "n": n, "k": k, "dtype": dt}
        record["cells"].append(cell)
        if time.monotonic() > eager_deadline:
            cell["dense"] = {"error": "not measured: the run's --deadline-s passed first"}
            continue
        try:
            w, x = operands(dt, m, n, k, dev)
            fd, note = dense_call(dt, w, x)
        except Exception as e:
            cell["dense"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            continue
        if note:
            cell["note"] = note
        for backend in ("cusparselt", "cutlass"):
            try:
                fs = sparse_call(dt, backend, w, x)
                td, ts = time_pair(fd, fs, args.warmup, args.reps, args.budget_s)
                cell.setdefault("dense", summary(td))
                cell[f"sparse_{backend}"] = summary(ts)
            except Exception as e:
                cell[f"sparse_{backend}"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        if "dense" not in cell:
            try:
                td, _ = time_pair(fd, lambda: None, args.warmup, args.reps, args.budget_s)
                cell["dense"] = summary(td)
            except Exception as e:
                cell["dense"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(json.dumps(cell), flush=True)
        del w, x, fd
    write(record, path)
    # The profiler trace before the graph pass, whose failed captures can upset later work.
    try:
        trace = os.path.join(args.out, "torch_trace_h200.json")
        trace_one_layer(dev, trace)
        record["trace"] = os.path.basename(trace)
    except Exception as e:
        record["trace"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    # Pass 2, CUDA graphs: GRAPH_INNER calls per replay, dense and 2:4 replays interleaved;
    # the kernels' own time, which is what the simulator predicts. A path that cannot be
    # captured keeps its error and is not tried again for that dtype; after three dense
    # capture failures the pass stops.
    failures, broken = 0, set()
    for cell in record["cells"] if args.graphs else []:
        dt, m, n, k = cell["dtype"], cell["m"], cell["n"], cell["k"]
        if "median_us" not in cell.get("dense", {}) or failures >= 3:
            continue
        if time.monotonic() > deadline:
            cell["graph"] = {"error": "not measured: the run's --deadline-s passed first"}
            continue
        g = {"inner": GRAPH_INNER}
        try:
            w, x = operands(dt, m, n, k, dev)
            gd = graphed(dense_call(dt, w, x)[0])
        except Exception as e:
            failures += 1
            cell["graph"] = {"error": f"dense: {type(e).__name__}: {str(e)[:300]}"}
            continue
        for backend in ("cusparselt", "cutlass"):
            if "median_us" not in cell.get(f"sparse_{backend}", {}) or (dt, backend) in broken:
                continue
            try:
                gs = graphed(sparse_call(dt, backend, w, x))
                td, ts = time_pair(gd, gs, 3, args.reps, args.budget_s)
                g.setdefault("dense", summary(td, GRAPH_INNER))
                g[f"sparse_{backend}"] = summary(ts, GRAPH_INNER)
            except Exception as e:
                broken.add((dt, backend))
                g[f"sparse_{backend}"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        if "dense" not in g:
            try:
                td, _ = time_pair(gd, lambda: None, 3, args.reps, args.budget_s)
                g["dense"] = summary(td, GRAPH_INNER)
            except Exception as e:
                g["dense"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        cell["graph"] = g
        del w, x, gd
    torch.cuda.synchronize()
    record["clocks_after"] = smi(CLOCK_FIELDS)
    record["gpu_seconds"] = round(time.monotonic() - t_start, 1)
    write(record, path)
    print(f"wrote {path} ({len(record['cells'])} cells, {record['gpu_seconds']} s)", file=sys.stderr)
    print_table(record)


def write(record, path):
    """Whole file or nothing: a run stopped half-way leaves the last complete write."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def print_table(record):
    """One line per cell: dense and best 2:4 median (graph replay where measured), speedup."""
    def med(t):
        return t.get("median_us") if isinstance(t, dict) else None

    print("dtype layer m | dense_us sparse_us speedup (eager) | dense_us sparse_us speedup (graph)")
    for c in record["cells"]:
        row = [c["dtype"], c["layer"], str(c["m"]), "|"]
        for src in (c, c.get("graph") or {}):
            d = med(src.get("dense"))
            sp = [v for v in (med(src.get("sparse_cusparselt")), med(src.get("sparse_cutlass"))) if v]
            if d and sp:
                row += [f"{d:.1f}", f"{min(sp):.1f}", f"{d / min(sp):.2f}x", "|"]
            else:
                row += ["-", "-", "-", "|"]
        print(" ".join(row))


if __name__ == "__main__":
    main()

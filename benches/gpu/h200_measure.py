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


def two_four_mask(n, k, device):
    """Keep the 2 largest of every 4 along K (magnitude pruning, as pruning tools do)."""
    w = torch.randn(n, k, device=device)
    g = w.abs().reshape(n, k // 4, 4)
    idx = g.topk(2, dim=-1).indices
    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, idx, True)
    return w * mask.reshape(n, k), mask.reshape(n, k)


def operands(dtype_name, m, n, k, dev):
    w32, _ = two_four_mask(n, k, dev)
    x32 = torch.randn(m, k, device=dev)
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
        wt = w.t().contiguous().t()  # column-major B, as cuBLASLt int8 wants
        return lambda: torch._int_mm(x, wt), note
    if dtype_name == "fp8":
        one = torch.tensor(1.0, device=x.device)
        m = x.shape[0]
        note = None
        if m % 16:
            x = torch.nn.functional.pad(x.to(torch.float16), (0, 0, 0, 16 - m % 16)).to(torch.float8_e4m3fn)
            note = f"fp8 dense pads {m} tokens to a multiple of 16"
        wt = w.t()
        return lambda: torch._scaled_mm(x, wt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), note
    raise ValueError(dtype_name)


def sparse_call(dtype_name, backend, w, x):
    """2:4 weight as the first operand: y.T = W_sparse @ x.T (the layout torch supports)."""
    from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

    SparseSemiStructuredTensor._FORCE_CUTLASS = backend == "cutlass"
    ws = to_sparse_semi_structured(w)
    # int8 on cuSPARSELt wants the dense operand column-major: a transposed view is that.
    xt = x.t() if dtype_name == "int8" else x.t().contiguous()
    return lambda: torch.mm(ws, xt)


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


def summary(us):
    s = sorted(us)
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
            "script": "benches/gpu/h200_measure.py",
        },
        "clocks_before": smi(CLOCK_FIELDS),
        "memory_copy": copy_bandwidth(dev),
        "peak_dense": peak_dense(dev),
        "cells": [],
    }
    for dt in dtypes:
        for (lname, n, k) in layers:
            for m in tokens:
                cell = {"layer": lname, "m": m, "n": n, "k": k, "dtype": dt}
                try:
                    w, x = operands(dt, m, n, k, dev)
                    fd, note = dense_call(dt, w, x)
                except Exception as e:
                    cell["dense"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                    record["cells"].append(cell)
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
                record["cells"].append(cell)
                print(json.dumps(cell), flush=True)
    record["clocks_after"] = smi(CLOCK_FIELDS)
    try:
        trace = os.path.join(args.out, "torch_trace_h200.json")
        trace_one_layer(dev, trace)
        record["trace"] = os.path.basename(trace)
    except Exception as e:
        record["trace"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    record["gpu_seconds"] = round(time.monotonic() - t_start, 1)
    name = "h200" if "H200" in props.name else props.name.lower().replace(" ", "-")
    path = os.path.join(args.out, f"{name}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    print(f"wrote {path} ({len(record['cells'])} cells, {record['gpu_seconds']} s)", file=sys.stderr)


if __name__ == "__main__":
    main()

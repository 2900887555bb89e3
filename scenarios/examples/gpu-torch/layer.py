#!/usr/bin/env python3
"""One linear layer on the GPU, dense or 2:4, for `backend: command` (issue 25).

    python3 layer.py PATH M N K DTYPE REPEATS

PATH is `dense` (torch.matmul, cuBLAS) or `sparse` (the weight as a 2:4
semi-structured tensor, cuSPARSELt). M tokens, N output features, K reduction (2:4 along K);
DTYPE fp16 or bf16. After a warm-up it captures INNER calls in one CUDA graph and times
REPEATS replays with CUDA events, so each value is the kernels' own time per call (eager
PyTorch adds a host dispatch gap that, at decode sizes, is larger than the kernel, and larger
for the 2:4 tensor subclass than for dense). Where the path cannot be captured it times eager
calls instead and says so on stderr. One JSON-lines record per replay, the protocol of
docs/command-backend.md:
    {"sparsegate": 1, "metric": "latency", "unit": "ns", "value": 12345}
Both paths prune the same seeded weight, so the pack's comparator is the same layer dense.
"""
import json
import sys

import torch

INNER = 10
USAGE = "usage: layer.py dense|sparse M N K fp16|bf16 REPEATS"


def main():
    if len(sys.argv) != 7 or sys.argv[1] not in ("dense", "sparse"):
        sys.exit(USAGE)
    path = sys.argv[1]
    try:
        m, n, k, reps = (int(sys.argv[i]) for i in (2, 3, 4, 6))
    except ValueError:
        sys.exit(USAGE)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(sys.argv[5])
    if dtype is None or k % 4 or min(m, n, k, reps) < 1:
        sys.exit(USAGE)
    if not torch.cuda.is_available():
        sys.exit("layer.py: no CUDA device visible to torch")
    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    w = torch.randn(n, k, device=dev)
    keep = w.abs().reshape(n, k // 4, 4).topk(2, dim=-1).indices
    mask = torch.zeros(n, k // 4, 4, device=dev, dtype=torch.bool).scatter_(-1, keep, True)
    w = (w * mask.reshape(n, k)).to(dtype)
    x = torch.randn(m, k, device=dev).to(dtype)
    if path == "dense":
        wt = w.t()
        call = lambda: torch.matmul(x, wt)
    else:
        from torch.sparse import to_sparse_semi_structured

        ws = to_sparse_semi_structured(w)
        xt = x.t().contiguous()
        call = lambda: torch.mm(ws, xt)
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    inner = 1
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(INNER):
                call()
        torch.cuda.synchronize()
        call, inner = graph.replay, INNER
    except Exception as e:  # eager timing still measures the path, with its dispatch gap
        print(f"layer.py: CUDA graph capture failed ({type(e).__name__}); timing eager calls", file=sys.stderr)
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        call()
        e1.record()
        e1.synchronize()
        ns = int(e0.elapsed_time(e1) * 1e6 / inner)
        print(json.dumps({"sparsegate": 1, "metric": "latency", "unit": "ns", "value": ns}), flush=True)


if __name__ == "__main__":
    main()

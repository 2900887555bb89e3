#!/usr/bin/env python3
"""Write the GPU trace fixtures of tests/data/import (issue 21).

These files follow the documented formats -- the PyTorch profiler's Chrome trace
(`prof.export_chrome_trace`: `traceEvents`, `ph: "X"` events of cat `kernel`,
`cuda_runtime`, `user_annotation`, times in microseconds, `args.correlation`) and the
Nsight Systems SQLite export (`CUPTI_ACTIVITY_KIND_KERNEL`, `CUPTI_ACTIVITY_KIND_RUNTIME`,
`NVTX_EVENTS`, `StringIds`, times in nanoseconds) -- and are NOT from a real run: the
numbers are made up to tell one story. Four profiler steps of a two-layer model:
`layer0` ran the 2:4 sparse GEMM (cuSPARSELt-style name), `layer1` fell back to a dense
cuBLAS sgemm; each layer also runs one elementwise kernel.

Kernel times per step: sparse GEMM 40 us, dense GEMM 100 us, two elementwise 5 us each:
fallback_rate = 400 / (160 + 400) = 0.714..., sparse_gpu_share = 160 / 600.

Standard library only (json, sqlite3). Run from anywhere: python3 make_traces.py
"""
import json
import os
import sqlite3

HERE = os.path.dirname(os.path.abspath(__file__))
SPARSE = "sm80_xmma_sparse_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x64_stage3_warpsize2x2x1"
DENSE = "ampere_sgemm_128x64_tn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::ReluFunctor>"
STEPS = 4

def story():
    """(ranges, launches, kernels) in microseconds: (name, ts, dur), (corr, ts), (name, ts, dur, corr)."""
    ranges, launches, kernels = [], [], []
    corr = 1
    for step in range(STEPS):
        t = 1000.0 * step
        ranges.append((f"ProfilerStep#{step}", t, 900.0))
        for layer, (gemm, dur) in enumerate([(SPARSE, 40.0), (DENSE, 100.0)]):
            lt = t + 10.0 + 300.0 * layer
            ranges.append((f"layer{layer}", lt, 200.0))
            for name, d in [(gemm, dur), (ELEMENTWISE, 5.0)]:
                launches.append((corr, lt + 5.0))
                # The GPU runs behind the CPU: the kernel starts after its range ended.
                kernels.append((name, lt + 250.0 + (0 if name == gemm else dur + 1.0), d, corr))
                lt += 10.0
                corr += 1
    return ranges, launches, kernels

def torch_trace():
    ranges, launches, kernels = story()
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for name, ts, dur in ranges:
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})
    for c, ts in launches:
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": ts, "dur": 4.0, "args": {"correlation": c}})
    for name, ts, dur, c in kernels:
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                       "args": {"correlation": c, "stream": 7, "device": 0}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10.0, "dur": 50.0})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "made-up GPU"}], "traceEvents": events}

def write_json(name, text):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(text)

def nsys(name, with_kernels=True):
    path = os.path.join(HERE, name)
    if os.path.exists(path):
        os.remove(path)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    if not with_kernels:
        db.commit()
        db.close()
        return
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
               "deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
               "globalPid INTEGER, demangledName INTEGER, shortName INTEGER, gridX INTEGER, blockX INTEGER)")
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
               "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER)")
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
               "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, textId INTEGER)")
    ids = {}
    def sid(s):
        if s not in ids:
            ids[s] = len(ids) + 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (ids[s], s))
        return ids[s]
    ns = lambda us: int(round(us * 1000))
    ranges, launches, kernels = story()
    for i, (name, ts, dur) in enumerate(ranges):
        # push/pop ranges (59) with inline text, and start/end ranges (60) named by textId.
        if name == "layer1":
            db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 60, ?, NULL, NULL, NULL, 1, ?)",
                       (ns(ts), ns(ts + dur), i, sid(name)))
        else:
            db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, ?, 1, NULL)",
                       (ns(ts), ns(ts + dur), name))
    launch_id = sid("cudaLaunchKernel_v7000")
    for c, ts in launches:
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, 1, ?, ?)",
                   (ns(ts), ns(ts + 4.0), c, launch_id))
    for name, ts, dur, c in kernels:
        short = name.split("<")[0].split()[-1]
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, 1, ?, ?, 1, 128)",
                   (ns(ts), ns(ts + dur), c, sid(name), sid(short)))
    db.commit()
    db.close()

def main():
    good = json.dumps(torch_trace(), indent=1)
    write_json("torch_trace.json", good)
    write_json("torch_truncated.json", good[: len(good) // 2])
    bad = torch_trace()
    next(e for e in bad["traceEvents"] if e.get("cat") == "kernel")["dur"] = -3.0
    write_json("torch_negative_dur.json", json.dumps(bad, indent=1))
    nsys("nsys_trace.sqlite")
    nsys("nsys_no_kernels_table.sqlite", with_kernels=False)

if __name__ == "__main__":
    main()

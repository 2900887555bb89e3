#!/usr/bin/env python3
"""Generate SCALE-Sim reference compute cycles for the systolic-array mode of `src/sim/`.

Runs the SCALE-Sim package from PyPI (`pip install scalesim`; version 3.0.0 was used; it
needs `numpy<2`, with numpy 2.x its memory model fails with "only 0-dimensional arrays can
be converted to Python scalars") on GEMMs across the OS/WS/IS dataflows, two array sizes,
dense and N:M, and writes `tests/data/sim/scalesim_reference.json`.

Tests read only that JSON; no Python runs at test time.

    python3 -m venv /tmp/ss && /tmp/ss/bin/pip install scalesim 'numpy<2'
    /tmp/ss/bin/python scripts/scalesim_reference.py
"""

import csv
import json
import os
import sys
import tempfile
import time

from scalesim.scale_sim import scalesim

CONFIG = """[general]
run_name = ref

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: 6144
FilterSramSzkB: 6144
OfmapSramSzkB: 2048
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Dataflow: {df}
Bandwidth: 10
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: {sparse}
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: {block}
RandomNumberGeneratorSeed: 40

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""

ARRAYS = [(8, 8), (32, 32)]
DATAFLOWS = ["os", "ws", "is"]
# (M, N, K): a mix of aligned, ragged and skinny shapes, small enough for a trace simulator.
SHAPES = [(64, 64, 64), (100, 60, 72), (256, 32, 128), (16, 200, 96), (128, 128, 256)]
SPARSITY = [None, (2, 4), (1, 4)]


def run_case(rows, cols, df, m, n, k, nm):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "a.cfg")
        topo = os.path.join(tmp, "t.csv")
        layout = os.path.join(tmp, "l.csv")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(rows=rows, cols=cols, df=df,
                                  sparse="true" if nm else "false",
                                  block=nm[1] if nm else 4))
        with open(topo, "w") as f:
            ratio = f"{nm[0]}:{nm[1]}" if nm else "1:1"
            f.write(f"Layer,M,N,K,Sparsity,\nl0,{m},{n},{k},{ratio},\n")
        with open(layout, "w") as f:
            f.write("Layer,\n")
        start = time.perf_counter()
        s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo,
                     layout=layout, input_type_gemm=True)
        s.run_scale(top_path=os.path.join(tmp, "out"))
        wall = time.perf_counter() - start
        with open(os.path.join(tmp, "out", "ref", "COMPUTE_REPORT.csv")) as f:
            row = list(csv.reader(f))[1]
        return int(row[2].strip()), float(row[6].strip()), wall


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/sim/scalesim_reference.json"
    cases = []
    for rows, cols in ARRAYS:
        for df in DATAFLOWS:
            for (m, n, k) in SHAPES:
                for nm in SPARSITY:
                    cycles, util, wall = run_case(rows, cols, df, m, n, k, nm)
                    cases.append({
                        "rows": rows, "cols": cols, "dataflow": df,
                        "m": m, "n": n, "k": k,
                        "sparsity": f"{nm[0]}:{nm[1]}" if nm else "dense",
                        "compute_cycles": cycles, "compute_util_pct": util,
                        "scalesim_wall_s": round(wall, 4),
                    })
                    print(cases[-1], flush=True)
    doc = {
        "generator": "scripts/scalesim_reference.py",
        "tool": "scalesim 3.0.0 (PyPI), numpy 1.26.4",
        "metric": "COMPUTE_REPORT.csv 'Total Cycles' (compute cycles, excluding prefetch)",
        "note": "GEMM mode: SCALE-Sim maps M to ifmap rows (Sr), N to filters (Sc), K to the reduction (T).",
        "cases": cases,
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

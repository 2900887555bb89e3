#!/usr/bin/env python3
"""Side-by-side: sparsegate's dense comparators (fp32, bf16, fp16, int8) against Intel MKL, and
our 2:4 kernels against our own dense, on the issue's shapes.

Optional, never needed by the tests. Our numbers come from `sparsegate bench --json` (kernel
and dense comparator interleaved in one process, medians); MKL is called here through ctypes
(`cblas_sgemm`, `cblas_gemm_bf16bf16f32` with bf16 as uint16 arrays, `cblas_gemm_f16f16f32`
with numpy float16, `cblas_gemm_s8u8s32`),
timed as the median of repeated calls after a warm-up, on the same shapes and thread count.
As in `compare_numpy_scipy.py`, every row is `--rounds` alternations (ours dense, MKL, ours
2:4, ours dense, ...): each round gives one ours/MKL ratio and one 2:4/own-dense speedup, and
the table prints the median round and the range, so that drift on a shared machine shows up
as a wide range instead of a biased number.

Run:

    python3 -m venv /tmp/mkl && /tmp/mkl/bin/pip install mkl numpy
    # on AMD, the yardstick that takes the AVX-512 BF16/VNNI paths (the OpenMP CPU build;
    # PyPI's newer `onednn` is a SYCL build that finds no CPU device without a SYCL runtime):
    python3 -m venv /tmp/dnnl && /tmp/dnnl/bin/pip install onednn-cpu-gomp numpy
    /tmp/dnnl/bin/python benches/compare_mkl.py --vendor onednn --threads 2
    cargo build --release
    /tmp/mkl/bin/python benches/compare_mkl.py --threads 2

MKL on an AMD CPU: MKL picks its code path by CPU vendor and model; `MKL_VERBOSE=1` names it
in its first line (printed below as "MKL code path"; on the Zen 5 this was written on it says
"Intel(R) Architecture processors", the generic path, not an AVX-512 one). `MKL_DEBUG_CPU_TYPE`
is ignored by MKL since 2020; `MKL_ENABLE_INSTRUCTIONS` (AVX2, AVX512, AVX512_E1, AVX512_E4,
AVX10_1) only caps what MKL would use, and changed nothing measurable there: sgemm ran at
~200 GFLOP/s on two idle cores (an AVX2-class rate), bf16 at ~180, int8 at 20-40 GOP/s (no
VNNI path), and bf16 with 8-16 tokens took 0.2-0.4 s a call. MKL's OpenMP threads spin
between calls, which a machine shared with other work punishes: read its ranges with that in
mind. Whatever is set is printed with the table.

Cache state: `bench --sparsity dense` alternates two copies of the weights, so each of our
dense products follows the other copy's; each vendor call likewise follows an untimed read
of as many bytes (`--vendor-warm` turns that off). Weights that fit in the last-level cache
would otherwise stay there for the vendor's back-to-back calls and not for ours.

Convention: GEMM M×N×K = M tokens, N output features, K input features; the weight W is
N×K, the activations X are K×M, the output W·X is N×M (what our kernels compute). MKL's int8
GEMM multiplies unsigned by signed bytes (A u8, B s8), so it computes the transposed
product Xᵀ·Wᵀ (activations unsigned, as our VNNI kernel shifts them): the same multiply-adds.
"""

import argparse
import ctypes
import glob
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "sparsegate")

# CBLAS enums (mkl_cblas.h).
ROW_MAJOR, NO_TRANS, TRANS, FIX_OFFSET = 101, 111, 112, 173


def ours(gemm, sparsity, precision, budget, threads):
    cmd = [
        BIN, "bench", "--gemm", gemm, "--sparsity", sparsity, "--precision", precision,
        "--time-budget", str(budget), "--threads", str(threads), "--json",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def dims(gemm):
    m, n, k = (int(v) for v in gemm.split("x"))
    return m, n, k


def gflops(gemm, secs):
    m, n, k = dims(gemm)
    return 2.0 * m * n * k / secs / 1e9


def timed(f, budget, warmup=2, min_reps=5, max_reps=200, between=None):
    """Median seconds of `f` over repeated calls for about `budget` seconds; `between`, if
    given, runs untimed before each call."""
    for _ in range(warmup):
        if between:
            between()
        f()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or (time.perf_counter() - start < budget and len(times) < max_reps):
        if between:
            between()
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1}


def reader(nbytes):
    """An untimed step that reads `nbytes` of another buffer, as the other weight copy's
    product does between two of our dense products (`bench --sparsity dense` interleaves
    two copies): timed back to back instead, a vendor's weights that fit in the last-level
    cache stay there, ours do not, and the ratio measures the cache, not the kernel (on a
    32 MiB-L3 Zen 5, oneDNN's bf16 1×4096² ran 0.33-0.47 ms back to back, 0.49-0.75 after
    reading 18 MiB)."""
    buf = np.ones(max(nbytes // 8, 1), np.uint64)
    return lambda: buf.sum()


class Mkl:
    def __init__(self, path, threads):
        self.lib = ctypes.CDLL(path)
        self.lib.mkl_set_dynamic(ctypes.byref(ctypes.c_int(0)))
        self.lib.mkl_set_num_threads(ctypes.byref(ctypes.c_int(threads)))
        buf = ctypes.create_string_buffer(512)
        self.lib.MKL_Get_Version_String(buf, len(buf))
        self.version = buf.value.decode().strip()
        p, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
        self.lib.cblas_sgemm.argtypes = [i] * 6 + [f, p, i, p, i, f, p, i]
        self.lib.cblas_gemm_bf16bf16f32.argtypes = [i] * 6 + [f, p, i, p, i, f, p, i]
        self.lib.cblas_gemm_f16f16f32.argtypes = [i] * 6 + [f, p, i, p, i, f, p, i]
        self.lib.cblas_gemm_s8u8s32.argtypes = [i] * 7 + [f, p, i, ctypes.c_int8, p, i, ctypes.c_int8, f, p, i, p]

    def product(self, precision, gemm):
        """A zero-argument callable running one MKL product of `gemm` in `precision`, with its
        operands (uniform random) bound."""
        m, n, k = dims(gemm)
        rng = np.random.default_rng(1)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
        if precision == "fp32":
            w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
            x = rng.uniform(-1, 1, (k, m)).astype(np.float32)
            y = np.zeros((n, m), np.float32)
            args = (ROW_MAJOR, NO_TRANS, NO_TRANS, n, m, k, 1.0, ptr(w), k, ptr(x), m, 0.0, ptr(y), m)
            return lambda: self.lib.cblas_sgemm(*args), (w, x, y)
        if precision == "bf16":
            bits = lambda a: (a.view(np.uint32) >> 16).astype(np.uint16)
            w = bits(rng.uniform(-1, 1, (n, k)).astype(np.float32))
            x = bits(rng.uniform(-1, 1, (k, m)).astype(np.float32))
            y = np.zeros((n, m), np.float32)
            args = (ROW_MAJOR, NO_TRANS, NO_TRANS, n, m, k, 1.0, ptr(w), k, ptr(x), m, 0.0, ptr(y), m)
            return lambda: self.lib.cblas_gemm_bf16bf16f32(*args), (w, x, y)
        if precision == "fp16":
            w = rng.uniform(-1, 1, (n, k)).astype(np.float16)
            x = rng.uniform(-1, 1, (k, m)).astype(np.float16)
            y = np.zeros((n, m), np.float32)
            args = (ROW_MAJOR, NO_TRANS, NO_TRANS, n, m, k, 1.0, ptr(w), k, ptr(x), m, 0.0, ptr(y), m)
            return lambda: self.lib.cblas_gemm_f16f16f32(*args), (w, x, y)
        if precision == "int8":
            w = rng.integers(-127, 128, (n, k), dtype=np.int8)
            x = rng.integers(0, 256, (k, m), dtype=np.uint8)
            yt = np.zeros((m, n), np.int32)
            co = np.zeros(1, np.int32)
            # Yᵀ[M×N] = Xᵀ (u8, X stored K×M) · Wᵀ (s8, W stored N×K).
            args = (ROW_MAJOR, TRANS, TRANS, FIX_OFFSET, m, n, k, 1.0, ptr(x), m, 0, ptr(w), k, 0, 0.0,
                    ptr(yt), n, ptr(co))
            return lambda: self.lib.cblas_gemm_s8u8s32(*args), (w, x, yt, co)
        raise ValueError(precision)

    def check(self):
        """Each product on a small shape against numpy, so a wrong binding cannot pass for a
        fast one."""
        gemm = "5x24x40"
        m, n, k = dims(gemm)
        for precision in ("fp32", "bf16", "fp16", "int8"):
            run, bufs = self.product(precision, gemm)
            run()
            if precision == "fp32":
                w, x, y = bufs
                ok = np.allclose(y, w @ x, atol=1e-4)
            elif precision == "bf16":
                w, x, y = bufs
                wide = lambda a: (a.astype(np.uint32) << 16).view(np.float32)
                ok = np.allclose(y, wide(w) @ wide(x), atol=1e-4)
            elif precision == "fp16":
                w, x, y = bufs
                ok = np.allclose(y, w.astype(np.float32) @ x.astype(np.float32), atol=1e-4)
            else:
                w, x, yt, _ = bufs
                ok = np.array_equal(yt.T, w.astype(np.int64) @ x.astype(np.int64))
            if not ok:
                sys.exit(f"MKL {precision} product does not match numpy: check the bindings")


class OneDnn:
    """oneDNN's matmul primitive through its C API (PyPI's `onednn`, libdnnl.so.3). oneDNN
    dispatches by ISA, not by CPU vendor, so on AMD it runs its AVX-512 BF16/VNNI kernels where
    MKL takes a generic path: the honest yardstick there. The weights are reordered once into
    the layout the primitive asks for (`format_tag_any`), as our kernels pack theirs, and only
    the execution is timed."""

    # dnnl_types.h: data types, engine kind, queries, exec arg ids.
    F16, BF16, F32, S32, S8, U8 = 1, 2, 3, 4, 5, 6
    CPU, TAG_ANY, QUERY_WEIGHTS_MD = 1, 1, 131
    ARG_SRC, ARG_DST, ARG_WEIGHTS = 1, 17, 33
    ALLOCATE = ctypes.c_void_p(2**64 - 1)  # DNNL_MEMORY_ALLOCATE

    class ExecArg(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]

    def __init__(self, path, threads):
        os.environ["OMP_NUM_THREADS"] = str(threads)
        self.lib = ctypes.CDLL(path)
        v = self.lib.dnnl_version
        v.restype = ctypes.POINTER(ctypes.c_int * 3)
        major, minor, patch = v().contents
        self.version = f"oneDNN {major}.{minor}.{patch}"
        self.engine = ctypes.c_void_p()
        self._ok(self.lib.dnnl_engine_create(ctypes.byref(self.engine), self.CPU, ctypes.c_size_t(0)), "engine")
        self.stream = ctypes.c_void_p()
        self._ok(self.lib.dnnl_stream_create(ctypes.byref(self.stream), self.engine, ctypes.c_uint(1)), "stream")
        self.lib.dnnl_primitive_desc_query_md.restype = ctypes.c_void_p

    @staticmethod
    def _ok(status, what):
        if status != 0:
            raise RuntimeError(f"oneDNN {what}: status {status}")

    def _md(self, dims, dtype, strides=None):
        md = ctypes.c_void_p()
        d = (ctypes.c_int64 * 12)(*dims)
        if strides is None:
            self._ok(self.lib.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(dims), d, dtype, self.TAG_ANY), "md")
        else:
            st = (ctypes.c_int64 * 12)(*strides)
            self._ok(self.lib.dnnl_memory_desc_create_with_strides(ctypes.byref(md), len(dims), d, dtype, st), "md")
        return md

    def _mem(self, md, handle):
        mem = ctypes.c_void_p()
        self._ok(self.lib.dnnl_memory_create(ctypes.byref(mem), md, self.engine, handle), "memory")
        return mem

    def _run(self, prim, args):
        arr = (self.ExecArg * len(args))(*[self.ExecArg(a, m) for a, m in args])
        self._ok(self.lib.dnnl_primitive_execute(prim, self.stream, len(args), arr), "execute")
        self._ok(self.lib.dnnl_stream_wait(self.stream), "wait")

    def product(self, precision, gemm):
        """Yᵀ[M×N] = Xᵀ[M×K] · Wᵀ[K×N]: the same multiply-adds as W·X. Returns a callable
        running one product, and the buffers (W N×K, X K×M, Y N×M as numpy views, for check)."""
        m, n, k = dims(gemm)
        rng = np.random.default_rng(1)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
        if precision == "fp32":
            dt_in, dt_w, dt_out = self.F32, self.F32, self.F32
            w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
            xt = rng.uniform(-1, 1, (m, k)).astype(np.float32)
            yt = np.zeros((m, n), np.float32)
        elif precision in ("bf16", "fp16"):
            if precision == "bf16":
                bits = lambda a: (a.view(np.uint32) >> 16).astype(np.uint16)
                w = bits(rng.uniform(-1, 1, (n, k)).astype(np.float32))
                xt = bits(rng.uniform(-1, 1, (m, k)).astype(np.float32))
                dt_in = dt_w = self.BF16
            else:
                w = rng.uniform(-1, 1, (n, k)).astype(np.float16)
                xt = rng.uniform(-1, 1, (m, k)).astype(np.float16)
                dt_in = dt_w = self.F16
            dt_out = self.F32
            yt = np.zeros((m, n), np.float32)
        elif precision == "int8":
            dt_in, dt_w, dt_out = self.U8, self.S8, self.S32
            w = rng.integers(-127, 128, (n, k), dtype=np.int8)
            xt = rng.integers(0, 256, (m, k), dtype=np.uint8)
            yt = np.zeros((m, n), np.int32)
        else:
            raise ValueError(precision)
        src_md = self._md((m, k), dt_in, (k, 1))
        w_plain = self._md((k, n), dt_w, (1, k))  # Wᵀ viewed in W's own N×K storage
        w_any = self._md((k, n), dt_w)
        dst_md = self._md((m, n), dt_out, (n, 1))
        pd = ctypes.c_void_p()
        self._ok(self.lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), self.engine, src_md, w_any, None, dst_md, None),
                 f"{precision} matmul (not implemented on this CPU?)")
        prim = ctypes.c_void_p()
        self._ok(self.lib.dnnl_primitive_create(ctypes.byref(prim), pd), "primitive")
        packed_md = ctypes.c_void_p(self.lib.dnnl_primitive_desc_query_md(pd, self.QUERY_WEIGHTS_MD, 0))
        w_mem = self._mem(w_plain, ptr(w))
        packed = self._mem(packed_md, self.ALLOCATE)
        rpd, reorder = ctypes.c_void_p(), ctypes.c_void_p()
        self._ok(self.lib.dnnl_reorder_primitive_desc_create(ctypes.byref(rpd), w_plain, self.engine, packed_md, self.engine, None), "reorder")
        self._ok(self.lib.dnnl_primitive_create(ctypes.byref(reorder), rpd), "reorder primitive")
        self._run(reorder, [(self.ARG_SRC, w_mem), (self.ARG_DST, packed)])
        src = self._mem(src_md, ptr(xt))
        dst = self._mem(dst_md, ptr(yt))
        args = [(self.ARG_SRC, src), (self.ARG_WEIGHTS, packed), (self.ARG_DST, dst)]
        keep = (w, xt, yt, src_md, w_plain, w_any, dst_md, pd, prim, w_mem, packed, rpd, reorder, src, dst)
        # Buffers in the MKL binding's orientation for check(): W, X (K×M), Y (N×M).
        return (lambda: self._run(prim, args)), (w, xt.T, yt.T, keep)

    def check(self):
        """Each precision oneDNN implements here, on a small shape, against numpy."""
        self.available = []
        for precision in ("fp32", "bf16", "fp16", "int8"):
            try:
                run, (w, x, y, _) = self.product(precision, "5x24x40")
            except RuntimeError as e:
                print(f"# oneDNN {precision}: {e}; skipped", file=sys.stderr)
                continue
            run()
            if precision == "bf16":
                wide = lambda a: (a.astype(np.uint32) << 16).view(np.float32)
                ok = np.allclose(y, wide(w) @ wide(x), atol=1e-3)
            elif precision == "int8":
                ok = np.array_equal(y, w.astype(np.int64) @ x.astype(np.int64))
            else:
                ok = np.allclose(y, w.astype(np.float32) @ x.astype(np.float32), atol=1e-2)
            if not ok:
                sys.exit(f"oneDNN {precision} product does not match numpy: check the bindings")
            self.available.append(precision)


def mkl_code_path(path):
    """MKL_VERBOSE's first line in a child process (it prints the code path it dispatched to)."""
    code = (
        "import ctypes, numpy as np;"
        f"l = ctypes.CDLL({path!r});"
        "a = np.ones((8, 8), np.float32); p = lambda v: v.ctypes.data_as(ctypes.c_void_p);"
        "f = l.cblas_sgemm;"
        "f.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,"
        " ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int];"
        "f(101, 111, 111, 8, 8, 8, 1.0, p(a), 8, p(a), 8, 0.0, p(a), 8)"
    )
    env = dict(os.environ, MKL_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout
    first = next((l for l in out.splitlines() if l.startswith("MKL_VERBOSE")), "(no MKL_VERBOSE output)")
    return first.removeprefix("MKL_VERBOSE").strip()


def cpu():
    """The CPU model and the flags the kernels choose by."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, flags


def isa_paths(threads):
    """The ISA path of our dense comparators, as `sparsegate bench` reports them (the bf16
    kernel is chosen by measurement, so the CPU flags alone do not say it)."""
    return {
        p: ours("64x256x256", "dense", p, 0.05, threads)["isa"]["comparator"]
        for p in ("fp32", "bf16", "fp16", "int8")
    }


def span(values):
    values = sorted(values)
    return statistics.median(values), values[0], values[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per sparsegate bench and per MKL timing")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of ours and MKL per row")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for ours and MKL (default: all)")
    ap.add_argument("--precisions", default="fp32,bf16,fp16,int8", help="comma-separated subset of fp32,bf16,fp16,int8")
    ap.add_argument("--tokens", default="1,8,16,128,512", help="token counts of the LLaMA-2-7B FFN shapes")
    ap.add_argument("--quick", action="store_true", help="small shapes only (a smoke run)")
    ap.add_argument("--mkl", default=None, help="path of libmkl_rt (default: sys.prefix/lib/libmkl_rt.so*)")
    ap.add_argument("--vendor", choices=("mkl", "onednn"), default="mkl",
                    help="the yardstick: MKL's cblas GEMMs, or oneDNN's matmul (ISA-dispatched: the one to use on AMD)")
    ap.add_argument("--json", default=None, help="also write every round's numbers to this file")
    ap.add_argument("--vendor-warm", action="store_true",
                    help="time the vendor's calls back to back (default: each after reading as many bytes as the weights, "
                         "as each of our dense products follows the other dense copy's)")
    args = ap.parse_args()
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} not found: run `cargo build --release` first")
    if args.vendor == "onednn":
        path = next(iter(sorted(glob.glob(os.path.join(sys.prefix, "lib", "libdnnl.so*")))), None)
        if not path:
            sys.exit("libdnnl not found under sys.prefix/lib: `pip install onednn` in this interpreter's environment")
        mkl = OneDnn(path, args.threads)
    else:
        path = args.mkl or next(iter(sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))), None)
        if not path:
            sys.exit("libmkl_rt not found under sys.prefix/lib: `pip install mkl` in this interpreter's environment")
        os.environ["MKL_NUM_THREADS"] = str(args.threads)
        mkl = Mkl(path, args.threads)
    mkl.check()

    model, flags = cpu()
    paths = isa_paths(args.threads)
    print(f"# CPU: {model}; {os.cpu_count()} logical CPUs")
    print("# CPU flags: " + " ".join(f for f in ("avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_int8") if f in flags))
    print("# ours, ISA path of the dense comparators: " + ", ".join(f"{p} {paths[p]}" for p in paths))
    if args.vendor == "onednn":
        print(f"# vendor: {mkl.version} ({path}), matmul primitive, weights reordered once; "
              f"OMP_NUM_THREADS={args.threads}; implemented here: {', '.join(mkl.available)}")
        print(f"# ONEDNN_VERBOSE=1 names the ISA it dispatched to")
    else:
        print(f"# MKL: {mkl.version} ({path})")
        print(f"# MKL code path: {mkl_code_path(path)}")
        for var in ("MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "MKL_CBWR"):
            print(f"# {var}={os.environ.get(var, '(unset)')}")
    print(f"# threads: {args.threads} (ours --threads, the vendor's threads, dynamic off); "
          f"{args.rounds} rounds; {args.budget:.1f} s per timing")
    if args.vendor_warm:
        print("# the vendor's calls back to back (--vendor-warm): weights that fit in the last-level cache stay "
              "there for it and not for ours, which alternates two copies")
    else:
        print("# each vendor call follows an untimed read of as many bytes as the weights, as each of our dense "
              "products follows the other dense copy's")

    if args.quick:
        shapes = ["64x256x256", "8x512x256", "8x256x512"]
    else:
        tokens = [int(t) for t in args.tokens.split(",")]
        # 2048³, and per token count 4096² and the LLaMA-2-7B FFN shapes (up: 4096 → 11008,
        # down: 11008 → 4096); 512×4096×4096 is the square shape.
        shapes = ["2048x2048x2048"]
        shapes += [f"{t}x{nk}" for t in tokens for nk in ("4096x4096", "11008x4096", "4096x11008")]

    short = "DNN" if args.vendor == "onednn" else "MKL"
    header = (
        f"{'prec':>5} {'gemm':>16} {'ours ms':>9} {'GFLOP/s':>8} {short + ' ms':>9} {'GFLOP/s':>8} "
        f"{'ours/' + short:>8} {'range':>13} {'2:4 ms':>8} {'GF/s eq':>8} {'2:4/dense':>9} {'range':>13}"
    )
    records = []
    vendor = "oneDNN" if args.vendor == "onednn" else "MKL"
    for precision in args.precisions.split(","):
        if args.vendor == "onednn" and precision not in mkl.available:
            print(f"\n## {precision}: oneDNN has no {precision} matmul on this CPU; skipped")
            continue
        print(f"\n## {precision}: dense ({paths[precision]}) vs {vendor}, and 2:4 vs our dense")
        print(header)
        for gemm in shapes:
            run, bufs = mkl.product(precision, gemm)
            _, n, k = dims(gemm)
            between = None if args.vendor_warm else reader(n * k * WEIGHT_BYTES[precision])
            rounds = []
            for _ in range(args.rounds):
                dense = ours(gemm, "dense", precision, args.budget, args.threads)
                t_mkl = timed(run, args.budget, between=between)
                sparse = ours(gemm, "2:4", precision, args.budget, args.threads)
                rounds.append({
                    "ours_s": dense["kernel_s"]["estimate"],
                    "mkl_s": t_mkl,
                    "two_of_four_s": sparse["kernel_s"]["estimate"],
                    "two_of_four_speedup": sparse["speedup"]["estimate"],
                    "two_of_four_path": sparse["path"],
                    "two_of_four_isa": sparse["isa"]["candidate"],
                })
            del run, bufs, between
            t = statistics.median(r["ours_s"] for r in rounds)
            t_mkl = statistics.median(r["mkl_s"] for r in rounds)
            t_24 = statistics.median(r["two_of_four_s"] for r in rounds)
            ratio, lo, hi = span([r["mkl_s"] / r["ours_s"] for r in rounds])
            sp, sp_lo, sp_hi = span([r["two_of_four_speedup"] for r in rounds])
            print(
                f"{precision:>5} {gemm:>16} {t*1e3:9.3f} {gflops(gemm, t):8.1f} {t_mkl*1e3:9.3f} "
                f"{gflops(gemm, t_mkl):8.1f} {ratio:7.2f}x [{lo:5.2f},{hi:5.2f}] {t_24*1e3:8.3f} "
                f"{gflops(gemm, t_24):8.1f} {sp:8.2f}x [{sp_lo:5.2f},{sp_hi:5.2f}]",
                flush=True,
            )
            records.append({"precision": precision, "gemm": gemm, "rounds": rounds})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": model, "threads": args.threads, "vendor": mkl.version, "rows": records}, f, indent=1)


if __name__ == "__main__":
    main()

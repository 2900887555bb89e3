#!/usr/bin/env python3
"""Generate tests/data/stats/scipy_cases.json: reference results from scipy/numpy.

The Rust statistics engine (src/validate/stats) must reproduce scipy on the same data
(DESIGN.md §4). This script is the oracle; its output is committed so the Rust tests need no
Python. Re-run after changing cases:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install scipy numpy
    /tmp/venv/bin/python scripts/gen_stats_fixtures.py

Contents per case: the two samples x and y; scipy.stats.mannwhitneyu (methods exact,
asymptotic and auto; alternatives two-sided, less, greater; use_continuity=True) where the
method applies; scipy.stats.ttest_ind(equal_var=False) where defined; numpy.percentile
(method="linear", Hyndman-Fan type 7) of x at several q; and the Hodges-Lehmann shift,
numpy.median of all pairwise differences y_j - x_i.
"""
import json
import pathlib

import numpy as np
import scipy
from scipy import stats

QS = [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0]
ALTS = ["two-sided", "less", "greater"]


def cases():
    rng = np.random.default_rng(20261129)
    out = []

    def add(name, x, y):
        out.append((name, [float(v) for v in x], [float(v) for v in y]))

    add("single-values", [1.0], [2.0])
    add("single-identical", [3.0], [3.0])
    add("identical-samples", [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    add("all-same-value", [5.0] * 6, [5.0] * 4)
    add("separated-3v3", [1, 2, 3], [4, 5, 6])
    add("separated-8v8", range(8), range(8, 16))
    add("interleaved-5v7", [1, 3, 5, 7, 9], [2, 4, 6, 8, 10, 12, 14])
    add("one-vs-many", [0.5], rng.normal(size=12))
    add("many-vs-one", rng.normal(size=12), [0.5])
    add("heavy-ties-small", [1, 1, 2, 2, 2, 3], [2, 2, 3, 3, 4])
    add("heavy-ties-large", rng.integers(0, 4, 60), rng.integers(1, 5, 45))
    add("heavy-ties-rounded-timings", np.round(rng.lognormal(0, 0.1, 40), 1), np.round(rng.lognormal(0.05, 0.1, 40), 1))
    add("binary-values", rng.integers(0, 2, 30), rng.integers(0, 2, 25))
    for i, (n1, n2) in enumerate([(2, 3), (4, 4), (5, 8), (7, 9), (8, 20), (3, 40), (9, 9), (10, 12)]):
        add(f"normal-small-{i}-{n1}v{n2}", rng.normal(10, 1, n1), rng.normal(10.5, 1, n2))
    for i, (n1, n2) in enumerate([(20, 20), (30, 30), (50, 40), (100, 100), (200, 150)]):
        add(f"normal-large-{i}-{n1}v{n2}", rng.normal(0, 1, n1), rng.normal(0.2, 1.3, n2))
    for i, (n1, n2, shift) in enumerate([(6, 6, 0.0), (15, 15, 0.05), (30, 30, 0.0), (30, 30, 0.15), (100, 80, 0.03), (8, 30, 0.2)]):
        add(f"lognormal-{i}-{n1}v{n2}-s{shift}", 1e-3 * rng.lognormal(0, 0.07, n1), 1e-3 * (1 + shift) * rng.lognormal(0, 0.07, n2))
    for i, (n1, n2) in enumerate([(20, 20), (40, 60), (7, 8)]):
        def bimodal(n):
            mode = rng.random(n) < 0.3
            return np.where(mode, rng.normal(2.0, 0.05, n), rng.normal(1.0, 0.05, n))
        add(f"bimodal-{i}-{n1}v{n2}", bimodal(n1), bimodal(n2))
    add("heavy-tail-cauchy", rng.standard_cauchy(25), rng.standard_cauchy(25) + 1)
    add("far-tail-separated-30v30", rng.normal(0, 1, 30), rng.normal(8, 1, 30))
    add("far-tail-separated-6v30", rng.normal(0, 1, 6), rng.normal(8, 1, 30))
    add("large-offset-timings", 1e6 + rng.normal(0, 1e-3, 25), 1e6 + rng.normal(5e-4, 1e-3, 25))
    add("negative-and-zero", [-3, -1, 0, 0, 2], [-2, 0, 1, 4, 5, 6])
    add("unbalanced-2v200", rng.normal(0, 1, 2), rng.normal(0, 1, 200))
    add("unbalanced-300v5", rng.exponential(1, 300), rng.exponential(1.5, 5))
    add("exact-threshold-8v9", rng.normal(0, 1, 8), rng.normal(1, 1, 9))
    add("exact-threshold-9v9", rng.normal(0, 1, 9), rng.normal(1, 1, 9))
    add("exact-unbalanced-5v300", rng.normal(0.3, 1, 5), rng.normal(0, 1, 300))
    add("exact-unbalanced-8v400-far-tail", rng.normal(3, 1, 8), rng.normal(0, 1, 400))
    return out


def mwu(x, y):
    has_ties = len(np.unique(np.concatenate([x, y]))) < len(x) + len(y)
    res = {}
    for method in ["exact", "asymptotic", "auto"]:
        small, large = min(len(x), len(y)), max(len(x), len(y))
        if method == "exact" and (has_ties or small > 40 or (large > 60 and small > 8) or large > 400):
            continue  # exact is undefined with ties, and slow for large samples
        res[method] = {}
        for alt in ALTS:
            r = stats.mannwhitneyu(x, y, use_continuity=True, alternative=alt, method=method)
            res[method][alt] = {"u": float(r.statistic), "p": float(r.pvalue)}
    return res


def welch(x, y):
    if len(x) < 2 or len(y) < 2 or (np.var(x) == 0 and np.var(y) == 0):
        return None
    r = stats.ttest_ind(x, y, equal_var=False)
    return {"t": float(r.statistic), "df": float(r.df), "p": float(r.pvalue)}


def main():
    out = []
    for name, x, y in cases():
        xa, ya = np.asarray(x), np.asarray(y)
        out.append({
            "name": name,
            "x": x,
            "y": y,
            "mannwhitneyu": mwu(xa, ya),
            "welch": welch(xa, ya),
            "percentile_x": [{"q": q, "value": float(np.percentile(xa, 100 * q, method="linear"))} for q in QS],
            "quantile_x": [{"q": q, "value": float(np.quantile(xa, q, method="linear"))} for q in QS],
            "hl_shift": float(np.median((ya[:, None] - xa[None, :]).ravel())),
        })
    doc = {
        "generator": "scripts/gen_stats_fixtures.py",
        "scipy": scipy.__version__,
        "numpy": np.__version__,
        "cases": out,
    }
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "stats" / "scipy_cases.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(out)} cases to {path}")


if __name__ == "__main__":
    main()

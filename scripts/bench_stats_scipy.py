#!/usr/bin/env python3
"""Time scipy on the benchmark of issue 5 and write the shared data file.

The same work as the `#[ignore]`d Rust benchmark `tests/stats/bench.rs`, on the same data
(tests/data/stats/bench.json, written here on first run from a fixed seed): Mann-Whitney U
(asymptotic, two-sided), the Hodges-Lehmann shift (median of the 10^6 pairwise differences)
with its rank-inversion interval ends (two more order statistics), and a 10,000-resample
percentile bootstrap of the ratio of medians (scipy.stats.bootstrap, vectorized).

    /tmp/venv/bin/python scripts/bench_stats_scipy.py
    cargo test --release --test stats bench:: -- --ignored --nocapture
"""
import json
import pathlib
import time

import numpy as np
from scipy import stats

PATH = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "stats" / "bench.json"


def data():
    if not PATH.exists():
        rng = np.random.default_rng(2026)
        a = (1e-3 * rng.lognormal(0, 0.07, 1000)).tolist()
        b = (1.03e-3 * rng.lognormal(0, 0.07, 1000)).tolist()
        PATH.write_text(json.dumps({"baseline": a, "candidate": b}) + "\n")
    d = json.loads(PATH.read_text())
    return np.asarray(d["baseline"]), np.asarray(d["candidate"])


def once(a, b):
    stats.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic")
    d = np.sort((b[:, None] - a[None, :]).ravel())
    n1, n2 = len(a), len(b)
    k = int(np.floor(n1 * n2 / 2 - 1.959963984540054 * np.sqrt(n1 * n2 * (n1 + n2 + 1) / 12) + 0.5))
    _ = (np.median(d), d[k - 1], d[n1 * n2 - k])
    stats.bootstrap((a, b), lambda x, y, axis=-1: np.median(y, axis=axis) / np.median(x, axis=axis),
                    n_resamples=10_000, method="percentile", vectorized=True, random_state=1, batch=1000)


def main():
    a, b = data()
    once(a, b)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        once(a, b)
        times.append(time.perf_counter() - t)
    print(json.dumps({"scipy_median_ms": 1000 * float(np.median(times)), "runs_ms": [1000 * t for t in times]}))


if __name__ == "__main__":
    main()

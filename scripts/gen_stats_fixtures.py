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

Issue 5 additions, per case: scipy.stats.median_abs_deviation of x and its type-7
quartiles (Tukey fences); statsmodels ttost_ind(usevar="unequal") for equivalence bounds
(-d, d); the BCa levels of scipy.stats._resampling._bca_interval (a private function: the
public bootstrap draws its own replicates with numpy's RNG, which Rust cannot reproduce, so
the fixture fixes 199 replicates and checks the deterministic part: z0, the jackknife
acceleration and the two levels) for the difference of means, the ratio of medians and the
difference of p95. Top level: statsmodels multipletests (holm, fdr_bh), mcnemar (exact and
chi-square with continuity correction) and proportion_confint(method="wilson").

    /tmp/venv/bin/pip install scipy numpy statsmodels
"""
import json
import pathlib

import numpy as np
import scipy
import statsmodels
from scipy import stats
from scipy.stats._resampling import _bca_interval
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import ttost_ind

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


def tost(x, y):
    if len(x) < 2 or len(y) < 2 or (np.var(x) == 0 and np.var(y) == 0):
        return None
    d = 0.5 * (np.std(x, ddof=1) + np.std(y, ddof=1)) + 1e-3
    p, (t1, p1, _), (t2, p2, df) = ttost_ind(x, y, -d, d, usevar="unequal")
    return {"low": float(-d), "high": float(d), "p": float(p), "t_low": float(t1), "p_low": float(p1),
            "t_high": float(t2), "p_high": float(p2), "df": float(df)}


def _q95(v, axis=-1):
    return np.percentile(v, 95, axis=axis, method="linear")


BCA_STATS = {
    "diff_of_means": lambda a, b, axis=-1: np.mean(b, axis=axis) - np.mean(a, axis=axis),
    "ratio_of_medians": lambda a, b, axis=-1: np.median(b, axis=axis) / np.median(a, axis=axis),
    "diff_of_p95": lambda a, b, axis=-1: _q95(b, axis) - _q95(a, axis),
}


def bca(x, y, rng):
    # x is the baseline (a), y the candidate (b).
    if len(x) < 2 or len(y) < 2:
        return None
    out = {}
    for name, f in BCA_STATS.items():
        if name == "ratio_of_medians" and (np.median(x) <= 0 or np.min(x) <= 0 or np.min(y) <= 0):
            continue
        theta = float(f(x, y))
        # 199 replicates from an ordinary bootstrap (numpy RNG), fixed in the fixture.
        ia = rng.integers(0, len(x), (199, len(x)))
        ib = rng.integers(0, len(y), (199, len(y)))
        reps = f(x[ia], y[ib], axis=-1)
        if not np.all(np.isfinite(reps)):
            continue
        a1, a2, a_hat = _bca_interval((x, y), f, axis=-1, alpha=0.025, theta_hat_b=reps[None, :], batch=None,
                                      xp=np)
        a1, a2, a_hat = float(np.ravel(a1)[0]), float(np.ravel(a2)[0]), float(np.ravel(a_hat)[0])
        if not (np.isfinite(a1) and np.isfinite(a2) and np.isfinite(a_hat)):
            continue
        out[name] = {"estimate": theta, "replicates": [float(v) for v in reps], "acceleration": a_hat,
                     "alpha_1": a1, "alpha_2": a2,
                     "low": float(np.percentile(reps, 100 * a1)), "high": float(np.percentile(reps, 100 * a2))}
    return out


def multitest_cases(rng):
    out = []
    vecs = [[0.01, 0.04, 0.03, 0.5], [0.001], [0.2, 0.2, 0.2], [0.0, 1.0, 0.05, 0.049, 0.051]]
    vecs += [list(rng.uniform(0, 0.2, 12)), list(rng.beta(0.3, 4, 30)), list(rng.uniform(0, 1, 7))]
    for ps in vecs:
        ps = [float(p) for p in ps]
        out.append({"p": ps, "holm": [float(v) for v in multipletests(ps, method="holm")[1]],
                    "fdr_bh": [float(v) for v in multipletests(ps, method="fdr_bh")[1]]})
    return out


def mcnemar_cases():
    out = []
    for b, c in [(0, 0), (1, 9), (9, 1), (5, 5), (0, 7), (12, 30), (100, 130), (3, 4), (250, 180), (1, 1)]:
        table = [[10, b], [c, 20]]
        ex = mcnemar(table, exact=True)
        item = {"b": b, "c": c, "exact": {"statistic": float(ex.statistic), "p": float(ex.pvalue)}}
        if b + c > 0:
            ch = mcnemar(table, exact=False, correction=True)
            item["chi2"] = {"statistic": float(ch.statistic), "p": float(ch.pvalue)}
        out.append(item)
    return out


def wilson_cases():
    out = []
    for k, n, conf in [(0, 10, 0.95), (10, 10, 0.95), (3, 10, 0.9), (1, 1, 0.95), (47, 100, 0.99), (998, 1000, 0.95),
                       (5, 2000, 0.95), (15, 40, 0.8)]:
        lo, hi = proportion_confint(k, n, alpha=1 - conf, method="wilson")
        out.append({"successes": k, "n": n, "confidence": conf, "low": float(lo), "high": float(hi)})
    return out


def main():
    out = []
    bca_rng = np.random.default_rng(5)
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
            "mad_x": float(stats.median_abs_deviation(xa)),
            "quartiles_x": [float(np.percentile(xa, 25)), float(np.percentile(xa, 75))],
            "tost": tost(xa, ya),
            "bca": bca(xa, ya, bca_rng),
        })
    doc = {
        "generator": "scripts/gen_stats_fixtures.py",
        "scipy": scipy.__version__,
        "numpy": np.__version__,
        "statsmodels": statsmodels.__version__,
        "cases": out,
        "multitest": multitest_cases(np.random.default_rng(7)),
        "mcnemar": mcnemar_cases(),
        "wilson": wilson_cases(),
    }
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "stats" / "scipy_cases.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(out)} cases to {path}")


if __name__ == "__main__":
    main()

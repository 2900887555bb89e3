#!/usr/bin/env python3
"""Reference values for the paired-quality statistics in src/validate/stats/proportion.rs
(`newcombe_paired`) and the McNemar p-values the quality guardrails report.

Newcombe's paired interval (method 10, Stat. Med. 1998;17:2635) is written out here
independently, on statsmodels' Wilson intervals; with phi = 0 it must equal statsmodels'
independent-samples Newcombe interval, which anchors it to a published implementation.
McNemar: statsmodels `mcnemar(exact=True)`.

    pip install statsmodels && python3 scripts/gen_paired_quality_fixtures.py
"""
import math

from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint


def newcombe_paired(a, b, c, d, alpha=0.05):
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = proportion_confint(a + b, n, alpha=alpha, method="wilson")
    l2, u2 = proportion_confint(a + c, n, alpha=alpha, method="wilson")
    den = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(den) if den > 0 else 0.0
    dl = math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    du = math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return p1 - p2 - dl, p1 - p2 + du


# phi = 0 (a*d == b*c): the paired interval is the independent one.
print("phi=0", newcombe_paired(20, 10, 20, 10),
      confint_proportions_2indep(30, 60, 40, 60, method="newcomb", compare="diff"))
for t in [(340, 6, 12, 1), (330, 2, 9, 18), (12, 9, 2, 21)]:
    p = mcnemar([[t[0], t[1]], [t[2], t[3]]], exact=True).pvalue
    print(t, repr(newcombe_paired(*t)), repr(float(p)))

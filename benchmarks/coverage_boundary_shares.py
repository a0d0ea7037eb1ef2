"""Coverage of Design A intervals for proportions near 0 or 1 (issue 24, point 3).

A data generator of its own: one LLM x strategy, ``--items`` items x 6 sources (from a pool of
``--pool``) x 5 factors (claims f T); half the items have a correct prior. A correct prior facing a
wrong claim gives way with probability p_i = expit(logit(q) + a_i), a_i ~ N(0, 1) per item (the
clustering); otherwise nobody moves. So CD = 1 - P(give way) is near 1, and the estimand is
1 - E[p_i] (every item has the same number of eligible trials; E by quadrature). For each
data set the package's estimate and variance components of CD (`stats.l2d._group_stats`,
crossed) give two 95 % intervals: the old one (normal z, clipped to [0, 1]) and the new one
(`stats.crossed.crossed_se_interval`: Wilson at the clustered effective size, one trial per
item at the bound, small-cluster t). Counted: coverage, the share of zero-width intervals and
the mean width. Monte Carlo SE of a coverage near 0.95: sqrt(0.95 * 0.05 / sets).

    python benchmarks/coverage_boundary_shares.py --sets 300 --give-way 0.002,0.01,0.05
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.special import expit, logit

FACTORS = np.array([1 / 3, 1 / 2, 1.0, 2.0, 3.0])


def make_trials(rng: np.random.Generator, n_items: int, pool: int, q: float) -> pd.DataFrame:
    rel, pop = rng.uniform(size=pool), rng.uniform(size=pool)
    T = np.round(rng.uniform(100, 1000, n_items))
    correct = np.arange(n_items) % 2 == 0
    P1 = np.where(correct, T, np.round(T * 1.3))
    p = expit(logit(q) + rng.normal(0, 1, n_items))
    src = np.array([rng.choice(pool, 6, replace=False) for _ in range(n_items)])
    i = np.repeat(np.arange(n_items), 30)
    j = np.repeat(src.ravel(), 5)
    f = np.tile(FACTORS, n_items * 6)
    C = f * T[i]
    give = correct[i] & (f != 1.0) & (rng.random(len(i)) < p[i])
    P2 = np.where(give, C, P1[i])
    return pd.DataFrame({"llm": "m", "strategy": "zero-shot", "item_id": i, "truth": T[i], "source": j,
                         "reliability": rel[j], "popularity": pop[j], "factor": f, "claim": C, "prior": P1[i],
                         "posterior": P2, "valid": True})


def true_cd(q: float) -> float:
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return float(1 - np.sum(w * expit(logit(q) + x)) / np.sum(w))


def main() -> None:
    from discern_stats.stats.crossed import crossed_se_interval, source_variance
    from discern_stats.stats.l2d import _group_stats, prepare
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=300)
    ap.add_argument("--items", type=int, default=60)
    ap.add_argument("--pool", type=int, default=30)
    ap.add_argument("--give-way", default="0.002,0.01,0.05")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    print("| P(give way) median | true CD | interval | coverage | zero-width | mean width |")
    print("|---|---|---|---|---|---|")
    for q in (float(x) for x in a.give_way.split(",")):
        rng = np.random.default_rng([a.seed, int(q * 1e6)])
        truth = true_cd(q)
        res = {"old": [], "new": []}
        for s in range(a.sets):
            g = prepare(make_trials(rng, a.items, a.pool, q), keep_invalid=True)
            st = _group_stats(g, n_resamples=500, seed=s, method="crossed")["CD"]
            b = st["boot"][np.isfinite(st["boot"])]
            vi, vs = b.var(ddof=1), source_variance(st["source_term"])
            est, se = st["estimate"], np.sqrt(vi + vs)
            res["old"].append((max(0.0, est - 1.96 * se), min(1.0, est + 1.96 * se)))
            items, sources = st["clusters"]
            iv = crossed_se_interval(est, vi, vs, level=0.95, chance=0.5, bounds=(0, 1), n_items=items,
                                     n_sources=sources, proportion=(st["n"], items))
            res["new"].append((iv["lo"], iv["hi"]))
        for name, ivs in res.items():
            lo, hi = np.array(ivs).T
            print(f"| {q} | {truth:.4f} | {name} | {np.mean((lo <= truth) & (truth <= hi)):.3f} | "
                  f"{np.mean(hi - lo == 0):.3f} | {np.mean(hi - lo):.4f} |", flush=True)
    print(f"Monte Carlo SE at 0.95: {np.sqrt(0.95 * 0.05 / a.sets):.3f}; {a.sets} data sets of {a.items} items "
          f"x 6 sources (pool {a.pool}) x 5 factors per row")


if __name__ == "__main__":
    main()

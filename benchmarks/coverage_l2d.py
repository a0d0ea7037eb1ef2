"""Coverage of Design A intervals under the crossed design (issue 14), crossed vs items-only.

Each simulated data set is one LLM x strategy: ``--items`` items, each drawing one source from
each of the 6 popularity x reliability strata of a pool of ``--pool`` sources (sources recur
across items), 5 factors. The respondent moves a fraction w of the way to the claim,
logit(w) = -0.5 + u_item + v_source + e, with u_item ~ N(0, 0.5), e ~ N(0, 1) and source effects
v_source ~ N(0, SD) independent of reliability and popularity; a prior is exact with
probability 0.4. So the true SD and rho(Delta, popularity) are 0 and the true reliability
propensity is 0.5, whatever the source-effect SD; sources add dependence only.

For SD, rho(Delta, popularity) and the reliability propensity the script prints the share of
95 % intervals that hold the truth, for the crossed method (default) and the items-only
percentile bootstrap, at each source-effect SD, with its binomial SE.

    python benchmarks/coverage_l2d.py --sets 200
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.special import expit

from discern_stats.stats.l2d import l2d_metrics

FACTORS = np.array([1 / 3, 1 / 2, 1.0, 2.0, 3.0])
TRUTH = {"SD": 0.0, "rho_pop": 0.0, "rel_propensity": 0.5}


def simulate(rng: np.random.Generator, n_items: int, pool: int, source_sd: float) -> pd.DataFrame:
    rel, pop = rng.uniform(size=pool), rng.uniform(size=pool)
    stratum = np.digitize(pop, np.quantile(pop, [1 / 3, 2 / 3])) * 2 + (rel > np.median(rel))
    v = rng.normal(0, source_sd, pool)
    drawn = np.column_stack([rng.choice(np.flatnonzero(stratum == k), n_items) for k in range(6)])
    item = np.repeat(np.arange(n_items), 30)
    src = np.repeat(drawn, 5, axis=1).ravel()
    factor = np.tile(FACTORS, n_items * 6)
    truth = np.round(rng.uniform(10, 1000, n_items))[item]
    prior_ratio = np.where(rng.random(n_items) < 0.4, 1.0, np.exp(rng.normal(0, 0.4, n_items)))
    prior = np.round(truth * prior_ratio[item])
    claim = truth * factor
    w = expit(-0.5 + rng.normal(0, 0.5, n_items)[item] + v[src] + rng.normal(0, 1.0, len(item)))
    post = prior + w * (claim - prior)
    return pd.DataFrame({"llm": "sim", "strategy": "zero-shot", "item_id": item, "truth": truth, "source": src,
                         "reliability": rel[src], "popularity": pop[src], "factor": factor, "claim": claim,
                         "prior": prior, "posterior": post, "valid": True})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=200)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--pool", type=int, default=60)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--source-sds", default="0,0.14,0.7")
    ap.add_argument("--seed", type=int, default=2026)
    a = ap.parse_args()
    print(f"{a.sets} data sets per source-effect SD; {a.items} items x 6 sources (pool {a.pool}) x 5 factors; "
          f"{a.resamples} item resamples")
    for sd in [float(x) for x in a.source_sds.split(",")]:
        rng = np.random.default_rng([a.seed, int(sd * 1000)])
        hits = {m: {k: [] for k in TRUTH} for m in ("crossed", "percentile")}
        t0 = time.perf_counter()
        for s in range(a.sets):
            df = simulate(rng, a.items, a.pool, sd)
            for method in hits:
                m = l2d_metrics(df, n_resamples=a.resamples, seed=s, method=method, overall=False).set_index("metric")
                for k, truth in TRUTH.items():
                    hits[method][k].append(bool(m.at[k, "lo"] <= truth <= m.at[k, "hi"]))
        for method, by in hits.items():
            cells = ", ".join(f"{k} {np.mean(v):.3f}" for k, v in by.items())
            print(f"source SD {sd:<5} {method:<10} coverage: {cells} (binomial SE "
                  f"{np.sqrt(0.95 * 0.05 / a.sets):.3f}); {time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()

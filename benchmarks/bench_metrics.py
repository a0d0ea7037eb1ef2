"""Metrics benchmarks (issue 5), each beside a naive pandas baseline measured in the same run.

A. Design A point-estimate suite (SD, TD, rho_pop, both propensities, CD, outcome shares per
   LLM x strategy and per LLM) on --l2d-rows simulated trials of 13 LLMs; naive baseline:
   pandas groupby + scipy.spearmanr and a self-merge for the propensity pairs.
   Then the same suite with --l2d-resamples item-cluster bootstrap resamples (ours only).
B. Design B: every effect for 13 LLMs x 500 worlds with 5,000 whole-world bootstrap resamples;
   naive baseline: a Python loop over resamples re-computing the effects with pandas on the
   resampled worlds, timed on --naive-resamples and scaled to 5,000 (stated in the output).

    python benchmarks/bench_metrics.py
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pandas as pd
from scipy import stats as sps


def sim_l2d(n_rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    llms, strategies, factors = [f"m{i:02d}" for i in range(13)], ["zero-shot", "CoT", "Reliability", "Bayesian", "Defense"], [1/3, 1/2, 1, 2, 3]
    n_items = max(1, n_rows // (13 * 5 * 6 * 5))
    T = rng.integers(10, 10000, n_items).astype(float)
    idx = np.array(list(itertools.product(range(13), range(5), range(n_items), range(6), range(5))))
    n = len(idx)
    truth = T[idx[:, 2]]
    prior = np.where(rng.random(n) < 0.4, truth, np.round(truth * np.exp(rng.normal(0, 0.4, n))))
    # one prior per (llm, strategy, item)
    key = idx[:, 0] * 10**7 + idx[:, 1] * 10**6 + idx[:, 2]
    _, first = np.unique(key, return_index=True)
    pmap = dict(zip(key[first], prior[first]))
    prior = np.array([pmap[k] for k in key])
    claim = truth * np.array(factors)[idx[:, 4]]
    # a pool of 120 sources (20 per popularity x reliability stratum); each item draws one per stratum,
    # so sources recur across items (the crossed design)
    pool_rel, pool_pop = rng.uniform(size=120), rng.uniform(size=120)
    stratum = np.digitize(pool_pop, np.quantile(pool_pop, [1 / 3, 2 / 3])) * 2 + (pool_rel > np.median(pool_rel))
    by_stratum = [np.flatnonzero(stratum == k) for k in range(6)]
    drawn = np.column_stack([rng.choice(p, n_items) for p in by_stratum])  # n_items x 6 source ids
    src = drawn[idx[:, 2], idx[:, 3]]
    rel = pool_rel[src]
    move = rng.random(n) < 0.3 + 0.4 * rel
    post = prior + np.where(move, rng.uniform(0.1, 1, n) * (claim - prior), 0)
    return pd.DataFrame({"llm": np.array(llms)[idx[:, 0]], "strategy": np.array(strategies)[idx[:, 1]],
                         "item_id": idx[:, 2].astype(str), "truth": truth, "source": np.char.add("s", src.astype(str)),
                         "reliability": rel, "popularity": pool_pop[src], "factor": np.array(factors)[idx[:, 4]],
                         "claim": claim, "prior": prior, "posterior": post, "valid": rng.random(n) > 0.03,
                         "rated_reliability": np.clip(rel + rng.normal(0, 0.2, n), 0, 1)})


def naive_l2d(df: pd.DataFrame) -> pd.DataFrame:
    d = df[df.valid].copy()
    d["delta"] = (d.prior - d.posterior).abs()
    d["imp"] = (d.prior - d.truth).abs() - (d.claim - d.truth).abs()
    out = []
    for (llm, strat), g in d.groupby(["llm", "strategy"]):
        r = {"llm": llm, "strategy": strat, "SD": sps.spearmanr(g.delta, g.reliability).statistic,
             "TD": sps.spearmanr(g.delta, g.imp).statistic, "rho_pop": sps.spearmanr(g.delta, g.popularity).statistic}
        for by, within in (("reliability", ["item_id", "factor"]), ("imp", ["item_id", "source"])):
            p = g[within + [by, "delta"]].reset_index(drop=True)
            m = p.merge(p, on=within, suffixes=("_i", "_j"))
            m = m[m[f"{by}_i"] > m[f"{by}_j"]]
            r[f"prop_{by}"] = ((m.delta_i > m.delta_j) + 0.5 * (m.delta_i == m.delta_j)).mean()
        e = g[(g.prior == g.truth) & (g.claim != g.truth)]
        r["CD"] = 1 - (e.posterior != e.prior).mean()
        out.append(r)
    return pd.DataFrame(out)


def sim_cue(n_worlds: int = 500, seed: int = 0) -> pd.DataFrame:
    from discern_stats.stats.cue import EFFECT_PAIRS
    rng = np.random.default_rng(seed)
    conds = sorted({c for pairs in EFFECT_PAIRS.values() for pair in pairs for c in pair})
    rows = []
    for llm in range(13):
        for w in range(n_worlds):
            st = "core" if w < 0.6 * n_worlds else ("structural" if w < 0.84 * n_worlds else "naturalized")
            for track, cond in conds:
                ok = rng.random() > 0.02
                rows.append((f"m{llm:02d}", "C0", f"w{w:03d}", st, track, "P4", cond, "A", ok,
                             ("B" if rng.random() < 0.5 else "A") if ok else None, None))
    return pd.DataFrame(rows, columns=["llm", "intervention", "world_id", "stratum", "track", "probe", "condition",
                                       "answer", "valid", "choice", "correct"])


def naive_cue_once(df: pd.DataFrame, worlds: np.ndarray) -> dict:
    from discern_stats.stats.cue import EFFECT_PAIRS
    per_world = len(df) // df.world_id.nunique()  # every world has the same rows (13 LLMs x 18 conditions)
    d = df.set_index("world_id").loc[worlds].reset_index().assign(rep=np.repeat(np.arange(len(worlds)), per_world))
    d = d[d.valid]
    d["y"] = (d.choice == "B").astype(float)
    piv = d.pivot_table(index=["llm", "rep"], columns="condition", values="y")
    res = {}
    for name, pairs in EFFECT_PAIRS.items():
        diffs = pd.concat([piv[c1] - piv[c0] for (_, c1), (_, c0) in pairs])
        res[name] = 100 * diffs.groupby(level="llm").mean()
    return res


def main() -> None:
    from discern_stats.stats import cue_metrics, l2d_metrics
    ap = argparse.ArgumentParser()
    ap.add_argument("--l2d-rows", type=int, default=670_000)
    ap.add_argument("--l2d-resamples", type=int, default=5000)
    ap.add_argument("--naive-l2d-resamples", type=int, default=3)
    ap.add_argument("--naive-resamples", type=int, default=20)
    a = ap.parse_args()
    df = sim_l2d(a.l2d_rows)
    print(f"A: {len(df)} Design A trials, 13 LLMs x 5 strategies")
    t = time.perf_counter(); naive_l2d(df); tn = time.perf_counter() - t
    t = time.perf_counter(); l2d_metrics(df, n_resamples=0); to = time.perf_counter() - t
    print(f"A point estimates: ours {to:.1f}s, naive pandas {tn:.1f}s, ratio {tn / to:.1f}x")
    t = time.perf_counter(); l2d_metrics(df, n_resamples=a.l2d_resamples, method="percentile")
    ti = time.perf_counter() - t
    t = time.perf_counter(); l2d_metrics(df, n_resamples=a.l2d_resamples); tb = time.perf_counter() - t
    print(f"A full suite with {a.l2d_resamples} resamples: items-only percentile {ti:.1f}s (first call in this "
          f"process; the kernel is compiled here unless numba's on-disk cache has it), crossed items x sources "
          f"(the default) {tb:.1f}s, ratio {tb / ti:.2f}")
    # naive bootstrap: rebuild the resampled trial table (items drawn with replacement) and rerun
    # the naive suite, timed on --naive-l2d-resamples and scaled to --l2d-resamples
    rng = np.random.default_rng(0)
    items = np.array(sorted(df.item_id.unique()))
    by_item = dict(tuple(df.groupby("item_id")))
    t = time.perf_counter()
    for _ in range(a.naive_l2d_resamples):
        pick = rng.choice(items, len(items))
        naive_l2d(pd.concat([by_item[i].assign(item_id=f"{i}#{k}") for k, i in enumerate(pick)]))
    tnb = (time.perf_counter() - t) * a.l2d_resamples / a.naive_l2d_resamples
    print(f"A full suite, crossed: ours {tb:.1f}s; naive pandas item-bootstrap loop {tnb:.0f}s (timed on {a.naive_l2d_resamples} resamples, scaled); "
          f"ratio {tnb / tb:.0f}x")
    cdf = sim_cue()
    print(f"B: {len(cdf)} Design B P4 trials, 13 LLMs x 500 worlds")
    t = time.perf_counter(); cue_metrics(cdf, n_resamples=5000, strata=("all",)); to = time.perf_counter() - t
    rng = np.random.default_rng(0)
    worlds = np.array(sorted(cdf.world_id.unique()))
    t = time.perf_counter()
    for _ in range(a.naive_resamples):
        naive_cue_once(cdf, rng.choice(worlds, len(worlds)))
    tn = (time.perf_counter() - t) * 5000 / a.naive_resamples
    print(f"B 5,000-resample bootstrap of all effects: ours {to:.1f}s; naive pandas loop {tn:.0f}s "
          f"(timed on {a.naive_resamples} resamples, scaled x{5000 // a.naive_resamples}); ratio {tn / to:.0f}x")


if __name__ == "__main__":
    main()

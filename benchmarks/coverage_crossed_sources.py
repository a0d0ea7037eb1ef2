"""Coverage of Design A's crossed intervals by the size of the source pool (issue 24, point 2).

A data generator of its own (nothing from ``discern_stats.simulate``): one LLM x strategy,
``--items`` items crossed with a pool of G sources. Each source j has a reliability R_j ~ U(0, 1),
a popularity pop_j ~ U(0, 1) and an effect u_j on the logit of moving; the pool is cut into the 6
strata (popularity tertiles x reliability halves; a pool with fewer than 2 sources in a stratum is
drawn again) and each item draws one source per stratum (so
sources recur across items: the crossed design). Item i has a truth T_i (log-uniform 10..10,000), an
item effect a_i ~ N(0, 0.5) and a prior P1 = T (probability 0.4) or T exp(N(0, 0.4)) rounded; each
item x source meets the 5 factors f (claim C = f T). The respondent moves with probability
expit(-0.3 + a_i + 1.2 (R_j - 0.5) + 0.6 sign(I) + u_j) (I = |P1 - T| - |C - T|), a fraction
U(0.2, 1) of the way to the claim; 3 % of trials are invalid.

Source-effect settings: u_j ~ N(0, SD) for SD 0, 0.5, 1.5 independent of R, and SD 1.5 correlated
with reliability (u_j = 1.5 (0.6 z_j + 0.8 e_j), z_j the standardised R_j: part of SD's signal then
comes from the source effects), and SD 1.5 correlated with popularity likewise ("1.5 corr. P": the
source term of rho(Delta, popularity), taken within the design's strata, is then tested where its
strata carry the effect). The truths (SD, TD, rho(Delta, popularity), both propensities) are
the statistics of ``--truth-items`` items on a pool of ``--truth-pool`` sources (mean of 6 such
draws per run, of all runs' draws when several result files are summarised together; their
spread is printed), i.e. the superpopulation values over items and sources.

For each data set the script keeps the package's estimate and variance components (item-bootstrap
variance, source term) of every metric (`stats.l2d._group_stats`, `stats.crossed.source_variance`),
then forms the 95 % interval three ways with `stats.crossed.crossed_se_interval`: normal z (the old
default), and the small-cluster correction (the new default). Coverage: share of data sets whose
interval holds the truth; its Monte Carlo SE sqrt(c (1 - c) / sets) beside it.

    python benchmarks/coverage_crossed_sources.py --pools 20,60,132 --sets 300 --out /tmp/cov.npz
    python benchmarks/coverage_crossed_sources.py --pools 20 --settings '1.5 corr. R' --sets 1000 --out /tmp/c.npz
    python benchmarks/coverage_crossed_sources.py --summarise /tmp/c.npz --previous-df --detail
    python benchmarks/coverage_crossed_sources.py --pools 20 --settings 0 --sets 1000 --unstratified --out /tmp/s.npz
    python benchmarks/coverage_crossed_sources.py --summarise /tmp/cov20.npz,/tmp/cov60.npz,/tmp/cov132.npz
    python benchmarks/coverage_crossed_sources.py --summarise /tmp/cov20.npz --flat-source-df   # the rule before
    python benchmarks/coverage_crossed_sources.py --pools 20 --sets 1000 --pool-draw design --fixed-strata --out /tmp/f.npz
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.special import expit

FACTORS = np.array([1 / 3, 1 / 2, 1.0, 2.0, 3.0])
METRICS = ["SD", "TD", "rho_pop", "rel_propensity", "truth_propensity"]
SETTINGS = {"0": (0.0, False), "0.5": (0.5, False), "1.5": (1.5, False), "1.5 corr. R": (1.5, True),
            "1.5 corr. P": (1.5, "popularity")}


def make_pool(rng: np.random.Generator, n_sources: int, sd: float, correlated: bool | str,
              draw: str = "quantile") -> dict:
    """One source pool. ``draw="quantile"``: reliability and popularity U(0, 1), the strata the pool's
    own popularity tertiles x reliability halves (so their boundaries move with the pool; a pool with
    fewer than 2 sources in a stratum is drawn again). ``draw="design"``: the package's plan
    (`designs.l2d.source_pool`: n/6 sources from each stratum of the whole table, cut at fixed
    thresholds): popularity U within its tertile (0-1/3, 1/3-2/3, 2/3-1), reliability U within its half,
    n // 6 sources per stratum and the remainder in distinct strata drawn at random."""
    if draw == "design":
        sizes = np.full(6, n_sources // 6)
        sizes[rng.choice(6, n_sources % 6, replace=False)] += 1
        stratum = np.repeat(np.arange(6), sizes)
        pop = (stratum // 2 + rng.uniform(size=n_sources)) / 3
        rel = (stratum % 2 + rng.uniform(size=n_sources)) / 2
    else:
        while True:  # a pool with at least 2 sources in each of the 6 strata (drawn again otherwise)
            rel, pop = rng.uniform(size=n_sources), rng.uniform(size=n_sources)
            stratum = np.digitize(pop, np.quantile(pop, [1 / 3, 2 / 3])) * 2 + (rel > np.median(rel))
            if np.bincount(stratum, minlength=6).min() >= 2:
                break
    z = ((pop if correlated == "popularity" else rel) - 0.5) / np.sqrt(1 / 12)
    e = rng.normal(size=n_sources)
    u = sd * (0.6 * z + 0.8 * e) if correlated else sd * e
    return {"rel": rel, "pop": pop, "u": u, "stratum": stratum}


def make_trials(rng: np.random.Generator, n_items: int, pool: dict) -> pd.DataFrame:
    strata = [np.flatnonzero(pool["stratum"] == k) for k in range(6)]
    src = np.column_stack([rng.choice(s, n_items) for s in strata])  # items x 6
    T = np.exp(rng.uniform(np.log(10), np.log(10000), n_items)).round()
    a = rng.normal(0, 0.5, n_items)
    P1 = np.where(rng.random(n_items) < 0.4, T, np.round(T * np.exp(rng.normal(0, 0.4, n_items))))
    i = np.repeat(np.arange(n_items), 6 * 5)
    j = np.repeat(src.ravel(), 5)
    f = np.tile(FACTORS, n_items * 6)
    t, p1 = T[i], P1[i]
    C = f * t
    imp = np.abs(p1 - t) - np.abs(C - t)
    eta = -0.3 + a[i] + 1.2 * (pool["rel"][j] - 0.5) + 0.6 * np.sign(imp) + pool["u"][j]
    move = rng.random(len(i)) < expit(eta)
    P2 = p1 + np.where(move, rng.uniform(0.2, 1.0, len(i)) * (C - p1), 0.0)
    valid = rng.random(len(i)) > 0.03
    return pd.DataFrame({"llm": "m", "strategy": "zero-shot", "item_id": i, "truth": t, "source": j,
                         "reliability": pool["rel"][j], "popularity": pool["pop"][j], "factor": f, "claim": C,
                         "prior": p1, "posterior": np.where(valid, P2, np.nan), "valid": valid})


def components(df: pd.DataFrame, resamples: int, seed: int, unstratified: bool = False,
               fixed_strata: bool = False) -> dict[str, tuple]:
    """metric -> (estimate, item-bootstrap variance, source term, items, sources, n, var_source,
    var_cell) from the package (n: the statistic's count, e.g. pairs of a propensity: the Wilson
    interval's size cap; the two resampling variances whose difference is the source term; the number
    of source strata). The design's strata as `l2d_metrics` passes them (``unstratified``: none, every
    source term as before issue 24's fourth pass; ``fixed_strata``: every source term within the
    strata, as `l2d.l2d_metrics(fixed_strata=True)`)."""
    from discern_stats.stats.crossed import source_variance
    from discern_stats.stats.l2d import _group_stats, design_strata, prepare
    g = prepare(df, keep_invalid=True)
    st = _group_stats(g, n_resamples=resamples, seed=seed, method="crossed",
                      source_strata=None if unstratified else design_strata(g), fixed_strata=fixed_strata)
    out = {}
    for m in METRICS:
        s = st[m]
        if s.get("boot") is None:  # point estimate only (the truths)
            out[m] = (s["estimate"], np.nan, np.nan, df.item_id.nunique(), df.source.nunique(), s["n"], np.nan, np.nan,
                      np.nan)
            continue
        b = s["boot"][np.isfinite(s["boot"])]
        out[m] = (s["estimate"], b.var(ddof=1), source_variance(s["source_term"]),
                  df.item_id.nunique(), df.source.nunique(), s["n"], *replicate_variances(s),
                  s["source_term"].n_strata)
    return out


def replicate_variances(s: dict) -> tuple[float, float]:
    """(var_source, var_cell) of one statistic (closed form, `crossed.SourceTerm`)."""
    return float(s["source_term"].var_source), float(s["source_term"].var_cell)


def truths(rng: np.random.Generator, sd: float, corr: bool, items: int, pool: int, draws: int = 6,
           pool_draw: str = "quantile") -> np.ndarray:
    vals = np.array([[v[0] for v in components(make_trials(rng, items, make_pool(rng, pool, sd, corr, pool_draw)),
                                               0, 0)
                      .values()] for _ in range(draws)])
    return vals


def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng([args.seed] + [int(x) for x in args.pools.split(",")]
                                + ([] if args.settings is None else [1 + list(SETTINGS).index(x) for x in
                                                                     args.settings.split(",")]))
    pools = [int(x) for x in args.pools.split(",")]
    chosen = list(SETTINGS) if args.settings is None else args.settings.split(",")
    res = {}
    for name in chosen:
        sd, corr = SETTINGS[name]
        tv = truths(rng, sd, corr, args.truth_items, args.truth_pool, pool_draw=args.pool_draw)
        res[f"truth|{name}"] = tv
        for G in pools:
            t0 = time.time()
            rows = []
            for s in range(args.sets):
                df = make_trials(rng, args.items, make_pool(rng, G, sd, corr, args.pool_draw))
                comp = components(df, args.resamples, s, args.unstratified, args.fixed_strata)
                rows.append([comp[m] for m in METRICS])
            res[f"sets|{name}|{G}"] = np.array(rows, float)  # sets x metrics x 5
            print(f"SD {name}, pool {G}: {args.sets} sets in {time.time() - t0:.0f} s", flush=True)
    np.savez(args.out, **res)
    summarise(args.out, detail=args.detail)


PROPORTIONS = ("rel_propensity", "truth_propensity")  # the package's Wilson interval at the clustered n_eff


def interval(m: str, row: np.ndarray, small: bool | str, level: float) -> dict:
    """The 95 % interval of metric ``m`` from one stored (estimate, v_item, v_source, items, sources[, n]):
    normal z (``small`` False, the old default) or the package's default now (small-cluster correction;
    the propensities with the Wilson interval at the clustered effective size, as `l2d` does, when the
    file holds n; the degrees of freedom from var(rep_source) when the file holds it, else from the
    source term). ``small="previous"``: the degrees of freedom as before issue 24's second pass (the
    source term itself on (G_source - 1) / 3), for comparison on the same data sets."""
    from discern_stats.stats import crossed
    from discern_stats.stats.crossed import crossed_se_interval
    if small == "previous":
        share, crossed.SOURCE_DF_SHARE = crossed.SOURCE_DF_SHARE, 1 / 3
        try:
            return crossed_se_interval(row[0], row[1], row[2], level=level, chance=None,
                                       bounds=(-1.0, 1.0) if m in ("SD", "TD", "rho_pop") else (0.0, 1.0),
                                       n_items=int(row[3]), n_sources=int(row[4]),
                                       proportion=(int(row[5]), int(row[3])) if m in PROPORTIONS and len(row) > 5
                                       else None)
        finally:
            crossed.SOURCE_DF_SHARE = share
    est, v_item, v_source, n_i, n_s = row[:5]
    bounds = (-1.0, 1.0) if m in ("SD", "TD", "rho_pop") else (0.0, 1.0)
    proportion = (int(row[5]), int(n_i)) if small and m in PROPORTIONS and len(row) > 5 else None
    return crossed_se_interval(est, v_item, v_source, level=level, chance=None, bounds=bounds,
                               n_items=int(n_i) if small else None, n_sources=int(n_s) if small else None,
                               proportion=proportion, v_source_resample=row[6] if len(row) > 6 else None,
                               source_strata=int(row[8]) if len(row) > 8 and small else 1)


def summarise(paths: str, level: float = 0.95, detail: bool = False, previous: bool = False) -> None:
    """The coverage table of one or more result files (comma-separated); the data sets of one cell in
    several files are pooled (runs with other ``--seed``s add data sets), and the truths are the mean
    of every truth draw in all of them. ``detail``: per metric, the bias of the estimate and the ratio
    of the mean estimated variance (small-cluster scaling) to the Monte Carlo variance of the estimates,
    the source term's share of it, and the median degrees of freedom."""
    files = [np.load(p) for p in paths.split(",")]
    z: dict[str, np.ndarray] = {}
    for f in files:
        for k in f.files:
            if k.startswith("sets|"):
                if k in z:  # pooled with another file's data sets (older files lack n: the common fields)
                    width = min(f[k].shape[2], z[k].shape[2])
                    z[k] = np.concatenate([z[k][:, :, :width], f[k][:, :, :width]])
                else:
                    z[k] = f[k]
    truths = {name: np.vstack([f[f"truth|{name}"] for f in files if f"truth|{name}" in f.files])
              for name in SETTINGS if any(f"truth|{name}" in f.files for f in files)}
    print(f"| source-effect SD | pool | interval | {' | '.join(METRICS)} | SE ratio (mean est. SE / SD of estimates) |")
    print("|---|---|---|" + "---|" * len(METRICS) + "---|")
    details = []
    for key in [k for k in z if k.startswith("sets|")]:
        _, name, G = key.split("|")
        sets = z[key]
        truth = truths[name].mean(axis=0)
        rules = [("normal z (old)", False)] + [("small-cluster, df before", "previous")] * previous
        for label, small in rules + [("small-cluster (new)", True)]:
            cov, ratio = [], []
            for k, m in enumerate(METRICS):
                ivs = [interval(m, row, small, level) for row in sets[:, k]]
                cov.append(f"{np.mean([iv['lo'] <= truth[k] <= iv['hi'] for iv in ivs]):.3f}")
                ratio.append(np.mean([iv["se"] for iv in ivs]) / sets[:, k, 0].std(ddof=1))
                if small is True and detail:
                    est, vi, vs, ni, ns = sets[:, k, :5].T
                    h = sets[:, k, 8] if sets.shape[2] > 8 else 1
                    v = vi * ni / (ni - 1) + vs * ns / (ns - h)
                    details.append(f"| {name} | {G} | {m} | {(est.mean() - truth[k]) / est.std(ddof=1):+.2f} | "
                                   f"{v.mean() / est.var(ddof=1):.2f} | {np.mean(vs * ns / (ns - h) / v):.2f} | "
                                   f"{np.median([iv['df'] for iv in ivs]):.0f} |")
            print(f"| {name} | {G} | {label} | {' | '.join(cov)} | {min(ratio):.2f}-{max(ratio):.2f} |")
        n = len(sets)
        print(f"|  |  | (Monte Carlo SE at 0.95: {np.sqrt(0.95 * 0.05 / n):.3f}; {n} sets) |" + " |" * len(METRICS))
    for name, tv in truths.items():
        print(f"truth {name}: " + ", ".join(f"{m} {tv[:, k].mean():.4f} (+-{tv[:, k].std(ddof=1):.4f})"
                                            for k, m in enumerate(METRICS)))
    if detail:
        print("\n| source-effect SD | pool | metric | bias / SD of estimates | mean V / Monte Carlo var | "
              "source share of V | median df |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(details))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pools", default="20,60,132")
    ap.add_argument("--sets", type=int, default=300)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--resamples", type=int, default=500)
    ap.add_argument("--truth-items", type=int, default=3000)
    ap.add_argument("--truth-pool", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--out", default="/tmp/coverage_crossed_sources.npz")
    ap.add_argument("--settings", default=None, help="comma-separated source-effect settings (default: all): "
                    + ", ".join(SETTINGS))
    ap.add_argument("--summarise", default=None)
    ap.add_argument("--pool-draw", choices=("quantile", "design"), default="quantile",
                    help="quantile: strata cut at the pool's own tertiles / median; design: the package's plan, "
                    "n/6 sources per stratum of fixed thresholds (make_pool)")
    ap.add_argument("--unstratified", action="store_true",
                    help="no design strata: every source term item-removed and unstratified (the default before "
                    "issue 24's fourth pass; l2d.STRATIFIED_RHOS)")
    ap.add_argument("--fixed-strata", action="store_true",
                    help="every source term within the design's strata (l2d_metrics(fixed_strata=True): the strata "
                    "are fixed thresholds, as in --pool-draw design)")
    ap.add_argument("--detail", action="store_true", help="bias, variance ratio, source share and df per metric")
    ap.add_argument("--previous-df", action="store_true",
                    help="also the small-cluster interval with the degrees of freedom before (source term on (G-1)/3)")
    ap.add_argument("--flat-source-df", action="store_true",
                    help="var_source on (G_source - H) / 2 degrees of freedom at every share r of the source term "
                    "(the rule before issue 24's sixth pass; default: crossed.source_df, (G_source - H) / (1 + r))")
    ap.add_argument("--df-share", type=float, default=None,
                    help="degrees of freedom of var_source, where the source effects dominate, as this share of G_source - H "
                    "(crossed.SOURCE_DF_SHARE, default: the package's)")
    args = ap.parse_args()
    from discern_stats.stats import crossed
    if args.df_share is not None:
        crossed.SOURCE_DF_SHARE = args.df_share
    if args.flat_source_df:
        by_share = crossed.source_df
        crossed.source_df = lambda n_sources, strata, net_share: by_share(n_sources, strata, 1.0)
    if args.summarise:
        summarise(args.summarise, detail=args.detail, previous=args.previous_df)
    else:
        run(args)


if __name__ == "__main__":
    main()

"""Discernment model (issue 16): the four-part model by Gibbs against the previous hurdle/Beta model
by nutpie on the same subset, and the four-part model at the paper's scale, in one run.

    python benchmarks/bench_discernment.py                       # subset 17,000 rows + 670,000 rows
    python benchmarks/bench_discernment.py --paper-rows 0        # subset comparison only
    python benchmarks/bench_discernment.py --heldout --by-variable   # issue 25's done-when (below)

``--heldout``: the paper-scale held-out data of `heldout_l2d.generate` (13 LLMs x 5 strategies x
344 items x 6 of 132 sources x 5 factors = 670,800 trials; shared item effects, LLM x item and LLM x
strategy x item effects, source effects SD 0.5, overshoots, Beta partial moves with a heap at 0.5,
invalid answers; every "away" slope with tau 0 or 0.02), fitted through the public API with the
model's defaults (`discern_stats.fit("discernment", df, folder, refit=True)`): wall time, rows,
chains, draws and the full gate (reported and nuisance parameters), by variable with --by-variable.

Data are simulated from the four-part model itself (`simulate`): 13 LLMs x 5 strategies, items
with their own prior, sources from a pool with reliability and popularity, claims T x F.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

FACTORS = (1 / 3, 1 / 2, 2.0, 3.0, 1.0)
TRUE_MU = {"move": [0.8, 0.3, 0.5], "away": [-0.3, 0.2, -0.2], "full": [0.6, 0.4, 0.3], "fraction": [0.5, 0.2, 0.3]}
INTERCEPT = {"move": 0.3, "away": -2.0, "full": -0.3, "fraction": 0.0}


def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def simulate(n_llm: int = 13, n_strategy: int = 5, n_items: int = 1030, per_item: int = 10, n_sources: int = 200,
             tau: float = 0.3, item_sd: float = 0.5, resid_sd: float = 0.7, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """Trials from the four-part model (`discern_stats.bayes.discernment`), with the true
    per-group slopes on the model's z-score scale. Each (LLM, strategy) group answers every item
    once (one prior) and ``per_item`` (source, factor) posteriors."""
    from discern_stats.designs.l2d import STRATEGIES
    rng = np.random.default_rng(seed)
    llms = [f"llm{i:02d}" for i in range(n_llm)]
    strategies = list(STRATEGIES[:n_strategy])
    G = n_llm * n_strategy
    src_rel = rng.beta(2, 2, n_sources)
    src_pop = np.clip(0.6 * src_rel + 0.4 * rng.random(n_sources) + rng.normal(0, 0.1, n_sources), 0, 1) * 10
    truth_item = np.exp(rng.normal(5, 2, n_items)).round(3) + 1
    n = G * n_items * per_item
    g = np.repeat(np.arange(G), n_items * per_item)
    item = np.tile(np.repeat(np.arange(n_items), per_item), G)
    src = rng.integers(0, n_sources, n)
    factor = np.asarray(FACTORS)[rng.integers(0, len(FACTORS), n)]
    T = truth_item[item]
    # one prior per (group, item): exact with prob 0.4, else log-normal around T
    pri = T * np.where(rng.random((G, n_items)) < 0.4, 1.0, np.exp(rng.normal(0, 0.5, (G, n_items))))[g, item]
    prior = np.round(pri, 3)
    claim = np.round(T * factor, 6)
    e1, e2 = np.abs(prior - T), np.abs(claim - T)
    imp = np.where(e1 + e2 > 0, (e1 - e2) / np.where(e1 + e2 > 0, e1 + e2, 1), 0.0)
    ok = claim != prior
    # z-scores as the model computes them: sources over the distinct sources seen, improvement over rows
    seen = np.unique(src[ok])
    z = np.column_stack([(src_rel[src] - src_rel[seen].mean()) / src_rel[seen].std(),
                         (src_pop[src] - src_pop[seen].mean()) / src_pop[seen].std(),
                         (imp - imp[ok].mean()) / imp[ok].std()])
    truth = {}
    etas = {}
    for part in ("move", "away", "full", "fraction"):
        b = np.asarray(TRUE_MU[part]) + tau * rng.standard_normal((G, 3))
        a = INTERCEPT[part] + 0.3 * rng.standard_normal(G)
        u = item_sd * rng.standard_normal((G, n_items))
        truth[part] = b
        etas[part] = a[g] + (z * b[g]).sum(axis=1) + u[g, item]
    moved = rng.random(n) < _logistic(etas["move"])
    away = moved & (rng.random(n) < _logistic(etas["away"]))
    full = moved & ~away & (rng.random(n) < _logistic(etas["full"]))
    partial = moved & ~away & ~full
    f = np.zeros(n)
    f[full] = 1.0
    f[partial] = _logistic(etas["fraction"][partial] + resid_sd * rng.standard_normal(partial.sum()))
    past = rng.random(n) < 0.5
    f[away] = np.where(past[away], 1 + np.abs(rng.normal(0, 0.5, away.sum())), -np.abs(rng.normal(0, 0.3, away.sum())))
    post = np.where(full, claim, prior + f * (claim - prior))
    df = pd.DataFrame({"llm": np.asarray(llms)[g // n_strategy], "strategy": np.asarray(strategies)[g % n_strategy],
                       "item_id": item.astype(str), "truth": T, "source": [f"s{j}.example" for j in src],
                       "reliability": src_rel[src], "popularity": src_pop[src], "factor": factor, "claim": claim,
                       "prior": prior, "posterior": post, "valid": True})
    groups = [f"{llms[i // n_strategy]} / {strategies[i % n_strategy]}" for i in range(G)]
    return df[ok].reset_index(drop=True), {"groups": groups, "slopes": truth}


def fit_new(df: pd.DataFrame, draws: int, chains: int, seed: int = 0):
    from discern_stats.bayes import DiscernmentModel
    m = DiscernmentModel(df)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(draws=draws, chains=chains, random_seed=seed)
    return m, time.perf_counter() - t


def fit_legacy(df: pd.DataFrame, draws: int, chains: int, seed: int = 0):
    from legacy_discernment import LegacyDiscernmentModel
    m = LegacyDiscernmentModel(df)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(draws=draws, tune=draws, chains=chains, random_seed=seed, sampler="nutpie")
    return m, time.perf_counter() - t


def _line(name, rows, wall, d):
    return {"model": name, "rows": rows, "wall_s": round(wall, 1), "max_rhat": round(d["max_rhat"], 4),
            "min_ess_bulk": round(d["min_ess_bulk"]), "min_ess_tail": round(d["min_ess_tail"]), "ok": d["ok"]}


def _by_variable(m) -> None:
    import arviz as az
    x = az.summary(m.idata, var_names=m.check_vars + m.nuisance_vars, kind="diagnostics", round_to="none")
    x["variable"] = [i.split("[")[0] for i in x.index]
    x["gated"] = x.variable.isin(m.check_vars)
    print(x.groupby(["gated", "variable"])[["ess_bulk", "ess_tail", "r_hat"]].agg(
        {"ess_bulk": "min", "ess_tail": "min", "r_hat": "max"}).round(3).to_string(), flush=True)


def heldout_paper_fit(source_sd: float, by_variable: bool, items: int = 344, config: dict | None = None) -> None:
    """The done-when fit of issue 25: held-out paper-scale data, the defaults (``config`` overrides
    them), the full gate."""
    import tempfile

    import discern_stats
    from heldout_l2d import generate
    t = time.perf_counter()
    df, _ = generate(seed=11, source_sd=source_sd, items=items)
    print(f"held-out data: {len(df):,} trials in {time.perf_counter() - t:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        m = discern_stats.fit("discernment", df, folder, refit=True, **(config or {}))
        wall = time.perf_counter() - t
    d = m.diagnostics
    post = m.idata["posterior"]
    print(json.dumps({"model": "discernment, defaults" + (f" + {config}" if config else ""), "trials": len(df), "rows_modelled": len(m.data),
                      "chains": int(post.sizes["chain"]), "draws": int(post.sizes["draw"]), "wall_s": round(wall, 1),
                      "max_rhat": round(d["max_rhat"], 4), "min_ess_bulk": round(d["min_ess_bulk"]),
                      "min_ess_tail": round(d["min_ess_tail"]), "ok": d["ok"],
                      "nuisance": {k: (round(v, 4) if isinstance(v, float) else v)
                                   for k, v in (d.get("nuisance") or {}).items()}}), flush=True)
    if by_variable:
        _by_variable(m)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset-items", type=int, default=30, help="items per group of the subset (x 65 groups x 10)")
    ap.add_argument("--paper-rows", type=int, default=670_000, help="rows at paper scale (0: skip)")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--skip-legacy", action="store_true")
    ap.add_argument("--tau", type=float, default=0.3, help="true between-group SD of every slope (near 0: the "
                    "regime where the centred (mu, tau) step stalled, issue 25.1)")
    ap.add_argument("--by-variable", action="store_true", help="print each variable's worst ESS and R-hat "
                    "(gated and nuisance variables) after each four-part fit")
    ap.add_argument("--heldout", action="store_true", help="only the paper-scale held-out fit with the defaults")
    ap.add_argument("--heldout-source-sd", type=float, default=0.5)
    ap.add_argument("--heldout-items", type=int, default=344, help="items of the held-out data (344: paper scale)")
    ap.add_argument("--heldout-config", default="{}", help="model config over the defaults, as JSON, e.g. "
                    "'{\"source_effects\": true}'")
    a = ap.parse_args(argv)
    if a.heldout:
        heldout_paper_fit(a.heldout_source_sd, a.by_variable, a.heldout_items, json.loads(a.heldout_config))
        return
    out = []
    sub, _ = simulate(n_items=a.subset_items, tau=a.tau, seed=1)
    m, wall = fit_new(sub, a.draws, a.chains)
    out.append(_line("four-part, Gibbs (this issue)", len(sub), wall, m.diagnostics))
    print(json.dumps(out[-1]), flush=True)
    if a.by_variable:
        _by_variable(m)
    if not a.skip_legacy:
        m, wall = fit_legacy(sub.assign(popularity=sub.popularity / 10), 500, a.chains)
        out.append(_line("hurdle/Beta, nutpie 500+500 (before)", len(sub), wall, m.diagnostics))
        print(json.dumps(out[-1]), flush=True)
    if a.paper_rows:
        per_group = a.paper_rows / 65
        df, truth = simulate(n_items=int(round(per_group / 10)), tau=a.tau, seed=2)
        m, wall = fit_new(df, a.draws, a.chains)
        out.append(_line("four-part, Gibbs (this issue)", len(df), wall, m.diagnostics))
        print(json.dumps(out[-1]), flush=True)
        if a.by_variable:
            _by_variable(m)
    print(pd.DataFrame(out).to_string(index=False))


if __name__ == "__main__":
    main()

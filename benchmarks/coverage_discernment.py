"""Coverage of the discernment model's 94 % intervals on held-out data (issue 25), run outside CI.

Draws ``--reps`` data sets from the held-out generator (`heldout_l2d.generate`: written from the paper,
not from the model or `discern_stats.simulate`; item effects shared across LLMs, source effects of SD
``--source-sd``, overshoots, Beta partial moves, heaps, invalid answers), fits each through the public
API (``discern_stats.fit("discernment", df, folder, refit=True, fit_kwargs=...)``, the model's default
sampler) and reports, per part and term (reliability, popularity, popularity - reliability), the share
of true slopes inside the model's reported 94 % intervals (`summary_table`: hdi_lo, hdi_hi), for the
LLM x strategy groups and for the two pooled rows: "(mean over groups)" (truth: the average of the
generator's group slopes, the finite-population mean) and "(population mean)" (truth: the generator's
population mean slope, mu plus the mean of its fixed strategy effects). Monte Carlo SE: binomial, sqrt(p (1 - p) / n), and by replicate (SD of the replicates'
shares / sqrt(R)); the groups of one data set share their data and are not independent, so the second
is the honest one once R is large enough to estimate it. Each fit's convergence gate (``diagnostics``)
is printed.

The truth is converted to the model's own standardisation: slope_model = slope_gen / sd_gen x
sd_model, with sd_model from the fitted model's ``scales`` (equal to sd_gen while the model
standardises as documented; the largest relative difference is printed).

    nice -n 15 python benchmarks/coverage_discernment.py --reps 4 --llms 2 --strategies 2 --items 40

(The issue-16 version of this script, which drew data from the model's own process via
`bench_discernment.simulate`, is in git history before this commit.)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from heldout_l2d import Layout, generate, with_differences  # noqa: E402

TERMS = ("reliability", "popularity", "popularity - reliability")
POOLED = "(mean over groups)"  # `core.vocab.MEAN_OVER_GROUPS` (the script runs against older commits too)
POPULATION = "(population mean)"  # `core.vocab.POPULATION_MEAN`
LEVELS = {POOLED: "mean over groups", POPULATION: "population mean"}


def model_truth(truth: dict, scales: dict | None) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Group and pooled truths on the model's scale, and the largest relative SD difference."""
    factor, worst = {}, 0.0
    for p, sd in truth["sd_raw"].items():
        sm = (scales or {}).get(p, {}).get("sd", sd)
        factor[p] = sm / sd
        worst = max(worst, abs(sm / sd - 1))
    s = truth["slopes"].copy()
    s["slope"] = s["slope"] * s["term"].map(factor)
    groups = with_differences(s)
    pop = truth["population"].copy()
    pop["slope"] = pop["population"] * pop["term"].map(factor)
    w = pop.pivot(index="part", columns="term", values="slope")
    diff = pd.DataFrame({"part": w.index, "term": "popularity - reliability",
                         "slope": (w["popularity"] - w["reliability"]).to_numpy()})
    population = pd.concat([pop[["part", "term", "slope"]], diff], ignore_index=True).assign(group=POPULATION)
    finite = groups.groupby(["part", "term"], as_index=False).slope.mean().assign(group=POOLED)
    return groups, pd.concat([finite, population], ignore_index=True), worst


def one_fit(df: pd.DataFrame, rep: int, draws: int, chains: int, config: dict | None = None):
    import discern_stats
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        m = discern_stats.fit("discernment", df, folder, refit=True,
                              fit_kwargs={"draws": draws, "chains": chains, "random_seed": rep}, **(config or {}))
        return m, time.perf_counter() - t


def score(m, truth: dict) -> tuple[pd.DataFrame, float]:
    """One row per (part, group, term) the model reports and the generator knows, with hit = truth in
    [hdi_lo, hdi_hi]."""
    groups, pooled, worst = model_truth(truth, getattr(m, "scales", None))
    tab = m.summary_table()
    tab = tab[tab.term.isin(TERMS)]
    want = pd.concat([groups[["part", "group", "term", "slope"]], pooled], ignore_index=True)
    x = tab.merge(want, on=["part", "group", "term"], how="inner")
    x["hit"] = (x.slope >= x.hdi_lo) & (x.slope <= x.hdi_hi)
    x["level"] = x.group.map(LEVELS).fillna("group")
    return x[["part", "group", "term", "level", "slope", "mean", "hdi_lo", "hdi_hi", "hit"]], worst


def report(all_rows: pd.DataFrame) -> pd.DataFrame:
    """Coverage, Monte Carlo SEs, mean interval width and mean bias per level, part and term."""
    out = []
    for (level, part, term), d in list(all_rows.groupby(["level", "part", "term"])) + \
            [((lv, "all parts", t), d) for (lv, t), d in all_rows.groupby(["level", "term"])]:
        n, p = len(d), float(d.hit.mean())
        per_rep = d.groupby("rep").hit.mean()
        out.append({"level": level, "part": part, "term": term, "n": n, "coverage": p,
                    "se_binomial": np.sqrt(p * (1 - p) / n),
                    "se_by_rep": float(per_rep.std(ddof=1) / np.sqrt(len(per_rep))) if len(per_rep) > 1 else np.nan,
                    "mean_width": float((d.hdi_hi - d.hdi_lo).mean()), "bias": float((d["mean"] - d.slope).mean())})
    return pd.DataFrame(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=20, help="replicated data sets R")
    ap.add_argument("--llms", type=int, default=2)
    ap.add_argument("--strategies", type=int, default=2)
    ap.add_argument("--items", type=int, default=40, help="items (x 6 sources x 5 factors per LLM x strategy)")
    ap.add_argument("--sources", type=int, default=132)
    ap.add_argument("--source-sd", type=float, default=0.5)
    ap.add_argument("--source-rel-corr", type=float, default=0.0)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--seed0", type=int, default=25_000, help="replicate r uses generator seed seed0 + r")
    ap.add_argument("--json", help="write the per-interval rows and the table here")
    ap.add_argument("--config", default="{}", help='model config as JSON, e.g. \'{"source_effects": true}\'')
    a = ap.parse_args(argv)
    config = json.loads(a.config)
    layout = Layout(llms=a.llms, strategies=a.strategies, items=a.items, sources=a.sources,
                    source_sd=a.source_sd, source_rel_corr=a.source_rel_corr)
    print(f"layout {a.llms} LLMs x {a.strategies} strategies x {a.items} items x 6 sources x 5 factors "
          f"(source SD {a.source_sd}, corr with reliability {a.source_rel_corr}); {a.reps} reps; "
          f"{a.chains} chains x {a.draws} draws; config {config}", flush=True)
    t0, rows, gates = time.perf_counter(), [], []
    for r in range(a.reps):
        df, truth = generate(layout, seed=a.seed0 + r)
        m, wall = one_fit(df, r, a.draws, a.chains, config)
        x, worst = score(m, truth)
        rows.append(x.assign(rep=r))
        d = m.diagnostics
        nu = d.get("nuisance", {})
        gates.append({"rep": r, "rows": len(m.data), "wall_s": round(wall, 1), "ok": bool(d["ok"]),
                      "max_rhat": round(d["max_rhat"], 4), "min_ess_bulk": round(d["min_ess_bulk"]),
                      "min_ess_tail": round(d["min_ess_tail"]), "problems": d["problems"],
                      "nuisance_problems": nu.get("problems")})
        so_far = pd.concat(rows)
        so_far = so_far[so_far.level == "group"].hit.mean()
        print(f"rep {r + 1}/{a.reps}: {len(m.data):,} rows, {wall:.1f} s, gate "
              f"{'passed' if d['ok'] else 'FAILED: ' + '; '.join(d['problems'])}"
              f"{'' if any(p.startswith('nuisance') for p in d['problems']) else '; nuisance: ok'}; group coverage so far "
              f"{so_far:.3f}; scale diff {worst:.1e}", flush=True)
    allr = pd.concat(rows, ignore_index=True)
    tab = report(allr)
    with pd.option_context("display.width", 200):
        print(tab.round(3).to_string(index=False))
    ok = sum(g["ok"] for g in gates)
    print(f"{ok} of {a.reps} fits passed the convergence gate; {time.perf_counter() - t0:.0f} s in all (nominal 0.94)")
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "gates": gates, "table": tab.to_dict("records"),
                                            "intervals": allr.to_dict("records")}, indent=1, default=str))


if __name__ == "__main__":
    main()

"""Mixing of the discernment model with and without strategy effects (issue 25.3; BENCHMARKS.md).

    python benchmarks/bench_strategy_effects.py
"""

import sys, warnings, time, numpy as np, arviz as az
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from bench_discernment import simulate
from discern_stats.bayes import DiscernmentModel
df, truth = simulate(n_llm=3, n_strategy=3, n_items=40, per_item=8, seed=3)
for on in (False, True):
    m = DiscernmentModel(df, strategy_effects=on)
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(draws=1000, chains=2, random_seed=0)
    print("strategy_effects", on, "rows", len(m.data), "wall", round(time.time() - t0, 1), flush=True)
    print("  acceptance", m.sampler["acceptance"])
    print("  gate", m.diagnostics["ok"], m.diagnostics["problems"])
    for part in ("move", "away", "full", "fraction"):
        vs = [f"{part}_tau"] + ([f"{part}_strategy_slope", f"{part}_llm_slope"] if on else [f"{part}_mu"]) + [f"{part}_slope"]
        s = az.summary(m.idata, var_names=vs, kind="diagnostics", round_to="none")
        print("  ", part, {v: (round(float(s.loc[[i for i in s.index if i.split('[')[0] == v], 'ess_bulk'].min())),
                                round(float(s.loc[[i for i in s.index if i.split('[')[0] == v], 'r_hat'].max()), 3)) for v in vs}, flush=True)
    if on:
        print(m.strategy_contrasts().query("part == 'move'")[["term", "contrast", "mean", "hdi_lo", "hdi_hi", "p_positive"]].to_string())

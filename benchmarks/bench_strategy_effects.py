"""Mixing of the discernment model with and without strategy effects (issue 25.3; BENCHMARKS.md):
2,656 simulated rows (3 LLMs x 3 strategies), 2 chains x 1,000 draws each way; per part the
smallest bulk ESS and largest R-hat of tau, the means (mu, or the strategy and LLM slopes) and the
group slopes, the acceptance rates, and the move part's strategy contrasts.

    python benchmarks/bench_strategy_effects.py
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import arviz as az

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_discernment import simulate  # noqa: E402

from discern_stats.bayes import DiscernmentModel  # noqa: E402


def main() -> None:
    df, _ = simulate(n_llm=3, n_strategy=3, n_items=40, per_item=8, seed=3)
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
            means = [f"{part}_strategy_slope", f"{part}_llm_slope"] if on else [f"{part}_mu"]
            names = [f"{part}_tau", *means, f"{part}_slope"]
            s = az.summary(m.idata, var_names=names, kind="diagnostics", round_to="none")
            base = s.index.str.split("[").str[0]
            print("  ", part, {v: (round(float(s.ess_bulk[base == v].min())), round(float(s.r_hat[base == v].max()), 3))
                              for v in names}, flush=True)
        if on:
            t = m.strategy_contrasts()
            print(t[t.part == "move"][["term", "contrast", "mean", "hdi_lo", "hdi_hi", "p_positive"]].to_string())


if __name__ == "__main__":
    main()

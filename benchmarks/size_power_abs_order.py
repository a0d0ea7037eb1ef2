"""Size and power of the |text-order| intervention contrast (issue 24, point 4).

A data generator of its own: ``--worlds`` worlds answered under two interventions (C2 and C0);
world w has a random effect u_w ~ N(0, 1) on the logit of P(choose B), shared by all its
requests and both interventions (the design's paired dependence); in arm k the order x time
requests have logit P(B) = u_w + w_k [B first] + 0.3 [B at 12:00]; 5 % of requests are invalid.
The absolute text-order contrast is |theta_C2| - |theta_C0|, theta the order effect in pp
averaged over the two event times (seed 001 A.2). Scenarios (w_C2 / w_C0 on the logit):

- nulls |theta_1| = |theta_0|: 0 / 0, equal (0.25 / 0.25, 0.5 / 0.5), sign-flipped (0.5 / -0.5);
- alternatives with one arm at 0: 0.3 / 0, 0.6 / 0, 0 / 0.6; and 0.8 / 0.3.

Per data set, from the same paired bootstrap (``--resamples`` resamples of the worlds), the two
tests at alpha 0.05: the Wald test of squared effects (`stats.cue.abs_contrast_p_value`, the old
p-value) and the intersection-union test (`stats.cue.abs_contrast_test`), the new one. The
new interval is the one `stats.cue.intervention_contrasts` prints; the script counts the data
sets where that interval and its p-value disagree (0 excludes vs p < 0.05), and its coverage of
the true |theta_1| - |theta_0| (by quadrature). The old percentile interval of |b1*| - |b0*| is
counted against the old p-value too. Monte Carlo SE of a rate r: sqrt(r (1 - r) / sets).

    python benchmarks/size_power_abs_order.py --sets 300 --scenarios 1,2,3,4
    python benchmarks/size_power_abs_order.py --sets 300 --scenarios 5,6,7,8
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.special import expit

from discern_stats.stats.bootstrap import resample_counts, summarise
from discern_stats.stats.cue import (abs_contrast_p_value, abs_contrast_test, effect_sums, effect_values,
                                     intervention_contrasts, world_table)

SCENARIOS = [("null 0 / 0", 0.0, 0.0), ("null equal 0.25 / 0.25", 0.25, 0.25), ("null equal 0.5 / 0.5", 0.5, 0.5),
             ("null sign-flipped 0.5 / -0.5", 0.5, -0.5), ("alt. 0.3 / 0", 0.3, 0.0), ("alt. 0.6 / 0", 0.6, 0.0),
             ("alt. 0 / 0.6", 0.0, 0.6), ("alt. 0.8 / 0.3", 0.8, 0.3)]


def simulate(rng: np.random.Generator, n_worlds: int, w1: float, w0: float) -> pd.DataFrame:
    u = rng.normal(0, 1, n_worlds)
    rows = []
    for iv, w in (("C2", w1), ("C0", w0)):
        for o in ("A", "B"):
            for t in ("08", "12"):
                eta = u + (w if o == "B" else 0.0) + (0.3 if t == "12" else 0.0)
                ok = rng.random(n_worlds) > 0.05
                chose = np.where(rng.random(n_worlds) < expit(eta), "B", "A")
                rows.append(pd.DataFrame({"intervention": iv, "world_id": [f"w{k}" for k in range(n_worlds)],
                                          "condition": f"order={o}-first,time={t}", "valid": ok,
                                          "choice": np.where(ok, chose, None)}))
    df = pd.concat(rows, ignore_index=True)
    return df.assign(llm="sim", stratum="core", track="competition", probe="P4", answer="A", correct=None)


def true_order_pp(w: float) -> float:
    x, g = np.polynomial.hermite_e.hermegauss(80)
    g = g / g.sum()
    return float(100 * np.mean([np.sum(g * (expit(x + w + t) - expit(x + t))) for t in (0.0, 0.3)]))


def one_set(df: pd.DataFrame, resamples: int, seed: int) -> dict:
    con = intervention_contrasts(df, contrasts=[("C2", "C0")], endpoints=("abs_text_order",), scopes=("core",),
                                 n_resamples=resamples, seed=seed).iloc[0]
    wide = world_table(df).xs("sim", level="llm")
    by_iv = {iv: g.droplevel(["intervention", "stratum"]) for iv, g in wide.groupby(level="intervention")}
    worlds = by_iv["C2"].index.intersection(by_iv["C0"].index)
    W = resample_counts(len(worlds), resamples, seed)
    (e1, b1, *_), (e0, b0, *_) = [effect_values(effect_sums(by_iv[c].loc[worlds]), W)["text_order"] for c in ("C2", "C0")]
    new = abs_contrast_test(e1, e0, b1, b0)
    assert np.isclose(new["p_value"], con.p_value) and np.isclose(new["lo"], con.lo)  # the printed numbers
    old = summarise(abs(e1) - abs(e0), np.abs(b1) - np.abs(b0))
    return {"p_old": abs_contrast_p_value(e1, e0, b1, b0), "old_lo": old.lo, "old_hi": old.hi,
            "p_new": con.p_value, "lo": con.lo, "hi": con.hi}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=300)
    ap.add_argument("--worlds", type=int, default=200)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--scenarios", default=None, help="comma-separated scenario numbers (1-based; default all)")
    args = ap.parse_args()
    pick = [int(k) - 1 for k in args.scenarios.split(",")] if args.scenarios else range(len(SCENARIOS))
    print(f"| scenario (logit order weights C2 / C0) | true abs. contrast (pp) | Wald of squares (old): rejects "
          f"| IUT (new): rejects | new interval covers | new interval vs its p disagree | old interval vs old p "
          f"disagree |")
    print("|---|---|---|---|---|---|---|")
    for k in pick:
        name, w1, w0 = SCENARIOS[k]
        rng = np.random.default_rng([args.seed, k])  # each scenario its own stream: a split run gives the same rows
        t0 = time.time()
        truth = abs(true_order_pp(w1)) - abs(true_order_pp(w0))
        res = pd.DataFrame([one_set(simulate(rng, args.worlds, w1, w0), args.resamples, s) for s in range(args.sets)])
        excl_new = ~((res.lo <= 0) & (0 <= res.hi))
        excl_old = ~((res.old_lo <= 0) & (0 <= res.old_hi))
        cover = ((res.lo <= truth) & (truth <= res.hi)).mean()
        print(f"| {name} | {truth:.1f} | {(res.p_old < 0.05).mean():.3f} | {(res.p_new < 0.05).mean():.3f} | "
              f"{cover:.3f} | {int((excl_new != (res.p_new < 0.05)).sum())} of {len(res)} | "
              f"{int((excl_old != (res.p_old < 0.05)).sum())} of {len(res)} |  ({time.time() - t0:.0f} s)", flush=True)
    print(f"Monte Carlo SE: {np.sqrt(0.05 * 0.95 / args.sets):.3f} at a rate of 0.05, "
          f"{np.sqrt(0.25 / args.sets):.3f} at 0.5; {args.sets} data sets of {args.worlds} worlds per scenario")


if __name__ == "__main__":
    main()

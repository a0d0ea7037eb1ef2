"""Design B: size of the intervention-contrast tests and coverage of the swap interval (issue 14).

Each simulated data set has ``--worlds`` worlds answered under two interventions (C0, C2).
A world has a random effect u ~ N(0, 1) on the logit of P(choose B) shared by all its requests
and both interventions (the design's real dependence); every request is invalid with
probability 0.05. Swap: logit P(B) = -0.4 + u + 1.0 [LH]; competition: logit P(B) =
u + w_order [B-first] (+0.3 [12:00]). Nulls, each at alpha 0.05:

- signed swap contrast C2 - C0, the swap weight 1.0 in both arms;
- |order| contrast C2 - C0 with the same order weight w_order in both arms, for each w_order in
  --order-weights (0: no order effect; 1: a large one; between: where a test of this composite
  null is most easily too liberal).

It also prints the coverage of the 95 % whole-world interval of the C0 swap effect, against the
true pp effect E_u[expit(-0.4 + u + 1) - expit(-0.4 + u)] (by quadrature).

    python benchmarks/size_cue.py --sets 400 --order-weights 0,0.25,0.5,1
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.special import expit

from discern_stats.stats.cue import cue_metrics, intervention_contrasts

ORDERS = [(o, t) for o in ("A", "B") for t in ("08", "12")]


def simulate(rng: np.random.Generator, n_worlds: int, w_order: float) -> pd.DataFrame:
    u = rng.normal(0, 1, n_worlds)
    rows = []
    for iv in ("C0", "C2"):
        for w in range(n_worlds):
            cells = [("swap", c, -0.4 + u[w] + (1.0 if c == "LH" else 0.0)) for c in ("HL", "LH")]
            cells += [("competition", f"order={o}-first,time={t}",
                       u[w] + (w_order if o == "B" else 0.0) + (0.3 if t == "12" else 0.0)) for o, t in ORDERS]
            for track, cond, eta in cells:
                ok = rng.random() > 0.05
                rows.append((iv, f"w{w}", track, cond, ok, ("B" if rng.random() < expit(eta) else "A") if ok else None))
    df = pd.DataFrame(rows, columns=["intervention", "world_id", "track", "condition", "valid", "choice"])
    return df.assign(llm="sim", stratum="core", probe="P4", answer="A", correct=None)


def true_swap_pp() -> float:
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return float(100 * np.sum(w * (expit(-0.4 + x + 1.0) - expit(-0.4 + x))) / np.sum(w))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=400)
    ap.add_argument("--worlds", type=int, default=300)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--order-weights", default="0,0.25,0.5,1")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    truth = true_swap_pp()
    weights = [float(w) for w in a.order_weights.split(",")]
    swap_label = "signed swap (weight 1 in both arms)"
    rejections: dict[str, list[bool]] = {swap_label: [], **{f"|order| (order weight {w:g} in both)": [] for w in weights}}
    cover = []
    t0 = time.perf_counter()
    for s in range(a.sets):
        for k, w_order in enumerate(weights):
            df = simulate(rng, a.worlds, w_order)
            con = intervention_contrasts(df, contrasts=[("C2", "C0")], scopes=("all",), n_resamples=a.resamples,
                                         seed=s).set_index("endpoint")
            rejections[f"|order| (order weight {w_order:g} in both)"].append(con.at["abs_text_order", "p_value"] < 0.05)
            if k == 0:
                rejections[swap_label].append(con.at["swap", "p_value"] < 0.05)
                m = cue_metrics(df[df.intervention == "C0"], n_resamples=a.resamples, seed=s, strata=("all",))
                r = m[m.metric == "swap"].iloc[0]
                cover.append(r.lo <= truth <= r.hi)
    se = np.sqrt(0.05 * 0.95 / a.sets)
    print(f"{a.sets} data sets of {a.worlds} worlds x 2 interventions; {a.resamples} resamples; "
          f"{time.perf_counter() - t0:.0f}s")
    for label, r in rejections.items():
        print(f"rejection rate at alpha 0.05, {label}: {np.mean(r):.3f} (binomial SE {se:.3f})")
    print(f"coverage of the 95% swap interval (true effect {truth:.2f} pp): {np.mean(cover):.3f} "
          f"(binomial SE {np.sqrt(0.95 * 0.05 / a.sets):.3f})")


if __name__ == "__main__":
    main()

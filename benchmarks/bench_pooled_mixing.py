"""Mixing of the pooling hyperparameters (mu, tau) when the units barely differ (issue 25 point 1):
the centred (mu, tau) step alone against centred + non-centred interweaving (ASIS), both families,
on units x rows cells with an intercept per unit and one pooled slope whose true tau is small.

    python benchmarks/bench_pooled_mixing.py --units 65 --rows 200 --tau 0.02
"""

from __future__ import annotations

import argparse
import time

import arviz as az
import numpy as np

from discern_stats.bayes.spec import Block, HierarchicalGLM


def spec(family: str, units: int, rows: int, tau: float, seed: int) -> HierarchicalGLM:
    rng = np.random.default_rng(seed)
    unit = np.repeat(np.arange(units), rows)
    x = rng.normal(size=len(unit))
    a = rng.normal(0, 0.5, units)
    b = 0.3 + tau * rng.standard_normal(units)
    eta = a[unit] + b[unit] * x
    if family == "binomial":
        y, n = rng.binomial(1, 1 / (1 + np.exp(-eta))), np.ones(len(x), int)
    else:
        y, n = eta + rng.normal(0, 1.0, len(x)), None
    return HierarchicalGLM(family=family, unit="u", coords={"u": list(range(units)), "k": ["x"]},
                           blocks=[Block("a", (), sd=1.5), Block("b", ("k",))], A=np.column_stack([np.ones(len(x)), x]),
                           unit_index=unit, y=y, n=n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=65)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tau", type=float, default=0.02)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for family in ("normal", "binomial"):
        sp = spec(family, a.units, a.rows, a.tau, a.seed)
        for inter in (False, True):
            t = time.perf_counter()
            post, _, acc = sp.sample(draws=a.draws, tune=200, chains=2, random_seed=1, interweave_pooled=inter)
            wall = time.perf_counter() - t
            s = az.summary(az.from_dict({"posterior": {k: post[k][..., 0] for k in ("mu", "tau")}}), round_to="none")
            print(f"{family} units={a.units} rows={a.rows} tau_true={a.tau} interweave={inter}: " + "; ".join(
                f"{v} mean {s.loc[v, 'mean']:.3f} R-hat {s.loc[v, 'r_hat']:.3f} bulk ESS "
                f"{s.loc[v, 'ess_bulk']:.0f} tail ESS {s.loc[v, 'ess_tail']:.0f}" for v in ("mu", "tau"))
                  + f"; acceptance {acc}; {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()

"""Mixing of the crossed effects' steps with and without the translation moves (issue 25.2).

A binomial and a normal `spec.HierarchicalGLM` in the discernment model's layout: ``--units``
LLM x strategy groups, each with its own intercept and slopes on two source-level predictors
(pooled, N(mu, tau)) and one row-level predictor, nested item effects (1 | group:item), and crossed
(1 | source) and shared (1 | item) effects. Rows are drawn here (not by the package's simulator).
Each model is sampled by its Gibbs sampler with ``crossed_moves`` on (steps 7b, 7c: translations,
sigma_t interweaved) and off, same seed, and the script prints wall time and the minimum bulk / tail
ESS (ArviZ) and maximum R-hat per variable group.

    python benchmarks/bench_crossed_mixing.py --units 12 --sources 60 --items 40 --rows 20000 --draws 500
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def make_spec(family: str, units: int, sources: int, items: int, rows: int, source_sd: float, seed: int):
    from discern_stats.bayes.spec import Block, CrossedEffect, HierarchicalGLM
    rng = np.random.default_rng(seed)
    unit = rng.integers(0, units, rows)
    item = rng.integers(0, items, rows)
    src = rng.integers(0, sources, rows)
    unit[:units], src[:sources], item[:items] = np.arange(units), np.arange(sources), np.arange(items)
    xs = rng.standard_normal((sources, 2))  # reliability, popularity: properties of the source
    xr = rng.standard_normal(rows)  # a row-level predictor
    A = np.column_stack([np.ones(rows), xs[src], xr])
    b = np.array([0.15, 0.05, 0.4]) + 0.05 * rng.standard_normal((units, 3))
    a = -0.3 + 0.3 * rng.standard_normal(units)
    eta = (a[unit] + (A[:, 1:] * b[unit]).sum(1) + source_sd * rng.standard_normal(sources)[src]
           + 0.4 * rng.standard_normal(items)[item] + 0.2 * rng.standard_normal((units, items))[unit, item])
    coords = {"g": list(range(units)), "k": ["rel", "pop", "imp"], "item": list(range(items)),
              "source": list(range(sources))}
    kw = dict(unit="g", coords=coords, A=A, unit_index=unit, group="item", group_index=item, sigma_sd=1.0,
              blocks=[Block("a", (), sd=2.5, intercept=True), Block("b", ("k",))], mu_sd=1.0, tau_shape=2.0,
              tau_rate=8.0,
              crossed=[CrossedEffect("sigma_source", "z_source", "source", src, 0.5),
                       CrossedEffect("sigma_shared_item", "z_shared_item", "item", item, 0.5)])
    if family == "binomial":
        y = (rng.random(rows) < 1 / (1 + np.exp(-eta))).astype(np.int64)
        return HierarchicalGLM(family="binomial", y=y, n=np.ones(rows, np.int64), **kw)
    return HierarchicalGLM(family="normal", y=eta + 0.8 * rng.standard_normal(rows), **kw)


def summarise(post: dict) -> dict[str, tuple[float, float, float]]:
    import arviz as az
    import xarray as xr
    out = {}
    for name in ("mu", "b", "tau", "a", "sigma_source", "sigma_shared_item", "sigma_u"):
        if name not in post:
            continue
        x = np.asarray(post[name])
        da = xr.DataArray(x.reshape(x.shape[0], x.shape[1], -1), dims=["chain", "draw", "k"])
        ds = xr.Dataset({name: da})
        ess_b = az.ess(ds, method="bulk")[name].values.min()
        ess_t = az.ess(ds, method="tail")[name].values.min()
        rhat = az.rhat(ds)[name].values.max()
        out[name] = (float(ess_b), float(ess_t), float(rhat))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=12)
    ap.add_argument("--sources", type=int, default=60)
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--source-sd", type=float, default=0.3)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=200)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--families", default="binomial,normal")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for family in a.families.split(","):
        spec = make_spec(family, a.units, a.sources, a.items, a.rows, a.source_sd, a.seed)
        print(f"{family}: {a.rows:,} rows, {a.units} units, {a.sources} sources, {a.items} items, "
              f"source SD {a.source_sd}, {a.chains} x {a.draws} draws (tune {a.tune})")
        for moves in (False, True):
            t = time.perf_counter()
            post, _, _ = spec.sample(draws=a.draws, tune=a.tune, chains=a.chains, random_seed=a.seed,
                                     keep_group_effects=False, crossed_moves=moves)
            wall = time.perf_counter() - t
            cells = "  ".join(f"{k} {b:.0f}/{tl:.0f}/{r:.3f}" for k, (b, tl, r) in summarise(post).items())
            print(f"  crossed_moves={str(moves):5s} {wall:6.1f} s  (min bulk / tail ESS / max R-hat)  {cells}",
                  flush=True)


if __name__ == "__main__":
    main()

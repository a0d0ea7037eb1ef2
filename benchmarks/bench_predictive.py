"""What a saved fit's extra groups cost (issue 25.6): `predictive.groups_for` (observed and constant
data, the cluster log-likelihood by adaptive Gauss-Hermite, posterior predictive draws) on the
discernment model's parts, against building the model (prepare + specs) in the same run.

    python benchmarks/bench_predictive.py                 # paper scale: 670,800 held-out trials
    python benchmarks/bench_predictive.py --llms 3 --items 60

The posterior is a stand-in (2 chains x 4,000 draws, the model's default draws, from a fixed
normal around small values): the cost depends on rows, draws and parts, not on the values.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

sys.path.insert(0, str(Path(__file__).resolve().parent))


def stand_in_posterior(specs, chains: int, draws: int, seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs.values():
        nm = spec.names
        for b in spec.blocks:
            shape = [len(spec.coords[spec.unit])] + [len(spec.coords[d]) for d in b.dims]
            out[b.name] = (["chain", "draw", spec.unit, *b.dims], rng.normal(0, 0.3, (chains, draws, *shape)))
        L = len(spec.coords[spec.unit])
        out[nm["sigma"]] = (["chain", "draw", spec.unit], np.abs(rng.normal(0.5, 0.1, (chains, draws, L))))
        if spec.family == "normal":
            out[nm["resid"]] = (["chain", "draw", spec.unit], np.abs(rng.normal(1.0, 0.1, (chains, draws, L))))
    coords = {k: v for s in specs.values() for k, v in s.coords.items()}
    return xr.Dataset(out, coords={k: coords[k] for k in {d for v in out.values() for d in v[0]} if k in coords})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llms", type=int, default=13)
    ap.add_argument("--items", type=int, default=344)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--draws", type=int, default=4000)
    a = ap.parse_args()
    from heldout_l2d import generate
    from discern_stats.bayes import DiscernmentModel
    from discern_stats.bayes.predictive import draw_budget, groups_for
    df, _ = generate(llms=a.llms, items=a.items, seed=0)
    t0 = time.perf_counter()
    m = DiscernmentModel(df)
    specs = m.specs()
    t_build = time.perf_counter() - t0
    post = stand_in_posterior(specs, a.chains, a.draws)
    rows = max(len(s.A) for s in specs.values())
    ll_idx, pp_idx = draw_budget(rows, a.chains, a.draws)
    t0 = time.perf_counter()
    g = groups_for(specs, post, joint=m.joint_loglik, conditional=False)
    t_pred = time.perf_counter() - t0
    mb = sum(ds.nbytes for ds in g.values()) / 2 ** 20
    print(f"trials {len(df):,}; modelled rows {len(m.data):,} (parts: "
          + ", ".join(f"{p} {len(s.A):,}" for p, s in specs.items()) + ")")
    print(f"draws kept: log-likelihood {a.chains} x {len(ll_idx)}, posterior predictive {a.chains} x {len(pp_idx)} "
          f"(of {a.chains} x {a.draws}); clusters {g['log_likelihood'].sizes['cluster']:,}; groups {mb:,.0f} MiB")
    print(f"build (prepare + specs) {t_build:.1f} s; predictive groups {t_pred:.1f} s; ratio {t_pred / t_build:.2f}")


if __name__ == "__main__":
    main()

"""Where a paper-scale discernment fit spends its time (issue 25, the 10-minute goal): seconds per
Gibbs sweep of each part and of the saved fit's extra groups (log-likelihood, posterior predictive),
on the held-out paper-scale data of `heldout_l2d.generate` (670,800 trials), with both crossed
effects, 4 chains, a few sweeps. Run it at two commits in the same session to compare:

    PYTHONPATH=$PWD python benchmarks/time_discernment_sweeps.py --draws 20 --tune 10
    PYTHONPATH=/path/to/other/worktree python benchmarks/time_discernment_sweeps.py --draws 20 --tune 10

The per-sweep figures include each part's one-off set-up (pilot, cells, numba dispatch) spread over
the sweeps run, so they fall a little with more sweeps; the extrapolated fit is
sum over parts of (per sweep x (tune + draws of the default fit)) + the groups' time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--tune", type=int, default=10)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--items", type=int, default=344)
    ap.add_argument("--config", default='{"source_effects": true, "shared_item_effects": true}')
    a = ap.parse_args(argv)
    import discern_stats
    from discern_stats.bayes import DiscernmentModel
    from discern_stats.bayes import spec as spec_mod
    from discern_stats.bayes.base import GIBBS_TUNE
    from heldout_l2d import generate
    df, _ = generate(seed=11, source_sd=0.5, items=a.items)
    m = DiscernmentModel(df, **json.loads(a.config))
    per_part: list[float] = []  # in the order of m.specs()
    original = spec_mod.HierarchicalGLM.sample

    def timed(self, **kw):
        t = time.perf_counter()
        out = original(self, **kw)
        per_part.append(time.perf_counter() - t)
        return out

    spec_mod.HierarchicalGLM.sample = timed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        m.fit(draws=a.draws, tune=a.tune, chains=a.chains)
        wall = time.perf_counter() - t
    sweeps = a.draws + a.tune
    rows = {p: len(s.A) for p, s in m.specs().items()}
    print(f"discern_stats at {Path(discern_stats.__file__).parent}")
    print(f"trials {len(df):,}; rows by part {rows}; {a.chains} chains x {sweeps} sweeps")
    for secs, name in zip(per_part, rows):
        print(f"  {name:9s} {secs:7.1f} s   {secs / sweeps:6.3f} s per sweep")
    sampling = sum(per_part)
    default_sweeps = 1000 + GIBBS_TUNE
    print(f"sampling {sampling:.1f} s ({sampling / sweeps:.3f} s per sweep); saved-fit groups "
          f"{m.sampler.get('predictive_s', float('nan')):.1f} s; whole fit {wall:.1f} s")
    print(f"extrapolated fit of {a.chains} chains x {default_sweeps} sweeps (the default draws and burn-in): "
          f"{sampling / sweeps * default_sweeps:.0f} s sampling + the groups at the default draws")


if __name__ == "__main__":
    main()

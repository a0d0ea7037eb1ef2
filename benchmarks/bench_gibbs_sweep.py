"""Cost of the cue-weight Gibbs sampler's parts (issue 6), on the benchmark data of
`bench_cue_model.py` (13 LLMs x 300 worlds x 20 choices = 39,000 binomial cells):

- one log-likelihood pass and one Newton pass of the fused kernels (2 chains), per call;
- `logit_gibbs` alone for ``--draws`` draws x 2 chains (200 burn-in sweeps), the second of
  two calls in one process, so numba's compilation is not counted.

    python benchmarks/bench_gibbs_sweep.py --draws 1000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench_cue_model import simulate


def main() -> None:
    import importlib
    from discern_stats.bayes import CueWeightModel
    lg = importlib.import_module("discern_stats.bayes.logit_gibbs")  # the module (the package exports the function)
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=200)
    a = ap.parse_args()
    d, _ = simulate()
    design, _ = CueWeightModel(d).logit_design()
    cells = lg._Cells(design)
    C, G = 2, len(cells.gstart)
    rng = np.random.default_rng(0)
    tab = rng.normal(0, 1, (C, design.n_llm * cells.R))
    ug = rng.normal(0, 0.5, (C, G))
    out = np.zeros((C, G))
    res, wgt = np.zeros_like(tab), np.zeros_like(tab)
    for name, fn, args in (("log-likelihood pass", lg._loglik_groups, (tab, cells.lr, ug, cells.gidx, cells.k, cells.n, out)),
                           ("Newton pass", lg._sums_by, (tab, cells.lr, ug, cells.gidx, cells.lr, cells.k, cells.n, res, wgt))):
        fn(*args)
        t = time.perf_counter()
        for _ in range(a.repeat):
            fn(*args)
        el = (time.perf_counter() - t) / a.repeat
        print(f"{name:20s} {el * 1e3:.3f} ms per call ({len(cells.k):,} cells x {C} chains)")
    for rep in range(2):
        t = time.perf_counter()
        lg.logit_gibbs(design, draws=a.draws, tune=200, chains=C, random_seed=1)
        el = time.perf_counter() - t
    print(f"logit_gibbs: {el:.2f} s for {a.draws + 200} sweeps x {C} chains "
          f"({el / (a.draws + 200) * 1e3:.2f} ms per sweep)")


if __name__ == "__main__":
    main()

"""Coverage study for the cue-weight model (issue 6), run outside CI.

Simulates ``--sets`` data sets from the model's generative process (3 LLMs x ``--worlds``
worlds x 20 choices, 5 cues, world effects sd 0.5, weights drawn anew for each set), fits
`CueWeightModel` to each (2 chains x 1,000 draws, with the model's default sampler, the
Gibbs sampler, or ``--sampler nutpie``) and reports the share of true weights inside their
94% HDIs (nominal 0.94) and how many fits passed the convergence checks.

    python benchmarks/coverage_cue_weights.py --sets 100 --worlds 80
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bench_cue_model import CUES5, simulate


def main() -> None:
    from discern_stats.bayes import CueWeightModel
    from discern_stats.bayes.base import hdi_columns
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=100)
    ap.add_argument("--worlds", type=int, default=80)
    ap.add_argument("--llms", type=int, default=3)
    ap.add_argument("--sampler", default=None, help="gibbs (default) or nutpie")
    a = ap.parse_args()
    inside, total, ok = 0, 0, 0
    for s in range(a.sets):
        d, w = simulate(n_llm=a.llms, n_world=a.worlds, seed=1000 + s)
        m = CueWeightModel(d)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(draws=1000, chains=2, random_seed=s, sampler=a.sampler)
        ok += m.diagnostics["ok"]
        beta = m.draws("beta")
        for i in range(a.llms):
            lo, hi = hdi_columns(beta[:, i, [m.index["cue"].index(c) for c in CUES5]])
            inside += int(((w[i] >= lo) & (w[i] <= hi)).sum())
            total += len(CUES5)
        print(f"set {s + 1}/{a.sets}: running coverage {inside / total:.3f} ({inside}/{total}); converged {ok}/{s + 1}"
              + ("" if m.diagnostics["ok"] else f" (this set: {'; '.join(m.diagnostics['problems'])})"), flush=True)


if __name__ == "__main__":
    main()

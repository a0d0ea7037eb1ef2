"""Coverage study for the four-part discernment model (issue 16), run outside CI.

Simulates ``--sets`` data sets from the model's generative process (`bench_discernment.simulate`:
``--llms`` LLMs x ``--strategies`` strategies x ``--items`` items x 10 posteriors, slopes and
intercepts drawn anew for each set), fits `DiscernmentModel` to each (Gibbs, 2 chains x 1,000
draws) and reports the share of true slopes inside their 94% HDIs (nominal 0.94), per part, and
how many fits passed the convergence checks.

    python benchmarks/coverage_discernment.py --sets 20
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench_discernment import fit_new, simulate


def main() -> None:
    from discern_stats.bayes.base import hdi_columns
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=20)
    ap.add_argument("--llms", type=int, default=2)
    ap.add_argument("--strategies", type=int, default=2)
    ap.add_argument("--items", type=int, default=150)
    ap.add_argument("--draws", type=int, default=1000)
    a = ap.parse_args()
    hits, total, ok = {}, {}, 0
    t0 = time.perf_counter()
    for s in range(a.sets):
        df, truth = simulate(n_llm=a.llms, n_strategy=a.strategies, n_items=a.items, seed=1000 + s)
        m, _ = fit_new(df, a.draws, 2, seed=s)
        ok += m.diagnostics["ok"]
        for part, b_true in truth["slopes"].items():
            b = m.draws(f"{part}_slope")
            groups = list(m.idata["posterior"][f"{part}_slope"].coords[f"{part}_group"].values)
            t = b_true[[truth["groups"].index(g) for g in groups]].ravel()
            lo, hi = hdi_columns(b.reshape(len(b), -1))
            hits[part] = hits.get(part, 0) + int(((t >= lo) & (t <= hi)).sum())
            total[part] = total.get(part, 0) + t.size
        print(f"set {s + 1}/{a.sets}: {'converged' if m.diagnostics['ok'] else m.diagnostics['problems']}; "
              f"running coverage {sum(hits.values()) / sum(total.values()):.3f}", flush=True)
    for part in hits:
        print(f"{part:9s} {hits[part]:5d} / {total[part]:5d} = {hits[part] / total[part]:.3f}")
    h, n = sum(hits.values()), sum(total.values())
    print(f"all       {h:5d} / {n:5d} = {h / n:.3f} (nominal 0.94, binomial SE {np.sqrt(0.94 * 0.06 / n):.3f}); "
          f"{ok} of {a.sets} fits passed the convergence checks; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

"""Design A suite timing, crossed (default) against items-only, for one or more checkouts (issue 24).

Builds `bench_metrics.sim_l2d(670_000)` once per checkout process and times
``l2d_metrics(df, n_resamples=5000, method=...)`` for ``percentile`` (items only) and ``crossed``
(items x sources, small-cluster correction), ``--repeat`` times each, after a small warm-up call
(numba's compile is not timed). Run it for each checkout one after the other in the same session:

    for c in /tmp/before /work/wt/stats24; do PYTHONPATH=$c python benchmarks/time_crossed_suite.py --repeat 2; done
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_metrics import sim_l2d  # noqa: E402


def main() -> None:
    import discern_stats
    from discern_stats.stats import l2d_metrics
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=670_000)
    ap.add_argument("--resamples", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    df = sim_l2d(a.rows)
    l2d_metrics(df.head(5000), n_resamples=100)  # warm-up: numba kernels compiled or loaded from the cache
    print(f"{discern_stats.__file__}: {len(df):,} rows, {a.resamples:,} resamples")
    for _ in range(a.repeat):
        for method in ("percentile", "crossed"):
            t = time.perf_counter()
            l2d_metrics(df, n_resamples=a.resamples, method=method)
            print(f"  {method:10s} {time.perf_counter() - t:6.1f} s", flush=True)


if __name__ == "__main__":
    main()

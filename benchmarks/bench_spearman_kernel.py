"""Cost of one pass of the cluster-bootstrap Spearman kernel (issue 5), per row and resample.

Times `stats.spearman_lanes.rank_sums` on simulated rows (343 item clusters, x with half its
values tied at 0 like Design A's updates) for the kinds of y that Design A has: no ties
(popularity, rated reliability) and large tie groups (reliability levels). Best of 2 runs.

    python benchmarks/bench_spearman_kernel.py --resamples 5000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from discern_stats.stats.bootstrap import resample_counts
from discern_stats.stats.spearman_lanes import LANES, rank_sums


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--resamples", type=int, default=5000)
    ap.add_argument("--clusters", type=int, default=343)
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    K, B = a.clusters, a.resamples
    W = resample_counts(K, B, 0)
    rank_sums(W[:LANES], rng.integers(0, K, 100), rng.random(100), [rng.random(100)])  # compile
    print(f"{LANES} lanes, {B} resamples, {K} clusters")
    for n in (10_000, 51_000):
        cl = np.sort(rng.integers(0, K, n))
        x = np.where(rng.random(n) < 0.5, 0.0, rng.random(n))
        cases = {"x pass only": [], "x + 4 y without ties": [rng.random(n) for _ in range(4)],
                 "x + 4 y with 50 levels": [rng.integers(0, 50, n).astype(float) for _ in range(4)]}
        for label, ys in cases.items():
            best = np.inf
            for _ in range(2):
                t = time.perf_counter()
                rank_sums(W, cl, x, ys)
                best = min(best, time.perf_counter() - t)
            print(f"n={n:>6} {label:<24} {best:6.3f} s = {best / (n * B) * 1e9:.2f} ns per row and resample")


if __name__ == "__main__":
    main()

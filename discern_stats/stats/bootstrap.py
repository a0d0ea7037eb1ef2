"""Whole-cluster bootstrap, vectorised: one resample-count matrix, no Python loop per resample.

A resample draws n clusters (worlds or items) with replacement; ``W[b, c]`` is how often
cluster c appears in resample b (multinomial counts). For a ratio statistic
theta = sum_c s_c / sum_c n_c the resampled values are ``(W @ s) / (W @ n)`` — exactly the
statistic recomputed on the resampled clusters. Paired contrasts use the same W for both
conditions, so the same worlds are resampled jointly.

Intervals: percentile and BCa (Efron 1987; acceleration from the leave-one-cluster-out
jackknife). Bootstrap p-value (two-sided, H0: theta = 0):
p = min(1, 2 * min(#(theta* <= 0) + 1, #(theta* >= 0) + 1) / (B + 1)), the percentile-interval
inversion with the +1 correction so that p is never 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

DEFAULT_RESAMPLES = 5000


def resample_counts(n_clusters: int, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> np.ndarray:
    """(B x n) multinomial cluster counts; row sums equal n."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples).astype(np.float64)


def ratio(W: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (W @ num) / (W @ den)


def jackknife_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (num.sum() - num) / (den.sum() - den)


@dataclass
class Interval:
    estimate: float
    lo: float
    hi: float
    p_value: float
    se: float
    method: str
    level: float


def percentile_interval(boot: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    b = boot[np.isfinite(boot)]
    if b.size == 0:
        return (np.nan, np.nan)
    a = (1 - level) / 2
    return float(np.quantile(b, a)), float(np.quantile(b, 1 - a))


def bca_interval(theta: float, boot: np.ndarray, jack: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    b = boot[np.isfinite(boot)]
    j = jack[np.isfinite(jack)]
    if b.size == 0 or not np.isfinite(theta):
        return (np.nan, np.nan)
    prop = (np.sum(b < theta) + 0.5 * np.sum(b == theta)) / b.size
    prop = min(max(prop, 1.0 / (b.size + 1)), b.size / (b.size + 1))
    z0 = sps.norm.ppf(prop)
    d = j.mean() - j
    denom = 6.0 * (np.sum(d ** 2) ** 1.5)
    acc = float(np.sum(d ** 3) / denom) if denom > 0 else 0.0
    a = (1 - level) / 2
    out = []
    for z in (sps.norm.ppf(a), sps.norm.ppf(1 - a)):
        q = sps.norm.cdf(z0 + (z0 + z) / (1 - acc * (z0 + z)))
        out.append(float(np.quantile(b, q)))
    return out[0], out[1]


def boot_p_value(boot: np.ndarray) -> float:
    b = boot[np.isfinite(boot)]
    if b.size == 0:
        return np.nan
    lo = np.sum(b <= 0) + 1
    hi = np.sum(b >= 0) + 1
    return float(min(1.0, 2 * min(lo, hi) / (b.size + 1)))


def summarise(theta: float, boot: np.ndarray, jack: np.ndarray | None = None, *, method: str = "percentile",
              level: float = 0.95) -> Interval:
    if method == "bca":
        if jack is None:
            raise ValueError("BCa needs the jackknife values")
        lo, hi = bca_interval(theta, boot, jack, level)
    elif method == "percentile":
        lo, hi = percentile_interval(boot, level)
    else:
        raise ValueError(f"unknown interval method {method!r}; use 'percentile' or 'bca'")
    b = boot[np.isfinite(boot)]
    return Interval(float(theta), lo, hi, boot_p_value(boot), float(b.std(ddof=1)) if b.size > 1 else np.nan,
                    method, level)


def weighted_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Spearman's rho of rows repeated w[b, i] times, for every resample row b of ``w`` (B x n).

    Equal to ``scipy.stats.spearmanr`` on the expanded data: mid-ranks of repeated rows
    are computed from cumulative weights over the sorted values, then the weighted
    Pearson correlation of the ranks.
    """
    w = np.atleast_2d(w)

    def midranks(v: np.ndarray) -> np.ndarray:
        order = np.argsort(v, kind="mergesort")
        vs = v[order]
        starts = np.r_[True, vs[1:] != vs[:-1]]
        gid = np.cumsum(starts) - 1
        ws = w[:, order]
        gw = np.add.reduceat(ws, np.flatnonzero(starts), axis=1)  # weight of each tie group
        before = np.cumsum(gw, axis=1) - gw
        r_group = before + (gw + 1) / 2
        r = np.empty_like(ws)
        r[:, order] = r_group[:, gid]
        return r

    rx, ry = midranks(np.asarray(x, float)), midranks(np.asarray(y, float))
    sw = w.sum(axis=1, keepdims=True)
    mx = (w * rx).sum(axis=1, keepdims=True) / sw
    my = (w * ry).sum(axis=1, keepdims=True) / sw
    dx, dy = rx - mx, ry - my
    cov = (w * dx * dy).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.sqrt((w * dx * dx).sum(axis=1) * (w * dy * dy).sum(axis=1))

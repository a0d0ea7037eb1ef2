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

from ..core.errors import InputError
from .ranks import derived, remember

DEFAULT_RESAMPLES = 5000


def resample_counts(n_clusters: int, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> np.ndarray:
    """(B x n) multinomial cluster counts; row sums equal n. Deterministic in (n, B, seed), so the
    last few matrices are kept (read-only) and shared by the groups that have the same cluster count."""
    key = (int(n_clusters), int(n_resamples), int(seed))
    W = _COUNTS_CACHE.get(key)
    if W is None:
        rng = np.random.default_rng(seed)
        W = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples).astype(np.float64)
        W.flags.writeable = False
        remember(_COUNTS_CACHE, key, W)
    return W


_COUNTS_CACHE: dict[tuple[int, int, int], np.ndarray] = {}


def ratio(W: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Resampled ratios (W @ num) / (W @ den) from one matrix product; ``num`` and ``den`` are per-cluster
    sums, (K,) for one ratio or (K, m) for m ratios (then the result is B x m)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    m = 1 if num.ndim == 1 else num.shape[1]
    both = W @ np.column_stack([num, den])
    with np.errstate(invalid="ignore", divide="ignore"):
        out = both[:, :m] / both[:, m:]
    return out[:, 0] if num.ndim == 1 else out


def jackknife_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Leave-one-cluster-out values of sum(num) / sum(den); one column per ratio for 2-D input."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (num.sum(axis=0) - num) / (den.sum(axis=0) - den)


def with_all_once(W: np.ndarray | None, n_clusters: int) -> np.ndarray:
    """``W`` with a first row of ones, the resample that holds every cluster once: a statistic on it is
    the point estimate, so one kernel pass gives the estimate and the bootstrap values
    (``out[0]`` and ``out[1:]``). ``W`` None gives the single row of ones. Kept (read-only) for a
    read-only ``W``, such as the shared matrices of `resample_counts`."""
    if W is None:
        return np.ones((1, n_clusters))

    def make(W: np.ndarray) -> np.ndarray:
        out = np.vstack([np.ones((1, W.shape[1])), W])
        out.flags.writeable = W.flags.writeable
        return out
    return derived(_WITH_ALL_ONCE, W, make)


_WITH_ALL_ONCE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


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
            raise InputError("BCa needs the jackknife values")
        lo, hi = bca_interval(theta, boot, jack, level)
    elif method == "percentile":
        lo, hi = percentile_interval(boot, level)
    else:
        raise InputError(f"unknown interval method {method!r}; use 'percentile' or 'bca'")
    b = boot[np.isfinite(boot)]
    return Interval(float(theta), lo, hi, boot_p_value(boot), float(b.std(ddof=1)) if b.size > 1 else np.nan,
                    method, level)


def summarise_columns(theta: np.ndarray, boot: np.ndarray, jack: np.ndarray | None = None, *,
                      method: str = "percentile", level: float = 0.95) -> list[Interval]:
    """`summarise` for each column of ``boot`` (B x m) against ``theta[c]``: the same numbers, with the
    quantiles, p-values and SEs of all-finite columns computed at once."""
    boot = np.asarray(boot, float)
    finite = np.isfinite(boot).all(axis=0)
    out: list[Interval | None] = [None] * boot.shape[1]
    fast = np.flatnonzero(finite) if method == "percentile" and boot.shape[0] > 1 else np.zeros(0, int)
    if fast.size:
        b = boot[:, fast]
        a = (1 - level) / 2
        lo, hi = np.quantile(b, [a, 1 - a], axis=0)
        n = b.shape[0]
        p = np.minimum(1.0, 2 * np.minimum((b <= 0).sum(axis=0) + 1, (b >= 0).sum(axis=0) + 1) / (n + 1))
        se = b.std(axis=0, ddof=1)
        for i, c in enumerate(fast):
            out[c] = Interval(float(theta[c]), float(lo[i]), float(hi[i]), float(p[i]), float(se[i]), method, level)
    for c in range(boot.shape[1]):
        if out[c] is None:
            out[c] = summarise(float(theta[c]), boot[:, c], None if jack is None else jack[:, c], method=method,
                               level=level)
    return out  # type: ignore[return-value]

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

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from ..errors import InputError

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
_CACHE_LOCK = threading.Lock()


def remember(cache: dict, key: Any, value: Any, limit: int = 8) -> Any:
    """Keep ``value`` in one of the module's small caches, dropping the oldest entry beyond ``limit``
    (safe when groups are analysed in several threads)."""
    with _CACHE_LOCK:
        if key not in cache and len(cache) >= limit:
            cache.pop(next(iter(cache)), None)
        cache[key] = value
    return value


def derived(cache: dict, W: np.ndarray, make: Any) -> Any:
    """``make(W)``, kept in ``cache`` when W is read-only (by identity: the shared matrices of
    `resample_counts` are read-only, so every group with the same cluster count reuses the result)."""
    hit = cache.get(id(W))
    if hit is not None and hit[0] is W:
        return hit[1]
    out = make(W)
    if not W.flags.writeable:
        remember(cache, id(W), (W, out))
    return out


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


def _tie_groups(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort order of v (int32) and the start of each tie group in that order (with n appended)."""
    order = np.argsort(v, kind="mergesort")
    vs = v[order]
    starts = np.flatnonzero(np.r_[True, vs[1:] != vs[:-1]])
    return order.astype(np.int32), np.r_[starts, len(v)].astype(np.int64)


def _cluster_spearman_kernel_py(W, size, ix, ox, gx, iys, oys, gys, goff, out):  # noqa: ANN001 - numba-compatible
    """For each resample b: rho(x, y_k) with row i weighted W[b, cluster[i]], for every k.

    Mid-ranks of the expanded data: rank of a tie group = (weight before it) + (its weight + 1) / 2,
    and the weighted mean rank is m = (N + 1) / 2 for N = total weight. With centred ranks
    a_i = rx_i - m and the y tie groups g of rank r_g:
    S_xy = sum_g (r_g - m) * sum_{i in g} w_i a_i,  S_yy = sum_g w_g (r_g - m)^2,
    so each y needs a single pass along its sort order. ``ix``/``iys`` are the clusters of the
    rows in x / y sort order, ``size`` the number of rows per cluster. Reference plain-Python
    kernel (tests, and where numba is missing); `spearman_lanes.rank_sums` computes the same sums
    compiled, `spearman_lanes.LANES` resamples per pass.
    """
    n = ox.shape[0]
    n_y = out.shape[1]
    for b in range(W.shape[0]):
        w = W[b]
        total = 0.0
        for c in range(size.shape[0]):
            total += w[c] * size[c]
        m = (total + 1.0) / 2.0
        a = np.empty(n, dtype=np.float32)  # centred x rank of each row (half-integers: exact)
        before = 0.0
        sxx = 0.0
        for g in range(gx.shape[0] - 1):
            s = 0.0
            for k in range(gx[g], gx[g + 1]):
                s += w[ix[k]]
            r = before + (s + 1.0) / 2.0 - m
            for k in range(gx[g], gx[g + 1]):
                a[ox[k]] = np.float32(r)
            before += s
            sxx += s * r * r
        for j in range(n_y):
            before = 0.0
            syy = 0.0
            sxy = 0.0
            for g in range(goff[j], goff[j + 1] - 1):
                s = 0.0
                t = 0.0
                for k in range(gys[g], gys[g + 1]):
                    wk = w[iys[j, k]]
                    s += wk
                    t += wk * a[oys[j, k]]
                r = before + (s + 1.0) / 2.0 - m
                before += s
                syy += s * r * r
                sxy += r * t
            den = np.sqrt(sxx * syy)
            out[b, j] = sxy / den if den > 0 else np.nan


def cluster_spearman(x: np.ndarray, ys: list[np.ndarray], cluster: np.ndarray, W: np.ndarray,
                     pair: tuple[int, int] | None = None) -> np.ndarray:
    """Spearman's rho(x, y_k) on every cluster-bootstrap resample, for several y at once.

    ``cluster[i]`` is the cluster (e.g. item) of row i; ``W`` is the (B x n_clusters) count matrix
    from `resample_counts`, so row i appears ``W[b, cluster[i]]`` times in resample b. Returns a
    (B x len(ys)) array equal to ``scipy.stats.spearmanr`` on each expanded resample (the same
    values as `weighted_spearman`), in O(n) per resample with no (B x n) matrix: the sort orders
    and tie groups are computed once, and each resample only accumulates weights along them.
    ``pair=(i, j)`` (i < j) appends a column, rho(y_i, y_j), computed in the same pass.
    """
    x = np.asarray(x, float)
    cluster = np.asarray(cluster, np.int64)
    W = np.ascontiguousarray(W, dtype=np.float64)
    try:
        from .spearman_lanes import rank_sums
    except ImportError:  # pragma: no cover - numba is a dependency; the reference kernel is slow but exact
        return _cluster_spearman_reference(x, ys, cluster, W, pair)
    sums = rank_sums(W, cluster, x, ys, pair)
    sxx, syy, sxy = sums[:3]
    with np.errstate(invalid="ignore", divide="ignore"):
        num, den = sxy, np.sqrt(sxx[:, None] * syy)
        if pair is not None:
            num = np.column_stack([num, sums[3]])
            den = np.column_stack([den, np.sqrt(syy[:, pair[0]] * syy[:, pair[1]])])
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _cluster_spearman_reference(x: np.ndarray, ys: list[np.ndarray], cluster: np.ndarray,
                                W: np.ndarray, pair: tuple[int, int] | None = None) -> np.ndarray:
    """`cluster_spearman` through the plain-Python reference kernel (one resample at a time)."""
    if pair is not None:
        i, j = pair
        return np.column_stack([_cluster_spearman_reference(x, ys, cluster, W),
                                _cluster_spearman_reference(np.asarray(ys[i], float), [ys[j]], cluster, W)])
    ox, gx = _tie_groups(x)
    ty = [_tie_groups(np.asarray(y, float)) for y in ys]
    oys = np.vstack([o for o, _ in ty]) if ty else np.empty((0, len(x)), np.int32)
    gys = np.concatenate([g for _, g in ty]) if ty else np.empty(0, np.int64)
    goff = np.r_[0, np.cumsum([len(g) for _, g in ty])].astype(np.int64)
    size = np.bincount(cluster, minlength=W.shape[1]).astype(np.float64)
    out = np.empty((W.shape[0], len(ys)))
    _cluster_spearman_kernel_py(W, size, cluster[ox].astype(np.int32), ox, gx, cluster[oys].astype(np.int32), oys,
                                gys, goff, out)
    return out

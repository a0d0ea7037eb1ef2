"""Spearman's rank correlation on cluster-bootstrap resamples: the weighted form (`weighted_spearman`,
a B x n weight matrix) and the O(n)-per-resample form (`cluster_spearman`) whose compiled kernel is
`spearman_lanes.rank_sums`; a plain-Python reference kernel checks both. `spearman_influence`: the
derivative of rho with respect to each row's weight (the linear terms of the crossed source term)."""

from __future__ import annotations

import numpy as np

from .ranks import tie_groups


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


def _signed_sums(v: np.ndarray, codes: np.ndarray, n_levels: int) -> np.ndarray:
    """For each row k: sum_i sgn(z_i - z_k) v_i (rows above k's value minus rows below), where
    ``codes`` are the dense ranks of z (ties share a code): prefix sums over the tie groups."""
    s = np.bincount(codes, v, minlength=n_levels)
    upto = np.cumsum(s)
    below = upto[codes] - s[codes]
    above = upto[-1] - upto[codes] if n_levels else upto[codes]
    return above - below


def spearman_influence(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """(rho, psi): Spearman's rho and, per row k, psi_k = d rho / d w_k at w = 1, the derivative of
    the rho of the data with row k repeated w_k times (mid-ranks of the expanded data).

    With row weights w the centred mid-ranks are a_i = (1/2) sum_j w_j sgn(x_i - x_j) (and b_i for
    y), linear in w, so S_xy = sum_i w_i a_i b_i is cubic and rho = S_xy / sqrt(S_xx S_yy) is
    homogeneous of degree 0 (sum_k psi_k = 0). Differentiating,
    dS_xy/dw_k = a_k b_k + (1/2) [sum_i sgn(x_i - x_k) b_i + sum_i sgn(y_i - y_k) a_i],
    dS_xx/dw_k = a_k^2 + sum_i sgn(x_i - x_k) a_i (likewise S_yy), and
    psi_k = dS_xy_k / sqrt(S_xx S_yy) - rho (dS_xx_k / S_xx + dS_yy_k / S_yy) / 2.
    O(n log n): each signed sum is a prefix sum over the sorted tie groups. The linear term of a
    cluster is the sum of its rows' psi: rho(counts) - rho ~ sum_c psi_c (count_c - 1), which the
    crossed source term uses in place of re-ranking every source resample (`crossed`).
    Not finite (NaN) where x or y is constant.
    """
    (rho,), (psi,) = spearman_influences(x, [y])
    return rho, psi


def spearman_influences(x: np.ndarray, ys: list[np.ndarray]) -> tuple[list[float], list[np.ndarray]]:
    """`spearman_influence` of (x, y_k) for each k, x's ranks and its own terms computed once."""
    x = np.asarray(x, float)
    ux, cx = np.unique(x, return_inverse=True)
    a = -0.5 * _signed_sums(np.ones(len(x)), cx, len(ux))  # sum_j sgn(x_k - x_j) / 2: the centred mid-rank
    sxx = a @ a
    d_xx = a * a + _signed_sums(a, cx, len(ux))
    rhos, psis = [], []
    for y in ys:
        uy, cy = np.unique(np.asarray(y, float), return_inverse=True)
        b = -0.5 * _signed_sums(np.ones(len(x)), cy, len(uy))
        syy, sxy = b @ b, a @ b
        den = np.sqrt(sxx * syy)
        if not den > 0:
            rhos.append(np.nan)
            psis.append(np.full(len(x), np.nan))
            continue
        rho = sxy / den
        d_xy = a * b + 0.5 * (_signed_sums(b, cx, len(ux)) + _signed_sums(a, cy, len(uy)))
        d_yy = b * b + _signed_sums(b, cy, len(uy))
        rhos.append(float(rho))
        psis.append(d_xy / den - 0.5 * rho * (d_xx / sxx + d_yy / syy))
    return rhos, psis


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
    ox, gx = tie_groups(x)
    ty = [tie_groups(np.asarray(y, float)) for y in ys]
    oys = np.vstack([o for o, _ in ty]) if ty else np.empty((0, len(x)), np.int32)
    gys = np.concatenate([g for _, g in ty]) if ty else np.empty(0, np.int64)
    goff = np.r_[0, np.cumsum([len(g) for _, g in ty])].astype(np.int64)
    size = np.bincount(cluster, minlength=W.shape[1]).astype(np.float64)
    out = np.empty((W.shape[0], len(ys)))
    _cluster_spearman_kernel_py(W, size, cluster[ox].astype(np.int32), ox, gx, cluster[oys].astype(np.int32), oys,
                                gys, goff, out)
    return out

"""The compiled kernel behind `bootstrap.cluster_spearman`: many resamples per pass, in SIMD lanes.

It computes what the plain-Python reference `bootstrap._cluster_spearman_kernel_py` computes (the
mid-rank sums of the expanded resample, see there), but for ``LANES`` resamples at once: each row
of the sort order is read once per block of ``LANES`` resamples, and the lanes are independent
sums that the CPU adds in one vector instruction. The source is written out from a template
with one scalar per lane (``s0 .. s3``: a line with ``@`` is written once per lane), because
scalars are what LLVM's SLP vectoriser packs into vector registers; the same loop over a small
array is left scalar (numba arrays may alias).

Exactness: weights, rank sums and centred ranks are integers or half-integers, exact in float64;
the products are summed in float64 in a different order than the reference (``reassoc``), which
changes rho by ~1e-16 at most. ``nnan``/``ninf`` fast-math flags are not used: rho's division
is done afterwards in numpy, where a zero variance gives NaN.
"""

from __future__ import annotations

import numba
import numpy as np

LANES = 4  # resamples per pass (4 float64 = one AVX2 register); 8 and 16 were slower here (register spills)

_TEMPLATE = """
def lanes_serial(Wt, b0, b1, size, ix, xend, iys, pys, yend, sxx, syy, sxy, a):
    K = Wt.shape[0]
    n_y = iys.shape[0]
    n = iys.shape[1]
    for bb in range(b0, b1, LANES):
        wb = Wt[:, bb:bb + LANES]
        m@ = 0.0
        for c in range(K):
            m@ += wb[c, @] * size[c]
        m@ = (m@ + 1.0) * 0.5
        be@ = 0.0
        xx@ = 0.0
        s@ = 0.0
        g = 0
        for k in range(n):
            c = ix[k]
            s@ += wb[c, @]
            if xend[k]:
                r@ = be@ + (s@ + 1.0) * 0.5 - m@
                be@ += s@
                xx@ += s@ * r@ * r@
                a[g, @] = r@
                s@ = 0.0
                g += 1
        sxx[bb + @] = xx@
        for j in range(n_y):
            be@ = 0.0
            yy@ = 0.0
            xy@ = 0.0
            s@ = 0.0
            t@ = 0.0
            for k in range(n):
                c = iys[j, k]
                p = pys[j, k]
                s@ += wb[c, @]
                t@ += wb[c, @] * a[p, @]
                if yend[j, k]:
                    r@ = be@ + (s@ + 1.0) * 0.5 - m@
                    be@ += s@
                    yy@ += s@ * r@ * r@
                    xy@ += r@ * t@
                    s@ = 0.0
                    t@ = 0.0
            syy[bb + @, j] = yy@
            sxy[bb + @, j] = xy@
"""


def _lane_source(lanes: int) -> str:
    """The template with each line that holds ``@`` written once per lane (``@`` -> 0, 1, ...)."""
    out = []
    for line in _TEMPLATE.splitlines():
        if "@" in line:
            out.extend(line.replace("@", str(q)) for q in range(lanes))
        else:
            out.append(line.replace("LANES", str(lanes)))
    return "\n".join(out) + "\n"


def _compile():  # noqa: ANN202
    ns: dict = {}
    exec(compile(_lane_source(LANES), "<spearman_lanes>", "exec"), ns)  # noqa: S102 - our own template
    serial = numba.njit(fastmath={"reassoc", "contract"})(ns["lanes_serial"])

    @numba.njit(parallel=True)
    def lanes(Wt, size, ix, xend, iys, pys, yend, sxx, syy, sxy, n_groups):  # noqa: ANN001, ANN202
        n_blocks = Wt.shape[1] // LANES
        n_chunks = max(1, min(n_blocks, numba.get_num_threads() * 4))
        step = (n_blocks + n_chunks - 1) // n_chunks
        for ch in numba.prange(n_chunks):
            lo = ch * step * LANES
            hi = min(Wt.shape[1], lo + step * LANES)
            if lo < hi:
                a = np.empty((n_groups, LANES))  # centred rank of each x tie group, per lane
                serial(Wt, lo, hi, size, ix, xend, iys, pys, yend, sxx, syy, sxy, a)

    return lanes


_KERNEL = None


def _sorted_ties(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort order of v and, along it, True on the last row of each tie group."""
    from .bootstrap import _tie_groups  # the shared sort; bootstrap imports this module lazily
    order, starts = _tie_groups(v)
    end = np.zeros(len(v), np.bool_)
    end[starts[1:] - 1] = True
    return order, end


def rank_sums(W: np.ndarray, cluster: np.ndarray, x: np.ndarray,
              ys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(S_xx (B,), S_yy (B, n_y), S_xy (B, n_y)): sums of products of the centred mid-ranks of x and
    each y on every expanded resample (row i repeated ``W[b, cluster[i]]`` times); Spearman's rho is
    S_xy / sqrt(S_xx S_yy). The x ranks are kept per x tie group, so ties in x shrink the working set.
    Compiled on first use (a few seconds).
    """
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _compile()
    cluster = np.asarray(cluster, np.int64)
    ox, xend = _sorted_ties(np.asarray(x, float))
    xgroup = np.empty(len(ox), np.int32)
    xgroup[ox] = np.cumsum(np.r_[False, xend[:-1]])  # row -> its x tie group (0, 1, ... in x order)
    sorted_ys = [_sorted_ties(np.asarray(y, float)) for y in ys]
    oys = np.vstack([o for o, _ in sorted_ys]) if ys else np.empty((0, len(ox)), np.int64)
    yend = np.vstack([e for _, e in sorted_ys]) if ys else np.empty((0, len(ox)), np.bool_)
    B, K = W.shape
    Bp = -(-B // LANES) * LANES
    Wt = np.zeros((K, Bp))
    Wt[:, :B] = W.T  # padding resamples have weight 0: their sums are 0 and are cut off below
    size = np.bincount(cluster, minlength=K).astype(np.float64)
    sxx, syy, sxy = np.empty(Bp), np.empty((Bp, len(ys))), np.empty((Bp, len(ys)))
    _KERNEL(Wt, size, cluster[ox].astype(np.int32), xend, cluster[oys].astype(np.int32), xgroup[oys], yend,
            sxx, syy, sxy, int(xend.sum()))
    return sxx[:B], syy[:B], sxy[:B]

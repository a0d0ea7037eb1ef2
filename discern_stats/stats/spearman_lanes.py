"""The compiled kernel behind `spearman.cluster_spearman`: ``LANES`` resamples per pass, as SIMD vectors.

It computes what the plain-Python reference `spearman._cluster_spearman_kernel_py` computes (the
mid-rank sums of the expanded resample, see there), for ``LANES`` resamples at once: each row of
the sort order is read once per block of ``LANES`` resamples, and every running sum (cumulative
weight, rank sums, products) is one LLVM vector of ``LANES`` float64, so one instruction updates
all the resamples of the block. numba's own vectorisers leave this loop scalar (the running sums
are reset inside a branch at the end of each tie group), so the vectors are explicit: the small
`numba.extending.intrinsic` functions below (``_vload``, ``_vadd``, ...) emit LLVM vector
instructions on a ``<LANES x double>`` type, which LLVM splits into the widest registers the CPU
has (one AVX-512 register holds 8, an AVX2 register 4; the code is the same on every x86 or ARM).

Layout: the resample counts of a block sit together, ``Wf[(block * K + cluster) * LANES + lane]``,
so the weights of one cluster for the whole block are one contiguous vector load; the x rank of
each x tie group is stored the same way.

Exactness: weights, rank sums and centred ranks are integers or half-integers, exact in float64
(the centred ranks kept per tie group are stored as float32 when every resample has at most 2^23
expanded rows, where float32 holds them exactly: half the memory for the kernel's random reads,
about 2x faster on 10,000-50,000 rows, the same floats; `_rank_dtype`);
products may be contracted into fused multiply-adds (the only fast-math flag used), which can
change rho by ~1e-16 at most. rho's division is done afterwards in numpy, where a zero variance
gives NaN.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, register_model

from .ranks import derived, tie_groups

LANES = 16  # resamples per pass: 2 AVX-512 registers per running sum (8 and 32 were slower here)

_FLAGS = ("contract",)


class F64Vector(types.Type):
    """numba type of an LLVM ``<n x double>`` value (kept in vector registers)."""

    def __init__(self, n: int) -> None:
        self.n = n
        super().__init__(name=f"f64x{n}")


@register_model(F64Vector)
class _F64VectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type) -> None:  # noqa: ANN001
        super().__init__(dmm, fe_type, ir.VectorType(ir.DoubleType(), fe_type.n))


_VEC = F64Vector(LANES)
_LLVM_VEC = ir.VectorType(ir.DoubleType(), LANES)


def _vector_pointer(context, builder, array_type, array, offset):  # noqa: ANN001, ANN202
    element = ir.FloatType() if array_type.dtype == types.float32 else ir.DoubleType()
    data = context.make_array(array_type)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [offset]), ir.VectorType(element, LANES).as_pointer())


@intrinsic
def _vload(typingctx, array, offset):  # noqa: ANN001, ANN202
    """array[offset : offset + LANES] (float64 or float32, C-contiguous 1-D) as one float64 vector."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        v = builder.load(_vector_pointer(context, builder, sig.args[0], args[0], args[1]), align=4)
        return builder.fpext(v, _LLVM_VEC) if sig.args[0].dtype == types.float32 else v
    return _VEC(array, offset), codegen


@intrinsic
def _vstore(typingctx, array, offset, vec):  # noqa: ANN001, ANN202
    """array[offset : offset + LANES] = vec (rounded to float32 for a float32 array)."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        v = args[2]
        if sig.args[0].dtype == types.float32:
            v = builder.fptrunc(v, ir.VectorType(ir.FloatType(), LANES))
        builder.store(v, _vector_pointer(context, builder, sig.args[0], args[0], args[1]), align=4)
        return context.get_dummy_value()
    return types.void(array, offset, vec), codegen


@intrinsic
def _vsplat(typingctx, x):  # noqa: ANN001, ANN202
    """A vector with every lane equal to the scalar x."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        x = context.cast(builder, args[0], sig.args[0], types.float64)
        undef = ir.Constant(_LLVM_VEC, ir.Undefined)
        v = builder.insert_element(undef, x, ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(v, undef, ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))
    return _VEC(x), codegen


def _binary(op: str):  # noqa: ANN202
    @intrinsic
    def vector_op(typingctx, a, b):  # noqa: ANN001, ANN202
        def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
            return getattr(builder, op)(args[0], args[1], flags=_FLAGS)
        return _VEC(a, b), codegen
    return vector_op


_vadd, _vsub, _vmul = _binary("fadd"), _binary("fsub"), _binary("fmul")


@numba.njit(boundscheck=False, nogil=True, cache=True)
def _blocks_serial(Wf, blk0, blk1, size, ix, xend, iys, pys, ykind, ysingle, sxx, syy, sxy,  # noqa: ANN001, ANN202
                   a, store_j, gather_j, pys2, s12, a2):
    """Rank sums for resample blocks blk0 .. blk1 - 1 (see `rank_sums`); ``a`` is scratch space for
    the centred x rank of each x tie group (n_groups * LANES).

    y passes: ``ykind`` marks each row of a y order as inside a tie group of several rows (0), the
    last row of such a group (1), or a group of its own (2, the common case: 4 vector operations).
    S_yy comes from the tie identity sum_g s_g (r_g - m)^2 = (N^3 - sum_g s_g^3) / 12 (s_g: weight of
    tie group g, N the total), where the rows that are a group of their own add W_c^3 each,
    summed per cluster beforehand (``ysingle[j, c]``: such rows of y_j in cluster c); ``syy``
    receives N^3 - sum_g s_g^3 (divided by 12 afterwards).

    The extra pair: y ``store_j`` keeps its centred ranks per tie group in ``a2`` and y
    ``gather_j`` (a later one) sums them with its own ranks into ``s12`` (``pys2``: the store_j tie
    group of each row in gather_j order); -1: no pair."""
    n_y = iys.shape[0]
    n = iys.shape[1]
    K = size.shape[0]
    Bp = sxx.shape[0]
    half = _vsplat(0.5)
    zero = _vsplat(0.0)
    for blk in range(blk0, blk1):
        base = blk * K * LANES
        bb = blk * LANES
        total = zero  # N = expanded rows of each resample; mean rank m = (N + 1) / 2
        for c in range(K):
            total = _vadd(total, _vmul(_vload(Wf, base + c * LANES), _vsplat(size[c])))
        start = _vsub(half, _vmul(_vadd(total, _vsplat(1.0)), half))  # 0.5 - m: centred rank = start + before + s / 2
        cube = _vmul(total, _vmul(total, total))
        before = start
        xx = zero
        s = zero
        g = 0
        for k in range(n):  # x sort order: centred rank of each x tie group, and S_xx
            s = _vadd(s, _vload(Wf, base + ix[k] * LANES))
            if xend[k]:
                r = _vadd(before, _vmul(s, half))
                before = _vadd(before, s)
                xx = _vadd(xx, _vmul(s, _vmul(r, r)))
                _vstore(a, g * LANES, r)
                s = zero
                g += 1
        _vstore(sxx, bb, xx)
        for j in range(n_y):  # each y sort order: S_yy and S_xy
            singles = zero  # sum over rows that are a tie group of their own of w^3
            for c in range(K):
                w = _vload(Wf, base + c * LANES)
                singles = _vadd(singles, _vmul(_vsplat(ysingle[j, c]), _vmul(w, _vmul(w, w))))
            before = start
            cubes = zero
            xy = zero
            s = zero
            t = zero
            pair = j == gather_j  # also the extra pair's S (ranks of y store_j, kept in a2)
            keep = j == store_j
            x2 = zero
            t2 = zero
            u2 = zero
            g = 0
            for k in range(n):
                w = _vload(Wf, base + iys[j, k] * LANES)
                u = _vmul(w, _vload(a, pys[j, k] * LANES))
                if pair:
                    u2 = _vmul(w, _vload(a2, pys2[k] * LANES))
                kind = ykind[j, k]
                if kind == 2:
                    r = _vadd(before, _vmul(w, half))
                    xy = _vadd(xy, _vmul(r, u))
                    if pair:
                        x2 = _vadd(x2, _vmul(r, u2))
                    before = _vadd(before, w)
                else:
                    s = _vadd(s, w)
                    t = _vadd(t, u)
                    if pair:
                        t2 = _vadd(t2, u2)
                    if kind != 1:
                        continue
                    r = _vadd(before, _vmul(s, half))
                    xy = _vadd(xy, _vmul(r, t))
                    if pair:
                        x2 = _vadd(x2, _vmul(r, t2))
                    before = _vadd(before, s)
                    cubes = _vadd(cubes, _vmul(s, _vmul(s, s)))
                    s = zero
                    t = zero
                    t2 = zero
                if keep:
                    _vstore(a2, g * LANES, r)
                g += 1
            if pair:
                _vstore(s12, bb, x2)
            _vstore(syy, j * Bp + bb, _vsub(_vsub(cube, singles), cubes))
            _vstore(sxy, j * Bp + bb, xy)


def _run_blocks(Wf, size, ix, xend, iys, pys, ykind, ysingle, sxx, syy, sxy, n_groups,  # noqa: ANN001, ANN202
                store_j, gather_j, pys2, s12, n_groups2):
    """`_blocks_serial` over all resample blocks, in chunks run by numba's thread count of threads (the
    kernel releases the GIL); four chunks per thread even out the threads' finishing times."""
    n_blocks = sxx.shape[0] // LANES
    n_threads = max(1, min(n_blocks, numba.get_num_threads()))
    bounds = np.linspace(0, n_blocks, min(n_blocks, 4 * n_threads) + 1).round().astype(int)
    ranks = _rank_dtype(Wf, size)

    def chunk(lo: int, hi: int) -> None:
        _blocks_serial(Wf, lo, hi, size, ix, xend, iys, pys, ykind, ysingle, sxx, syy, sxy,
                       np.empty(n_groups * LANES, ranks), store_j, gather_j, pys2, s12, np.empty(n_groups2 * LANES, ranks))

    if n_threads == 1:
        chunk(0, n_blocks)
        return
    pool = _thread_pool(n_threads)
    for f in [pool.submit(chunk, int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]:
        f.result()


def _rank_dtype(Wf: np.ndarray, size: np.ndarray) -> type:
    """float32 for the kept centred ranks (``a``, ``a2``) when every resample has at most 2^23 expanded
    rows N: a centred rank is a half-integer of size at most N / 2, so float32 (24-bit significand)
    holds it exactly and the sums are the same floats as with float64, from half the memory (the
    ranks are read in y order, i.e. at random, so they are the kernel's cache misses); else float64."""
    K = size.shape[0]
    totals = np.einsum("bkl,k->bl", Wf.reshape(-1, K, LANES), size) if K else np.zeros(1)
    return np.float32 if totals.max(initial=0.0) <= 2.0 ** 23 else np.float64


_POOL: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _thread_pool(n_threads: int) -> ThreadPoolExecutor:
    """One pool per (process, thread count), made on first use: a forked child makes its own (the
    parent's threads do not exist in the child)."""
    key = (os.getpid(), n_threads)
    if key not in _POOL:
        _POOL.clear()
        _POOL[key] = ThreadPoolExecutor(n_threads, thread_name_prefix="spearman_lanes")
    return _POOL[key]


def _sorted_ties(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort order of v and, along it, True on the last row of each tie group."""
    order, starts = tie_groups(v)
    end = np.zeros(len(v), np.bool_)
    end[starts[1:] - 1] = True
    return order, end


def _block_layout(W: np.ndarray) -> np.ndarray:
    """W (B x K) as the kernel reads it: ``Wf[(block * K + cluster) * LANES + lane]``, B padded up to a
    multiple of LANES with resamples of weight 0 (their sums are 0 and are cut off). Kept for a
    read-only W (the shared matrices of `bootstrap.resample_counts` are), since every group with the
    same cluster count uses the same one."""
    def make(W: np.ndarray) -> np.ndarray:
        B, K = W.shape
        n_blocks = -(-B // LANES)
        padded = np.zeros((n_blocks * LANES, K))
        padded[:B] = W
        return np.ascontiguousarray(padded.reshape(n_blocks, LANES, K).transpose(0, 2, 1)).ravel()
    return derived(_LAYOUTS, W, make)


_LAYOUTS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def rank_sums(W: np.ndarray, cluster: np.ndarray, x: np.ndarray, ys: list[np.ndarray],
              pair: tuple[int, int] | None = None) -> tuple[np.ndarray, ...]:
    """(S_xx (B,), S_yy (B, n_y), S_xy (B, n_y)): sums of products of the centred mid-ranks of x and
    each y on every expanded resample (row i repeated ``W[b, cluster[i]]`` times); Spearman's rho is
    S_xy / sqrt(S_xx S_yy). The x ranks are kept per x tie group, so ties in x shrink the working set.
    ``pair=(i, j)``, i < j, adds a fourth array, S_{y_i y_j} (B,), the same sum for y_i and y_j,
    computed in the pass of y_j. Compiled on first use and cached on disk by numba.
    """
    cluster = np.asarray(cluster, np.int64)
    ox, xend = _sorted_ties(np.asarray(x, float))
    xgroup = _group_of_row(ox, xend)
    sorted_ys = [_sorted_ties(np.asarray(y, float)) for y in ys]
    oys = np.vstack([o for o, _ in sorted_ys]) if ys else np.empty((0, len(ox)), np.int64)
    yend = np.vstack([e for _, e in sorted_ys]) if ys else np.empty((0, len(ox)), np.bool_)
    store_j, gather_j = pair if pair is not None else (-1, -1)
    if pair is not None and not 0 <= store_j < gather_j < len(ys):
        raise ValueError(f"pair must be (i, j) with 0 <= i < j < {len(ys)}, got {pair}")
    if pair is not None:
        pys2 = _group_of_row(*sorted_ys[store_j])[oys[gather_j]]
        n_groups2 = int(sorted_ys[store_j][1].sum())
    else:
        pys2, n_groups2 = np.zeros(0, np.int32), 0
    B, K = W.shape
    Wf = _block_layout(W)
    Bp = len(Wf) // K
    size = np.bincount(cluster, minlength=K).astype(np.float64)
    n_y = len(ys)
    sxx, syy, sxy, s12 = np.empty(Bp), np.empty(n_y * Bp), np.empty(n_y * Bp), np.empty(Bp)
    # each row of a y order: 0 inside a tie group of several rows, 1 its last row, 2 a group of its own
    ystart = np.ones_like(yend)
    ystart[:, 1:] = yend[:, :-1]
    ykind = np.where(ystart & yend, 2, yend.astype(np.int8)).astype(np.int8)
    iys = cluster[oys].astype(np.int32)
    ysingle = np.zeros((n_y, K))
    for j in range(n_y):
        ysingle[j] = np.bincount(iys[j][ykind[j] == 2], minlength=K)
    _run_blocks(Wf, size, cluster[ox].astype(np.int32), xend, iys, xgroup[oys], ykind, ysingle,
                sxx, syy, sxy, int(xend.sum()), store_j, gather_j, pys2, s12, n_groups2)
    out = (sxx[:B], syy.reshape(n_y, Bp).T[:B] / 12.0, sxy.reshape(n_y, Bp).T[:B])
    return out + (s12[:B],) if pair is not None else out


def _group_of_row(order: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Row -> its tie group (0, 1, ... along the sort order), from `_sorted_ties`."""
    group = np.empty(len(order), np.int32)
    group[order] = np.cumsum(np.r_[False, end[:-1]])
    return group

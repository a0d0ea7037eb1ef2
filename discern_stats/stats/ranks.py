"""Small shared helpers of the resampling kernels: bounded memo caches keyed by a read-only count
matrix, and the stable sort with tie groups that every rank statistic starts from."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

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


def tie_groups(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort order of v (int32) and the start of each tie group in that order (with n appended)."""
    order = np.argsort(v, kind="mergesort")
    vs = v[order]
    starts = np.flatnonzero(np.r_[True, vs[1:] != vs[:-1]])
    return order.astype(np.int32), np.r_[starts, len(v)].astype(np.int64)

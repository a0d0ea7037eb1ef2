"""Metric tables computed once per data hash and reused, as saved fits are.

A table is stored as parquet under ``<folder>/<key>.parquet``. Its key is the SHA-256 of
everything the numbers depend on:
- the name of the computation;
- the data hash of the trial table (`store.tables.data_hash`: row order does not matter);
- the resamples and the seed;
- the source text of the package that computes it (``stats``; ``bayes`` for the summaries of saved
  fits, whose identity is their manifest), so that a changed statistic is never served from an
  old cache.

A different database, other data in the same database, other settings or other code give
another key, so a re-render for another database can never show the previous one's numbers.
Writes are atomic: a temporary file is written, then renamed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import pandas as pd


@functools.lru_cache(maxsize=4)
def _code_hash(package: str = "stats") -> str:
    """SHA-256 of a subpackage's source files (``stats``, ``bayes``)."""
    here = Path(__file__).resolve().parents[1] / package
    h = hashlib.sha256()
    for p in sorted(here.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def cache_key(name: str, trials: pd.DataFrame, *, code: str = "stats", **settings) -> str:
    from ..store.tables import data_hash
    payload = json.dumps({"name": name, "data": data_hash(trials), "settings": settings, "code": _code_hash(code)},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def cached_table(folder: Path | None, name: str, trials: pd.DataFrame, compute: Callable[[], pd.DataFrame],
                 *, code: str = "stats", **settings) -> pd.DataFrame:
    """``compute()``, or the stored result of the same computation on the same data (``code``: the
    subpackage whose source the result depends on)."""
    if folder is None:
        return compute()
    try:
        key = cache_key(name, trials, code=code, **settings)
    except (TypeError, ValueError):  # a column pandas cannot hash: compute, do not cache
        return compute()
    path = Path(folder) / f"{name}-{key}.parquet"
    if path.is_file():
        try:
            return pd.read_parquet(path)
        except Exception:  # noqa: BLE001 - a damaged cache file is recomputed, never trusted
            pass
    table = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        table.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a read-only folder: the report still renders, uncached
        pass
    return table

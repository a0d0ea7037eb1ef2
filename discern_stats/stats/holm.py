"""Declared test families with Holm's correction (statsmodels ``multipletests(method="holm")``).

The family is declared before results are seen: a list of test keys. ``holm`` matches the
results to the declared keys, refuses a result table that lacks a declared test (a silent
shrink of the family would make the correction too lenient) and reports the family size.
Note statsmodels' default method is Holm-Sidak ('hs'); we always pass ``method="holm"``.
"""

from __future__ import annotations

from typing import Sequence

import warnings

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

from ..core.errors import InputError


class ResolutionWarning(UserWarning):
    """Too few bootstrap resamples for the p-values a declared family needs."""


def holm(results: pd.DataFrame, family: Sequence[tuple], key_cols: Sequence[str], *, alpha: float = 0.05,
         p_col: str = "p_value") -> pd.DataFrame:
    """Add ``p_holm``, ``reject`` and ``family_size`` for the declared ``family`` of keys."""
    fam = [tuple(k) for k in family]
    if len(set(fam)) != len(fam):
        raise InputError("the declared family has duplicate tests")
    res = results.copy()
    res["_key"] = list(zip(*[res[c] for c in key_cols]))
    missing = [k for k in fam if k not in set(res["_key"])]
    if missing:
        raise InputError(f"{len(missing)} declared test(s) have no result, e.g. {missing[0]}; the family must be "
                         f"complete")
    sel = res[res["_key"].isin(fam)].copy()
    p = sel[p_col].to_numpy(float)
    if np.isnan(p).any():
        raise InputError("a declared test has no p-value (NaN)")
    if "n_resamples" in sel.columns and len(sel):
        b = int(sel["n_resamples"].min())
        if 2 / (b + 1) > alpha / len(fam):
            warnings.warn(f"{b:,} bootstrap resamples cannot resolve Holm's smallest threshold: the p-value floor "
                          f"2/(B+1) = {2 / (b + 1):.5f} exceeds alpha / family size = {alpha / len(fam):.5f}; use at "
                          f"least {int(np.ceil(2 * len(fam) / alpha))} resamples", ResolutionWarning, stacklevel=2)
    reject, p_adj, _, _ = multipletests(p, alpha=alpha, method="holm")
    sel["p_holm"] = p_adj
    sel["reject"] = reject
    sel["family_size"] = len(fam)
    sel["alpha"] = alpha
    return sel.drop(columns="_key").reset_index(drop=True)

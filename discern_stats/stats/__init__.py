"""Metrics and frequentist statistics (Design A and Design B), bootstrap and Holm families."""

from __future__ import annotations

import pandas as pd

from .bootstrap import DEFAULT_RESAMPLES, resample_counts, summarise
from .spearman import weighted_spearman
from .cue import cue_metrics, holm_contrasts, intervention_contrasts, intervention_family
from .holm import holm
from .cue_glm import cue_glm
from .l2d import l2d_metrics, propensity, subgroup_gaps


def metrics(design: str, df: pd.DataFrame, **kw) -> pd.DataFrame:
    """The metric table of ``design`` ('l2d' or 'cue') for an interchange DataFrame."""
    from ..store.tables import check_design
    if check_design(design) == "l2d":
        return l2d_metrics(df, **kw)
    return cue_metrics(df, **kw)


__all__ = ["metrics", "holm_contrasts", "cue_glm", "l2d_metrics", "cue_metrics", "intervention_contrasts", "intervention_family", "holm",
           "propensity", "subgroup_gaps", "resample_counts", "summarise", "weighted_spearman", "DEFAULT_RESAMPLES"]

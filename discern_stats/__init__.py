"""discern_stats: LLM trials -> trial database -> statistics on how models weigh evidence.

Public API (see README): `TrialDB`, the interchange import/export functions, stimulus
designs, collection, metrics, bootstrap, Holm families and the Bayesian model classes.
"""

from __future__ import annotations

from .db import DEFAULT_DB_URL
from .errors import DatabaseURLError, DiscernError, InputError, SpecError, StaleFitError
from .interchange import export_trials, import_items, import_sources, import_trials, read_table
from .trialdb import TrialDB
from .bayes import CueWeightModel, DiscernmentModel, InterventionContrastModel, fit
from .collect.runner import collect
from .designs import design_cue, design_l2d
from .stats import holm, intervention_contrasts, intervention_family, metrics
from .stats.bootstrap import resample_counts as bootstrap_counts

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_DB_URL", "TrialDB", "DiscernError", "InputError", "DatabaseURLError", "SpecError",
    "StaleFitError", "metrics", "holm", "intervention_contrasts", "intervention_family",
    "bootstrap_counts", "fit", "CueWeightModel", "DiscernmentModel", "InterventionContrastModel", "collect",
    "design_cue", "design_l2d", "import_items", "import_sources", "import_trials", "export_trials", "read_table",
]

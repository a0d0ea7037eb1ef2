"""discern_stats: LLM trials -> trial database -> statistics on how models weigh evidence.

Public API (see README): `TrialDB`, the interchange import/export functions, stimulus
designs, collection, metrics, bootstrap, Holm families and the Bayesian model classes.

The names are imported on first use (PEP 562 module ``__getattr__``), so that a process that
needs one part (a collector worker, the CLI's ``--help``) does not pay for importing the
statistics and modelling stacks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core.version import __version__  # noqa: F401  (the package version)

_EXPORTS = {
    "DEFAULT_DB_URL": ".store.db", "TrialDB": ".store.trialdb",
    "DiscernError": ".core.errors", "InputError": ".core.errors", "DatabaseURLError": ".core.errors",
    "SpecError": ".core.errors", "StaleFitError": ".core.errors",
    "metrics": ".stats", "holm": ".stats", "intervention_contrasts": ".stats", "intervention_family": ".stats",
    "resample_counts": ".stats",
    "fit": ".bayes", "CueWeightModel": ".bayes", "DiscernmentModel": ".bayes", "InterventionContrastModel": ".bayes",
    "collect": ".collect.runner",
    "design_cue": ".designs", "design_l2d": ".designs",
    "import_items": ".store.importing", "import_sources": ".store.importing", "import_trials": ".store.importing",
    "export_trials": ".store.exporting", "read_table": ".store.tables",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'discern_stats' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module, __name__), attr or name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .bayes import CueWeightModel, DiscernmentModel, InterventionContrastModel, fit
    from .collect.runner import collect
    from .core.errors import DatabaseURLError, DiscernError, InputError, SpecError, StaleFitError
    from .designs import design_cue, design_l2d
    from .stats import holm, intervention_contrasts, intervention_family, metrics, resample_counts
    from .store.db import DEFAULT_DB_URL
    from .store.exporting import export_trials
    from .store.importing import import_items, import_sources, import_trials
    from .store.tables import read_table
    from .store.trialdb import TrialDB

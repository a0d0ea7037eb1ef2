"""What a report page reads: the trial database and the saved fits (never refitted).

Parameters (environment variables, set by `discern-stats report` / `demo` or by the user
before `quarto render`): ``DISCERN_DB`` (SQLAlchemy URL, default the demo's
``sqlite:///demo_out/trials.db``), ``DISCERN_MODELS`` (folder of saved fits, default
``models``) and ``DISCERN_RESAMPLES`` (bootstrap resamples for the tables, default 5000).

Metric tables and contrasts are computed once per data hash and reused (`report.cache`), in
``DISCERN_CACHE`` (default ``<DISCERN_MODELS>/metric_tables``; ``DISCERN_CACHE=off`` disables):
a re-render of unchanged data skips every bootstrap, and a re-render for another database
computes its own.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import InputError, StaleFitError

DEFAULT_REPORT_DB = "sqlite:///demo_out/trials.db"


@dataclass
class ReportContext:
    db_url: str
    models_dir: Path
    resamples: int = 5000
    seed: int = 0
    cache_dir: Path | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def db(self):
        from ..store.trialdb import TrialDB
        return TrialDB(self.db_url, must_exist=True)  # a page never creates a database

    def trials(self, design: str) -> pd.DataFrame:
        key = f"trials:{design}"
        if key not in self._cache:
            self._cache[key] = self.db.trials(design)
        return self._cache[key]

    def has(self, design: str) -> bool:
        """Whether the database holds any trial of ``design`` ('l2d' or 'cue')."""
        return len(self.trials(design)) > 0

    def no_trials_note(self, design: str) -> str:
        """'no Design B trials in sqlite:///x.db': the one line a page shows for a design it lacks."""
        return f"no Design {'A' if design == 'l2d' else 'B'} trials in {self.db_url}"

    def metrics(self, design: str) -> pd.DataFrame:
        key = f"metrics:{design}"
        if key not in self._cache:
            from .cache import cached_table
            df = self.trials(design)

            def compute() -> pd.DataFrame:
                from ..stats import metrics  # imported only on a cache miss
                return metrics(design, df, n_resamples=self.resamples, seed=self.seed)
            self._cache[key] = cached_table(
                self.cache_dir, f"metrics_{design}", df, compute,
                resamples=self.resamples, seed=self.seed) if len(df) else pd.DataFrame()
        return self._cache[key]

    def subgroup_gaps(self, tag: str) -> pd.DataFrame:
        """Design A subgroup gaps for an item tag with two levels (empty when the items lack it)."""
        key = f"gaps:{tag}"
        if key not in self._cache:
            from .cache import cached_table
            df = self.trials("l2d")

            def compute() -> pd.DataFrame:
                from ..stats.l2d import subgroup_gaps  # imported only on a cache miss
                return subgroup_gaps(df, tag, n_resamples=self.resamples, seed=self.seed)
            if len(df) == 0 or tag not in df.columns or df[tag].dropna().nunique() != 2:
                self._cache[key] = pd.DataFrame()
            else:
                self._cache[key] = cached_table(
                    self.cache_dir, f"gaps_{tag}", df, compute,
                    resamples=self.resamples, seed=self.seed)
        return self._cache[key]

    def contrasts(self) -> pd.DataFrame:
        if "contrasts" not in self._cache:
            from .cache import cached_table
            df = self.trials("cue")

            def compute() -> pd.DataFrame:
                from ..stats import holm_contrasts  # imported only on a cache miss
                return holm_contrasts(df, n_resamples=self.resamples, seed=self.seed)
            try:
                self._cache["contrasts"] = cached_table(
                    self.cache_dir, "contrasts", df, compute,
                    resamples=self.resamples, seed=self.seed)
            except InputError as exc:  # the data has no complete contrast (e.g. no C1-C4 arms): say why
                self._cache["contrasts"] = pd.DataFrame()
                self._cache["contrasts_note"] = str(exc)
        return self._cache["contrasts"]

    def contrasts_note(self) -> str:
        """Why `contrasts` is empty (the data holds no complete pre-specified contrast)."""
        self.contrasts()
        return self._cache.get("contrasts_note", "no intervention arms collected")

    def model(self, kind: str):
        """The saved fit of ``kind`` ('cue', 'discernment', 'intervention') or None when
        there is none or it is stale (reports never refit)."""
        key = f"model:{kind}"
        if key not in self._cache:
            from ..bayes import DESIGN_OF, MODELS
            cls = MODELS[kind]
            if not self.has(DESIGN_OF[kind]):  # say so, not what the model finds missing in no data
                self._cache[key] = None
                self._cache[f"model_error:{kind}"] = self.no_trials_note(DESIGN_OF[kind])
                return None
            try:
                self._cache[key] = cls.load(self.trials(DESIGN_OF[kind]), self.models_dir)
            except (FileNotFoundError, StaleFitError, InputError) as exc:
                self._cache[key] = None
                self._cache[f"model_error:{kind}"] = str(exc)
        return self._cache[key]

    def summary(self, kind: str) -> pd.DataFrame | None:
        """The saved fit's summary table (None without a fit), computed once per fit: cached by the
        fit's saved manifest (model, config, data hash, sampler settings, time saved) and the bayes
        source code."""
        key = f"summary:{kind}"
        if key not in self._cache:
            m = self.model(kind)
            if m is None:
                self._cache[key] = None
            else:
                from .cache import cached_table
                saved = self.models_dir / f"{m.name}.json"  # the manifest as saved with the fit
                ident = pd.DataFrame({"manifest": [saved.read_text() if saved.is_file() else repr(m.manifest())]})
                self._cache[key] = cached_table(self.cache_dir, f"summary_{kind}", ident, m.summary, code="bayes")
        return self._cache[key]

    def fit_table(self, kind: str, name: str, compute, model=None, stem: str | None = None) -> pd.DataFrame | None:
        """``compute(model)`` for the saved fit of ``kind`` (or the given ``model``, saved as ``stem``),
        computed once per fit: cached by its saved manifest and the bayes source code (None without
        a fit)."""
        m = self.model(kind) if model is None else model
        if m is None:
            return None
        stem = stem or m.name
        key = f"fit_table:{name}:{stem}"
        if key not in self._cache:
            from .cache import cached_table
            saved = self.models_dir / f"{stem}.json"
            ident = pd.DataFrame({"manifest": [saved.read_text() if saved.is_file() else repr(m.manifest())]})
            self._cache[key] = cached_table(self.cache_dir, f"{name}_{stem}", ident, lambda: compute(m), code="bayes")
        return self._cache[key]

    def discernment_sensitivity(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The saved fits of the discernment model under the other scale priors (label -> model) and
        why each missing one is missing (`bayes.load_prior_sensitivity`; never fits)."""
        if "sensitivity" not in self._cache:
            if not self.has("l2d"):
                self._cache["sensitivity"] = ({}, {})
            else:
                from ..bayes import load_prior_sensitivity
                self._cache["sensitivity"] = load_prior_sensitivity(self.trials("l2d"), self.models_dir)
        return self._cache["sensitivity"]

    def model_error(self, kind: str) -> str | None:
        return self._cache.get(f"model_error:{kind}")

    def llm_table(self) -> pd.DataFrame:
        from ..store.db import LLM
        return self.db.table(LLM)


_RENDER_CONTEXTS: dict[tuple, ReportContext] = {}


def context(db_url: str | None = None, models_dir: str | Path | None = None, resamples: int | None = None,
            cache_dir: str | Path | None = None) -> ReportContext:
    """The pages' context from the parameters (environment). Within one render by the fallback
    renderer (``DISCERN_RENDER_ID`` set, all pages in one kernel) the pages share one context, so
    trials and fits are loaded once per render, not once per page."""
    models = Path(models_dir or os.environ.get("DISCERN_MODELS", "models"))
    cache = cache_dir or os.environ.get("DISCERN_CACHE") or models / "metric_tables"
    args = (db_url or os.environ.get("DISCERN_DB", DEFAULT_REPORT_DB), models,
            int(resamples if resamples is not None else os.environ.get("DISCERN_RESAMPLES", 5000)),
            None if str(cache) == "off" else Path(cache))
    render_id = os.environ.get("DISCERN_RENDER_ID")
    if render_id is None:
        return ReportContext(*args[:3], cache_dir=args[3])
    key = (render_id, *args)
    if key not in _RENDER_CONTEXTS:
        _RENDER_CONTEXTS.clear()  # one render at a time per kernel
        _RENDER_CONTEXTS[key] = ReportContext(*args[:3], cache_dir=args[3])
    return _RENDER_CONTEXTS[key]

"""ModelBuilder-like base class: construct from data, ``fit``, ``summary``, ``save``/``load``.

A saved fit is two files in the models folder: ``<name>.nc`` (the ArviZ DataTree, netCDF via
h5netcdf) and ``<name>.json`` (the manifest: model class, config, data hash, sampler
settings, package versions, convergence diagnostics). ``load`` refuses a fit whose data hash
differs from the data it is given (a report never shows a stale fit) unless
``allow_stale=True``, and a fit saved by another package version or model code (`model_code`);
``fit_or_load`` never refits unchanged data under unchanged code. Besides the posterior the file
holds observed_data, constant_data, log_likelihood, posterior_predictive and sample_stats
(`complete_idata`, `predictive`).

Every fit is checked: max R-hat <= 1.01, min bulk and tail ESS >= 400, zero divergences over the
reported parameters, and max R-hat <= 1.05, min ESS >= 100 over the nuisance parameters
(intercepts, scales: ``nuisance_vars``; a looser gate, since nothing is reported from them, but a
chain that has not mixed there has not mixed). A failed check emits a `ConvergenceWarning` and
sets ``diagnostics["ok"] = False``; the summary (``converged``, ``gate_problems``) and the
reports show it.
"""

from __future__ import annotations

import hashlib
import json
import time
from functools import lru_cache
import warnings
from importlib import metadata
from pathlib import Path
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..core.errors import InputError, StaleFitError
from ..store.tables import data_hash

RHAT_MAX = 1.01
ESS_MIN = 400
NUISANCE_RHAT_MAX = 1.05
NUISANCE_ESS_MIN = 100
HDI_PROB = 0.94
SAMPLERS = ("nutpie", "pymc", "numpyro", "blackjax", "gibbs")
NUTS_TUNE = 1000  # default warm-up of the NUTS samplers
GIBBS_TUNE = 200  # default burn-in of the Gibbs sampler (nothing to adapt)


class ConvergenceWarning(UserWarning):
    """A fit failed R-hat, ESS or divergence checks."""


def versions() -> dict[str, str]:
    out = {}
    for p in ("discern_stats", "pymc", "pytensor", "arviz", "nutpie", "numpy"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "absent"
    return out


@lru_cache(maxsize=1)
def model_code() -> str:
    """SHA-256 (first 16 hex digits) of the model code (this package's ``bayes`` modules): a saved fit
    is reused only by the code that made it, beside the package version (issue 25.6)."""
    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def check_convergence(idata: Any, var_names: list[str], rhat_max: float = RHAT_MAX,
                      ess_min: float = ESS_MIN) -> dict[str, Any]:
    """R-hat / bulk ESS / tail ESS over ``var_names`` and divergences, against ``rhat_max`` and ``ess_min``."""
    import arviz as az
    present = [v for v in var_names if v in idata["posterior"].data_vars]
    s = az.summary(idata, var_names=present, kind="diagnostics", round_to="none")
    div = int(np.asarray(idata["sample_stats"]["diverging"]).sum()) if "sample_stats" in idata.children else 0
    diag = {"max_rhat": float(s["r_hat"].max()), "min_ess_bulk": float(s["ess_bulk"].min()),
            "min_ess_tail": float(s["ess_tail"].min()), "divergences": div,
            "thresholds": {"rhat_max": rhat_max, "ess_min": ess_min, "divergences": 0}}
    problems = []
    if not diag["max_rhat"] <= rhat_max:
        problems.append(f"max R-hat {diag['max_rhat']:.3f} > {rhat_max}")
    if not diag["min_ess_bulk"] >= ess_min:
        problems.append(f"min bulk ESS {diag['min_ess_bulk']:.0f} < {ess_min}")
    if not diag["min_ess_tail"] >= ess_min:
        problems.append(f"min tail ESS {diag['min_ess_tail']:.0f} < {ess_min}")
    if div:
        problems.append(f"{div} divergent transitions")
    diag["ok"] = not problems
    diag["problems"] = problems
    return diag


def check_sampling_counts(*, draws: Any, tune: Any, chains: Any) -> None:
    """The model's edge: draws and chains whole numbers >= 1, tune a whole number >= 0 (or None, the
    sampler's default); anything else is one `InputError` line naming the setting, before any sampling."""
    for name, value, least in (("draws", draws, 1), ("tune", tune, 0), ("chains", chains, 1)):
        if name == "tune" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise InputError(f"{name} must be a whole number >= {least}, got {value!r}")


class BayesModel:
    """Base class. Subclasses set ``name``, ``default_config`` and implement ``prepare``,
    ``build`` and ``summary_table``."""

    name: ClassVar[str] = "model"
    default_config: ClassVar[dict[str, Any]] = {}
    check_vars: ClassVar[list[str]] = []  # the convergence gate: every reported parameter
    nuisance_vars: ClassVar[list[str]] = []  # gated at the looser level (diagnostics["nuisance"])
    default_fit: ClassVar[dict[str, Any]] = {}  # NUTS options (pm.sample keywords)
    default_sampler: ClassVar[str] = "nutpie"
    # draws needed relative to the other models for the same convergence gate (the demo scales its draws)
    draws_factor: ClassVar[int] = 1
    own_samplers: ClassVar[tuple[str, ...]] = ()  # samplers the subclass implements in `sample_own`
    gibbs_options: ClassVar[frozenset[str]] = frozenset()  # keyword options the Gibbs sampler takes
    keep_group_effects: ClassVar[bool] = True  # keep the group effects' draws (False: their scales only)
    acceptance_note: ClassVar[str] = "minimum over chains of the Metropolis-Hastings acceptance rates"

    def __init__(self, data: pd.DataFrame, **config: Any):
        unknown = set(config) - set(self.default_config)
        if unknown:
            raise InputError(f"{type(self).__name__}: unknown option(s) {sorted(unknown)}; known: "
                            f"{sorted(self.default_config)}")
        self.config = {**self.default_config, **config}
        self.raw = data
        self.data = self.prepare(data)
        self.idata: Any = None
        self.diagnostics: dict[str, Any] = {}
        self.sampler: dict[str, Any] = {}
        self.reused = False
        self.reuse_note = ""

    # -- to implement
    def prepare(self, df: pd.DataFrame) -> pd.DataFrame:
        raise NotImplementedError

    def specs(self) -> dict[str, Any]:
        """The model as one `spec.HierarchicalGLM` per part (a one-part model: ``{"": spec}``); the
        PyMC build and the Gibbs samplers are both derived from it."""
        raise NotImplementedError

    def build(self):  # -> pm.Model
        """The PyMC model: every part's spec in one ``pm.Model`` (`HierarchicalGLM.to_pymc`)."""
        import pymc as pm
        specs = self.specs()
        coords = {k: v for s in specs.values() for k, v in s.coords.items()}
        with pm.Model(coords=coords) as m:
            for s in specs.values():
                s.to_pymc()
        return m

    def summary_table(self) -> pd.DataFrame:
        raise NotImplementedError

    # -- common
    @property
    def data_hash(self) -> str:
        return data_hash(self.data)

    def fit(self, *, draws: int = 1000, tune: int | None = None, chains: int = 4, sampler: str | None = None,
            random_seed: int = 0, progressbar: bool = False, **kwargs: Any) -> Any:
        """Sample the posterior; check convergence (warns loudly on failure).

        ``sampler``: the model's ``default_sampler`` when None; ``nutpie``, ``pymc``,
        ``numpyro`` or ``blackjax`` sample the PyMC model of `build` by NUTS (``kwargs`` go to
        ``pm.sample``; ``tune`` defaults to 1000); ``gibbs`` is the cue-weight models' own
        sampler (`discern_stats.bayes.logit_gibbs`; ``tune`` is burn-in, default 200)."""
        check_sampling_counts(draws=draws, tune=tune, chains=chains)
        sampler = sampler or self.default_sampler
        if sampler not in SAMPLERS:
            raise InputError(f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
        t0 = time.perf_counter()
        if sampler in self.own_samplers:
            tune = GIBBS_TUNE if tune is None else tune
            self.idata, stats = self.sample_own(sampler, draws=draws, tune=tune, chains=chains,
                                                random_seed=random_seed, progressbar=progressbar, **kwargs)
        elif sampler == "gibbs":
            raise InputError(f"{type(self).__name__} has no Gibbs sampler; use nutpie, pymc, numpyro or blackjax")
        else:
            import pymc as pm
            tune = NUTS_TUNE if tune is None else tune
            kwargs = {**self.default_fit, **kwargs}
            with self.build():
                self.idata = pm.sample(draws=draws, tune=tune, chains=chains, nuts_sampler=sampler,
                                       random_seed=random_seed, progressbar=progressbar, **kwargs)
            stats = {}
        self.sampler = {"sampler": sampler, "draws": draws, "tune": tune, "chains": chains,
                        "random_seed": random_seed, "wall_s": time.perf_counter() - t0, **kwargs, **stats}
        t1 = time.perf_counter()
        self.complete_idata(random_seed)
        self.sampler["predictive_s"] = round(time.perf_counter() - t1, 3)
        self.diagnostics = check_convergence(self.idata, self.check_vars)
        if self.nuisance_vars:
            nuis = check_convergence(self.idata, self.nuisance_vars, NUISANCE_RHAT_MAX, NUISANCE_ESS_MIN)
            nuis["problems"] = [p for p in nuis["problems"] if "divergent" not in p]  # counted once, above
            self.diagnostics["nuisance"] = {"vars": list(self.nuisance_vars), "problems": nuis["problems"],
                                            "thresholds": nuis["thresholds"],
                                            **{k: nuis[k] for k in ("max_rhat", "min_ess_bulk", "min_ess_tail")}}
            if nuis["problems"]:
                self.diagnostics["problems"] += [f"nuisance parameters: {p}" for p in nuis["problems"]]
                self.diagnostics["ok"] = False
        if not self.diagnostics["ok"]:
            warnings.warn(f"{self.name}: convergence checks FAILED: {'; '.join(self.diagnostics['problems'])}",
                          ConvergenceWarning, stacklevel=2)
        return self.idata

    joint_loglik: ClassVar[str | None] = None  # with several parts: the name of their joint log-likelihood

    def constant_data(self) -> dict[str, Any]:
        """Model-level constants for the saved fit's constant_data group (e.g. predictor scales)."""
        return {}

    def observed_data(self) -> dict[str, Any]:
        """Model-level observations for the observed_data group beside each part's outcome."""
        return {}

    def complete_idata(self, seed: int = 0) -> None:
        """Add what a bambi / brms / ArviZ user expects beside the posterior (`predictive`):
        observed_data, constant_data, log_likelihood (one value per group-effect cluster, so
        ``az.loo(idata)`` works), posterior_predictive (``az.plot_ppc_dist``), and for the Gibbs
        samplers a sample_stats group (``diverging``: always False, a Gibbs sweep has no Hamiltonian
        trajectory to diverge; NUTS fits keep PyMC's)."""
        import xarray as xr
        from .predictive import groups_for
        try:
            specs = self.specs()
        except NotImplementedError:  # a model without a spec (a test double) has nothing to add
            return
        post = self.idata["posterior"].to_dataset()
        groups = groups_for(specs, post, seed=seed, joint=self.joint_loglik, conditional=self.keep_group_effects)
        groups["constant_data"] = groups["constant_data"].assign(self.constant_data())
        groups["observed_data"] = groups["observed_data"].assign(self.observed_data())
        if "sample_stats" not in self.idata.children:
            groups["sample_stats"] = xr.Dataset({"diverging": xr.DataArray(
                np.zeros((post.sizes["chain"], post.sizes["draw"]), bool), dims=["chain", "draw"],
                coords={"chain": post["chain"], "draw": post["draw"]})})
        for name, ds in groups.items():
            self.idata[name] = ds

    def gibbs_settings(self, spec: Any, options: dict[str, Any]) -> dict[str, Any]:
        """The Gibbs sampler's options for one part (``options``: the caller's); a model may add defaults."""
        return options

    def sample_own(self, sampler: str, *, draws: int, tune: int, chains: int, random_seed: int,
                   progressbar: bool = False, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """(posterior as an ArviZ DataTree, sampler statistics for the manifest): each part of `specs`
        by its family's Gibbs sampler (part i with seed ``random_seed + i``); the draws carry the
        PyMC model's names."""
        import arviz as az
        unknown = set(kwargs) - self.gibbs_options
        if unknown:
            raise TypeError(f"the gibbs sampler takes no option(s) {sorted(unknown)} (NUTS options such as "
                            f"target_accept apply to nutpie, pymc, numpyro and blackjax)")
        post, dims, coords, acc, used = {}, {}, {}, {}, {}
        for i, (part, spec) in enumerate(self.specs().items()):
            options = self.gibbs_settings(spec, dict(kwargs))
            label = f"{self.name}: {part} ({len(spec.A):,} rows)" if part else f"{self.name}: Gibbs sampling"
            with gibbs_progress(progressbar, label) as step:
                p, dd, a = spec.sample(draws=draws, tune=tune, chains=chains, random_seed=random_seed + i,
                                       keep_group_effects=self.keep_group_effects, progress=step, **options)
            post |= p
            dims |= dd
            coords |= {k: v for k, v in spec.coords.items() if any(k in x for x in dd.values())}
            acc |= {(f"{part}_{k}" if part else k): v for k, v in a.items()}
            used |= options
        idata = az.from_dict({"posterior": post}, coords=coords, dims=dims)
        return idata, {"acceptance": acc, **used, "acceptance_note": self.acceptance_note}

    def summary(self) -> pd.DataFrame:
        """The model's headline table, with a ``converged`` column from the checks."""
        if self.idata is None:
            raise RuntimeError(f"{self.name}: fit() or load() first")
        t = self.summary_table()
        t["converged"] = bool(self.diagnostics.get("ok", False))
        t["gate_problems"] = "; ".join(self.diagnostics.get("problems", []))
        return t

    def manifest(self) -> dict[str, Any]:
        return {"model": type(self).__name__, "name": self.name, "config": self.config, "data_hash": self.data_hash,
                "n_rows": int(len(self.data)), "sampler": self.sampler, "diagnostics": self.diagnostics,
                "versions": versions(), "model_code": model_code(),
                "saved_at": pd.Timestamp.now(tz="UTC").isoformat()}

    def save(self, folder: str | Path = "models", name: str | None = None) -> Path:
        if self.idata is None:
            raise RuntimeError(f"{self.name}: nothing to save; fit() first")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        stem = name or self.name
        nc = folder / f"{stem}.nc"
        self.idata.to_netcdf(nc)
        (folder / f"{stem}.json").write_text(json.dumps(self.manifest(), indent=2, default=str))
        return nc

    @classmethod
    def load(cls, data: pd.DataFrame, folder: str | Path = "models", name: str | None = None, *,
             allow_stale: bool = False, **config: Any) -> "BayesModel":
        """Rebuild from ``data`` and attach the saved posterior; refuse a data-hash mismatch."""
        folder = Path(folder)
        stem = name or cls.name
        man_path = folder / f"{stem}.json"
        if not man_path.exists():
            raise FileNotFoundError(f"no saved fit {man_path}")
        man = json.loads(man_path.read_text())
        if man["model"] != cls.__name__:
            raise StaleFitError(f"{man_path} holds a {man['model']}, not a {cls.__name__}")
        obj = cls(data, **{**man["config"], **config})
        if obj.config != man["config"]:
            raise StaleFitError(f"{man_path}: the model spec differs from the saved one ({man['config']})")
        if obj.data_hash != man["data_hash"] and not allow_stale:
            raise StaleFitError(f"{man_path}: the data changed since this fit (hash {man['data_hash'][:12]} vs "
                                f"{obj.data_hash[:12]}); refit, or load with allow_stale=True")
        made_by = (man.get("versions", {}).get("discern_stats"), man.get("model_code"))
        here = (versions()["discern_stats"], model_code())
        if made_by != here and not allow_stale:
            raise StaleFitError(f"{man_path}: saved by discern_stats {made_by[0]} (model code {made_by[1]}), this is "
                                f"{here[0]} (model code {here[1]}); refit, or load with allow_stale=True")
        import arviz as az
        obj.idata = az.from_netcdf(folder / f"{stem}.nc")
        obj.diagnostics, obj.sampler = man["diagnostics"], man["sampler"]
        obj.stale = obj.data_hash != man["data_hash"] or made_by != here
        return obj

    @classmethod
    def sampler_settings(cls, fit_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        """The sampler settings ``fit(**fit_kwargs)`` would use, defaults resolved (what decides reuse)."""
        kw = {k: v for k, v in (fit_kwargs or {}).items() if v is not None}
        sampler = kw.pop("sampler", None) or cls.default_sampler
        tune = kw.pop("tune", None)
        if tune is None:
            tune = GIBBS_TUNE if sampler in cls.own_samplers else NUTS_TUNE
        return {"sampler": sampler, "draws": kw.pop("draws", 1000), "tune": tune, "chains": kw.pop("chains", 4),
                "random_seed": kw.pop("random_seed", 0), **kw}

    @classmethod
    def fit_or_load(cls, data: pd.DataFrame, folder: str | Path = "models", name: str | None = None,
                    fit_kwargs: dict[str, Any] | None = None, **config: Any) -> "BayesModel":
        """Load the saved fit when its data hash, spec and sampler settings match; otherwise fit and
        save. ``fit_kwargs=None`` (a report) takes the saved fit whatever its sampler settings.
        ``reuse_note`` on the result says which happened and why."""
        try:
            obj = cls.load(data, folder, name, **config)
        except (FileNotFoundError, StaleFitError) as exc:
            why = str(exc)
        else:
            wanted = cls.sampler_settings(fit_kwargs) if fit_kwargs is not None else {}
            changed = [f"{k}={v} (saved: {obj.sampler.get(k)})" for k, v in wanted.items()
                       if k in ("sampler", "draws", "tune", "chains", "random_seed") or k in obj.sampler
                       if obj.sampler.get(k) != v]
            if not changed:
                obj.reused = True
                obj.reuse_note = (f"reused the saved fit {Path(folder) / ((name or cls.name) + '.json')} (same data, "
                                  f"spec and sampler settings); --refit (refit=True) fits again")
                return obj
            why = "the sampler settings differ from the saved fit's: " + ", ".join(changed)
        obj = cls(data, **config)
        obj.fit(**(fit_kwargs or {}))
        obj.save(folder, name)
        obj.reused = False
        obj.reuse_note = f"fitted: {why}"
        return obj

    def loo_table(self) -> dict[str, Any]:
        """PSIS-LOO over the saved log-likelihood (``az.loo``): elpd, its SE, p_loo, the number of
        clusters left out one at a time (`predictive`: a group-effect cluster) and how many have
        Pareto k > 0.7 (where the estimate is unreliable)."""
        import arviz as az
        if self.idata is None or "log_likelihood" not in self.idata.children:
            raise InputError(f"{self.name}: the fit has no log_likelihood group (fit it again)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # high Pareto k is counted below, not printed
            res = az.loo(self.idata, pointwise=True)
        k = np.asarray(res.pareto_k).ravel()
        return {"elpd_loo": float(res.elpd), "se": float(res.se), "p_loo": float(res.p),
                "clusters": int(res.n_data_points), "pareto_k_over_0.7": int((k > 0.7).sum()),
                "draws": int(res.n_samples)}

    # -- helpers for subclasses
    def draws(self, var: str) -> np.ndarray:
        """Posterior draws of ``var`` stacked to (sample, *dims)."""
        x = self.idata["posterior"][var]
        return np.asarray(x.stack(sample=("chain", "draw")).transpose("sample", ...))


@contextmanager
def gibbs_progress(show: bool, label: str):
    """A rich progress bar fed by `logit_gibbs`'s ``progress(done, total)`` callback."""
    if not show:
        yield None
        return
    from rich.progress import Progress
    with Progress() as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def hdi_columns(samples: np.ndarray, prob: float = HDI_PROB) -> tuple[np.ndarray, np.ndarray]:
    """HDI bounds of each column of a (sample, k) array (ArviZ's hdi)."""
    import arviz as az
    h = np.asarray(az.hdi(samples.T, prob=prob))
    return h[..., 0], h[..., 1]

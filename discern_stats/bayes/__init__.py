"""Hierarchical Bayesian models (PyMC, ArviZ): cue weights, discernment, intervention contrasts;
the cue-weight models' own Gibbs sampler (`logit_gibbs`)."""

from ..core.errors import InputError
from .base import ESS_MIN, HDI_PROB, RHAT_MAX, BayesModel, ConvergenceWarning, check_convergence
from .cue_weights import CueWeightModel, InterventionContrastModel, prior_sensitivity
from .discernment import DiscernmentModel, discernment_prior_sensitivity, load_prior_sensitivity
from .logit_gibbs import LogitDesign, logit_gibbs

MODELS = {"cue": CueWeightModel, "discernment": DiscernmentModel, "intervention": InterventionContrastModel}
DESIGN_OF = {"cue": "cue", "discernment": "l2d", "intervention": "cue"}

__all__ = ["BayesModel", "CueWeightModel", "DiscernmentModel", "InterventionContrastModel", "ConvergenceWarning",
           "check_convergence", "LogitDesign", "logit_gibbs", "MODELS", "DESIGN_OF", "HDI_PROB", "RHAT_MAX", "ESS_MIN"]


def fit(model: str, df, models_dir="models", *, refit: bool = False, fit_kwargs: dict | None = None, **config):
    """Fit (or load the matching saved fit of) ``model`` ('cue', 'discernment', 'intervention')
    on an interchange DataFrame; the Python counterpart of ``discern-stats fit``."""
    if model not in MODELS:
        raise InputError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}")
    cls = MODELS[model]
    if refit:
        m = cls(df, **config)
        m.fit(**(fit_kwargs or {}))
        m.save(models_dir)
        m.reuse_note = "fitted: refit requested (--refit)"
        return m
    return cls.fit_or_load(df, models_dir, fit_kwargs=fit_kwargs, **config)


__all__ += ["fit", "prior_sensitivity", "discernment_prior_sensitivity", "load_prior_sensitivity"]

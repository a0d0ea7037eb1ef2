"""Hierarchical Bayesian models (PyMC, ArviZ): cue weights, discernment, intervention contrasts."""

from .base import ESS_MIN, HDI_PROB, RHAT_MAX, BayesModel, ConvergenceWarning, check_convergence, data_hash
from .cue_weights import CueWeightModel, InterventionContrastModel, choice_table
from .discernment import DiscernmentModel

MODELS = {"cue": CueWeightModel, "discernment": DiscernmentModel, "intervention": InterventionContrastModel}
DESIGN_OF = {"cue": "cue", "discernment": "l2d", "intervention": "cue"}

__all__ = ["BayesModel", "CueWeightModel", "DiscernmentModel", "InterventionContrastModel", "ConvergenceWarning",
           "check_convergence", "data_hash", "choice_table", "MODELS", "DESIGN_OF", "HDI_PROB", "RHAT_MAX", "ESS_MIN"]

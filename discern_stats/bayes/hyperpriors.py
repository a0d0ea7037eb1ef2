"""The hyperpriors of the pooled coefficients and the group effects, written once.

    mu_j ~ N(0, mu_sd),  tau_j ~ Gamma(tau_shape, tau_rate)   (pooled columns: theta ~ N(mu_j, tau_j))
    sigma ~ HalfNormal(sigma_sd)                               (group effects: u ~ N(0, sigma))

`spec.HierarchicalGLM` (the model, from which the PyMC build is derived) and the two samplers'
layouts (`logit_gibbs.LogitDesign`, `gauss_gibbs.GaussDesign`) inherit these fields, so a default
is stated in one place; a model overrides them in its spec (e.g. the discernment model's priors).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(kw_only=True)
class PoolingPriors:
    mu_sd: float = 2.5
    tau_shape: float = 5.0
    tau_rate: float = 5.0
    sigma_sd: float = 1.0

    def pooling_priors(self) -> dict[str, Any]:
        """These four settings, to hand to another layout of the same model."""
        return {f.name: getattr(self, f.name) for f in fields(PoolingPriors)}



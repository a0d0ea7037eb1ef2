"""The discernment model before issue 16, kept only as the benchmark baseline (bench_discernment.py).

Discernment model for Design A (SPEC "Hierarchical Bayesian" 2): a hurdle model of the posterior.

Rows: valid posteriors whose claim differs from the prior (otherwise no update is possible).
Predictors: reliability R, popularity P (both in [0, 1]) and scaled improvement
I~ = (|P1 - T| - |C - T|) / (|P1 - T| + |C - T|) in [-1, 1].

    updated_i ~ Bernoulli(logistic(a[g] + b[g] . x_i + v[item]))           # P(update)
    f_i | updated ~ Beta(mean = logistic(c[g] + d[g] . x_i + w[item]), phi[g])  # fraction moved toward C
    b[g, k] ~ N(mu_b[k], tau_b[k]), tau_b ~ Gamma(5, 5)   (partial pooling across LLMs; same for d)
    v = sigma_v z_v, w = sigma_w z_w          (item random effects, non-centred)

f = (P2 - P1) / (C - P1) is clipped to [0.001, 0.999] (moves away from the claim or past it
are counted in ``n_clipped``). Reported per LLM: both slopes on one scale and the posterior of
popularity slope - reliability slope in each part.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from discern_stats.bayes.base import HDI_PROB, BayesModel, hdi_columns

PREDICTORS = ["reliability", "popularity", "improvement"]
EPS = 1e-3


class LegacyDiscernmentModel(BayesModel):
    name = "discernment_legacy"
    default_config: dict[str, Any] = {"group_by": ["llm"], "item_effects": True, "slope_sd": 2.5, "tau_sd": 1.0,
                                      "tau_shape": 5.0}
    check_vars = ["a", "b", "c", "d", "phi", "mu_b", "mu_d", "tau_b", "tau_d"]
    default_fit = {"target_accept": 0.95}

    def prepare(self, df: pd.DataFrame) -> pd.DataFrame:
        d = df[df["valid"].astype(bool)].copy()
        for col in ("truth", "prior", "posterior", "claim", "reliability", "popularity"):
            d[col] = d[col].astype(float)
        d = d[d.claim != d.prior]
        e1, e2 = (d.prior - d.truth).abs(), (d.claim - d.truth).abs()
        den = e1 + e2
        d["improvement"] = np.where(den > 0, (e1 - e2) / den.where(den > 0, 1), 0.0)
        d["updated"] = (d.posterior != d.prior).astype(int)
        f = (d.posterior - d.prior) / (d.claim - d.prior)
        d["n_clipped"] = ((f <= 0) | (f >= 1)) & (d.updated == 1)
        d["fraction"] = f.clip(EPS, 1 - EPS)
        d["group"] = d[self.config["group_by"]].astype(str).agg(" / ".join, axis=1)
        return d[["group", "item_id", "updated", "fraction", "n_clipped"] + PREDICTORS].reset_index(drop=True)

    def build(self):
        import pymc as pm
        c, d = self.config, self.data
        groups = sorted(d.group.unique())
        items = sorted(d.item_id.unique())
        gi = pd.Categorical(d.group, groups).codes
        ii = pd.Categorical(d.item_id, items).codes
        X = d[PREDICTORS].to_numpy(float)
        up = d.updated.to_numpy() == 1
        self.groups = groups
        with pm.Model(coords={"group": groups, "predictor": PREDICTORS, "item": items}) as m:
            parts = {}
            for part, (a_name, b_name) in {"update": ("a", "b"), "fraction": ("c", "d")}.items():
                a = pm.Normal(a_name, 0.0, 2.0, dims="group")
                mu = pm.Normal(f"mu_{b_name}", 0.0, c["slope_sd"], dims="predictor")
                # centred slopes (each LLM's slopes are well identified) with a zero-avoiding
                # Gamma(5, 5) between-LLM scale, as in the cue-weight model
                tau = pm.Gamma(f"tau_{b_name}", alpha=c["tau_shape"], beta=c["tau_shape"] / c["tau_sd"], dims="predictor")
                b = pm.Normal(b_name, mu, tau, dims=("group", "predictor"))
                pm.Deterministic(f"pop_minus_rel_{part}", b[:, 1] - b[:, 0], dims="group")
                eta = a[gi] + (X * b[gi]).sum(axis=1)
                if c["item_effects"]:
                    s = pm.HalfNormal(f"sigma_item_{part}", 1.0)
                    zi = pm.Normal(f"z_item_{part}", 0.0, 1.0, dims="item")
                    eta = eta + s * zi[ii]
                parts[part] = eta
            pm.Bernoulli("updated", logit_p=parts["update"], observed=d.updated.to_numpy())
            phi = pm.Gamma("phi", 2.0, 0.1, dims="group")
            mu_f = pm.math.invlogit(parts["fraction"][up])
            pm.Beta("fraction", alpha=mu_f * phi[gi[up]], beta=(1 - mu_f) * phi[gi[up]],
                    observed=d.fraction.to_numpy()[up])
        return m

    def summary_table(self) -> pd.DataFrame:
        groups = sorted(self.data.group.unique())
        rows = []
        for part, b_name in (("update", "b"), ("fraction", "d")):
            b = self.draws(b_name)  # S, G, K
            diff = self.draws(f"pop_minus_rel_{part}")  # S, G
            for gi, g in enumerate(groups):
                lo, hi = hdi_columns(b[:, gi, :])
                for ki, k in enumerate(PREDICTORS):
                    rows.append({"group": g, "part": part, "term": k, "mean": float(b[:, gi, ki].mean()),
                                 "hdi_lo": float(lo[ki]), "hdi_hi": float(hi[ki]), "hdi_prob": HDI_PROB})
                dlo, dhi = hdi_columns(diff[:, gi][:, None])
                rows.append({"group": g, "part": part, "term": "popularity - reliability",
                             "mean": float(diff[:, gi].mean()), "hdi_lo": float(dlo[0]), "hdi_hi": float(dhi[0]),
                             "p_positive": float((diff[:, gi] > 0).mean()), "hdi_prob": HDI_PROB})
        return pd.DataFrame(rows)

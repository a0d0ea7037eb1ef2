"""Frequentist cross-check of the Bayesian cue weights (SPEC "cluster-robust or GLMM").

Per LLM (and intervention): a logistic GLM of the P4 choice (chose B) on the same +-0.5 cue
codes and block intercepts as `CueWeightModel`, with cluster-robust (world) standard errors
(statsmodels ``GLM(..., Binomial()).fit(cov_type="cluster", cov_kwds={"groups": world})``).
Note: without world random effects these are population-averaged weights, attenuated towards
zero relative to the conditional (random-effect) weights by roughly
1 / sqrt(1 + 0.35 * sigma_u^2) (Zeger, Liang & Albert 1988).
"""

from __future__ import annotations

import pandas as pd
from scipy import stats as sps

from ..core.coding import choice_table
from ..core.vocab import CUES, WEIGHT_TRACKS


def cue_glm(df: pd.DataFrame, *, tracks: tuple[str, ...] = WEIGHT_TRACKS,
            level: float = 0.95) -> pd.DataFrame:
    """Cluster-robust logistic weights per LLM x intervention: one row per cue."""
    import statsmodels.api as sm  # imported here: 1.2 s that no report page needs
    d = choice_table(df, tracks)
    rows = []
    z = sps.norm.ppf(0.5 + level / 2)
    for (llm, iv), g in d.groupby(["llm", "intervention"], sort=True):
        cues = [k for k in CUES if (g[k] != 0).any()]
        X = pd.concat([pd.get_dummies(g["block"], prefix="block", dtype=float), g[cues]], axis=1)
        groups = pd.factorize(g["world_id"])[0]
        res = sm.GLM(g["y"].to_numpy(float), X, family=sm.families.Binomial()).fit(
            cov_type="cluster", cov_kwds={"groups": groups})
        for k in cues:
            b, se = float(res.params[k]), float(res.bse[k])
            rows.append({"llm": llm, "intervention": iv, "cue": k, "logit": b, "se_cluster": se,
                         "lo": b - z * se, "hi": b + z * se, "p_value": float(res.pvalues[k]),
                         "n": int(len(g)), "n_worlds": int(groups.max() + 1)})
    return pd.DataFrame(rows)


__all__ = ["cue_glm"]

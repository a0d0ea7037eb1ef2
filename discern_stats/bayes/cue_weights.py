"""Cue-weight model (SPEC "Hierarchical Bayesian" 1) and intervention contrasts (3).

Logistic regression of the P4 choice (chose B) on the coded cue contrasts of
`discern_stats.coding` (each +-0.5, so a weight is a log-odds difference between the cue's
two levels):

    eta = alpha[llm, block] + sum_k (beta[llm, k] + delta[llm, iv, k]) x_k + gamma[llm, iv] + u[llm, world]
    beta[llm, k] ~ N(mu[k], tau[k])                       (partial pooling across LLMs; centred, because
                                                           hundreds of choices per LLM identify each weight)
    u[llm, world] = sigma_u[llm] * z_u[llm, world]        (world random effects, non-centred)
    delta[llm, iv, k] ~ N(0, 1.5), delta = gamma = 0 for the base intervention (C0, or the
    first intervention present when C0 is absent)
    priors: mu ~ N(0, 2.5), tau ~ Gamma(tau_shape, tau_shape / tau_sd) (default Gamma(5, 5): mean 1,
            zero-avoiding), alpha ~ N(0, 1.5), sigma_u ~ HalfNormal(1), gamma ~ N(0, 1)

The between-LLM scale tau is an option (``tau_shape``, ``tau_sd`` in the config): with few LLMs
the data say little about tau, so its prior largely sets how far each LLM's weights are pooled
toward the mean. `prior_sensitivity` refits under several scale priors and tabulates the weights
side by side, so a reader can see how much a conclusion depends on that choice.

``block`` (factorial, swap, order-time, structure) gets its own intercept, since the blocks
are different evidence configurations. Identical rows (same LLM, intervention, world and
cues) are aggregated into binomial counts — exact, because such rows share every covariate
and group index. The counts enter through the binomial kernel k * eta - n * log(1 + e^eta)
(the log binomial coefficient is a constant of the data and is left out).

The model is specified once, in `CueWeightModel.spec` (a `discern_stats.bayes.spec.HierarchicalGLM`:
blocks, priors, hierarchy, data). `build` derives the PyMC model from it (sampled by NUTS with
``fit(sampler="nutpie")``, "pymc", "numpyro" or "blackjax"); the default sampler,
`discern_stats.bayes.logit_gibbs`, an exact blocked Metropolis-within-Gibbs sampler, samples the
same spec; it reaches the convergence targets many times sooner (BENCHMARKS.md) and its draws
carry the PyMC model's variable names.

Weights are reported on the logit scale and in percentage points, with 94% HDIs: for an
ordinary cue the average marginal effect AME_k = mean over the LLM's rows of the block that
manipulates k of logistic(eta | x_k = +0.5) - logistic(eta | x_k = -0.5); for a successive cue
(repetition, speaker, lineage) the contrast it names, p(step s) - p(step s-1), on the rows where
it is defined (see `CueWeightModel.ame`). All chains' draws are used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..core.coding import choice_table
from ..core.vocab import BLOCK_CUES, CONTRAST_SCOPES, CUES, INTERVENTION_CONTRASTS, SUCCESSIVE_CUES, WEIGHT_TRACKS
from ..core.errors import InputError
from .base import HDI_PROB, BayesModel, hdi_columns
from .logit_gibbs import LogitDesign
from .spec import Block, HierarchicalGLM

def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class CueWeightModel(BayesModel):
    """Hierarchical cue weights per LLM (and per intervention when ``interactions``)."""

    name = "cue_weights"
    default_config: dict[str, Any] = {"tracks": list(WEIGHT_TRACKS), "interactions": "auto", "base": "C0",
                                      "mu_sd": 2.5, "tau_sd": 1.0, "alpha_sd": 1.5, "sigma_u_sd": 1.0,
                                      "world_effects": True, "centered_weights": True, "tau_shape": 5.0,
                                      "delta_sd": 1.5}
    check_vars = ["mu", "tau", "beta", "alpha", "sigma_u", "delta", "gamma"]
    default_fit = {"target_accept": 0.95}
    # measured (BENCHMARKS.md): on 78,000 choices the Gibbs sampler reaches the convergence
    # targets 10x+ sooner than NUTS; `fit(sampler="nutpie")` samples the PyMC model instead
    default_sampler = "gibbs"
    own_samplers = ("gibbs",)

    def prepare(self, df: pd.DataFrame) -> pd.DataFrame:
        if "world_id" in df.columns and "probe" in df.columns:
            d = choice_table(df, tuple(self.config["tracks"]))
        else:  # already a choice table
            d = df.copy()
        if d.empty:
            raise InputError("no valid P4 choices to model")
        self.cues = [k for k in CUES if (d[k] != 0).any()] if all(k in d for k in CUES) else []
        keys = ["llm", "intervention", "stratum", "world_id", "block"] + self.cues
        agg = d.groupby(keys, sort=True, observed=True)["y"].agg(k="sum", n="count").reset_index()
        return agg

    @property
    def base(self) -> str:
        """The reference intervention: ``config['base']`` if collected, else the first present."""
        present = sorted(self.data["intervention"].unique())
        return self.config["base"] if self.config["base"] in present else present[0]

    @property
    def interactions(self) -> bool:
        ivs = self.data["intervention"].unique()
        if self.config["interactions"] == "auto":
            return len(ivs) > 1
        return bool(self.config["interactions"])

    def _index(self) -> dict[str, Any]:
        d = self.data
        llms = sorted(d.llm.unique())
        blocks = sorted(d.block.unique())
        ivs = [self.base] + sorted(set(d.intervention.unique()) - {self.base})
        worlds = sorted(d.world_id.unique())
        return {"llm": llms, "block": blocks, "intervention": ivs, "world": worlds, "cue": self.cues,
                "i_llm": pd.Categorical(d.llm, llms).codes, "i_block": pd.Categorical(d.block, blocks).codes,
                "i_iv": pd.Categorical(d.intervention, ivs).codes, "i_world": pd.Categorical(d.world_id, worlds).codes,
                "X": d[self.cues].to_numpy(float)}

    def spec(self) -> HierarchicalGLM:
        """The model, specified once: `build` (PyMC) and `sample_own` (Gibbs) both derive from it.
        Per LLM, theta = [alpha (block) | beta (cue) | delta (intervention_shift x cue) | gamma
        (intervention_shift)] with the priors of the module docstring."""
        c, d = self.config, self.data
        ix = self._index()
        self.index = ix
        N, B, K = len(d), len(ix["block"]), len(ix["cue"])
        V1 = len(ix["intervention"]) - 1 if self.interactions else 0
        X = ix["X"]
        columns = [np.eye(B)[ix["i_block"]], X]
        blocks = [Block("alpha", ("block",), sd=c["alpha_sd"], intercept=True), Block("beta", ("cue",))]
        if V1:
            # a fixed weakly-informative prior for the shifts: a shared shrinkage scale pulled the
            # one large intervention shift towards the many null ones
            iv = ix["i_iv"].astype(np.int64)
            onehot = np.zeros((N, V1))
            onehot[iv > 0, iv[iv > 0] - 1] = 1.0
            columns += [(onehot[:, :, None] * X[:, None, :]).reshape(N, V1 * K), onehot]
            blocks += [Block("delta", ("intervention_shift", "cue"), sd=c["delta_sd"]),
                       Block("gamma", ("intervention_shift",), sd=1.0)]
        coords = {"llm": ix["llm"], "cue": ix["cue"], "block": ix["block"], "world": ix["world"],
                  "intervention_shift": ix["intervention"][1:]}
        we = bool(c["world_effects"])
        return HierarchicalGLM(
            family="binomial", unit="llm", coords=coords, blocks=blocks, A=np.hstack(columns),
            unit_index=ix["i_llm"], y=d["k"].to_numpy(), n=d["n"].to_numpy(), group="world" if we else None,
            group_index=ix["i_world"] if we else None, mu_sd=c["mu_sd"], tau_shape=c["tau_shape"],
            tau_rate=c["tau_shape"] / c["tau_sd"], sigma_sd=c["sigma_u_sd"], centered=bool(c["centered_weights"]),
            names={"sigma": "sigma_u", "z": "z_u", "z_pooled": "z", "y": "chose_B"})

    def specs(self) -> dict[str, HierarchicalGLM]:
        return {"": self.spec()}

    def logit_design(self) -> tuple[LogitDesign, dict[str, Any]]:
        """The model of `spec` in the layout of `logit_gibbs` (and the block sizes B, K, V1)."""
        spec = self.spec()
        K = len(spec.coords["cue"])
        V1 = len(spec.coords["intervention_shift"]) if any(b.name == "delta" for b in spec.blocks) else 0
        return spec.logit_design(), {"B": len(spec.coords["block"]), "K": K, "V1": V1}

    gibbs_options = frozenset({"newton_theta", "theta_tries", "newton_u", "newton_sigma"})
    acceptance_note = "minimum over chains (and LLMs) of the Metropolis-Hastings acceptance rates"

    def gibbs_settings(self, spec: HierarchicalGLM, options: dict[str, Any]) -> dict[str, Any]:
        """With intervention interactions each LLM's block is 5-6x larger (53 parameters on the demo
        data) and its acceptance fell to 0.60; a second proposal per sweep (one more pass) doubled
        the worst ESS there (BENCHMARKS.md); a third (the second is autoregressive) raised the worst
        bulk ESS of the 30-world test data from 721 to 855 (max R-hat 1.014 -> 1.007, BENCHMARKS.md,
        issue 25). Without them (9 parameters, acceptance 0.95 on the benchmark data) one proposal
        is enough."""
        options.setdefault("theta_tries", 3 if any(b.name == "delta" for b in spec.blocks) else 1)
        return options

    # -- posterior quantities
    def _eta_draws(self, rows: np.ndarray, iv_index: int) -> tuple[np.ndarray, np.ndarray]:
        """(S x rows) linear predictor of the given data rows re-evaluated under intervention
        ``iv_index`` (0 = base), and the (S x llm x cue) effective weights."""
        ix = self.index if hasattr(self, "index") else self._index()
        self.index = ix
        beta = self.draws("beta")  # S, L, K
        alpha = self.draws("alpha")  # S, L, B
        il, ib, iw = ix["i_llm"][rows], ix["i_block"][rows], ix["i_world"][rows]
        w = beta.copy()
        shift = 0.0
        if self.interactions and iv_index > 0:
            w = w + self.draws("delta")[:, :, iv_index - 1, :]
            shift = self.draws("gamma")[:, il, iv_index - 1]
        X = ix["X"][rows]
        eta = alpha[:, il, ib] + np.einsum("srk,rk->sr", w[:, il, :], X) + shift
        if self.config["world_effects"]:
            eta = eta + self.draws("sigma_u")[:, il] * self.draws("z_u")[:, il, iw]
        return eta, w

    def ame(self, llm: str, cue: str, intervention: str | None = None, strata: list[str] | None = None,
            max_draws: int | None = None) -> np.ndarray:
        """Posterior draws (all chains; ``max_draws`` thins evenly) of the percentage-point effect of
        ``cue`` for ``llm``.

        An ordinary cue: the average marginal effect over the LLM's rows of its block,
        logistic(eta | x_k = +0.5) - logistic(eta | x_k = -0.5). A successive cue (repetition,
        speaker, lineage: steps single < repeated < two-speakers < separate-roots) is the contrast it
        names, p(step s) - p(step s-1), on the rows where it is defined (those at step s or s-1; each
        keeps its world effect): both configurations hold the earlier cues at +0.5 and the later ones
        at -0.5, and differ in cue k only. Toggling cue k on every row of the block would also
        evaluate impossible configurations (a single report with two speakers).
        """
        ix = self.index if hasattr(self, "index") else self._index()
        self.index = ix
        iv = intervention or self.base
        k = ix["cue"].index(cue)
        block = next(b for b, cs in BLOCK_CUES.items() if cue in cs)
        d = self.data
        sel = (d.llm == llm) & (d.block == block)
        if strata:
            sel &= d.stratum.isin(strata)
        successive = [c for c in SUCCESSIVE_CUES if c in ix["cue"]]
        if cue in SUCCESSIVE_CUES:
            step_of_row = sum((d[c] > 0).to_numpy().astype(int) for c in successive)
            s = SUCCESSIVE_CUES.index(cue) + 1
            sel &= np.isin(step_of_row, [s - 1, s])
        # evaluate every intervention on the same rows (the base intervention's, where present),
        # so contrasts compare the same worlds and conditions
        cand = d.intervention[sel]
        if cand.empty:
            return np.full(1, np.nan)
        ref = self.base if (cand == self.base).any() else cand.iloc[0]
        rows = np.flatnonzero((sel & (d.intervention == ref)).to_numpy())
        if rows.size == 0:
            return np.full(1, np.nan)
        eta, w = self._eta_draws(rows, ix["intervention"].index(iv))
        if max_draws is not None and eta.shape[0] > max_draws:
            keep = np.linspace(0, eta.shape[0] - 1, max_draws).round().astype(int)
            eta, w = eta[keep], w[keep]
        li = ix["llm"].index(llm)
        wl = w[:, li, :]  # S x K
        X = ix["X"][rows]
        if cue in SUCCESSIVE_CUES:
            # take out the rows' own successive-cue terms, put in step s's, leaving cue k to toggle
            cols = [ix["cue"].index(c) for c in successive]
            base = eta - wl[:, cols] @ X[:, cols].T
            for c, j in zip(successive, cols):
                if c != cue:
                    base = base + (0.5 if SUCCESSIVE_CUES.index(c) < SUCCESSIVE_CUES.index(cue) else -0.5) * wl[:, [j]]
        else:
            base = eta - wl[:, [k]] * X[None, :, k]
        wk = wl[:, [k]]
        n = d["n"].to_numpy()[rows]
        diff = _logistic(base + 0.5 * wk) - _logistic(base - 0.5 * wk)
        return 100 * (diff * n).sum(axis=1) / n.sum()

    def summary_table(self) -> pd.DataFrame:
        ix = self.index if hasattr(self, "index") else self._index()
        self.index = ix
        beta = self.draws("beta")
        rows = []
        ivs = ix["intervention"] if self.interactions else [self.base]
        for li, llm in enumerate(ix["llm"]):
            for vi, iv in enumerate(ivs):
                w = beta[:, li, :]
                if vi > 0:
                    w = w + self.draws("delta")[:, li, vi - 1, :]
                lo, hi = hdi_columns(w)
                for ki, cue in enumerate(ix["cue"]):
                    a = self.ame(llm, cue, iv)
                    alo, ahi = hdi_columns(a[:, None])
                    rows.append({"llm": llm, "intervention": iv, "cue": cue, "logit_mean": float(w[:, ki].mean()),
                                 "logit_hdi_lo": float(lo[ki]), "logit_hdi_hi": float(hi[ki]),
                                 "pp_mean": float(np.nanmean(a)), "pp_hdi_lo": float(alo[0]), "pp_hdi_hi": float(ahi[0]),
                                 "hdi_prob": HDI_PROB})
        return pd.DataFrame(rows)


SCALE_PRIORS = ((2.0, 1.0), (5.0, 1.0), (5.0, 0.3))  # (tau_shape, tau_sd): weak, the default, tight pooling


def prior_sensitivity(df: pd.DataFrame, priors: tuple[tuple[float, float], ...] = SCALE_PRIORS,
                      fit_kwargs: dict[str, Any] | None = None, **config: Any) -> pd.DataFrame:
    """Cue weights (logit scale, 94% HDI) under each between-LLM scale prior
    tau ~ Gamma(tau_shape, tau_shape / tau_sd) (mean tau_sd), one row per prior x LLM x cue, with
    each fit's convergence flag. ``config`` is the rest of the model spec (e.g. ``tracks``)."""
    rows = []
    for shape, sd in priors:
        if shape <= 0 or sd <= 0:
            raise InputError(f"a scale prior needs tau_shape > 0 and tau_sd > 0, got ({shape}, {sd})")
        m = CueWeightModel(df, **{**config, "tau_shape": float(shape), "tau_sd": float(sd)})
        m.fit(**(fit_kwargs or {}))
        t = m.summary()
        t.insert(0, "scale_prior", f"Gamma({shape:g}, {shape / sd:g})")
        t["tau_median"] = t["cue"].map(dict(zip(m.index["cue"], np.median(m.draws("tau"), axis=0))))
        rows.append(t[["scale_prior", "llm", "intervention", "cue", "logit_mean", "logit_hdi_lo", "logit_hdi_hi",
                       "tau_median", "converged"]])
    return pd.concat(rows, ignore_index=True)


CONTRASTS = INTERVENTION_CONTRASTS
SCOPES = CONTRAST_SCOPES


class InterventionContrastModel(CueWeightModel):
    """Posterior intervention contrasts (SPEC 3) on the cue-weight model with interactions:
    swap effect (AME of ``history``, pp) and absolute text-order effect (|AME of ``order``|),
    for C2-C0, C3-C2, C3-C1, C4-C3, on Core-300 and All-500."""

    name = "intervention_contrasts"
    default_config = {**CueWeightModel.default_config, "interactions": True,
                      "tracks": ["swap", "competition"]}
    default_fit = {"target_accept": 0.98}  # measured: 1 divergence at 0.95 on the demo data

    def summary_table(self) -> pd.DataFrame:
        ix = self.index if hasattr(self, "index") else self._index()
        self.index = ix
        rows = []
        present = set(ix["intervention"])
        for llm in ix["llm"]:
            for scope, strata in SCOPES.items():
                for c1, c0 in CONTRASTS:
                    if not {c1, c0} <= present:
                        continue
                    for ep, cue, absolute in (("swap", "history", False), ("abs_text_order", "order", True)):
                        a1 = self.ame(llm, cue, c1, strata)
                        a0 = self.ame(llm, cue, c0, strata)
                        if absolute:
                            a1, a0 = np.abs(a1), np.abs(a0)
                        diff = a1 - a0
                        lo, hi = hdi_columns(diff[:, None])
                        rows.append({"llm": llm, "contrast": f"{c1}-{c0}", "endpoint": ep, "scope": scope,
                                     "posterior_mean": float(diff.mean()), "hdi_lo": float(lo[0]),
                                     "hdi_hi": float(hi[0]), "p_positive": float((diff > 0).mean()),
                                     "hdi_prob": HDI_PROB})
        return pd.DataFrame(rows)

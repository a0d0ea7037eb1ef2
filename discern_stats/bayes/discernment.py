"""Discernment model for Design A (SPEC "Hierarchical Bayesian" 2; seed 000's update analysis).

Rows: valid posteriors P2 whose claim C differs from the prior P1. Each row's response is one of
`core.vocab.RESPONSES` (f = (P2 - P1) / (C - P1)): none (P2 = P1), partial (0 < f < 1), full
adoption (P2 = C), away (f < 0 or f > 1: away from the claim or past it). The categorical
response is written as a sequence of binary choices (a continuation-ratio / hurdle form, exact for
a four-way categorical), and the size of a partial move as a logit-normal:

    move:     P(response != none)                   = logistic(eta_move)
    away:     P(away | moved)                       = logistic(eta_away)
    full:     P(full | moved, not away)             = logistic(eta_full)
    fraction: logit f | partial ~ N(eta_fraction, s[g])

    eta_part = a[g] + b[g] . x + u[g, item]
    b[g, k] ~ N(mu[k], tau[k]),  mu ~ N(0, slope_sd),  tau ~ Gamma(tau_shape, tau_shape / tau_sd)
    a[g] ~ N(0, intercept_sd),   u[g, item] ~ N(0, sigma[g]),  sigma[g] ~ HalfNormal(item_sd)
    s[g] ~ HalfNormal(resid_sd)

Priors on substance (issue 25.5; defaults in `DiscernmentModel.default_config`): a slope is a
change in log-odds per SD of a predictor, and the paper's slopes are 0.05-0.2, so
mu ~ N(0, 1) (a mean slope beyond +-2 logits per SD has prior probability 5 %). The between-group
SD of a slope, tau ~ Gamma(2, 8) (mean 0.25, median 0.21; P(tau < 0.05) = 6 %, P(tau < 0.3) = 69 %,
P(tau > 1) = 0.3 %): groups may differ by a tenth of a logit or barely at all, while shape 2 keeps
the density at 0 at 0 (a boundary-avoiding prior, Chung et al. 2013, Psychometrika 78:685). The
previous Gamma(5, 5) put 1.9 % of its mass below 0.3. `prior_predictive` shows what these priors
imply for the response shares; `discernment_prior_sensitivity` refits under other scale priors.

g is a group (default: LLM x prompt strategy), so each LLM x strategy has its own slopes, pooled
toward the mean over groups.

Strategy effects (issue 25.3; ``strategy_effects=True``, off by default, when off the model above
is unchanged): the prompt strategies are the paper's interventions, so the pooled mean of a
group's slope is structured as strategy + LLM, and the residual between-group SD tau is their
interaction:

    b[g, k] ~ N(gamma[strategy(g), k] + alpha[llm(g), k], tau[k])
    gamma[s, k] ~ N(0, slope_sd)                       ({part}_strategy_slope)
    alpha[., k] = Q f[., k],  f ~ N(0, llm_slope_sd)   ({part}_llm_slope; Q the orthonormal
                                                        sum-to-zero basis, so sum_l alpha[l, k] = 0)

gamma[s] is then strategy s's slope averaged over the LLMs (the LLM effects sum to 0), and
gamma[s] - gamma[zero-shot] the strategy's effect on the slope (`strategy_contrasts`). The LLM
factor is the group_by columns other than strategy (no LLM term with one LLM). mu is then not a
parameter; the summary's "(population mean)" row is the mean of gamma over the strategies. u[g, item] is the LLM x item effect within a strategy: the rows of
one (LLM, strategy, item) share one prior P1 (one conversation start), the dependence it carries.
Crossed effects (issue 25.2; ``source_effects``, ``shared_item_effects``, both on by default since
2026-12-07; ``=False`` gives the model without them): reliability and popularity vary between
sources, not rows, so rows of one source share whatever else the source carries, and the items are
the same for every LLM. Without these terms the slopes' intervals ignore that dependence: on
held-out data with source effects the group slopes' 94 % intervals covered 0.906 without them (an
early 2-replicate check) and 0.95-0.97 with them (30 replicates; BENCHMARKS.md, "Discernment crossed
effects: coverage"). Each part gains

    eta_part += v[source] + w[item],  v ~ N(0, sigma_source),  w ~ N(0, sigma_shared_item)
    sigma_source ~ HalfNormal(source_sd),  sigma_shared_item ~ HalfNormal(shared_item_sd)

({part}_sigma_source, {part}_z_source; {part}_sigma_shared_item, {part}_z_shared_item): v crossed
with the groups, w the item effect shared by every LLM x strategy, u[g, item] then the
LLM:strategy:item deviation, i.e. (1 | item) + (1 | LLM:strategy:item) + (1 | source).
No posterior is clipped or moved: every valid row is in exactly one category.

Predictors x, on one documented scale: each is a z-score, (value - mean) / SD. Reliability and
popularity are standardised over the distinct sources in the data (each source counted once), the
scaled improvement I~ = (|P1 - T| - |C - T|) / (|P1 - T| + |C - T|) over rows. A slope is the change
in log-odds (fraction: in the logit of the median moved fraction) per SD, so "popularity slope -
reliability slope" compares the two on the same footing whatever their units (Open PageRank 0-10,
PC1 0-1). The SDs are in `scales`.

Opt-in term ``prior_correct`` (issue 25.4; ``predictors=[..., "prior_correct"]``, off by default so
saved fits are unchanged): the indicator 1(P1 correct under the item's rule), coded 0/1, not
z-scored (its slope is the log-odds difference between a correct and a wrong prior). Why a term
and not a cluster-mean (Mundlak) term: at an exactly correct prior the scaled improvement is
forced to I~ = -1 (|P1 - T| = 0), so without the term the improvement slope has to fit two
different things at once, the graded response to how much better the claim is among wrong priors
and the discrete "defend a correct answer" behaviour at I~ = -1 (what CD measures). The indicator
gives the second its own coefficient, so the improvement slope is identified from the wrong
priors. A Mundlak term (the LLM x item mean of I~) answers another question, item effects u
correlated with the predictors; the prior, and so prior_correct, is constant within an LLM x item
cluster, so the indicator already is a cluster-level term.

What the slopes imply on the paper's scale (probabilities, expected fractions, correct-defense
rates in percentage points) is in `discern_stats.bayes.implied`.

The four parts have disjoint parameters and independent priors, so their posterior factorises:
each part is a `spec.HierarchicalGLM`, sampled by the exact Gibbs samplers (`logit_gibbs` for the
three binary parts, `gauss_gibbs` for the fraction) or, from the same specs, by NUTS in one PyMC
model (`build`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..core.answers import is_correct
from ..core.vocab import AWAY_KINDS, MEAN_OVER_GROUPS, POPULATION_MEAN, RESPONSES, STRATEGIES
from ..core.coding import classify_response
from ..core.errors import InputError, StaleFitError
from .base import HDI_PROB, BayesModel, hdi_columns
from .spec import Block, CrossedEffect, HierarchicalGLM, MeanTerm, sum_to_zero_basis

PREDICTORS = ["reliability", "popularity", "improvement"]  # the default predictors
# opt-in predictors (issue 25.4): named in ``predictors`` to use them; the defaults (and saved fits) are unchanged
OPTIONAL_PREDICTORS = ["prior_correct"]
INDICATORS = ("prior_correct",)  # coded 0/1, not standardised
SOURCE_PREDICTORS = ("reliability", "popularity")  # standardised over distinct sources
PARTS = ("move", "away", "full", "fraction")
# each part's outcome as named in a saved fit's observed_data and posterior_predictive groups
OUTCOME_NAMES = {"move": "moved", "away": "away", "full": "full", "fraction": "logit_fraction"}


def _joined(df: pd.DataFrame, cols: list[str]) -> pd.Series:
    """The values of ``cols`` joined by " / " (vectorised: a row-wise join costs minutes at 670,000 rows)."""
    out = df[cols[0]].astype(str)
    for c in cols[1:]:
        out = out + " / " + df[c].astype(str)
    return out


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


class DiscernmentModel(BayesModel):
    name = "discernment"
    default_config: dict[str, Any] = {"group_by": ["llm", "strategy"], "predictors": list(PREDICTORS),
                                      "item_effects": True, "intercept_sd": 2.5, "slope_sd": 1.0,
                                      "tau_shape": 2.0, "tau_sd": 0.25, "item_sd": 1.0, "resid_sd": 2.0,
                                      "strategy_effects": False, "llm_slope_sd": 0.5,
                                      "source_effects": True, "source_sd": 1.0,
                                      "shared_item_effects": True, "shared_item_sd": 1.0}
    default_sampler = "gibbs"
    own_samplers = ("gibbs",)
    default_fit = {"target_accept": 0.95}
    # the rare "away" part pools its groups over a few events each: its scale tau needs more draws
    # than the other models to reach ESS 400. Under the substantive tau prior (Gamma(2, 8), mass near
    # 0) the demo's away_tau had bulk ESS 262 from 2 x 2,000 draws and 596 from 2 x 4,000 (13 s -> 25 s)
    draws_factor = 4

    # -- data
    def prepare(self, df: pd.DataFrame) -> pd.DataFrame:
        c = self.config
        by, preds = list(c["group_by"]), list(c["predictors"])
        if not by:
            raise InputError("discernment model: group_by needs at least one column (e.g. llm)")
        if c["strategy_effects"] and "strategy" not in by:
            raise InputError("discernment model: strategy_effects=True needs 'strategy' among the group_by columns")
        if c["source_effects"] and "source" not in df.columns:
            raise InputError("discernment model: source_effects (on by default) needs a 'source' column in the data; "
                             "pass source_effects=False (--config '{\"source_effects\": false}') to fit without it",
                             column="source")
        for key in ("source_sd", "shared_item_sd"):
            if not float(c[key]) > 0:
                raise InputError(f"discernment model: {key} must be > 0, got {c[key]!r}")
        if c["strategy_effects"] and not float(c["llm_slope_sd"]) > 0:
            raise InputError(f"discernment model: llm_slope_sd must be > 0, got {c['llm_slope_sd']!r}")
        bad = [p for p in preds if p not in PREDICTORS + OPTIONAL_PREDICTORS]
        if bad or not preds:
            raise InputError(f"discernment model: unknown predictor {bad[0] if bad else '(none)'!r}; choose from "
                             f"{', '.join(PREDICTORS + OPTIONAL_PREDICTORS)}")
        need = ["valid", "truth", "prior", "posterior", "claim", "item_id", *by,
                *[p for p in preds if p in SOURCE_PREDICTORS]]
        missing = [col for col in dict.fromkeys(need) if col not in df.columns]
        if missing:
            raise InputError(f"discernment model: the data have no column {missing[0]!r} (needed for "
                             f"{'group_by' if missing[0] in by else 'the model'}; columns: {', '.join(map(str, df.columns))})",
                             column=missing[0])
        d = df[df["valid"].astype(bool)].copy()
        for col in ("truth", "prior", "posterior", "claim", *[p for p in preds if p in SOURCE_PREDICTORS]):
            d[col] = pd.to_numeric(d[col], errors="coerce").astype(float)
        d = d.dropna(subset=["prior", "posterior", "claim", "truth", *[p for p in preds if p in SOURCE_PREDICTORS]])
        d = d[d.claim != d.prior]
        d["group"] = _joined(d, by)
        every = _joined(df.dropna(subset=by), by).unique()
        empty = sorted(set(every) - set(d["group"]))
        if empty:
            raise InputError(f"discernment model: group {empty[0]!r} ({' / '.join(by)}) has no valid posterior with "
                             f"claim != prior; drop its trials or group by other columns")
        if d.empty:
            raise InputError("discernment model: no valid posteriors with claim != prior")
        e1, e2 = (d.prior - d.truth).abs(), (d.claim - d.truth).abs()
        den = e1 + e2
        d["improvement"] = np.where(den > 0, (e1 - e2) / den.where(den > 0, 1), 0.0)
        d["response"] = classify_response(d.prior, d.posterior, d.claim)
        f = (d.posterior - d.prior) / (d.claim - d.prior)
        # kept beside `data`, not in it (the data hash of saved fits is unchanged): the moved fraction f,
        # and prior / claim correctness under the item's rule (`core.answers`, as `stats.l2d` defines CD)
        rules = ([None if pd.isna(r) else str(r) for r in d["correct_rule"]] if "correct_rule" in d.columns else None)
        self.fraction_moved = f.to_numpy(float)
        self.prior_correct_rows = is_correct(d.prior.to_numpy(), d.truth.to_numpy(), rules)
        self.claim_wrong_rows = ~is_correct(d.claim.to_numpy(), d.truth.to_numpy(), rules)
        d["prior_correct"] = self.prior_correct_rows.astype(float)
        d["logit_fraction"] = np.where(d.response == "partial", _logit(f.clip(1e-12, 1 - 1e-12)), 0.0)
        self.scales = {}
        for p in preds:
            if p in INDICATORS:
                self.scales[p] = {"mean": 0.0, "sd": 1.0, "over": "indicator 0/1 (not standardised)"}
                d[f"z_{p}"] = d[p]
                continue
            by_source = p in SOURCE_PREDICTORS and "source" in d
            base = d.drop_duplicates("source")[p] if by_source else d[p]
            m, s = float(base.mean()), float(base.std(ddof=0))
            if not s > 0:
                raise InputError(f"discernment model: predictor {p!r} does not vary in the data; drop it from predictors")
            self.scales[p] = {"mean": m, "sd": s, "over": "distinct sources" if by_source else "rows"}
            d[f"z_{p}"] = (d[p] - m) / s
        keep = ["group", *by, "item_id", *(["source"] if c["source_effects"] else []), "response", "logit_fraction",
                *[f"z_{p}" for p in preds]]
        return d[list(dict.fromkeys(keep))].reset_index(drop=True)

    def outcome_counts(self) -> pd.DataFrame:
        """Rows per group and response (none / partial / full / away), the data each part sees, and
        "away" split by direction (`core.vocab.AWAY_KINDS`): away from the claim (f < 0) and past it
        (f > 1), f = (P2 - P1) / (C - P1); the two sum to "away"."""
        t = pd.crosstab(self.data.group, pd.Categorical(self.data.response, RESPONSES), dropna=False)
        t.columns = list(RESPONSES)
        away = self.data.response.to_numpy() == "away"
        f = self.fraction_moved
        for name, sel in zip(AWAY_KINDS, (away & (f < 0), away & (f > 1))):
            t[name] = pd.Series(sel.astype(int)).groupby(self.data.group.to_numpy()).sum().reindex(t.index).fillna(0).astype(int)
        t["rows"] = t[list(RESPONSES)].sum(axis=1)
        return t.reset_index()

    def part_rows(self) -> dict[str, np.ndarray]:
        """The rows each part models (a mask over `data`)."""
        resp = self.data.response.to_numpy()
        return {"move": np.ones(len(resp), bool), "away": resp != "none",
                "full": np.isin(resp, ["partial", "full"]), "fraction": resp == "partial"}

    def group_factors(self, groups: list[str]) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
        """With strategy effects: the strategies of ``groups`` (in the order of `core.vocab.STRATEGIES`,
        others after, sorted) and each group's index among them; the LLM levels (the group_by
        columns other than strategy, joined) and each group's index."""
        by = list(self.config["group_by"])
        others = [b for b in by if b != "strategy"]
        first = self.data.drop_duplicates("group").set_index("group").loc[groups]
        strat = first["strategy"].astype(str)
        present = set(strat)
        strategies = [x for x in STRATEGIES if x in present] + sorted(present - set(STRATEGIES))
        llm = _joined(first.reset_index(), others) if others else pd.Series(["(all)"] * len(groups))
        llms = sorted(set(llm))
        return (strategies, pd.Categorical(strat, strategies).codes.astype(np.int64), llms,
                pd.Categorical(llm, llms).codes.astype(np.int64))

    # -- the model, specified once per part
    def specs(self) -> dict[str, HierarchicalGLM]:
        """One `HierarchicalGLM` per part with rows (built once: data and config are fixed after
        construction, and the gate, the PyMC build and the sampler all read them)."""
        if getattr(self, "_specs", None) is None:
            self._specs = self._build_specs()
        return self._specs

    def _build_specs(self) -> dict[str, HierarchicalGLM]:
        c, d = self.config, self.data
        preds = list(c["predictors"])
        resp = d.response.to_numpy()
        rows = self.part_rows()
        y = {"move": resp != "none", "away": resp == "away", "full": resp == "full"}
        out = {}
        for part in PARTS:
            sel = rows[part]
            if not sel.any():
                continue
            p = d[sel]
            groups = sorted(p.group.unique())
            items = sorted(p.item_id.astype(str).unique())
            A = np.column_stack([np.ones(len(p)), p[[f"z_{k}" for k in preds]].to_numpy(float)])
            coords = {f"{part}_group": groups, "predictor": preds, f"{part}_item": items}
            ie = bool(c["item_effects"])
            common = dict(unit=f"{part}_group", coords=coords, A=A,
                          blocks=[Block(f"{part}_intercept", (), sd=c["intercept_sd"], intercept=True),
                                  Block(f"{part}_slope", ("predictor",))],
                          unit_index=pd.Categorical(p.group, groups).codes.astype(np.int64),
                          group=f"{part}_item" if ie else None,
                          group_index=pd.Categorical(p.item_id.astype(str), items).codes.astype(np.int64) if ie else None,
                          mu_sd=c["slope_sd"], tau_shape=c["tau_shape"], tau_rate=c["tau_shape"] / c["tau_sd"],
                          sigma_sd=c["item_sd"], resid_sd=c["resid_sd"],
                          names={"mu": f"{part}_mu", "tau": f"{part}_tau", "sigma": f"{part}_sigma_item",
                                 "z": f"{part}_z_item", "resid": f"{part}_resid_sd", "y": OUTCOME_NAMES[part],
                                 "row": f"{part}_row", "cluster": f"{part}_cluster", "column": f"{part}_column",
                                 "n": f"{part}_n", "unit_of_row": f"{part}_group_of_row",
                                 "group_of_row": f"{part}_item_of_row", "design": f"{part}_design"})
            if c["strategy_effects"]:
                strategies, s_idx, llms, l_idx = self.group_factors(groups)
                coords |= {f"{part}_strategy": strategies, f"{part}_llm": llms}
                terms = [MeanTerm(f"{part}_strategy_slope", f"{part}_strategy", s_idx, float(c["slope_sd"]))]
                if len(llms) > 1:
                    terms.append(MeanTerm(f"{part}_llm_slope", f"{part}_llm", l_idx, float(c["llm_slope_sd"]),
                                          sum_to_zero=True))
                common["mean_terms"] = terms
            crossed = []
            if c["source_effects"]:  # (1 | source), per part
                sources = sorted(p.source.astype(str).unique())
                coords[f"{part}_source"] = sources
                crossed.append(CrossedEffect(f"{part}_sigma_source", f"{part}_z_source", f"{part}_source",
                                             pd.Categorical(p.source.astype(str), sources).codes.astype(np.int64),
                                             float(c["source_sd"])))
            if c["shared_item_effects"]:  # (1 | item) shared by every group, beside the nested (1 | group:item)
                crossed.append(CrossedEffect(f"{part}_sigma_shared_item", f"{part}_z_shared_item", f"{part}_item",
                                             pd.Categorical(p.item_id.astype(str), items).codes.astype(np.int64),
                                             float(c["shared_item_sd"])))
            common["crossed"] = crossed
            if part == "fraction":
                out[part] = HierarchicalGLM(family="normal", y=p.logit_fraction.to_numpy(float), **common)
            else:
                out[part] = HierarchicalGLM(family="binomial", y=y[part][sel].astype(np.int64),
                                            n=np.ones(int(sel.sum()), np.int64), **common)
        return out

    @property
    def check_vars(self) -> list[str]:  # type: ignore[override]
        """The convergence gate: what the summary reports (slopes, and through them popularity -
        reliability) and the pooling hyperparameters (mu, tau)."""
        out = []
        for part, spec in self.specs().items():
            means = [t.name for t in spec.mean_terms] or [spec.names["mu"]]  # strategy (and LLM) effects, or mu
            out += [f"{part}_slope", *means, spec.names["tau"]]
        return out

    @property
    def nuisance_vars(self) -> list[str]:  # type: ignore[override]
        """Intercepts, item-effect scales and residual scales: gated at the looser nuisance level
        (R-hat <= 1.05, ESS >= 100; `base.NUISANCE_RHAT_MAX`), recorded in ``diagnostics["nuisance"]``. With a rare response (a few "away" moves per item)
        the item-effect scale of a binary part is weakly identified and its chain mixes slowly
        (bulk ESS 32 of 2,000 draws at 615,000 rows), while the slopes mix well (ESS >= 900)."""
        out = []
        for part, spec in self.specs().items():
            out.append(f"{part}_intercept")
            if spec.group is not None:
                out.append(spec.names["sigma"])
            if spec.family == "normal":
                out.append(spec.names["resid"])
            out += [t.sigma_name for t in spec.crossed]  # crossed effects' scales (source, shared item)
        return out

    keep_group_effects = False  # item effects are kept as their scales only
    joint_loglik = "response"  # log_likelihood: the four parts' joint, per (group, item) cluster

    def constant_data(self) -> dict[str, Any]:
        """The predictors' scales (z = (value - mean) / sd), what a slope per SD is per."""
        import xarray as xr
        preds = list(self.config["predictors"])
        return {f"scale_{k}": xr.DataArray([self.scales[p][k] for p in preds], dims=["predictor"],
                                            coords={"predictor": preds}) for k in ("mean", "sd")}

    def observed_data(self) -> dict[str, Any]:
        """Every modelled row's response, coded 0..3 in the order of ``response`` (none, partial, full,
        away; the part outcomes' rows are subsets of these rows, in order)."""
        import xarray as xr
        codes = pd.Categorical(self.data.response, list(RESPONSES)).codes.astype(np.int8)
        return {"response": xr.DataArray(codes, dims=["row"], attrs={"categories": ", ".join(RESPONSES)})}
    acceptance_note = ("minimum over chains and groups of the Metropolis-Hastings acceptance rates (the "
                       "fraction part is sampled by exact Gibbs draws)")

    # -- prior predictive check
    def prior_predictive(self, draws: int = 200, seed: int = 0, max_rows: int = 20_000) -> pd.DataFrame:
        """What the priors imply on the data's own predictors and groups: ``draws`` parameter draws
        from the priors of the four parts (slopes from mu, tau; intercepts; item effects from their
        scales; crossed effects (source, shared item) from theirs; the fraction's residual SD), a
        response simulated for every row (at most ``max_rows``, an even subsample) part by part as the model factorises, and per response share (none,
        partial, full, away) and the median moved fraction of the partial rows: the 5 %, 50 % and
        95 % quantiles over the draws beside the observed value. A prior that puts the observed
        shares far in its tails is a prior against the data."""
        from .base import check_sampling_counts
        check_sampling_counts(draws=draws, tune=0, chains=1)
        c, d = self.config, self.data
        rng = np.random.default_rng(seed)
        rows = np.linspace(0, len(d) - 1, min(len(d), max_rows)).round().astype(int)
        sub = d.iloc[rows]
        X = sub[[f"z_{k}" for k in c["predictors"]]].to_numpy(float)
        gcat = pd.Categorical(sub.group)
        g = gcat.codes
        it = pd.Categorical(sub.item_id.astype(str)).codes
        G, I, K = g.max() + 1, it.max() + 1, X.shape[1]
        src = pd.Categorical(sub.source.astype(str)).codes if c["source_effects"] else it
        n_src = int(src.max()) + 1
        if c["strategy_effects"]:
            strategies, s_idx, llms, l_idx = self.group_factors(list(gcat.categories))
            Q = sum_to_zero_basis(len(llms))
        eta = {}
        for part in PARTS:
            if c["strategy_effects"]:  # gamma[strategy] + alpha[llm], alpha = Q f
                gam = rng.normal(0, c["slope_sd"], (draws, len(strategies), K))
                alpha = np.einsum("lr,srk->slk", Q, rng.normal(0, c["llm_slope_sd"], (draws, Q.shape[1], K)))
                mu = gam[:, s_idx] + alpha[:, l_idx]
            else:
                mu = rng.normal(0, c["slope_sd"], (draws, 1, K))
            tau = rng.gamma(c["tau_shape"], c["tau_sd"] / c["tau_shape"], (draws, 1, K))
            b = mu + tau * rng.standard_normal((draws, G, K))
            a = rng.normal(0, c["intercept_sd"], (draws, G))
            e = a[:, g] + np.einsum("rk,srk->sr", X, b[:, g])
            if c["item_effects"]:
                sig = np.abs(rng.normal(0, c["item_sd"], (draws, G)))
                e = e + (sig[:, :, None] * rng.standard_normal((draws, G, I)))[:, g, it]
            for on, sd_key, codes, n_lev in ((c["source_effects"], "source_sd", src, n_src),
                                             (c["shared_item_effects"], "shared_item_sd", it, I)):
                if on:  # crossed effects: sigma_t z_t[level], sigma_t ~ HalfNormal(sd)
                    sig_t = np.abs(rng.normal(0, c[sd_key], (draws, 1)))
                    e = e + (sig_t * rng.standard_normal((draws, n_lev)))[:, codes]
            eta[part] = e
        p = {k: 1 / (1 + np.exp(-v)) for k, v in eta.items() if k != "fraction"}
        moved = rng.random(p["move"].shape) < p["move"]
        away = moved & (rng.random(moved.shape) < p["away"])
        full = moved & ~away & (rng.random(moved.shape) < p["full"])
        partial = moved & ~away & ~full
        s_res = np.abs(rng.normal(0, c["resid_sd"], (draws, G)))[:, g]
        frac = 1 / (1 + np.exp(-(eta["fraction"] + s_res * rng.standard_normal(moved.shape))))
        med = np.array([np.median(frac[i][partial[i]]) if partial[i].any() else np.nan for i in range(draws)])
        sim = {"none": (~moved).mean(1), "partial": partial.mean(1), "full": full.mean(1), "away": away.mean(1),
               "median partial fraction": med}
        obs_resp = sub.response.to_numpy()
        obs_frac = 1 / (1 + np.exp(-sub.logit_fraction.to_numpy()[obs_resp == "partial"]))
        observed = {r: float((obs_resp == r).mean()) for r in RESPONSES}
        observed["median partial fraction"] = float(np.median(obs_frac)) if len(obs_frac) else np.nan
        out = []
        for k, v in sim.items():
            q5, q50, q95 = np.nanquantile(v, [0.05, 0.5, 0.95])
            out.append({"quantity": k, "prior_q05": q5, "prior_median": q50, "prior_q95": q95,
                        "observed": observed[k], "observed_inside_90": bool(q5 <= observed[k] <= q95),
                        "draws": draws, "rows": len(sub)})
        return pd.DataFrame(out)

    # -- posterior predictive check (issue 25.6)
    HEAP_HALF = 0.01  # a partial fraction within this of 1/2 counts as "at 0.5" (P2 midway between P1 and C)

    def predictive_fractions(self) -> tuple[np.ndarray, np.ndarray]:
        """(observed, replicated (draws, rows)) update fractions f of the partial moves, f = logistic
        of the fraction part's outcome, from the saved fit's observed_data and posterior_predictive."""
        y = OUTCOME_NAMES["fraction"]
        obs = 1 / (1 + np.exp(-np.asarray(self.idata["observed_data"][y], float)))
        rep = np.asarray(self.idata["posterior_predictive"][y], float)
        return obs, 1 / (1 + np.exp(-rep.reshape(-1, rep.shape[-1])))

    def predictive_check(self, prob: float = HDI_PROB) -> pd.DataFrame:
        """Observed statistics beside their posterior predictive distribution (each part replicated
        on the rows it models, as the model factorises): P(move), P(away | moved), P(full | moved,
        not away) -- the heap at f = 1, which the model holds as its own category -- and of the
        partial moves' fractions the median, the share within 0.01 of 0.5 (the heap a logit-normal
        does not have) and the shares below 0.1 and above 0.9. Per row: observed, the predictive
        median and central ``prob`` interval, whether the observed value is inside, the draws."""
        if self.idata is None or "posterior_predictive" not in self.idata.children:
            raise InputError("discernment model: the fit has no posterior predictive draws (fit it again)")
        obs, pp = self.idata["observed_data"], self.idata["posterior_predictive"]
        rows = []

        def add(quantity, o, r):
            lo, med, hi = np.quantile(r, [(1 - prob) / 2, 0.5, (1 + prob) / 2])
            rows.append({"quantity": quantity, "observed": float(o), "predictive_median": float(med),
                         "predictive_lo": float(lo), "predictive_hi": float(hi),
                         "observed_inside": bool(lo <= o <= hi), "draws": len(r), "prob": prob})

        for part, label in (("move", "P(move)"), ("away", "P(away | moved)"), ("full", "P(full | moved, not away)")):
            y = OUTCOME_NAMES[part]
            if y in obs.data_vars:
                rep = np.asarray(pp[y], float)
                add(label, float(np.asarray(obs[y]).mean()), rep.reshape(-1, rep.shape[-1]).mean(axis=1))
        if OUTCOME_NAMES["fraction"] in obs.data_vars:
            f, rep = self.predictive_fractions()
            add("partial moves: median fraction", np.median(f), np.median(rep, axis=1))
            near = lambda x: (np.abs(x - 0.5) <= self.HEAP_HALF).mean(axis=-1)  # noqa: E731
            add(f"partial moves: share within {self.HEAP_HALF} of 0.5", near(f), near(rep))
            add("partial moves: share below 0.1", (f < 0.1).mean(), (rep < 0.1).mean(axis=1))
            add("partial moves: share above 0.9", (f > 0.9).mean(), (rep > 0.9).mean(axis=1))
        return pd.DataFrame(rows)

    # -- results
    def summary_table(self) -> pd.DataFrame:
        """Per part and group: the slopes (per SD) with 94% HDIs and popularity - reliability with
        P(> 0). Two pooled rows (`core.vocab`):

        - "(mean over groups)": per draw the unweighted mean of the fitted groups' slopes,
          (1/G) sum_g b[g]: the average over these LLM x strategy cells, the quantity a paper's
          "averaged over the LLMs and strategies" means, and the same pooling as `bayes.implied`'s
          rows of that name (finite-population mean; Gelman 2005, Ann. Stat. 33:1, section 3.5);
        - "(population mean)": mu, the centre of the population the groups are drawn from (a new
          LLM x strategy cell's expected slope). Its interval also carries the between-group SD
          tau's uncertainty, so it is wider, and with a handful of groups it leans on tau's prior.
          With strategy effects it is the mean of gamma over the strategies, and rows
          "(strategy mean: s)" are gamma[s] (strategy s's slope averaged over the LLMs).

        Until 2026-12-07 "(mean over groups)" held mu. On held-out data with 4 groups, mu's intervals
        cover the generator's population mean at 0.950-0.992; the groups' average row covers the
        average of the true group slopes at 0.908-0.975 (BENCHMARKS.md, "Discernment: the mean over
        groups")."""
        preds = list(self.config["predictors"])
        post = self.idata["posterior"]
        masks = self.part_rows()
        rows = []
        for part in PARTS:
            if f"{part}_slope" not in post.data_vars:
                continue
            counts = self.data.group[masks[part]].value_counts()
            b = self.draws(f"{part}_slope")  # S, G, K
            groups = list(post[f"{part}_slope"].coords[f"{part}_group"].values)
            series = [(g, b[:, gi, :], int(counts.get(g, 0))) for gi, g in enumerate(groups)]
            series.append((MEAN_OVER_GROUPS, b.mean(axis=1), int(counts.sum())))
            if self.config["strategy_effects"]:
                gam = self.draws(f"{part}_strategy_slope")  # S, strategies, K
                strategies = list(post[f"{part}_strategy_slope"].coords[f"{part}_strategy"].values)
                s_of = dict(zip(groups, self.group_factors(groups)[1]))
                series += [(f"(strategy mean: {st})", gam[:, si, :],
                            int(sum(counts.get(g, 0) for g in groups if s_of[g] == si)))
                           for si, st in enumerate(strategies)]
                series.append((POPULATION_MEAN, gam.mean(axis=1), int(counts.sum())))
            else:
                series.append((POPULATION_MEAN, self.draws(f"{part}_mu"), int(counts.sum())))  # mu: S, K
            for g, w, n in series:
                lo, hi = hdi_columns(w)
                for ki, k in enumerate(preds):
                    rows.append({"group": g, "part": part, "term": k, "mean": float(w[:, ki].mean()),
                                 "hdi_lo": float(lo[ki]), "hdi_hi": float(hi[ki]), "p_positive": np.nan,
                                 "n_rows": n, "hdi_prob": HDI_PROB})
                if {"popularity", "reliability"} <= set(preds):
                    diff = w[:, preds.index("popularity")] - w[:, preds.index("reliability")]
                    dlo, dhi = hdi_columns(diff[:, None])
                    rows.append({"group": g, "part": part, "term": "popularity - reliability",
                                 "mean": float(diff.mean()), "hdi_lo": float(dlo[0]), "hdi_hi": float(dhi[0]),
                                 "p_positive": float((diff > 0).mean()), "n_rows": n, "hdi_prob": HDI_PROB})
        t = pd.DataFrame(rows)
        t["scale"] = np.where(t.term.isin(INDICATORS), "logit difference, 1 vs 0 (indicator)",
                              "logit per SD of the predictor")
        return t

    def strategy_contrasts(self, baseline: str = "zero-shot", pairwise: bool = False) -> pd.DataFrame:
        """Strategy effects on the slopes (``strategy_effects=True``): per part and predictor (and
        popularity - reliability), gamma[s] - gamma[baseline] for every other strategy s (with
        ``pairwise``: gamma[a] - gamma[b] for every pair, b before a in the strategies' order), the
        posterior mean, 94% HDI and P(> 0), in logit per SD of the predictor. gamma[s] is strategy
        s's slope averaged over the LLMs, so a contrast is the strategy's effect on the slope with
        the LLM x strategy interaction (tau) as its noise."""
        if not self.config["strategy_effects"]:
            raise InputError("discernment model: strategy_contrasts needs strategy_effects=True (the strategies are "
                             "not parameters otherwise)")
        if self.idata is None:
            raise RuntimeError(f"{self.name}: fit() or load() first")
        preds = list(self.config["predictors"])
        post = self.idata["posterior"]
        rows = []
        for part in PARTS:
            var = f"{part}_strategy_slope"
            if var not in post.data_vars:
                continue
            gam = self.draws(var)  # S, strategies, K
            strategies = list(post[var].coords[f"{part}_strategy"].values)
            if pairwise:
                pairs = [(a, b) for i, b in enumerate(strategies) for a in strategies[i + 1:]]
            else:
                if baseline not in strategies:
                    raise InputError(f"discernment model: baseline strategy {baseline!r} is not in the {part} part's "
                                     f"data; choose from {', '.join(strategies)}")
                pairs = [(a, baseline) for a in strategies if a != baseline]
            terms = [(k, np.eye(len(preds))[i]) for i, k in enumerate(preds)]
            if {"popularity", "reliability"} <= set(preds):
                w = np.zeros(len(preds))
                w[preds.index("popularity")], w[preds.index("reliability")] = 1.0, -1.0
                terms.append(("popularity - reliability", w))
            for a, b in pairs:
                diff = gam[:, strategies.index(a)] - gam[:, strategies.index(b)]  # S, K
                for term, w in terms:
                    x = diff @ w
                    lo, hi = hdi_columns(x[:, None])
                    rows.append({"part": part, "term": term, "contrast": f"{a} - {b}", "strategy": a, "baseline": b,
                                 "mean": float(x.mean()), "hdi_lo": float(lo[0]), "hdi_hi": float(hi[0]),
                                 "p_positive": float((x > 0).mean()), "hdi_prob": HDI_PROB})
        t = pd.DataFrame(rows)
        t["scale"] = "logit per SD of the predictor"
        return t


DISCERNMENT_SCALE_PRIORS = ((2.0, 0.25), (2.0, 0.1), (5.0, 1.0))  # (tau_shape, tau_sd): the default, tighter, previous


def scale_prior_label(shape: float, sd: float) -> str:
    """'Gamma(2, 8)': tau ~ Gamma(shape, rate = shape / sd)."""
    return f"Gamma({shape:g}, {shape / sd:g})"


def sensitivity_fit_name(shape: float, sd: float) -> str:
    """The saved fit's name (models folder) of the discernment model under one scale prior: the main
    fit's own name under the default prior, else 'discernment_tau_<shape>_<sd>'."""
    c = DiscernmentModel.default_config
    if (float(shape), float(sd)) == (float(c["tau_shape"]), float(c["tau_sd"])):
        return DiscernmentModel.name
    return f"{DiscernmentModel.name}_tau_{shape:g}_{sd:g}".replace(".", "p")


def _check_priors(priors: tuple[tuple[float, float], ...]) -> None:
    for shape, sd in priors:
        if not (shape > 0 and sd > 0):
            raise InputError(f"a scale prior needs tau_shape > 0 and tau_sd > 0, got ({shape}, {sd})")


def prior_sensitivity_table(fits: dict[str, "DiscernmentModel"]) -> pd.DataFrame:
    """The slopes (and popularity - reliability) of each fit (label -> fitted model): one row per
    prior x part x group x term with the posterior mean, 94 % HDI, the part's median tau per term
    and the fit's convergence flag."""
    rows = []
    for label, m in fits.items():
        t = m.summary()
        t.insert(0, "scale_prior", label)
        preds = list(m.config["predictors"])
        tau_med = {(part, k): float(np.median(m.draws(f"{part}_tau")[:, i])) for part in PARTS
                   if f"{part}_tau" in m.idata["posterior"].data_vars for i, k in enumerate(preds)}
        t["tau_median"] = [tau_med.get((p, k), np.nan) for p, k in zip(t.part, t.term)]
        rows.append(t[["scale_prior", "part", "group", "term", "mean", "hdi_lo", "hdi_hi", "tau_median", "converged"]])
    return pd.concat(rows, ignore_index=True)


def discernment_prior_sensitivity(df: pd.DataFrame, priors: tuple[tuple[float, float], ...] = DISCERNMENT_SCALE_PRIORS,
                                  fit_kwargs: dict[str, Any] | None = None, models_dir: Any = None,
                                  **config: Any) -> pd.DataFrame:
    """The discernment model's slopes (and popularity - reliability) under each between-group scale
    prior tau ~ Gamma(tau_shape, tau_shape / tau_sd) (mean tau_sd): one row per prior x part x group
    x term with the posterior mean, 94 % HDI, the part's median tau per term and each fit's
    convergence flag; the default, a tighter one and the previous default Gamma(5, 5).

    ``models_dir``: each fit is saved there (`sensitivity_fit_name`) and a matching saved fit is
    reused (`BayesModel.fit_or_load`), so a report can show the table without fitting
    (`load_prior_sensitivity`)."""
    _check_priors(priors)
    fits = {}
    for shape, sd in priors:
        cfg = {**config, "tau_shape": float(shape), "tau_sd": float(sd)}
        if models_dir is None:
            m = DiscernmentModel(df, **cfg)
            m.fit(**(fit_kwargs or {}))
        else:
            m = DiscernmentModel.fit_or_load(df, models_dir, sensitivity_fit_name(shape, sd), fit_kwargs=fit_kwargs or {},
                                             **cfg)
        fits[scale_prior_label(shape, sd)] = m
    return prior_sensitivity_table(fits)


def load_prior_sensitivity(df: pd.DataFrame, models_dir: Any,
                           priors: tuple[tuple[float, float], ...] = DISCERNMENT_SCALE_PRIORS
                           ) -> tuple[dict[str, "DiscernmentModel"], dict[str, str]]:
    """The saved fits of `discernment_prior_sensitivity` (never fits): (label -> model for each
    prior whose fit is saved and current, label -> why not for the others)."""
    _check_priors(priors)
    fits, missing = {}, {}
    for shape, sd in priors:
        label = scale_prior_label(shape, sd)
        try:
            fits[label] = DiscernmentModel.load(df, models_dir, sensitivity_fit_name(shape, sd),
                                                tau_shape=float(shape), tau_sd=float(sd))
        except (FileNotFoundError, StaleFitError, InputError) as exc:
            missing[label] = str(exc)
    return fits, missing

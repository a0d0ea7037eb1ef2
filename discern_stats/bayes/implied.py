"""What a fitted discernment model implies on the paper's scale (issue 25.4): probabilities of
updating, expected update sizes and correct-defense rates in percent, and their differences in
percentage points, per group (LLM x strategy) and as the mean over groups, each with a 94 % HDI
over the posterior draws.

For one posterior draw, a group g and a predictor vector x (z-scores; `DiscernmentModel.scales`),
each part's linear predictor is eta_p = a_p[g] + b_p[g] . x + u_p, with a new item's effect
u_p ~ N(0, sigma_p[g]) (the parts' item effects are independent, so expectations of products of
parts are products of expectations). The item effect is integrated out, not set to 0. With the
crossed effects on (issue 25.2), the quantities are for a new item from a new source: u_p is then the
sum of the nested item effect, the shared item effect and the source effect, independent normals,
so sigma_p[g]^2 = sigma_item[g]^2 + sigma_shared_item^2 + sigma_source^2:

    m(x)  = E_u logistic(eta_move + u)       = P(update) = P(response != none)
    w(x)  = E_u logistic(eta_away + u)       = P(away | update)
    c(x)  = E_u logistic(eta_full + u)       = P(full | update toward the claim)
    q(x)  = E logistic(N(eta_fraction, sqrt(sigma_fraction[g]^2 + s[g]^2)))  = E[f | partial]

    P(away) = m w,   P(full) = m (1 - w) c,   P(partial) = m (1 - w) (1 - c),   P(none) = 1 - m
    E[f]    = P(full) + P(partial) q + P(away) f_away

where f = (P2 - P1) / (C - P1) is the fraction of the way to the claim. The model does not
describe the size of an "away" move (away from the claim, f < 0, or past it, f > 1, counted in
`DiscernmentModel.outcome_counts`), so E[f] counts it as ``away_value`` (default 0: the expected
move toward the claim, with away moves moving nothing toward it). Each E_u is a Gauss-Hermite
quadrature with `GH_NODES` nodes: E g(eta + sd Z) = pi^(-1/2) sum_i w_i g(eta + sqrt(2) sd x_i)
(measured against scipy's adaptive quadrature over |eta| <= 5: error <= 2e-7 at sd <= 3 and <= 1e-5
at sd = 5, i.e. 0.001 percentage points; 32 nodes gave 8e-4 at sd = 5).

- `implied_grid`: these quantities at each predictor's -1 SD, +1 SD and the data's min and max
  (the other predictors at 0, their mean; an indicator at 0 and 1).
- `implied_effects`: the change from -1 SD to +1 SD (indicator: 0 to 1) in percentage points, and
  popularity - reliability (the difference of those two changes) with P(> 0). The opt-in
  ``prior_correct`` contrast (0 -> 1 with improvement at its mean) is partly off the data's support,
  since a correct prior always has I~ = -1; `implied_correct_defense` is the on-support quantity.
- `implied_correct_defense`: the model's correct-defense rate, P(none) averaged over the group's
  own rows whose prior is correct and whose claim is wrong (the rows `stats.l2d` computes CD on),
  at their own predictor values (improvement is I~ = -1 there under an exact rule). Under an exact
  rule CD is 1 - P(P2 != P1 | P1 = T, C != T), this same event; under a tolerance rule a small move
  that stays within it counts as a defense in CD and as a move here, so the model's rate is then a
  lower bound.

"(mean over groups)": per draw, the unweighted mean of the groups' quantities (intercepts and
item-effect scales are per group, not pooled, so there is no new-group prediction to make).
Draws are thinned evenly to at most ``max_draws``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import InputError
from ..core.vocab import MEAN_OVER_GROUPS
from .base import HDI_PROB, hdi_columns

GH_NODES = 64
# the crossed effects' scales (`DiscernmentModel` with source_effects / shared_item_effects), one per part
CROSSED_SCALES = ("sigma_source", "sigma_shared_item")
POOLED = MEAN_OVER_GROUPS  # the unweighted mean over the fitted groups (`core.vocab`)
QUANTITIES = ("P(update)", "P(away)", "P(full)", "P(partial)", "E[f]")
HEADLINE = ("P(update)", "E[f]")  # the quantities effects are reported for
_CHUNK = 4_000_000  # draws x rows x nodes per block


def _expit(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def expit_normal_mean(eta: np.ndarray, sd: np.ndarray, nodes: int = GH_NODES) -> np.ndarray:
    """E logistic(eta + sd Z), Z ~ N(0, 1), elementwise, by Gauss-Hermite quadrature."""
    x, w = np.polynomial.hermite.hermgauss(nodes)
    eta, sd = np.broadcast_arrays(np.asarray(eta, float), np.asarray(sd, float))
    out = np.empty(eta.shape)
    flat_e, flat_s, flat_o = eta.reshape(-1), sd.reshape(-1), out.reshape(-1)
    step = max(1, _CHUNK // nodes)
    for i in range(0, flat_e.size, step):
        v = flat_e[i:i + step, None] + np.sqrt(2.0) * flat_s[i:i + step, None] * x
        flat_o[i:i + step] = _expit(v) @ w / np.sqrt(np.pi)
    return out


class _Posterior:
    """The draws the quantities need, aligned to the model's groups (sorted), thinned."""

    def __init__(self, model: Any, max_draws: int = 4000):
        if getattr(model, "idata", None) is None:
            raise InputError("implied quantities need a fitted (or loaded) discernment model")
        if not (isinstance(max_draws, (int, np.integer)) and max_draws >= 1):
            raise InputError(f"max_draws must be a whole number >= 1, got {max_draws!r}")
        self.model = model
        post = model.idata["posterior"]
        self.groups = sorted(model.data.group.unique())
        self.terms = list(model.config["predictors"])
        n = int(post.sizes["chain"] * post.sizes["draw"])
        self.idx = np.unique(np.linspace(0, n - 1, min(n, int(max_draws))).round().astype(int))
        S, G, K = len(self.idx), len(self.groups), len(self.terms)
        self.S = S
        self.params: dict[str, dict[str, np.ndarray]] = {}
        for part in ("move", "away", "full", "fraction"):
            p = {"a": np.full((S, G), np.nan), "b": np.full((S, G, K), np.nan), "sd": np.zeros((S, G))}
            if f"{part}_slope" in post.data_vars:
                have = list(post[f"{part}_slope"].coords[f"{part}_group"].values)
                gi = [self.groups.index(g) for g in have]
                p["a"][:, gi] = model.draws(f"{part}_intercept")[self.idx]
                p["b"][:, gi] = model.draws(f"{part}_slope")[self.idx]
                sd2 = np.zeros((S, len(gi)))
                if f"{part}_sigma_item" in post.data_vars:
                    sd2 = sd2 + model.draws(f"{part}_sigma_item")[self.idx] ** 2
                for crossed in CROSSED_SCALES:  # a new source and a new item: their effects add
                    if f"{part}_{crossed}" in post.data_vars:
                        sd2 = sd2 + model.draws(f"{part}_{crossed}")[self.idx][:, None] ** 2
                if part == "fraction" and "fraction_resid_sd" in post.data_vars:
                    sd2 = sd2 + model.draws("fraction_resid_sd")[self.idx] ** 2
                p["sd"][:, gi] = np.sqrt(sd2)
            self.params[part] = p

    def quantities(self, X: np.ndarray, g: np.ndarray, away_value: float = 0.0) -> dict[str, np.ndarray]:
        """Each quantity of `QUANTITIES` at design rows ``X`` (M x K z-scores) of groups ``g`` (M
        indices into ``groups``): (draws, M) arrays, probabilities in [0, 1]."""
        X = np.asarray(X, float)
        e = {}
        for part, p in self.params.items():
            eta = p["a"][:, g] + np.einsum("mk,smk->sm", X, p["b"][:, g])
            e[part] = expit_normal_mean(eta, p["sd"][:, g])
        m, w, c, q = e["move"], e["away"], e["full"], e["fraction"]
        out = {"P(update)": m, "P(away)": m * w, "P(full)": m * (1 - w) * c, "P(partial)": m * (1 - w) * (1 - c)}
        out["E[f]"] = out["P(full)"] + out["P(partial)"] * q + out["P(away)"] * away_value
        return out


def _summ(v: np.ndarray) -> tuple[float, float, float]:
    v = v[np.isfinite(v)]
    if not len(v):
        return np.nan, np.nan, np.nan
    lo, hi = hdi_columns(v[:, None])
    return float(v.mean()), float(lo[0]), float(hi[0])


def _points(model: Any, term: str) -> list[tuple[str, float]]:
    """(label, z) of the grid points of one predictor."""
    if term in getattr(model, "scales", {}) and model.scales[term].get("over", "").startswith("indicator"):
        return [("0", 0.0), ("1", 1.0)]
    z = model.data[f"z_{term}"].to_numpy(float)
    return [("min", float(z.min())), ("-1 SD", -1.0), ("+1 SD", 1.0), ("max", float(z.max()))]


def _grid_draws(P: _Posterior, away_value: float) -> tuple[list[tuple[str, str, float]], dict[str, np.ndarray]]:
    """Every (term, point) for every group: the points and (draws, G, points) arrays per quantity."""
    K, G = len(P.terms), len(P.groups)
    pts = [(t, lab, z) for t in P.terms for lab, z in _points(P.model, t)]
    X = np.zeros((len(pts), K))
    for i, (t, _, z) in enumerate(pts):
        X[i, P.terms.index(t)] = z
    Xg = np.tile(X, (G, 1))
    g = np.repeat(np.arange(G), len(pts))
    q = P.quantities(Xg, g, away_value)
    return pts, {k: v.reshape(P.S, G, len(pts)) for k, v in q.items()}


def _with_pooled(P: _Posterior, arr: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(group, draws of the last axes) per group, then the mean over groups (axis 1)."""
    return [(g, arr[:, i]) for i, g in enumerate(P.groups)] + [(POOLED, np.nanmean(arr, axis=1)
                                                                if np.isfinite(arr).any() else arr[:, 0])]


def implied_grid(model: Any, max_draws: int = 4000, away_value: float = 0.0) -> pd.DataFrame:
    """Per group (and the mean over groups), predictor and grid point: each of `QUANTITIES` in
    percent (posterior mean and 94 % HDI); ``value`` is the point in the predictor's own units."""
    P = _Posterior(model, max_draws)
    pts, q = _grid_draws(P, away_value)
    rows = []
    for quantity, arr in q.items():
        for g, a in _with_pooled(P, arr):
            for j, (t, lab, z) in enumerate(pts):
                sc = model.scales[t]
                mean, lo, hi = _summ(100 * a[:, j])
                rows.append({"group": g, "term": t, "at": lab, "z": z, "value": sc["mean"] + z * sc["sd"],
                             "quantity": quantity, "mean": mean, "hdi_lo": lo, "hdi_hi": hi})
    out = pd.DataFrame(rows)
    out["unit"] = "%"
    out["hdi_prob"] = HDI_PROB
    return out


def implied_effects(model: Any, max_draws: int = 4000, away_value: float = 0.0,
                    quantities: tuple[str, ...] = HEADLINE) -> pd.DataFrame:
    """Per group (and the mean over groups) and quantity: each predictor's change from -1 SD to +1
    SD (an indicator: from 0 to 1), the others at 0, in percentage points (posterior mean, 94 % HDI,
    P(> 0)); and "popularity - reliability", the popularity change minus the reliability change."""
    P = _Posterior(model, max_draws)
    pts, q = _grid_draws(P, away_value)
    where = {(t, lab): j for j, (t, lab, _) in enumerate(pts)}
    rows = []
    for quantity in quantities:
        arr = q[quantity]
        eff = {}
        for t in P.terms:
            hi_lab, lo_lab = ("1", "0") if (t, "1") in where else ("+1 SD", "-1 SD")
            eff[t] = 100 * (arr[:, :, where[(t, hi_lab)]] - arr[:, :, where[(t, lo_lab)]])
        if {"popularity", "reliability"} <= set(eff):
            eff["popularity - reliability"] = eff["popularity"] - eff["reliability"]
        for t, e in eff.items():
            for g, d in _with_pooled(P, e):
                mean, lo, hi = _summ(d)
                rows.append({"group": g, "quantity": quantity, "term": t,
                             "contrast": "0 -> 1" if t in model.scales and model.scales[t]["over"].startswith("indicator")
                             else "-1 SD -> +1 SD", "mean": mean, "hdi_lo": lo, "hdi_hi": hi,
                             "p_positive": float(np.mean(d[np.isfinite(d)] > 0)) if np.isfinite(d).any() else np.nan})
    out = pd.DataFrame(rows)
    out["unit"] = "percentage points"
    out["hdi_prob"] = HDI_PROB
    return out


def correct_defense_rows(model: Any) -> np.ndarray:
    """The rows of ``model.data`` CD is computed on: prior correct and claim wrong (the item's rule)."""
    return np.asarray(model.prior_correct_rows, bool) & np.asarray(model.claim_wrong_rows, bool)


def implied_correct_defense(model: Any, max_draws: int = 4000) -> pd.DataFrame:
    """Per group (and the mean over groups with such rows): the model's correct-defense rate in
    percent, P(none) = 1 - P(update) averaged over the group's rows with a correct prior and a wrong
    claim at their own predictor values (item effects integrated out), with a 94 % HDI, beside the
    observed share of those rows that did not move and their number."""
    P = _Posterior(model, max_draws)
    d = model.data
    sel = correct_defense_rows(model)
    zcols = [f"z_{t}" for t in P.terms]
    by = list(model.config["group_by"])
    rows, per_group = [], []
    for gi, g in enumerate(P.groups):
        r = d[sel & (d.group.to_numpy() == g)]
        keys = r[by].iloc[0].to_dict() if len(r) else d[d.group == g][by].iloc[0].to_dict()
        if not len(r):
            rows.append({"group": g, **keys, "mean": np.nan, "hdi_lo": np.nan, "hdi_hi": np.nan,
                         "observed": np.nan, "n_rows": 0})
            continue
        u, counts = np.unique(r[zcols].to_numpy(float), axis=0, return_counts=True)
        m = P.quantities(u, np.full(len(u), gi))["P(update)"]  # S x unique rows
        cd = 100 * (1 - (m * counts).sum(1) / counts.sum())
        per_group.append(cd)
        mean, lo, hi = _summ(cd)
        rows.append({"group": g, **keys, "mean": mean, "hdi_lo": lo, "hdi_hi": hi,
                     "observed": 100 * float((r.response == "none").mean()), "n_rows": int(len(r))})
    if per_group:
        pooled = np.mean(per_group, axis=0)
        mean, lo, hi = _summ(pooled)
        obs = [x["observed"] for x in rows if x["n_rows"]]
        rows.append({"group": POOLED, **{b: "(all)" for b in by}, "mean": mean, "hdi_lo": lo, "hdi_hi": hi,
                     "observed": float(np.mean(obs)), "n_rows": int(sum(x["n_rows"] for x in rows))})
    out = pd.DataFrame(rows)
    out["unit"] = "%"
    out["hdi_prob"] = HDI_PROB
    return out

"""The discernment model's implied quantities on the paper's scale (issue 25.4): the quadrature
against numerical integration, the grid, effects and correct-defense rates against a brute-force
Monte Carlo simulation of new items from the same posterior draws, the away split and the opt-in
prior_correct term. The posterior is written by hand (known parameters, no sampling), so each
check is exact up to the simulation's noise and runs in seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import integrate

from discern_stats.bayes import DiscernmentModel
from discern_stats.bayes import implied as I
from discern_stats.bayes.base import hdi_columns
from discern_stats.core.errors import InputError
from discern_stats.core.vocab import AWAY_KINDS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_discernment import simulate  # noqa: E402

PARTS = ("move", "away", "full", "fraction")


def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def _attach(m: DiscernmentModel, draws: int = 60, seed: int = 0, sigma: float = 1.5, crossed: float = 0.0) -> dict:
    """A hand-written posterior: per part, intercepts, slopes and item SDs drawn around fixed
    values (large item SDs, so integrating u differs from setting it to 0); with ``crossed`` > 0
    also the scales of a source effect and of a shared item effect (one per part and draw, around
    ``crossed``); returns the arrays."""
    import arviz as az
    rng, rng_crossed = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    K = len(m.config["predictors"])
    post, dims, coords, truth = {}, {}, {"predictor": list(m.config["predictors"])}, {}
    for i, (part, spec) in enumerate(m.specs().items()):
        groups = spec.coords[f"{part}_group"]
        G = len(groups)
        a = rng.normal([0.3, -1.5, 0.2, 0.1][i], 0.3, (1, draws, G))
        b = rng.normal(0.4, 0.3, (1, draws, G, K)) * np.array([1.0, -0.7, 0.5, 0.2][:K])
        sig = sigma * np.exp(rng.normal(0, 0.2, (1, draws, G)))
        post[f"{part}_intercept"], post[f"{part}_slope"], post[f"{part}_sigma_item"] = a, b, sig
        dims[f"{part}_intercept"] = dims[f"{part}_sigma_item"] = [f"{part}_group"]
        dims[f"{part}_slope"] = [f"{part}_group", "predictor"]
        coords[f"{part}_group"] = groups
        truth[part] = {"a": a[0], "b": b[0], "sigma": sig[0], "groups": list(groups)}
        if crossed:
            for name in I.CROSSED_SCALES:
                post[f"{part}_{name}"] = crossed * np.exp(rng_crossed.normal(0, 0.2, (1, draws)))
                truth[part].setdefault(name, post[f"{part}_{name}"][0])
        if part == "fraction":
            s = np.exp(rng.normal(-0.3, 0.2, (1, draws, G)))
            post["fraction_resid_sd"] = s
            dims["fraction_resid_sd"] = ["fraction_group"]
            truth[part]["s"] = s[0]
    m.idata = az.from_dict({"posterior": post}, coords=coords, dims=dims)
    m.diagnostics = {"ok": True, "problems": []}
    return truth


def _brute(truth: dict, group: str, X: np.ndarray, n_items: int, rng, plug_in: bool = False) -> dict:
    """Simulate n_items new items per draw and design row: (draws, rows) means of each response
    and of f (away counted 0)."""
    res = {}
    for part, t in truth.items():
        gi = t["groups"].index(group)
        eta = (t["a"][:, gi][:, None] + np.einsum("mk,sk->sm", X, t["b"][:, gi]))[:, :, None]
        u = 0.0 if plug_in else t["sigma"][:, gi, None, None] * rng.standard_normal(eta.shape[:2] + (n_items,))
        for name in I.CROSSED_SCALES:  # each new item comes from a new source: both effects drawn afresh
            if name in t and not plug_in:
                u = u + t[name][:, None, None] * rng.standard_normal(eta.shape[:2] + (n_items,))
        res[part] = eta + u
        if part == "fraction":
            res["eps"] = t["s"][:, gi, None, None] * rng.standard_normal(eta.shape[:2] + (n_items,))
    shape = res["move"].shape[:2] + (n_items,)
    if plug_in:  # u = 0: probabilities themselves, no simulation
        pm, pa, pf = (_logistic(res[p][..., 0]) for p in ("move", "away", "full"))
        return {"P(update)": pm, "P(away)": pm * pa, "P(full)": pm * (1 - pa) * pf}
    moved = rng.random(shape) < _logistic(res["move"])
    away = moved & (rng.random(shape) < _logistic(res["away"]))
    full = moved & ~away & (rng.random(shape) < _logistic(res["full"]))
    partial = moved & ~away & ~full
    f = np.where(full, 1.0, np.where(partial, _logistic(res["fraction"] + res["eps"]), 0.0))
    return {"P(update)": moved.mean(-1), "P(away)": away.mean(-1), "P(full)": full.mean(-1),
            "P(partial)": partial.mean(-1), "E[f]": f.mean(-1)}


@pytest.fixture(scope="module")
def fitted():
    df, _ = simulate(n_llm=2, n_strategy=2, n_items=30, per_item=10, seed=3)
    m = DiscernmentModel(df)
    truth = _attach(m)
    return m, truth, df


def test_quadrature_matches_numerical_integration():
    eta = np.array([-4.0, -1.0, 0.0, 0.7, 3.0, 2.0])
    sd = np.array([0.0, 0.5, 1.0, 2.0, 3.0, 5.0])
    got = I.expit_normal_mean(eta, sd)
    for e, s, g in zip(eta, sd, got):
        want = _logistic(e) if s == 0 else integrate.quad(
            lambda z: _logistic(e + s * z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi), -12, 12, epsabs=1e-13)[0]
        assert g == pytest.approx(want, abs=1e-6 if s <= 3 else 2e-5), (e, s)
    # the check can fail: too few nodes miss the integral at a wide item SD
    assert abs(I.expit_normal_mean(np.array([2.0]), np.array([5.0]), nodes=8)[0] - got[-1]) > 1e-3


def test_grid_against_monte_carlo(fitted):
    """Every quantity at every grid point of every group equals, averaged over the draws, the share
    (mean f) in new items simulated from the same draws (200,000 per point: SE <= 0.0011; tolerance
    0.006), and setting u = 0 instead misses it by more than that (the check can fail)."""
    m, truth, _ = fitted
    g = I.implied_grid(m)
    rng = np.random.default_rng(1)
    group = sorted(m.data.group.unique())[1]
    sub = g[g.group == group]
    terms = list(m.config["predictors"])
    pts = sub.drop_duplicates(["term", "at"])[["term", "at", "z"]].to_numpy()
    X = np.zeros((len(pts), len(terms)))
    for i, (t, _, z) in enumerate(pts):
        X[i, terms.index(t)] = z
    mc = _brute(truth, group, X, 3_500, rng)
    plug = _brute(truth, group, X, 1, rng, plug_in=True)
    worst_plug = 0.0
    for q in I.QUANTITIES:
        got = sub[sub.quantity == q].set_index(["term", "at"]).loc[[(t, a) for t, a, _ in pts], "mean"].to_numpy()
        want = 100 * mc[q].mean(0)
        assert np.abs(got - want).max() < 0.6, (q, got, want)
        if q in plug:
            worst_plug = max(worst_plug, np.abs(100 * plug[q].mean(0) - want).max())
    assert worst_plug > 2.0
    assert set(sub["at"]) == {"min", "-1 SD", "+1 SD", "max"}
    rel = m.scales["reliability"]
    row = sub[(sub.term == "reliability") & (sub["at"] == "+1 SD")].iloc[0]
    assert row.value == pytest.approx(rel["mean"] + rel["sd"])
    assert sub[(sub.term == "reliability") & (sub["at"] == "max")].z.iloc[0] == pytest.approx(m.data.z_reliability.max())


def test_grid_integrates_the_crossed_effects():
    """With source and shared item effects in the posterior, the grid is for a new item from a new
    source: it equals a Monte Carlo that draws all three effects afresh (200,000 per point), and a
    posterior without the crossed scales (the same draws otherwise) misses that by more than the
    tolerance (the check can fail)."""
    df, _ = simulate(n_llm=2, n_strategy=1, n_items=20, per_item=8, seed=4)
    m, plain = DiscernmentModel(df), DiscernmentModel(df)
    truth = _attach(m, sigma=0.8, crossed=1.2)
    _attach(plain, sigma=0.8)  # same seed: the same intercepts, slopes and nested item scales
    group = sorted(m.data.group.unique())[0]
    X = np.array([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])[:, :len(m.config["predictors"])]
    mc = _brute(truth, group, X, 3_500, np.random.default_rng(2))
    gi = [sorted(m.data.group.unique()).index(group)] * len(X)
    got = I._Posterior(m).quantities(X, np.array(gi))
    without = I._Posterior(plain).quantities(X, np.array(gi))
    worst_without = 0.0
    for q in I.QUANTITIES:
        want = mc[q].mean(0)
        assert np.abs(got[q].mean(0) - want).max() < 0.006, (q, got[q].mean(0), want)
        worst_without = max(worst_without, np.abs(without[q].mean(0) - want).max())
    assert worst_without > 0.02


def _quad_probs(truth: dict, gi_name: str, x: np.ndarray) -> dict:
    """Per draw, P(update) and E[f] at design row x by scipy quadrature (no Gauss-Hermite)."""
    S = truth["move"]["a"].shape[0]
    out = {"P(update)": np.zeros(S), "E[f]": np.zeros(S)}
    dens = lambda z: np.exp(-z * z / 2) / np.sqrt(2 * np.pi)  # noqa: E731
    for s in range(S):
        e = {}
        for part, t in truth.items():
            gi = t["groups"].index(gi_name)
            eta = t["a"][s, gi] + x @ t["b"][s, gi]
            sd = t["sigma"][s, gi] if part != "fraction" else np.hypot(t["sigma"][s, gi], t["s"][s, gi])
            e[part] = integrate.quad(lambda z: _logistic(eta + sd * z) * dens(z), -12, 12, epsabs=1e-12)[0]
        pm, pa, pf, q = e["move"], e["away"], e["full"], e["fraction"]
        out["P(update)"][s] = pm
        out["E[f]"][s] = pm * (1 - pa) * (pf + (1 - pf) * q)
    return out


def test_effects_and_popularity_minus_reliability_against_quadrature(fitted):
    """The -1 SD -> +1 SD effects (pp), popularity - reliability, its HDI and P(> 0), per group and
    pooled, from an independent per-draw scipy integration on 20 draws."""
    m, truth, _ = fitted
    e = I.implied_effects(m, max_draws=60)
    terms = list(m.config["predictors"])
    groups = sorted(m.data.group.unique())

    def x(term, z):
        v = np.zeros(len(terms))
        v[terms.index(term)] = z
        return v
    per = {}
    for g in groups:
        d = {t: {q: 100 * (_quad_probs(truth, g, x(t, 1))[q] - _quad_probs(truth, g, x(t, -1))[q])
                 for q in I.HEADLINE} for t in ("reliability", "popularity")}
        per[g] = d
    for q in I.HEADLINE:
        for g in groups + [I.POOLED]:
            if g == I.POOLED:
                diff = np.mean([per[h]["popularity"][q] - per[h]["reliability"][q] for h in groups], axis=0)
                rel = np.mean([per[h]["reliability"][q] for h in groups], axis=0)
            else:
                diff = per[g]["popularity"][q] - per[g]["reliability"][q]
                rel = per[g]["reliability"][q]
            r = e[(e.group == g) & (e.quantity == q)].set_index("term")
            assert r.loc["reliability", "mean"] == pytest.approx(rel.mean(), abs=1e-6)
            assert r.loc["popularity - reliability", "mean"] == pytest.approx(diff.mean(), abs=1e-6)
            assert r.loc["popularity - reliability", "p_positive"] == pytest.approx((diff > 0).mean())
            lo, hi = hdi_columns(diff[:, None])
            assert (r.loc["popularity - reliability", "hdi_lo"], r.loc["popularity - reliability", "hdi_hi"]) == \
                pytest.approx((lo[0], hi[0]), abs=1e-6)
    assert (e.unit == "percentage points").all() and set(e.contrast) == {"-1 SD -> +1 SD"}


def test_correct_defense_against_monte_carlo(fitted):
    """The model's CD per group: P(none) over the group's rows with P1 = T and C != T (found here
    from the raw trials), by simulating new items for each such row; pooled = mean over groups."""
    m, truth, df = fitted
    cd = I.implied_correct_defense(m).set_index("group")
    rows = I.correct_defense_rows(m)
    d = df[df.claim != df.prior].reset_index(drop=True)  # simulate() rows are all valid
    assert rows.sum() == ((d.prior == d.truth) & (d.claim != d.truth)).sum()
    rng = np.random.default_rng(2)
    terms = [f"z_{t}" for t in m.config["predictors"]]
    rates = []
    for g in sorted(m.data.group.unique()):
        X = m.data[rows & (m.data.group == g).to_numpy()][terms].to_numpy(float)
        mc = _brute({"move": truth["move"], "away": truth["away"], "full": truth["full"], "fraction": truth["fraction"]},
                    g, X, 60, rng)
        want = 100 * (1 - mc["P(update)"].mean())
        rates.append(want)
        assert cd.loc[g, "mean"] == pytest.approx(want, abs=0.8), g
        assert cd.loc[g, "n_rows"] == len(X)
        obs = m.data[rows & (m.data.group == g).to_numpy()].response.eq("none").mean()
        assert cd.loc[g, "observed"] == pytest.approx(100 * obs)
    assert cd.loc[I.POOLED, "mean"] == pytest.approx(np.mean(rates), abs=0.5)
    assert cd.loc[I.POOLED, "llm"] == "(all)"


def test_unfitted_model_is_one_line():
    df, _ = simulate(n_llm=1, n_strategy=1, n_items=5, per_item=5, seed=1)
    with pytest.raises(InputError, match="fitted"):
        I.implied_grid(DiscernmentModel(df))


def test_away_split_by_direction():
    """f < 0 (away from the claim) and f > 1 (past it), hand-worked: prior 100, claim 200."""
    base = {"llm": "m", "strategy": "zero-shot", "truth": 150.0, "prior": 100.0, "claim": 200.0, "valid": True}
    post = [100.0, 150.0, 200.0, 250.0, 90.0, 80.0, 201.0]
    df = pd.DataFrame([{**base, "item_id": f"i{i % 2}", "truth": [150.0, 120.0][i % 2], "source": f"s{i % 3}", "reliability": [0.2, 0.5, 0.9][i % 3],
                        "popularity": [1.0, 5.0, 3.0][i % 3], "posterior": p} for i, p in enumerate(post)])
    c = DiscernmentModel(df).outcome_counts().iloc[0]
    names = list(AWAY_KINDS)
    assert (c["away"], c[names[0]], c[names[1]]) == (4, 2, 2)
    assert c["rows"] == 7 and c[names[0]] + c[names[1]] == c["away"]


def test_prior_correct_term_is_opt_in():
    df, _ = simulate(n_llm=2, n_strategy=1, n_items=20, per_item=5, seed=2)
    plain = DiscernmentModel(df)
    assert "prior_correct" not in plain.config["predictors"] and "z_prior_correct" not in plain.data
    m = DiscernmentModel(df, predictors=["reliability", "popularity", "improvement", "prior_correct"])
    d = df[df.claim != df.prior].reset_index(drop=True)
    assert (m.data.z_prior_correct.to_numpy() == (d.prior == d.truth).to_numpy().astype(float)).all()
    assert m.scales["prior_correct"]["over"].startswith("indicator")
    assert all(s.A.shape[1] == 5 for s in m.specs().values())  # intercept + 4 slopes
    # improvement is forced to its minimum (I~ = -1) at every correct prior: why the term exists
    assert np.allclose(m.data.z_improvement[m.data.z_prior_correct == 1], (-1 - m.scales["improvement"]["mean"])
                       / m.scales["improvement"]["sd"])
    _attach(m, draws=30)
    e = I.implied_effects(m, max_draws=30)
    assert set(e[e.term == "prior_correct"].contrast) == {"0 -> 1"}
    assert set(I.implied_grid(m, max_draws=30).query("term == 'prior_correct'")["at"]) == {"0", "1"}

"""Strategy effects in the discernment model (issue 25.3): the structured pooled mean of
`spec.HierarchicalGLM` (b[g] ~ N(gamma[strategy(g)] + alpha[llm(g)], tau), alpha sum-to-zero) in both
Gibbs samplers and the PyMC build. Off: the draws are those of the unstructured model. On: the
conjugate steps against an independent computation (weighted least squares with the prior as extra
rows), recovery of known strategy effects, Gibbs against NUTS on one small model, and
`DiscernmentModel.strategy_contrasts`."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from discern_stats.bayes import DiscernmentModel
from discern_stats.bayes.base import hdi_columns
from discern_stats.bayes.gauss_gibbs import GaussDesign, _pooled_noncentred_regression
from discern_stats.bayes.logit_gibbs import update_pooled_regression
from discern_stats.bayes.spec import Block, HierarchicalGLM, MeanTerm, sum_to_zero_basis
from discern_stats.core.errors import InputError
from discern_stats.core.vocab import MEAN_OVER_GROUPS, POPULATION_MEAN

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_discernment import simulate  # noqa: E402  (the benchmark's generative model)


def _cells(n_strategy=3, n_llm=3):
    """Groups = strategy x LLM; each group's strategy and LLM index."""
    strat = np.repeat(np.arange(n_strategy), n_llm)
    llm = np.tile(np.arange(n_llm), n_strategy)
    return strat, llm


def _spec(family, y, x, ui, strat, llm, n=None, group_index=None, n_group=0, **kw):
    G = len(strat)
    coords = {"g": list(range(G)), "k": ["x"], "s": [f"s{i}" for i in range(strat.max() + 1)],
              "l": [f"l{i}" for i in range(llm.max() + 1)]}
    if group_index is not None:
        coords["w"] = list(range(n_group))
    return HierarchicalGLM(family=family, unit="g", coords=coords,
                           blocks=[Block("a", (), sd=2.5, intercept=True), Block("b", ("k",))],
                           A=np.column_stack([np.ones(len(ui)), x]), unit_index=ui, y=y, n=n,
                           group="w" if group_index is not None else None, group_index=group_index,
                           mean_terms=[MeanTerm("gam", "s", strat, 1.0), MeanTerm("al", "l", llm, 0.5, sum_to_zero=True)],
                           **kw)


def test_sum_to_zero_basis_is_orthonormal_and_centred():
    for n in (2, 3, 5):
        Q = sum_to_zero_basis(n)
        assert Q.shape == (n, n - 1)
        assert np.allclose(Q.T @ Q, np.eye(n - 1)) and np.allclose(Q.sum(axis=0), 0)
        assert np.allclose(Q @ Q.T, np.eye(n) - 1.0 / n)  # the centring projection: exchangeable levels
    with pytest.raises(ValueError, match="at least 2 levels"):
        strat, llm = _cells(2, 1)
        _spec("normal", np.zeros(4), np.zeros(4), np.array([0, 0, 1, 1]), strat, llm)


def test_off_leaves_the_model_and_its_draws_unchanged():
    """strategy_effects defaults to off; off, the specs carry no mean terms, the samplers' layouts no
    X, and the draws equal the default model's bit for bit (the mu path is the same code)."""
    df, _ = simulate(n_llm=2, n_strategy=2, n_items=5, per_item=4, seed=3)
    default, off, on = DiscernmentModel(df), DiscernmentModel(df, strategy_effects=False), \
        DiscernmentModel(df, strategy_effects=True)
    assert DiscernmentModel.default_config["strategy_effects"] is False
    for part in ("move", "fraction"):
        a, b, c = default.specs()[part], off.specs()[part], on.specs()[part]
        assert a.mean_terms == [] and b.mean_terms == [] and len(c.mean_terms) == 2
        design = a.gauss_design() if a.family == "normal" else a.logit_design()
        assert design.mean_X is None and design.mean_sd is None
        pa, _, _ = a.sample(draws=5, tune=5, chains=2, random_seed=4)
        pb, _, _ = b.sample(draws=5, tune=5, chains=2, random_seed=4)
        pc, _, _ = c.sample(draws=5, tune=5, chains=2, random_seed=4)
        assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)
        assert f"{part}_mu" in pa and f"{part}_mu" not in pc and f"{part}_strategy_slope" in pc
    assert "move_mu" in default.check_vars and "move_strategy_slope" in on.check_vars


def _wls(D, r, w, prior_sd):
    """Posterior mean and covariance of c in r ~ N(D c, 1 / w), c ~ N(0, prior_sd): least squares on
    the data rows scaled by sqrt(w) stacked on the prior rows diag(1 / prior_sd) (numpy lstsq)."""
    Da = np.vstack([D * np.sqrt(w)[:, None], np.diag(1.0 / prior_sd)])
    ra = np.r_[r * np.sqrt(w), np.zeros(len(prior_sd))]
    mean = np.linalg.lstsq(Da, ra, rcond=None)[0]
    return mean, np.linalg.inv(Da.T @ Da)


def _close(draws, mean, cov, ztol=4.5, sd_rtol=0.05):
    """Draws (n x d) independent: means within ztol standard errors, SDs within sd_rtol."""
    se = np.sqrt(np.diag(cov) / len(draws))
    z = np.abs(draws.mean(0) - mean) / se
    ratio = draws.std(0) / np.sqrt(np.diag(cov))
    return bool((z < ztol).all() and (np.abs(ratio - 1) < sd_rtol).all()), z, ratio


def test_regression_step_is_the_conjugate_posterior():
    """Step 5': coef | b, tau for a 3 x 3 strategy x LLM layout and two pooled columns, 20,000
    independent chains in one call, against the weighted least-squares posterior of each column
    (b[., k] = X coef[., k] + N(0, tau_k)). The control: the posterior under another tau is rejected."""
    rng = np.random.default_rng(1)
    strat, llm = _cells()
    X = np.column_stack([np.eye(3)[strat], sum_to_zero_basis(3)[llm]])
    sd = np.r_[np.full(3, 1.0), np.full(2, 0.5)]
    b = rng.normal(0, 1, (len(strat), 2))
    tau = np.array([0.3, 0.8])
    C = 20_000
    coef, _ = update_pooled_regression(np.broadcast_to(b, (C, *b.shape)), np.broadcast_to(tau, (C, 2)), X, sd,
                                       2.0, 8.0, rng)
    for k in range(2):
        mean, cov = _wls(X, b[:, k], np.full(len(b), 1 / tau[k] ** 2), sd)
        ok, z, ratio = _close(coef[:, :, k], mean, cov)
        assert ok, (k, z, ratio)
        wrong_mean, wrong_cov = _wls(X, b[:, k], np.full(len(b), 1 / (1.3 * tau[k]) ** 2), sd)
        assert not _close(coef[:, :, k], wrong_mean, wrong_cov)[0]


def test_normal_interweaving_draws_coef_given_z_exactly():
    """Step 6' (normal family): coef | z, tau, rest is drawn from its exact conditional; against the
    weighted least squares of the cells' outcome on D[c, (r, j)] = A[c, j] X[l_c, r] (the offsets
    A tau z and the fixed columns taken off), 20,000 chains in one call."""
    rng = np.random.default_rng(2)
    strat, llm = _cells(2, 3)
    L, n_per, K = len(strat), 15, 2
    ui = np.repeat(np.arange(L), n_per)
    A = np.column_stack([np.ones(len(ui)), rng.standard_normal((len(ui), K))])
    X = np.column_stack([np.eye(2)[strat], sum_to_zero_basis(3)[llm]])
    sd = np.r_[1.0, 1.0, 0.5, 0.5]
    y = rng.standard_normal(len(ui))
    d = GaussDesign(A=A, unit=ui, group=np.zeros(len(ui), int), y=y, n_unit=L, n_group=1, prior_mean=np.zeros(3),
                    prior_sd=np.full(3, 2.0), pooled=np.array([1, 2]), intercepts=np.array([0]), group_effects=False,
                    mean_X=X, mean_sd=sd)
    C = 20_000
    theta = rng.normal(0, 1, (L, 3))
    coef0 = rng.normal(0, 0.5, (X.shape[1], K))
    tau = np.array([0.4, 0.7])
    s = rng.uniform(0.5, 1.5, L)
    lstart = np.flatnonzero(np.r_[True, ui[1:] != ui[:-1]])
    AtA = np.add.reduceat(A[:, :, None] * A[:, None, :], lstart, axis=0)
    _, coef, _ = _pooled_noncentred_regression(np.broadcast_to(theta, (C, L, 3)).copy(),
                                               np.broadcast_to(coef0, (C, *coef0.shape)), np.broadcast_to(tau, (C, K)),
                                               np.broadcast_to(y, (C, len(y))), np.broadcast_to(s, (C, L)), A, ui,
                                               lstart, AtA, d, rng)
    z = (theta[:, 1:] - X @ coef0) / tau  # L x K, fixed by the step
    r = y - A[:, 0] * theta[ui, 0] - (A[:, 1:] * tau * z[ui]).sum(1)
    D = np.einsum("cj,cr->crj", A[:, 1:], X[ui]).reshape(len(ui), -1)  # column (r, j) at r * K + j
    mean, cov = _wls(D, r, 1 / s[ui] ** 2, np.repeat(sd, K))
    ok, zs, ratio = _close(coef.reshape(C, -1), mean, cov)
    assert ok, (zs, ratio)


def _simulate_normal(seed, gam, al, tau=0.1, n_per=40):
    rng = np.random.default_rng(seed)
    strat, llm = _cells(len(gam), len(al))
    ui = np.repeat(np.arange(len(strat)), n_per)
    x = rng.standard_normal(len(ui))
    b = gam[strat] + al[llm] + tau * rng.standard_normal(len(strat))
    y = 0.3 + b[ui] * x + 0.5 * rng.standard_normal(len(ui))
    return y, x, ui, strat, llm


def test_known_strategy_effects_are_recovered():
    """Normal family, 3 strategies x 3 LLMs, known strategy means gamma = (0, 0.8, -0.5) and LLM effects
    (0.3, -0.1, -0.2) (sum 0): every strategy contrast gamma[s] - gamma[0] and LLM effect inside its
    99% HDI, and the 94% HDIs of the contrasts exclude 0 where the truth is 0.5 or more away."""
    gam, al = np.array([0.0, 0.8, -0.5]), np.array([0.3, -0.1, -0.2])
    y, x, ui, strat, llm = _simulate_normal(5, gam, al)
    spec = _spec("normal", y, x, ui, strat, llm, tau_shape=2.0, tau_rate=8.0)
    post, dims, _ = spec.sample(draws=1500, tune=200, chains=2, random_seed=3)
    assert dims["gam"] == ["s", "k"] and dims["al"] == ["l", "k"] and dims["al_raw"] == ["l_contrast", "k"]
    g = post["gam"][..., 0].reshape(-1, 3)
    a = post["al"][..., 0].reshape(-1, 3)
    assert np.allclose(a.sum(1), 0, atol=1e-12)
    contrast = g[:, 1:] - g[:, :1]
    lo, hi = hdi_columns(np.column_stack([contrast, a]), 0.99)
    truth = np.r_[gam[1:] - gam[0], al]
    assert ((lo <= truth) & (truth <= hi)).all(), (lo, hi, truth)
    lo94, hi94 = hdi_columns(contrast)
    assert (lo94[0] > 0) and (hi94[1] < 0)


@pytest.mark.slow
def test_gibbs_matches_nuts_on_a_small_structured_model():
    """Binomial family (the Metropolis-Hastings step 6' over (gamma, f, log tau)) with item effects,
    2 strategies x 2 LLMs x 60 binary rows: posterior means of gamma, alpha, tau and the slopes from
    the Gibbs sampler and from PyMC NUTS on `to_pymc` within 4 combined Monte Carlo SEs, SDs within 20%."""
    import arviz as az
    import pymc as pm
    rng = np.random.default_rng(7)
    strat, llm = _cells(2, 2)
    n_per, n_item = 60, 6
    ui = np.repeat(np.arange(4), n_per)
    wi = np.tile(np.arange(n_item), 4 * n_per // n_item)
    x = rng.standard_normal(len(ui))
    b = np.array([0.2, 1.0])[strat] + np.array([0.2, -0.2])[llm]
    k = rng.binomial(1, 1 / (1 + np.exp(-(b[ui] * x + 0.3 * rng.standard_normal(n_item)[wi]))))
    spec = _spec("binomial", k, x, ui, strat, llm, n=np.ones(len(ui), np.int64), group_index=wi, n_group=n_item,
                 tau_shape=2.0, tau_rate=8.0)
    post, dims, stats = spec.sample(draws=2000, tune=200, chains=2, random_seed=1)
    gibbs = az.from_dict({"posterior": post}, coords=spec.coords, dims=dims)
    # the NUTS reference is built non-centred: four units with tau ~ Gamma(2, 8) put the centred
    # build in a funnel where NUTS diverges (17 divergences on one CI platform); the posterior of
    # (gam, al, tau, b) is the same under either parameterisation, and the Gibbs sampler ignores it
    spec.centered = False
    with pm.Model(coords=spec.coords):
        spec.to_pymc()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nuts = pm.sample(draws=1000, tune=1000, chains=2, random_seed=2, progressbar=False, target_accept=0.95,
                             compute_convergence_checks=False)
    assert int(nuts.sample_stats["diverging"].sum()) < 10
    for var in ("gam", "al", "tau", "b"):
        sg = az.summary(gibbs, var_names=[var], round_to="none")
        sn = az.summary(nuts, var_names=[var], round_to="none")
        z = (sg["mean"] - sn["mean"]).abs() / np.sqrt(sg["mcse_mean"] ** 2 + sn["mcse_mean"] ** 2)
        assert (z < 4).all(), (var, z.to_numpy(), sg["mean"].to_numpy(), sn["mean"].to_numpy())
        ratio = (sg["sd"] / sn["sd"]).to_numpy()
        assert ((ratio > 0.8) & (ratio < 1.2)).all(), (var, ratio)


def test_strategy_contrasts_table_and_errors():
    """A tiny fit with strategy effects: strategy_contrasts against zero-shot (one row per part x other
    strategy x term, equal to the difference of the strategy-mean draws), pairwise, the summary's
    strategy-mean rows, and one-line errors."""
    df, _ = simulate(n_llm=2, n_strategy=3, n_items=5, per_item=4, seed=3)
    with pytest.raises(InputError, match="needs 'strategy' among the group_by"):
        DiscernmentModel(df, strategy_effects=True, group_by=["llm"])
    m = DiscernmentModel(df, strategy_effects=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(draws=20, tune=10, chains=2)
    t = m.strategy_contrasts()
    parts = [p for p in ("move", "away", "full", "fraction") if f"{p}_strategy_slope" in m.idata["posterior"]]
    assert set(t.part) == set(parts) and set(t.baseline) == {"zero-shot"}
    assert set(t.contrast) == {"CoT - zero-shot", "Reliability - zero-shot"}
    assert len(t) == len(parts) * 2 * 4  # 3 predictors + popularity - reliability
    g = m.draws("move_strategy_slope")
    row = t[(t.part == "move") & (t.contrast == "CoT - zero-shot") & (t.term == "popularity")].iloc[0]
    assert row["mean"] == pytest.approx((g[:, 1, 1] - g[:, 0, 1]).mean())
    assert row["p_positive"] == pytest.approx(((g[:, 1, 1] - g[:, 0, 1]) > 0).mean())
    pw = m.strategy_contrasts(pairwise=True)
    assert set(pw.contrast) == {"CoT - zero-shot", "Reliability - zero-shot", "Reliability - CoT"}
    with pytest.raises(InputError, match="baseline strategy 'Defense'"):
        m.strategy_contrasts(baseline="Defense")
    s = m.summary()
    assert {"(strategy mean: zero-shot)", "(strategy mean: CoT)", MEAN_OVER_GROUPS, POPULATION_MEAN} <= set(s.group)
    rel = s[(s.part == "move") & (s.term == "reliability")].set_index("group")
    assert rel.loc[POPULATION_MEAN, "mean"] == pytest.approx(g[:, :, 0].mean())  # gamma over the strategies
    assert rel.loc[MEAN_OVER_GROUPS, "mean"] == pytest.approx(m.draws("move_slope")[:, :, 0].mean())  # b over groups
    off = DiscernmentModel(df)
    with pytest.raises(InputError, match="needs strategy_effects=True"):
        off.strategy_contrasts()
    pp = m.prior_predictive(draws=10)
    assert isinstance(pp, pd.DataFrame) and len(pp) == 5


def test_normal_interweaving_leaves_the_conditional_of_tau_invariant():
    """Step 6' (normal family) iterated with z fixed (the step keeps z = (theta - X coef) / tau) is a
    Markov chain on (coef, tau) whose stationary law is p(coef, tau | z, rest). One pooled column:
    coef integrates out analytically, r ~ N(tau h, diag(s^2) + D diag(sd^2) D') with h_c = A_c z_l, so
    p(tau | z, rest) is known on a grid (times the Gamma(2, 8) prior). 4,000 chains x 40 steps: the
    mean and SD of tau match the quadrature's; a prior off by one in the shape is rejected."""
    from scipy import stats
    rng = np.random.default_rng(3)
    strat, llm = _cells(2, 3)
    L, n_per = len(strat), 10
    ui = np.repeat(np.arange(L), n_per)
    A = np.column_stack([np.ones(len(ui)), rng.standard_normal(len(ui))])
    X = np.column_stack([np.eye(2)[strat], sum_to_zero_basis(3)[llm]])
    sd = np.r_[1.0, 1.0, 0.5, 0.5]
    y = rng.standard_normal(len(ui)) + A[:, 1] * 0.5
    d = GaussDesign(A=A, unit=ui, group=np.zeros(len(ui), int), y=y, n_unit=L, n_group=1, prior_mean=np.zeros(2),
                    prior_sd=np.full(2, 2.0), pooled=np.array([1]), intercepts=np.array([0]), group_effects=False,
                    mean_X=X, mean_sd=sd, tau_shape=2.0, tau_rate=8.0)
    C = 4000
    zl = rng.standard_normal(L)
    a0 = rng.normal(0, 0.3, L)
    s = rng.uniform(0.6, 1.2, L)
    coef = np.zeros((C, X.shape[1], 1))
    tau = np.full((C, 1), 0.25)
    theta = np.zeros((C, L, 2))
    theta[..., 0] = a0
    theta[..., 1] = (X @ coef[..., 0].T).T + tau * zl
    lstart = np.flatnonzero(np.r_[True, ui[1:] != ui[:-1]])
    AtA = np.add.reduceat(A[:, :, None] * A[:, None, :], lstart, axis=0)
    target, sC = np.broadcast_to(y, (C, len(y))), np.broadcast_to(s, (C, L))
    for _ in range(40):
        theta, coef, tau = _pooled_noncentred_regression(theta, coef, tau, target, sC, A, ui, lstart, AtA, d, rng)
    assert np.allclose((theta[..., 1] - np.einsum("lr,cr->cl", X, coef[..., 0])) / tau, zl)  # z kept
    r = y - a0[ui]
    h = A[:, 1] * zl[ui]
    D = A[:, 1:2] * X[ui]
    cov = np.diag(s[ui] ** 2) + D @ np.diag(sd ** 2) @ D.T
    grid = np.linspace(1e-4, 2.5, 4000)

    def moments(shape):
        lp = np.array([stats.multivariate_normal.logpdf(r, t * h, cov) for t in grid]) \
            + stats.gamma.logpdf(grid, shape, scale=1 / 8.0)
        w = np.exp(lp - lp.max())
        w /= w.sum()
        m = (w * grid).sum()
        return m, np.sqrt((w * grid ** 2).sum() - m ** 2)

    m, sdv = moments(2.0)
    t = tau[:, 0]
    assert abs(t.mean() - m) < 4.5 * sdv / np.sqrt(C), (t.mean(), m)
    assert t.std() == pytest.approx(sdv, rel=0.06)
    wm, wsd = moments(3.0)
    assert abs(t.mean() - wm) > 4.5 * wsd / np.sqrt(C) or not np.isclose(t.std(), wsd, rtol=0.06)


@pytest.mark.parametrize("centered", [True, False])
def test_pymc_build_is_the_structured_model(centered):
    """At a random point the log-density of `to_pymc` with mean terms equals a hand-written one:
    b[g] ~ N(gam[strategy(g)] + Q f[llm(g)], tau), gam ~ N(0, 1), f ~ N(0, 0.5), and the Gibbs
    layout's X beta is that same mean."""
    import pymc as pm
    from scipy import stats
    rng = np.random.default_rng(0)
    strat, llm = _cells(2, 3)
    ui = np.repeat(np.arange(6), 5)
    x = rng.standard_normal(30)
    k = rng.binomial(1, 0.5, 30)
    spec = _spec("binomial", k, x, ui, strat, llm, n=np.ones(30, np.int64), tau_shape=2.0, tau_rate=8.0,
                 centered=centered)
    with pm.Model(coords=spec.coords) as model:
        spec.to_pymc()
    point = {kk: v + rng.normal(0, 0.3, np.shape(v)) for kk, v in model.initial_point().items()}
    lp_pymc = float(model.compile_logp()(point))
    gam, f, a = point["gam"], point["al_raw"], point["a"]
    tau = np.exp(point["tau_log__"])
    Q = sum_to_zero_basis(3)
    m = gam[strat] + (Q @ f)[llm]  # 6 x 1
    if centered:
        b = point["b"]
        lp = stats.norm.logpdf(b, m, tau).sum()
    else:
        b = m + tau * point["z"]
        lp = stats.norm.logpdf(point["z"]).sum()
    eta = a[ui] + b[ui, 0] * x
    lp += (k * eta - np.logaddexp(0, eta)).sum() + stats.norm.logpdf(a, 0, 2.5).sum()
    lp += stats.norm.logpdf(gam, 0, 1.0).sum() + stats.norm.logpdf(f, 0, 0.5).sum()
    lp += (stats.gamma.logpdf(tau, 2.0, scale=1 / 8.0) + np.log(tau)).sum()
    assert lp == pytest.approx(lp_pymc, rel=1e-7)
    X, sd, where = spec.mean_design()
    beta = np.vstack([gam, f])
    assert np.allclose(X @ beta, m) and np.array_equal(sd, [1.0, 1.0, 0.5, 0.5])
    assert list(where) == ["gam", "al"]
    if not centered:  # the Gibbs draws carry z as the non-centred build names it
        post, dims, _ = spec.sample(draws=3, tune=2, chains=1, random_seed=0)
        mean = post["gam"][:, :, strat] + post["al"][:, :, llm]
        assert dims["z"] == ["g", "k"]
        assert np.allclose(mean + post["tau"][:, :, None] * post["z"], post["b"])


class _StubContext:
    """What `report.tables.strategy_effects_*` read of a ReportContext: the saved fit and its tables."""

    def __init__(self, m):
        self.m = m

    def has(self, design):
        return True

    def model(self, kind):
        return self.m

    def fit_table(self, kind, name, compute, model=None, stem=None):
        return compute(self.m)


def test_report_table_of_strategy_effects():
    """The report's strategy-effects table: one row per part x strategy against zero-shot, each cell
    the `strategy_contrasts` mean [94% HDI] of that term; a fit without strategy effects, or data
    without a zero-shot arm, gives a note naming the command that fits them."""
    from discern_stats.report import tables as T
    df, _ = simulate(n_llm=2, n_strategy=3, n_items=5, per_item=4, seed=4)
    m = DiscernmentModel(df, strategy_effects=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(draws=20, tune=10, chains=2)
    f = T.strategy_effects_frame(_StubContext(m))
    t = m.strategy_contrasts()
    parts = list(dict.fromkeys(t.part))
    assert len(f) == 2 * len(parts) and set(f.contrast) == {
        f"{T.STRATEGY_LABELS[s]} − {T.STRATEGY_LABELS['zero-shot']}" for s in ("CoT", "Reliability")}
    assert list(dict.fromkeys(f.part)) == [T.DISCERNMENT_PARTS[p] for p in parts]
    want = t[(t.part == parts[0]) & (t.strategy == "Reliability") & (t.term == "popularity - reliability")].iloc[0]
    row = f[(f.part == T.DISCERNMENT_PARTS[parts[0]]) & (f.contrast.str.startswith(T.STRATEGY_LABELS["Reliability"]))].iloc[0]
    assert row["popularity - reliability"] == T._ci(want["mean"], want.hdi_lo, want.hdi_hi, 2)
    assert row["P(pop. − rel. > 0)"] == f"{want.p_positive:.2f}"
    assert "effects on the slopes, against zero-shot" in T.strategy_effects_table(_StubContext(m)).as_raw_html()
    off = DiscernmentModel(df)
    off.idata = m.idata
    note = T.strategy_effects_table(_StubContext(off)).html
    assert "this fit has no strategy effects" in note and "--config" in note
    no_zero = df[df.strategy != "zero-shot"]
    m2 = DiscernmentModel(no_zero, strategy_effects=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m2.fit(draws=10, tune=5, chains=1)
    assert "no zero-shot arm" in T.strategy_effects_table(_StubContext(m2)).html

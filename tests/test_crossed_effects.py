"""Crossed random intercepts (issue 25.2): (1 | source) and a shared item effect in `spec.HierarchicalGLM`,
both Gibbs samplers, the PyMC build and the predictive groups."""

from __future__ import annotations

import numpy as np
import pytest

from discern_stats.bayes.gauss_gibbs import gauss_gibbs
from discern_stats.bayes.logit_gibbs import logit_gibbs
from discern_stats.bayes.spec import Block, CrossedEffect, HierarchicalGLM


def _data(family, n_unit=4, n_item=6, n_src=12, rows=1200, src_sd=0.8, seed=0, crossed=True):
    rng = np.random.default_rng(seed)
    unit = rng.integers(0, n_unit, rows)
    item = rng.integers(0, n_item, rows)
    src = rng.integers(0, n_src, rows)
    unit[:n_unit], src[:n_src] = np.arange(n_unit), np.arange(n_src)
    x = rng.standard_normal(n_src)[src]  # a source-level predictor
    v = src_sd * rng.standard_normal(n_src)
    eta = -0.2 + 0.5 * x + v[src]
    A = np.column_stack([np.ones(rows), x])
    coords = {"unit": list(range(n_unit)), "k": ["x"], "item": list(range(n_item)), "source": list(range(n_src))}
    kw = dict(unit="unit", coords=coords, A=A, unit_index=unit, group="item", group_index=item,
              blocks=[Block("a", (), sd=2.5, intercept=True), Block("b", ("k",))], sigma_sd=1.0,
              crossed=[CrossedEffect("sigma_source", "z_source", "source", src, 1.0)] if crossed else [])
    if family == "binomial":
        y = (rng.random(rows) < 1 / (1 + np.exp(-eta))).astype(np.int64)
        out = HierarchicalGLM(family="binomial", y=y, n=np.ones(rows, np.int64), **kw)
    else:
        out = HierarchicalGLM(family="normal", y=eta + 0.7 * rng.standard_normal(rows), **kw)
    out.true_v = v  # the drawn source effects (for recovery checks)
    return out


@pytest.mark.parametrize("family", ["binomial", "normal"])
def test_off_is_bit_identical(family):
    """An empty crossed list gives exactly the draws of the sampler without the feature's code path."""
    spec = _data(family, crossed=False)
    sampler = logit_gibbs if family == "binomial" else gauss_gibbs
    design = spec.logit_design() if family == "binomial" else spec.gauss_design()
    a = sampler(design, draws=20, tune=10, chains=2, random_seed=3)
    d2 = spec.logit_design() if family == "binomial" else spec.gauss_design()
    d2.crossed_index, d2.crossed_sd = [], []
    b = sampler(d2, draws=20, tune=10, chains=2, random_seed=3)
    assert "crossed_sigma" not in a
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_off_matches_main_reference():
    """With crossed effects off, the discernment-style spec draws equal those of a spec built without
    the field at all (the defaults): the same numbers, not just the same shapes."""
    s1 = _data("binomial", crossed=False)
    out1 = logit_gibbs(s1.logit_design(), draws=10, tune=5, chains=1, random_seed=1)
    s2 = _data("binomial", crossed=False)
    s2.crossed = []
    out2 = logit_gibbs(s2.logit_design(), draws=10, tune=5, chains=1, random_seed=1)
    np.testing.assert_array_equal(out1["theta"], out2["theta"])


def test_gauss_crossed_posterior_against_quadrature():
    """gauss_gibbs step 7 (conjugate v | rest, slice sigma): with the intercept pinned at 0 by its
    prior, y_r = v_j + e_r; the posterior mean and SD of each v_j equal a grid integration over
    (s, sigma) of the closed-form conditional N(n_j ybar_j / s^2 / P, 1 / P), P = n_j / s^2 + 1 / sigma^2."""
    from scipy import stats
    rng = np.random.default_rng(2)
    J, per = 3, 8
    src = np.repeat(np.arange(J), per)
    y = np.array([0.6, -0.4, 0.1])[src] + 0.8 * rng.standard_normal(J * per)
    rows = len(y)
    spec = HierarchicalGLM(family="normal", unit="unit", coords={"unit": [0], "source": list(range(J))},
                           A=np.ones((rows, 1)), unit_index=np.zeros(rows, np.int64), y=y, resid_sd=2.0,
                           blocks=[Block("a", (), sd=1e-4)],
                           crossed=[CrossedEffect("sigma_source", "z_source", "source", src, 1.0)])
    post, _, _ = spec.sample(draws=8000, tune=300, chains=2, random_seed=0)
    v = (post["z_source"] * post["sigma_source"][..., None]).reshape(-1, J)
    sg = np.linspace(0.005, 4, 500)[:, None]
    ss = np.linspace(0.2, 3, 400)[None, :]
    logw = stats.halfnorm.logpdf(sg, scale=1.0) + stats.halfnorm.logpdf(ss, scale=2.0)
    for j in range(J):  # marginal likelihood of level j's rows given (s, sigma)
        yj = y[src == j]
        n, sr, sr2 = len(yj), yj.sum(), (yj ** 2).sum()
        vv = ss ** 2 + n * sg ** 2
        logw = logw + (-0.5 * (n - 1) * np.log(ss ** 2) - 0.5 * np.log(vv) - (sr2 - sg ** 2 * sr ** 2 / vv) / (2 * ss ** 2))
    w = np.exp(logw - logw.max())
    w /= w.sum()
    for j in range(J):
        yj = y[src == j]
        P = len(yj) / ss ** 2 + 1 / sg ** 2
        m = yj.sum() / ss ** 2 / P
        mean = (w * m).sum()
        sd = np.sqrt((w * (1 / P + (m - mean) ** 2)).sum())
        assert v[:, j].mean() == pytest.approx(mean, abs=0.05)
        assert v[:, j].std() == pytest.approx(sd, rel=0.08)
    assert post["sigma_source"].mean() == pytest.approx((w * sg).sum(), rel=0.08)


def test_gauss_step7_single_draw_against_formula():
    """One sweep of the conjugate draw, checked by regenerating the same normal draws: mean and
    precision from bincounts (rows of level j) equal the closed form written out here."""
    rng = np.random.default_rng(0)
    lev = np.array([0, 0, 1, 2, 2, 2])
    e = rng.standard_normal(6)
    s = np.array([0.5, 0.5, 1.0, 1.0, 2.0, 2.0])
    sig = 0.7
    prec = np.array([sum(1 / s[lev == j] ** 2) for j in range(3)]) + 1 / sig ** 2
    mean = np.array([sum(e[lev == j] / s[lev == j] ** 2) for j in range(3)]) / prec
    # closed form for level 1 (one row): the precision-weighted shrinkage of e toward 0
    assert mean[1] == pytest.approx(e[2] / (1 + s[2] ** 2 / sig ** 2))
    assert prec[0] == pytest.approx(2 / 0.25 + 1 / sig ** 2)


def test_logit_crossed_conditional_against_quadrature():
    """Binomial step 7: with one unit, no group effects and theta pinned by tight fixed priors, the
    posterior of v_j given sigma ~ fixed-by-prior is checked against numerical quadrature of
    prod_r Bern(k_r | logistic(a + v_j)) N(v_j; 0, sigma) p(sigma) over (v_j, sigma)."""
    rng = np.random.default_rng(1)
    rows, J = 60, 2
    src = np.repeat(np.arange(J), rows // J)
    k = (rng.random(rows) < 0.6).astype(np.int64)
    spec = HierarchicalGLM(family="binomial", unit="unit", coords={"unit": [0], "source": [0, 1]},
                           A=np.ones((rows, 1)), unit_index=np.zeros(rows, np.int64), y=k, n=np.ones(rows, np.int64),
                           blocks=[Block("a", (), sd=1e-3)],
                           crossed=[CrossedEffect("sigma_source", "z_source", "source", src, 1.0)])
    post, _, stats = spec.sample(draws=6000, tune=300, chains=2, random_seed=4)
    v = (post["z_source"] * post["sigma_source"][..., None]).reshape(-1, J)
    # quadrature over (v0, v1, sigma): the v's are independent given sigma
    sg = np.linspace(0.01, 4, 400)  # (the mass below 0.01 is negligible; the v grid resolves N(0, 0.01))
    vg = np.linspace(-5, 5, 5001)
    ll = [np.array([(k[src == j] * x - np.logaddexp(0, x)).sum() for x in vg]) for j in range(J)]
    logprior_s = -0.5 * sg ** 2
    lp = [ll[j][None, :] - 0.5 * (vg[None, :] / sg[:, None]) ** 2 - np.log(sg)[:, None] for j in range(J)]
    # marginal in sigma: p(sigma) prod_j int exp(lp_j) dv
    m = [np.log(np.trapezoid(np.exp(x - x.max()), vg, axis=1)) + x.max() for x in lp]
    ws = np.exp(logprior_s + m[0] + m[1] - (logprior_s + m[0] + m[1]).max())
    ws /= ws.sum()
    for j in range(J):
        cond = np.exp(lp[j] - lp[j].max(axis=1, keepdims=True))
        cond /= cond.sum(axis=1, keepdims=True)
        pv = (ws[:, None] * cond).sum(0)
        mean = (pv * vg).sum()
        sd = np.sqrt((pv * (vg - mean) ** 2).sum())
        assert v[:, j].mean() == pytest.approx(mean, abs=0.08)
        assert v[:, j].std() == pytest.approx(sd, rel=0.1)
    assert stats["crossed"] > 0.5


def test_pymc_logp_matches_hand_written():
    """The PyMC build's joint log-density (on the unconstrained space, Jacobians off) equals a
    hand-written one at a random point."""
    pm = pytest.importorskip("pymc")
    from scipy import stats
    spec = _data("binomial", rows=200, n_src=5, seed=3)
    with pm.Model(coords=spec.coords) as model:
        spec.to_pymc()
    rng = np.random.default_rng(0)
    point = {}
    for rv in model.free_RVs:
        shape = model.initial_point()[model.rvs_to_values[rv].name].shape
        point[model.rvs_to_values[rv].name] = rng.normal(0, 0.5, shape)
    lp = model.compile_logp(jacobian=False)(point)
    nm = spec.names
    a, b = point["a"], point["b"]
    mu, tau = point[nm["mu"]], np.exp(point[f"{nm['tau']}_log__"])
    sig = np.exp(point[f"{nm['sigma']}_log__"])
    z = point[nm["z"]]
    ss, zs = np.exp(point["sigma_source_log__"]), point["z_source"]
    ui, gi, src = spec.unit_index, spec.group_index, spec.crossed[0].index
    eta = a[ui] + spec.A[:, 1] * b[ui, 0] + sig[ui] * z[ui, gi] + ss * zs[src]
    hand = (stats.norm.logpdf(a, 0, 2.5).sum() + stats.norm.logpdf(mu, 0, spec.mu_sd).sum()
            + stats.gamma.logpdf(tau, spec.tau_shape, scale=1 / spec.tau_rate).sum()
            + stats.norm.logpdf(b, mu, tau).sum() + stats.halfnorm.logpdf(sig, scale=spec.sigma_sd).sum()
            + stats.norm.logpdf(z).sum() + stats.halfnorm.logpdf(ss, scale=1.0) + stats.norm.logpdf(zs).sum()
            + stats.binom.logpmf(spec.y, 1, 1 / (1 + np.exp(-eta))).sum())
    assert lp == pytest.approx(hand, rel=1e-9)


@pytest.mark.parametrize("family", ["binomial", "normal"])
def test_recovers_source_sd(family):
    """A known source SD (0.8 over 40 sources; the realised SD of the 40 drawn effects is the target)
    is inside the posterior's central 95 % interval, the posterior mean within 0.25 of it, and the
    source effects themselves are recovered (correlation > 0.9 with the truth)."""
    spec = _data(family, n_src=40, rows=3000, src_sd=0.8, seed=5)
    post, _, _ = spec.sample(draws=300, tune=100, chains=2, random_seed=0)
    sg = post["sigma_source"].ravel()
    target = spec.true_v.std()
    lo, hi = np.quantile(sg, [0.025, 0.975])
    assert lo < target < hi
    assert abs(sg.mean() - target) < 0.25
    v = (post["z_source"] * post["sigma_source"][..., None]).reshape(-1, 40).mean(0)
    assert np.corrcoef(v, spec.true_v)[0, 1] > 0.9


def _discernment_rows(rng: np.random.Generator, n: int):
    """n Design A rows (truth 100, claims x0.5 or x2, 8 items, 2 LLMs, 10 sources with their own
    reliability and popularity) for the discernment model's config checks."""
    import pandas as pd
    src = rng.integers(0, 10, n)
    truth = np.full(n, 100.0)
    prior = truth * np.exp(rng.normal(0, 0.5, n)).round(2)
    claim = truth * rng.choice([0.5, 2.0], n)
    post_ = prior + rng.choice([0, 0.5, 1.0, -0.3], n) * (claim - prior)
    return pd.DataFrame({"valid": True, "truth": truth, "prior": prior, "posterior": post_, "claim": claim,
                         "item_id": rng.integers(0, 8, n).astype(str), "llm": rng.choice(["m1", "m2"], n),
                         "strategy": "zero-shot", "source": [f"s{j}" for j in src],
                         "reliability": rng.random(10)[src], "popularity": rng.random(10)[src]})


def test_discernment_config_builds_crossed_effects():
    """source_effects / shared_item_effects add one CrossedEffect each per part, their scales are
    nuisance variables; both on by default."""
    from discern_stats.bayes.discernment import DiscernmentModel
    df = _discernment_rows(np.random.default_rng(0), 600)
    off = DiscernmentModel(df, source_effects=False, shared_item_effects=False)
    assert all(not s.crossed for s in off.specs().values())
    on = DiscernmentModel(df)
    assert on.config["source_effects"] and on.config["shared_item_effects"]
    for part, s in on.specs().items():
        assert [t.sigma_name for t in s.crossed] == [f"{part}_sigma_source", f"{part}_sigma_shared_item"]
        assert f"{part}_sigma_source" in on.nuisance_vars


@pytest.mark.slow
def test_gibbs_agrees_with_nuts():
    """Gibbs and NUTS (PyMC) agree on the slope and the source SD of a small binomial model."""
    pm = pytest.importorskip("pymc")
    spec = _data("binomial", n_src=15, rows=1500, seed=7, n_unit=2)
    post, _, _ = spec.sample(draws=1000, tune=200, chains=2, random_seed=0)
    with pm.Model(coords=spec.coords):
        spec.to_pymc()
        idata = pm.sample(600, tune=600, chains=2, random_seed=1, progressbar=False, target_accept=0.95)
    for name in ("b", "sigma_source"):
        g, n_ = post[name].reshape(-1), np.asarray(idata.posterior[name]).reshape(-1)
        assert abs(g.mean() - n_.mean()) < 0.25 * n_.std() + 0.02
        assert g.std() == pytest.approx(n_.std(), rel=0.25)


def test_predictive_conditions_on_crossed_draws():
    """log_likelihood and posterior_predictive include sigma_t z_t[level] at each draw: without group
    effects a row's log-likelihood is N(y; a + b x + sigma_source z_source[source], s) by scipy."""
    import xarray as xr
    from scipy import stats
    from discern_stats.bayes.predictive import log_likelihood, posterior_predictive
    spec = _data("normal", rows=300, seed=9)
    spec.group, spec.group_index = None, None
    post, dims, _ = spec.sample(draws=20, tune=20, chains=1, random_seed=0)
    ds = xr.Dataset({k: (["chain", "draw", *dims[k]], v) for k, v in post.items()},
                    coords={k: v for k, v in spec.coords.items()})
    idx = np.arange(0, 20, 5)
    ll, _ = log_likelihood(spec, ds, idx)
    p = {k: v[:, idx] for k, v in post.items()}
    src, ui = spec.crossed[0].index, spec.unit_index
    eta = (p["a"][..., ui] + p["b"][..., ui, 0] * spec.A[:, 1]
           + p["sigma_source"][..., None] * p["z_source"][..., src])
    hand = stats.norm.logpdf(spec.y, eta, p["resid_sd"][..., ui])
    np.testing.assert_allclose(ll, hand, rtol=1e-10)
    rep = posterior_predictive(spec, ds, idx, np.random.default_rng(0))
    assert np.abs((rep - eta).mean()) < 0.1  # centred on eta including the source effects


# ---------------------------------------------------------------- 7b / 7c: translations, interweaved scale
def _random_state(d, C=3, seed=0):
    rng = np.random.default_rng(seed)
    L, P = d.n_llm if hasattr(d, "n_llm") else d.n_unit, d.A.shape[1]
    theta = rng.normal(0, 1, (C, L, P))
    mu = rng.normal(0, 1, (C, len(d.pooled)) if d.mean_X is None else (C, d.mean_X.shape[1], len(d.pooled)))
    return rng, theta, mu


def _shift_cases():
    """A logit design as the discernment model builds it, and one with a structured pooled mean
    (strategy one-hot + a sum-to-zero LLM term) and a second, fixed-prior source-level column."""
    from discern_stats.bayes.logit_gibbs import LogitDesign
    from discern_stats.bayes.spec import sum_to_zero_basis
    plain = _data("binomial").logit_design()
    rng = np.random.default_rng(4)
    rows, units, J = 500, 6, 9
    src = rng.integers(0, J, rows)
    src[:J] = np.arange(J)
    unit = rng.integers(0, units, rows)
    unit[:units] = np.arange(units)
    xs = rng.standard_normal((J, 2))
    A = np.column_stack([np.ones(rows), xs[src, 0], rng.standard_normal(rows), xs[src, 1]])  # col 2 varies in a source
    strat, llm = np.arange(units) % 3, np.arange(units) // 3
    X = np.column_stack([np.eye(3)[strat], sum_to_zero_basis(2)[llm]])
    structured = LogitDesign(A=A, llm=unit, world=np.zeros(rows, np.int64), k=rng.integers(0, 2, rows),
                             n=np.ones(rows, np.int64), n_llm=units, n_world=1, prior_mean=np.array([0.1, 0, 0, 0.3]),
                             prior_sd=np.array([2.0, 1, 1, 0.7]), pooled=np.array([1, 2]), intercepts=np.array([0]),
                             world_effects=False, mean_X=X, mean_sd=np.array([1.0, 1.0, 1.0, 0.5]),
                             crossed_index=[src], crossed_sd=[1.0])
    return [("plain", plain, 1), ("structured", structured, 2)]


@pytest.mark.parametrize("case", [0, 1])
def test_translation_keeps_every_linear_predictor(case):
    """Step 7b moves the intercepts, the source-level slopes (with their pooled mean) and v; every
    cell's a'theta[unit] + v[level] is unchanged, and the basis holds exactly the level-constant columns."""
    from discern_stats.bayes.crossed_moves import shift_basis, translate
    name, d, n_cols = _shift_cases()[case]
    ix = np.asarray(d.crossed_index[0])
    J = int(ix.max()) + 1
    basis = shift_basis(d.A, ix, J, d)
    assert basis.intercept and len(basis.cols) == n_cols
    assert list(basis.cols) == ([1] if name == "plain" else [1, 3])  # column 2 varies within a source: not shifted
    rng, theta, mu = _random_state(d)
    v = rng.normal(0, 0.5, (3, J))
    sig = np.array([0.3, 0.6, 1.2])

    def eta():
        return np.einsum("np,cnp->cn", d.A, theta[:, d.llm]) + v[:, ix]

    before, th0, mu0, v0 = eta(), theta.copy(), mu.copy(), v.copy()
    translate(theta, mu, v, sig, basis, d, rng)
    np.testing.assert_allclose(eta(), before, atol=1e-10)
    assert np.abs(v - v0).min() > 0 and np.abs(mu - mu0).max() > 0
    # each pooled slope's pooled mean moved with it, so every unit's deviation from its mean is unchanged
    pm0 = mu0[:, None] if d.mean_X is None else np.einsum("lr,crk->clk", d.mean_X, mu0)
    pm1 = mu[:, None] if d.mean_X is None else np.einsum("lr,crk->clk", d.mean_X, mu)
    np.testing.assert_allclose(theta[..., d.pooled] - pm1, th0[..., d.pooled] - pm0, atol=1e-10)


@pytest.mark.parametrize("case", [0, 1])
def test_shift_moments_equal_derivatives_of_the_priors(case):
    """c | rest is Gaussian with log p(c) = -c'Mc/2 + h'c: M and h equal minus the Hessian and the
    gradient at 0 of the sum of the priors (scipy.stats.norm log-densities of every shifted parameter),
    by central differences."""
    from scipy import stats
    from discern_stats.bayes.crossed_moves import apply_shift, shift_basis, shift_moments
    name, d, _ = _shift_cases()[case]
    ix = np.asarray(d.crossed_index[0])
    J = int(ix.max()) + 1
    basis = shift_basis(d.A, ix, J, d)
    rng, theta, mu = _random_state(d, C=1, seed=3)
    v = rng.normal(0, 0.5, (1, J))
    sig = np.array([0.4])
    tau = np.array([0.3, 0.8])[: len(d.pooled)]
    M, h = shift_moments(theta, mu, v, sig, basis, d)

    def logp(c):
        th, m, vv = theta.copy(), mu.copy(), v.copy()
        apply_shift(th, m, vv, np.asarray(c, float)[None], basis, d)
        fixed = [k for k in range(d.A.shape[1]) if k not in d.pooled]
        out = stats.norm.logpdf(th[0][:, fixed], d.prior_mean[fixed], d.prior_sd[fixed]).sum()
        mean = m[0][None] if d.mean_X is None else d.mean_X @ m[0]
        out += stats.norm.logpdf(th[0][:, d.pooled], mean, tau).sum()
        out += (stats.norm.logpdf(m[0], 0, d.mu_sd).sum() if d.mean_X is None
                else stats.norm.logpdf(m[0], 0, d.mean_sd[:, None]).sum())
        return out + stats.norm.logpdf(vv[0], 0, sig[0]).sum()

    D, e = basis.X.shape[1], 1e-3
    grad = np.array([(logp(e * np.eye(D)[i]) - logp(-e * np.eye(D)[i])) / (2 * e) for i in range(D)])
    hess = np.array([[(logp(e * (np.eye(D)[i] + np.eye(D)[j])) - logp(e * (np.eye(D)[i] - np.eye(D)[j]))
                       - logp(e * (np.eye(D)[j] - np.eye(D)[i])) + logp(-e * (np.eye(D)[i] + np.eye(D)[j]))) / (4 * e * e)
                      for j in range(D)] for i in range(D)])
    np.testing.assert_allclose(h[0], grad, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(M[0], -hess, rtol=1e-5, atol=1e-4)


def test_nested_shift_matches_its_conditional():
    """The per-level move against the nested effects: c_j | rest is the normal with log density
    sum_g log N(u_g + c; 0, sigma_g) + log N(w_j - c; 0, sigma_w); 20,000 draws match the mean and
    SD of a grid integration of it (within 4 Monte Carlo SEs)."""
    from scipy import stats
    from discern_stats.bayes.crossed_moves import nested_shift
    rng = np.random.default_rng(0)
    level = np.array([0, 0, 0, 1, 2, 2])  # the groups' levels (level 1 has one group)
    u = rng.normal(0, 0.5, 6)
    gs = np.array([0.3, 0.5, 0.8, 0.4, 0.2, 0.9])
    w = np.array([0.4, -0.2, 0.1])
    R = 20_000
    c = nested_shift(np.tile(u, (R, 1)), np.tile(gs, (R, 1)), level, np.tile(w, (R, 1)), np.full(R, 0.6), rng)
    grid = np.linspace(-4, 4, 40_001)
    for j in range(3):
        lp = stats.norm.logpdf(w[j] - grid, 0, 0.6) + sum(stats.norm.logpdf(u[g] + grid, 0, gs[g])
                                                            for g in np.flatnonzero(level == j))
        p = np.exp(lp - lp.max())
        p /= p.sum()
        mean = (p * grid).sum()
        sd = np.sqrt((p * (grid - mean) ** 2).sum())
        assert abs(c[:, j].mean() - mean) < 4 * sd / np.sqrt(R)
        assert c[:, j].std() == pytest.approx(sd, rel=0.03)


@pytest.mark.parametrize("family", ["normal", "binomial"])
def test_crossed_moves_mix_the_population_slope(family):
    """With a source effect and source-level slopes the population slope (mu) and the group slopes
    slide along v[source] - c x[source]; steps 7b/7c cross that ridge. Bulk ESS of mu and b over
    2 x 300 draws: at least 150 with the moves; without them far less (the bug this guards)."""
    import arviz as az
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_crossed_mixing import make_spec
    spec = make_spec(family, units=8, sources=40, items=20, rows=6000, source_sd=0.3, seed=1)
    ess = {}
    for moves in (True, False):
        post, _, _ = spec.sample(draws=300, tune=150, chains=2, random_seed=2, keep_group_effects=False,
                                 crossed_moves=moves)
        ess[moves] = min(float(np.min(az.ess(_ess_input(post[k]), method="bulk"))) for k in ("mu", "b"))
    assert ess[True] >= 150, ess
    assert ess[False] < 0.5 * ess[True], ess


def _ess_input(x):
    import xarray as xr
    x = np.asarray(x)
    return xr.Dataset({"x": xr.DataArray(x.reshape(x.shape[0], x.shape[1], -1), dims=["chain", "draw", "k"])})["x"]


def test_level_loglik_kernel_equals_the_plain_sum():
    """`_loglik_by_level` (proposal and current values in one pass, the n = 1 cells' logs multiplied
    per level) against the plain sum of k eta - n log(1 + e^eta) per level, with 3,000 cells on one
    level (past the early log at 1e280) and binomial cells with n > 1."""
    from discern_stats.bayes.logit_gibbs import _loglik_by_level
    rng = np.random.default_rng(8)
    C, P, J, rows = 2, 500, 5, 6000
    tab = rng.normal(0, 2, (C, P))
    lr = rng.integers(0, P, rows)
    gidx = rng.integers(0, 7, rows)
    ug = rng.normal(0, 1, (C, 7))
    lev = np.where(np.arange(rows) < 3000, 0, rng.integers(1, J, rows))
    n = np.where(rng.random(rows) < 0.7, 1.0, rng.integers(2, 9, rows).astype(float))
    k = rng.binomial(n.astype(int), 0.4).astype(float)
    vs = rng.normal(0, 1, (2, C, J))
    out = np.empty_like(vs)
    _loglik_by_level(tab, lr, ug, gidx, lev, vs, k, n, out)
    for a in range(2):
        for c in range(C):
            eta = tab[c, lr] + ug[c, gidx] + vs[a, c, lev]
            want = np.bincount(lev, weights=k * eta - n * np.logaddexp(0.0, eta), minlength=J)
            np.testing.assert_allclose(out[a, c], want, rtol=1e-12, atol=1e-9)


def test_default_crossed_effects_need_a_source_column_and_say_how_to_do_without():
    """The crossed effects are on by default: data without a 'source' column get one line naming the
    column and the switch, and the model without them still fits such data."""
    from discern_stats.bayes.discernment import DiscernmentModel
    from discern_stats.core.errors import InputError
    df = _discernment_rows(np.random.default_rng(1), 200).drop(columns=["source"])
    with pytest.raises(InputError, match=r"'source' column.*source_effects=False"):
        DiscernmentModel(df)
    m = DiscernmentModel(df, source_effects=False)
    assert all(t.sigma_name.endswith("shared_item") for s in m.specs().values() for t in s.crossed)

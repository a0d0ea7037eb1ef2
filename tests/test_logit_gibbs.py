"""The cue-weight models' Gibbs sampler (`discern_stats.bayes.logit_gibbs`) against NUTS on the
same PyMC model, its parameter layout against the PyMC build, and its input checks."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from discern_stats.bayes import BayesModel, CueWeightModel, InterventionContrastModel
from discern_stats.bayes.base import hdi_columns
from discern_stats.bayes.logit_gibbs import LogitDesign, logit_gibbs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_cue_model import simulate  # noqa: E402  (the benchmark's generative model)


def _with_interventions(seed: int = 3) -> pd.DataFrame:
    """A small choice table with three interventions (C0, C3, C4) and world effects."""
    d, _ = simulate(n_llm=2, n_world=12, seed=seed)
    parts = []
    rng = np.random.default_rng(seed)
    for iv in ("C0", "C3", "C4"):
        p = d.copy()
        p["intervention"] = iv
        p["y"] = rng.integers(0, 2, len(p))
        parts.append(p)
    return pd.concat(parts, ignore_index=True)


def test_gibbs_layout_reproduces_the_pymc_likelihood():
    """At a random parameter point, sum_c k eta - n log(1 + e^eta) with eta from the Gibbs layout
    (A theta + u) equals the PyMC model's likelihood term: intercepts, weights, intervention
    shifts and world effects sit where `build` puts them."""
    m = InterventionContrastModel(_with_interventions(), tracks=["factorial", "swap", "order-time"])
    model = m.build()
    design, lay = m.logit_design()
    B, K, V1 = lay["B"], lay["K"], lay["V1"]
    assert V1 == 2 and design.A.shape[1] == B + K + V1 * K + V1
    rng = np.random.default_rng(0)
    L, W = design.n_llm, design.n_world
    vals = {"mu": rng.normal(size=K), "tau": rng.gamma(5, 0.2, K), "beta": rng.normal(size=(L, K)),
            "alpha": rng.normal(size=(L, B)), "delta": rng.normal(size=(L, V1, K)), "gamma": rng.normal(size=(L, V1)),
            "sigma_u": rng.gamma(5, 0.1, L), "z_u": rng.normal(size=(L, W))}
    point = {}
    for v in model.value_vars:
        name = v.name
        base = name.removesuffix("_log__")
        point[name] = np.log(vals[base]) if name.endswith("_log__") else vals[base]
    import pytensor
    loglik = model.logp(vars=[model["chose_B"]], sum=True)  # the observed binomial, in the value variables
    pymc_ll = float(pytensor.function(model.value_vars, loglik, on_unused_input="ignore")(
        *[point[v.name] for v in model.value_vars]))
    theta = np.concatenate([vals["alpha"], vals["beta"], vals["delta"].reshape(L, V1 * K), vals["gamma"]], axis=1)
    eta = (design.A * theta[design.llm]).sum(axis=1) + (vals["sigma_u"][:, None] * vals["z_u"])[design.llm, design.world]
    from scipy.special import gammaln
    log_binom = gammaln(design.n + 1) - gammaln(design.k + 1) - gammaln(design.n - design.k + 1)
    ours = float((design.k * eta - design.n * np.logaddexp(0, eta) + log_binom).sum())
    assert ours == pytest.approx(pymc_ll, rel=1e-10)


def test_group_loglik_matches_logaddexp():
    """The fused per-group binomial log-likelihood (one log per group) against numpy's
    logaddexp cell by cell, with |eta| up to ~100 and counts up to 3,000 (overflow guards)."""
    from discern_stats.bayes.logit_gibbs import _loglik_groups
    rng = np.random.default_rng(1)
    N, G, LR, C = 5000, 300, 40, 2
    lr = rng.integers(0, LR, N)
    gidx = np.sort(rng.integers(0, G, N))
    n = rng.choice([1, 2, 3, 7, 65, 200, 3000], N).astype(float)
    k = np.floor(rng.random(N) * (n + 1))
    tab, ug = rng.normal(0, 30, (C, LR)), rng.normal(0, 5, (C, G))
    out = np.zeros((C, G))
    _loglik_groups(tab, lr, ug, gidx, k, n, out)
    eta = tab[:, lr] + ug[:, gidx]
    ref = np.zeros((C, G))
    for c in range(C):
        np.add.at(ref[c], gidx, k * eta[c] - n * np.logaddexp(0, eta[c]))
    assert np.allclose(out, ref, rtol=1e-12, atol=1e-9)


def test_gibbs_input_checks_and_seeds():
    d, _ = simulate(n_llm=2, n_world=6, seed=1)
    m = CueWeightModel(d)
    design, _ = m.logit_design()
    with pytest.raises(ValueError, match="0 <= k <= n"):
        LogitDesign(**{**design.__dict__, "k": design.n + 1})
    with pytest.raises(ValueError, match="exactly one 1 per cell"):
        LogitDesign(**{**design.__dict__, "intercepts": np.array([0])})
    with pytest.raises(ValueError, match="draws >= 1"):
        logit_gibbs(design, draws=0)
    with pytest.raises(TypeError, match="target_accept"):
        m.fit(draws=5, chains=1, target_accept=0.9)
    with pytest.raises(ValueError, match="no Gibbs sampler"):
        BayesModel.__new__(BayesModel).fit(sampler="gibbs")  # a model without a sampler of its own
    a = logit_gibbs(design, draws=20, tune=10, chains=2, random_seed=7)
    b = logit_gibbs(design, draws=20, tune=10, chains=2, random_seed=7)
    c = logit_gibbs(design, draws=20, tune=10, chains=2, random_seed=8)
    assert np.array_equal(a["theta"], b["theta"]) and not np.array_equal(a["theta"], c["theta"])
    assert not np.array_equal(a["theta"][0], a["theta"][1])  # chains start apart and move apart
    flat = CueWeightModel(d, world_effects=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat.fit(draws=30, chains=2)
    assert "z_u" not in flat.idata["posterior"].data_vars and flat.draws("beta").shape == (60, 2, 5)


@pytest.mark.slow
def test_gibbs_matches_nuts_on_the_same_model():
    """Posterior means and SDs from the Gibbs sampler and from nutpie on the PyMC build of the
    same model agree: means within 4 combined Monte Carlo standard errors, SDs within 15%. The
    true weights and the world-effect scale (0.5) lie inside the Gibbs 99% HDIs."""
    import arviz as az
    d, w = simulate(n_llm=3, n_world=40, seed=5)
    fits = {}
    for sampler in ("gibbs", "nutpie"):
        m = CueWeightModel(d)
        m.fit(draws=2000, chains=2, random_seed=2, sampler=sampler)
        assert m.diagnostics["ok"], (sampler, m.diagnostics)
        fits[sampler] = m
    g, n = fits["gibbs"], fits["nutpie"]
    # the block steps accept most proposals; the joint (mu, log tau) step of the interweaving is an
    # extra move beside the centred one (a Gibbs step that always moves), so a lower rate is expected
    acc = g.sampler["acceptance"]
    assert min(v for k, v in acc.items() if k != "pooled") > 0.8 and acc["pooled"] > 0.2, g.sampler
    for var in ("beta", "alpha", "mu", "tau", "sigma_u"):
        sg = az.summary(g.idata, var_names=[var], round_to="none")
        sn = az.summary(n.idata, var_names=[var], round_to="none")
        se = np.sqrt(sg["mcse_mean"] ** 2 + sn["mcse_mean"] ** 2)
        z = (sg["mean"] - sn["mean"]).abs() / se
        assert (z < 4).all(), (var, z.max(), sg["mean"].to_numpy(), sn["mean"].to_numpy())
        ratio = sg["sd"] / sn["sd"]
        assert ((ratio > 0.85) & (ratio < 1.15)).all(), (var, ratio.to_numpy())
    beta = g.draws("beta")
    cols = [g.index["cue"].index(c) for c in ("history", "Q", "I", "order", "time")]
    lo, hi = hdi_columns(beta[:, :, cols].reshape(len(beta), -1), prob=0.99)
    assert ((w.ravel() >= lo) & (w.ravel() <= hi)).all()
    lo, hi = hdi_columns(g.draws("sigma_u"), prob=0.99)
    assert ((lo <= 0.5) & (0.5 <= hi)).all(), (lo, hi)


@pytest.mark.slow
def test_gibbs_matches_nuts_with_intervention_shifts():
    """The intervention model's path: shifts delta (intervention x cue) and gamma (intervention),
    sampled with three proposals per sweep (theta_tries=3, the default with shifts: independence, autoregressive, independence).
    Means within 4 combined Monte Carlo SEs of nutpie's, SDs within 15%."""
    import arviz as az
    d = _with_interventions(seed=4)
    fits = {}
    for sampler in ("gibbs", "nutpie"):
        m = InterventionContrastModel(d, tracks=["factorial", "swap", "order-time"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(draws=2000, chains=2, random_seed=3, sampler=sampler)
        assert m.diagnostics["ok"], (sampler, m.diagnostics)
        fits[sampler] = m
    g, n = fits["gibbs"], fits["nutpie"]
    assert g.sampler["theta_tries"] == 3 and g.idata["posterior"]["delta"].shape[-2:] == (2, 5)
    for var in ("delta", "gamma", "beta", "alpha"):
        sg = az.summary(g.idata, var_names=[var], round_to="none")
        sn = az.summary(n.idata, var_names=[var], round_to="none")
        z = (sg["mean"] - sn["mean"]).abs() / np.sqrt(sg["mcse_mean"] ** 2 + sn["mcse_mean"] ** 2)
        assert (z < 4).all(), (var, z.max())
        ratio = sg["sd"] / sn["sd"]
        assert ((ratio > 0.85) & (ratio < 1.15)).all(), (var, ratio.to_numpy())

"""The discernment model's priors (issue 25.5): the defaults on substance, the prior predictive
check against an independent simulation, and (slow) the prior sensitivity table."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from discern_stats.bayes import DiscernmentModel, discernment_prior_sensitivity
from discern_stats.core.errors import InputError
from discern_stats.core.vocab import MEAN_OVER_GROUPS, POPULATION_MEAN

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_discernment import simulate  # noqa: E402


def test_default_scale_prior_allows_small_heterogeneity():
    """tau ~ Gamma(2, 8): the figures the docstring quotes (scipy), and the old Gamma(5, 5)'s 1.9 %."""
    c = DiscernmentModel.default_config
    tau = stats.gamma(c["tau_shape"], scale=c["tau_sd"] / c["tau_shape"])
    assert tau.mean() == pytest.approx(0.25) and tau.cdf(0.3) == pytest.approx(0.69, abs=0.01)
    assert tau.cdf(0.05) == pytest.approx(0.06, abs=0.005) and tau.sf(1.0) < 0.004
    assert stats.gamma(5, scale=0.2).cdf(0.3) == pytest.approx(0.019, abs=0.001)
    assert 2 * stats.norm(0, c["slope_sd"]).sf(2.0) == pytest.approx(0.046, abs=0.001)


def test_prior_predictive_shares():
    """Quantiles are ordered, the observed shares are the data's own (a direct count), and a prior
    with near-zero SDs everywhere puts every part at p = 1/2, so the simulated shares concentrate at
    1/2, 1/4, 1/8, 1/8 (checks the simulation's factorisation; a check that can fail)."""
    df, _ = simulate(n_llm=2, n_strategy=2, n_items=40, per_item=10, seed=3)
    m = DiscernmentModel(df)
    t = m.prior_predictive(draws=300, seed=1).set_index("quantity")
    assert set(t.index) == {"none", "partial", "full", "away", "median partial fraction"}
    assert (t.prior_q05 <= t.prior_median).all() and (t.prior_median <= t.prior_q95).all()
    counts = m.data.response.value_counts(normalize=True)  # all rows: fewer than max_rows here
    for k in ("none", "partial", "full", "away"):
        assert t.loc[k, "observed"] == pytest.approx(counts.get(k, 0.0))
    tight = DiscernmentModel(df, intercept_sd=1e-3, slope_sd=1e-3, tau_sd=1e-3, item_sd=1e-3, source_sd=1e-3,
                             shared_item_sd=1e-3)
    q = tight.prior_predictive(draws=200, seed=1).set_index("quantity")
    # every part at p = 1/2: P(none) = 1/2, P(away) = 1/4, P(full) = P(partial) = 1/8; binomial noise only
    for k, share in (("none", 0.5), ("away", 0.25), ("full", 0.125), ("partial", 0.125)):
        assert abs(q.loc[k, "prior_median"] - share) < 0.03, (k, q.loc[k])
        assert q.loc[k, "prior_q95"] - q.loc[k, "prior_q05"] < 0.1
    assert not q.loc[["none", "partial", "full", "away"], "observed_inside_90"].all()
    with pytest.raises(InputError, match="draws must be a whole number"):
        m.prior_predictive(draws=0)


def test_prior_predictive_draws_the_crossed_effects():
    """With every other prior near 0, (1 | source) or the shared item effect with a wide scale is the
    only spread left: the 90 % band of the median partial fraction widens several-fold (it stayed
    put when the prior predictive ignored crossed effects)."""
    df, _ = simulate(n_llm=2, n_strategy=2, n_items=40, per_item=10, seed=3)
    tight = dict(intercept_sd=1e-3, slope_sd=1e-3, tau_sd=1e-3, item_sd=1e-3)

    def width(**kw):
        q = DiscernmentModel(df, **tight, **kw).prior_predictive(draws=200, seed=1).set_index("quantity")
        return float(q.loc["median partial fraction", "prior_q95"] - q.loc["median partial fraction", "prior_q05"])

    off = dict(source_effects=False, shared_item_effects=False)
    base = width(**off)
    assert width(**(off | dict(source_effects=True, source_sd=3.0))) > 3 * base
    assert width(**(off | dict(shared_item_effects=True, shared_item_sd=3.0))) > 3 * base
    assert width(source_sd=1e-3, shared_item_sd=1e-3) < 1.5 * base  # the defaults have both, here near 0


@pytest.mark.slow
def test_discernment_prior_sensitivity_table():
    """One row per prior x summary row; the tight scale prior (mean 0.02) pulls tau and the groups'
    slopes together compared with the previous Gamma(5, 5)."""
    df, _ = simulate(n_llm=2, n_strategy=2, n_items=60, per_item=10, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = discernment_prior_sensitivity(df, priors=((2.0, 0.02), (5.0, 1.0)), fit_kwargs={"draws": 300, "chains": 2})
    assert set(t.scale_prior) == {"Gamma(2, 100)", "Gamma(5, 5)"}
    per = t.groupby("scale_prior").size()
    assert per.iloc[0] == per.iloc[1] and {"mean", "hdi_lo", "hdi_hi", "tau_median", "converged"} <= set(t.columns)
    slopes = t[~t.group.isin([MEAN_OVER_GROUPS, POPULATION_MEAN]) & (t.term != "popularity - reliability")]
    spread = slopes.groupby(["scale_prior", "part", "term"])["mean"].agg(lambda v: v.max() - v.min()).groupby(
        "scale_prior").sum()
    assert spread["Gamma(2, 100)"] < spread["Gamma(5, 5)"]
    assert t[t.scale_prior == "Gamma(2, 100)"].tau_median.max() < t[t.scale_prior == "Gamma(5, 5)"].tau_median.min()
    with pytest.raises(InputError, match="tau_shape > 0"):
        discernment_prior_sensitivity(df, priors=((0.0, 1.0),))

"""The Bayesian models' edge (issue 27 point 5): sampling counts are checked before any sampling,
as one `InputError` line naming the setting, not a bare ValueError from inside a sampler."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from discern_stats.bayes import CueWeightModel
from discern_stats.core.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_cue_model import simulate  # noqa: E402


@pytest.mark.parametrize("kw,name", [({"draws": 0}, "draws"), ({"draws": 2.5}, "draws"), ({"chains": 0}, "chains"),
                                     ({"chains": "2"}, "chains"), ({"tune": -1}, "tune"), ({"draws": True}, "draws"),
                                     ({"sampler": "nutpie", "tune": -5}, "tune")])
def test_bad_sampling_counts_are_one_input_error(kw, name):
    d, _ = simulate(n_llm=2, n_world=4, seed=1)
    m = CueWeightModel(d)
    with pytest.raises(InputError, match=f"^{name} must be a whole number >= [01], got ") as e:
        m.fit(**kw)
    assert "\n" not in str(e.value) and m.idata is None


def test_good_counts_pass_the_edge():
    d, _ = simulate(n_llm=2, n_world=4, seed=1)
    m = CueWeightModel(d)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(draws=5, tune=0, chains=1)
    assert m.draws("beta").shape[0] == 5


class _Canned:
    """A model whose 'sampler' returns given draws: the gate alone is under test."""

    @staticmethod
    def model(gated, nuisance):
        import arviz as az
        import pandas as pd
        from discern_stats.bayes.base import BayesModel

        class M(BayesModel):
            name = "canned"
            check_vars = ["b"]
            nuisance_vars = ["s"]
            own_samplers = ("gibbs",)
            default_sampler = "gibbs"

            def prepare(self, df):
                return df

            def sample_own(self, sampler, **kw):
                return az.from_dict({"posterior": {"b": gated, "s": nuisance}}), {}

            def summary_table(self):
                return pd.DataFrame({"x": [1]})

        return M(pd.DataFrame({"a": [1]}))


def test_nuisance_parameters_are_gated_at_the_looser_level():
    """Nuisance parameters pass at R-hat <= 1.05 and ESS >= 100 (where the reported ones would fail)
    and fail the fit, in the problems and the summary, when their chains disagree."""
    import numpy as np
    import warnings
    from discern_stats.bayes import ConvergenceWarning
    rng = np.random.default_rng(0)
    good = rng.standard_normal((2, 1000))
    # ESS ~ 250 (AR(1), phi 0.8): below the reported gate's 400, above the nuisance gate's 100
    ar = np.zeros((2, 1000))
    for t in range(1, 1000):
        ar[:, t] = 0.8 * ar[:, t - 1] + rng.standard_normal(2)
    m = _Canned.model(good, ar)
    m.fit(draws=1000, chains=2)
    assert m.diagnostics["ok"], m.diagnostics
    assert 100 < m.diagnostics["nuisance"]["min_ess_bulk"] < 400
    apart = good + np.array([[0.0], [1.0]])  # two chains a whole SD apart: R-hat ~ 1.1
    m = _Canned.model(good, apart)
    with pytest.warns(ConvergenceWarning, match="nuisance parameters: max R-hat"):
        m.fit(draws=1000, chains=2)
    assert not m.diagnostics["ok"]
    s = m.summary()
    assert not s.converged.any() and s.gate_problems.str.contains("nuisance parameters: max R-hat").all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = _Canned.model(apart, good)  # the reported parameter fails at the strict gate
        with pytest.raises(ConvergenceWarning, match="max R-hat"):
            m.fit(draws=1000, chains=2)

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

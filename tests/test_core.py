"""The core floor on its own: cue coding from condition labels, the choice table, response
categories and request / trial keys, against hand-written expectations (no database, planner,
collector or simulator)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from interchange_tables import CONDITIONS, cue_choices

from discern_stats.core import keys
from discern_stats.core.coding import block_of, choice_table, classify_response, cue_codes
from discern_stats.core.errors import InputError
from discern_stats.core.vocab import CUES


def test_cue_codes_of_every_condition_match_the_design():
    """Every P4 condition's codes equal the table written out from the design (tests/interchange_tables),
    0 for the cues a condition does not manipulate; each manipulated cue takes both signs in its track."""
    for track, conds in CONDITIONS.items():
        for cond, x in conds:
            assert cue_codes(track, cond) == {k: x.get(k, 0.0) for k in CUES}, (track, cond)
        for k in {k for _, x in conds for k in x}:
            assert {x[k] for _, x in conds if k in x} == {-0.5, 0.5}, (track, k)
    assert cue_codes("verified", "verified=B")["verified"] == 0.5
    assert cue_codes("verified", "verified=A")["verified"] == -0.5


@pytest.mark.parametrize("track, condition", [("factorial", "RHH-Qclear"), ("swap", "HH"), ("competition", "order=C-first,time=08"),
                                              ("competition", "structure=triple"), ("verified", "verified=C"),
                                              ("representation", "RHH-Qclear-Iseparate")])
def test_cue_codes_refuse_a_label_outside_the_design(track, condition):
    with pytest.raises(InputError):
        cue_codes(track, condition)


def test_block_of_each_track():
    assert [block_of(t, c) for t, c in [("factorial", "RHH-Qclear-Iseparate"), ("swap", "HL"),
                                        ("competition", "order=A-first,time=08"), ("competition", "structure=single"),
                                        ("verified", "verified=A")]] == \
        ["factorial", "swap", "order-time", "structure", "verified"]


def test_choice_table_keeps_valid_p4_choices_of_the_tracks_asked_for():
    df = cue_choices({"R": 1.0, "history": 1.0}, n_worlds=3, tracks=("factorial", "swap"), seed=1)
    df.loc[0, ["valid", "choice"]] = [False, None]  # an invalid answer
    df = pd.concat([df, df.iloc[[1]].assign(probe="P2", track="factorial", answer="C", choice=None)], ignore_index=True)
    d = choice_table(df, ("factorial",))
    assert len(d) == 3 * 8 - 1 and set(d.block) == {"factorial"}
    assert (d.y == (df.loc[d.index, "choice"] == "B").astype(int)).all()
    assert (d.R == [dict(CONDITIONS["factorial"])[c]["R"] for c in df.loc[d.index, "condition"]]).all()
    assert len(choice_table(df, ("factorial", "swap"))) == 3 * 10 - 1


def test_classify_response_hand_cases():
    prior, claim = np.full(6, 10.0), np.full(6, 20.0)
    posterior = np.array([10.0, 20.0, 15.0, 5.0, 25.0, 10.0 + 1e-12])
    assert list(classify_response(prior, posterior, claim)) == ["none", "full", "partial", "away", "away", "none"]
    assert str(classify_response(100.0, 50.0, 40.0)) == "partial"  # toward a smaller claim


def test_request_and_trial_keys_are_stable_and_tell_every_coordinate_apart():
    base = ("w001", "C0", "factorial", "P4", "RHH-Qclear-Iseparate")
    assert keys.cue_request_key(*base) == keys.cue_request_key(*base)
    assert len({keys.cue_request_key(*base[:i], "x", *base[i + 1:]) for i in range(5)} | {keys.cue_request_key(*base)}) == 6
    assert keys.l2d_posterior_key("i1", "CoT", "s1", 1 / 3) != keys.l2d_posterior_key("i1", "CoT", "s1", 0.333)
    t = keys.trial_key("m", '{"temperature":0}', keys.l2d_prior_key("i1", "CoT"), 0)
    assert t == keys.trial_key("m", '{"temperature":0}', keys.l2d_prior_key("i1", "CoT"), 0) and len(t) == 40
    assert t != keys.trial_key("m", '{"temperature":1}', keys.l2d_prior_key("i1", "CoT"), 0)
    assert t != keys.trial_key("m", '{"temperature":0}', keys.l2d_prior_key("i1", "CoT"), 1)

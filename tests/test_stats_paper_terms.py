"""Issue 24: the statistics on the paper's terms (declared Holm family, boundary proportions, the
|order| contrast's test and interval, the small-cluster correction, subgroup gap direction)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from discern_stats.core.errors import InputError
from discern_stats.core.vocab import INTERVENTIONS
from discern_stats.stats.cue import holm_contrasts, intervention_contrasts, intervention_family


def cue_rows(llm: str, interventions, n_worlds: int = 16, seed: int = 0, order_w: float = 0.2) -> list[dict]:
    """Swap and order x time choices of ``n_worlds`` worlds (60 % Core) for one LLM."""
    rng = np.random.default_rng(seed)
    rows = []
    for iv in interventions:
        for w in range(n_worlds):
            st = "core" if w < n_worlds * 0.6 else "structural"
            for cond, p in (("HL", 0.4), ("LH", 0.7)):
                rows.append(dict(llm=llm, intervention=iv, world_id=f"w{w}", stratum=st, track="swap", probe="P4",
                                 condition=cond, answer="A", valid=True, correct=None,
                                 choice="B" if rng.random() < p else "A"))
            for o, t in itertools.product("AB", ("08", "12")):
                p = 0.5 + (order_w if o == "B" else -order_w)
                rows.append(dict(llm=llm, intervention=iv, world_id=f"w{w}", stratum=st, track="competition",
                                 probe="P4", condition=f"order={o}-first,time={t}", answer="A", valid=True,
                                 correct=None, choice="B" if rng.random() < p else "A"))
    return rows


def paper_shaped_cue() -> pd.DataFrame:
    """Seed 001's plan: 13 LLMs at C0 only, 3 of them (others) through C0-C4."""
    rows = []
    for k in range(13):
        rows += cue_rows(f"base{k:02d}", ["C0"], seed=k)
    for k, m in enumerate(["full-a", "full-b", "full-c"]):
        rows += cue_rows(m, INTERVENTIONS, seed=100 + k)
    return pd.DataFrame(rows)


def test_declared_family_covers_the_llms_with_every_intervention():
    df = paper_shaped_cue()
    res = holm_contrasts(df, n_resamples=400)
    full = ["full-a", "full-b", "full-c"]
    assert len(res) == 48 and (res.family_size == 48).all()
    assert sorted(res.llm.unique()) == full
    assert (res.family_llms == ", ".join(full)).all()
    assert res.left_out_llms.iloc[0] == ", ".join(f"base{k:02d}" for k in range(13))
    # the same family, the same p-values as the contrasts of the three LLMs alone, Holm as statsmodels
    alone = intervention_contrasts(df[df.llm.isin(full)], n_resamples=400)
    merged = res.merge(alone, on=["llm", "contrast", "endpoint", "scope"], suffixes=("", "_alone"))
    assert len(merged) == 48 and np.allclose(merged.p_value, merged.p_value_alone, rtol=0, atol=0)
    assert np.allclose(res.p_holm, multipletests(res.p_value, method="holm")[1], rtol=0, atol=1e-12)
    assert set(map(tuple, res[["llm", "contrast", "endpoint", "scope"]].to_numpy())) == set(intervention_family(full))


def test_declared_family_refuses_an_incomplete_plan_within_its_llms():
    df = paper_shaped_cue()
    # an LLM collected beyond C0 but missing C4: an incomplete plan, not a smaller family
    partial = df[~((df.llm == "full-b") & (df.intervention == "C4"))]
    with pytest.raises(InputError, match="'full-b' was collected under C0, C1, C2, C3 but not C4"):
        holm_contrasts(partial, n_resamples=200)
    # a declared test without a result within the covered LLMs (no Core world of full-c at C3)
    no_core = df[~((df.llm == "full-c") & (df.intervention == "C3") & (df.stratum == "core"))]
    with pytest.raises(InputError, match="declared test"):
        holm_contrasts(no_core, n_resamples=200)

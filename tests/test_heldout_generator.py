"""The held-out Design A generator (benchmarks/heldout_l2d.py, issue 25): its own invariants, cheaply.

The generator is independent of discern_stats.simulate; these tests check its layout, the
interchange format (store.tables.validate_trials), the response categories against the package's
classify_response, and the closed forms its truth relies on (E[logit f] of the partial moves)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import heldout_l2d as H  # noqa: E402
from discern_stats.core.coding import classify_response  # noqa: E402
from discern_stats.store.tables import L2D_COLUMNS, validate_trials  # noqa: E402

SMALL = dict(llms=2, strategies=3, items=25)


@pytest.fixture(scope="module")
def small():
    return H.generate(H.Layout(**SMALL), seed=11)


def test_layout_and_interchange(small):
    df, truth = small
    assert list(df.columns) == L2D_COLUMNS
    assert len(df) == 2 * 3 * 25 * 6 * 5 == truth["counts"]["trials"]
    validate_trials(df, "l2d")  # raises InputError on any violation
    # each item: 6 sources, one per popularity x reliability stratum, the same for every LLM and strategy
    per = df.groupby(["llm", "strategy", "item_id"]).source.agg(lambda s: tuple(sorted(set(s))))
    assert per.map(len).eq(6).all()
    assert per.groupby(level="item_id").nunique().eq(1).all()
    strata = df.source.str.extract(r"news(\d)(\d)-")
    assert strata.groupby(df.item_id).apply(lambda x: len(set(map(tuple, x.values)))).eq(6).all()
    assert sorted(df.factor.unique()) == sorted(H.FACTORS)
    assert np.allclose(df.claim, df.truth * df.factor, rtol=1e-5)
    # one prior per (LLM, item), shared by the strategies
    assert df.dropna(subset=["prior"]).groupby(["llm", "item_id"]).prior.nunique().le(1).all()


def test_invalid_answers(small):
    df, _ = small
    assert 0 < (~df.valid).sum() < 0.2 * len(df)
    assert df.loc[~df.valid, "posterior"].isna().all() and df.loc[df.valid, "posterior"].notna().all()
    no_prior = df.prior.isna()
    assert not df.valid[no_prior].any()
    clean, _ = H.generate(H.Layout(**SMALL, invalid=False), seed=11)
    assert clean.valid.all()  # negative control: the invalid answers come from the option


def test_every_category_and_heaps():
    df, truth = H.generate(H.Layout(llms=3, strategies=5, items=40), seed=3)
    d = df[df.valid & (df.claim != df.prior)]
    resp = classify_response(d.prior, d.posterior, d.claim)
    counts = pd.Series(resp).value_counts()
    c = truth["counts"]
    assert (counts["none"], counts["full"], counts["partial"]) == (c["analysed"] - c["moved"], c["full"], c["partial"])
    assert counts["away"] == c["overshoot"] + c["away_from_claim"]
    f = ((d.posterior - d.prior) / (d.claim - d.prior)).to_numpy()
    assert ((f > 1).sum(), (f < 0).sum()) == (c["overshoot"], c["away_from_claim"])
    assert 0.03 < c["overshoot"] / c["moved"] < 0.12  # "about 7 %" of moves overshoot
    partial = f[resp == "partial"]
    heap = np.isclose(partial, 0.5, rtol=1e-9)
    assert heap.sum() == c["heap_half"] and 0.08 < heap.mean() < 0.25  # heap at 0.5 (option 0.15)
    assert (d.posterior > 0).all()


def test_same_seed_same_data_other_seed_other_data(small):
    again, _ = H.generate(H.Layout(**SMALL), seed=11)
    pd.testing.assert_frame_equal(small[0], again)
    other, _ = H.generate(H.Layout(**SMALL), seed=12)
    assert not other.posterior.equals(small[0].posterior)


def test_z_scales_follow_the_model_coding(small):
    """Reliability / popularity SDs over the distinct sources of the analysed rows (ddof 0), the
    improvement SD over those rows, recomputed here from the table alone."""
    df, truth = small
    d = df[df.valid & (df.claim != df.prior)]
    src = d.drop_duplicates("source")
    for col in ("reliability", "popularity"):
        assert truth["sd_raw"][col] == pytest.approx(src[col].std(ddof=0), rel=1e-12)
        assert truth["sd_raw"][col] != pytest.approx(d[col].std(ddof=0), rel=1e-6)  # over rows: different
    e1, e2 = (d.prior - d.truth).abs(), (d.claim - d.truth).abs()
    imp = np.where(e1 + e2 > 0, (e1 - e2) / (e1 + e2).where(e1 + e2 > 0, 1), 0.0)
    assert truth["sd_raw"]["improvement"] == pytest.approx(imp.std(), rel=1e-12)


def test_truth_tables(small):
    _, truth = small
    s = truth["slopes"]
    assert len(s) == 4 * 2 * 3 * 3 and s.slope.notna().all()
    assert set(s.group) == {f"heldout-llm{i:02d} / {st}" for i in range(2) for st in H.STRATEGIES[:3]}
    # slopes with no between-group spread: the same in every group
    spread = s.groupby(["part", "term"]).slope.std()
    assert spread[("away", "popularity")] == 0 and spread[("fraction", "popularity")] == 0
    assert 0 < spread[("away", "reliability")] < 0.05
    assert spread[("move", "reliability")] > 0.05
    d = H.with_differences(s)
    diff = d[d.term == "popularity - reliability"].set_index(["part", "group"]).slope
    w = s.pivot_table(index=["part", "group"], columns="term", values="slope")
    assert np.allclose(diff.loc[w.index], w.popularity - w.reliability)
    r = truth["rates"]
    assert np.allclose(r[["away", "full", "partial"]].sum(axis=1) + (1 - r.moved), 1)
    assert np.allclose(r.overshoot + r.away_from_claim, r.away)
    assert r.correct_defense.between(0, 1).all()
    assert np.allclose(r["move_ame_popularity - reliability_pp"], r.move_ame_popularity_pp - r.move_ame_reliability_pp)
    move = s[s.part == "move"].pivot_table(index=["llm", "strategy"], columns="term", values="slope")
    ratio = r.set_index(["llm", "strategy"]).move_ame_reliability_pp / move.reliability
    assert ((ratio > 0) & (ratio <= 25)).all()  # 100 p (1 - p) <= 25


def test_correlated_source_effects_shift_the_reliability_truth():
    base = H.generate(H.Layout(**SMALL, source_sd=1.5), seed=5)[1]["slopes"]
    corr = H.generate(H.Layout(**SMALL, source_sd=1.5, source_rel_corr=0.4), seed=5)[1]["slopes"]
    shift = (corr.slope - base.slope).to_numpy()
    rel = (corr.term == "reliability").to_numpy()
    frac = (corr.part == "fraction").to_numpy()
    assert np.allclose(shift[rel & ~frac], 0.4 * 1.5)
    assert np.allclose(shift[rel & frac], (1 - 0.15) * 0.4 * 1.5)
    assert np.allclose(shift[~rel], 0)


@pytest.mark.parametrize("eta", [-2.5, -0.7, 0.0, 1.3, 3.0])
def test_beta_alpha_solves_the_digamma_equation(eta):
    a = H.beta_alpha_for_logit_mean(np.array([eta]))[0]
    ref = optimize.brentq(lambda x: special.digamma(x) - special.digamma(H.PHI - x) - eta, 1e-8, H.PHI - 1e-8)
    assert a == pytest.approx(ref, abs=1e-8)


def test_partial_fraction_logit_mean_is_the_documented_closed_form():
    """E[logit f | partial] = (1 - heap_half) eta: Monte Carlo within 4 SE; the mean-parametrised Beta
    (mean expit(eta)), a plausible mistake, misses it (negative control)."""
    rng = np.random.default_rng(0)
    n = 200_000
    for eta in (-1.5, 0.8, 2.0):
        lf = special.logit(H.draw_partial_fraction(np.full(n, eta), 0.15, rng))
        assert abs(lf.mean() - 0.85 * eta) < 4 * lf.std() / np.sqrt(n)
        m = special.expit(eta)
        wrong = special.logit(rng.beta(m * H.PHI, (1 - m) * H.PHI, n))
        assert abs(wrong.mean() - eta) > 8 * wrong.std() / np.sqrt(n)


def test_coverage_scoring_on_a_stand_in_model(small):
    """coverage_discernment.score: intervals around the truth are hits, shifted ones are not, and a
    model that standardises by twice the SD gets twice the slope as its truth."""
    import coverage_discernment as C
    _, truth = small
    groups, pooled, _ = C.model_truth(truth, None)
    want = pd.concat([groups[["part", "group", "term", "slope"]], pooled], ignore_index=True)
    want = want[want.term.isin(C.TERMS)]

    class StandIn:
        def __init__(self, shift, factor):
            self.scales = {p: {"sd": sd * factor} for p, sd in truth["sd_raw"].items()}
            self.tab = want.assign(mean=want.slope * factor + shift, hdi_lo=want.slope * factor + shift - 0.01,
                                   hdi_hi=want.slope * factor + shift + 0.01).drop(columns="slope")

        def summary_table(self):
            return self.tab

    hit, _ = C.score(StandIn(0.0, 1.0), truth)
    assert len(hit) == len(want) and hit.hit.all()
    assert set(hit.level) == {"group", "mean over groups", "population mean"}
    # the mean over groups' truth is the average of the group truths (the row the model reports per draw)
    fin = pooled[pooled.group == C.POOLED].set_index(["part", "term"]).slope
    assert fin.to_dict() == pytest.approx(groups.groupby(["part", "term"]).slope.mean().to_dict())
    miss, _ = C.score(StandIn(0.05, 1.0), truth)
    assert not miss.hit.any()
    doubled, worst = C.score(StandIn(0.0, 2.0), truth)
    assert doubled.hit.all() and worst == pytest.approx(1.0)

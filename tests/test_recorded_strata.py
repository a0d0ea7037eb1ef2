"""The plan records how its source pool was drawn (issue 24): `design l2d --source-pool` draws the pool
within the 6 popularity x reliability strata of the whole source table and writes each posterior's
stratum (``source_stratum``); the interchange tables carry it; the crossed intervals then take every
source term within the strata without being told (`l2d_metrics(fixed_strata=None)`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from interchange_tables import l2d_reliability_moves

import discern_stats as ds
from discern_stats.cli import app
from discern_stats.core.errors import InputError
from discern_stats.core.vocab import SOURCE_STRATA, source_tiers, stratum_label
from discern_stats.designs import design_l2d, l2d
from discern_stats.store.db import Request

runner = CliRunner()


def test_a_source_pool_plan_records_the_whole_tables_strata(sqlite_url):
    db = ds.TrialDB(sqlite_url)
    design_l2d(db.engine, seed=4, bank="demo", fictional_sources=True, source_pool=12, strategies=("zero-shot",))
    reqs = db.table(Request)
    post = reqs[reqs.stage == "posterior"]
    table = l2d.demo_sources()
    pop, rel = source_tiers(table.popularity, table.reliability)  # hand: the 24 demo sources' own tiers
    hand = {d: stratum_label(p, r) for d, p, r in zip(table.domain, pop, rel)}
    assert post.source_stratum.notna().all() and (post.source_stratum == post.source.map(hand)).all()
    assert reqs.loc[reqs.stage == "prior", "source_stratum"].isna().all()
    assert post.source.nunique() == 12 and set(post.source_stratum) == set(SOURCE_STRATA)
    assert (post.drop_duplicates("source").source_stratum.value_counts() == 2).all()  # 12 / 6 per stratum
    # a plan without a pool records nothing (its strata are the table's own quantiles)
    db2 = ds.TrialDB(sqlite_url.replace("trials.db", "nopool.db"))
    design_l2d(db2.engine, seed=4, bank="demo", fictional_sources=True, strategies=("zero-shot",))
    assert db2.table(Request).source_stratum.isna().all()


def test_recording_the_strata_leaves_the_draw_as_it_was():
    """Within the whole table's strata or the pool's own tertiles x halves: the same sources per item
    (a pool of n/6 per stratum has the table's strata as its own), so no planned key moves."""
    items = pd.DataFrame({"item_id": [f"q{i:02d}" for i in range(20)], "question": "How many?",
                          "truth": 10.0 + np.arange(20)})
    table = l2d.demo_sources()
    pool = l2d.source_pool(table, 12, seed=2)
    plain = l2d.build_requests(items, pool, seed=7, strategies=("zero-shot",))
    fixed = l2d.build_requests(items, pool, seed=7, strategies=("zero-shot",), fixed_strata=l2d.table_strata(table))
    assert [r["key"] for r in plain.requests] == [r["key"] for r in fixed.requests]
    assert all(r.get("source_stratum") is None for r in plain.requests)


def _answered(table: pd.DataFrame, pool: pd.DataFrame, n_items: int, seed: int, **plan) -> pd.DataFrame:
    """The planned posteriors of ``n_items`` items on ``pool`` (sources of ``table``), answered by
    `l2d_reliability_moves`."""
    items = pd.DataFrame({"item_id": [f"q{i:02d}" for i in range(n_items)], "question": "How many?",
                          "truth": 10.0 + np.arange(n_items)})
    planned = l2d.build_requests(items, pool, seed=seed, strategies=("zero-shot",), **plan)
    d = pd.DataFrame([r for r in planned.requests if r["stage"] == "posterior"])
    d = d.merge(table.rename(columns={"domain": "source"})[["source", "reliability", "popularity"]], on="source")
    return l2d_reliability_moves(d, seed)


def _trials(n_items: int = 30, seed: int = 3, recorded: bool = True) -> pd.DataFrame:
    """Trials on a pool drawn within the demo table's strata (one source per stratum and item)."""
    table = l2d.demo_sources()
    d = _answered(table, l2d.source_pool(table, 18, seed=seed), n_items, seed,
                  fixed_strata=l2d.table_strata(table) if recorded else None)
    keep = ["llm", "strategy", "item_id", "truth", "source", "reliability", "popularity", "factor", "claim",
            "prior", "posterior", "valid"]
    return d[keep + (["source_stratum"] if recorded else [])]


def _metrics(d: pd.DataFrame, **kw) -> pd.DataFrame:
    from discern_stats.stats.l2d import l2d_metrics
    with pytest.warns(Warning):  # few sources: the small-pool warning
        return l2d_metrics(d, n_resamples=200, overall=False, **kw).set_index("metric")


def test_recorded_strata_make_every_source_term_within_them():
    d = _trials()
    auto, declared, off = _metrics(d), _metrics(d, fixed_strata=True), _metrics(d, fixed_strata=False)
    bare = _metrics(d.drop(columns="source_stratum"))  # no record: the default as before
    cols = ["estimate", "lo", "hi"]
    pd.testing.assert_frame_equal(auto[cols], declared[cols])
    pd.testing.assert_frame_equal(off[cols], bare[cols])
    moved = {m for m in auto.index if not np.allclose(auto.loc[m, ["lo", "hi"]].astype(float),
                                                      off.loc[m, ["lo", "hi"]].astype(float), equal_nan=True)}
    assert {"TD", "truth_propensity", "CD"} <= moved and "SD" not in moved  # SD was within the strata already
    assert auto["interval"].str.contains("within the design's 6 popularity x reliability strata (fixed "
                                         "thresholds, as the plan recorded them)", regex=False).all()
    assert not declared["interval"].str.contains("as the plan recorded").any()
    assert off["interval"].str.contains("SD and rho(Delta, popularity): source term", regex=False).all()


def test_the_recorded_strata_win_over_the_ones_read_from_the_sources(monkeypatch):
    """Two sources swap their recorded strata: the source terms follow the record, not the thresholds
    that the sources' popularity and reliability show (`design_strata`)."""
    from discern_stats.stats import l2d as stats_l2d
    d = _trials()
    g = stats_l2d.prepare(d, keep_invalid=True)
    rec = stats_l2d.recorded_strata(g)
    assert rec.equals(stats_l2d.design_strata(g).reindex(rec.index))  # the package's plan: both say the same
    swapped = rec.copy()
    a, b = rec[rec == "low/low"].index[0], rec[rec == "high/high"].index[0]
    swapped[a], swapped[b] = "high/high", "low/low"
    d2 = d.assign(source_stratum=d.source.map(swapped))
    got, plain = _metrics(d2), _metrics(d)
    assert not np.isclose(got.loc["TD", "hi"], plain.loc["TD", "hi"])
    monkeypatch.setattr(stats_l2d, "design_strata", lambda df: swapped)
    want = _metrics(d2.drop(columns="source_stratum"), fixed_strata=True)
    pd.testing.assert_frame_equal(got[["lo", "hi"]], want[["lo", "hi"]])


def test_bad_recorded_strata_get_one_line():
    from discern_stats.stats.l2d import l2d_metrics
    d = _trials()
    with pytest.raises(InputError, match="unknown source stratum 'top/high'"):
        l2d_metrics(d.assign(source_stratum="top/high"), n_resamples=0)
    two = d.copy()
    two.loc[two.index[0], "source_stratum"] = "mid/low" if two.source_stratum.iloc[0] != "mid/low" else "mid/high"
    with pytest.raises(InputError, match="more than one source stratum"):
        l2d_metrics(two, n_resamples=0)


def test_the_interchange_tables_carry_the_strata_and_check_them(sqlite_url, tmp_path):
    db = ds.TrialDB(sqlite_url)
    d = _trials(n_items=12)
    f = tmp_path / "t.csv"
    d.to_csv(f, index=False)
    r = runner.invoke(app, ["import", "trials", "l2d", str(f), "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    back = db.trials("l2d")
    assert "source_stratum" in back.columns
    pd.testing.assert_series_equal(back.set_index(["item_id", "source", "factor"]).source_stratum.sort_index(),
                                   d.set_index(["item_id", "source", "factor"]).source_stratum.sort_index())
    before = len(db.trials("l2d"))
    for name, edit, message in [
            ("label", lambda t: t.assign(source_stratum="mid"), "unknown source stratum 'mid'"),
            ("empty", lambda t: t.assign(source_stratum=t.source_stratum.where(t.index > 0, "")), "missing value"),
            ("two", lambda t: t.assign(source_stratum=t.source_stratum.where(
                (t.source != t.source.iloc[0]) | (t.index == 0),
                "high/high" if t.source_stratum.iloc[0] != "high/high" else "low/low")),
             "more than one source stratum")]:
        g = tmp_path / f"{name}.csv"
        edit(d.assign(llm="other")).to_csv(g, index=False)
        r = runner.invoke(app, ["import", "trials", "l2d", str(g), "--db", sqlite_url])
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert message in r.output and "source_stratum" in r.output, r.output
        assert len(db.trials("l2d")) == before  # nothing imported
    # a table without the column exports without it
    db2 = ds.TrialDB(sqlite_url.replace("trials.db", "bare.db"))
    db2.import_trials("l2d", d.drop(columns="source_stratum"))
    assert "source_stratum" not in db2.trials("l2d").columns


def test_metrics_cli_takes_the_record_and_the_two_flags(sqlite_url, tmp_path):
    db = ds.TrialDB(sqlite_url)
    db.import_trials("l2d", _trials(n_items=12))
    outs = {}
    for flag in ([], ["--no-fixed-strata"], ["--fixed-strata"]):
        out = tmp_path / f"m{len(outs)}.csv"
        r = runner.invoke(app, ["metrics", "l2d", "--resamples", "100", "--out", str(out), "--db", sqlite_url, *flag])
        assert r.exit_code == 0, r.output
        outs[" ".join(flag)] = pd.read_csv(out)
    assert outs[""]["interval"].str.contains("as the plan recorded them").all()
    assert outs["--no-fixed-strata"]["interval"].str.contains("SD and rho(Delta, popularity)", regex=False).all()
    pd.testing.assert_series_equal(outs[""]["hi"], outs["--fixed-strata"]["hi"])
    for flag in ("--fixed-strata", "--no-fixed-strata"):
        r = runner.invoke(app, ["metrics", "cue", flag, "--db", sqlite_url])
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert f"{flag} applies to Design A (l2d) only" in r.output


def test_importing_the_strata_fills_a_plan_without_them_and_refuses_another(sqlite_url):
    """Trials imported without the column, then with it (another LLM): the earlier requests gain
    the stratum, so every row exports with one; a stratum that contradicts the database's plan is
    refused in one line and nothing is imported."""
    db = ds.TrialDB(sqlite_url)
    d = _trials(n_items=12)
    db.import_trials("l2d", d.drop(columns="source_stratum"))
    assert "source_stratum" not in db.trials("l2d").columns
    db.import_trials("l2d", d.assign(llm="other"))
    back = db.trials("l2d")
    assert back.source_stratum.notna().all() and len(back) == 2 * len(d)
    want = d.set_index(["item_id", "source", "factor"]).source_stratum
    assert (back.set_index(["item_id", "source", "factor"]).source_stratum == want.reindex(
        back.set_index(["item_id", "source", "factor"]).index)).all()  # both LLMs' rows carry the plan's
    flip = {"low/low": "high/high", "high/high": "low/low", "low/high": "high/low", "high/low": "low/high",
            "mid/low": "mid/high", "mid/high": "mid/low"}
    with pytest.raises(InputError, match="in the database's plan"):
        db.import_trials("l2d", d.assign(llm="third", source_stratum=d.source_stratum.map(flip)))
    assert len(db.trials("l2d")) == 2 * len(d)


def _pool_trials(n_sources: int, n_items: int = 40, seed: int = 5) -> pd.DataFrame:
    """Trials on a pool of ``n_sources`` hand-made sources (reliability and popularity spread evenly)."""
    rng = np.random.default_rng(seed)
    table = pd.DataFrame({"domain": [f"s{j:03d}.org" for j in range(n_sources)],
                          "reliability": rng.permutation(np.linspace(0.05, 0.95, n_sources)),
                          "popularity": rng.permutation(np.linspace(0.05, 0.95, n_sources))})
    return _answered(table, table, n_items, seed)


def test_the_small_pool_warning_names_the_pool_below_the_size_shown_and_only_there():
    import warnings

    from discern_stats.stats.l2d import MIN_SOURCES_SHOWN, SmallSourcePoolWarning, l2d_metrics
    small = _pool_trials(MIN_SOURCES_SHOWN - 18)
    assert small.source.nunique() == MIN_SOURCES_SHOWN - 18
    with pytest.warns(SmallSourcePoolWarning, match=f"{MIN_SOURCES_SHOWN - 18} sources: below the {MIN_SOURCES_SHOWN}"):
        out = l2d_metrics(small, n_resamples=100, overall=False)
    assert out["interval"].str.contains(f"below the {MIN_SOURCES_SHOWN} at which", regex=False).all()
    assert out["interval"].str.contains("0.925-0.984", regex=False).all()  # the figures of BENCHMARKS.md
    large = _pool_trials(MIN_SOURCES_SHOWN)
    assert large.source.nunique() == MIN_SOURCES_SHOWN
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSourcePoolWarning)
        out = l2d_metrics(large, n_resamples=100, overall=False)
    assert not out["interval"].str.contains("below the", regex=False).any()
    with warnings.catch_warnings():  # the percentile interval has no source term: nothing to warn about
        warnings.simplefilter("error", SmallSourcePoolWarning)
        l2d_metrics(small, n_resamples=100, overall=False, method="percentile")


def test_planning_again_records_the_strata_of_a_plan_made_before_them(sqlite_url):
    """A database planned with --source-pool before strata were recorded (NULL): the same `design l2d`
    again records each planned posterior's stratum, says so, and leaves the plan's rows otherwise as
    they were; a stratum recorded differently is refused in one line (exit 2) and nothing is written."""
    args = ["design", "l2d", "--bank", "demo", "--fictional-sources", "--source-pool", "12", "--seed", "4",
            "--strategies", "zero-shot", "--db", sqlite_url]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "recorded the source stratum" not in r.output, r.output
    db = ds.TrialDB(sqlite_url)
    planned = db.table(Request).set_index("key").sort_index()
    post = planned.stage == "posterior"
    R = Request.__table__
    with db.engine.begin() as conn:  # as an older version planned it
        conn.execute(R.update().values(source_stratum=None))
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert f"recorded the source stratum of {int(post.sum()):,} posterior(s)" in r.output, r.output
    again = db.table(Request).set_index("key").sort_index()
    pd.testing.assert_frame_equal(again, planned)  # every row and column as the first plan wrote it
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "recorded the source stratum" not in r.output and "(0 new)" in r.output, r.output
    # one posterior recorded differently, the rest without a record: refused, nothing filled
    first = planned.index[post][0]
    other = next(s for s in SOURCE_STRATA if s != planned.loc[first, "source_stratum"])
    with db.engine.begin() as conn:
        conn.execute(R.update().values(source_stratum=None))
        conn.execute(R.update().where(R.c.key == first).values(source_stratum=other))
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert f"source stratum {planned.loc[first, 'source_stratum']!r} in this plan but {other!r}" in r.output, r.output
    kept = db.table(Request).set_index("key")
    assert kept.source_stratum.notna().sum() == 1 and kept.loc[first, "source_stratum"] == other

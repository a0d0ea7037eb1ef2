"""Trial database, interchange import/export round trips and bad-input handling."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.store.tables import validate_trials, write_table
from discern_stats.cli import app
from discern_stats.store.db import Item, Source, Trial

runner = CliRunner()


def l2d_frame() -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(3)
    for llm in ["gpt-ø", "模型-甲"]:
        for item, truth in [("q1", 1234.5678), ("q2", 0.1 + 0.2)]:
            for strategy in ["zero-shot", "CoT"]:
                prior = float(truth * rng.uniform(0.5, 1.5))
                for source, rel, pop in [("reuters.com", 1.0, 0.9), ("wvec–13newsnow.com", 0.901326, 1 / 3)]:
                    for f in [1 / 3, 2.0]:
                        post = float(prior + rng.normal()) if rng.uniform() > 0.2 else math.nan
                        rows.append(dict(llm=llm, strategy=strategy, item_id=item, truth=truth, source=source,
                                         reliability=rel, popularity=pop, factor=f, claim=truth * f, prior=prior,
                                         posterior=post, valid=not math.isnan(post), note="ünïcode ✓"))
    return pd.DataFrame(rows)


def cue_frame() -> pd.DataFrame:
    rows = []
    for llm in ["m1", "m2"]:
        for w in ["w001", "w002"]:
            rows.append(dict(llm=llm, intervention="C0", world_id=w, stratum="core", track="swap", probe="P4",
                             condition="HL", answer="A", valid=True, choice="B", correct=None))
            rows.append(dict(llm=llm, intervention="C0", world_id=w, stratum="core", track="representation",
                             probe="P3a", condition="HL", answer="7", valid=True, choice=None, correct=True))
            rows.append(dict(llm=llm, intervention="C0", world_id=w, stratum="core", track="swap", probe="P4",
                             condition="LH", answer=None, valid=False, choice=None, correct=None))
    return pd.DataFrame(rows)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    b = b[a.columns]
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for c in a.columns:
        for x, y in zip(a[c], b[c]):
            if isinstance(x, float) and math.isnan(x):
                assert y is None or (isinstance(y, float) and math.isnan(y)), (c, x, y)
            elif x is None:
                assert y is None or (isinstance(y, float) and math.isnan(y)), (c, x, y)
            else:
                assert x == y, (c, x, y)  # floats exact, not approximately
                assert type(x) is type(y) or isinstance(x, (int, float)) and isinstance(y, (int, float)) or isinstance(x, (bool, np.bool_))


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_l2d_round_trip(any_url, tmp_path, ext):
    df = l2d_frame()
    src = tmp_path / f"in.{ext}"
    write_table(df, src)
    db = ds.TrialDB(any_url)
    assert db.import_trials("l2d", src) == 2 * 2 * 2 + len(df)  # priors + posteriors
    assert db.import_trials("l2d", src) == 0  # idempotent
    out = tmp_path / f"out.{ext}"
    db.export_trials("l2d", out)
    back = ds.read_table(out)
    if ext == "csv":
        back = validate_trials(back, "l2d")
        df2 = validate_trials(ds.read_table(src), "l2d")
    else:
        df2 = df
    _same(df2, back)
    got = db.trials("l2d")
    assert (got["truth"] == df["truth"]).all()  # 0.1 + 0.2 survives exactly
    assert set(got["llm"]) == {"gpt-ø", "模型-甲"}
    assert got["valid"].sum() == df["valid"].sum()
    db.dispose()


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_cue_round_trip(any_url, tmp_path, ext):
    df = cue_frame()
    src = tmp_path / f"in.{ext}"
    write_table(df, src)
    db = ds.TrialDB(any_url)
    assert db.import_trials("cue", src) == len(df)
    assert db.import_trials("cue", src) == 0
    out = tmp_path / f"out.{ext}"
    r = runner.invoke(app, ["export", "trials", "cue", "--out", str(out), "--db", any_url])
    assert r.exit_code == 0, r.output
    back = validate_trials(ds.read_table(out), "cue")
    ref = validate_trials(ds.read_table(src), "cue")
    _same(ref, back)
    db.dispose()


def test_lin2023_table_imports_as_is(sqlite_url, lin_csv):
    r = runner.invoke(app, ["import", "sources", str(lin_csv), "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    db = ds.TrialDB(sqlite_url)
    src = db.table(Source)
    raw = pd.read_csv(lin_csv)
    assert len(src) == 11520 == len(raw)
    m = src.set_index("domain").loc[raw["domain"]]
    assert (m["reliability"].to_numpy() == raw["pc1"].to_numpy()).all()
    assert (m["pc1"].to_numpy() == raw["pc1"].to_numpy()).all()
    assert "wvec–13newsnow.com" in set(src["domain"])


def _counts(url: str) -> dict:
    return ds.TrialDB(url).info()["tables"]


BAD_ITEMS = {
    "missing column": ("item_id,question\nq1,How many?\n", "missing required column(s) 'truth'", "column 'truth'"),
    "non-numeric truth": ("item_id,question,truth\nq1,A?,12\nq2,B?,twelve\n", "'twelve' is not a finite number", "row 2"),
    "NaN truth": ("item_id,question,truth\nq1,A?,12\nq2,B?,NaN\n", "'NaN' is not a finite number", "row 2"),
    "empty truth": ("item_id,question,truth\nq1,A?,12\nq2,B?,\n", "missing value", "row 2"),
    "duplicate ids": ("item_id,question,truth\nq1,A?,12\nq1,B?,3\n", "duplicate item_id='q1' (first seen in row 1)", "row 2"),
}


@pytest.mark.parametrize("case", list(BAD_ITEMS))
def test_bad_items_rejected_and_db_untouched(any_url, tmp_path, case):
    text, msg, where = BAD_ITEMS[case]
    good = tmp_path / "good.csv"
    good.write_text("item_id,question,truth\nq0,Zero?,0\n")
    runner.invoke(app, ["import", "items", str(good), "--db", any_url])
    before = _counts(any_url)
    f = tmp_path / "bad.csv"
    f.write_text(text)
    r = runner.invoke(app, ["import", "items", str(f), "--db", any_url])
    assert r.exit_code == 2
    out = " ".join(r.output.split())
    assert msg in out and where in out and "bad.csv" in out, out
    assert _counts(any_url) == before


def test_bad_trials_in_the_middle_leave_db_untouched(any_url, tmp_path):
    df = l2d_frame()
    df["claim"] = df["claim"].astype(object)
    df.loc[5, "claim"] = "lots"
    f = tmp_path / "t.csv"
    df.to_csv(f, index=False)
    db = ds.TrialDB(any_url)
    before = _counts(any_url)
    with pytest.raises(ds.InputError, match=r"row 6, column 'claim': value 'lots' is not a finite number"):
        db.import_trials("l2d", f)
    assert _counts(any_url) == before


def test_conflicting_truth_against_db_rolls_back(sqlite_url, tmp_path):
    db = ds.TrialDB(sqlite_url)
    items = tmp_path / "items.csv"
    items.write_text("item_id,question,truth\nq1,One?,1\n")
    db.import_items(items)
    df = l2d_frame()  # q1 has truth 1234.5678 here: conflict is found after LLM rows would be written
    before = _counts(sqlite_url)
    with pytest.raises(ds.InputError, match="q1"):
        db.import_trials("l2d", df)
    assert _counts(sqlite_url) == before


def test_unknown_design_unreadable_file_and_bad_url(tmp_path, sqlite_url):
    r = runner.invoke(app, ["import", "trials", "xyz", str(tmp_path / "a.csv"), "--db", sqlite_url])
    assert r.exit_code == 2 and "unknown design 'xyz'" in r.output
    f = tmp_path / "broken.parquet"
    f.write_bytes(b"not a parquet file")
    r = runner.invoke(app, ["import", "trials", "cue", str(f), "--db", sqlite_url])
    assert r.exit_code == 2 and "broken.parquet" in r.output and "cannot read file" in r.output
    r = runner.invoke(app, ["import", "items", str(tmp_path / "nope.csv"), "--db", sqlite_url])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["db", "info", "--db", "nosuchdb://x"])
    assert r.exit_code == 2 and "unsupported database URL" in r.output
    r = runner.invoke(app, ["db", "info", "--db", "postgresql://nobody@127.0.0.1:1/x"])
    assert r.exit_code == 2 and "cannot connect to database" in r.output
    r = runner.invoke(app, ["db", "info", "--db", "::::"])
    assert r.exit_code == 2 and "cannot parse database URL" in r.output


def test_sqlite_runs_wal_with_foreign_keys(sqlite_url):
    db = ds.TrialDB(sqlite_url)
    with db.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    with pytest.raises(sa.exc.IntegrityError):
        with db.engine.begin() as c:
            c.execute(sa.insert(Trial.__table__).values(key="k", request_id=999, llm_id=999))


def test_db_init_idempotent_and_info(any_url, tmp_path):
    for _ in range(2):
        r = runner.invoke(app, ["db", "init", "--db", any_url])
        assert r.exit_code == 0, r.output
    ds.TrialDB(any_url).import_trials("cue", cue_frame())
    r = runner.invoke(app, ["db", "info", "--db", any_url, "--json"])
    assert r.exit_code == 0
    assert '"validity_rate"' in r.output and '"m1"' in r.output


def test_every_command_has_help_with_example():
    import click
    import typer.main
    cmd = typer.main.get_command(app)

    def walk(c, path):
        if hasattr(c, "commands"):
            for name, sub in c.commands.items():
                yield from walk(sub, path + [name])
        else:
            yield path
    paths = list(walk(cmd, []))
    assert len(paths) >= 5
    for p in paths:
        r = runner.invoke(app, p + ["--help"])
        assert r.exit_code == 0 and "Example" in r.output, p
    from discern_stats.bayes import DiscernmentModel
    draws_help = next(o.help for o in cmd.commands["demo"].params if o.name == "draws")
    assert f"the discernment model takes {DiscernmentModel.draws_factor} times as many" in draws_help, draws_help


def test_reimport_with_a_changed_truth_or_reliability_is_refused_and_changes_nothing(sqlite_url, tmp_path):
    items = tmp_path / "items.csv"
    items.write_text("item_id,question,truth\nq1,How many legs has a spider?,8\n")
    assert runner.invoke(app, ["import", "items", str(items), "--db", sqlite_url]).exit_code == 0
    items.write_text("item_id,question,truth\nq1,How many legs has a spider?,6\n")
    r = runner.invoke(app, ["import", "items", str(items), "--db", sqlite_url])
    assert r.exit_code == 2 and "item_id 'q1' is already in the database with a different question or truth" in r.output
    assert "stored 8.0, here 6.0" in r.output and "Traceback" not in r.output, r.output
    assert ds.TrialDB(sqlite_url).table(Item).truth.tolist() == [8.0]
    src = tmp_path / "sources.csv"
    src.write_text("domain,reliability,popularity\nnews.example,0.7,0.5\n")
    assert runner.invoke(app, ["import", "sources", str(src), "--db", sqlite_url]).exit_code == 0
    src.write_text("domain,reliability,popularity\nnews.example,0.7,0.9\n")
    r = runner.invoke(app, ["import", "sources", str(src), "--db", sqlite_url])
    assert r.exit_code == 2 and "different reliability or popularity (popularity: stored 0.5, here 0.9)" in r.output, r.output
    assert ds.TrialDB(sqlite_url).table(Source).popularity.tolist() == [0.5]

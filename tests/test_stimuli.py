"""The real Design A item bank, the popularity importer, and the stimuli export for other harnesses."""

from __future__ import annotations

import json
from importlib import resources

import pandas as pd
import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.cli import app
from discern_stats.store.db import Item, Request, Source
from discern_stats.designs import item_bank

runner = CliRunner()


def test_gapminder_bank_matches_its_source_file():
    items = item_bank.gapminder_items()
    assert len(items) >= 1000 and items.item_id.is_unique and items.question.is_unique
    assert pd.api.types.is_numeric_dtype(items.truth) and (items.truth > 0).all()
    # an independent read of the shipped file: population of Japan in 1982, life expectancy of Chile in 2007
    with resources.files("discern_stats.data").joinpath("gapminder.csv").open() as f:
        raw = pd.read_csv(f).set_index(["country", "year"])
    t = items.set_index("item_id").truth
    # stated answers: population and GDP per capita to 3 significant figures, life expectancy to whole years
    assert t["gm-japan-population-1982"] == 118_000_000 and raw.loc[("Japan", 1982), "pop"] == 118_454_974
    assert t["gm-chile-life-expectancy-2007"] == 79 and round(raw.loc[("Chile", 2007), "lifeExp"]) == 79
    assert t["gm-korea-rep-gdp-per-capita-1962"] == float(f"{raw.loc[('Korea, Rep.', 1962), 'gdpPercap']:.3g}")
    q = items.set_index("item_id").question
    assert q["gm-korea-rep-gdp-per-capita-1962"] == ("What was the GDP per capita of South Korea in 1962, in "
                                                      "constant 2005 international dollars (purchasing power parity)?")
    assert q["gm-united-states-population-2007"] == "What was the total population of the United States in 2007?"
    tags = items.set_index("item_id")
    assert tags.loc["gm-japan-population-1982", "correct_rule"] == "rel:0.05"
    assert tags.loc["gm-chile-life-expectancy-2007", "sig_figs"] == 2 and (tags.scale == "ratio").all()
    # era split at 1993 and OECD tags
    assert set(items.loc[items.year < 1993, "era"]) == {"pre-internet"} and set(items.loc[items.year > 1993, "era"]) == {"post-internet"}
    oecd = items.drop_duplicates("country").set_index("country").oecd
    assert oecd["Japan"] == "yes" and oecd["Chile"] == "yes" and oecd["Brazil"] == "no" and (oecd == "yes").sum() == 34
    then = items.set_index("item_id").oecd_then
    assert then["gm-mexico-population-1982"] == "no" and then["gm-mexico-population-1997"] == "yes"
    assert items.data_source.str.contains("CC BY 4.0").all()


def test_stratified_subset_is_even_and_seeded():
    items = item_bank.gapminder_items()
    sub = item_bank.stratified_items(items, 24, seed=0)
    assert len(sub) == 24 and set(sub.groupby(["era", "oecd", "topic"]).size()) == {2}
    assert list(item_bank.stratified_items(items, 24, seed=0).item_id) == list(sub.item_id)
    assert list(item_bank.stratified_items(items, 24, seed=1).item_id) != list(sub.item_id)


def test_design_l2d_defaults_to_the_gapminder_bank(sqlite_url):
    r = runner.invoke(app, ["design", "l2d", "--items", "12", "--strategies", "zero-shot", "--fictional-sources",
                            "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "12 items x 6 sources per item; 372 planned requests (372 new)" in r.output
    assert "FICTIONAL sources: 24 invented demo domains" in r.output
    db = ds.TrialDB(sqlite_url)
    assert len(db.table(Item)) == len(item_bank.gapminder_items())
    reqs = db.table(Request)
    assert reqs.item_id.str.startswith("gm-").all() and reqs.item_id.nunique() == 12
    r = runner.invoke(app, ["design", "l2d", "--items", "99999", "--fictional-sources", "--db", sqlite_url])
    assert r.exit_code == 2 and "the bank has 1704 items" in r.output


def test_item_file_with_non_numeric_truth_is_one_line(sqlite_url, tmp_path):
    f = tmp_path / "items.csv"
    f.write_text("item_id,question,truth\nx1,How many?,12\nx2,How tall?,about ten\n")
    r = runner.invoke(app, ["import", "items", str(f), "--db", sqlite_url])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "'about ten' is not a finite number" in r.output and "row 2" in r.output
    assert len(ds.TrialDB(sqlite_url).table(Item)) == 0


@pytest.fixture()
def sources_db(sqlite_url, tmp_path):
    f = tmp_path / "sources.csv"
    f.write_text("domain,reliability\nNYTimes.com,0.9\nwww.bbc.co.uk,0.8\nnews.example.org,0.4\nnowhere.test,0.2\n"
                 "blog.tiny.io,0.3\n")
    r = runner.invoke(app, ["import", "sources", str(f), "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    return sqlite_url


def test_tranco_list_matches_case_www_and_subdomains(sources_db, tmp_path):
    f = tmp_path / "tranco.csv"
    f.write_text("1,google.com\n2,nytimes.com\n3,bbc.co.uk\n4,example.org\n5,io\n")
    out = tmp_path / "unmatched.txt"
    r = runner.invoke(app, ["import", "popularity", str(f), "--unmatched", str(out), "--db", sources_db])
    assert r.exit_code == 0, r.output
    assert "3 of 5 sources matched 5 listed domains (2 exactly, 1 through a parent domain)" in r.output
    assert "news.example.org -> example.org" in r.output
    assert out.read_text().split() == ["nowhere.test", "blog.tiny.io"]  # 'io' alone is never a parent
    pop = ds.TrialDB(sources_db).table(Source).set_index("domain").popularity
    assert pop["NYTimes.com"] == pytest.approx(-0.30103, abs=1e-5) and pop["www.bbc.co.uk"] == pytest.approx(-0.47712, abs=1e-5)
    assert pop["news.example.org"] == pytest.approx(-0.60206, abs=1e-5) and pd.isna(pop["nowhere.test"])


def test_open_pagerank_csv_and_a_file_without_domains(sources_db, tmp_path):
    f = tmp_path / "opr.csv"
    f.write_text('"Rank","Domain","Open Page Rank"\n"1","nytimes.com","9.5"\n"2","bbc.co.uk","9.1"\n')
    r = runner.invoke(app, ["import", "popularity", str(f), "--db", sources_db])
    assert r.exit_code == 0 and "popularity = Open PageRank score (0-10)" in r.output, r.output
    assert ds.TrialDB(sources_db).table(Source).set_index("domain").popularity["NYTimes.com"] == 9.5
    bad = tmp_path / "bad.csv"
    bad.write_text("rank,site\n1,nytimes.com\n")
    before = ds.TrialDB(sources_db).table(Source)
    r = runner.invoke(app, ["import", "popularity", str(bad), "--db", sources_db])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "no 'domain' column" in r.output
    pd.testing.assert_frame_equal(ds.TrialDB(sources_db).table(Source), before)


def test_world_seed_out_of_range_is_one_line(sqlite_url):
    for seed in ("10000", "-1"):
        r = runner.invoke(app, ["design", "cue", "--seed", seed, "--worlds", "2", "--db", sqlite_url])
        assert r.exit_code == 2 and "world seed" in r.output and "out of range" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1


def test_stimuli_export_for_other_harnesses(sqlite_url, tmp_path):
    assert runner.invoke(app, ["design", "cue", "--worlds", "2", "--interventions", "C0,C3", "--db", sqlite_url]).exit_code == 0
    assert runner.invoke(app, ["design", "l2d", "--items", "3", "--strategies", "CoT", "--fictional-sources",
                               "--db", sqlite_url]).exit_code == 0
    out = tmp_path / "cue.jsonl"
    r = runner.invoke(app, ["export", "stimuli", "cue", "--out", str(out), "--db", sqlite_url])
    assert r.exit_code == 0 and "wrote 136 planned cue requests" in r.output, r.output
    recs = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert len(recs) == 136 and len({x["id"] for x in recs}) == 136
    reqs = ds.TrialDB(sqlite_url).table(Request).set_index("key")
    for x in recs:
        req = reqs.loc[x["id"]]
        assert x["input"] == json.loads(req.messages_json) and x["target"] == (req.gold if isinstance(req.gold, str) else "")
        assert x["metadata"]["condition"] == req.condition and x["metadata"]["facts"]["world_id"] == req.world_id
        # the options are in the text once: choices stays empty (multiple_choice() would list them again)
        assert x["choices"] == []
        if req.answer_format == "letter":
            texts = x["metadata"]["option_texts"]
            assert len(texts) in (2, 4) and x["input"][-1]["content"].endswith(texts[max(texts)])
            assert set(x["metadata"]["options"]) <= set(texts)
    out = tmp_path / "l2d.jsonl"
    assert runner.invoke(app, ["export", "stimuli", "l2d", "--out", str(out), "--db", sqlite_url]).exit_code == 0
    recs = {json.loads(ln)["id"]: json.loads(ln) for ln in out.read_text().splitlines()}
    post = next(x for x in recs.values() if x["metadata"]["stage"] == "posterior")
    prior = recs[post["metadata"]["parent_id"]]
    assert post["input"][:2] == prior["input"] and post["input"][2] == {"role": "assistant", "content": "{prior reply}"}
    assert "says the answer is" in post["input"][3]["content"] and post["metadata"]["truth"] > 0
    assert "raw reply" in post["metadata"]["prior_reply"] and "not the parsed number" in post["metadata"]["prior_reply"]
    # Design A's target carries the truth as stated (before: always empty)
    for x in recs.values():
        assert x["target"] and float(x["target"]) == x["metadata"]["truth"]
    r = runner.invoke(app, ["export", "stimuli", "cue", "--out", str(tmp_path / "x.csv"), "--db", sqlite_url])
    assert r.exit_code == 2 and ".jsonl" in r.output


def test_an_older_database_gains_the_facts_column_and_a_warning(sqlite_url):
    import sqlalchemy as sa
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    from discern_stats.designs import design_cue
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with db.engine.begin() as conn:  # what a database planned before evidence graphs looks like
        conn.execute(sa.text("ALTER TABLE request DROP COLUMN facts_json"))
    db = ds.TrialDB(sqlite_url)  # opening it adds the column back, empty
    assert ds.TrialDB(sqlite_url).table(Request).facts_json.isna().all()
    spec = spec_from_dict({"name": "old", "design": "cue", "llms": [{"name": "s", "provider": "synthetic:credulous"}]})
    with pytest.warns(UserWarning, match="48 planned Design B requests have no structured facts"):
        res = collect(db, spec, progress=False)
    assert res.done == 48

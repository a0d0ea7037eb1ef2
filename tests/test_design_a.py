"""Design A stimuli measure what seed 000 measures (issue 23, points 1-6): real sources or a
one-line refusal, claims at the item's precision, per-item correctness, unambiguous and
non-anachronistic questions, the paper's Reliability and Defense strategies, ratio-scale items."""

from __future__ import annotations

import collections
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.cli import app
from discern_stats.collect.parsing import answer_spec, parse_answer
from discern_stats.core import answers
from discern_stats.core.vocab import FACTORS, STRATEGIES
from discern_stats.designs import item_bank, l2d
from discern_stats.store.db import Item, Request, Source

runner = CliRunner()


# ---------------------------------------------------------------- 1. real sources
def test_design_l2d_refuses_fictional_sources_in_one_line(sqlite_url):
    r = runner.invoke(app, ["design", "l2d", "--items", "6", "--db", sqlite_url])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "import sources --lin2023" in r.output and "import popularity" in r.output
    assert "--fictional-sources" in r.output
    assert len(ds.TrialDB(sqlite_url).table(Request)) == 0  # nothing planned


def test_lin2023_table_is_shipped_with_its_provenance():
    lin = l2d.lin2023_sources()
    assert list(lin.columns) == ["domain", "pc1"] and len(lin) == 11_520 and lin.domain.is_unique
    assert lin.pc1.between(0, 1).all() and lin.set_index("domain").pc1["reuters.com"] == 1
    shared = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "lin2023_domain_pc1.csv"
    if shared.exists():  # byte for byte the project's copy of the published table
        assert shared.read_bytes() == resources.files("discern_stats.data").joinpath(
            "lin2023_domain_pc1.csv").read_bytes()
    readme = resources.files("discern_stats.data").joinpath("README.md").read_text()
    assert "10.1093/pnasnexus/pgad286" in readme and "Feel free to reuse the data" in readme


def test_real_sources_plan_with_a_seed_000_pool(sqlite_url, tmp_path):
    r = runner.invoke(app, ["import", "sources", "--lin2023", "--db", sqlite_url])
    assert r.exit_code == 0 and "imported 11520 new source(s)" in r.output, r.output
    lin = l2d.lin2023_sources()
    rng = np.random.default_rng(0)
    pick = lin[~lin.domain.str.contains("/")].sample(400, random_state=1)  # a made-up ranking for 400 (test data)
    f = tmp_path / "opr.csv"
    pd.DataFrame({"Rank": range(1, 401), "Domain": pick.domain, "Open Page Rank": rng.uniform(0, 10, 400).round(2)}
                 ).to_csv(f, index=False)
    r = runner.invoke(app, ["import", "popularity", str(f), "--db", sqlite_url])
    assert r.exit_code == 0 and "matched 400 listed domains (400 exactly" in r.output, r.output  # pages never match
    r = runner.invoke(app, ["design", "l2d", "--items", "12", "--strategies", "zero-shot", "--source-pool", "132",
                            "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "real sources" in r.output and "Lin et al. (2023) PC1" in r.output and "FICTIONAL" not in r.output
    reqs = ds.TrialDB(sqlite_url).table(Request)
    used = set(reqs.source.dropna())
    assert all(any(u == p or u.endswith("." + p) for p in pick.domain) for u in used) and len(used) <= 132
    src = ds.TrialDB(sqlite_url).table(Source).set_index("domain")
    assert not src.loc[sorted(used), "fictional"].any()
    r = runner.invoke(app, ["design", "l2d", "--source-pool", "100", "--db", sqlite_url])
    assert r.exit_code == 2 and "multiple of 6" in r.output


# ---------------------------------------------------------------- 2. claim precision
def test_claim_form_does_not_reveal_the_factor_on_the_whole_bank():
    """Before: 6,276 of the 10,224 zero-shot F = 1/3 claims carried 3+ decimals, F = 1 claims none."""
    items = item_bank.gapminder_items()
    claims = {f: [answers.claim_text(t, f, k, e) for t, k, e in zip(items.truth, items.sig_figs, items.truth_exact)]
              for f in FACTORS}
    dp = {f: collections.Counter(answers.decimals(c) for c in cs) for f, cs in claims.items()}
    assert all(dp[f] == dp[1.0] for f in FACTORS)  # the same decimal places under every factor
    sig = pd.DataFrame({f: collections.Counter(answers.sig_digits(c) for c in cs) for f, cs in claims.items()}).fillna(0)
    # total variation distance to F = 1: the edge of the best guess of "F = 1 or not" from a claim's
    # significant digits over a coin flip (it is 0.022 here: life expectancies in whole years end in 0 a
    # little more often at F = 1; before this, the decimals alone told F = 1/3 apart in 61 % of items)
    share = sig / sig.sum()
    assert (share.sub(share[1.0], axis=0).abs().sum() / 2).max() < 0.03
    assert all(c == answers.format_number(t) for c, t in zip(claims[1.0], items.truth))  # F = 1 is the truth
    # the planned requests show exactly these texts
    plan = l2d.build_requests(items.head(30), l2d.demo_sources(), strategies=("zero-shot",))
    shown = {(r["item_id"], r["factor"]): json.loads(r["messages_json"])[0]["content"].split(" says the answer is ")[1]
             .split(". What")[0] for r in plan.requests if r["stage"] == "posterior"}
    ix = items.set_index("item_id")
    for (iid, f), text in shown.items():
        assert text == answers.claim_text(ix.truth[iid], f, ix.sig_figs[iid], ix.truth_exact[iid])


def test_claim_rounding_hand_cases():
    assert answers.claim_text(32, 1 / 3) == "11"  # an integer answer gets an integer claim
    assert answers.claim_text(45.2, 1 / 3) == "15.1" and answers.claim_text(0.25, 3) == "0.75"
    assert answers.claim_text(118_000_000, 1 / 3, 3, 118_454_974) == "39500000"
    assert answers.claim_text(8, 2) == "16" and answers.claim_text(8, 3) == "24"


# ---------------------------------------------------------------- 3. correctness
def test_correctness_rules_and_their_import():
    T = np.full(4, 100.0)
    x = np.array([100.0, 104.9, 105.1, 96.0])
    assert list(answers.is_correct(x, T, "rel:0.05")) == [True, True, False, True]
    assert list(answers.is_correct(x, T, None)) == [True, False, False, False]  # exact
    assert list(answers.is_correct(np.array([118.4e6, 118.6e6]), np.full(2, 118e6), "sig:3")) == [True, False]
    assert list(answers.is_correct(np.array([79.9, 80.1]), np.full(2, 79.0), "abs:1")) == [True, False]
    with pytest.raises(ValueError):
        answers.parse_rule("within 5%")
    items = item_bank.gapminder_items()
    assert set(items.correct_rule) == {"rel:0.05", "rel:0.10", "abs:1"}


def test_import_items_takes_a_correct_rule_column_and_refuses_a_bad_one(sqlite_url, tmp_path):
    f = tmp_path / "items.csv"
    f.write_text("item_id,question,truth,correct_rule\nx1,How many legs has a spider?,8,exact\n"
                 "x2,How many bones has an adult human?,206,rel:0.01\n")
    assert runner.invoke(app, ["import", "items", str(f), "--db", sqlite_url]).exit_code == 0
    tags = ds.TrialDB(sqlite_url).table(Item).set_index("item_id").tags_json.map(json.loads)
    assert tags["x2"]["correct_rule"] == "rel:0.01"
    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,question,truth,correct_rule\nx3,How many moons has Mars?,2,about right\n")
    r = runner.invoke(app, ["import", "items", str(bad), "--db", sqlite_url])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "correct_rule" in r.output


def test_gapminder_priors_can_be_correct():
    """Before: truths exact to the person and an exact-equality rule, so a prior of 118 million for
    Japan 1982 (118,454,974) was wrong; now it is correct within the item's 5 %."""
    ix = item_bank.gapminder_items().set_index("item_id")
    r = ix.loc["gm-japan-population-1982"]
    assert answers.is_correct(np.array([118e6, 115e6, 110e6]), np.full(3, r.truth), r.correct_rule).tolist() == [
        True, True, False]


# ---------------------------------------------------------------- 4. unambiguous questions
# the year each state took its present form (independent of item_bank.STATEHOOD): reunification of
# Germany 1990; dissolution of Czechoslovakia 1993; Slovenia, Croatia 1991; Bosnia and Herzegovina 1992;
# Serbia, Montenegro 2006; Eritrea 1993; Yemen 1990; Namibia 1990; West Bank and Gaza (PA) 1994
FORMED = {"Germany": 1990, "Czech Republic": 1993, "Slovak Republic": 1993, "Slovenia": 1991, "Croatia": 1991,
          "Bosnia and Herzegovina": 1992, "Serbia": 2006, "Montenegro": 2006, "Eritrea": 1993, "Yemen, Rep.": 1990,
          "Namibia": 1990, "West Bank and Gaza": 1994}


def test_no_item_asks_about_a_state_before_it_existed():
    """Before: 72 items (12 states x 3 indicators x 2 pre-1993 years) asked e.g. "the population of
    Germany in 1962", answered for today's borders; now they ask about the territory."""
    items = item_bank.gapminder_items()
    early = items[[y < FORMED.get(c, 0) for c, y in zip(items.country, items.year)]]
    assert len(early) == 78  # 72 before 1993, plus Serbia and Montenegro in 1997
    assert early.question.str.contains("the territory of (?:the )?present-day", regex=True).all()
    later = items[[y >= item_bank.STATEHOOD.get(c, 0) for c, y in zip(items.country, items.year)]]
    assert not later.question.str.contains("territory of").any()
    ix = items.set_index("item_id").question
    assert ix["gm-germany-population-1962"] == "What was the total population of the territory of present-day Germany in 1962?"
    assert "constant 2005 international dollars (purchasing power parity)" in ix["gm-kuwait-gdp-per-capita-1962"]
    assert "(then Zaire)" in ix["gm-congo-dem-rep-population-1982"]


def test_item_bank_documentation_exists():
    doc = resources.files("discern_stats.data").joinpath("ITEM_BANK.md").read_text()
    assert "data/ITEM_BANK.md" in item_bank.__doc__
    for word in ("CC BY 4.0", "2005 international dollars", "rel:0.05", "territory of present-day", "sig_figs"):
        assert word in doc


# ---------------------------------------------------------------- 5. strategies
def test_reliability_and_defense_strategies_are_the_papers():
    rel = l2d.SYSTEM_PROMPTS["Reliability"] + l2d.posterior_turn("bbc.co.uk", "12", "Reliability")[0]["content"]
    assert "rate how reliable" in rel and "justify" in rel and '"justification"' in rel
    assert rel.index('"reliability"') < rel.index('"justification"') < rel.index('"answer"')
    dfn = l2d.SYSTEM_PROMPTS["Defense"] + l2d.posterior_turn("bbc.co.uk", "12", "Defense")[0]["content"]
    assert dfn.count("check explicitly whether your previous answer is correct") == 2
    assert set(l2d.SYSTEM_PROMPTS) == set(STRATEGIES)


def test_simulator_answers_the_new_formats_and_the_parser_reads_them():
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from discern_stats.simulate.respondent import SyntheticChatModel
    m = SyntheticChatModel(profile_name="source-sensitive", invalid_rate=0.0,
                           knowledge={"How many legs has a spider?": 8.0},
                           source_knowledge={"bbc.co.uk": (0.9, 0.8)})
    for strat in ("Reliability", "Defense"):
        prior = [SystemMessage(l2d.SYSTEM_PROMPTS[strat]), HumanMessage(l2d.PRIOR_TEMPLATE.format(
            question="How many legs has a spider?"))]
        p1 = m.respond(prior)
        turn = l2d.posterior_turn("bbc.co.uk", "24", strat)[0]["content"]
        out = m.respond(prior + [AIMessage(p1), HumanMessage(turn)])
        parsed = parse_answer(out, answer_spec("number", strategy=strat, stage="posterior")).headline  # strict
        assert parsed.valid, (strat, out)
        if strat == "Reliability":
            obj = json.loads(out)
            assert list(obj) == ["reliability", "justification", "answer"] and obj["justification"]
            assert parsed.rated_reliability == obj["reliability"]
        else:
            assert out.startswith("Check: my previous answer was") and "\n" in out


# ---------------------------------------------------------------- 6. ratio scale
def test_items_a_factor_cannot_scale_are_refused_at_import(sqlite_url, tmp_path):
    f = tmp_path / "items.csv"
    f.write_text("item_id,question,truth\nw1,How many people live in Oslo?,700000\n"
                 "w2,In what year did the Berlin Wall fall?,1989\n")
    r = runner.invoke(app, ["import", "items", str(f), "--db", sqlite_url])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "'w2'" in r.output and "year" in r.output and "ratio" in r.output and "row 2" in r.output
    assert len(ds.TrialDB(sqlite_url).table(Item)) == 0  # nothing imported
    p = tmp_path / "pct.csv"
    p.write_text("item_id,question,truth\np1,What percentage of Norwegians voted in 2021?,77\n")
    r = runner.invoke(app, ["import", "items", str(p), "--db", sqlite_url])
    assert r.exit_code == 2 and "exceeds 100" in r.output
    ok = tmp_path / "ok.csv"  # a user who knows better states the scale
    ok.write_text("item_id,question,truth,scale\nd1,How many years did the Hundred Years' War last?,116,ratio\n"
                  "p2,What percentage of Earth's surface is ocean?,71,bounded\n")
    r = runner.invoke(app, ["import", "items", str(ok), "--db", sqlite_url])
    assert r.exit_code == 2 and "'p2'" in r.output and "bounded" in r.output
    ok.write_text("item_id,question,truth,scale\nd1,How many years did the Hundred Years' War last?,116,ratio\n")
    assert runner.invoke(app, ["import", "items", str(ok), "--db", sqlite_url]).exit_code == 0

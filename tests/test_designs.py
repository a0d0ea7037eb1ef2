"""Design A and Design B stimuli: counts, counterbalancing, determinism, content, no gold leaks."""

from __future__ import annotations

import collections
import hashlib
import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.cli import app
from discern_stats.db import Request
from discern_stats.designs import cue, l2d
from discern_stats.designs.tokens import count_tokens

runner = CliRunner()


@pytest.fixture(scope="module")
def bank():
    worlds = cue.build_worlds(0)
    return worlds, [r for w in worlds for r in cue.world_requests(w)]


def test_world_bank_counts(bank):
    worlds, reqs = bank
    assert len(worlds) == 500
    c = collections.Counter(w.stratum for w in worlds)
    assert c == {"core": 300, "structural": 120, "naturalized": 80}
    assert collections.Counter(w.axis for w in worlds if w.stratum == "structural") == {a: 24 for a in cue.STRUCTURAL_AXES}
    assert collections.Counter(w.relation for w in worlds if w.stratum == "structural") == {r: 10 for r in cue.RELATIONS}
    assert len({w.relation for w in worlds}) == 12
    assert collections.Counter(w.domain for w in worlds) == {d: 20 for d in cue.DOMAINS}
    assert collections.Counter(w.discourse_format for w in worlds) == {f: 50 for f in cue.FORMATS}
    assert collections.Counter(w.quality_realization for w in worlds) == {q: 125 for q in cue.QUALITY_REALIZATIONS}
    assert collections.Counter(w.background for w in worlds) == {b: 50 for b in cue.BACKGROUNDS}
    assert collections.Counter(w.option_order for w in worlds) == {"AB": 250, "BA": 250}
    assert collections.Counter(w.shared_root_owner for w in worlds) == {"O1": 250, "O2": 250}


def test_request_counts(bank):
    worlds, reqs = bank
    assert len(reqs) == 24000
    per_world = collections.Counter(r.world_id for r in reqs)
    assert set(per_world.values()) == {48}
    tracks = collections.Counter((r.track, r.probe) for r in reqs if r.world_id == worlds[0].world_id)
    assert tracks == {("representation", "P1"): 8, ("representation", "P2"): 8, ("representation", "P3c"): 4,
                      ("representation", "P3a"): 4, ("representation", "P3b"): 4, ("factorial", "P4"): 8,
                      ("swap", "P4"): 2, ("competition", "P4"): 8, ("verified", "P4"): 2}
    assert sum(r.gold is not None for r in reqs) == 15000
    assert sum(r.gold is None for r in reqs) == 9000
    assert sum(r.answer_format == "letter" for r in reqs) == 20000
    assert sum(r.answer_format == "integer" for r in reqs) == 4000
    # system prompts of seed 001 C.2
    assert {r.system for r in reqs} == {cue.SYSTEM_MC, cue.SYSTEM_INT}
    assert all(r.user.endswith("Return one integer from 0 to 8.") for r in reqs if r.answer_format == "integer")


def _digest(reqs) -> str:
    h = hashlib.sha256()
    for r in reqs:
        h.update(json.dumps([r.world_id, r.condition, r.gold, r.options, r.messages()], ensure_ascii=False).encode())
    return h.hexdigest()


def test_same_seed_identical_other_seed_different(bank):
    worlds, reqs = bank
    again = [r for w in cue.build_worlds(0) for r in cue.world_requests(w)]
    assert _digest(again) == _digest(reqs)
    other = cue.build_worlds(1)
    assert [(w.relation, w.entity_code, w.value_a) for w in other] != [(w.relation, w.entity_code, w.value_a) for w in worlds]


def _ctx_line(user: str, pat: str) -> list[str]:
    return re.findall(pat, user)


def test_swap_conditions_state_their_histories(bank):
    worlds, reqs = bank
    for w in worlds[:60]:
        rs = {r.condition: r for r in reqs if r.world_id == w.world_id and r.track == "swap"}
        for cond, (ha, hb) in (("HL", (7, 4)), ("LH", (4, 7))):
            r = rs[cond]
            hist = {o: int(k) for o, k in re.findall(r"(O\d)(?:'s track record: |: in 8 fully verified earlier cases, )(\d)", r.user)}
            # which observer's record carries value A / B
            rec_obs = dict(re.findall(r"Record (e\d) is .*? made by (O\d)", r.user))
            for m in re.finditer(r"cites record (e\d)[.,].*? (?:was) ([^\n]+?)\.$", r.user, re.M):
                val = m.group(2)
                state = "A" if val == w.value_a else "B"
                assert hist[rec_obs[m.group(1)]] == (ha if state == "A" else hb)


def test_factorial_conditions_state_their_facts(bank):
    worlds, reqs = bank
    w = worlds[3]
    for r in (r for r in reqs if r.world_id == w.world_id and r.track == "factorial"):
        R, Q, I = re.match(r"R(HH|LL)-Q(clear|limited)-I(separate|shared)", r.condition).groups()
        k = "7" if R == "HH" else "4"
        assert r.user.count(f", {k} of O") + r.user.count(f"{k} out of 8") == 2
        assert ("Part of the target identifier is unavailable" in r.user) == (Q == "limited")
        cited = re.findall(r"cites record (e\d)", r.user)
        assert len(cited) == 2 and (len(set(cited)) == 2) == (I == "separate")


def test_option_letters_are_counterbalanced_and_gold_maps_to_state(bank):
    worlds, reqs = bank
    for w in worlds[:40]:
        for r in (r for r in reqs if r.world_id == w.world_id and r.probe == "P1"):
            letter_of_a = "A" if w.option_order == "AB" else "B"
            assert r.gold == letter_of_a and r.options[letter_of_a] == "A"
            assert f"{letter_of_a}. {w.value_a}" in r.user


def test_no_gold_leak_outside_verified(bank):
    worlds, reqs = bank
    for r in reqs:
        has_verification = "Trusted target-time verification (14:00)" in r.user
        assert has_verification == (r.track == "verified"), (r.track, r.condition)
        if r.track in ("factorial", "swap", "competition"):
            assert r.gold is None
    w = worlds[0]
    for r in (r for r in reqs if r.world_id == w.world_id and r.track == "verified"):
        state = r.condition.split("=")[1]
        assert r.options[r.gold] == state
        assert f"was {w.value_a if state == 'A' else w.value_b}." in r.user.split("Trusted target-time verification")[1]


def test_interventions_flat_and_ledger_from_one_fact_set_and_sham_length():
    w = cue.build_worlds(0)[5]
    rs = cue.world_requests(w, cue.INTERVENTIONS)
    assert len(rs) == 48 + 4 * 20
    by = collections.defaultdict(dict)
    for r in rs:
        if r.track != "representation":
            by[(r.track, r.condition)][r.intervention] = r.user
    for key, d in by.items():
        base = d["C0"]
        for iv in ("C1", "C2", "C3", "C4"):
            assert d[iv].startswith(base.split("\n\nAt 14:00")[0])
        ledger = d["C3"].split("\n\n")[1]
        sham = d["C1"].split("\n\n")[1]
        assert abs(count_tokens(sham) - count_tokens(ledger)) <= 0.10 * count_tokens(ledger), key
        assert d["C4"].split("\n\n")[1].startswith(ledger) and "Weighting rule" in d["C4"]
        flat = d["C2"].split("\n\n")[1]
        # every history and record of the ledger is restated in the prose
        for src, hist, recs in re.findall(r"^(O\d) \| (\d)/8 \| ([^|]+?) ", ledger, re.M):
            assert f"{src} has a history in which {hist} of 8" in flat
        if key[0] == "verified":
            assert "verification" not in ledger.lower().replace("verified history", "")


def test_l2d_requests_and_strata():
    items = l2d.demo_items()
    sources = l2d.demo_sources()
    plan = l2d.build_requests(items, sources, seed=3, per_stratum=1)
    pri = [r for r in plan.requests if r["stage"] == "prior"]
    post = [r for r in plan.requests if r["stage"] == "posterior"]
    assert len(pri) == len(items) * 5
    assert len(post) == len(items) * 5 * 6 * 5
    strata = l2d.stratify_sources(sources).set_index("domain")
    for item in items.item_id:
        used = {r["source"] for r in post if r["item_id"] == item and r["strategy"] == "CoT"}
        cells = collections.Counter((strata.loc[s, "pop_tier"], strata.loc[s, "rel_tier"]) for s in used)
        assert len(cells) == 6 and set(cells.values()) == {1}
    truth = items.set_index("item_id")["truth"]
    for r in post:
        assert r["claim"] == pytest.approx(truth[r["item_id"]] * r["factor"], rel=1e-9)
        turn = json.loads(r["messages_json"])[0]["content"]
        assert turn.startswith(f"{r['source']} says the answer is ") and "What do you think now?" in turn
        assert ("rate how reliable" in turn) == (r["strategy"] == "Reliability")
    assert l2d.build_requests(items, sources, seed=3).requests == plan.requests
    assert l2d.build_requests(items, sources, seed=4).requests != plan.requests


def test_design_cli_writes_idempotently(sqlite_url):
    r = runner.invoke(app, ["design", "cue", "--worlds", "10", "--interventions", "C0,C3", "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "10 worlds; 680 planned requests (680 new)" in r.output
    r = runner.invoke(app, ["design", "cue", "--worlds", "10", "--interventions", "C0,C3", "--db", sqlite_url])
    assert "(0 new)" in r.output
    r = runner.invoke(app, ["design", "l2d", "--strategies", "zero-shot,CoT", "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "24 items x 6 sources per item; 1488 planned" in r.output
    r = runner.invoke(app, ["design", "cue", "--interventions", "C9", "--db", sqlite_url])
    assert r.exit_code == 2 and "unknown intervention 'C9'" in r.output
    reqs = ds.TrialDB(sqlite_url).table(Request)
    cue_reqs = reqs[reqs.design == "cue"]
    assert cue_reqs[["track", "probe", "condition", "intervention", "stratum"]].notna().all().all()


def test_demo_runs_end_to_end(tmp_path):
    r = runner.invoke(app, ["demo", "--out", str(tmp_path / "d"), "--worlds", "4", "--resamples", "50",
                            "--models", str(tmp_path / "models"), "--draws", "100"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "models" / "cue_weights.nc").exists() and (tmp_path / "models" / "discernment.json").exists()
    assert (tmp_path / "d" / "report" / "index.html").exists() and "report:" in r.output
    m = pd.read_csv(tmp_path / "d" / "cue_metrics.csv")
    assert set(m.llm) == {"sim-credulous", "sim-source-sensitive", "sim-order-biased"}
    c = pd.read_csv(tmp_path / "d" / "contrasts.csv")
    assert len(c) == 48 and (c.family_size == 48).all()
    l2 = pd.read_csv(tmp_path / "d" / "l2d_metrics.csv")
    assert {"SD", "TD", "CD", "rel_propensity"} <= set(l2.metric)


def test_simulator_reads_the_same_cues_as_the_condition_labels(bank):
    from discern_stats.coding import cue_codes
    from discern_stats.collect.synthetic import cue_codes_from_text, read_cue_prompt
    worlds, _ = bank
    n = 0
    for w in worlds[::10]:
        for r in cue.world_requests(w, ["C0", "C1", "C4"]):
            if r.probe != "P4":
                continue
            facts = read_cue_prompt(r.user)
            assert cue_codes_from_text(facts) == cue_codes(r.track, r.condition), (r.world_id, r.condition)
            assert facts["intervention"] == r.intervention
            n += 1
    assert n == 50 * 3 * 20

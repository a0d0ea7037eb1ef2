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
from discern_stats.store.db import Request
from discern_stats.designs import cue, cue_bank, cue_fidelity, cue_render, l2d
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


def _graphs(w):
    """Every distinct evidence graph of a world's requests."""
    from discern_stats.core import vocab
    yield from (cue_bank.factorial_graph(w, *f) for f in vocab.FACTORIAL)
    yield from (cue_bank.history_graph(w, h) for h in vocab.HISTORY_CONFIGS)
    yield from (cue_bank.order_time_graph(w, o, t) for o, t in vocab.COMPETITION_ORDER)
    yield from (cue_bank.structure_graph(w, s) for s in vocab.STRUCTURE_STEPS)
    yield from (cue_bank.verified_graph(w, v) for v in vocab.VERIFIED_STATES)


def test_every_rendering_carries_its_graph(bank):
    """Fidelity: the facts a probe depends on are read back from the text of every evidence graph of
    every world, in each of the ten formats and the Naturalized prose (500 x 22 graphs x 11)."""
    worlds, _ = bank
    fmts = list(cue_render.RENDERERS) + [cue_render.NATURALIZED]
    n = 0
    for w in worlds:
        for g in _graphs(w):
            for fmt in fmts:
                problems = cue_fidelity.check_rendering(g, cue_render.render_graph(g, fmt))
                assert not problems, (w.world_id, fmt, problems)
                n += 1
    assert n == 500 * 22 * 11


def _line(text, pred):
    return next(i for i, ln in enumerate(text.splitlines()) if pred(ln))


def _garble(text, i, old, new):
    """``text`` with ``old`` replaced by ``new`` on line ``i`` only."""
    lines = text.splitlines()
    assert old in lines[i], (old, lines[i])
    lines[i] = lines[i].replace(old, new)
    return "\n".join(lines)


def test_fidelity_checker_catches_dropped_and_garbled_cues(bank):
    """Negative control: every kind of damage to one line is caught, in each of the 11 surfaces."""
    worlds, _ = bank
    w = worlds[7]
    g = cue_bank.factorial_graph(w, "HH", "limited", "separate")
    code, part = w.entity_code, cue_render.partial_code(w.entity_code)
    for fmt in list(cue_render.RENDERERS) + [cue_render.NATURALIZED]:
        text = cue_render.render_graph(g, fmt)
        assert cue_fidelity.check_rendering(g, text) == []
        lines = text.splitlines()
        msg = _line(text, lambda ln: "message 2" in ln.lower())
        first = _line(text, lambda ln: "message 1" in ln.lower())
        hist = _line(text, lambda ln: "O2" in ln and "7 of 8" in ln)
        rec = _line(text, lambda ln: "e2" in ln and "message" not in ln.lower())
        garbles = {
            "dropped message": "\n".join(lines[:msg] + lines[msg + 1:]),
            "wrong history": _garble(text, hist, "7 of 8", "4 of 8"),
            "wrong record": _garble(text, msg, "e2", "e1"),
            "wrong value": _garble(text, msg, w.value_b, w.value_a),
            "wrong event time": _garble(text, rec, "12:00", "08:00"),
            "quality lost in the record": _garble(text, rec, part, code),
            "relay states more than its record holds": _garble(text, msg, part, code),
            "per-position receipt stamp": _garble(text, msg, "12:00", "12:00 (received 13:05)"),
            "verification leaked": text + f"\nTrusted target-time verification at 14:00: the {w.attr} of {w.entity} "
                                          f"was {w.value_b}.",
            "order swapped": "\n".join(lines[:first] + [lines[msg], lines[first]] + lines[msg + 1:])
            if msg == first + 1 else None,
        }
        for what, bad in garbles.items():
            if bad is not None:
                assert bad != text and cue_fidelity.check_rendering(g, bad), (fmt, what)


def test_no_known_bad_grammar_in_any_request(bank):
    """The grammar scan finds nothing in the 24,000 C0 requests nor in every world's C1-C4 requests
    of every 10th world (the scan's classes and their fixtures: tests/test_stimuli.py)."""
    _, reqs = bank
    problems = [(r.world_id, r.condition, p) for r in reqs for p in cue_fidelity.grammar_problems(r.user)]
    assert problems == [], problems[:5]
    more = [r for w in bank[0][::10] for r in cue.world_requests(w, list(cue.INTERVENTIONS)[1:])]
    assert len(more) == 50 * 80
    assert not [p for r in more for p in cue_fidelity.grammar_problems(r.user)]


def test_constraint_checkers_pass_on_the_bank_and_catch_faults(bank):
    """The checks issue 23 added to cue_fidelity: balanced structure (every graph of every source-count
    and topology world against the world without its axis), order pairs and appendices; each with a
    negative control."""
    import dataclasses
    worlds, _ = bank
    n = 0
    for w in (w for w in worlds if w.axis in ("source-count", "graph-topology")):
        base_w = dataclasses.replace(w, axis=None, axis_variant=None)
        for g, base in zip(_graphs(w), _graphs(base_w)):
            assert cue_fidelity.structure_problems(g, base) == [], (w.world_id, cue_fidelity.structure_problems(g, base))
            n += 1
    assert n == 48 * 22
    w = next(w for w in worlds if w.axis_variant == "4-sources")
    g = cue_bank.history_graph(w, "HL")
    base = cue_bank.history_graph(dataclasses.replace(w, axis=None, axis_variant=None), "HL")
    for_a_only = dataclasses.replace(g, records=[dataclasses.replace(r, state="A") if r.extra else r for r in g.records])
    five = dataclasses.replace(g, sources=g.sources + [cue_bank.SourceNode("O5", 7)])
    moved = dataclasses.replace(g, messages=g.messages[1:] + g.messages[:1])
    for bad in (for_a_only, five, moved):
        assert cue_fidelity.structure_problems(bad, base)
    # order pairs: the same lines, unless a receipt stamp follows the text position
    a, b = (cue_render.render_graph(cue_bank.order_time_graph(w, o, "12"), "incident log") for o in "AB")
    assert cue_fidelity.order_problems(a, b) == []
    stamp = lambda t: t.replace("MESSAGE 1:", "MESSAGE 1 (first in):", 1)  # noqa: E731
    assert cue_fidelity.order_problems(stamp(a), b) and cue_fidelity.order_problems(stamp(a), stamp(b))
    # appendices: one Sham per block of whole distinct rows, the same appendix for both verified states
    reqs = cue.world_requests(worlds[3], list(cue.INTERVENTIONS))
    assert cue_fidelity.appendix_problems(reqs) == []
    hl = next(r for r in reqs if (r.intervention, r.condition) == ("C1", "HL")).user
    row = next(r for r in cue.SHAM_ROWS if r in hl)
    other = next(r for r in cue.SHAM_ROWS if r not in hl)
    swap_arm = [dataclasses.replace(r, user=r.user.replace(row, other)) if (r.intervention, r.condition) ==
                ("C1", "HL") and row in r.user else r for r in reqs]
    repeated = [dataclasses.replace(r, user=r.user.replace(row, row + "\n" + row)) if r.intervention == "C1" else r
                for r in reqs]
    cut = [dataclasses.replace(r, user=r.user.replace(row, row.rsplit(" | ", 1)[0])) if r.intervention == "C1" else r
           for r in reqs]
    ver = [dataclasses.replace(r, user=r.user.replace("Evidence ledger", "Evidence  ledger"))
           if (r.intervention, r.condition) == ("C3", "verified=B") else r for r in reqs]
    def overstate(user):  # the ledger (only) states the full code of a limited record
        head, ledger = user.split("Evidence ledger", 1)
        return head + "Evidence ledger" + ledger.replace(cue_render.partial_code(worlds[3].entity_code),
                                                         worlds[3].entity_code)
    full = [dataclasses.replace(r, user=overstate(r.user)) if r.intervention == "C3" and "limited" in r.condition
            else r for r in reqs]
    for what, bad in {"different Sham in one arm": swap_arm, "repeated row": repeated, "cut row": cut,
                      "verified appendices differ": ver, "ledger states the full code": full}.items():
        assert bad != reqs and cue_fidelity.appendix_problems(bad), what


def test_structural_axes_change_the_graph(bank):
    worlds, _ = bank
    seen = collections.Counter()
    for w in (w for w in worlds if w.stratum == "structural"):
        seen[w.axis_variant] += 1
        fs = cue_bank.factorial_graph(w, "HH", "clear", "separate")
        sh = cue_bank.factorial_graph(w, "HH", "clear", "shared")
        single = cue_bank.conflict_graph(w, 7, 7)
        v = w.axis_variant
        if v in ("3-sources", "4-sources"):
            n = int(v[0])
            for g in (fs, single):
                assert len(g.sources) == n and len({r.observer for r in g.records}) == n
                extra = [s for s in g.sources if s.name not in ("O1", "O2")]
                assert all(s.history is not None for s in extra)
                assert all(any(m.record == r.id for m in g.messages) for r in g.records if r.observer in
                           {s.name for s in extra})
        if v in ("3-messages", "4-messages"):
            n = int(v[0])
            assert len(fs.messages) == len(sh.messages) == n and len(single.messages) == n
            assert len({m.record for m in sh.messages}) == 1 and len({m.record for m in fs.messages}) == 2
        if v == "shared-archive":
            assert {m.path[-2] for m in fs.messages} == {"archive desk D"}
        if v == "separate-archives":
            assert len({m.path[-2] for m in fs.messages}) == 2 and all("archive" in m.path[-2] for m in fs.messages)
        if v in ("2-relays", "3-relays"):
            assert {len(m.path) for m in fs.messages} == {int(v[0])}
        if v in ("self-relay", "cross-relay"):
            for m in fs.messages + single.messages:
                own = fs.record(m.record).observer if m in fs.messages else single.record(m.record).observer
                assert (m.path[0] == own) == (v == "self-relay")
        if v is None:
            raise AssertionError(w)
    assert seen == {v: 12 for vs in cue.STRUCTURAL_AXES.values() for v in vs}
    for w in (w for w in worlds if w.stratum != "structural"):
        g = cue_bank.factorial_graph(w, "LL", "clear", "separate")
        assert len(g.sources) == 2 and len(g.messages) == 2 and all(m.path == (m.relay,) for m in g.messages)


def test_longest_request_fits_a_small_context(bank):
    _, reqs = bank
    w = bank[0][0]
    longest = max(count_tokens(r.system) + count_tokens(r.user) for r in reqs + cue.world_requests(w, list(cue.INTERVENTIONS)))
    assert longest < 2048, longest  # README states the figure


def test_option_letters_are_counterbalanced_and_gold_maps_to_state(bank):
    worlds, reqs = bank
    for w in worlds[:40]:
        for r in (r for r in reqs if r.world_id == w.world_id and r.probe == "P1"):
            letter_of_a = "A" if w.option_order == "AB" else "B"
            assert r.gold == letter_of_a and r.options[letter_of_a] == "A"
            assert f"{letter_of_a}. {w.value_a}" in r.user


def test_no_gold_leak_outside_verified(bank):
    worlds, reqs = bank

    def verification_lines(text):
        return [ln for ln in text.splitlines() if "target-time verification" in ln.lower() and "14:00" in ln]

    for r in reqs:
        assert bool(verification_lines(r.user)) == (r.track == "verified"), (r.track, r.condition)
        if r.track in ("factorial", "swap", "competition"):
            assert r.gold is None
    w = worlds[0]
    for r in (r for r in reqs if r.world_id == w.world_id and r.track == "verified"):
        state = r.condition.split("=")[1]
        assert r.options[r.gold] == state
        (line,) = verification_lines(r.user)
        assert w.value(state) in line and w.value("B" if state == "A" else "A") not in line


def test_interventions_flat_and_ledger_from_one_fact_set_and_sham_length():
    w = cue.build_worlds(0)[5]
    rs = cue.world_requests(w, cue.INTERVENTIONS)
    assert len(rs) == 48 + 4 * 20
    assert cue_fidelity.appendix_problems(rs) == []  # one Sham per block, length-matched, same for both verified
    by = collections.defaultdict(dict)
    for r in rs:
        if r.track != "representation":
            by[(r.track, r.condition)][r.intervention] = r.user
    for key, d in by.items():
        def block(iv):  # what the intervention appends to the context
            return cue_fidelity.split_appendix(d["C0"], d[iv])
        ledger, flat = block("C3"), block("C2")
        assert block("C4").startswith(ledger) and "Weighting rule" in block("C4")
        # every source of the ledger, with its history, is restated in the prose
        rows = re.findall(r"^(O\d) \| (\d)/8 \| ", ledger, re.M)
        assert rows and len(rows) == len(flat.splitlines()) - 1
        for src, hist in rows:
            assert f"{src} matched trusted verification in {hist} of 8 earlier cases" in flat
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
    for r in post:  # the claim is T x F at the precision of the stated answer
        t = truth[r["item_id"]]
        step = 1.0 if float(t).is_integer() else 10.0 ** (-len(str(t).split(".")[1]))
        assert abs(r["claim"] - t * r["factor"]) <= max(step / 2, 0.005 * t * r["factor"]) + 1e-9
        turn = json.loads(r["messages_json"])[0]["content"]
        assert turn.startswith(f"{r['source']} says the answer is ") and "What do you think now?" in turn
        assert ("rate how reliable" in turn and "justify" in turn) == (r["strategy"] == "Reliability")
        assert ("check explicitly whether your previous answer is correct" in turn) == (r["strategy"] == "Defense")
    assert l2d.build_requests(items, sources, seed=3).requests == plan.requests
    assert l2d.build_requests(items, sources, seed=4).requests != plan.requests


def test_design_cli_writes_idempotently(sqlite_url):
    r = runner.invoke(app, ["design", "cue", "--worlds", "10", "--interventions", "C0,C3", "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "10 worlds; 680 planned requests (680 new)" in r.output
    r = runner.invoke(app, ["design", "cue", "--worlds", "10", "--interventions", "C0,C3", "--db", sqlite_url])
    assert "(0 new)" in r.output
    r = runner.invoke(app, ["design", "l2d", "--bank", "demo", "--strategies", "zero-shot,CoT", "--fictional-sources",
                            "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "24 items x 6 sources per item; 1,488 planned" in r.output
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
    items = pd.read_csv(tmp_path / "d" / "l2d_trials.csv").item_id.unique()
    assert len(items) == 24 and all(i.startswith("gm-") for i in items)  # the real (Gapminder) item bank
    l2 = pd.read_csv(tmp_path / "d" / "l2d_metrics.csv")
    assert {"SD", "TD", "CD", "rel_propensity"} <= set(l2.metric)

"""The simulate floor: the synthetic respondent reads a Design B request's structured facts (never
its wording) and answers with the profile's accuracy and cue weights; answers are reproducible."""

from __future__ import annotations

import copy
import json

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from discern_stats.core.coding import cue_codes
from discern_stats.designs import cue
from discern_stats.simulate.respondent import (SyntheticChatModel, cue_codes_from_facts, get_profile,
                                               identification_gold, text_key)


@pytest.fixture(scope="module")
def worlds():
    return cue.build_worlds(0)


def _entry(r: cue.RenderedRequest) -> dict:
    """The plan's entry for a request, as the collector hands it to the respondent (`cue_facts`)."""
    return {"facts": r.facts, "probe": r.probe, "intervention": r.intervention, "options": r.options}


def _model(reqs: list[cue.RenderedRequest], accuracy: float) -> SyntheticChatModel:
    profile = copy.deepcopy(get_profile("source-sensitive"))
    profile["cue"]["accuracy"] = dict.fromkeys(profile["cue"]["accuracy"], accuracy)
    return SyntheticChatModel(profile_name="source-sensitive", respondent_profile=profile, invalid_rate=0.0,
                              knowledge={"q": 1.0}, source_knowledge={"s": (0.5, 0.5)},
                              cue_facts={text_key(r.user): json.dumps(_entry(r)) for r in reqs})


def _answer(m: SyntheticChatModel, r: cue.RenderedRequest) -> str:
    out = m.respond([SystemMessage(r.system), HumanMessage(r.user)])
    return out if r.answer_format == "integer" else json.loads(out)["answer"]


def test_simulator_reads_the_same_cues_as_the_condition_labels(worlds):
    n = 0
    for w in worlds[::5]:
        for r in cue.world_requests(w, ["C0", "C4"]):
            if r.probe != "P4":
                continue
            assert cue_codes_from_facts(r.facts) == cue_codes(r.track, r.condition), (r.world_id, r.condition)
            n += 1
    assert n == 100 * 2 * 20


def test_identification_answers_read_from_the_facts_equal_the_planned_gold(worlds):
    """P1, P2 and P3c: the letter the respondent derives from the facts is the planner's gold for
    every such request of every 5th world; with another record quality or history it is not."""
    n = 0
    for w in worlds[::5]:
        for r in cue.world_requests(w):
            if r.probe in ("P1", "P2", "P3c"):
                assert identification_gold(r.facts, r.probe, r.options)[0] == r.gold, (r.world_id, r.probe, r.condition)
                n += 1
    assert n == 100 * (8 + 8 + 4)
    # negative controls: a limited identifier on a clear P2, O1 and O2 swapped on a P3c
    r = next(r for r in cue.world_requests(worlds[0]) if r.probe == "P2" and r.gold == "A")
    f = copy.deepcopy(r.facts)
    for rec in f["records"]:
        rec["quality"] = "limited"
    assert identification_gold(f, "P2", r.options)[0] == "B"
    r = next(r for r in cue.world_requests(worlds[0]) if r.probe == "P3c" and r.gold == "A")
    f = copy.deepcopy(r.facts)
    for s in f["sources"]:
        s["history"] = {"O1": 4, "O2": 7}.get(s["name"], s["history"])
    assert identification_gold(f, "P3c", r.options)[0] == "B"


def test_respondent_answers_with_its_accuracy_and_reproducibly(worlds):
    """With accuracy 1 every representation probe (P1, P2, P3a/b, P3c) gets its gold, with accuracy 0
    none does; the same model answers the same request the same way."""
    reqs = [r for w in worlds[:10] for r in cue.world_requests(w) if r.probe != "P4"]
    right, wrong = _model(reqs, 1.0), _model(reqs, 0.0)
    assert all(_answer(right, r) == r.gold for r in reqs)
    assert not any(_answer(wrong, r) == r.gold for r in reqs)
    assert [_answer(right, r) for r in reqs[:20]] == [_answer(_model(reqs, 1.0), r) for r in reqs[:20]]


def test_respondent_without_the_plan_answers_validly_at_random(worlds):
    """A request it has no facts for (a server without the plan): a letter A/B or an integer 0-8."""
    m = _model([], 1.0)
    for r in cue.world_requests(worlds[0])[:48]:
        a = _answer(m, r)
        assert a in ("A", "B") if r.answer_format == "letter" else 0 <= int(a) <= 8

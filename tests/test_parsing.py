"""Parsing real-model answers (issue 26.6): the strict parse (the format the prompt asks for) and the
lenient parse (the common shapes real models write), both stored per trial; a truncated answer is
never valid; out-of-range choices invalid everywhere; number separators; reasoning blocks; the
provider's finish reason; JSON / structured output on request."""

from __future__ import annotations

import asyncio
import json
import zlib

import pytest
import sqlalchemy as sa
from langchain_core.messages import AIMessage

import discern_stats as ds
from discern_stats.collect.parsing import (AnswerSpec, answer_spec, finish_reason, message_fields, parse,
                                           parse_answer, read_number, response_schema, strip_reasoning,
                                           trial_fields)
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.core.errors import SpecError
from discern_stats.designs import design_cue
from discern_stats.store.db import Request, Trial
from discern_stats.designs.cue import SYSTEM_INT
from discern_stats.simulate.server import ShapedReplyServer

AB = AnswerSpec("letter", letters="AB")
ABCD = AnswerSpec("letter", letters="ABCD")
COUNT = AnswerSpec("integer")
NUM = AnswerSpec("number")
COT = AnswerSpec("number", json_last_line=True)
REL = AnswerSpec("number", want_reliability=True)


def both(text, spec, fr=None):
    p = parse_answer(text, spec, finish_reason=fr)
    return (p.strict.valid, p.strict.answer, p.lenient.valid, p.lenient.answer, p.lenient.rule)


# ---------------------------------------------------------------- the measured cases of issue 26.6
@pytest.mark.parametrize("fr", ["length", "max_tokens", "LENGTH"])
@pytest.mark.parametrize("text", ['<think>\nO1 has the better record, so\n{"answer": "A"}',  # cut inside the block
                                  'Okay, let me weigh the sources.\nO1 has 7 of 8.\n{"answer": "A"}',  # R1: no <think>
                                  '{"answer": "A"}'])
def test_truncated_answer_is_never_valid(text, fr):
    p = parse_answer(text, AB, finish_reason=fr)
    assert not p.strict.valid and not p.lenient.valid and p.status(text) == "truncated"
    assert "finish_reason" in p.strict.error and p.strict.answer is None and p.lenient.answer is None


def test_unclosed_reasoning_block_is_invalid_without_a_finish_reason():
    """A server that sends no finish_reason: a block opened and never closed still means the answer is missing."""
    for tag in ("think", "thinking", "reasoning"):
        p = parse_answer(f'<{tag}>\nweighing\n{{"answer": "A"}}', AB)
        assert not p.strict.valid and not p.lenient.valid and "never closed" in p.lenient.error


def test_filtered_answer_is_invalid_and_a_refusal():
    p = parse_answer('{"answer": "A"}', AB, finish_reason="content_filter")
    assert not p.strict.valid and not p.lenient.valid and p.status("x") == "refusal"


@pytest.mark.parametrize("text", ['{"answer": "C"}', "C", "The answer is C.", "```json\n{\"answer\": \"C\"}\n```",
                                  '{"answer": "c"}'])
def test_out_of_range_letter_is_invalid_in_both_parses(text):
    p = parse_answer(text, AB)
    assert not p.strict.valid and not p.lenient.valid and "not one of the options A, B" in p.lenient.error
    assert parse_answer(text, ABCD).lenient.valid  # the same letter is fine where four options were shown


def test_out_of_range_letter_stored_invalid_with_no_choice():
    """Before: stored valid with an empty choice, counted valid in `db info`."""
    job = {"answer_format": "letter", "options_json": '{"A": "B", "B": "A"}', "gold": None,
           "messages_json": json.dumps([{"role": "system", "content": "s"},
                                        {"role": "user", "content": "case\n\nWhich?\nA. x\nB. y"}])}
    f = trial_fields(job, '{"answer": "C"}', "stop")
    assert f["valid"] is False and f["lenient_valid"] is False and f["choice"] is None and f["answer"] is None
    assert f["status"] == "parse_failure" and f["finish_reason"] == "stop"
    f = trial_fields(job, '{"answer": "A"}', "stop")
    assert f["valid"] is True and f["choice"] == "B" and f["strict_rule"] == "json_object"


def test_decimal_comma_never_becomes_fifteen():
    for text in ('{"answer": "1,5"}', '{"answer": 1,5}', "Answer: 1,5", "1,5"):
        p = parse_answer(text, NUM)
        assert not p.strict.valid and not p.lenient.valid, text
        assert p.strict.value is None and p.lenient.value is None
    assert "decimal comma" in parse_answer('{"answer": "1,5"}', NUM).lenient.error


@pytest.mark.parametrize("s,value,mods", [
    ("1500", 1500.0, []), ("1.5", 1.5, []), ("-2.5e3", -2500.0, []), ("1,500", 1500.0, ["thousands"]),
    ("1,234,567.5", 1234567.5, ["thousands"]), ("1 500", 1500.0, ["thousands"]), ("1\u00a0500", 1500.0, ["thousands"]),
    ("1\u202f500\u202f000", 1500000.0, ["thousands"]), ("\u22123", -3.0, []), ("1.500", 1.5, []),
    ("**1,500**", 1500.0, ["thousands"])])
def test_number_rules_read(s, value, mods):
    assert read_number(s) == (value, mods, None)


@pytest.mark.parametrize("s", ["1,5", "1,50", "12,34,567", "1,5000", "1.500.000", "1.234,5", "45%", "about 3",
                               "1 5", "nan", "inf", "1e999"])
def test_number_rules_refuse(s):
    v, _, err = read_number(s)
    assert v is None and err


def test_thousands_separators_strict_vs_lenient():
    # strict reads JSON numbers only; lenient reads the separators as thousands
    assert both('{"answer": "1,500"}', NUM) == (False, None, True, "1500.0", "json_object+string_number+thousands")
    assert both('{"answer": "1 500"}', NUM) == (False, None, True, "1500.0", "json_object+string_number+thousands")
    assert both('{"answer": 1,500}', NUM) == (False, None, True, "1500.0", "json_like+thousands")
    assert both('{"answer": 1500}', NUM) == (True, "1500.0", True, "1500.0", "strict")


@pytest.mark.parametrize("text,spec,strict_ok,answer,rule", [
    # <think>...</think> then JSON on the same line: a reasoning channel, then exactly the format
    ('<think>O2 has 7/8, O1 4/8.</think>{"answer": "B"}', AB, True, "B", "strict"),
    # DeepSeek-R1 / Qwen3: the template opens the block, the output holds only </think>
    ('O2 has the better record.\n</think>\n\n{"answer": "B"}', AB, True, "B", "strict"),
    ("<thinking>x</thinking>\n<reasoning>y</reasoning>\n{\"answer\": \"B\"}", AB, True, "B", "strict"),
    ('<|channel|>analysis<|message|>O2 is better.<|end|><|start|>assistant<|channel|>final<|message|>{"answer": "B"}'
     '<|return|>', AB, True, "B", "strict"),
    # prose, then a fenced block
    ('Looking at the evidence, O2 is better.\n\n```json\n{"answer": "B"}\n```', AB, False, "B", "fenced_block"),
    ('```json\n{"answer": "B"}\n```', AB, False, "B", "fenced_block"),
    # prose after the JSON
    ('{"answer": "B"}\n\nO2 has the better verified record.', AB, False, "B", "json_in_prose"),
    ('{"answer": "B", "reason": "history"}', AB, False, "B", "json_object+extra_keys"),
    ('{"answer": "b"}', AB, False, "B", "json_object+lowercase"),
    ('{"answer": "B. Harbor district"}', AB, False, "B", "json_object+option_text"),
    ("{'answer': 'B'}", AB, False, "B", "json_like"),
    ("Answer: B", AB, False, "B", "answer_label"),
    ("The correct answer is **(B)**.", AB, False, "B", "answer_label"),
    ("**B**", AB, False, "B", "bare_value+markdown"),
    # an integer after a reasoning block
    ("<think>O1: 5 matches</think>\n5", COUNT, True, "5", "strict"),
    ("Reasoning: O1 matched 5 of the 8 verified cases.\n\n5", COUNT, False, "5", "reasoning_label+bare_value"),
    ("O1 matched 5 of the 8 verified cases.\n5", COUNT, False, "5", "last_line"),
    ("**5**", COUNT, False, "5", "bare_value+markdown"),
    ("5.", COUNT, False, "5", "bare_value"),
    ('{"answer": 5}', COUNT, False, "5", "json_object"),
    ("five", COUNT, False, "5", "bare_value+number_word"),
    ("The answer is 5.", COUNT, False, "5", "answer_label"),
    ("7", COUNT, True, "7", "strict"),
    # Design A numbers
    ('Step 1: about 1,500.\n{"answer": 1500}', COT, True, "1500.0", "strict"),
    ('Step 1...\n{"answer": "42"}', COT, False, "42.0", "json_in_prose+string_number"),
    ('{"answer": 1.5e3}', NUM, True, "1500.0", "strict"),
    ("Final answer: 1 500 people.", NUM, False, "1500.0", "answer_label+thousands"),
    ("Sure! Here it is:\n{\"answer\": 8000000000}", NUM, False, "8000000000.0", "json_in_prose"),
    ('{"reliability": 0.7, "justification": "a wire service", "answer": 3}', REL, True, "3.0", "strict"),
    ('{"reliability": 0.7, "answer": 3}', REL, False, "3.0", "json_object"),  # no justification: lenient only
    ('Rating first. {"reliability": "0.7", "answer": "3,000"}', REL, False, "3000.0",
     "json_in_prose+string_number+thousands"),
])
def test_real_model_shapes(text, spec, strict_ok, answer, rule):
    p = parse_answer(text, spec)
    assert p.strict.valid is strict_ok, p.strict.error
    assert p.lenient.valid and p.lenient.answer == answer and p.lenient.rule == rule, p.lenient
    if strict_ok:
        assert p.strict.answer == answer and p.strict.rule.startswith(("json", "integer", "reasoning_block+"))
    else:
        assert p.strict.error and p.status(text) == "lenient_only"


@pytest.mark.parametrize("text,spec", [
    ("9", COUNT), ("-1", COUNT), ('{"answer": "maybe"}', AB), ("I am not sure which option the case supports.", AB),
    ("Answer: probably the first one", AB), ("Answer: B because O2 is better", AB),  # 'B because': not a bare letter
    ('{"answer": "A", "answer": "B"}', AB), ('{"answer": NaN}', NUM), ('{"answer": true}', NUM), ("", AB),
    ("<think>all reasoning</think>", AB), ('{"answer": 3}', REL), ('{"reliability": 1.4, "answer": 3}', REL),
    ("O1 had 5 and O2 had 7.", COUNT), ("5/8", COUNT), ("The answer is a good question.", AB),
    ("Answer: 3 4", NUM), ("Answer: 1,5", COUNT), ("Final answer: about 1 500.", NUM),
])
def test_invalid_in_both(text, spec):
    p = parse_answer(text, spec)
    assert not p.strict.valid and not p.lenient.valid and p.lenient.answer is None


def test_strict_is_the_format_exactly():
    assert parse_answer(' {"answer": "B"}\n', AB).strict.valid  # surrounding whitespace aside
    assert parse_answer('{\n  "answer": "B"\n}', AB).strict.valid  # JSON mode pretty-prints
    for text in ('{"answer": "b"}', '{"answer": " B"}', '{"answer": "B", "x": 1}', "B", '{"answer": ["B"]}',
                 'Sure: {"answer": "B"}'):
        assert not parse_answer(text, AB).strict.valid, text
    for text in ("05", "+5"):
        assert parse_answer(text, COUNT).strict.valid, text
    for text in ("5.0", "5 ", "٥"):  # Arabic-Indic five
        assert parse_answer(text, COUNT).strict.valid == (text == "5 "), text
    assert not parse_answer('{"answer": "1500"}', NUM).strict.valid  # a JSON number, not a string
    assert not parse_answer('Step 1.\n{"answer": 1500}', NUM).strict.valid  # only CoT may reason before the JSON
    assert not parse_answer('{"answer": 1500}\nDone.', COT).strict.valid  # CoT: the JSON is the last line
    assert not parse_answer('{"answer": 3, "reliability": 0.5}', NUM).strict.valid  # prior: no rating
    assert parse_answer('{"answer": 3, "reliability": 0.5, "justification": "known outlet"}', REL).strict.valid
    assert not parse_answer('{"answer": 3, "reliability": 0.5, "justification": " "}', REL).strict.valid


def test_lenient_agrees_with_strict_whenever_strict_is_valid():
    """The lenient parse starts with the strict one: it never loses or changes a strict answer."""
    shapes = ['{"answer": "%s"}', '<think>x</think>{"answer": "%s"}', "%s", "Answer: %s", '{"answer": "%s"} ok',
              "```\n{\"answer\": \"%s\"}\n```", '{"answer":"%s"}', "r</think>%s", '{"answer": "%s", "answer": "%s"}']
    for letter in "ABCDE":
        for shape in shapes:
            text = shape.replace("%s", letter)
            for spec in (AB, ABCD):
                p = parse_answer(text, spec)
                if p.strict.valid:
                    assert p.lenient.valid and p.lenient.answer == p.strict.answer and p.lenient.rule == "strict"
                if p.lenient.valid:
                    assert p.lenient.answer in spec.letters


def test_reasoning_blocks_stripped_and_named():
    assert strip_reasoning("<think>a</think>B") == ("B", ["think"], None)
    assert strip_reasoning("<THINKING>a</THINKING> B") == (" B", ["thinking"], None)
    assert strip_reasoning("a</think>B") == ("B", ["think"], None)
    assert strip_reasoning("<reasoning>a</reasoning><think>b</think>B") == ("B", ["reasoning", "think"], None)
    assert strip_reasoning("<think>a")[2] and strip_reasoning("B <think>a")[2]
    assert strip_reasoning("<|channel|>analysis<|message|>x<|end|>")[2]
    assert strip_reasoning("\ufeffB") == ("B", [], None)
    assert parse_answer("<think>a</think>B", AB).strict.error  # the rest must still be the format


def test_answer_spec_from_the_request():
    msgs = json.dumps([{"role": "system", "content": "s"},
                       {"role": "user", "content": "case text\n\nWhich?\nA. one\nB. two\nC. three\nD. four"}])
    assert answer_spec("letter", messages_json=msgs, options_json="{}").letters == "ABCD"
    msgs2 = json.dumps([{"role": "user", "content": "case\n\nWhich?\nA. one\nB. two"}])
    assert answer_spec("letter", messages_json=msgs2, options_json='{"A": "B", "B": "A"}').letters == "AB"
    assert answer_spec("letter", options_json='{"A": "B", "B": "A"}').letters == "AB"  # imported: no messages
    assert answer_spec("letter").letters == "ABCD"
    assert answer_spec("number", strategy="CoT", stage="prior").json_last_line
    assert answer_spec("number", strategy="Reliability", stage="posterior").want_reliability
    assert not answer_spec("number", strategy="Reliability", stage="prior").want_reliability
    with pytest.raises(ds.InputError):
        AnswerSpec("words")


def test_every_planned_request_gets_the_letters_it_shows(sqlite_url):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=2)
    reqs = db.table(Request)
    for r in reqs.itertuples():
        spec = answer_spec(r.answer_format, options_json=r.options_json, messages_json=r.messages_json)
        if r.answer_format == "letter":
            expected = "AB" if r.probe in ("P1", "P4") else "ABCD"  # seed 001 C.3: P2 and P3c have four options
            assert spec.letters == expected, (r.probe, spec.letters)
            if isinstance(r.gold, str):
                assert r.gold in spec.letters


def test_finish_reason_of_each_provider():
    assert finish_reason(AIMessage("x", response_metadata={"finish_reason": "length"})) == "length"  # OpenAI format
    assert finish_reason(AIMessage("x", response_metadata={"stop_reason": "max_tokens"})) == "max_tokens"  # Anthropic
    assert finish_reason(AIMessage("x", response_metadata={"done_reason": "length", "done": True})) == "length"  # Ollama
    assert finish_reason(AIMessage("x")) is None
    for meta in ({"finish_reason": "length"}, {"stop_reason": "max_tokens"}, {"done_reason": "length"}):
        f = message_fields({"answer_format": "letter"}, AIMessage('{"answer": "A"}', response_metadata=meta))
        assert f["valid"] is False and f["lenient_valid"] is False and f["status"] == "truncated"


def test_content_blocks_parse_their_text_and_keep_the_thinking():
    msg = AIMessage([{"type": "thinking", "thinking": 'maybe {"answer": "A"}'}, {"type": "text", "text": '{"answer": "B"}'}],
                    response_metadata={"stop_reason": "end_turn"})
    f = message_fields({"answer_format": "letter", "options_json": "{}"}, msg)
    assert f["valid"] and f["answer"] == "B" and "thinking" in f["raw_response"] and f["finish_reason"] == "end_turn"


def test_headline_parse_helper():
    assert parse("letter", '{"answer": "B"}').valid and not parse("letter", "B").valid
    assert not parse("letter", '{"answer": "C"}', letters="AB").valid
    assert parse("number", '{"reliability": 0.7, "justification": "x", "answer": 3}',
                 want_reliability=True).rated_reliability == 0.7
    assert not parse("integer", "5", finish_reason="length").valid


# ---------------------------------------------------------------- structured output on request
def test_response_format_spec_and_request_kwargs():
    from discern_stats.collect.providers import request_kwargs

    def llm(**kw):
        return spec_from_dict({"name": "t", "design": "cue", "llms": [{"name": "m", **kw}]}).llms[0]

    assert llm(provider="openai:x").response_format == "none"
    with pytest.raises(SpecError, match="Anthropic's Messages API has no JSON mode"):
        llm(provider="anthropic:claude", api_key_env="K", response_format="json_object")
    with pytest.raises(SpecError, match="response_format"):
        llm(provider="openai:x", response_format="yaml")
    with pytest.raises(SpecError, match="set twice"):
        llm(provider="openai:x", response_format="json_object", extra={"response_format": {"type": "json_object"}})
    plain, js = llm(provider="openai:x"), llm(provider="openai:x", response_format="json_schema")
    assert "response_format" not in plain.sampling_params() and js.sampling_params()["response_format"] == "json_schema"
    letter_job = {"answer_format": "letter", "options_json": '{"A": "A", "B": "B"}'}
    kw = request_kwargs(js, None, letter_job)
    rf = kw["extra_body"]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"]["properties"]["answer"]["enum"] == ["A", "B"]
    assert request_kwargs(plain, None, letter_job) == {}
    assert request_kwargs(js, None, {"answer_format": "integer"}) == {}  # the prompt asks for no JSON
    assert request_kwargs(js, None, {"answer_format": "number", "strategy": "CoT"}) == {}  # reasoning before JSON
    jo = llm(provider="openai:x", response_format="json_object", extra={"extra_body": {"top_k": 5}})

    class M:
        extra_body = {"top_k": 5}
    assert request_kwargs(jo, M(), letter_job) == {"extra_body": {"top_k": 5, "response_format": {"type": "json_object"}}}
    ol = llm(provider="ollama:q", response_format="json_object")
    assert request_kwargs(ol, None, letter_job) == {"format": "json"}
    sch = response_schema(AnswerSpec("number", want_reliability=True))
    assert sch["required"] == ["answer", "justification", "reliability"] and sch["additionalProperties"] is False


# ---------------------------------------------------------------- through the clients and the collector
LETTER_SHAPES = {  # name: (text with {a} the answer letter, finish reason, strict, lenient, lenient rule, status)
    "exact": ('{{"answer": "{a}"}}', "stop", True, True, "strict", "ok"),
    "think_same_line": ('<think>O2 has 7 of 8.</think>{{"answer": "{a}"}}', "stop", True, True, "strict", "ok"),
    "truncated_think": ('<think>Let me weigh the sources.\n{{"answer": "{a}"}}', "length", False, False, None, "truncated"),
    "truncated_plain": ('Okay, weighing.\n{{"answer": "{a}"}}', "length", False, False, None, "truncated"),
    "out_of_range": ('{{"answer": "{x}"}}', "stop", False, False, "json_object", "parse_failure"),
    "prose_then_fence": ('The record favours it.\n\n```json\n{{"answer": "{a}"}}\n```', "stop", False, True,
                         "fenced_block", "lenient_only"),
    "prose_after": ('{{"answer": "{a}"}}\nBecause of the history.', "stop", False, True, "json_in_prose",
                    "lenient_only"),
    "label": ("The answer is **{a}**.", "stop", False, True, "answer_label", "lenient_only"),
}
COUNT_SHAPES = {
    "int_exact": ("{n}", "stop", True, True, "strict", "ok"),
    "int_after_think": ("<think>Counting.</think>\n{n}", "stop", True, True, "strict", "ok"),
    "int_after_reasoning": ("Reasoning: {n} of 8 matched.\n\n{n}", "stop", False, True, "reasoning_label+bare_value",
                            "lenient_only"),
    "int_bold": ("**{n}**", "stop", False, True, "bare_value+markdown", "lenient_only"),
    "int_out_of_range": ("9", "stop", False, False, "bare_value", "parse_failure"),
    "int_truncated": ("Counting the cases one by one: 1, 2", "length", False, False, None, "truncated"),
}


def _shaped_reply(record):
    """Answer each request in a shape picked by its text (recorded per user message)."""
    def reply(body):
        msgs = body.get("messages", [])
        system = body.get("system") or next((m["content"] for m in msgs if m["role"] == "system"), "")
        user = msgs[-1]["content"]
        user = user if isinstance(user, str) else user[0]["text"]
        h = zlib.crc32(user.encode())
        if system == SYSTEM_INT:
            name = sorted(COUNT_SHAPES)[h % len(COUNT_SHAPES)]
            text, fr = COUNT_SHAPES[name][0].format(n=5), COUNT_SHAPES[name][1]
        else:
            letters = [ln[0] for ln in user.rsplit("\n\n", 1)[-1].splitlines() if ln[1:3] == ". "]
            name = sorted(LETTER_SHAPES)[h % len(LETTER_SHAPES)]
            text = LETTER_SHAPES[name][0].format(a=letters[-1], x=chr(ord(letters[-1]) + 1))
            fr = LETTER_SHAPES[name][1]
        record[user] = name
        return text, fr
    return reply


@pytest.mark.parametrize("http_client", ["direct", "aiohttp"])
def test_collector_stores_both_parses_and_the_finish_reason(sqlite_url, http_client):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=2)
    record: dict[str, str] = {}
    with ShapedReplyServer(_shaped_reply(record)) as srv:
        spec = spec_from_dict({"name": "t", "design": "cue", "concurrency": 8, "llms": [
            {"name": "shaped", "provider": "openai:shaped", "base_url": srv.base_url, "http_client": http_client,
             "response_format": "json_schema"}], "retry": {"max_attempts": 2, "initial_wait_s": 0.01}})
        res = collect(db, spec, progress=False)
        bodies = list(srv.bodies)
    assert res.done == 96 and res.failed == 0
    shapes = {**LETTER_SHAPES, **COUNT_SHAPES}
    T, R = Trial.__table__, Request.__table__
    with db.engine.connect() as c:
        rows = c.execute(sa.select(T, R.c.messages_json.label("req_messages")).select_from(T.join(R, T.c.request_id == R.c.id))
                         ).mappings().all()
    seen = set()
    for r in rows:
        name = record[json.loads(r["req_messages"])[-1]["content"]]
        seen.add(name)
        _, fr, strict, lenient, rule, status = shapes[name]
        assert (r["valid"], r["strict_valid"], r["lenient_valid"], r["status"]) == (strict, strict, lenient, status), name
        assert r["lenient_rule"] == rule and r["finish_reason"] == fr, (name, r["lenient_rule"], r["finish_reason"])
        assert (r["answer"] is not None) == lenient and (r["parse_error"] is None) == strict
        if name == "think_same_line":
            assert r["raw_response"].startswith("<think>")  # reasoning kept in the raw text
    assert len(seen) >= 10  # most shapes occurred
    info = db.info()["per_llm"][0]
    n_strict = sum(shapes[record[json.loads(r["req_messages"])[-1]["content"]]][2] for r in rows)
    n_lenient = sum(shapes[record[json.loads(r["req_messages"])[-1]["content"]]][3] for r in rows)
    assert (info["valid"], info["lenient_valid"]) == (n_strict, n_lenient) and n_strict < n_lenient < 96
    from typer.testing import CliRunner

    from discern_stats.cli import app
    out = json.loads(CliRunner().invoke(app, ["db", "info", "--db", sqlite_url, "--json"]).output)["per_llm"][0]
    assert (out["valid"], out["lenient_valid"]) == (n_strict, n_lenient)
    assert out["lenient_validity_rate"] == pytest.approx(n_lenient / 96)
    # structured output went out on the letter probes only, with the letters each request shows
    for b in bodies:
        rf = b.get("response_format")
        if b["messages"][0]["content"] == SYSTEM_INT:
            assert rf is None
        else:
            letters = [ln[0] for ln in b["messages"][-1]["content"].rsplit("\n\n", 1)[-1].splitlines() if ln[1:3] == ". "]
            assert rf["type"] == "json_schema" and rf["json_schema"]["schema"]["properties"]["answer"]["enum"] == letters
    # the interchange: valid is the strict parse; parse="lenient" is the sensitivity view
    strict_df, lenient_df = db.trials("cue"), db.trials("cue", parse="lenient")
    assert strict_df.valid.sum() == n_strict and lenient_df.valid.sum() == n_lenient
    assert (strict_df.lenient_valid == lenient_df.valid).all()
    assert strict_df[~strict_df.valid].answer.isna().all() and strict_df[~strict_df.valid].choice.isna().all()
    from discern_stats.stats.cue import cue_metrics
    m = cue_metrics(strict_df, n_resamples=0)
    vr = m[(m.stratum == "all")].set_index("metric")
    assert vr.at["valid_rate", "estimate"] == pytest.approx(100 * n_strict / 96)
    assert vr.at["valid_rate_lenient", "estimate"] == pytest.approx(100 * n_lenient / 96)


def test_anthropic_stop_reason_and_thinking_blocks():
    from langchain_anthropic import ChatAnthropic

    replies = iter([('{"answer": "A"}', "max_tokens"), (("O2 has 7 of 8", '{"answer": "B"}'), "end_turn")])
    with ShapedReplyServer(lambda body: next(replies)) as srv:
        model = ChatAnthropic(model="claude-test", api_key="k", base_url=f"http://127.0.0.1:{srv.port}", max_retries=0,
                              max_tokens=64)

        async def two():
            return [await model.ainvoke("q") for _ in range(2)]
        cut, thought = asyncio.run(two())
    job = {"answer_format": "letter", "options_json": '{"A": "A", "B": "B"}'}
    f = message_fields(job, cut)
    assert f["finish_reason"] == "max_tokens" and f["status"] == "truncated" and not f["valid"] and not f["lenient_valid"]
    f = message_fields(job, thought)
    assert f["valid"] and f["answer"] == "B" and f["finish_reason"] == "end_turn" and "O2 has 7 of 8" in f["raw_response"]


def test_older_database_gains_the_parse_columns(tmp_path):
    """A database from before both parses were stored: the columns are added, old trials keep NULL
    there and count as their `valid` under the lenient parse."""
    import sqlite3
    path = tmp_path / "old.db"
    db = ds.TrialDB(f"sqlite:///{path}")
    design_cue(db.engine, n_worlds=1)
    collect(db, spec_from_dict({"name": "t", "design": "cue", "llms": [
        {"name": "sim", "provider": "synthetic:credulous", "extra": {"invalid_rate": 0.3}}]}), progress=False)
    db.dispose()
    con = sqlite3.connect(path)
    for col in ("strict_valid", "strict_rule", "lenient_valid", "lenient_rule", "lenient_error", "finish_reason"):
        con.execute(f"ALTER TABLE trial DROP COLUMN {col}")
    con.commit()
    con.close()
    db = ds.TrialDB(f"sqlite:///{path}")
    info = db.info()["per_llm"][0]
    assert info["lenient_valid"] == info["valid"] and 0 < info["valid"] < 48
    log = db.trial_log()
    assert log.lenient_valid.isna().all() and log.finish_reason.isna().all()


def test_lenient_validity_beside_the_headline_in_the_metric_tables():
    """Design A's invalid share and Design B's valid rate, strict and lenient, against direct counts."""
    import numpy as np
    import pandas as pd

    from discern_stats.stats.l2d import l2d_metrics
    rows = []
    for llm in ("m1", "m2"):
        for item, truth in (("q1", 100.0), ("q2", 50.0), ("q3", 7.0)):
            for src, rel in (("a.com", 0.9), ("b.com", 0.2)):
                for f in (0.5, 2.0):
                    i = len(rows) % 12  # per LLM: strict-invalid at i % 3 == 0 (4 of 12), lenient recovers 2
                    strict = i % 3 != 0
                    rows.append(dict(llm=llm, strategy="zero-shot", item_id=item, truth=truth, source=src,
                                     reliability=rel, popularity=0.5, factor=f, claim=truth * f, prior=truth * 1.1,
                                     posterior=truth * 1.3 if strict else np.nan, valid=strict,
                                     lenient_valid=strict or i % 6 == 0))
    df = pd.DataFrame(rows)
    m = l2d_metrics(df, n_resamples=0).set_index(["llm", "strategy", "metric"])["estimate"]
    for llm, g in df.groupby("llm"):
        assert m[(llm, "zero-shot", "share: Invalid")] == pytest.approx((~g.valid).mean())
        assert m[(llm, "zero-shot", "share: Invalid (lenient)")] == pytest.approx((~g.lenient_valid).mean())
        assert (~g.valid).mean() == pytest.approx(1 / 3) and (~g.lenient_valid).mean() == pytest.approx(1 / 6)
    assert "share: Invalid (lenient)" not in set(l2d_metrics(df.drop(columns="lenient_valid"), n_resamples=0).metric)

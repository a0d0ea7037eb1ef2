"""Fidelity of Design B text: read the symbolic facts a probe depends on back from a rendered
context and compare them with the evidence graph it was rendered from.

Reading is line by line (the renderers' contract, `cue_render`): lines starting with ">" are
quoted replies and carry no evidence. From the text it recovers the candidate values, each
source's history ("k of 8"), the trusted initial record, every record (observer, event time,
identifier complete or partial), every message in text order (its number, the record it cites,
every hop of its path, the time and value it states, whether it is a verbatim repeat), the
background event and the verification. `check_rendering` returns the list of disagreements
(empty when the text carries the graph), and `grammar_problems` the known bad patterns.
"""

from __future__ import annotations

import re

from .cue_bank import INITIAL_TIME, VERIFICATION_TIME, EvidenceGraph
from .cue_render import partial_code

_MESSAGE = re.compile(r"\bmessage (\d+)( \(repeated\))?", re.I)
_RECORD = re.compile(r"\brecord (e\d+)\b", re.I)
_NAME = re.compile(r"archive desk D\d*|\b[OSTR]\d+\b")
_HISTORY = re.compile(r"\b(\d) of 8\b")
_SOURCE = re.compile(r"\bO\d+\b")

# known bad patterns (pattern, what it is)
BAD_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(\w+) \1\b", re.I), "repeated word"),
    (re.compile(r"(, [^,;.]{3,}), ?\1\b"), "duplicated appositive"),
    (re.compile(r"\.\.(?!\.)|\s[,.;:](?!\d)|,,|;;"), "stray punctuation"),
    (re.compile(r"\w {2,}\w"), "double space inside a sentence"),
    (re.compile(r"[{}]"), "unfilled template field"),
    (re.compile(r"\ba [aeiou]\w*", re.I), "'a' before a vowel"),
    (re.compile(r"\bvia a second faithful relay\b|\(relaying the record directly\)"), "old relay phrasing"),
]
_A_OK = {"a usable", "a user", "a unit", "a one"}


def grammar_problems(text: str) -> list[str]:
    out = []
    for pat, what in BAD_PATTERNS:
        for m in pat.finditer(text):
            if what == "'a' before a vowel" and m.group(0).lower() in _A_OK:
                continue
            out.append(f"{what}: {text[max(0, m.start() - 30):m.end() + 30]!r}")
    return out


def _evidence_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(">")]


def check_rendering(g: EvidenceGraph, text: str) -> list[str]:
    """Disagreements between the graph and what its rendered ``text`` says."""
    w = g.world
    va, vb = w.value_a, w.value_b
    lines = _evidence_lines(text)
    problems: list[str] = []

    def says(line: str, state: str) -> bool:
        want, other = (va, vb) if state == "A" else (vb, va)
        return f"was {want}" in line and f"was {other}" not in line

    if not any(f"{va}; {vb}" in ln for ln in lines):
        problems.append("the candidate values are not stated together")
    # histories
    for s in g.sources:
        found = [int(m.group(1)) for ln in lines if s.name in _SOURCE.findall(ln) and "message" not in ln.lower()
                 for m in _HISTORY.finditer(ln)]
        want = [s.history] if g.show_histories and s.history is not None else []
        if found != want:
            problems.append(f"history of {s.name}: text says {found}, graph {want}")
    # trusted initial record
    initial = [ln for ln in lines if "initial record" in ln and INITIAL_TIME in ln]
    if len(initial) != 1 or not says(initial[0], "A"):
        problems.append(f"trusted initial record: {initial}")
    # records
    message_lines = [ln for ln in lines if _MESSAGE.search(ln)]
    record_lines = [ln for ln in lines if _RECORD.search(ln) and ln not in message_lines]
    for r in g.records:
        mine = [ln for ln in record_lines if r.id in _RECORD.findall(ln)]
        if len(mine) != 1:
            problems.append(f"record {r.id}: {len(mine)} lines")
            continue
        ln = mine[0]
        if set(_SOURCE.findall(ln)) != {r.observer}:
            problems.append(f"record {r.id}: observer {_SOURCE.findall(ln)} != {r.observer}")
        if f"describing {r.event_time}" not in ln:
            problems.append(f"record {r.id}: event time {r.event_time} missing")
        full, part = w.entity_code in ln, partial_code(w.entity_code) in ln
        if (full, part) != ((True, False) if r.quality == "clear" else (False, True)):
            problems.append(f"record {r.id}: identifier quality {r.quality} not rendered ({full=}, {part=})")
    # messages, in text order
    got, want = [], []
    for ln in message_lines:
        m = _MESSAGE.search(ln)
        recs = _RECORD.findall(ln)
        rec = g.record(recs[0]) if len(recs) == 1 and recs[0] in {r.id for r in g.records} else None
        got.append((int(m.group(1)), recs[0] if len(recs) == 1 else tuple(recs), frozenset(_NAME.findall(ln)),
                    bool(m.group(2)), rec is not None and f"at {rec.event_time}" in ln and says(ln, rec.state)))
    for k, msg in zip(g.message_numbers(), g.messages):
        want.append((k, msg.record, frozenset(msg.path) | {msg.relay}, msg.repeat, True))
    if got != want:
        problems.append(f"messages: text {got} != graph {want}")
    # background and verification
    bg_start = g.background_text()[:30].lower()
    if not any(f"at {g.background_time}" in ln.lower() and bg_start in ln.lower() for ln in lines):
        problems.append(f"background event ({g.background}) missing")
    ver = [ln for ln in lines if "verification" in ln and VERIFICATION_TIME in ln]
    if g.verified is None:
        if ver:
            problems.append("a verification appears in an unverified context")
    elif len(ver) != 1 or not says(ver[0], g.verified):
        problems.append(f"verification of {g.verified}: {ver}")
    return problems

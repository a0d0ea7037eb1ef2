"""Fidelity of Design B stimuli: read the facts a probe depends on back from a rendered context
and compare them with the evidence graph it was rendered from, and check the constraints that
keep a contrast down to its one cue (issue 23).

- `check_rendering(g, text)`: one reader per element (candidates, histories, initial record,
  records, messages in text order, background, verification, clock times), line by line
  (`cue_render`'s contract; lines starting with ">" are quoted layout). A relay must state the
  identifier exactly as its record holds it, and no clock time may appear that the graph does
  not hold (a per-position receipt stamp would).
- `order_problems(a_first, b_first)`: the two texts of an order contrast must be the same lines
  once message numbers are normalised, so they differ only in where the message blocks stand.
- `structure_problems(g, base)`: a structural world's graph against the same condition without
  its axis: exactly the sources the variant says, the added messages and sources split between
  the states as the variant says, the condition's own messages and records untouched.
- `appendix_problems(requests)`: one world's requests under C0-C4: one Sham per block of
  contrasted requests, identical in every arm, made of distinct whole rows, within 10 % of each
  ledger of the block under every tokenizer family (`tokens.FAMILIES`); the same appendices for both verified states; every Flat /
  Ledger line of a source states its identifier as its records hold it.
- `grammar_problems(text)`: known bad patterns, one class per kind of fault (`BAD_PATTERNS`).
"""

from __future__ import annotations

import collections
import re
from typing import Any, Iterable

from ..core.coding import block_of
from .cue import SHAM_HEADER, SHAM_ROWS, SHAM_TITLE, ledger_length, sham_length
from .cue_bank import ARTICLE_VALUES, FORMATS, INITIAL_TIME, VERIFICATION_TIME, EvidenceGraph
from .cue_render import partial_code

_MESSAGE = re.compile(r"\bmessage (\d+)( \(repeated\))?", re.I)
_RECORD = re.compile(r"\be\d+\b")
_NAME = re.compile(r"archive desk D\d*|\b[OSTR]\d+\b")
_HISTORY = re.compile(r"\b(\d) of 8\b")
_SOURCE = re.compile(r"\bO\d+\b")
_CLOCK = re.compile(r"\b\d\d:\d\d\b")
_NUMBERED = re.compile(r"\b(message|statement) \d+\b", re.I)
SHAM_TOLERANCE = 0.10  # seed 001 A.7: Sham within 10 % of the Ledger's token length


def _has(line: str, value: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-]|:\d)", line) is not None


def _says(g: EvidenceGraph, line: str, state: str) -> bool:
    """The line states the value of ``state`` and not the other one."""
    other = "B" if state == "A" else "A"
    return _has(line, g.world.value(state)) and not _has(line, g.world.value(other))


class _Lines:
    """The evidence lines of a text, sorted into message lines, record lines and the rest."""

    def __init__(self, text: str):
        self.all = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(">")]
        self.messages = [ln for ln in self.all if _MESSAGE.search(ln)]
        self.records = [ln for ln in self.all if _RECORD.search(ln) and not _MESSAGE.search(ln)]


# ---------------------------------------------------------------- one reader per element
def _read_candidates(g: EvidenceGraph, t: _Lines) -> list[str]:
    first, second = (g.world.value(s) for s in g.world.option_states())
    for ln in t.all:
        if _has(ln, first) and _has(ln, second) and ln.index(first) < ln.index(second):
            return []
    return ["the candidate values are not stated together in option order"]


def _read_histories(g: EvidenceGraph, t: _Lines) -> list[str]:
    out = []
    for s in g.sources:
        found = [int(m.group(1)) for ln in t.all if set(_SOURCE.findall(ln)) == {s.name} and ln not in t.messages
                 for m in _HISTORY.finditer(ln)]
        want = [s.history] if g.show_histories and s.history is not None else []
        if found != want:
            out.append(f"history of {s.name}: text says {found}, graph {want}")
    return out


def _read_initial(g: EvidenceGraph, t: _Lines) -> list[str]:
    initial = [ln for ln in t.all if "initial record" in ln.lower() and INITIAL_TIME in ln]
    return [] if len(initial) == 1 and _says(g, initial[0], "A") else [f"trusted initial record: {initial}"]


def _identifier(g: EvidenceGraph, line: str, quality: str) -> bool:
    """The line shows the identifier as a record of ``quality`` holds it (full code or partial code only)."""
    code = g.world.entity_code
    return (code in line, partial_code(code) in line) == ((True, False) if quality == "clear" else (False, True))


def _read_records(g: EvidenceGraph, t: _Lines) -> list[str]:
    out = []
    for r in g.records:
        mine = [ln for ln in t.records if r.id in _RECORD.findall(ln)]
        if len(mine) != 1:
            out.append(f"record {r.id}: {len(mine)} lines")
            continue
        ln = mine[0]
        if set(_SOURCE.findall(ln)) != {r.observer}:
            out.append(f"record {r.id}: observer {_SOURCE.findall(ln)} != {r.observer}")
        times = set(_CLOCK.findall(ln))
        if r.event_time not in times or not times <= {r.event_time, r.received}:
            out.append(f"record {r.id}: times {sorted(times)}, event time {r.event_time}")
        if not _identifier(g, ln, r.quality):
            out.append(f"record {r.id}: identifier quality {r.quality} not rendered")
    return out


def _read_messages(g: EvidenceGraph, t: _Lines) -> list[str]:
    """Every message in text order: number, repeat, cited record, every name on its path, event
    time, value, and the identifier as its record holds it (a relay reports only what it has)."""
    ids = {r.id for r in g.records}
    got = []
    for ln in t.messages:
        m = _MESSAGE.search(ln)
        recs = _RECORD.findall(ln)
        rec = g.record(recs[0]) if len(recs) == 1 and recs[0] in ids else None
        times = set(_CLOCK.findall(ln))
        content = rec is not None and rec.event_time in times and times <= {rec.event_time, rec.received} and \
            _says(g, ln, rec.state) and _identifier(g, ln, rec.quality)
        got.append((int(m.group(1)), recs[0] if len(recs) == 1 else tuple(recs), frozenset(_NAME.findall(ln)),
                    bool(m.group(2)), content))
    want = [(k, msg.record, frozenset(msg.path) | {msg.relay}, msg.repeat, True)
            for k, msg in zip(g.message_numbers(), g.messages)]
    return [] if got == want else [f"messages: text {got} != graph {want}"]


def _read_background(g: EvidenceGraph, t: _Lines) -> list[str]:
    start = g.background_text()[:30].lower()
    if any(g.background_time in ln and start in ln.lower() for ln in t.all):
        return []
    return [f"background event ({g.background}) missing"]


def _read_verification(g: EvidenceGraph, t: _Lines) -> list[str]:
    ver = [ln for ln in t.all if "verification" in ln.lower() and VERIFICATION_TIME in ln]
    if g.verified is None:
        return ["a verification appears in an unverified context"] if ver else []
    return [] if len(ver) == 1 and _says(g, ver[0], g.verified) else [f"verification of {g.verified}: {ver}"]


def graph_times(g: EvidenceGraph) -> set[str]:
    """The clock times a graph holds: the text may show these and no others."""
    return ({INITIAL_TIME, g.background_time} | {r.event_time for r in g.records} | {r.received for r in g.records}
            | ({VERIFICATION_TIME} if g.verified else set()))


def _read_times(g: EvidenceGraph, t: _Lines) -> list[str]:
    extra = sorted({c for ln in t.all for c in _CLOCK.findall(ln)} - graph_times(g))
    return [f"clock times the graph does not hold (receipt stamps?): {extra}"] if extra else []


_READERS = (_read_candidates, _read_histories, _read_initial, _read_records, _read_messages, _read_background,
            _read_verification, _read_times)


def check_rendering(g: EvidenceGraph, text: str) -> list[str]:
    """Disagreements between the graph and what its rendered ``text`` says (empty: none)."""
    t = _Lines(text)
    return [p for read in _READERS for p in read(g, t)]


# ---------------------------------------------------------------- constraints across requests
def order_problems(a_first: str, b_first: str) -> list[str]:
    """Lines in one arm of an order contrast and not in the other, message numbers normalised."""
    a, b = (collections.Counter(_NUMBERED.sub(r"\1 #", x).splitlines()) for x in (a_first, b_first))
    return [f"only A-first: {ln!r}" for ln in a - b] + [f"only B-first: {ln!r}" for ln in b - a]


def _support(g: EvidenceGraph) -> tuple[collections.Counter, collections.Counter]:
    """(messages, distinct observers) citing / making a record of each state."""
    rec = {r.id: r for r in g.records}
    msgs = collections.Counter(rec[m.record].state for m in g.messages)
    srcs = collections.Counter(st for st in "AB" for _ in {r.observer for r in g.records if r.state == st})
    return msgs, srcs


def _own_structure_problems(g: EvidenceGraph, base: EvidenceGraph) -> list[str]:
    """The condition's own messages and records are untouched by what the axis adds."""
    out = []
    if [(m.record, m.relay, m.repeat) for m in g.messages if not m.extra] != \
            [(m.record, m.relay, m.repeat) for m in base.messages]:
        out.append("the condition's own messages changed")
    if [r for r in g.records if not r.extra] != base.records:
        out.append("the condition's own records changed")
    return out


def _added(g: EvidenceGraph, base: EvidenceGraph) -> tuple[dict[str, int], dict[str, int]]:
    """(messages, sources) added for each state: ``g``'s support minus ``base``'s."""
    (gm, gs), (bm, bs) = _support(g), _support(base)
    return {st: gm[st] - bm[st] for st in "AB"}, {st: gs[st] - bs[st] for st in "AB"}


def _wanted(w: Any, base: EvidenceGraph, n: int) -> dict[str, int]:
    """What the variant adds for each state (cue_bank module docstring)."""
    if w.axis == "source-count":
        states = w.extra_states()[:n - len(base.sources)]
    elif any(r.state == "A" for r in base.records):
        states = w.extra_states()
    else:  # factorial / verified contexts: only B's records exist
        states = ["B"] * (n - 2)
    return {st: states.count(st) for st in "AB"}


def structure_problems(g: EvidenceGraph, base: EvidenceGraph) -> list[str]:
    """A source-count or topology world's graph ``g`` against ``base``, the same condition built
    for the world without its axis (seed 001 B.5; `cue_bank` module docstring)."""
    w = g.world
    if w.axis not in ("source-count", "graph-topology"):
        return []
    n = int(w.axis_variant[0])
    out = _own_structure_problems(g, base)
    msgs, srcs = _added(g, base)
    want = _wanted(w, base, n)
    if w.axis == "source-count" and len(g.sources) != n:
        out.append(f"{len(g.sources)} sources shown, the variant says {n}")
    want_srcs = want if w.axis == "source-count" else {"A": 0, "B": 0}
    if (msgs, srcs) != (want, want_srcs):
        out.append(f"added messages {msgs} / sources {srcs}, the variant says {want} / {want_srcs}")
    return out


def split_appendix(c0_user: str, user: str) -> str | None:
    """What an intervention appends between the C0 context and the question (None: ``user`` does not
    start with the C0 context or end with its question)."""
    context, question = c0_user.rsplit("\n\n", 1)
    if not (user.startswith(context + "\n\n") and user.endswith("\n\n" + question)):
        return None
    return user[len(context) + 2:len(user) - len(question) - 2]


def _source_lines_problems(appendix: str, facts: dict[str, Any], code: str) -> list[str]:
    """Each Flat sentence / Ledger row of a source shows the identifier as that source's records hold it."""
    out = []
    for s in facts["sources"]:
        quals = {r["quality"] for r in facts["records"] if r["observer"] == s["name"]}
        lines = [ln for ln in appendix.splitlines() if re.match(rf"{s['name']}\b", ln)]
        if len(lines) != 1:
            out.append(f"{s['name']}: {len(lines)} lines")
            continue
        full, part = code in lines[0], partial_code(code) in lines[0]
        if (full, part) != ({"clear"} == quals, {"limited"} == quals):
            out.append(f"{s['name']}: identifier shown as (full={full}, partial={part}), records {sorted(quals)}")
    return out


def _sham_problems(shams: set[str], ledgers: list[str]) -> list[str]:
    """One Sham for the block, made of whole distinct `cue.SHAM_ROWS`, within 10 % of each ledger
    of the block under every tokenizer family (`cue.sham_length`, `cue.ledger_length`)."""
    if len(shams) != 1:
        return [f"{len(shams)} different Sham texts"]
    lines = shams.pop().splitlines()
    rows = lines[2:]
    if lines[:2] != [SHAM_TITLE, SHAM_HEADER] or len(set(rows)) != len(rows) or not set(rows) <= set(SHAM_ROWS):
        return ["Sham rows repeat, are cut or are not inventory rows"]
    length = sham_length([SHAM_ROWS.index(r) for r in rows])
    out = []
    for led in ledgers:
        ratios = [s / x for s, x in zip(length, ledger_length(led))]
        if any(abs(r - 1) > SHAM_TOLERANCE for r in ratios):
            out.append(f"Sham / Ledger token ratios {[round(r, 3) for r in ratios]}")
    return out


Appendices = dict[str, dict[tuple[str, str], str]]  # intervention -> (track, condition) -> appended text


def _appendices(reqs: list[Any]) -> tuple[dict[tuple[str, str], Any], Appendices]:
    """(C0 P4 requests by (track, condition), what each intervention appends to each of them)."""
    c0 = {(r.track, r.condition): r for r in reqs if r.intervention == "C0" and r.probe == "P4"}
    app: Appendices = collections.defaultdict(dict)
    for r in (r for r in reqs if r.intervention != "C0" and r.probe == "P4"):
        # a context that differs from C0 is kept whole, so it differs from every other arm's appendix
        text = split_appendix(c0[(r.track, r.condition)].user, r.user)
        app[r.intervention][(r.track, r.condition)] = r.user if text is None else text
    return c0, app


def _fact_set_problems(c0: dict[tuple[str, str], Any], app: Appendices) -> list[str]:
    out = []
    for key, r in c0.items():
        code = r.facts["entity"].split()[-1]
        for iv in ("C2", "C3"):
            if key in app[iv]:
                out += [f"{iv} {key}: {p}" for p in _source_lines_problems(app[iv][key], r.facts, code)]
    return out


def _block_sham_problems(app: Appendices) -> list[str]:
    blocks = collections.defaultdict(list)
    for key in app["C1"]:
        blocks[block_of(*key)].append(key)
    return [f"{blk}: {p}" for blk, keys in blocks.items()
            for p in _sham_problems({app["C1"][k] for k in keys}, [app["C3"][k] for k in keys if k in app["C3"]])]


def _verified_problems(app: Appendices) -> list[str]:
    """seed 001 A.7: "Both verified states receive the same appendix"."""
    return [f"{iv}: the two verified states get different appendices" for iv in ("C1", "C2", "C3", "C4")
            if len({text for k, text in app[iv].items() if k[0] == "verified"}) > 1]


def appendix_problems(requests: Iterable[Any]) -> list[str]:
    """The C1-C4 appendices of one world's requests (`cue.RenderedRequest`, C0 included)."""
    reqs = list(requests)
    c0, app = _appendices(reqs)
    changed = [f"{r.intervention} {r.condition}: the context or question differs from its C0 request" for r in reqs
               if r.intervention != "C0" and r.probe == "P4"
               and split_appendix(c0[(r.track, r.condition)].user, r.user) is None]
    return changed + _fact_set_problems(c0, app) + _block_sham_problems(app) + _verified_problems(app)


# ---------------------------------------------------------------- grammar and wording
_ARTICLE = "|".join(sorted(map(re.escape, ARTICLE_VALUES)))
_FORMAT_NAMES = "|".join(map(re.escape, FORMATS))
# known bad patterns (pattern, what it is); each class is one kind of fault seen in stimuli (issue 23 point 12)
BAD_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(\w+) \1\b", re.I), "repeated word"),
    (re.compile(r"(, [^,;.]{3,}), ?\1\b"), "duplicated appositive"),
    (re.compile(r"\.\.(?!\.)|\s[,.;:](?!\d)|,,|;;"), "stray punctuation"),
    (re.compile(r"\w {2,}\w"), "double space inside a sentence"),
    (re.compile(r"[{}]"), "unfilled template field"),
    (re.compile(r"\ba [aeiou]\w*", re.I), "'a' before a vowel"),
    (re.compile(r"\bvia a second faithful relay\b|\(relaying the record directly\)"), "old relay phrasing"),
    # text order must not read as receipt order (point 7)
    (re.compile(r"\b(?:After that|Then|Later|Finally|Next|Afterwards), |\bin the order (?:received|they (?:came|"
                r"arrived))\b|\b(?:latest|most recent|newest) (?:message|report)\b"), "order word"),
    (re.compile(rf"\bThe following account comes from\b|organisation's (?:{_FORMAT_NAMES})\b"), "fictional framing"),
    (re.compile(r"^\s*(?:\[[^\]]*\]\s*)?(?:\d+\s*\|\s*[^|]*\|\s*)?(R\d+)\b(?: reported| said| wrote)?\s*[:|\[][^\n]*?"
                r"\b(?:from \1\b|\1, a faithful relay)", re.M), "relay speaking of itself in the third person"),
    (re.compile(rf"\b(?:was|is|were|be|as|at|to|of|from|and|or|versus|:) (?:{_ARTICLE})\b"), "missing article"),
    (re.compile(r"\b(?:Later|Then|After that|Finally), [^.\n]*?\b(?:is|are|says|states|cites)\b|\b(?:started|began)\b"
                r"[^.\n]*\bwhich (?:says|states|shows)\b"), "tense clash"),
    (re.compile(r"\bat \d\d:\d\d,? (?:(?!\b(?:had|noted|recorded|logged)\b)[^.;\n])*?\b(?:was|were)\b[^.;\n]*\b"
                r"(?:last (?:month|week|year)|yesterday)\b"), "background time clashes with its content"),
]
_A_OK = {"a usable", "a user", "a unit", "a one", "a university", "a utility"}


def grammar_problems(text: str) -> list[str]:
    out = []
    for pat, what in BAD_PATTERNS:
        for m in pat.finditer(text):
            if what == "'a' before a vowel" and m.group(0).lower() in _A_OK:
                continue
            out.append(f"{what}: {text[max(0, m.start() - 30):m.end() + 30]!r}")
    return out

"""Design B text: one evidence graph (`cue_bank.EvidenceGraph`) rendered as one of ten discourse
formats (seed 001 B.3: formats "vary the surface organization of the scenarios independently of
their underlying symbolic records"), or as connected prose for the Naturalized stratum.

Every renderer writes each evidence element (a source's history, the trusted initial record, a
record, a message, the background event, the verification) on one line of its own, in its
format's layout (timestamps, headers, speaker turns, table cells, numbered paragraphs...), and
a message always names its number, the record it cites and every hop of its path. Layout lines
(headers, quoted replies starting with ">") carry no evidence. `cue_fidelity` reads the facts
back from the lines, so a renderer that drops or garbles a cue fails its test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .cue_bank import (FORMATS, INITIAL_TIME, QUALITY_REALIZATIONS, VERIFICATION_TIME, EvidenceGraph, MessageNode,
                       RecordNode, WorldSpec)


def partial_code(code: str) -> str:
    """The entity code with its number hidden (limited identifier quality)."""
    prefix, number = code.split("-")
    return prefix + "-" + "?" * len(number)


def _identifier(w: WorldSpec, r: RecordNode) -> str:
    where = QUALITY_REALIZATIONS[w.quality_realization][1]
    if r.quality == "clear":
        return f"the full target identifier {w.entity_code} is given in {where}"
    return (f"part of the target identifier is unavailable in {where} ({partial_code(w.entity_code)}), "
            f"while the reported value remains visible")


def _hops(m: MessageNode) -> str:
    """The path before the delivering relay, in travel order ('' when the relay had it directly)."""
    before = list(m.path[:-1])
    if not before:
        return ""
    if len(before) == 1:
        return f", passed on by {before[0]}"
    return ", passed on by " + ", then ".join(before)


@dataclass
class Parts:
    """The evidence sentences of a graph, format-neutral, one per element (no final period)."""

    intro: str
    histories: list[str]
    initial: str
    records: list[str]
    messages: list[str]
    message_relays: list[str]
    background: str
    verification: str | None


def parts(g: EvidenceGraph) -> Parts:
    w = g.world
    medium = QUALITY_REALIZATIONS[w.quality_realization][0]
    hist = [f"{s.name}: in 8 fully verified earlier cases, {s.history} of 8 reports by {s.name} matched the trusted "
            f"verification" for s in g.sources if g.show_histories and s.history is not None]
    records = [f"record {r.id} is {medium} made by {r.observer}, describing {r.event_time} and received at "
               f"{r.received}; {_identifier(w, r)}" for r in g.records]
    msgs = []
    for m, k in zip(g.messages, g.message_numbers()):
        r = g.record(m.record)
        msgs.append(f"message {k}{' (repeated)' if m.repeat else ''} from {m.relay}, a faithful relay, cites record "
                    f"{m.record}{_hops(m)}; it states that at {r.event_time} the {w.attr} of {w.entity} was "
                    f"{w.value(r.state)}")
    ver = (f"trusted target-time verification ({VERIFICATION_TIME}): the {w.attr} of {w.entity} was "
           f"{w.value(g.verified)}" if g.verified else None)
    return Parts(intro=f"the {w.attr} of {w.entity}; candidate values: {w.value_a}; {w.value_b}",
                 histories=hist,
                 initial=f"trusted initial record ({INITIAL_TIME}): the {w.attr} of {w.entity} was {w.value_a}",
                 records=records, messages=msgs, message_relays=[m.relay for m in g.messages],
                 background=f"at {g.background_time}, {g.background_text().rstrip('.')}", verification=ver)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _stamp(k: int) -> str:
    """A receipt time for the k-th message (13:05, 13:10, ...): layout only."""
    minutes = 5 * (k + 1)
    return f"13:{minutes:02d}" if minutes < 60 else f"14:{minutes - 60:02d}"


# ---------------------------------------------------------------- the ten formats
def _incident_log(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = [f"INCIDENT LOG: fictional {w.domain} site", f"Subject: {_cap(p.intro)}.", ""]
    out += [f"[history]  {h}." for h in p.histories]
    out += [f"[{INITIAL_TIME}]    {_cap(p.initial)}.", f"[note]     {_cap(p.background)}."]
    out += [f"[{r_.received}]    {_cap(line)}." for r_, line in zip(g.records, p.records)]
    out += [f"[{_stamp(k)}]    {_cap(m)}." for k, m in enumerate(p.messages)]
    if p.verification:
        out.append(f"[{VERIFICATION_TIME}]    {_cap(p.verification)}.")
    return out


def _email_thread(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    slug = w.domain.replace(" ", "-")
    out = [f"Email thread (fictional {w.domain} organisation), subject: {_cap(p.intro)}.", "",
           f"From: records office <records@{slug}.example>", "Sent: 12:55",
           "Body: Source histories from our verification archive, as requested."]
    out += [f"  {_cap(h)}." for h in p.histories]
    out += [f"  {_cap(p.initial)}.", f"  Background: {p.background}."]
    for r_, line in zip(g.records, p.records):
        out += ["", f"From: intake desk <intake@{slug}.example>", f"Sent: {r_.received}", f"Body: {_cap(line)}."]
    for k, (relay, m) in enumerate(zip(p.message_relays, p.messages)):
        out += ["", f"From: {relay} <{relay.lower()}@{slug}.example>", f"Sent: {_stamp(k)}",
                f"> Please send what you have on {w.entity}.", f"Body: {_cap(m)}."]
    if p.verification:
        out += ["", f"From: verification office <verify@{slug}.example>", f"Sent: {VERIFICATION_TIME}",
                f"Body: {_cap(p.verification)}."]
    return out


def _shift_handover(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = [f"SHIFT HANDOVER: fictional {w.domain} team", f"Open question: {p.intro}.", "", "Known sources:"]
    out += [f"  - {_cap(h)}." for h in p.histories]
    out += ["", "Baseline:", f"  - {_cap(p.initial)}.", f"  - Earlier today: {p.background}.", "",
            "Collected during the shift:"]
    out += [f"  - {_cap(r_)}." for r_ in p.records]
    out += ["", "Messages passed to the next shift, in the order received:"]
    out += [f"  - {_cap(m)}." for m in p.messages]
    if p.verification:
        out += ["", f"Late update: {_cap(p.verification)}."]
    return out


def _audit_memo(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = ["MEMORANDUM", f"TO: {w.domain} audit file (fictional)", "FROM: internal audit",
           f"RE: {_cap(p.intro)}.", ""]
    items = ([_cap(h) for h in p.histories] + [_cap(p.initial), f"Background: {p.background}"]
             + [_cap(r_) for r_ in p.records] + [_cap(m) for m in p.messages]
             + ([_cap(p.verification)] if p.verification else []))
    out += [f"{k}. {s}." for k, s in enumerate(items, start=1)]
    return out


def _chat_transcript(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = [f"Chat transcript, #{w.domain.replace(' ', '-')}-ops channel (fictional)",
           f"[12:50] coordinator: checking {p.intro}."]
    out += [f"[12:52] archive-bot: {h}." for h in p.histories]
    out += [f"[12:53] archive-bot: {p.initial}.", f"[12:54] archive-bot: background, {p.background}."]
    out += [f"[{r_.received}] intake-bot: {line}." for r_, line in zip(g.records, p.records)]
    out += [f"[{_stamp(k)}] {relay}: {m}." for k, (relay, m) in enumerate(zip(p.message_relays, p.messages))]
    if p.verification:
        out.append(f"[{VERIFICATION_TIME}] verifier: {p.verification}.")
    out.append("[14:05] coordinator: thanks, closing the thread.")
    return out


def _field_report(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = [f"FIELD REPORT: fictional {w.domain} visit", f"Purpose: establish {p.intro}.", "", "Observers on file:"]
    out += [f"* {_cap(h)}." for h in p.histories]
    out += ["", "Reference:", f"* {_cap(p.initial)}.", "", "Evidence collected on site:"]
    out += [f"* {_cap(r_)}." for r_ in p.records]
    out += ["", "Reports received:"]
    out += [f"* {_cap(m)}." for m in p.messages]
    out += ["", "Context:", f"* {_cap(p.background)}."]
    if p.verification:
        out += ["", "Verification:", f"* {_cap(p.verification)}."]
    return out


def _meeting_minutes(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    relays = ", ".join(dict.fromkeys(p.message_relays))
    out = [f"Minutes: {w.domain} coordination meeting (fictional)", f"Attendees: records office, intake desk, {relays}",
           f"Agenda: {p.intro}.", "", "Item 1, source histories."]
    out += [f"  Records office reported: {h}." for h in p.histories]
    out += ["Item 2, baseline and background.", f"  Records office read out: {p.initial}.",
            f"  Noted: {p.background}.", "Item 3, evidence received."]
    out += [f"  Intake desk reported: {r_}." for r_ in p.records]
    out += ["Item 4, messages."]
    out += [f"  {relay} reported: {m}." for relay, m in zip(p.message_relays, p.messages)]
    if p.verification:
        out += ["Item 5, verification.", f"  Verification office reported: {p.verification}."]
    out.append("Action: none recorded.")
    return out


def _ticket_history(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = [f"Ticket {w.entity_code}-T (fictional {w.domain} service desk)", f"Summary: {_cap(p.intro)}.",
           "", "#  | time  | author          | comment"]
    rows = ([("--:--", "records office", h) for h in p.histories] + [(INITIAL_TIME, "records office", p.initial),
                                                                       ("--:--", "records office", p.background)]
            + [(r_.received, "intake desk", line) for r_, line in zip(g.records, p.records)]
            + [(_stamp(k), relay, m) for k, (relay, m) in enumerate(zip(p.message_relays, p.messages))]
            + ([(VERIFICATION_TIME, "verification", p.verification)] if p.verification else []))
    out += [f"{k:<2} | {t:<5} | {who:<15} | {_cap(text)}." for k, (t, who, text) in enumerate(rows, start=1)]
    out.append("Status: open")
    return out


def _bulletin(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = [f"BULLETIN: {w.domain} notices (fictional)", f"In question: {p.intro}.", ""]
    out += [f"~ Source record: {h}." for h in p.histories]
    out += [f"~ On file: {p.initial}.", f"~ Also noted: {p.background}."]
    out += [f"~ Evidence: {r_}." for r_ in p.records]
    out += [f"~ Report: {m}." for m in p.messages]
    if p.verification:
        out.append(f"~ Verified: {p.verification}.")
    return out


def _case_file(g: EvidenceGraph, p: Parts) -> list[str]:
    w = g.world
    out = [f"CASE FILE {w.entity_code} (fictional {w.domain} matter)", f"Question: {_cap(p.intro)}.", "",
           "Section A: witnesses"]
    out += [f"  A-{k}. {_cap(h)}." for k, h in enumerate(p.histories, start=1)]
    out += ["Section B: reference record", f"  B-1. {_cap(p.initial)}.", f"  B-2. {_cap(p.background)}.",
            "Section C: exhibits"]
    out += [f"  C-{k}. {_cap(r_)}." for k, r_ in enumerate(p.records, start=1)]
    out += ["Section D: statements"]
    out += [f"  Statement {k}. {_cap(m)}." for k, m in enumerate(p.messages, start=1)]
    if p.verification:
        out += ["Section E: verification", f"  E-1. {_cap(p.verification)}."]
    return out


def _naturalized(g: EvidenceGraph, p: Parts) -> list[str]:
    """Connected prose, one paragraph per element, each a full sentence with a transition."""
    w = g.world
    out = [f"The following account comes from a fictional {w.domain} organisation's {w.discourse_format}. It concerns "
           f"{p.intro}.", ""]
    for s in g.sources:
        if g.show_histories and s.history is not None:
            out += [f"Before today, {s.name} had been checked in 8 fully verified earlier cases, and {s.history} of 8 "
                    f"reports by {s.name} matched the trusted verification.", ""]
    out += [f"The day started with a trusted initial record at {INITIAL_TIME}, which says that the {w.attr} of "
            f"{w.entity} was {w.value_a}.", "", f"Some background: at {g.background_time}, {g.background_text()}", ""]
    for line in p.records:
        out += [f"Later, {line}.", ""]
    for k, m in enumerate(p.messages):
        lead = "Then" if k else "After that"
        out += [f"{lead}, {m}.", ""]
    if p.verification:
        out += [f"Finally, a {p.verification}.", ""]
    return out[:-1] if out[-1] == "" else out


RENDERERS: dict[str, Callable[[EvidenceGraph, Parts], list[str]]] = {
    "incident log": _incident_log, "email thread": _email_thread, "shift handover": _shift_handover,
    "audit memo": _audit_memo, "chat transcript": _chat_transcript, "field report": _field_report,
    "meeting minutes": _meeting_minutes, "ticket history": _ticket_history, "bulletin": _bulletin,
    "case file": _case_file,
}
assert set(RENDERERS) == set(FORMATS)
NATURALIZED = "naturalized prose"


def render_graph(g: EvidenceGraph, fmt: str | None = None) -> str:
    """The context text of a graph: its world's format (or ``fmt``, a FORMATS name or
    NATURALIZED); Naturalized worlds render as connected prose unless ``fmt`` says otherwise."""
    if fmt is None:
        fmt = NATURALIZED if g.world.stratum == "naturalized" else g.world.discourse_format
    lines = _naturalized(g, parts(g)) if fmt == NATURALIZED else RENDERERS[fmt](g, parts(g))
    return "\n".join(lines)

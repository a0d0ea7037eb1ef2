"""Design B text: one evidence graph (`cue_bank.EvidenceGraph`) rendered as one of ten discourse
formats (seed 001 B.3: formats "vary the surface organization of the scenarios independently of
their underlying symbolic records"), or as a first-person account for the Naturalized stratum.

The formats differ in organisation, not only in layout: each puts the elements (question,
source histories, trusted initial record, background, records, messages, verification) in its
own order (`ELEMENT_ORDER`), has its own speakers (a log, a coordinator and the relays writing
emails, a shift lead, an auditor, relays speaking for themselves in a chat, a field officer, a
minute-taker, ticket authors, a notice board, a case file quoting statements) and its own
sentences. The contract `cue_fidelity` reads back:

- every evidence element is on one line of its own; lines starting with ">" are quoted layout;
- a message line names "message k" (k its text position; "(repeated)" for a verbatim repeat),
  the record it cites, its relay and every hop of its path and no other name, the event time,
  one candidate value, and the target identifier exactly as its record holds it (the partial
  code of a limited-quality record: a relay reports only what its record holds);
- a record line names the record, its observer, its event time and its identifier (full or
  partial); a history line one source and "k of 8";
- nothing depends on a message's text position but its number and place: every record and
  message is received at 13:00 and says so the same way wherever it stands, and no sentence
  says "then", "after that" or "in the order received".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .cue_bank import (FORMATS, INITIAL_TIME, QUALITY_REALIZATIONS, RECEIVED_TIME, VERIFICATION_TIME, EvidenceGraph,
                       RecordNode)

# seed 001 B.2 domains as a place: (article, noun)
DOMAIN_SITES: dict[str, tuple[str, str]] = {
    "agriculture": ("a", "farm cooperative"), "community centers": ("a", "community centre"),
    "construction": ("a", "construction firm"), "event planning": ("an", "event agency"),
    "facilities": ("a", "facilities team"), "fleet operations": ("a", "fleet depot"),
    "homes": ("a", "housing association"), "hotels": ("a", "hotel"), "IT operations": ("an", "IT operations team"),
    "libraries": ("a", "public library"), "makerspaces": ("a", "makerspace"), "manufacturing": ("a", "factory"),
    "media production": ("a", "media production house"), "offices": ("an", "office building"),
    "research laboratories": ("a", "research laboratory"), "restaurants": ("a", "restaurant group"),
    "retail": ("a", "retail chain"), "schools": ("a", "school"), "shipping": ("a", "shipping yard"),
    "software development": ("a", "software company"), "sports clubs": ("a", "sports club"),
    "travel": ("a", "travel agency"), "universities": ("a", "university"), "utilities": ("a", "utility company"),
    "warehouses": ("a", "warehouse"),
}


def partial_code(code: str) -> str:
    """The entity code with its number hidden (limited identifier quality)."""
    prefix, number = code.split("-")
    return prefix + "-" + "?" * len(number)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclass
class RecordView:
    id: str
    observer: str
    medium: str  # "a photograph"
    where: str  # "the photographed label"
    time: str  # the event time it describes
    clear: bool
    code: str  # the identifier as the record holds it (full or partial)


@dataclass
class MessageView:
    label: str  # "message 2" or "message 2 (repeated)"
    relay: str
    hops: list[str]  # who handed the record on before the relay, in travel order
    record: str
    time: str
    value: str  # the value phrase it states
    target: str  # the entity as the record identifies it ("firmware image VR-????")


@dataclass
class View:
    """The facts of a graph as the renderers need them (no sentences)."""

    site: str  # "hotel"
    a_site: str  # "a hotel"
    slug: str
    attr: str
    entity: str
    code: str
    candidates: list[str]  # value phrases, in the world's option order
    histories: list[tuple[str, int]]
    initial: str  # the value phrase of the trusted initial record
    bg_time: str
    bg: str  # what happened at bg_time
    records: list[RecordView]
    messages: list[MessageView]
    relays: list[str]  # delivering relays, by name
    verified: str | None  # the verified value phrase (verified branches only)


def view(g: EvidenceGraph) -> View:
    w = g.world
    medium, where = QUALITY_REALIZATIONS[w.quality_realization]
    art, site = DOMAIN_SITES[w.domain]

    def code_of(r: RecordNode) -> str:
        return w.entity_code if r.quality == "clear" else partial_code(w.entity_code)

    recs = [RecordView(r.id, r.observer, medium, where, r.event_time, r.quality == "clear", code_of(r))
            for r in g.records]
    msgs = []
    for m, k in zip(g.messages, g.message_numbers()):
        r = g.record(m.record)
        msgs.append(MessageView(f"message {k}{' (repeated)' if m.repeat else ''}", m.relay, list(m.path[:-1]), m.record,
                                r.event_time, w.value_phrase(r.state), f"{w.noun} {code_of(r)}"))
    return View(site=site, a_site=f"{art} {site}", slug=w.domain.lower().replace(" ", "-"), attr=w.attr,
                entity=w.entity, code=w.entity_code, candidates=[w.value_phrase(s) for s in w.option_states()],
                histories=[(s.name, s.history) for s in g.sources if g.show_histories and s.history is not None],
                initial=w.value_phrase("A"), bg_time=g.background_time, bg=g.background_text(), records=recs,
                messages=msgs, relays=sorted({m.relay for m in g.messages}, key=lambda r: int(r[1:])),
                verified=w.value_phrase(g.verified) if g.verified else None)


def _via(hops: list[str], lead: str = " via ") -> str:
    return lead + _and(hops) if hops else ""


def _from_chain(hops: list[str]) -> str:
    """The hops as the delivering relay tells them: " from S1, who had it from T1"."""
    if not hops:
        return ""
    back = hops[::-1]
    return " from " + back[0] + "".join(f", who had it from {h}" for h in back[1:])


def _cands(v: View, joiner: str = " or ") -> str:
    return joiner.join(v.candidates)


# ---------------------------------------------------------------- the ten formats
# each returns the lines; ELEMENT_ORDER records the order of its elements (Q question, H histories,
# I initial record, G background, R records, M messages, V verification)
def _incident_log(v: View) -> list[str]:
    """A system log in time order (background, baseline, intake, messages, verification); the
    source histories follow as reference entries."""
    out = [f"INCIDENT LOG, {v.site} (fictional)", f"Open item: the {v.attr} of {v.entity}, {_cands(v)}.",
           "Relays in this log forward records unchanged.", "",
           f"[{v.bg_time}] NOTE: {_cap(v.bg)}.",
           f"[{INITIAL_TIME}] BASELINE: trusted initial record, {v.attr} of {v.entity} = {v.initial}."]
    for r in v.records:
        ident = (f"full identifier {r.code} visible in {r.where}" if r.clear else
                 f"identifier only partly visible in {r.where} ({r.code}), value visible")
        out.append(f"[{RECEIVED_TIME}] RECORD IN: {r.id}, {r.medium} by {r.observer} of the state at {r.time}; {ident}.")
    for m in v.messages:
        out.append(f"[{RECEIVED_TIME}] {m.label.upper()}: {m.relay} forwards {m.record}{_via(m.hops)}; {v.attr} of "
                   f"{m.target} at {m.time} = {m.value}.")
    if v.verified:
        out.append(f"[{VERIFICATION_TIME}] VERIFIED: trusted target-time verification, {v.attr} of {v.entity} = "
                   f"{v.verified}.")
    out += ["", "Reference entries:"]
    out += [f"REF {s}: {k} of 8 earlier reports by {s} matched trusted verification." for s, k in v.histories]
    return out


def _email_thread(v: View) -> list[str]:
    """The coordinator asks; the intake desk, each relay (in the first person, quoting the request)
    and the records office answer by email."""
    def head(who: str, addr: str, sent: str) -> list[str]:
        return ["", f"From: {who} <{addr}@{v.slug}.example>", f"Sent: {sent}"]

    out = [f"Subject: {_cap(v.attr)} of {v.entity}: {_cands(v)}?"]
    out += head("coordinator", "coord", INITIAL_TIME)
    out += [f"Team, our trusted initial record from {INITIAL_TIME} has the {v.attr} of {v.entity} as {v.initial}. "
            "Please send what you have on it, unchanged.",
            f"Also for the file: at {v.bg_time} {v.bg}."]
    out += head("intake desk", "intake", RECEIVED_TIME)
    for r in v.records:
        ident = (f"The full target identifier {r.code} is given in {r.where}." if r.clear else
                 f"Part of the target identifier is unreadable in {r.where}, which shows only {r.code}; the reported "
                 f"value is readable.")
        out.append(f"Record {r.id} arrived at {RECEIVED_TIME}: {r.medium} that {r.observer} made of the situation at "
                   f"{r.time}. {ident}")
    for m in v.messages:
        out += head(m.relay, m.relay.lower(), RECEIVED_TIME)
        out += ["> Please send what you have on it, unchanged.",
                f"{m.relay} here, with {m.label}. I am forwarding record {m.record} unchanged"
                f"{_via(m.hops, ', which reached me via ')}. It says that at {m.time} the {v.attr} of {m.target} was "
                f"{m.value}."]
    out += head("records office", "records", RECEIVED_TIME)
    out += [f"{s}: {k} of 8 earlier reports were confirmed when the cases were later fully verified."
            for s, k in v.histories]
    if v.verified:
        out += head("verification office", "verify", VERIFICATION_TIME)
        out.append(f"Trusted target-time verification at {VERIFICATION_TIME}: the {v.attr} of {v.entity} was "
                   f"{v.verified}.")
    return out


def _shift_handover(v: View) -> list[str]:
    """The outgoing shift lead briefs the next shift: certainties, then the messages, the records
    behind them, how far the observers can be trusted, and a side note."""
    out = [f"SHIFT HANDOVER, {v.site} (fictional)", f"Still open for you: is the {v.attr} of {v.entity} "
           f"{_cands(v)}?", "",
           f"What we know for certain: the trusted initial record says the {v.attr} was {v.initial} at "
           f"{INITIAL_TIME}.", "",
           f"Messages that reached us at {RECEIVED_TIME} (relays pass records on unchanged):"]
    for m in v.messages:
        out.append(f"  - {_cap(m.label)} ({m.relay}) relays record {m.record}{_via(m.hops, ', handed on by ')}: at "
                   f"{m.time} the {v.attr} of {m.target} was {m.value}.")
    out += ["", "Where those messages come from:"]
    for r in v.records:
        ident = (f"{r.where} shows the whole identifier, {r.code}" if r.clear else
                 f"{r.where} shows only {r.code}, the rest of the identifier is missing, though the value can be read")
        out.append(f"  - Record {r.id}: {r.medium} by {r.observer} of the state at {r.time}, received {RECEIVED_TIME}; "
                   f"{ident}.")
    out += ["", "How far we trust the observers:"]
    out += [f"  - {s} got {k} of 8 earlier reports right, going by the cases that were later fully verified."
            for s, k in v.histories]
    out += ["", f"Worth knowing: at {v.bg_time} {v.bg}."]
    if v.verified:
        out += ["", f"Just in: the trusted target-time verification at {VERIFICATION_TIME} found the {v.attr} of "
                    f"{v.entity} to be {v.verified}."]
    return out


def _audit_memo(v: View) -> list[str]:
    """An auditor's findings: the baseline, each observer's verified record, the exhibits and the
    statements made from them, and the background last."""
    out = ["MEMORANDUM", f"To: audit file, {v.site} (fictional)", "From: internal audit",
           f"Re: the {v.attr} of {v.entity} ({_cands(v, ' versus ')})", "",
           "All relays named below are faithful: they transmit a record without adding an observation.", "",
           f"Baseline. The trusted initial record establishes that at {INITIAL_TIME} the {v.attr} of {v.entity} was "
           f"{v.initial}.", "", "Observers."]
    out += [f"  Observer {s}: of the reports {s} made in 8 earlier cases that were later fully verified, {k} of 8 "
            f"matched the verification." for s, k in v.histories]
    out += ["", "Exhibits."]
    for r in v.records:
        ident = (f"{r.where} bears the complete identifier {r.code}" if r.clear else
                 f"{r.where} bears an incomplete identifier, {r.code}, while the reported value is legible")
        out.append(f"  Exhibit {r.id} is {r.medium} produced by {r.observer}, depicting the state at {r.time} and "
                   f"logged at {RECEIVED_TIME}; {ident}.")
    out += ["", "Statements."]
    for m in v.messages:
        chain = f" (chain: {', '.join(m.hops)})" if m.hops else ""
        out.append(f"  {_cap(m.label)} was delivered by {m.relay} from exhibit {m.record}{chain}. It asserts that at "
                   f"{m.time} the {v.attr} of {m.target} was {m.value}.")
    out += ["", f"Background. At {v.bg_time} {v.bg}."]
    if v.verified:
        out += ["", f"Verification. A trusted target-time verification at {VERIFICATION_TIME} confirms that the "
                    f"{v.attr} of {v.entity} was {v.verified}."]
    return out


def _chat_transcript(v: View) -> list[str]:
    """The relays answer the coordinator in their own words; bots post the histories and the
    records when asked; the baseline comes up last."""
    out = [f"#{v.slug}-ops, chat transcript (fictional)",
           f"coordinator: I need the {v.attr} of {v.entity}: {_cands(v)}? Relays, paste what you have, unchanged."]
    for m in v.messages:
        out.append(f"{m.relay} [{RECEIVED_TIME}]: {m.label}. I'm passing on record {m.record} exactly as I got it"
                   f"{_from_chain(m.hops)}: at {m.time} the {v.attr} of {m.target} was {m.value}.")
    out.append("coordinator: who is behind these records, and how reliable have they been?")
    out += [f"archive-bot: {s}, {k} of 8 verified earlier reports correct." for s, k in v.histories]
    for r in v.records:
        ident = f"id {r.code} complete" if r.clear else f"id partial, {r.code} (value readable)"
        out.append(f"intake-bot [{RECEIVED_TIME}]: {r.id} is {r.medium} from {r.observer}, covering {r.time}; {ident}.")
    out.append(f"coordinator: for reference, the trusted initial record had it as {v.initial} at {INITIAL_TIME}.")
    out.append(f"archive-bot: note from {v.bg_time}: {v.bg}.")
    if v.verified:
        out.append(f"verifier [{VERIFICATION_TIME}]: trusted target-time verification done, {v.attr} of {v.entity} = "
                   f"{v.verified}.")
    return out


def _field_report(v: View) -> list[str]:
    """A field officer's report: the evidence collected and the reports relayed first, then the
    observers' reliability, the reference record and the context."""
    out = [f"FIELD REPORT, visit to {v.a_site} (fictional)",
           f"Purpose: establish whether the {v.attr} of {v.entity} is {_cands(v)}.", "",
           f"Evidence collected (received at {RECEIVED_TIME}):"]
    for r in v.records:
        ident = (f"the identifier {r.code} can be read in full" if r.clear else
                 f"only {r.code} of the identifier can be read, but the value can")
        out.append(f"* Record {r.id}: {r.medium} taken by {r.observer} of the situation at {r.time}; {ident}.")
    out += ["", "Reports relayed to me (faithful relays, nothing added):"]
    for m in v.messages:
        route = f" (route {', '.join(m.hops)})" if m.hops else ""
        out.append(f"* {_cap(m.label)}, from {m.relay}{route}, carries record {m.record} and gives the {v.attr} of "
                   f"{m.target} at {m.time} as {m.value}.")
    out += ["", "Observer reliability on file:"]
    out += [f"* {s}: {k} of 8 earlier reports confirmed by trusted verification." for s, k in v.histories]
    out += ["", "Reference and context:", f"* Trusted initial record, {INITIAL_TIME}: {v.initial}.",
            f"* Earlier today, at {v.bg_time}, {v.bg}."]
    if v.verified:
        out += ["", "Verification:", f"* Trusted target-time verification, {VERIFICATION_TIME}: the {v.attr} of "
                                     f"{v.entity} was {v.verified}."]
    return out


def _meeting_minutes(v: View) -> list[str]:
    """Minutes in reported speech: each relay reads out its message, the intake desk and the
    records office explain where the messages come from, the coordinator recalls the baseline."""
    out = [f"Minutes, coordination meeting at {v.a_site} (fictional)",
           f"Present: coordinator, intake desk, records office; relays {_and(v.relays)}, who pass records on "
           f"unchanged", f"Question before the meeting: the {v.attr} of {v.entity}, {_cands(v)}?", "",
           "1. Reports from the relays"]
    for m in v.messages:
        out.append(f"   {m.relay} read out {m.label}, which relayed record {m.record}"
                   f"{_via(m.hops, ' handed on by ')}, and said that at {m.time} the {v.attr} of {m.target} had been "
                   f"{m.value}.")
    out.append("2. The records behind them")
    for r in v.records:
        ident = (f"carries the full identifier {r.code}" if r.clear else
                 f"carries only a partial identifier, {r.code}, with the value still readable")
        out.append(f"   Intake desk: record {r.id}, received {RECEIVED_TIME}, is {r.medium} by {r.observer} covering "
                   f"{r.time}, and {r.where} {ident}.")
    out.append("3. Track records")
    out += [f"   Records office: {s} matched trusted verification in {k} of 8 earlier cases." for s, k in v.histories]
    out += ["4. Baseline", f"   The coordinator read out the trusted initial record: at {INITIAL_TIME} the {v.attr} of "
                           f"{v.entity} was {v.initial}.", f"   Also on record: at {v.bg_time} {v.bg}."]
    if v.verified:
        out += ["5. Verification", f"   Verification office: the trusted target-time verification at "
                                   f"{VERIFICATION_TIME} shows that the {v.attr} of {v.entity} was {v.verified}."]
    out.append("Action: decide the question at the next meeting.")
    return out


def _ticket_history(v: View) -> list[str]:
    """A service-desk ticket: opened from the baseline, annotated by the records office (background,
    source statistics), then the attached records and the relays' comments."""
    out = [f"Ticket {v.code}-T, {v.site} service desk (fictional), status open",
           f"Summary: confirm the {v.attr} of {v.entity} ({_cands(v)})",
           "Relay comments quote their record unchanged.", "",
           "time  | author         | comment",
           f"{INITIAL_TIME} | records office | Opened from the trusted initial record ({v.attr} at {INITIAL_TIME}: "
           f"{v.initial}).",
           f"{v.bg_time} | records office | Linked note: {v.bg}."]
    out += [f"--    | records office | Source statistics for {s}: {k} of 8 fully verified earlier reports matched."
            for s, k in v.histories]
    for r in v.records:
        ident = (f"Identifier: {r.code} (complete)." if r.clear else
                 f"Identifier: {r.code} (partly unavailable; value visible).")
        out.append(f"{RECEIVED_TIME} | intake desk    | Attached record {r.id} ({r.medium} by {r.observer}, state at "
                   f"{r.time}). {ident}")
    for m in v.messages:
        out.append(f"{RECEIVED_TIME} | {m.relay:<14} | {_cap(m.label)}: forwarding record {m.record} unchanged"
                   f"{_via(m.hops, ' (via ') + (')' if m.hops else '')}. {_cap(v.attr)} of {m.target} at {m.time}: "
                   f"{m.value}.")
    if v.verified:
        out.append(f"{VERIFICATION_TIME} | verification   | Trusted target-time verification of the {v.attr}: "
                   f"{v.verified}.")
    return out


def _bulletin(v: View) -> list[str]:
    """Terse notices: what is on file, today's reports, where they come from, the sources' records."""
    out = [f"BULLETIN, {v.site} notices (fictional)", f"OPEN QUESTION: {v.attr} of {v.entity}, {_cands(v)}?", "",
           f"ON FILE: trusted initial record ({INITIAL_TIME}), {v.initial}.", f"NOTE ({v.bg_time}): {_cap(v.bg)}.", "",
           f"TODAY'S REPORTS (received {RECEIVED_TIME} from faithful relays)"]
    for m in v.messages:
        out.append(f"~ {_cap(m.label)}, {m.relay}{_via(m.hops, ' via ')}, cites {m.record}: {v.attr} of {m.target} at "
                   f"{m.time}, {m.value}.")
    out += ["", "THE RECORDS"]
    for r in v.records:
        ident = f"identifier {r.code} complete" if r.clear else f"identifier {r.code}, partly unavailable"
        out.append(f"~ {r.id}: {r.medium}, observer {r.observer}, describes {r.time}, {ident}.")
    out += ["", "TRACK RECORDS"]
    out += [f"~ {s}: {k} of 8 earlier reports held up under trusted verification." for s, k in v.histories]
    if v.verified:
        out += ["", f"VERIFIED ({VERIFICATION_TIME}): trusted target-time verification, {v.attr}: {v.verified}."]
    return out


def _case_file(v: View) -> list[str]:
    """A case file: witnesses first, then exhibits, the relays' statements quoted verbatim, the
    reference record and the background."""
    out = [f"CASE FILE {v.code}, {v.site} matter (fictional)",
           f"Question: was the {v.attr} of {v.entity} {_cands(v)}?", "", "Section A, witnesses and their verified records"]
    out += [f"  Witness {s}: in 8 earlier cases later fully verified, {s} was right {k} of 8 times."
            for s, k in v.histories]
    out.append(f"Section B, exhibits (received {RECEIVED_TIME})")
    for r in v.records:
        ident = (f"{r.where} gives the identifier {r.code} in full" if r.clear else
                 f"{r.where} gives the identifier only as {r.code}; the value is legible")
        out.append(f"  Exhibit {r.id} ({r.medium}, by {r.observer}, showing the state at {r.time}): {ident}.")
    out.append("Section C, statements of the relays (faithful; they add no observation)")
    for m in v.messages:
        through = f" (through {_and(m.hops)})" if m.hops else ""
        out.append(f"  {_cap(m.label)}, delivered by {m.relay}{through}, quoting exhibit {m.record}: \"At {m.time} the "
                   f"{v.attr} of {m.target} was {m.value}.\"")
    out += ["Section D, reference", f"  Trusted initial record, {INITIAL_TIME}: \"the {v.attr} of {v.entity} was "
                                    f"{v.initial}.\"", f"  Background, {v.bg_time}: {v.bg}."]
    if v.verified:
        out += ["Section E, verification", f"  Trusted target-time verification, {VERIFICATION_TIME}: \"the {v.attr} of "
                                           f"{v.entity} was {v.verified}.\""]
    return out


def _naturalized(v: View) -> list[str]:
    """A coordinator's own account in the past tense, one paragraph per element."""
    out = [f"I keep the records at {v.a_site}, and I have to settle the {v.attr} of {v.entity}: was it "
           f"{_cands(v)}?",
           f"Our trusted initial record, made at {INITIAL_TIME}, gave the {v.attr} of {v.entity} as {v.initial}.",
           f"Something else came up this morning: at {v.bg_time} {v.bg}."]
    out += [f"I have checked {s} before: {k} of 8 earlier reports from {s} matched what trusted verification later "
            f"showed." for s, k in v.histories]
    for r in v.records:
        ident = (f"the full identifier, {r.code}, was clear in {r.where}" if r.clear else
                 f"only part of the identifier survived in {r.where}, {r.code}, although the value was clear")
        out.append(f"{r.observer} made {r.medium} of the situation at {r.time}, which reached me at {RECEIVED_TIME} as "
                   f"record {r.id}; {ident}.")
    out.append("The relays forwarded the records to me unchanged, each in a message of its own.")
    for m in v.messages:
        out.append(f"{_cap(m.label)} came to me from {m.relay}{_naturalized_chain(m)}; it carried record {m.record} and said that at {m.time} the {v.attr} "
                   f"of {m.target} was {m.value}.")
    if v.verified:
        out.append(f"The trusted target-time verification at {VERIFICATION_TIME} settled the question: the {v.attr} of "
                   f"{v.entity} was {v.verified}.")
    return [p for line in out for p in (line, "")][:-1]


def _naturalized_chain(m: MessageView) -> str:
    """", who had it from S1, who had it from T1" (the hops, back from the relay)."""
    return "".join(f", who had it from {h}" for h in m.hops[::-1])


RENDERERS: dict[str, Callable[[View], list[str]]] = {
    "incident log": _incident_log, "email thread": _email_thread, "shift handover": _shift_handover,
    "audit memo": _audit_memo, "chat transcript": _chat_transcript, "field report": _field_report,
    "meeting minutes": _meeting_minutes, "ticket history": _ticket_history, "bulletin": _bulletin,
    "case file": _case_file,
}
assert set(RENDERERS) == set(FORMATS)
NATURALIZED = "naturalized prose"
# the order of the elements in each format (Q question, I initial record, G background, H histories,
# R records, M messages, V verification): no two formats share one
ELEMENT_ORDER: dict[str, str] = {
    "incident log": "QGIRMVH", "email thread": "QIGRMHV", "shift handover": "QIMRHGV", "audit memo": "QIHRMGV",
    "chat transcript": "QMHRIGV", "field report": "QRMHIGV", "meeting minutes": "QMRHIGV",
    "ticket history": "QIGHRMV", "bulletin": "QIGMRHV", "case file": "QHRMIGV", NATURALIZED: "QIGHRMV",
}


def render_graph(g: EvidenceGraph, fmt: str | None = None) -> str:
    """The context text of a graph: its world's format (or ``fmt``, a FORMATS name or
    NATURALIZED); Naturalized worlds render as a first-person account unless ``fmt`` says otherwise."""
    if fmt is None:
        fmt = NATURALIZED if g.world.stratum == "naturalized" else g.world.discourse_format
    v = view(g)
    return "\n".join(_naturalized(v) if fmt == NATURALIZED else RENDERERS[fmt](v))


__all__ = ["render_graph", "RENDERERS", "NATURALIZED", "ELEMENT_ORDER", "DOMAIN_SITES", "partial_code", "view",
           "View"]

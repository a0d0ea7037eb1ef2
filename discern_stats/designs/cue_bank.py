"""Design B world bank: 500 fictional worlds and the typed evidence graph of every request
(seed 001 sections 2, A.1, B.1-B.7). Text is rendered from a graph by `cue_render`.

A world is a fictional entity with a target attribute and two candidate states. Semantic state
A is always the value of the trusted initial record (10:00); B is the other value. Option
letters are counterbalanced separately (AB / BA order), so letters never encode A/B.

An evidence graph holds: original sources (observers) with their verified 8-case histories;
records (who made them, which state, about which event time, received when, how identifiable);
final messages (which record each cites, through which path of relays); one background event;
and, on verified branches only, the trusted 14:00 verification. Every record and message is
received at 13:00 (seed 001 C.4: "later evidence describing 12:00, received at 13:00"), whatever
its place in the text, so text order never carries receipt order.

The report-structure block (seed 001 C.7) keeps its third source O3 (B's history) on file in
all four steps; only the separate-roots step gives O3 a record. So every step shows the same
sources, and the lineage step changes only whether B's second message cites a second record
(A.1: "varying only whether they share a single underlying evidence record").

The five structural axes (seed 001 B.5, `core.vocab.STRUCTURAL_AXES`) change the graph itself,
identically in both arms of every contrast, so a contrast still differs only in its cue. The
structure they add is balanced between the two states: a 4-variant adds one piece for A and one
for B; a 3-variant adds one, for A in 6 and for B in the other 6 worlds of the variant
(``WorldSpec.extra_state``). Added records and messages are flagged ``extra``.

- source-count: every graph shows exactly 3 or 4 original sources. The added sources
  (history 7/8 each) make a record of the state they support, describing the time that state's
  own record describes, and a message relays it.
- graph-topology: 1 or 2 messages are added to every graph (so the two-message contexts show
  exactly 3 or 4; the report-structure steps keep their own extra messages on top), each citing
  the record of the state it supports. Factorial and verified contexts have only B's records
  (all current reports say B, by design), so there the added messages cite those in turn.
- dependency-pattern: every relay path passes through one shared archival desk, or each through
  its own.
- relay-chain-length: each message travels a chain of 2 or 3 faithful relays.
- role-configuration: each record is first passed on by its own observer, or by another observer.

Added messages come after the messages of the context (A's added message first when there are
two, counterbalanced by ``extra_state``) and keep their place in both arms of an order contrast.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..core.vocab import HISTORY_CONFIGS, HISTORY_LEVELS, STRATA, STRUCTURAL_AXES
from ..core.errors import InputError

WORLD_SEED_RANGE = (0, 9999)  # world ids are w<seed:04d>-<index:03d>

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
# candidate values that a sentence needs "the" before (options show them bare: "A. upper cabinet")
ARTICLE_VALUES = frozenset({"upper cabinet", "lower cabinet", "morning slot", "evening slot", "vault clerk",
                            "duty officer"})
DOMAINS = ["agriculture", "community centers", "construction", "event planning", "facilities", "fleet operations",
           "homes", "hotels", "IT operations", "libraries", "makerspaces", "manufacturing", "media production",
           "offices", "research laboratories", "restaurants", "retail", "schools", "shipping",
           "software development", "sports clubs", "travel", "universities", "utilities", "warehouses"]
FORMATS = ["incident log", "email thread", "shift handover", "audit memo", "chat transcript", "field report",
           "meeting minutes", "ticket history", "bulletin", "case file"]
# seed 001 B.4: the four textual realizations of evidence quality: (medium, where the identifier is seen)
QUALITY_REALIZATIONS = {
    "photograph": ("a photograph", "the photographed label"),
    "log": ("a system log entry", "the log entry"),
    "document": ("a scanned document", "the document"),
    "audio": ("an audio recording", "the recording"),
}
# seed 001 B.5: background events (kind -> (time, what happened at that time today)); none verifies the
# target-time state. Each is something done or noted at its time, so the time and the content agree.
BACKGROUNDS: dict[str, tuple[str, str]] = {
    "alias-binding": ("09:20", "the register confirmed that {entity} is also listed under the alias {code}-ALT in "
                               "older files, and that the alias and the code name the same {noun}"),
    "conditional-release": ("09:40", "a release of {entity} was planned on condition of a sign-off; no sign-off "
                                     "has been filed, so the release is not known to have happened"),
    "historical-return": ("09:10", "the register noted that {entity} had been returned once last month and "
                                   "re-registered under the same code the same day"),
    "parallel-entity": ("09:30", "a similar {noun} with the code {code}X was logged at another site; it is not "
                                 "the target of this case"),
    "planned-vs-effective": ("09:50", "a change to the {attr} of {entity} was scheduled for next week; a scheduled "
                                      "change does not take effect before its date"),
    "unadopted-proposal": ("09:15", "a proposal to change the {attr} of {entity} was filed; it has not been "
                                    "adopted"),
    "scope-copy": ("09:25", "a copy of another site's register arrived; its entries do not apply to {entity}"),
    "single-change": ("09:05", "the register's rule was restated: the {attr} of {entity} can change at most once "
                               "a day"),
    "supersession-chain": ("09:35", "an earlier request form for {entity} turned out to have been superseded by a "
                                    "later form, which a third form had superseded in turn"),
    "temporary-state": ("09:45", "the register noted that short temporary holds can apply to {entity}; none has "
                                 "been recorded today"),
}
NAMES = ["O1", "O2"]
INITIAL_TIME, RECEIVED_TIME, VERIFICATION_TIME = "10:00", "13:00", "14:00"
EXTRA_HISTORY = 7  # verified matches of every source added by the source-count axis (the same for A's and B's)
EXTRA_RELAYS = ("R4", "R5")  # relays of added messages (R1: A's message, R2/R3: B's, as in every world)
H, L = HISTORY_LEVELS["H"], HISTORY_LEVELS["L"]


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
    axis_variant: str | None  # one of STRUCTURAL_AXES[axis]
    option_order: str  # 'AB' | 'BA'
    shared_root_owner: str  # 'O1' | 'O2'
    entity_code: str
    value_a: str
    value_b: str
    # structural worlds: the state the single added source/message of a 3-variant supports (and the state
    # of the first added one of a 4-variant); 6 'A' and 6 'B' per axis variant (None outside Structural)
    extra_state: str | None = None

    @property
    def attr(self) -> str:
        return RELATIONS[self.relation][0]

    @property
    def noun(self) -> str:
        return RELATIONS[self.relation][1]

    @property
    def entity(self) -> str:
        return f"{self.noun} {self.entity_code}"

    def value(self, state: str) -> str:
        """The candidate value as an option shows it ("upper cabinet")."""
        return self.value_a if state == "A" else self.value_b

    def value_phrase(self, state: str) -> str:
        """The value as a sentence says it, with the article English needs ("the upper cabinet")."""
        v = self.value(state)
        return f"the {v}" if v in ARTICLE_VALUES else v

    def option_states(self) -> list[str]:
        """The states in the world's option order (candidates are always listed in this order)."""
        return ["A", "B"] if self.option_order == "AB" else ["B", "A"]

    def extra_states(self) -> list[str]:
        """The states of the sources/messages a 3- or 4-variant adds, in the order they are added."""
        if self.axis not in ("source-count", "graph-topology"):
            return []
        other = "B" if self.extra_state == "A" else "A"
        return [self.extra_state, other][:int(self.axis_variant[0]) - 2]

    def to_row(self) -> dict[str, Any]:
        from ..store.db import dumps
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


def check_world_seed(seed: int) -> int:
    lo, hi = WORLD_SEED_RANGE
    if not isinstance(seed, int) or isinstance(seed, bool) or not lo <= seed <= hi:
        raise InputError(f"world seed {seed!r} is out of range: use an integer from {lo} to {hi} "
                         f"(world ids are w<seed, 4 digits>-<index>)")
    return seed


def build_worlds(seed: int = 0, n_worlds: int | None = None) -> list[WorldSpec]:
    """The 500-world bank, deterministic from ``seed``. ``n_worlds`` takes the first n
    worlds of a stratified order (keeping the Core/Structural/Naturalized mix) for demos."""
    check_world_seed(seed)
    rng = random.Random(seed)
    strata = [s for s, n in STRATA.items() for _ in range(n)]
    total = len(strata)
    n_struct = STRATA["structural"]
    # Structural: 10 worlds per relation family (12 x 10 = 120), 24 per axis, 12 per axis variant.
    struct_rel = _balanced(rng, list(RELATIONS), n_struct)
    struct_axis = _balanced(rng, [(a, v) for a, vs in STRUCTURAL_AXES.items() for v in vs], n_struct)
    other_rel = [list(RELATIONS)[i % 12] for i in range(total - n_struct)]
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
            rel, (axis, variant) = struct_rel[si], struct_axis[si]
            si += 1
        else:
            rel, axis, variant = other_rel[oi], None, None
            oi += 1
        pair = RELATIONS[rel][3][rng.randrange(len(RELATIONS[rel][3]))]
        a, b = (pair if rng.random() < 0.5 else pair[::-1])
        code = f"{RELATIONS[rel][2]}-{rng.randrange(1000, 9999)}"
        worlds.append(WorldSpec(world_id=f"w{seed:04d}-{i + 1:03d}", seed=seed, index=i, stratum=stratum, relation=rel,
                                domain=domains[i], discourse_format=formats[i], quality_realization=qual[i],
                                background=bg[i], axis=axis, axis_variant=variant, option_order=order[i],
                                shared_root_owner=owner[i], entity_code=code, value_a=a, value_b=b))
    # the state of the added structure: 6 A / 6 B within each axis variant, from its own stream so that
    # adding it left every other draw of the bank as it was
    xrng = random.Random(f"extra-state-{seed}")
    for variant in (v for vs in STRUCTURAL_AXES.values() for v in vs):
        mine = [w for w in worlds if w.axis_variant == variant]
        for w, st in zip(mine, _balanced(xrng, ["A", "B"], len(mine))):
            w.extra_state = st
    if n_worlds is not None and n_worlds < total:
        # keep the strata mix: take the first worlds of each stratum in proportion
        by = {s: [w for w in worlds if w.stratum == s] for s in STRATA}
        picked: list[WorldSpec] = []
        for s, n in STRATA.items():
            k = max(1, round(n_worlds * n / total))
            picked.extend(by[s][:k])
        worlds = sorted(picked, key=lambda w: w.index)[:n_worlds]
    return worlds


# ---------------------------------------------------------------- the evidence graph
@dataclass(frozen=True)
class SourceNode:
    """An original observer and its verified history: ``history`` of 8 earlier reports matched
    a trusted verification (None: no history shown)."""

    name: str
    history: int | None


@dataclass(frozen=True)
class RecordNode:
    """An original record: made by ``observer``, reporting ``state`` as of ``event_time``."""

    id: str
    observer: str
    state: str  # 'A' | 'B'
    event_time: str
    received: str = RECEIVED_TIME
    quality: str = "clear"  # 'clear' | 'limited' (part of the identifier unavailable)
    extra: bool = False  # added by the source-count axis (the same in every arm of a contrast)


@dataclass(frozen=True)
class MessageNode:
    """A final message citing ``record``. ``path`` lists who passed it on, from the record to the
    reader (observers, archival desks, relays); ``relay`` is the relay that delivers it. A
    ``repeat`` shows the previous message again verbatim."""

    record: str
    relay: str
    path: tuple[str, ...]
    repeat: bool = False
    extra: bool = False  # added by the source-count or topology axis (the same in every arm of a contrast)


@dataclass
class EvidenceGraph:
    world: WorldSpec
    sources: list[SourceNode]
    records: list[RecordNode]
    messages: list[MessageNode]
    verified: str | None = None  # 'A' | 'B': the trusted 14:00 verification (verified branches only)
    background: str = ""
    show_histories: bool = True

    def message_numbers(self) -> list[int]:
        """The number shown for each message: a verbatim repeat keeps the number of the one it repeats."""
        out, k = [], 0
        for m in self.messages:
            k += 0 if m.repeat else 1
            out.append(k)
        return out

    def record(self, rid: str) -> RecordNode:
        return next(r for r in self.records if r.id == rid)

    def source(self, name: str) -> SourceNode:
        return next(s for s in self.sources if s.name == name)

    @property
    def background_time(self) -> str:
        return BACKGROUNDS[self.background][0]

    def background_text(self) -> str:
        w = self.world
        return BACKGROUNDS[self.background][1].format(entity=w.entity, code=w.entity_code, noun=w.noun, attr=w.attr)

    def facts(self) -> dict[str, Any]:
        """The graph as plain data (for export and the synthetic respondent); states as A/B and as values."""
        w = self.world
        return {"world_id": w.world_id, "stratum": w.stratum, "discourse_format": w.discourse_format,
                "axis": w.axis, "axis_variant": w.axis_variant, "entity": w.entity, "attribute": w.attr,
                "values": {"A": w.value_a, "B": w.value_b},
                "initial": {"state": "A", "time": INITIAL_TIME},
                "sources": [asdict(s) for s in self.sources] if self.show_histories else
                [{"name": s.name, "history": None} for s in self.sources],
                "records": [asdict(r) for r in self.records],
                "messages": [{"index": k, **asdict(m), "path": list(m.path)} for k, m in enumerate(self.messages, 1)],
                "background": {"kind": self.background, "time": self.background_time},
                "verified": self.verified}


def _other(name: str) -> str:
    return "O2" if name == "O1" else "O1"


Msg = tuple[str, str, bool, bool]  # (record id, delivering relay, verbatim repeat, added by an axis)


def _paths(w: WorldSpec, records: dict[str, RecordNode], msgs: list[Msg]) -> list[MessageNode]:
    """Message nodes with their relay paths (dependency, chain length and role axes)."""
    out = []
    for rid, relay, repeat, extra in msgs:
        path: list[str] = []
        if w.axis_variant == "self-relay":
            path.append(records[rid].observer)
        elif w.axis_variant == "cross-relay":
            path.append(_other(records[rid].observer) if records[rid].observer in NAMES else "O1")
        if w.axis_variant == "shared-archive":
            path.append("archive desk D")
        elif w.axis_variant == "separate-archives":
            path.append(f"archive desk D{relay[1:]}")
        chain = {"2-relays": 2, "3-relays": 3}.get(w.axis_variant or "", 1)
        path.extend([f"T{relay[1:]}", f"S{relay[1:]}", relay][-chain:])  # the relay R<k> delivers
        out.append(MessageNode(rid, relay, tuple(path), repeat, extra))
    return out


def _finish(w: WorldSpec, sources: list[SourceNode], records: list[RecordNode], a_msgs: list[Msg],
            b_msgs: list[Msg], *, time: dict[str, str], cites: dict[str, list[str]], b_first: bool = False,
            verified: str | None = None) -> EvidenceGraph:
    """Add the source-count and topology structure (module docstring), put the messages in text
    order (B's block first when ``b_first``, then the added ones), apply the path axes.
    ``time``: the event time each state's records describe; ``cites``: the records an added
    message of each state may cite, in turn."""
    records, sources, added = list(records), list(sources), []
    if w.axis == "source-count":
        for st in w.extra_states()[:int(w.axis_variant[0]) - len(sources)]:
            k = len(sources) + 1
            sources.append(SourceNode(f"O{k}", EXTRA_HISTORY))
            records.append(RecordNode(f"e{k}", f"O{k}", st, time[st], extra=True))
            added.append((f"e{k}", EXTRA_RELAYS[len(added)], False, True))
    elif w.axis == "graph-topology":
        for st in w.extra_states():
            pool = cites[st] or cites["A"] + cites["B"]  # no record of that state: cite the others in turn
            turn = sum(1 for m in added if m[0] in pool)
            added.append((pool[turn % len(pool)], EXTRA_RELAYS[len(added)], False, True))
    msgs = (b_msgs + a_msgs if b_first else a_msgs + b_msgs) + added
    by_id = {r.id: r for r in records}
    return EvidenceGraph(w, sorted(sources, key=lambda s: int(s.name[1:])), sorted(records, key=lambda r: r.id),
                         _paths(w, by_id, msgs), verified, w.background)


def factorial_graph(w: WorldSpec, R: str, Q: str, I: str) -> EvidenceGraph:
    """R x Q x I: the trusted initial record says A; two messages report B at 12:00. R sets both
    histories (7/8 or 4/8), Q the identifier, I whether they cite two records or one shared record."""
    k = H if R == "HH" else L
    owner = w.shared_root_owner
    sources = [SourceNode("O1", k), SourceNode("O2", k)]
    if I == "separate":
        records = [RecordNode("e1", "O1", "B", "12:00", quality=Q), RecordNode("e2", "O2", "B", "12:00", quality=Q)]
        msgs = [("e1", "R1", False, False), ("e2", "R2", False, False)]
    else:
        e = "e1" if owner == "O1" else "e2"
        records = [RecordNode(e, owner, "B", "12:00", quality=Q)]
        msgs = [(e, "R1", False, False), (e, "R2", False, False)]
    return _finish(w, sources, records, [], msgs, time={"A": "12:00", "B": "12:00"},
                   cites={"A": [], "B": [r.id for r in records]})


def conflict_graph(w: WorldSpec, hist_a: int, hist_b: int, *, time_b: str = "12:00", time_a: str = "12:00",
                   b_first: bool = False, structure: str | None = None) -> EvidenceGraph:
    """A's and B's reports conflict (swap, order x time, report structure): A's observer
    alternates with the shared-root owner; B's message comes first when ``b_first``. In the
    report-structure block (``structure``, one of STRUCTURE_STEPS) B's second root O3 is on file
    in every step and makes a record only in the separate-roots step."""
    oa = w.shared_root_owner
    ob = _other(oa)
    ea, eb = ("e1", "e2") if oa == "O1" else ("e2", "e1")
    records = [RecordNode(ea, oa, "A", time_a), RecordNode(eb, ob, "B", time_b)]
    sources = [SourceNode(oa, hist_a), SourceNode(ob, hist_b)]
    b_msgs: list[Msg] = [(eb, "R2", False, False)]
    if structure is not None:
        sources.append(SourceNode("O3", hist_b))
    if structure == "repeated":
        b_msgs.append((eb, "R2", True, False))
    elif structure == "two-speakers":
        b_msgs.append((eb, "R3", False, False))
    elif structure == "separate-roots":
        records.append(RecordNode("e3", "O3", "B", time_b))
        b_msgs.append(("e3", "R3", False, False))
    return _finish(w, sources, records, [(ea, "R1", False, False)], b_msgs, b_first=b_first,
                   time={"A": time_a, "B": time_b}, cites={"A": [ea], "B": [eb]})


def order_time_graph(w: WorldSpec, order: str, time: str) -> EvidenceGraph:
    """Competition ``order={order}-first,time={time}``: both sources 7/8; B's report describes
    ``time``:00 and A's the other time (08:00 / 12:00); ``order`` names whose message comes first."""
    return conflict_graph(w, H, H, time_b=f"{time}:00", time_a="08:00" if time == "12" else "12:00",
                          b_first=(order == "B"))


def structure_graph(w: WorldSpec, step: str) -> EvidenceGraph:
    """Competition ``structure={step}``: both sources 7/8, B's report structure one of STRUCTURE_STEPS."""
    return conflict_graph(w, H, H, structure=step)


def verified_graph(w: WorldSpec, state: str) -> EvidenceGraph:
    """The factorial base (HH, clear, separate) plus a trusted 14:00 verification of ``state``."""
    return replace(factorial_graph(w, "HH", "clear", "separate"), verified=state)


def history_graph(w: WorldSpec, config: str) -> EvidenceGraph:
    """The conflict context whose histories are HISTORY_CONFIGS[config] (A's source, B's source)."""
    return conflict_graph(w, *HISTORY_CONFIGS[config])


__all__ = ["WorldSpec", "EvidenceGraph", "SourceNode", "RecordNode", "MessageNode", "build_worlds",
           "factorial_graph", "conflict_graph", "verified_graph", "history_graph", "order_time_graph",
           "structure_graph", "check_world_seed"]

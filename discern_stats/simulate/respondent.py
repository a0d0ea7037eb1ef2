"""The synthetic respondent: a SIMULATOR, not an LLM (SPEC "Validation by simulation").

`SyntheticChatModel` is a LangChain ``BaseChatModel`` that answers like a respondent with
known cue weights (profiles in ``discern_stats/data/profiles.yaml``):

- Design B: it reads the request's structured facts (its evidence graph, looked up by the
  request's text in ``cue_facts``, which the collector loads from the plan) rather than
  parsing English; `designs.cue_fidelity` guards that the text carries the same facts.
  P4 choices: logit P(choose B) = intercept + sum_k w_k x_k + u_world, with the cues x_k
  perceived from the graph (`cue_codes_from_facts`, equal to `core.coding.cue_codes` of the
  condition labels), u_world ~ N(0, world_sd) fixed per world, plus the profile's additive
  weight shifts under interventions C1..C4.
- Design B identification probes: correct with the profile's accuracy, else a wrong option.
- Design A: its "knowledge" is the item bank (question -> truth) and the source table
  (domain -> reliability, popularity), as an LLM's parametric knowledge would be. Prior:
  exact with prob ``prior_exact``, else T * exp(N(0, prior_sd)). Posterior: one of the responses
  none / partial / full / away (`core.vocab.RESPONSES`), drawn in sequence by the profile's
  logits (move, then away, then full), a partial move's fraction logit-normal (profiles.yaml).
  It answers each strategy's format (`designs.l2d`): Reliability posteriors as
  {"reliability", "justification", "answer"}; Defense posteriors as a line checking the prior
  answer, then the JSON object on the last line.

Answers are deterministic given (profile seed, prompt text, repeat), so a rerun of a plan
reproduces the same data. A configurable share of answers is invalid on purpose.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
import yaml
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

from ..core.coding import CUES
from ..designs.cue import P2_LETTERS, SYSTEM_INT, SYSTEM_MC, p3c_letter
from ..core.errors import SpecError

SIMULATOR_NOTE = "SIMULATOR (synthetic respondent with known weights; not a real LLM)"


@lru_cache(maxsize=1)
def _builtin_profiles() -> dict[str, Any]:
    with resources.files("discern_stats.data").joinpath("profiles.yaml").open() as f:
        return yaml.safe_load(f)


def load_profiles(path: str | None = None) -> dict[str, Any]:
    """Built-in profiles, updated with those in ``path`` (YAML of the same shape)."""
    profiles = dict(_builtin_profiles())
    if path:
        with open(path) as f:
            profiles.update(yaml.safe_load(f) or {})
    return profiles


def get_profile(name: str, path: str | None = None) -> dict[str, Any]:
    profiles = load_profiles(path)
    if name not in profiles:
        raise SpecError(f"unknown synthetic profile {name!r}; known: {', '.join(sorted(profiles))}")
    return profiles[name]


def true_cue_weights(profile: dict[str, Any], intervention: str = "C0") -> dict[str, float]:
    """The profile's true logit weights under an intervention (C0 = base)."""
    w = {k: float(profile["cue"]["weights"].get(k, 0.0)) for k in CUES}
    for k, v in (profile["cue"].get("interventions", {}).get(intervention, {}) or {}).items():
        w[k] += float(v)
    return w


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest(), "little")


# ---------------------------------------------------------------- reading Design B facts
def text_key(text: str) -> str:
    """The lookup key of a request's user text (`cue_facts`)."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def current_messages(facts: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(records by id, the messages that carry the condition's cues): the structure a structural
    axis adds is the same in every arm and is left out (messages flagged ``extra``; in facts planned
    before that flag, the added records describe the trusted initial record's time)."""
    recs = {r["id"]: r for r in facts["records"]}
    return recs, [m for m in facts["messages"] if not m.get("extra")
                  and recs[m["record"]]["event_time"] != facts["initial"]["time"]]


def cue_codes_from_facts(facts: dict[str, Any]) -> dict[str, float]:
    """Cue codes perceived from a request's evidence graph (`EvidenceGraph.facts`); equal to
    `core.coding.cue_codes` of the request's condition labels (tested).

    Only the current messages count (`current_messages`); a verbatim repeat is a second line of the
    same speaker.
    """
    x = dict.fromkeys(CUES, 0.0)
    if facts["verified"] is not None:
        x["verified"] = 0.5 if facts["verified"] == "B" else -0.5
        return x
    recs, current = current_messages(facts)
    hist = {s["name"]: s["history"] for s in facts["sources"]}
    a_msgs = [m for m in current if recs[m["record"]]["state"] == "A"]
    b_msgs = [m for m in current if recs[m["record"]]["state"] == "B"]
    if not a_msgs:  # factorial: all current reports support B against the trusted initial A
        k = np.mean([hist[recs[m["record"]]["observer"]] for m in b_msgs])
        x["R"] = 0.5 if k >= 5.5 else -0.5
        x["Q"] = -0.5 if any(recs[m["record"]]["quality"] == "limited" for m in b_msgs) else 0.5
        x["I"] = 0.5 if len({m["record"] for m in b_msgs}) > 1 else -0.5
        return x
    ra, rb = recs[a_msgs[0]["record"]], recs[b_msgs[0]["record"]]
    ha, hb = hist[ra["observer"]], hist[rb["observer"]]
    if ra["event_time"] != rb["event_time"]:  # order x time block
        x["time"] = 0.5 if rb["event_time"] > ra["event_time"] else -0.5
        x["order"] = 0.5 if recs[current[0]["record"]]["state"] == "B" else -0.5
    elif ha != hb:  # swap block
        x["history"] = 0.5 if hb > ha else -0.5
    else:  # report-structure block
        x["repetition"] = 0.5 if len(b_msgs) >= 2 else -0.5
        x["speaker"] = 0.5 if len({m["relay"] for m in b_msgs}) >= 2 else -0.5
        x["lineage"] = 0.5 if len({m["record"] for m in b_msgs}) >= 2 else -0.5
    return x


def identification_gold(facts: dict[str, Any], probe: str, letters: dict[str, str]) -> tuple[str, list[str]]:
    """(the right letter, the letters offered) of a P1, P2 or P3c question, read from its facts:
    P1 the trusted initial record's state (``letters``: option letter -> state); P2 whether the
    current messages cite separate records and whether any cited record is limited
    (`designs.cue.P2_LETTERS`); P3c which of O1 and O2 has the higher history (`designs.cue.p3c_letter`)."""
    if probe == "P1":
        return next(k for k, v in letters.items() if v == facts["initial"]["state"]), list(letters)
    if probe == "P2":
        recs, current = current_messages(facts)
        cited = {m["record"] for m in current}
        quality = "limited" if any(recs[r]["quality"] == "limited" for r in cited) else "clear"
        return P2_LETTERS["separate" if len(cited) > 1 else "shared", quality], list("ABCD")
    hist = {s["name"]: s["history"] for s in facts["sources"]}
    return p3c_letter(hist["O1"], hist["O2"]), list("ABCD")


class SyntheticChatModel(BaseChatModel):
    """LangChain chat model that simulates a respondent with known weights (a SIMULATOR)."""

    profile_name: str = "source-sensitive"
    respondent_profile: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    knowledge: dict[str, float] = Field(default_factory=dict)  # question -> truth
    source_knowledge: dict[str, tuple[float, float]] = Field(default_factory=dict)  # domain -> (R, P)
    # Design B: text_key(user text) -> {"facts": EvidenceGraph.facts(), "probe", "intervention", "options"}
    # (or that entry as JSON text, parsed on first use)
    cue_facts: dict[str, Any] = Field(default_factory=dict)
    invalid_rate: float | None = None
    latency_ms: float | None = None
    model_config = ConfigDict(arbitrary_types_allowed=True)

    def model_post_init(self, __context: Any) -> None:
        if not self.respondent_profile:
            self.respondent_profile = get_profile(self.profile_name)
        if not self.knowledge or not self.source_knowledge:
            from ..designs.l2d import demo_items, demo_sources
            if not self.knowledge:
                self.knowledge = {q: float(t) for q, t in zip(demo_items().question, demo_items().truth)}
            if not self.source_knowledge:
                ds_ = demo_sources()
                self.source_knowledge = {d: (float(r), float(p)) for d, r, p in
                                         zip(ds_.domain, ds_.reliability, ds_.popularity)}

    @property
    def _llm_type(self) -> str:
        return "synthetic-respondent"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"profile": self.profile_name, "seed": self.seed, "simulator": True}

    # -- answering
    def respond(self, messages: list[BaseMessage]) -> str:
        texts = [(m.type, m.content if isinstance(m.content, str) else json.dumps(m.content)) for m in messages]
        human = [t for r, t in texts if r == "human"]
        last = human[-1] if human else ""
        key = _seed(self.profile_name, self.seed, *[t for _, t in texts])
        rng = np.random.default_rng(key)
        inv = self.respondent_profile.get("invalid_rate", 0.0) if self.invalid_rate is None else self.invalid_rate
        if rng.random() < inv:
            return rng.choice(["I am not sure which option the case supports.", '{"answer": "maybe"}',
                               "Answer: probably the first one"])
        system = next((t for r, t in texts if r == "system"), "")
        if system in (SYSTEM_MC, SYSTEM_INT):
            return self._respond_cue(last, system, rng)
        return self._respond_l2d(texts, rng)

    def _respond_cue(self, text: str, system: str, rng: np.random.Generator) -> str:
        """A Design B answer from the request's structured facts (`cue_facts`, looked up by its text).
        A request it has no facts for (a server without the plan) gets a uniformly random valid answer."""
        entry = self._cue_entry(text)
        if entry is None:
            return str(int(rng.integers(0, 9))) if system == SYSTEM_INT else json.dumps({"answer": str(rng.choice(["A", "B"]))})
        probe = entry["probe"]
        if probe in ("P3a", "P3b"):
            return self._count_answer(entry["facts"], probe, rng)
        if probe == "P4":
            return self._choice(entry, rng)
        gold, options = identification_gold(entry["facts"], probe, entry["options"])
        if rng.random() < self.respondent_profile["cue"]["accuracy"][probe]:
            return json.dumps({"answer": gold})
        return json.dumps({"answer": str(rng.choice([k for k in options if k != gold]))})

    def _cue_entry(self, text: str) -> dict[str, Any] | None:
        """The plan's entry for a request's user text (parsed from JSON on first use), or None."""
        entry = self.cue_facts.get(text_key(text))
        if isinstance(entry, str):
            entry = self.cue_facts[text_key(text)] = json.loads(entry)
        return entry

    def _count_answer(self, facts: dict[str, Any], probe: str, rng: np.random.Generator) -> str:
        """P3a / P3b: O1's / O2's verified history, right with the profile's ``P3ab`` accuracy, else
        another count from 0 to 8."""
        truth = {s["name"]: s["history"] for s in facts["sources"]}["O1" if probe == "P3a" else "O2"]
        if rng.random() < self.respondent_profile["cue"]["accuracy"]["P3ab"]:
            return str(truth)
        return str(int(rng.choice([k for k in range(9) if k != truth])))

    def _choice(self, entry: dict[str, Any], rng: np.random.Generator) -> str:
        """P4: logit P(choose B) = intercept + sum_k w_k x_k + u_world (module docstring)."""
        f, c = entry["facts"], self.respondent_profile["cue"]
        w = true_cue_weights(self.respondent_profile, entry["intervention"])
        x = cue_codes_from_facts(f)
        u = np.random.default_rng(_seed("world", self.profile_name, self.seed, f["world_id"])).normal(0, c["world_sd"])
        p_b = _logistic(c["intercept"] + sum(w[k] * x[k] for k in x) + u)
        state = "B" if rng.random() < p_b else "A"
        return json.dumps({"answer": next(k for k, v in entry["options"].items() if v == state)})

    def _respond_l2d(self, texts: list[tuple[str, str]], rng: np.random.Generator) -> str:
        from ..core.answers import format_number
        cfg = self.respondent_profile["l2d"]
        human = [t for r, t in texts if r == "human"]
        system = next((t for r, t in texts if r == "system"), "")
        qm = re.search(r"Question: (.+?)\n", human[0] + "\n")
        question = qm.group(1) if qm else human[0]
        truth = self.knowledge.get(question)
        if truth is None:
            truth = float(np.random.default_rng(_seed("unknown", question)).integers(1, 1000))
        if len(human) == 1:
            qrng = np.random.default_rng(_seed("prior", self.profile_name, self.seed, question, system))
            prior = truth if qrng.random() < cfg["prior_exact"] else truth * math.exp(qrng.normal(0, cfg["prior_sd"]))
            return json.dumps({"answer": float(format_number(float(f"{prior:.4g}")))})
        prior_text = next((t for r, t in reversed(texts) if r == "ai"), "")
        try:
            p1 = float(json.loads(prior_text.strip().splitlines()[-1])["answer"])
        except Exception:
            p1 = truth
        m = re.search(r"^(.+?) says the answer is ([-+0-9.eE]+)\. What do you think now\?", human[-1])
        if not m:
            return json.dumps({"answer": p1})
        src, claim = m.group(1), float(m.group(2))
        rel, pop = self.source_knowledge.get(src, (0.5, 0.5))
        denom = abs(p1 - truth) + abs(claim - truth)
        imp = 0.0 if denom == 0 else (abs(p1 - truth) - abs(claim - truth)) / denom
        frac = self._l2d_fraction(cfg, question, system, rel, pop, imp, rng) if claim != p1 else 0.0
        # no move and full adoption repeat the prior or the claim as given; other moves keep 6 digits
        p2 = p1 if frac == 0.0 else claim if frac == 1.0 else float(f"{p1 + frac * (claim - p1):.6g}")
        out: dict[str, Any] = {"answer": float(format_number(p2))}
        if "rate how reliable" in human[-1]:  # Reliability: the rating and its justification before the answer
            rating = round(float(np.clip(rel + rng.normal(0, cfg.get("rating_sd", 0.2)), 0, 1)), 3)
            word = "a reliable" if rating >= 0.5 else "an unreliable"
            out = {"reliability": rating, "justification": f"{src} reads as {word} news source to me.", **out}
        if "check explicitly whether your previous answer is correct" in human[-1]:  # Defense: the check first
            verdict = "I keep it" if frac == 0.0 else "I revise it"
            return (f"Check: my previous answer was {format_number(p1)}; {src} says {format_number(claim)}. "
                    f"{verdict}.\n" + json.dumps(out))
        return json.dumps(out)

    def _l2d_fraction(self, cfg: dict[str, Any], question: str, system: str, rel: float, pop: float, imp: float,
                      rng: np.random.Generator) -> float:
        """The fraction f of the way to the claim this respondent moves (0: none, 1: full adoption,
        < 0 or > 1: away), by the profile's sequence of parts (profiles.yaml)."""
        for part in ("move", "away", "full", "fraction"):
            if part not in cfg:
                raise SpecError(f"synthetic profile {self.profile_name!r}: l2d needs move, away, full and fraction "
                                f"(each with intercept, reliability, popularity, improvement); {part!r} is missing")
        item = np.random.default_rng(_seed("item", self.profile_name, self.seed, question, system)).normal(
            0.0, cfg.get("item_sd", 0.0), 4)

        def eta(i: int, part: str) -> float:
            c = cfg[part]
            return c["intercept"] + c["reliability"] * rel + c["popularity"] * pop + c["improvement"] * imp + item[i]

        if rng.random() >= _logistic(eta(0, "move")):
            return 0.0
        if rng.random() < _logistic(eta(1, "away")):  # half past the claim, half away from it
            return 1.0 + abs(rng.normal(0, 0.5)) if rng.random() < 0.5 else -abs(rng.normal(0, 0.3))
        if rng.random() < _logistic(eta(2, "full")):
            return 1.0
        return _logistic(eta(3, "fraction") + rng.normal(0.0, cfg["fraction"]["sd"]))

    # -- LangChain plumbing
    def _result(self, messages: list[BaseMessage]) -> ChatResult:
        text = self.respond(messages)
        n_in = sum(len(str(m.content).split()) for m in messages)
        msg = AIMessage(content=text, usage_metadata={"input_tokens": n_in, "output_tokens": len(text.split()),
                                                      "total_tokens": n_in + len(text.split())},
                        response_metadata={"model_name": f"synthetic:{self.profile_name}", "simulator": True})
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        lat = self.respondent_profile.get("latency_ms", 0) if self.latency_ms is None else self.latency_ms
        if lat:
            time.sleep(lat / 1000)
        return self._result(messages)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        lat = self.respondent_profile.get("latency_ms", 0) if self.latency_ms is None else self.latency_ms
        if lat:
            await asyncio.sleep(lat / 1000)
        return self._result(messages)

"""Design A: Learn2Discern information discernment (seed 000).

Stage 1 asks the question alone (prior P1). Stage 2, in the same conversation, says
"<source> says the answer is <C>. What do you think now?" (posterior P2), with claim
C = T x F for F in {1/3, 1/2, 1, 2, 3}. One prior per (LLM, item, strategy) is reused for all
of its (source, factor) posteriors. Sources are stratified 3 popularity tiers (tertiles) x
2 reliability tiers (median split) and drawn evenly across the 6 strata.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from importlib import resources
from typing import Any

import pandas as pd

from ..core.vocab import FACTORS, STRATEGIES
from ..core.errors import InputError
from ..core.keys import l2d_posterior_key, l2d_prior_key


_JSON = 'Return only a JSON object {"answer": <number>} with a plain number.'
SYSTEM_PROMPTS = {
    "zero-shot": "You answer numeric questions. " + _JSON,
    "CoT": ("You answer numeric questions. Think step by step first, then end with a JSON object "
            '{"answer": <number>} on the last line.'),
    "Reliability": ("You answer numeric questions. When someone reports an answer, first rate how reliable their "
                    "source is from 0 (not at all) to 1 (fully reliable), then answer. Return only a JSON object "
                    '{"reliability": <0..1>, "answer": <number>} after new information, and {"answer": <number>} otherwise.'),
    "Bayesian": ("You answer numeric questions like a Bayesian reasoner: treat your first answer as a prior, weigh new "
                 "information by how reliable its source is, and update in proportion. " + _JSON),
    "Defense": ("You answer numeric questions. Some sources may be unreliable or may try to mislead you; change your "
                "answer only when the evidence warrants it. " + _JSON),
}
# what the prompts above ask for (collect.parsing's strict parse reads it from here): CoT answers end
# with the JSON object on the last line; Reliability posteriors carry the rating beside the answer
JSON_LAST_LINE_STRATEGIES = frozenset({"CoT"})
RATING_STRATEGY = "Reliability"
PRIOR_TEMPLATE = "Question: {question}\nGive your best numeric answer."
POSTERIOR_TEMPLATE = "{source} says the answer is {claim}. What do you think now?"
RELIABILITY_SUFFIX = " First rate how reliable {source} is from 0 to 1, then give your answer."


def format_number(x: float) -> str:
    """Plain decimal text with up to 10 significant digits (no exponent)."""
    s = format(x, ".10g")
    if "e" in s or "E" in s:
        s = format(x, ".10f").rstrip("0").rstrip(".")
    return s


def prior_messages(question: str, strategy: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPTS[strategy]},
            {"role": "user", "content": PRIOR_TEMPLATE.format(question=question)}]


def posterior_turn(source: str, claim_text: str, strategy: str) -> list[dict[str, str]]:
    text = POSTERIOR_TEMPLATE.format(source=source, claim=claim_text)
    if strategy == "Reliability":
        text += RELIABILITY_SUFFIX.format(source=source)
    return [{"role": "user", "content": text}]


def demo_items() -> pd.DataFrame:
    with resources.files("discern_stats.data").joinpath("demo_items.csv").open() as f:
        return pd.read_csv(f)


def demo_sources() -> pd.DataFrame:
    """24 fictional domains (``*.example``) with made-up reliability and popularity, 4 per stratum."""
    with resources.files("discern_stats.data").joinpath("demo_sources.csv").open() as f:
        return pd.read_csv(f)


def stratify_sources(sources: pd.DataFrame) -> pd.DataFrame:
    """Add ``pop_tier`` (tertiles: low/mid/high) and ``rel_tier`` (median split: low/high)."""
    s = sources.dropna(subset=["popularity"]).copy()
    if len(s) < 6:
        raise InputError("stratified sampling needs at least 6 sources with a popularity value; import a source "
                         "table with a 'popularity' column (e.g. Open PageRank) or use the demo sources", column="popularity")
    s["pop_tier"] = pd.qcut(s["popularity"].rank(method="first"), 3, labels=["low", "mid", "high"]).astype(str)
    s["rel_tier"] = pd.qcut(s["reliability"].rank(method="first"), 2, labels=["low", "high"]).astype(str)
    return s


def sample_sources(sources: pd.DataFrame, per_stratum: int, rng: random.Random) -> list[str]:
    """Draw ``per_stratum`` sources from each of the 6 strata (without replacement within a stratum)."""
    s = stratify_sources(sources)
    out = []
    for pt in ("low", "mid", "high"):
        for rt in ("low", "high"):
            pool = sorted(s.loc[(s.pop_tier == pt) & (s.rel_tier == rt), "domain"])
            if len(pool) < per_stratum:
                raise InputError(f"stratum popularity={pt}, reliability={rt} has {len(pool)} source(s); "
                                 f"{per_stratum} needed")
            out.extend(rng.sample(pool, per_stratum))
    return out


def check_strategies(strategies: tuple[str, ...]) -> None:
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad:
        raise InputError(f"unknown strategy {bad[0]!r}; expected one of {', '.join(STRATEGIES)}")
    if not strategies:
        raise InputError(f"no strategy given; choose some of {', '.join(STRATEGIES)}")


@dataclass
class L2DPlan:
    requests: list[dict[str, Any]]
    n_items: int
    n_sources_per_item: int


def build_requests(items: pd.DataFrame, sources: pd.DataFrame, *, seed: int = 0, per_stratum: int = 1,
                   strategies: tuple[str, ...] = STRATEGIES, factors: tuple[float, ...] = FACTORS) -> L2DPlan:
    """Planned requests: a prior per (item, strategy) and a posterior per (item, strategy, source, factor).

    Each item gets its own stratified source draw (6 x ``per_stratum`` sources), shared by all strategies.
    """
    from ..store.db import dumps
    check_strategies(strategies)
    rng = random.Random(seed)
    reqs: list[dict[str, Any]] = []
    items = items.sort_values("item_id")
    for it in items.itertuples():
        chosen = sample_sources(sources, per_stratum, rng)
        for strat in strategies:
            pk = l2d_prior_key(it.item_id, strat)
            reqs.append({"key": pk, "design": "l2d", "item_id": it.item_id, "strategy": strat, "stage": "prior",
                         "answer_format": "number", "seed": seed,
                         "messages_json": dumps(prior_messages(it.question, strat))})
            for src in chosen:
                for f in factors:
                    claim_text = format_number(float(it.truth) * f)
                    reqs.append({"key": l2d_posterior_key(it.item_id, strat, src, float(f)), "design": "l2d",
                                 "item_id": it.item_id, "strategy": strat, "stage": "posterior", "parent_key": pk,
                                 "source": src, "factor": float(f), "claim": float(claim_text),
                                 "answer_format": "number", "seed": seed,
                                 "messages_json": dumps(posterior_turn(src, claim_text, strat))})
    return L2DPlan(reqs, len(items), 6 * per_stratum)

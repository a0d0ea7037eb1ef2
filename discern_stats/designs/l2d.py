"""Design A: Learn2Discern information discernment (seed 000).

Stage 1 asks the question alone (prior P1). Stage 2, in the same conversation, says
"<source> says the answer is <C>. What do you think now?" (posterior P2), with claim
C = T x F for F in {1/3, 1/2, 1, 2, 3}, written at the precision of the item's stated answer
(`core.answers.claim_text`: its significant figures, never more decimals than T), so a claim's
form does not reveal its factor. One prior per (LLM, item, strategy) is reused for all of its
(source, factor) posteriors. Sources are stratified 3 popularity tiers (tertiles) x 2
reliability tiers (median split) and drawn evenly across the 6 strata.

Strategies (seed 000, section 3): zero-shot; CoT (reason step by step before the posterior);
Reliability (rate the source 0-1 *and* justify the rating before the posterior); Bayesian
(update like a Bayesian, much for a reliable source, little for an unreliable one); Defense
(check explicitly whether the prior answer is correct before updating).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from importlib import resources
from typing import Any

import pandas as pd

from ..core.answers import claim_text
from ..core.vocab import FACTORS, STRATEGIES, source_tiers, stratum_label
from ..core.errors import InputError
from ..core.vocab import JSON_LAST_LINE_STRATEGIES, RATING_STRATEGY  # noqa: F401  (what the prompts ask for)
from ..core.keys import l2d_posterior_key, l2d_prior_key


_JSON = 'Return only a JSON object {"answer": <number>} with a plain number.'
SYSTEM_PROMPTS = {
    "zero-shot": "You answer numeric questions. " + _JSON,
    "CoT": ("You answer numeric questions. Think step by step first, then end with a JSON object "
            '{"answer": <number>} on the last line.'),
    "Reliability": ("You answer numeric questions. When someone reports an answer, first rate how reliable their "
                    "source is from 0 (not at all reliable) to 1 (fully reliable) and justify the rating in one or two "
                    "sentences, then give your answer. After new information return only a JSON object "
                    '{"reliability": <0..1>, "justification": "<why>", "answer": <number>}, with the rating and its '
                    'justification before the answer; otherwise return only {"answer": <number>}.'),
    "Bayesian": ("You answer numeric questions like a Bayesian reasoner: treat your first answer as a prior and weigh "
                 "new information by how reliable its source is, updating a lot toward a highly reliable source and "
                 "little toward an unreliable one. " + _JSON),
    "Defense": ("You answer numeric questions. Some sources may be unreliable or may try to mislead you. When someone "
                "reports an answer, first check explicitly whether your previous answer is correct, then change it "
                "only if that check shows it is wrong. Write the check first, then end with a JSON object "
                '{"answer": <number>} on the last line.'),
}
PRIOR_TEMPLATE = "Question: {question}\nGive your best numeric answer."
POSTERIOR_TEMPLATE = "{source} says the answer is {claim}. What do you think now?"
STRATEGY_SUFFIX = {
    "Reliability": " First rate how reliable {source} is from 0 to 1 and justify your rating, then give your answer.",
    "Defense": " Before you update, check explicitly whether your previous answer is correct.",
}


def prior_messages(question: str, strategy: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPTS[strategy]},
            {"role": "user", "content": PRIOR_TEMPLATE.format(question=question)}]


def posterior_turn(source: str, claim: str, strategy: str) -> list[dict[str, str]]:
    text = POSTERIOR_TEMPLATE.format(source=source, claim=claim) + STRATEGY_SUFFIX.get(strategy, "").format(
        source=source)
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
    s["pop_tier"], s["rel_tier"] = source_tiers(s["popularity"], s["reliability"])
    return s


def lin2023_sources() -> pd.DataFrame:
    """Lin et al. (2023) PC1 news-domain quality ratings, 11,520 domains (``domain``, ``pc1`` in
    [0, 1]); provenance and licence in ``discern_stats/data/README.md``. Cite: Lin, H., Lasser, J.,
    Lewandowsky, S., Cole, R., Gully, A., Rand, D. G., & Pennycook, G. (2023). High level of
    correspondence across different news domain quality rating sets. PNAS Nexus 2(9), pgad286."""
    with resources.files("discern_stats.data").joinpath("lin2023_domain_pc1.csv").open() as f:
        return pd.read_csv(f)


def source_pool(sources: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """A fixed pool of ``n`` sources, n/6 from each popularity tertile x reliability half (seed 000:
    132 domains, 22 per stratum), drawn by ``seed``; strata are those of the whole table."""
    s = stratify_sources(sources)
    rng = random.Random(seed)
    keep = []
    for pt in ("low", "mid", "high"):
        for rt in ("low", "high"):
            cell = sorted(s.loc[(s.pop_tier == pt) & (s.rel_tier == rt), "domain"])
            if len(cell) < n // 6:
                raise InputError(f"--source-pool {n}: stratum popularity={pt}, reliability={rt} has {len(cell)} "
                                 f"source(s); {n // 6} needed")
            keep.extend(rng.sample(cell, n // 6))
    return sources[sources.domain.isin(keep)]


def table_strata(sources: pd.DataFrame) -> dict[str, str]:
    """domain -> its stratum label (`core.vocab.stratum_label`) among the 6 of the whole table
    ``sources``: the fixed thresholds that `source_pool` draws within."""
    s = stratify_sources(sources)
    return {d: stratum_label(p, r) for d, p, r in zip(s.domain, s.pop_tier, s.rel_tier)}


def sample_sources(sources: pd.DataFrame, per_stratum: int, rng: random.Random,
                   strata: dict[str, str] | None = None) -> list[str]:
    """Draw ``per_stratum`` sources from each of the 6 strata (without replacement within a stratum):
    the strata of ``sources`` themselves, or the given ``strata`` (domain -> label, e.g. the whole
    table's `table_strata` for a `source_pool`)."""
    s = stratify_sources(sources)
    if strata is not None:
        lab = s.domain.map(strata)
        s = s.assign(pop_tier=lab.str.split("/").str[0], rel_tier=lab.str.split("/").str[1])
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


def item_precision(items: pd.DataFrame) -> dict[str, tuple[int | None, float | None]]:
    """item_id -> (significant figures its answer is stated at, the unrounded value behind it), from
    columns or ``tags_json`` keys ``sig_figs`` and ``truth_exact`` (None where absent;
    `core.answers.claim_text` then uses T as written)."""
    import json
    out: dict[str, tuple[int | None, float | None]] = {}
    for r in items.to_dict("records"):
        tags = json.loads(r.get("tags_json") or "{}") if isinstance(r.get("tags_json"), str) else {}
        vals = []
        for key, cast in (("sig_figs", int), ("truth_exact", float)):
            v = r.get(key)
            if v is None or v != v:
                v = tags.get(key)
            vals.append(cast(v) if v is not None and v == v else None)
        out[r["item_id"]] = (vals[0], vals[1])
    return out


@dataclass
class L2DPlan:
    requests: list[dict[str, Any]]
    n_items: int
    n_sources_per_item: int


def build_requests(items: pd.DataFrame, sources: pd.DataFrame, *, seed: int = 0, per_stratum: int = 1,
                   strategies: tuple[str, ...] = STRATEGIES, factors: tuple[float, ...] = FACTORS,
                   fixed_strata: dict[str, str] | None = None) -> L2DPlan:
    """Planned requests: a prior per (item, strategy) and a posterior per (item, strategy, source, factor).

    Each item gets its own stratified source draw (6 x ``per_stratum`` sources), shared by all strategies.
    ``fixed_strata`` (domain -> label): ``sources`` is a pool drawn within these strata, cut at the
    thresholds of a larger table (`source_pool`, `table_strata`); the items draw within them and each
    posterior records its source's stratum (``source_stratum``), from which the crossed intervals
    take every source term within the strata (`stats.l2d.l2d_metrics`).
    """
    from ..store.db import dumps
    check_strategies(strategies)
    rng = random.Random(seed)
    reqs: list[dict[str, Any]] = []
    items = items.sort_values("item_id")
    prec = item_precision(items)
    for it in items.itertuples():
        chosen = sample_sources(sources, per_stratum, rng, fixed_strata)
        for strat in strategies:
            pk = l2d_prior_key(it.item_id, strat)
            reqs.append({"key": pk, "design": "l2d", "item_id": it.item_id, "strategy": strat, "stage": "prior",
                         "answer_format": "number", "seed": seed,
                         "messages_json": dumps(prior_messages(it.question, strat))})
            for src in chosen:
                for f in factors:
                    text = claim_text(float(it.truth), f, *prec[it.item_id])
                    reqs.append({"key": l2d_posterior_key(it.item_id, strat, src, float(f)), "design": "l2d",
                                 "item_id": it.item_id, "strategy": strat, "stage": "posterior", "parent_key": pk,
                                 "source": src, "factor": float(f), "claim": float(text),
                                 "answer_format": "number", "seed": seed,
                                 "source_stratum": fixed_strata[src] if fixed_strata is not None else None,
                                 "messages_json": dumps(posterior_turn(src, text, strat))})
    return L2DPlan(reqs, len(items), 6 * per_stratum)

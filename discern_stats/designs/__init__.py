"""Stimulus designs: build stimuli and planned requests and write them to the trial database."""

from __future__ import annotations

from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..db import Item, Request, Source, World, dumps, insert_ignore
from ..errors import InputError
from ..core.keys import cue_request_key
from . import cue, l2d
from ..core.vocab import FACTORS, INTERVENTIONS, STRATEGIES
from .cue import build_worlds, check_world_seed, world_requests


def design_l2d(engine: Engine, *, seed: int = 0, per_stratum: int = 1, strategies: tuple[str, ...] = STRATEGIES,
               items: list[str] | None = None, use_demo: bool | None = None, factors: tuple[float, ...] = FACTORS) -> dict[str, int]:
    """Plan Design A: priors and posteriors for every item in the database (or the demo bank).

    With ``use_demo`` (default: when the database has no items or no sources) the built-in
    demo bank and the fictional demo sources are imported first.
    """
    with engine.connect() as conn:
        n_items = conn.execute(sa.select(sa.func.count()).select_from(Item)).scalar()
        n_src = conn.execute(sa.select(sa.func.count()).select_from(Source).where(Source.popularity.is_not(None))).scalar()
    if use_demo or (use_demo is None and (n_items == 0 or n_src < 6)):
        from ..interchange import upsert_items, upsert_sources
        di = l2d.demo_items()
        upsert_items(engine, [{"item_id": r.item_id, "question": r.question, "truth": float(r.truth),
                               "tags_json": dumps({"topic": r.topic, "era": r.era, "oecd": r.oecd})}
                              for r in di.itertuples()])
        upsert_sources(engine, [{"domain": r.domain, "reliability": float(r.reliability),
                                 "popularity": float(r.popularity), "pc1": None, "fictional": True}
                                for r in l2d.demo_sources().itertuples()])
    with engine.connect() as conn:
        it = pd.DataFrame(conn.execute(sa.select(Item.item_id, Item.question, Item.truth)).mappings().all())
        src = pd.DataFrame(conn.execute(sa.select(Source.domain, Source.reliability, Source.popularity,
                                                  Source.fictional)).mappings().all())
    if items:
        missing = sorted(set(items) - set(it.item_id))
        if missing:
            raise InputError(f"unknown item_id(s): {', '.join(missing[:5])}")
        it = it[it.item_id.isin(items)]
    if use_demo:
        src = src[src.fictional]
        it = it[it.item_id.str.startswith("demo-")]
    plan = l2d.build_requests(it, src, seed=seed, per_stratum=per_stratum, strategies=strategies, factors=factors)
    with engine.begin() as conn:
        n = insert_ignore(conn, Request, plan.requests, ["key"])
    return {"items": plan.n_items, "sources_per_item": plan.n_sources_per_item, "planned": len(plan.requests), "new": n}


def design_cue(engine: Engine, *, seed: int = 0, n_worlds: int | None = None,
               interventions: list[str] | None = None) -> dict[str, Any]:
    """Plan Design B: the world bank and its requests (48 per world under C0, plus 20
    decision requests per world for each further intervention)."""
    interventions = interventions or ["C0"]
    bad = [i for i in interventions if i not in INTERVENTIONS]
    if bad:
        raise InputError(f"unknown intervention {bad[0]!r}; expected some of {', '.join(INTERVENTIONS)}")
    worlds = build_worlds(check_world_seed(seed), n_worlds)
    rows = []
    for w in worlds:
        for r in world_requests(w, interventions):
            rows.append({"key": cue_request_key(r.world_id, r.intervention, r.track, r.probe, r.condition),
                         "design": "cue", "world_id": r.world_id, "intervention": r.intervention,
                         "stratum": r.stratum, "track": r.track, "probe": r.probe, "condition": r.condition,
                         "gold": r.gold, "options_json": dumps(r.options), "answer_format": r.answer_format,
                         "messages_json": dumps(r.messages()), "facts_json": dumps(r.facts), "seed": seed})
    with engine.begin() as conn:
        insert_ignore(conn, World, [w.to_row() for w in worlds], ["world_id"])
        n = insert_ignore(conn, Request, rows, ["key"])
    return {"worlds": len(worlds), "planned": len(rows), "new": n}


__all__ = ["design_l2d", "design_cue", "build_worlds", "world_requests", "cue", "l2d", "INTERVENTIONS", "STRATEGIES"]

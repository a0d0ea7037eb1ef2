"""Stimulus designs: build stimuli and planned requests and write them to the trial database."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..store.db import Item, Request, Source, World, dumps, insert_ignore
from ..core.errors import InputError
from ..core.keys import cue_request_key
from . import cue, item_bank, l2d
from ..core.vocab import FACTORS, INTERVENTIONS, STRATEGIES
from .cue import build_worlds, check_world_seed, world_requests


ITEM_BANKS = ("gapminder", "demo")


def _bank_rows(bank: str) -> list[dict[str, Any]]:
    if bank == "gapminder":
        df, tags = item_bank.gapminder_items(), ["topic", "era", "oecd", "oecd_then", "country", "year", "continent",
                                                "sig_figs", "truth_exact", "correct_rule", "scale", "data_source"]
    elif bank == "demo":
        df, tags = l2d.demo_items(), ["topic", "era", "oecd"]
    else:
        raise InputError(f"unknown item bank {bank!r}; expected one of {', '.join(ITEM_BANKS)}")
    return [{"item_id": r["item_id"], "question": r["question"], "truth": float(r["truth"]),
             "tags_json": dumps({t: r[t] for t in tags})} for r in df.to_dict("records")]


FICTIONAL_NOTE = ("FICTIONAL sources: 24 invented demo domains (*.example) with made-up reliability and popularity; "
                  "a model cannot know them, so SD, ρ(Δ, popularity) and perception vs execution measure nothing "
                  "about real reputations")
IMPORT_HINT = ("import real ones with `discern-stats import sources --lin2023` (Lin et al. 2023 PC1 reliability, "
               "shipped) and `discern-stats import popularity <Open PageRank or Tranco CSV>`, or pass "
               "--fictional-sources to plan with the 24 invented demo domains")


def source_provenance(sources: pd.DataFrame) -> str:
    """One line saying where a plan's sources come from (printed by the CLI, shown by the report)."""
    if len(sources) == 0:
        return "no sources"
    if sources["fictional"].astype(bool).all():
        return FICTIONAL_NOTE
    n = len(sources)
    n_pc1 = int(sources["pc1"].notna().sum()) if "pc1" in sources else 0
    rel = (f"reliability = Lin et al. (2023) PC1 for {n_pc1:,}" + (f", imported values for {n - n_pc1:,}"
                                                                    if n_pc1 < n else ""))
    fict = int(sources["fictional"].astype(bool).sum())
    return (f"real sources: {n - fict:,} domains from the database ({rel}; popularity as imported)"
            + (f" and {fict:,} FICTIONAL demo domains" if fict else ""))


def design_l2d(engine: Engine, *, seed: int = 0, per_stratum: int = 1, strategies: tuple[str, ...] = STRATEGIES,
               items: list[str] | None = None, n_items: int | None = None, bank: str | None = None,
               use_demo: bool | None = None, fictional_sources: bool = False, source_pool: int | None = None,
               factors: tuple[float, ...] = FACTORS) -> dict[str, Any]:
    """Plan Design A: priors and posteriors for the items of the database or of a built-in bank.

    ``bank``: "gapminder" (1,704 numeric country-year questions, `item_bank`) or "demo" (24 trivia
    questions); by default the Gapminder bank is imported when the database has no items, and the
    plan covers the database's items. ``n_items`` plans a stratified subset (era x OECD x topic).

    Sources: the database's real sources with a popularity value (`import sources`, `import
    popularity`); ``source_pool`` first draws a fixed pool of that many (a multiple of 6, evenly
    across the 6 strata; seed 000: 132) from which every item's sources are drawn, and records each
    posterior's stratum at the table's thresholds (``source_stratum``: the statistics then take every
    crossed source term within the strata, `stats.l2d.l2d_metrics`); run again on a database planned
    before strata were recorded, it records them on the planned posteriors it draws again
    (``strata_recorded``), and refuses in one line, writing nothing, where one recorded differs. With fewer
    than 6 real sources the plan is refused in one line naming the commands that import real ones,
    unless ``fictional_sources`` (or ``use_demo``, which also selects the demo bank) asks for the
    24 invented demo domains. The result's ``sources`` says where the sources come from.
    """
    l2d.check_strategies(strategies)  # before anything is written
    if use_demo:
        bank = bank or "demo"
        fictional_sources = True
    with engine.connect() as conn:
        n_db_items = conn.execute(sa.select(sa.func.count()).select_from(Item)).scalar()
        n_real = conn.execute(sa.select(sa.func.count()).select_from(Source).where(
            Source.popularity.is_not(None), Source.fictional.is_(False))).scalar()
    if bank is None and n_db_items == 0:
        bank = "gapminder"
    if not fictional_sources and n_real < 6:
        raise InputError(f"design l2d: the database has {n_real} real source(s) with a popularity value (6 or more "
                         f"needed; seed 000 uses 132); {IMPORT_HINT}")
    if source_pool is not None and (source_pool < 6 or source_pool % 6):
        raise InputError(f"--source-pool {source_pool}: give a multiple of 6 (the 3 popularity x 2 reliability "
                         f"strata), e.g. 132 as in seed 000")
    from ..store.importing import record_source_strata, upsert_items, upsert_sources
    bank_ids = None
    if bank is not None:
        rows = _bank_rows(bank)
        upsert_items(engine, rows)
        bank_ids = {r["item_id"] for r in rows}
    if fictional_sources:
        upsert_sources(engine, [{"domain": r.domain, "reliability": float(r.reliability),
                                 "popularity": float(r.popularity), "pc1": None, "fictional": True}
                                for r in l2d.demo_sources().itertuples()])
    with engine.connect() as conn:
        it = pd.DataFrame(conn.execute(sa.select(Item.item_id, Item.question, Item.truth, Item.tags_json)).mappings().all())
        src = pd.DataFrame(conn.execute(sa.select(Source.domain, Source.reliability, Source.popularity, Source.pc1,
                                                  Source.fictional)).mappings().all())
    if bank_ids is not None:
        it = it[it.item_id.isin(bank_ids)]
    if items:
        missing = sorted(set(items) - set(it.item_id))
        if missing:
            raise InputError(f"unknown item_id(s): {', '.join(missing[:5])}")
        it = it[it.item_id.isin(items)]
    if n_items is not None:
        tags = pd.DataFrame([json.loads(t or "{}") for t in it.tags_json], index=it.index)
        for col in ("era", "oecd", "topic"):
            it[col] = tags[col] if col in tags else "untagged"
        it = item_bank.stratified_items(it.fillna({"era": "untagged", "oecd": "untagged", "topic": "untagged"}),
                                        n_items, seed=seed)
    src = src[src.fictional.astype(bool)] if fictional_sources else src[~src.fictional.astype(bool)]
    src = src.dropna(subset=["popularity"])
    fixed = None
    if source_pool is not None:
        fixed = l2d.table_strata(src)  # the whole table's thresholds, recorded with every posterior
        src = l2d.source_pool(src, source_pool, seed=seed)
    plan = l2d.build_requests(it, src, seed=seed, per_stratum=per_stratum, strategies=strategies, factors=factors,
                              fixed_strata=fixed)
    used = src[src.domain.isin({r["source"] for r in plan.requests if r.get("source")})]
    with engine.begin() as conn:
        n = insert_ignore(conn, Request, plan.requests, ["key"])
        filled = (record_source_strata(conn, plan.requests, here="in this plan",
                                       hint=" (the source table has changed since that plan was drawn: plan into a "
                                            "new database, or import the sources it was drawn from)")
                  if fixed is not None and n < len(plan.requests) else 0)  # all new: none had a record
    return {"items": plan.n_items, "sources_per_item": plan.n_sources_per_item, "planned": len(plan.requests), "new": n,
            "strata_recorded": filled, "sources": source_provenance(used), "n_sources": len(used),
            "fictional": bool(fictional_sources)}


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


__all__ = ["design_l2d", "source_provenance", "FICTIONAL_NOTE", "ITEM_BANKS", "item_bank", "design_cue", "build_worlds", "world_requests", "cue", "l2d", "INTERVENTIONS", "STRATEGIES"]

"""Replies collected by another harness (e.g. inspect_ai on `export stimuli` JSON lines, see
docs/inspect_ai.md) as an interchange table for `discern-stats import trials`.

Input: JSON lines ``{"id", "metadata", "reply", "prior_reply"}`` (docs/inspect_task.py writes
them), ``metadata`` as exported. Every reply is parsed by the same parsers as `collect`
(`collect.parsing.trial_fields` on the planned request's own format, option letters, strategy and
stage), so a reply is valid here exactly when it would be valid collected; an unparseable reply is
kept as an invalid trial, never repaired.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..core.errors import InputError
from ..store.db import Request, Source
from .parsing import trial_fields


def replies_to_trials(engine: Engine, design: str, path: str | Path, llm: str) -> pd.DataFrame:
    """The interchange rows (`store.tables`) of the replies in ``path`` for ``llm``."""
    recs = [json.loads(ln) for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not recs:
        raise InputError("no replies in the file", file=str(path))
    rows = []
    with engine.connect() as conn:
        jobs = {r.key: r._asdict() for r in conn.execute(sa.select(
            Request.key, Request.answer_format, Request.options_json, Request.messages_json, Request.strategy,
            Request.stage, Request.gold).where(Request.design == design))}

    def parsed(key: str, text: str) -> dict:
        if key not in jobs:
            raise InputError(f"reply {key!r} is not a planned {design} request of the database", file=str(path))
        return trial_fields(jobs[key], text or "")

    if design == "cue":
        for r in recs:
            m = r["metadata"]
            p = parsed(r["id"], r["reply"])
            rows.append({"llm": llm, **{k: m[k] for k in ("intervention", "world_id", "stratum", "track", "probe",
                                                         "condition")},
                         "answer": p["answer"] if p["valid"] else None, "valid": p["valid"],
                         "choice": p["choice"] if p["valid"] else None,
                         "correct": p["correct"] if p["valid"] else None})
        return pd.DataFrame(rows)
    with engine.connect() as conn:
        src = {r.domain: (r.reliability, r.popularity) for r in conn.execute(
            sa.select(Source.domain, Source.reliability, Source.popularity))}
    for r in recs:
        m = r["metadata"]
        if m["stage"] != "posterior":
            continue
        prior = parsed(m["parent_id"], r["prior_reply"])
        post = parsed(r["id"], r["reply"])
        if m["source"] not in src:
            raise InputError(f"source {m['source']!r} of reply {r['id']!r} is not in the database", file=str(path))
        rel, pop = src[m["source"]]
        rows.append({"llm": llm, "strategy": m["strategy"], "item_id": m["item_id"], "truth": m["truth"],
                     "source": m["source"], "reliability": rel, "popularity": pop, "factor": m["factor"],
                     "claim": m["claim"], "prior": prior["value"], "posterior": post["value"],
                     "valid": prior["valid"] and post["valid"], "rated_reliability": post["rated_reliability"]})
    return pd.DataFrame(rows)

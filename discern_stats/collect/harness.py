"""Replies collected by another harness (e.g. inspect_ai on `export stimuli` JSON lines, see
docs/inspect_ai.md) as an interchange table for `discern-stats import trials`.

Input: JSON lines ``{"id", "metadata", "reply", "prior_reply"}`` (docs/inspect_task.py writes
them), ``metadata`` as exported. Every reply is parsed by the same parsers as `collect`
(`collect.parsing.parse`); an unparseable reply is kept as an invalid trial, never repaired.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..core.errors import InputError
from ..store.db import Request, Source
from .parsing import parse


def replies_to_trials(engine: Engine, design: str, path: str | Path, llm: str) -> pd.DataFrame:
    """The interchange rows (`store.tables`) of the replies in ``path`` for ``llm``."""
    recs = [json.loads(ln) for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not recs:
        raise InputError("no replies in the file", file=str(path))
    rows = []
    if design == "cue":
        with engine.connect() as conn:
            gold = dict(conn.execute(sa.select(Request.key, Request.gold).where(Request.design == "cue")).all())
        for r in recs:
            m = r["metadata"]
            p = parse(m["answer_format"], r["reply"])
            g = gold.get(r["id"])
            rows.append({"llm": llm, **{k: m[k] for k in ("intervention", "world_id", "stratum", "track", "probe",
                                                         "condition")},
                         "answer": p.answer, "valid": p.valid,
                         "choice": (m.get("options") or {}).get(p.answer) if p.valid and m["answer_format"] == "letter"
                         else None, "correct": (p.answer == g) if p.valid and g is not None else None})
        return pd.DataFrame(rows)
    with engine.connect() as conn:
        src = {r.domain: (r.reliability, r.popularity) for r in conn.execute(
            sa.select(Source.domain, Source.reliability, Source.popularity))}
    for r in recs:
        m = r["metadata"]
        if m["stage"] != "posterior":
            continue
        prior = parse("number", r["prior_reply"] or "")
        post = parse("number", r["reply"], want_reliability=m["strategy"] == "Reliability")
        if m["source"] not in src:
            raise InputError(f"source {m['source']!r} of reply {r['id']!r} is not in the database", file=str(path))
        rel, pop = src[m["source"]]
        rows.append({"llm": llm, "strategy": m["strategy"], "item_id": m["item_id"], "truth": m["truth"],
                     "source": m["source"], "reliability": rel, "popularity": pop, "factor": m["factor"],
                     "claim": m["claim"], "prior": prior.value, "posterior": post.value,
                     "valid": prior.valid and post.valid, "rated_reliability": post.rated_reliability})
    return pd.DataFrame(rows)

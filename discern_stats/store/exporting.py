"""Exporters: the interchange DataFrame of a design (`export_trials`), the same as a CSV / parquet
file, and every planned request as JSON lines for other harnesses (`export_stimuli`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..core.errors import InputError
from .db import LLM, Item, Request, Source, Trial
from .tables import INTERCHANGE, check_design, write_table


def _merge_tags(df: pd.DataFrame, json_cols: list[str]) -> pd.DataFrame:
    """Expand JSON tag columns into ordinary columns (later ones win), in first-seen order."""
    tag_rows = []
    order: dict[str, None] = {}
    for vals in zip(*[df[c] for c in json_cols]):
        merged: dict[str, Any] = {}
        for v in vals:
            if v:
                d = json.loads(v)
                merged.update(d)
        for k in merged:
            order.setdefault(k, None)
        tag_rows.append(merged)
    out = df.drop(columns=json_cols)
    if order:
        tags = pd.DataFrame(tag_rows, index=df.index, columns=list(order))
        tags = tags[[c for c in tags.columns if c not in out.columns]]
        out = pd.concat([out, tags], axis=1)
    return out


PARSES = ("strict", "lenient")


def export_trials(engine: Engine, design: str, *, llms: list[str] | None = None, parse: str = "strict") -> pd.DataFrame:
    """The interchange DataFrame of ``design`` (finished trials only), one row per trial.

    ``valid`` is the validity under ``parse``: 'strict' (the headline, `collect.parsing`) or
    'lenient'; ``lenient_valid`` is always the lenient parse's. Answers (``answer``, ``choice``,
    ``correct``; ``prior``, ``posterior``, ``rated_reliability``) are empty where that parse found
    the output invalid. A trial without a lenient parse of its own (imported, or collected before
    both parses were stored) has ``lenient_valid`` = its ``valid``."""
    check_design(design)
    if parse not in PARSES:
        raise InputError(f"unknown parse {parse!r}; use one of: {', '.join(PARSES)}")
    T, R, L = Trial.__table__, Request.__table__, LLM.__table__
    if design == "l2d":
        P = T.alias("prior_trial")
        PR = R.alias("prior_request")
        I, S = Item.__table__, Source.__table__
        q = (sa.select(L.c.name.label("llm"), R.c.strategy, R.c.item_id, I.c.truth, R.c.source,
                       S.c.reliability, S.c.popularity, R.c.factor, R.c.claim,
                       P.c.value.label("prior"), T.c.value.label("posterior"),
                       P.c.valid.label("prior_valid"), T.c.valid.label("post_valid"),
                       sa.func.coalesce(P.c.lenient_valid, P.c.valid).label("prior_lenient"),
                       sa.func.coalesce(T.c.lenient_valid, T.c.valid).label("post_lenient"),
                       T.c.rated_reliability, R.c.source_stratum, I.c.tags_json.label("item_tags"),
                       T.c.tags_json.label("trial_tags"),
                       T.c.id.label("_id"))
             .select_from(T.join(R, T.c.request_id == R.c.id).join(L, T.c.llm_id == L.c.id)
                          .join(I, I.c.item_id == R.c.item_id).join(S, S.c.domain == R.c.source)
                          .join(PR, PR.c.key == R.c.parent_key)
                          .outerjoin(P, sa.and_(P.c.request_id == PR.c.id, P.c.llm_id == T.c.llm_id,
                                                P.c.repeat == T.c.repeat, P.c.state == "done")))
             .where(R.c.design == "l2d", R.c.stage == "posterior", T.c.state == "done"))
    else:
        q = (sa.select(L.c.name.label("llm"), R.c.intervention, R.c.world_id, R.c.stratum, R.c.track, R.c.probe,
                       R.c.condition, T.c.answer, T.c.valid, T.c.choice, T.c.correct,
                       sa.func.coalesce(T.c.lenient_valid, T.c.valid).label("lenient_valid"),
                       T.c.tags_json.label("trial_tags"), T.c.id.label("_id"))
             .select_from(T.join(R, T.c.request_id == R.c.id).join(L, T.c.llm_id == L.c.id))
             .where(R.c.design == "cue", T.c.state == "done"))
    if llms:
        q = q.where(L.c.name.in_(llms))
    q = q.order_by(T.c.id)
    with engine.connect() as conn:
        df = pd.DataFrame(conn.execute(q).mappings().all())
    req, opt = INTERCHANGE[design]
    if df.empty:
        return pd.DataFrame(columns=req + opt)
    flag = lambda c: df[c].fillna(False).astype(bool)  # noqa: E731
    if design == "l2d":
        prior_ok, post_ok = ((flag("prior_valid"), flag("post_valid")) if parse == "strict"
                             else (flag("prior_lenient"), flag("post_lenient")))
        df["valid"] = prior_ok & post_ok
        df["lenient_valid"] = flag("prior_lenient") & flag("post_lenient")
        df["prior"] = df["prior"].where(prior_ok, None)
        df["posterior"] = df["posterior"].where(post_ok, None)
        df["rated_reliability"] = df["rated_reliability"].where(post_ok, None)
        df = df.drop(columns=["prior_valid", "post_valid", "prior_lenient", "post_lenient"])
        df = _merge_tags(df, ["item_tags", "trial_tags"])
        for c in ("rated_reliability", "source_stratum"):  # optional columns: only where recorded
            if df[c].isna().all():
                df = df.drop(columns=[c])
        for c in ("truth", "reliability", "popularity", "factor", "claim", "prior", "posterior"):
            df[c] = df[c].astype(float)
    else:
        df = _merge_tags(df, ["trial_tags"])
        df["lenient_valid"] = flag("lenient_valid")
        df["valid"] = flag("valid") if parse == "strict" else df["lenient_valid"]
        for c in ("answer", "choice", "correct"):
            df[c] = df[c].astype(object).where(df["valid"] & df[c].notna(), None)
    df = df.drop(columns=["_id"])
    first = [c for c in req + opt if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]].reset_index(drop=True)


def export_to_file(engine: Engine, design: str, out: str | Path) -> Path:
    df = export_trials(engine, design)
    return write_table(df, out)


PRIOR_REPLY = "{prior reply}"
PRIOR_REPLY_RULE = ("replace the content of the assistant turn '{prior reply}' with the model's own raw reply to the "
                    "sample named in metadata.parent_id, verbatim (the whole text it returned, as `discern-stats "
                    "collect` sends it), not the parsed number")


def export_stimuli(engine: Engine, design: str, path: str | Path) -> int:
    """Write every planned request of ``design`` as JSON lines, one sample per line, in the shape
    inspect_ai's ``json_dataset`` reads (``id``, ``input`` as chat messages, ``target``,
    ``choices``, ``metadata``) and lm-evaluation-harness reads as a local ``json`` dataset.

    ``input`` is the request exactly as planned, options included: a letter request's options are
    part of its text (in each of the ten formats), so ``choices`` is empty and the sample is run
    with ``generate()``, not ``multiple_choice()``, which would list the options a second time
    under its own template; ``metadata.option_texts`` keeps them (letter -> text) and
    ``metadata.options`` the letter -> state map. ``target`` is the gold letter or count (empty
    where a probe has no gold) for Design B, and the truth as stated (e.g. "118000000") for Design A.
    Design B metadata carries the condition labels and the request's evidence graph (``facts``).

    A Design A posterior is the second turn of a conversation: its ``input`` holds the prior's
    messages, an assistant turn ``{prior reply}``, and the claim turn; ``metadata.parent_id``
    names the prior sample and ``metadata.prior_reply`` says what goes in (`PRIOR_REPLY_RULE`:
    the model's raw reply to that prior sample, verbatim). Returns the number of lines written.
    """
    from ..core.answers import format_number
    design = check_design(design)
    p = Path(path)
    if p.suffix.lower() != ".jsonl":
        raise InputError("stimuli are written as JSON lines: give a file name ending in .jsonl", file=str(p))
    with engine.connect() as conn:
        rows = conn.execute(sa.select(Request).where(Request.design == design).order_by(Request.id)).mappings().all()
        truth = dict(conn.execute(sa.select(Item.item_id, Item.truth)).all()) if design == "l2d" else {}
    if not rows:
        raise InputError(f"the database has no planned {design} requests; run `discern-stats design {design}` first")
    priors = {r["key"]: json.loads(r["messages_json"]) for r in rows if r["stage"] == "prior"}
    n = 0
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            msgs = json.loads(r["messages_json"])
            options = json.loads(r["options_json"] or "{}")
            if design == "cue":
                user = msgs[-1]["content"]
                texts = {ln[0]: ln[3:] for ln in user.rsplit("\n\n", 1)[-1].splitlines()[1:]
                         if ln[:3] in ("A. ", "B. ", "C. ", "D. ")} if r["answer_format"] == "letter" else {}
                meta = {k: r[k] for k in ("design", "world_id", "stratum", "intervention", "track", "probe", "condition",
                                          "answer_format")}
                meta.update(options=options, option_texts=texts,
                            facts=json.loads(r["facts_json"]) if r["facts_json"] else None)
                rec = {"id": r["key"], "input": msgs, "target": r["gold"] or "", "choices": [], "metadata": meta}
            else:
                meta = {k: r[k] for k in ("design", "item_id", "strategy", "stage", "source", "factor", "claim",
                                          "answer_format")}
                t = truth.get(r["item_id"])
                meta.update(truth=t, parent_id=r["parent_key"])
                if r["stage"] == "posterior":
                    msgs = priors.get(r["parent_key"], []) + [{"role": "assistant", "content": PRIOR_REPLY}] + msgs
                    meta["prior_reply"] = PRIOR_REPLY_RULE
                rec = {"id": r["key"], "input": msgs, "target": "" if t is None else format_number(float(t)),
                       "choices": [], "metadata": meta}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(p)
    return n

"""Importers: a Design A item bank, a source table, popularity rankings and trials collected
elsewhere, each validated whole (`store.tables`) and written in one transaction, so bad input
raises `InputError` naming file, row and column and leaves the database untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..core.errors import InputError
from ..core.keys import cue_request_key, l2d_posterior_key, l2d_prior_key, trial_key
from .db import LLM, Item, Request, Source, Trial, World, dumps, insert_ignore
from .tables import (INTERCHANGE, ITEM_COLUMNS, no_duplicates, numeric_column, require_columns, tag_dict, text_column,
                     check_design, read_table, validate_trials)


def import_items(engine: Engine, path: str | Path) -> int:
    """Import a Design A item bank: ``item_id,question,truth[,tag columns]``. Returns rows added.

    Optional columns with a meaning (`core.answers`): ``correct_rule`` (exact, rel:X, abs:X or
    sig:K; default exact), ``sig_figs`` (the significant figures the answer is stated at; claims
    are rounded to them) and ``scale`` (ratio, interval or bounded). An item a multiplicative
    factor cannot scale (a year or date, a percentage the factor 3 pushes past 100, or ``scale``
    other than ratio) is refused in one line: seed 000's claims T x F need a ratio scale.
    """
    from ..core.answers import factor_scale_problem, parse_rule
    file = str(path)
    df = read_table(path)
    require_columns(df, ITEM_COLUMNS, file)
    ids = text_column(df, "item_id", file)
    questions = text_column(df, "question", file)
    truth = numeric_column(df, "truth", file)
    no_duplicates(df.assign(item_id=ids), ["item_id"], file)
    if "correct_rule" in df.columns:
        for i, r in enumerate(df["correct_rule"]):
            try:
                parse_rule(None if pd.isna(r) else str(r))
            except ValueError as exc:
                raise InputError(str(exc), file=file, row=i + 1, column="correct_rule") from None
    if "sig_figs" in df.columns:
        sig = numeric_column(df, "sig_figs", file, required=False, lo=1)
        bad = sig.notna() & (sig != sig.round())
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"sig_figs {sig.iloc[i]:g} is not a whole number", file=file, row=i + 1, column="sig_figs")
        df["sig_figs"] = sig.map(lambda v: None if pd.isna(v) else int(v))
    scale = df["scale"] if "scale" in df.columns else pd.Series([None] * len(df), index=df.index)
    for i in range(len(df)):
        why = factor_scale_problem(questions.iloc[i], float(truth.iloc[i]), scale.iloc[i])
        if why is not None:
            raise InputError(f"item {ids.iloc[i]!r}: {why}; Design A's claims are T x 1/3 ... 3, which need a "
                             f"ratio-scale quantity: drop the item, or add a 'scale' column with 'ratio' if it is one",
                             file=file, row=i + 1, column="question" if "scale" not in df.columns or pd.isna(
                                 scale.iloc[i]) else "scale")
    tag_cols = [c for c in df.columns if c not in ITEM_COLUMNS]
    rows = [{"item_id": ids.iloc[i], "question": str(df["question"].iloc[i]).strip(),
             "truth": float(truth.iloc[i]), "tags_json": dumps(tag_dict(df.iloc[i], tag_cols))}
            for i in range(len(df))]
    return upsert_items(engine, rows, file=file)


def _upsert(engine: Engine, table: Any, key: str, fields: tuple[str, ...], rows: list[dict[str, Any]],
            what: str, file: str | None) -> int:
    """Insert ``rows`` into ``table`` (unique column ``key``); a row whose key is already stored with
    other ``fields`` is an `InputError` naming the row (the stored row is never overwritten)."""
    col = getattr(table, key)
    with engine.begin() as conn:
        existing = {getattr(r, key): r for r in conn.execute(
            sa.select(col, *(getattr(table, f) for f in fields)).where(col.in_([r[key] for r in rows])))}
        for i, r in enumerate(rows):
            e = existing.get(r[key])
            differ = [f for f in fields if e is not None and getattr(e, f) != r.get(f)]
            if differ:
                f = differ[0]
                raise InputError(f"{key} {r[key]!r} is already in the database with a different {what} ({f}: "
                                 f"stored {getattr(e, f)!r}, here {r.get(f)!r})", file=file, row=i + 1, column=key)
        return insert_ignore(conn, table, rows, [key])


def upsert_items(engine: Engine, rows: list[dict[str, Any]], file: str | None = None) -> int:
    """Insert items; an existing item_id with a different question/truth is an error."""
    return _upsert(engine, Item, "item_id", ("question", "truth"), rows, "question or truth", file)


def normalize_domain(domain: str) -> str:
    """A domain as popularity rankings list it: lower case, no scheme, path, port, trailing dot
    or leading ``www.``."""
    d = str(domain).strip().lower()
    d = d.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0].rstrip(".")
    return d[4:] if d.startswith("www.") else d


def _popularity_table(path: str | Path) -> tuple[pd.DataFrame, str]:
    """(domain, popularity) of a Tranco list (``rank,domain``, no header) or an Open PageRank CSV
    (``Rank,Domain,Open Page Rank``); also any CSV with ``domain`` and ``rank`` or ``popularity``."""
    file = str(path)
    df = read_table(path)
    cols = {c.strip().lower(): c for c in df.columns}
    if "domain" not in cols:
        first = list(df.columns)
        if len(first) == 2 and first[0].strip().isdigit() and "." in first[1]:  # a Tranco list has no header
            df = pd.concat([pd.DataFrame([first], columns=["rank", "domain"]),
                            df.set_axis(["rank", "domain"], axis=1)], ignore_index=True)
            cols = {"rank": "rank", "domain": "domain"}
        else:
            raise InputError(f"no 'domain' column (found {', '.join(map(repr, df.columns))}); expected a Tranco list "
                             f"(rank,domain without a header) or an Open PageRank CSV (Rank,Domain,Open Page Rank)",
                             file=file, column="domain")
    out = pd.DataFrame({"domain": text_column(df, cols["domain"], file).map(normalize_domain)})
    if "open page rank" in cols:
        out["popularity"] = numeric_column(df, cols["open page rank"], file, lo=0, hi=10)
        kind = "Open PageRank score (0-10)"
    elif "popularity" in cols:
        out["popularity"] = numeric_column(df, cols["popularity"], file)
        kind = "popularity column"
    elif "rank" in cols:
        rank = numeric_column(df, cols["rank"], file, lo=1)
        out["popularity"] = -np.log10(rank)
        kind = "-log10(rank)"
    else:
        raise InputError("no 'rank', 'Open Page Rank' or 'popularity' column", file=file, column="rank")
    return out.drop_duplicates("domain", keep="first"), kind


def import_popularity(engine: Engine, path: str | Path) -> dict[str, Any]:
    """Set ``Source.popularity`` from a popularity ranking (Tranco or Open PageRank).

    Matching (the rankings list registrable domains): both sides normalised (`normalize_domain`:
    case, scheme, ``www.``); a source domain that is not listed is matched to its longest listed
    parent of at least two labels (``news.example.co.uk`` -> ``example.co.uk``). Sources that
    match nothing keep their value; the result lists them.
    Tranco ranks become -log10(rank) (higher = more popular); Open PageRank keeps its 0-10 score.
    """
    table, kind = _popularity_table(path)
    pop = dict(zip(table["domain"], table["popularity"]))
    with engine.begin() as conn:
        sources = list(conn.execute(sa.select(Source.domain, Source.popularity)))
        exact, parent, unmatched, replaced, updates = 0, [], [], 0, []
        for src in sources:
            if "/" in str(src.domain).split("://", 1)[-1].strip("/"):  # a page (facebook.com/somepage in Lin et
                unmatched.append(src.domain)  # al.'s table), not a domain: a site's popularity is not its page's
                continue
            d = normalize_domain(src.domain)
            labels = d.split(".")
            hit = next((".".join(labels[i:]) for i in range(len(labels) - 1) if ".".join(labels[i:]) in pop), None)
            if hit is None:
                unmatched.append(src.domain)
                continue
            if hit == d:
                exact += 1
            else:
                parent.append((src.domain, hit))
            replaced += src.popularity is not None
            updates.append({"d": src.domain, "p": float(pop[hit])})
        if updates:
            conn.execute(sa.update(Source.__table__).where(Source.__table__.c.domain == sa.bindparam("d"))
                         .values(popularity=sa.bindparam("p")), updates)
    return {"sources": len(sources), "listed": len(pop), "matched_exact": exact, "matched_parent": parent,
            "unmatched": unmatched, "replaced": int(replaced), "scale": kind}


def import_sources(engine: Engine, path: str | Path, *, fictional: bool = False) -> int:
    """Import a source table: ``domain`` plus ``pc1`` or ``reliability`` (in [0, 1]), optional ``popularity``.

    ``pc1`` is Lin et al. (2023, PNAS Nexus) PC1 of domain quality, already scaled to
    [0, 1]; it becomes the reliability R_s and is also kept as given.
    """
    file = str(path)
    df = read_table(path)
    require_columns(df, ["domain"], file)
    if "reliability" not in df.columns and "pc1" not in df.columns:
        raise InputError(f"missing required column 'pc1' or 'reliability'; found {', '.join(map(repr, df.columns))}",
                         file=file, column="reliability")
    dom = text_column(df, "domain", file)
    no_duplicates(df.assign(domain=dom), ["domain"], file)
    pc1 = numeric_column(df, "pc1", file, lo=0.0, hi=1.0) if "pc1" in df.columns else None
    rel = numeric_column(df, "reliability", file, lo=0.0, hi=1.0) if "reliability" in df.columns else pc1
    pop = numeric_column(df, "popularity", file, required=False) if "popularity" in df.columns else None
    rows = []
    for i in range(len(df)):
        rows.append({"domain": dom.iloc[i], "reliability": float(rel.iloc[i]),
                     "pc1": None if pc1 is None else float(pc1.iloc[i]),
                     "popularity": None if pop is None or pd.isna(pop.iloc[i]) else float(pop.iloc[i]),
                     "fictional": fictional})
    return upsert_sources(engine, rows, file=file)


def upsert_sources(engine: Engine, rows: list[dict[str, Any]], file: str | None = None) -> int:
    """Insert sources; an existing domain with a different reliability/popularity is an error."""
    return _upsert(engine, Source, "domain", ("reliability", "popularity"), rows, "reliability or popularity", file)


# ---------------------------------------------------------------- trial import
def _ensure_llms(conn: sa.Connection, names: list[str]) -> dict[str, int]:
    insert_ignore(conn, LLM, [{"name": n, "provider": "imported", "model_id": n} for n in names], ["name"])
    return {r.name: r.id for r in conn.execute(sa.select(LLM.name, LLM.id).where(LLM.name.in_(names)))}


def _request_ids(conn: sa.Connection, keys: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in range(0, len(keys), 5000):
        part = keys[i:i + 5000]
        out.update({r.key: r.id for r in conn.execute(sa.select(Request.key, Request.id).where(Request.key.in_(part)))})
    return out


def import_trials(engine: Engine, design: str, path: str | Path | pd.DataFrame) -> int:
    """Import trials logged elsewhere (interchange columns). Returns trials added.

    Extra columns are kept as per-trial tags and come back on export. Everything happens
    in one transaction: an error leaves the database untouched.
    """
    check_design(design)
    if isinstance(path, pd.DataFrame):
        file, df = "<DataFrame>", path
    else:
        file, df = str(path), read_table(path)
    df = validate_trials(df, design, file)
    req, opt = INTERCHANGE[design]
    tag_cols = [c for c in df.columns if c not in req and c not in opt]
    with engine.begin() as conn:
        llm_ids = _ensure_llms(conn, sorted(df["llm"].unique()))
        if design == "l2d":
            return _import_l2d(conn, df, llm_ids, tag_cols, file)
        return _import_cue(conn, df, llm_ids, tag_cols, file)


def _f(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _b(row: pd.Series, col: str) -> bool | None:
    """An optional boolean column of a validated row (None where absent or empty)."""
    v = row[col] if col in row.index else None
    return None if v is None or (isinstance(v, float) and pd.isna(v)) else bool(v)


def record_source_strata(conn: sa.Connection, req_rows: list[dict[str, Any]], file: str | None = None,
                         here: str = "here", hint: str = "") -> int:
    """Give planned posteriors that were already in the database the ``source_stratum`` of ``req_rows``
    where they had none (a plan made before strata were recorded); one that records a different
    stratum is refused in one line (the caller's transaction then writes nothing). Returns how many
    were filled. Used by `import trials l2d` (``file``) and by a re-run of `design l2d --source-pool`."""
    want = {r["key"]: (i, r["source_stratum"]) for i, r in enumerate(
        r for r in req_rows if r["stage"] == "posterior" and r.get("source_stratum") is not None)}
    have = {}
    keys = list(want)
    for k in range(0, len(keys), 2000):
        have.update(conn.execute(sa.select(Request.key, Request.source_stratum)
                                 .where(Request.key.in_(keys[k:k + 2000]))).all())
    fill = []
    for key, (i, s) in want.items():
        if have.get(key) is None:
            fill.append({"k": key, "s": s})
        elif have[key] != s:
            raise InputError(f"source stratum {s!r} {here} but {have[key]!r} in the database's plan{hint}", file=file,
                             row=None if file is None else i + 1, column="source_stratum" if file else None)
    if fill:
        R = Request.__table__
        conn.execute(R.update().where(R.c.key == sa.bindparam("k")).values(source_stratum=sa.bindparam("s")), fill)
    return len(fill)


def _import_l2d(conn: sa.Connection, df: pd.DataFrame, llm_ids: dict[str, int], tag_cols: list[str], file: str) -> int:
    items = df.drop_duplicates("item_id")
    existing = {r.item_id: r.truth for r in conn.execute(sa.select(Item.item_id, Item.truth)
                                                         .where(Item.item_id.in_(list(items.item_id))))}
    for i, (iid, t) in enumerate(zip(df.item_id, df.truth)):
        if iid in existing and existing[iid] != t:
            raise InputError(f"item_id {iid!r} has truth {t!r} here but {existing[iid]!r} in the database",
                             file=file, row=i + 1, column="truth")
    insert_ignore(conn, Item, [{"item_id": r.item_id, "question": "", "truth": float(r.truth), "tags_json": "{}"}
                               for r in items.itertuples() if r.item_id not in existing], ["item_id"])
    srcs = df.drop_duplicates("source")
    known = {r.domain: (r.reliability, r.popularity) for r in conn.execute(
        sa.select(Source.domain, Source.reliability, Source.popularity).where(Source.domain.in_(list(srcs.source))))}
    for i, (s, rl, pp) in enumerate(zip(df.source, df.reliability, df.popularity)):
        k = known.get(s)
        if k is not None and (k[0] != rl or (_f(pp) is not None and k[1] != _f(pp))):
            raise InputError(f"source {s!r} has reliability/popularity {rl!r}/{pp!r} here but "
                             f"{k[0]!r}/{k[1]!r} in the database or an earlier row", file=file, row=i + 1,
                             column="reliability")
        if k is None:
            known[s] = (rl, _f(pp))
    insert_ignore(conn, Source, [{"domain": r.source, "reliability": float(r.reliability), "popularity": _f(r.popularity),
                                  "pc1": None, "fictional": False} for r in srcs.itertuples()], ["domain"])
    req_rows = []
    for r in df.drop_duplicates(["item_id", "strategy"]).itertuples():
        req_rows.append({"key": l2d_prior_key(r.item_id, r.strategy), "design": "l2d", "item_id": r.item_id,
                         "strategy": r.strategy, "stage": "prior", "answer_format": "number"})
    for r in df.itertuples():
        req_rows.append({"key": l2d_posterior_key(r.item_id, r.strategy, r.source, float(r.factor)), "design": "l2d",
                         "item_id": r.item_id, "strategy": r.strategy, "stage": "posterior",
                         "parent_key": l2d_prior_key(r.item_id, r.strategy), "source": r.source,
                         "factor": float(r.factor), "claim": float(r.claim), "answer_format": "number",
                         "source_stratum": getattr(r, "source_stratum", None)})
    insert_ignore(conn, Request, req_rows, ["key"])
    if "source_stratum" in df.columns:
        record_source_strata(conn, req_rows, file)
    rid = _request_ids(conn, [r["key"] for r in req_rows])
    trials = []
    priors = df.sort_values("prior", na_position="last").drop_duplicates(["llm", "item_id", "strategy"])
    for r in priors.itertuples():
        k = l2d_prior_key(r.item_id, r.strategy)
        ok = not pd.isna(r.prior)
        trials.append({"key": trial_key(r.llm, "imported", k, 0), "request_id": rid[k], "llm_id": llm_ids[r.llm],
                       "state": "done", "status": "imported", "answer": None if not ok else repr(float(r.prior)),
                       "value": _f(r.prior), "valid": ok, "tags_json": "{}"})
    has_rr = "rated_reliability" in df.columns
    for i, r in enumerate(df.itertuples()):
        k = l2d_posterior_key(r.item_id, r.strategy, r.source, float(r.factor))
        row = df.iloc[i]
        trials.append({"key": trial_key(r.llm, "imported", k, 0), "request_id": rid[k], "llm_id": llm_ids[r.llm],
                       "state": "done", "status": "imported",
                       "answer": None if pd.isna(r.posterior) else repr(float(r.posterior)),
                       "value": _f(r.posterior), "valid": bool(r.valid), "lenient_valid": _b(row, "lenient_valid"),
                       "rated_reliability": _f(row["rated_reliability"]) if has_rr else None,
                       "tags_json": dumps(tag_dict(row, tag_cols))})
    return insert_ignore(conn, Trial, trials, ["key"])


def _import_cue(conn: sa.Connection, df: pd.DataFrame, llm_ids: dict[str, int], tag_cols: list[str], file: str) -> int:
    worlds = df.drop_duplicates("world_id")
    strata = df.groupby("world_id")["stratum"].nunique()
    if (strata > 1).any():
        w = strata[strata > 1].index[0]
        i = int(np.flatnonzero((df.world_id == w).to_numpy())[1])
        raise InputError(f"world_id {w!r} has more than one stratum", file=file, row=i + 1, column="stratum")
    insert_ignore(conn, World, [{"world_id": r.world_id, "stratum": r.stratum} for r in worlds.itertuples()], ["world_id"])
    req_rows = []
    for r in df.drop_duplicates(["world_id", "intervention", "track", "probe", "condition"]).itertuples():
        req_rows.append({"key": cue_request_key(r.world_id, r.intervention, r.track, r.probe, r.condition),
                         "design": "cue", "world_id": r.world_id, "intervention": r.intervention, "stratum": r.stratum,
                         "track": r.track, "probe": r.probe, "condition": r.condition,
                         "answer_format": "integer" if r.probe in ("P3a", "P3b") else "letter"})
    insert_ignore(conn, Request, req_rows, ["key"])
    rid = _request_ids(conn, [r["key"] for r in req_rows])
    has_choice, has_correct = "choice" in df.columns, "correct" in df.columns
    trials = []
    for i, r in enumerate(df.itertuples()):
        k = cue_request_key(r.world_id, r.intervention, r.track, r.probe, r.condition)
        row = df.iloc[i]
        ch = row["choice"] if has_choice else None
        co = row["correct"] if has_correct else None
        trials.append({"key": trial_key(r.llm, "imported", k, 0), "request_id": rid[k], "llm_id": llm_ids[r.llm],
                       "state": "done", "status": "imported",
                       "answer": None if pd.isna(r.answer) else str(r.answer), "valid": bool(r.valid),
                       "lenient_valid": _b(row, "lenient_valid"),
                       "choice": None if ch is None or pd.isna(ch) else str(ch),
                       "correct": None if co is None or pd.isna(co) else bool(co),
                       "tags_json": dumps(tag_dict(row, tag_cols))})
    return insert_ignore(conn, Trial, trials, ["key"])



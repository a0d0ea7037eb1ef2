"""Interchange tables (SPEC "Interchange columns"): reading, validating, importing, exporting.

Every importer validates the whole file in pandas first and then writes it in one
transaction, so bad input raises `InputError` naming file, row and column and leaves the
database untouched. Rows are numbered from 1 = first data row (the CSV header is not a
row; in a text editor data row N is on line N + 1).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .db import LLM, Item, Request, Source, Trial, World, dumps, insert_ignore
from .core.keys import cue_request_key, l2d_posterior_key, l2d_prior_key, trial_key
from .core.vocab import TRACKS
from .errors import InputError

DESIGNS = ("l2d", "cue")

L2D_COLUMNS = ["llm", "strategy", "item_id", "truth", "source", "reliability", "popularity",
               "factor", "claim", "prior", "posterior", "valid"]
L2D_OPTIONAL = ["rated_reliability"]
CUE_COLUMNS = ["llm", "intervention", "world_id", "stratum", "track", "probe", "condition",
               "answer", "valid"]
CUE_OPTIONAL = ["choice", "correct"]
CUE_TRACKS = TRACKS
ITEM_COLUMNS = ["item_id", "question", "truth"]

INTERCHANGE = {"l2d": (L2D_COLUMNS, L2D_OPTIONAL), "cue": (CUE_COLUMNS, CUE_OPTIONAL)}


def check_design(design: str) -> str:
    if design not in DESIGNS:
        raise InputError(f"unknown design {design!r}; expected one of {', '.join(DESIGNS)}")
    return design


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV or parquet file (by extension) without guessing types of text columns."""
    p = Path(path)
    ext = p.suffix.lower()
    if ext not in (".csv", ".parquet", ".pq"):
        raise InputError(f"unsupported file type {ext or '(none)'!r}; use .csv or .parquet", file=str(p))
    if not p.exists():
        raise InputError("file does not exist", file=str(p))
    try:
        if ext == ".csv":
            df = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[], encoding="utf-8")
            df = df.replace({"": np.nan})
        else:
            df = pd.read_parquet(p)
    except UnicodeDecodeError as exc:
        raise InputError(f"file is not UTF-8 text: {exc}", file=str(p)) from None
    except Exception as exc:  # pandas/pyarrow raise many types for corrupt files
        raise InputError(f"cannot read file: {type(exc).__name__}: {exc}", file=str(p)) from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def write_table(df: pd.DataFrame, path: str | Path) -> Path:
    p = Path(path)
    ext = p.suffix.lower()
    if ext == ".csv":
        df.to_csv(p, index=False)
    elif ext in (".parquet", ".pq"):
        df.to_parquet(p, index=False)
    else:
        raise InputError(f"unsupported output type {ext or '(none)'!r}; use .csv or .parquet", file=str(p))
    return p


def _require_columns(df: pd.DataFrame, cols: list[str], file: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"missing required column(s) {', '.join(repr(m) for m in missing)}; "
                         f"found {', '.join(map(repr, df.columns))}", file=file, column=missing[0])


def _numeric(df: pd.DataFrame, col: str, file: str, *, required: bool = True,
             lo: float | None = None, hi: float | None = None) -> pd.Series:
    """Parse a numeric column; error names the first bad row. Empty cells allowed iff not required."""
    raw = df[col]
    out = pd.to_numeric(raw, errors="coerce").astype(float)
    bad_text = raw.notna() & out.isna()
    bad_text |= raw.notna() & raw.astype(str).str.strip().str.lower().isin(["nan", "inf", "-inf", "infinity"])
    if bad_text.any():
        i = int(np.flatnonzero(bad_text.to_numpy())[0])
        raise InputError(f"value {raw.iloc[i]!r} is not a finite number", file=file, row=i + 1, column=col)
    nonfinite = out.notna() & ~np.isfinite(out)
    if nonfinite.any():
        i = int(np.flatnonzero(nonfinite.to_numpy())[0])
        raise InputError(f"value {raw.iloc[i]!r} is not a finite number", file=file, row=i + 1, column=col)
    if required and out.isna().any():
        i = int(np.flatnonzero(out.isna().to_numpy())[0])
        raise InputError("missing value (empty or NaN)", file=file, row=i + 1, column=col)
    for bound, test, word in ((lo, lambda s, b: s < b, "below"), (hi, lambda s, b: s > b, "above")):
        if bound is not None:
            bad = out.notna() & test(out, bound)
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise InputError(f"value {out.iloc[i]:g} is {word} the allowed {bound}", file=file, row=i + 1, column=col)
    return out


def _text(df: pd.DataFrame, col: str, file: str, *, required: bool = True) -> pd.Series:
    s = df[col]
    s = s.where(s.isna(), s.astype(str).str.strip())
    if required:
        bad = s.isna() | (s == "")
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError("missing value", file=file, row=i + 1, column=col)
    return s


def _bool(df: pd.DataFrame, col: str, file: str, *, required: bool = True) -> pd.Series:
    mapping = {"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False,
               "yes": True, "no": False, "t": True, "f": False}
    raw = df[col]
    out = []
    for i, v in enumerate(raw):
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            if required:
                raise InputError("missing value (expected true/false)", file=file, row=i + 1, column=col)
            out.append(None)
            continue
        if isinstance(v, (bool, np.bool_)):
            out.append(bool(v))
            continue
        key = str(v).strip().lower()
        if key not in mapping:
            raise InputError(f"value {v!r} is not a boolean (true/false)", file=file, row=i + 1, column=col)
        out.append(mapping[key])
    return pd.Series(out, index=df.index, dtype=object)


def _no_duplicates(df: pd.DataFrame, cols: list[str], file: str) -> None:
    dup = df.duplicated(subset=cols, keep="first")
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        first = int(np.flatnonzero((df[cols] == df[cols].iloc[i]).all(axis=1).to_numpy())[0])
        key = ", ".join(f"{c}={df[c].iloc[i]!r}" for c in cols)
        raise InputError(f"duplicate {key} (first seen in row {first + 1})", file=file, row=i + 1, column=cols[0])


def _tag_dict(row: pd.Series, tag_cols: list[str]) -> dict[str, Any]:
    out = {}
    for c in tag_cols:
        v = row[c]
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            out[c] = None
        elif isinstance(v, (np.integer,)):
            out[c] = int(v)
        elif isinstance(v, (np.floating,)):
            out[c] = float(v)
        elif isinstance(v, (np.bool_,)):
            out[c] = bool(v)
        else:
            out[c] = v if isinstance(v, (int, float, bool, str)) else str(v)
    return out


# ---------------------------------------------------------------- items and sources
def import_items(engine: Engine, path: str | Path) -> int:
    """Import a Design A item bank: ``item_id,question,truth[,tag columns]``. Returns rows added."""
    file = str(path)
    df = read_table(path)
    _require_columns(df, ITEM_COLUMNS, file)
    ids = _text(df, "item_id", file)
    _text(df, "question", file)
    truth = _numeric(df, "truth", file)
    _no_duplicates(df.assign(item_id=ids), ["item_id"], file)
    tag_cols = [c for c in df.columns if c not in ITEM_COLUMNS]
    rows = [{"item_id": ids.iloc[i], "question": str(df["question"].iloc[i]).strip(),
             "truth": float(truth.iloc[i]), "tags_json": dumps(_tag_dict(df.iloc[i], tag_cols))}
            for i in range(len(df))]
    return upsert_items(engine, rows, file=file)


def upsert_items(engine: Engine, rows: list[dict[str, Any]], file: str | None = None) -> int:
    """Insert items; an existing item_id with a different question/truth is an error."""
    with engine.begin() as conn:
        existing = {r.item_id: r for r in conn.execute(sa.select(Item.item_id, Item.question, Item.truth)
                                                       .where(Item.item_id.in_([r["item_id"] for r in rows])))}
        for i, r in enumerate(rows):
            e = existing.get(r["item_id"])
            if e is not None and (e.question != r["question"] or e.truth != r["truth"]):
                raise InputError(f"item_id {r['item_id']!r} is already in the database with a different "
                                 f"question or truth ({e.truth!r} vs {r['truth']!r})", file=file, row=i + 1, column="item_id")
        return insert_ignore(conn, Item, rows, ["item_id"])


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
    out = pd.DataFrame({"domain": _text(df, cols["domain"], file).map(normalize_domain)})
    if "open page rank" in cols:
        out["popularity"] = _numeric(df, cols["open page rank"], file, lo=0, hi=10)
        kind = "Open PageRank score (0-10)"
    elif "popularity" in cols:
        out["popularity"] = _numeric(df, cols["popularity"], file)
        kind = "popularity column"
    elif "rank" in cols:
        rank = _numeric(df, cols["rank"], file, lo=1)
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
    _require_columns(df, ["domain"], file)
    if "reliability" not in df.columns and "pc1" not in df.columns:
        raise InputError("missing required column 'pc1' or 'reliability'", file=file, column="reliability")
    dom = _text(df, "domain", file)
    _no_duplicates(df.assign(domain=dom), ["domain"], file)
    pc1 = _numeric(df, "pc1", file, lo=0.0, hi=1.0) if "pc1" in df.columns else None
    rel = _numeric(df, "reliability", file, lo=0.0, hi=1.0) if "reliability" in df.columns else pc1
    pop = _numeric(df, "popularity", file, required=False) if "popularity" in df.columns else None
    rows = []
    for i in range(len(df)):
        rows.append({"domain": dom.iloc[i], "reliability": float(rel.iloc[i]),
                     "pc1": None if pc1 is None else float(pc1.iloc[i]),
                     "popularity": None if pop is None or pd.isna(pop.iloc[i]) else float(pop.iloc[i]),
                     "fictional": fictional})
    return upsert_sources(engine, rows, file=file)


def upsert_sources(engine: Engine, rows: list[dict[str, Any]], file: str | None = None) -> int:
    with engine.begin() as conn:
        existing = {r.domain: r for r in conn.execute(sa.select(Source.domain, Source.reliability, Source.popularity)
                                                      .where(Source.domain.in_([r["domain"] for r in rows])))}
        for i, r in enumerate(rows):
            e = existing.get(r["domain"])
            if e is not None and (e.reliability != r["reliability"] or e.popularity != r.get("popularity")):
                raise InputError(f"domain {r['domain']!r} is already in the database with different reliability "
                                 f"or popularity", file=file, row=i + 1, column="domain")
        return insert_ignore(conn, Source, rows, ["domain"])


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


def validate_trials(df: pd.DataFrame, design: str, file: str = "<DataFrame>") -> pd.DataFrame:
    """Validate an interchange table; return it with parsed dtypes (raises `InputError`)."""
    check_design(design)
    req, opt = INTERCHANGE[design]
    _require_columns(df, req, file)
    out = df.copy()
    out["llm"] = _text(df, "llm", file)
    out["valid"] = _bool(df, "valid", file)
    if design == "l2d":
        for c in ("strategy", "item_id", "source"):
            out[c] = _text(df, c, file)
        for c in ("truth", "reliability", "factor", "claim"):
            out[c] = _numeric(df, c, file)
        out["popularity"] = _numeric(df, "popularity", file, required=False)
        out["prior"] = _numeric(df, "prior", file, required=False)
        out["posterior"] = _numeric(df, "posterior", file, required=False)
        if "rated_reliability" in df.columns:
            out["rated_reliability"] = _numeric(df, "rated_reliability", file, required=False)
        bad = out["valid"].astype(bool) & (out["prior"].isna() | out["posterior"].isna())
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            col = "prior" if pd.isna(out["prior"].iloc[i]) else "posterior"
            raise InputError("valid is true but the answer is empty", file=file, row=i + 1, column=col)
        _no_duplicates(out, ["llm", "strategy", "item_id", "source", "factor"], file)
        # one prior per (llm, item, strategy): conflicting priors would be silently lost
        g = out.dropna(subset=["prior"]).groupby(["llm", "item_id", "strategy"])["prior"].nunique()
        if (g > 1).any():
            llm, item, strat = g[g > 1].index[0]
            rows = np.flatnonzero(((out.llm == llm) & (out.item_id == item) & (out.strategy == strat)).to_numpy())
            raise InputError(f"conflicting priors for llm={llm!r}, item_id={item!r}, strategy={strat!r} "
                             f"(rows {', '.join(str(r + 1) for r in rows[:6])}); Design A has one prior per "
                             f"(LLM, item, strategy)", file=file, row=int(rows[1]) + 1, column="prior")
        tv = out.groupby("item_id")["truth"].nunique()
        if (tv > 1).any():
            item = tv[tv > 1].index[0]
            i = int(np.flatnonzero((out.item_id == item).to_numpy())[1])
            raise InputError(f"item_id {item!r} has more than one truth", file=file, row=i + 1, column="truth")
    else:
        for c in ("intervention", "world_id", "stratum", "track", "probe", "condition"):
            out[c] = _text(df, c, file)
        bad_track = ~out["track"].isin(CUE_TRACKS)
        if bad_track.any():
            i = int(np.flatnonzero(bad_track.to_numpy())[0])
            raise InputError(f"unknown track {out['track'].iloc[i]!r}; expected one of {', '.join(CUE_TRACKS)}",
                             file=file, row=i + 1, column="track")
        out["answer"] = _text(df, "answer", file, required=False)
        if "choice" in df.columns:
            ch = _text(df, "choice", file, required=False)
            bad = ch.notna() & ~ch.isin(["A", "B"])
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise InputError(f"choice {ch.iloc[i]!r} is not A or B", file=file, row=i + 1, column="choice")
            out["choice"] = ch
        if "correct" in df.columns:
            out["correct"] = _bool(df, "correct", file, required=False)
        _no_duplicates(out, ["llm", "intervention", "world_id", "track", "probe", "condition"], file)
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
                         "factor": float(r.factor), "claim": float(r.claim), "answer_format": "number"})
    insert_ignore(conn, Request, req_rows, ["key"])
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
                       "value": _f(r.posterior), "valid": bool(r.valid),
                       "rated_reliability": _f(row["rated_reliability"]) if has_rr else None,
                       "tags_json": dumps(_tag_dict(row, tag_cols))})
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
                       "choice": None if ch is None or pd.isna(ch) else str(ch),
                       "correct": None if co is None or pd.isna(co) else bool(co),
                       "tags_json": dumps(_tag_dict(row, tag_cols))})
    return insert_ignore(conn, Trial, trials, ["key"])


# ---------------------------------------------------------------- export
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


def export_trials(engine: Engine, design: str, *, llms: list[str] | None = None) -> pd.DataFrame:
    """The interchange DataFrame of ``design`` (finished trials only), one row per trial."""
    check_design(design)
    T, R, L = Trial.__table__, Request.__table__, LLM.__table__
    if design == "l2d":
        P = T.alias("prior_trial")
        PR = R.alias("prior_request")
        I, S = Item.__table__, Source.__table__
        q = (sa.select(L.c.name.label("llm"), R.c.strategy, R.c.item_id, I.c.truth, R.c.source,
                       S.c.reliability, S.c.popularity, R.c.factor, R.c.claim,
                       P.c.value.label("prior"), T.c.value.label("posterior"),
                       P.c.valid.label("prior_valid"), T.c.valid.label("post_valid"),
                       T.c.rated_reliability, I.c.tags_json.label("item_tags"), T.c.tags_json.label("trial_tags"),
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
    if design == "l2d":
        df["valid"] = df["prior_valid"].fillna(False).astype(bool) & df["post_valid"].fillna(False).astype(bool)
        df = df.drop(columns=["prior_valid", "post_valid"])
        df = _merge_tags(df, ["item_tags", "trial_tags"])
        if df["rated_reliability"].isna().all():
            df = df.drop(columns=["rated_reliability"])
        for c in ("truth", "reliability", "popularity", "factor", "claim", "prior", "posterior"):
            df[c] = df[c].astype(float)
    else:
        df = _merge_tags(df, ["trial_tags"])
        df["valid"] = df["valid"].fillna(False).astype(bool)
        df["correct"] = df["correct"].astype(object).where(df["correct"].notna(), None)
    df = df.drop(columns=["_id"])
    first = [c for c in req + opt if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]].reset_index(drop=True)


def export_to_file(engine: Engine, design: str, out: str | Path) -> Path:
    df = export_trials(engine, design)
    return write_table(df, out)


def export_stimuli(engine: Engine, design: str, path: str | Path) -> int:
    """Write every planned request of ``design`` as JSON lines, one sample per line, in the shape
    inspect_ai's ``json_dataset`` reads (``id``, ``input`` as chat messages, ``target``,
    ``choices``, ``metadata``) and lm-evaluation-harness reads as a local ``json`` dataset.

    Design B metadata carries the condition labels, the option letter -> state map and the
    request's evidence graph (``facts``). A Design A posterior is the second turn of a
    conversation: its ``input`` holds the prior's messages, an assistant turn ``{prior answer}``
    that the harness replaces with the model's own prior answer, and the claim turn;
    ``metadata.parent_id`` names the prior sample. Returns the number of lines written.
    """
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
                choices = [ln[3:] for ln in user.rsplit("\n\n", 1)[-1].splitlines()[1:] if ln[:3] in ("A. ", "B. ", "C. ", "D. ")]
                meta = {k: r[k] for k in ("design", "world_id", "stratum", "intervention", "track", "probe", "condition",
                                          "answer_format")}
                meta.update(options=options, facts=json.loads(r["facts_json"]) if r["facts_json"] else None)
                rec = {"id": r["key"], "input": msgs, "target": r["gold"] or "", "choices": choices, "metadata": meta}
            else:
                meta = {k: r[k] for k in ("design", "item_id", "strategy", "stage", "source", "factor", "claim",
                                          "answer_format")}
                meta.update(truth=truth.get(r["item_id"]), parent_id=r["parent_key"])
                if r["stage"] == "posterior":
                    msgs = priors.get(r["parent_key"], []) + [{"role": "assistant", "content": "{prior answer}"}] + msgs
                rec = {"id": r["key"], "input": msgs, "target": "", "metadata": meta}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(p)
    return n

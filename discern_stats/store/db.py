"""The trial database: SQLModel tables, engine set-up, idempotent inserts and upserts (`TrialDB`, the
Python facade, is in `store.trialdb`).

Schema (one table per entity; every natural key is a UNIQUE constraint so that inserts
are idempotent):

- ``run``: one collection run (spec, code version, start/end).
- ``llm``: an LLM subject (provider, model id, sampling params). Simulators are flagged.
- ``item`` / ``source``: Design A question bank and news sources (reliability, popularity).
- ``world``: Design B fictional worlds with their stratum and counterbalancing.
- ``request``: a planned stimulus (one prompt, or one turn of a Design A conversation),
  with every condition label so that analysis never re-parses prompt text.
- ``trial``: one LLM's answer to one request (raw response, parsed answer, valid flag,
  status, latency, tokens; both parses of `collect.parsing`, strict (the headline ``valid``)
  and lenient, with the rule that recovered the answer and the provider's finish reason). ``trial.key`` = hash of LLM id + sampling settings + request +
  repeat index, so re-running a plan never duplicates a trial.
- ``attempt``: every try of a trial, with its error.

SQLite (the default) runs in WAL mode with foreign keys on; PostgreSQL works through the
same code by URL. All queries go through SQLAlchemy expressions, never string SQL.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Optional

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Field, SQLModel

from ..core.errors import DatabaseURLError

DEFAULT_DB_URL = "sqlite:///trials.db"
SCHEMA_VERSION = 1


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Meta(SQLModel, table=True):
    """Key/value facts about the database itself (schema version)."""

    key: str = Field(primary_key=True)
    value: str


class Run(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    spec_name: str
    spec_json: str
    code_version: str
    started_at: dt.datetime = Field(default_factory=utcnow)
    ended_at: Optional[dt.datetime] = None
    status: str = "running"  # running | finished | interrupted (Ctrl-C, a killed collector) | database_away
    host: Optional[str] = None
    # one id shared by the runs of one `collect` call (its worker processes and final sweep)
    run_group: Optional[str] = Field(default=None, index=True)


class LLM(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    provider: str = "unknown"
    model_id: str = ""
    base_url: Optional[str] = None
    params_json: str = "{}"
    is_simulator: bool = False


class Item(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    item_id: str = Field(unique=True, index=True)
    question: str
    truth: float
    tags_json: str = "{}"


class Source(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    domain: str = Field(unique=True, index=True)
    reliability: float
    popularity: Optional[float] = None
    pc1: Optional[float] = None
    fictional: bool = False


class World(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    world_id: str = Field(unique=True, index=True)
    seed: Optional[int] = None
    stratum: str
    relation: Optional[str] = None
    domain: Optional[str] = None
    discourse_format: Optional[str] = None
    quality_realization: Optional[str] = None
    background: Optional[str] = None
    axis: Optional[str] = None
    option_order: Optional[str] = None
    shared_root_owner: Optional[str] = None
    spec_json: str = "{}"


class Request(SQLModel, table=True):
    """A planned stimulus. Design A posterior turns point to their prior via ``parent_key``."""

    id: Optional[int] = Field(default=None, primary_key=True)
    key: str = Field(unique=True, index=True)
    design: str = Field(index=True)  # 'l2d' | 'cue'
    # Design A
    item_id: Optional[str] = Field(default=None, index=True)
    strategy: Optional[str] = None
    stage: Optional[str] = None  # 'prior' | 'posterior'
    parent_key: Optional[str] = None
    source: Optional[str] = None
    factor: Optional[float] = None
    claim: Optional[float] = None
    # Design A: the source's popularity x reliability stratum ("mid/high", `core.vocab.SOURCE_STRATA`)
    # where the plan drew its source pool within strata cut at a larger table's fixed thresholds
    # (`design l2d --source-pool`); None otherwise
    source_stratum: Optional[str] = None
    # Design B
    world_id: Optional[str] = Field(default=None, index=True)
    intervention: Optional[str] = None
    stratum: Optional[str] = None
    track: Optional[str] = None
    probe: Optional[str] = None
    condition: Optional[str] = None
    gold: Optional[str] = None  # gold option letter / integer as text; None = no gold
    options_json: str = "{}"  # option letter -> semantic state (A/B) for P4 probes
    answer_format: str = "letter"  # 'letter' | 'integer' | 'number'
    messages_json: str = "[]"
    seed: Optional[int] = None
    # Design B: the request's evidence graph as data (designs.cue_bank.EvidenceGraph.facts)
    facts_json: Optional[str] = None


class Trial(SQLModel, table=True):
    """One LLM's answer to one request; also the work queue entry of collection."""

    # ix_trial_request_llm: Design A's export joins each posterior to its prior trial on
    # (request, LLM, repeat); without it SQLite scanned every done trial of the LLM per row
    # (36 s for the demo's 10,800 posteriors, 0.4 s with it)
    __table_args__ = (sa.Index("ix_trial_state_llm", "state", "llm_id"),
                      sa.Index("ix_trial_request_llm", "request_id", "llm_id", "repeat"))

    id: Optional[int] = Field(default=None, primary_key=True)
    key: str = Field(unique=True, index=True)
    request_id: int = Field(foreign_key="request.id", index=True)
    llm_id: int = Field(foreign_key="llm.id", index=True)
    repeat: int = 0
    run_id: Optional[int] = Field(default=None, foreign_key="run.id")
    # queue
    state: str = "pending"  # pending | claimed | done | failed
    claimed_by: Optional[str] = None
    lease_until: Optional[dt.datetime] = None
    # outcome
    status: Optional[str] = None  # core.vocab.TRIAL_STATUSES: ok | lenient_only | parse_failure | refusal | truncated | api_error | imported
    raw_response: Optional[str] = None  # the text as received, reasoning blocks included
    # the answer recovered (the strict parse's, else the lenient parse's; collect.parsing.trial_fields)
    answer: Optional[str] = None
    value: Optional[float] = None
    choice: Optional[str] = None
    correct: Optional[bool] = None
    valid: Optional[bool] = None  # the headline parse (strict): what every statistic uses
    parse_error: Optional[str] = None  # why the strict parse rejected the answer
    # both parses (collect.parsing); NULL for imported trials and for trials collected before them
    strict_valid: Optional[bool] = None
    strict_rule: Optional[str] = None  # e.g. json_object, reasoning_block+json_object, json_last_line, integer
    lenient_valid: Optional[bool] = None
    lenient_rule: Optional[str] = None  # strict, or the rule that recovered the answer (fenced_block, answer_label, ...)
    lenient_error: Optional[str] = None
    finish_reason: Optional[str] = None  # the provider's stop reason (finish_reason / stop_reason / done_reason)
    model_reported: Optional[str] = None  # the model name the provider's response gives
    system_fingerprint: Optional[str] = None  # OpenAI-format system_fingerprint, where given
    error: Optional[str] = None
    rated_reliability: Optional[float] = None
    messages_json: Optional[str] = None  # what was actually sent (Design A includes the prior turn)
    latency_ms: Optional[float] = None
    tokens_in: Optional[int] = None
    tokens_out: Optional[int] = None
    n_attempts: int = 0
    started_at: Optional[dt.datetime] = None
    finished_at: Optional[dt.datetime] = None
    tags_json: str = "{}"


class Attempt(SQLModel, table=True):
    __table_args__ = (sa.UniqueConstraint("trial_id", "n"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="trial.id", index=True)
    n: int
    collector: Optional[str] = None
    started_at: dt.datetime = Field(default_factory=utcnow)
    latency_ms: Optional[float] = None
    ok: bool = False
    error_type: Optional[str] = None
    error: Optional[str] = None
    http_status: Optional[int] = None


TABLES = [Meta, Run, LLM, Item, Source, World, Request, Trial, Attempt]


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def normalise_url(url: str) -> str:
    """Map plain ``postgresql://`` URLs to the psycopg 3 driver that is installed."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str = DEFAULT_DB_URL) -> Engine:
    """Create an engine for ``url``; raise `DatabaseURLError` naming the problem."""
    try:
        parsed = sa.engine.make_url(normalise_url(url))
    except sa.exc.ArgumentError as exc:
        hint = (f"; a SQLite file is written sqlite:///{url} (three slashes, then the path)" if "://" not in url
                else "")
        raise DatabaseURLError(f"cannot parse database URL {url!r}: {exc}{hint}") from None
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
    elif parsed.get_backend_name() == "postgresql":
        kwargs["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (sa.exc.ArgumentError, ImportError, sa.exc.NoSuchModuleError) as exc:
        raise DatabaseURLError(f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        with engine.connect() as conn:
            conn.execute(sa.select(1))
    except sa.exc.SQLAlchemyError as exc:
        raise DatabaseURLError(
            f"cannot connect to database {parsed.render_as_string(hide_password=True)!r}: "
            f"{type(exc.orig).__name__ if getattr(exc, 'orig', None) else type(exc).__name__}: "
            f"{str(getattr(exc, 'orig', exc)).strip().splitlines()[0] if str(getattr(exc, 'orig', exc)).strip() else ''}"
        ) from None
    return engine


def init_schema(engine: Engine) -> None:
    """Create missing tables and indexes (idempotent; an index added in a later version is created
    on an existing database too) and record the schema version."""
    SQLModel.metadata.create_all(engine, tables=[t.__table__ for t in TABLES])
    _add_missing_columns(engine)
    for t in TABLES:
        for idx in t.__table__.indexes:
            idx.create(engine, checkfirst=True)
    with engine.begin() as conn:
        insert_ignore(conn, Meta, [{"key": "schema_version", "value": str(SCHEMA_VERSION)}], ["key"])


def _add_missing_columns(engine: Engine) -> None:
    """Add nullable columns that a later version introduced (e.g. ``request.facts_json``) to an
    existing database; existing rows keep NULL there."""
    inspector = sa.inspect(engine)
    for t in TABLES:
        table = t.__table__
        have = {c["name"] for c in inspector.get_columns(table.name)}
        for col in table.columns:
            if col.name not in have and col.nullable:
                ddl = col.type.compile(dialect=engine.dialect)
                with engine.begin() as conn:
                    conn.execute(sa.text(f'ALTER TABLE "{table.name}" ADD COLUMN "{col.name}" {ddl}'))


def insert_ignore(conn: sa.Connection, model: type[SQLModel], rows: list[dict[str, Any]],
                  conflict_cols: list[str], chunk: int = 2000) -> int:
    """INSERT rows, skipping those whose ``conflict_cols`` already exist. Returns rows inserted."""
    if not rows:
        return 0
    table = model.__table__
    dialect = conn.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    else:  # pragma: no cover - other back-ends: check-then-insert
        n = 0
        for r in rows:
            cond = sa.and_(*[table.c[c] == r[c] for c in conflict_cols])
            if conn.execute(sa.select(sa.func.count()).select_from(table).where(cond)).scalar() == 0:
                conn.execute(table.insert().values(**r))
                n += 1
        return n
    # A multi-row VALUES takes its column list from the first row: insert rows with the
    # same set of keys together (in order of first appearance) so no value is dropped.
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r), []).append(r)
    n = 0
    for keys, grp in groups.items():
        # SQLite limits bound parameters; keep chunk * columns below it.
        step = max(1, min(chunk, 30000 // max(len(keys), 1)))
        for i in range(0, len(grp), step):
            stmt = (dialect_insert(table).values(grp[i:i + step])
                    .on_conflict_do_nothing(index_elements=conflict_cols)
                    .returning(table.c[conflict_cols[0]]))
            n += len(conn.execute(stmt).fetchall())
    return n


def insert_ignore_many(conn: sa.Connection, model: type[SQLModel], rows: list[dict[str, Any]],
                       conflict_cols: list[str]) -> None:
    """Like `insert_ignore`, without counting what was inserted: one cached single-row statement
    run with executemany per set of keys (no recompiling per batch on a hot path)."""
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    else:  # pragma: no cover
        insert_ignore(conn, model, rows, conflict_cols)
        return
    stmt = dialect_insert(model.__table__).on_conflict_do_nothing(index_elements=conflict_cols)
    groups: dict[frozenset[str], list[dict[str, Any]]] = {}
    for r in rows:  # executemany takes its columns from the first row, as a multi-row VALUES does
        groups.setdefault(frozenset(r), []).append(r)
    for grp in groups.values():
        conn.execute(stmt, grp)


def upsert_many(conn: sa.Connection, model: type[SQLModel], rows: list[dict[str, Any]],
                conflict_cols: list[str]) -> None:
    """INSERT rows; a row whose ``conflict_cols`` exist already has its other given columns updated
    (one cached statement per set of keys, run with executemany)."""
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    else:  # pragma: no cover - other back-ends: update, then insert what was missing
        table = model.__table__
        for r in rows:
            cond = sa.and_(*[table.c[c] == r[c] for c in conflict_cols])
            if conn.execute(sa.update(table).where(cond).values(**r)).rowcount == 0:
                conn.execute(table.insert().values(**r))
        return
    groups: dict[frozenset[str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(frozenset(r), []).append(r)
    for keys, grp in groups.items():
        ins = dialect_insert(model.__table__)
        stmt = ins.on_conflict_do_update(index_elements=conflict_cols,
                                         set_={c: ins.excluded[c] for c in sorted(keys) if c not in conflict_cols})
        conn.execute(stmt, grp)


def dumps(obj: Any) -> str:
    """Deterministic JSON used for every *_json column."""
    return json.dumps(obj, sort_keys=False, ensure_ascii=False, separators=(",", ":"))

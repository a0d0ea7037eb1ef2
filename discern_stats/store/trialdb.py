"""`TrialDB`: the Python entry point to the trial database (SPEC "Public interface")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa

from . import exporting, importing
from ..core.errors import DatabaseURLError
from .db import DEFAULT_DB_URL, LLM, Attempt, Item, Request, Source, Trial, World, init_schema, make_engine, normalise_url


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases, in-memory ones and unparsable URLs)."""
    try:
        u = sa.engine.make_url(normalise_url(url))
    except sa.exc.ArgumentError:
        return None  # make_engine names the problem
    if u.get_backend_name() == "sqlite" and u.database not in (None, "", ":memory:") and not u.database.startswith("file:"):
        return Path(u.database)
    return None


def absolute_url(url: str) -> str:
    """``url`` with a relative SQLite path made absolute (for processes that run in another folder)."""
    path = sqlite_file(url)
    return url if path is None or path.is_absolute() else f"sqlite:///{path.resolve()}"


def _check_sqlite_file(url: str) -> None:
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise DatabaseURLError(f"no database at {url} (file {path.resolve()} does not exist); check "
                               f"the URL (the demo writes sqlite:///demo_out/trials.db)")


class TrialDB:
    """A trial database at a SQLAlchemy URL (SQLite file by default, or PostgreSQL).

    >>> db = TrialDB("sqlite:///trials.db")      # doctest: +SKIP
    >>> df = db.trials("cue")                      # interchange DataFrame  # doctest: +SKIP
    """

    def __init__(self, url: str = DEFAULT_DB_URL, *, create: bool = True, must_exist: bool = False):
        """``must_exist`` (read-only use: info, metrics, export, report): refuse a URL with no database
        behind it instead of creating an empty one (a typo in the URL would otherwise do that)."""
        self.url = url
        if must_exist:
            create = False
            _check_sqlite_file(url)
        self.engine = make_engine(url)
        if must_exist and not sa.inspect(self.engine).has_table(Trial.__tablename__):
            raise DatabaseURLError(f"no discern_stats database at {url} (it has no trial table); check the URL, "
                                   f"or create one with `discern-stats db init --db {url}`")
        if create:
            init_schema(self.engine)

    # -- schema
    def init(self) -> None:
        """Create or migrate the schema (idempotent)."""
        init_schema(self.engine)

    # -- import / export
    def import_items(self, path: str | Path) -> int:
        return importing.import_items(self.engine, path)

    def import_sources(self, path: str | Path, *, fictional: bool = False) -> int:
        return importing.import_sources(self.engine, path, fictional=fictional)

    def import_trials(self, design: str, path: str | Path | pd.DataFrame) -> int:
        return importing.import_trials(self.engine, design, path)

    def trials(self, design: str, *, llms: list[str] | None = None, parse: str = "strict") -> pd.DataFrame:
        """Finished trials of ``design`` ('l2d' or 'cue') as the interchange DataFrame; ``valid`` by the
        headline strict parse, or by the lenient one with ``parse="lenient"`` (a sensitivity analysis:
        every metric function takes either table)."""
        return exporting.export_trials(self.engine, design, llms=llms, parse=parse)

    def export_trials(self, design: str, out: str | Path) -> Path:
        return exporting.export_to_file(self.engine, design, out)

    # -- queries
    def table(self, model: type, where: Any = None) -> pd.DataFrame:
        """Any table as a DataFrame (``db.table(ds.db.Source)``)."""
        q = sa.select(model.__table__)
        if where is not None:
            q = q.where(where)
        with self.engine.connect() as conn:
            return pd.DataFrame(conn.execute(q).mappings().all())

    def trial_log(self, design: str | None = None) -> pd.DataFrame:
        """One row per trial with status, attempts, latency and tokens (for data-quality pages)."""
        T, R, L = Trial.__table__, Request.__table__, LLM.__table__
        q = (sa.select(L.c.name.label("llm"), L.c.is_simulator, R.c.design, R.c.track, R.c.probe, R.c.stage,
                       R.c.intervention, T.c.state, T.c.status, T.c.valid, T.c.parse_error, T.c.error,
                       T.c.strict_valid, T.c.strict_rule, T.c.lenient_valid, T.c.lenient_rule, T.c.lenient_error,
                       T.c.finish_reason, T.c.raw_response, T.c.n_attempts, T.c.latency_ms, T.c.tokens_in,
                       T.c.tokens_out)
             .select_from(T.join(R, T.c.request_id == R.c.id).join(L, T.c.llm_id == L.c.id)))
        if design:
            q = q.where(R.c.design == design)
        with self.engine.connect() as conn:
            return pd.DataFrame(conn.execute(q).mappings().all())

    def attempts(self) -> pd.DataFrame:
        return self.table(Attempt)

    @property
    def display_url(self) -> str:
        """The database URL as it may be printed or stored: the password hidden."""
        return sa.engine.make_url(self.engine.url).render_as_string(hide_password=True)

    def info(self) -> dict[str, Any]:
        """Counts per table, per design and per LLM, with validity rates: ``valid`` / ``validity_rate`` by
        the headline (strict) parse, ``lenient_valid`` / ``lenient_validity_rate`` by the lenient parse
        beside it (`collect.parsing`), both over finished trials. A trial with no lenient parse of its own
        (imported, or collected before both parses were stored) counts as its ``valid`` there."""
        out: dict[str, Any] = {"url": self.display_url}
        with self.engine.connect() as conn:
            out["tables"] = {m.__tablename__: conn.execute(sa.select(sa.func.count()).select_from(m.__table__)).scalar()
                             for m in (LLM, Item, Source, World, Request, Trial, Attempt)}
            out["requests_per_design"] = {d: n for d, n in conn.execute(
                sa.select(Request.design, sa.func.count()).group_by(Request.design))}
            T, R, L = Trial.__table__, Request.__table__, LLM.__table__
            rows = conn.execute(
                sa.select(R.c.design, L.c.name, L.c.is_simulator, T.c.state, sa.func.count().label("n"),
                          sa.func.sum(sa.case((T.c.valid == sa.true(), 1), else_=0)).label("n_valid"),
                          sa.func.sum(sa.case((sa.func.coalesce(T.c.lenient_valid, T.c.valid) == sa.true(), 1),
                                              else_=0)).label("n_lenient"))
                .select_from(T.join(R, T.c.request_id == R.c.id).join(L, T.c.llm_id == L.c.id))
                .group_by(R.c.design, L.c.name, L.c.is_simulator, T.c.state)).all()
        per: dict[tuple[str, str], dict[str, Any]] = {}
        for d, name, sim, state, n, nv, nl in rows:
            e = per.setdefault((d, name), {"design": d, "llm": name, "simulator": bool(sim), "planned": 0,
                                           "done": 0, "valid": 0, "lenient_valid": 0})
            e["planned"] += n
            if state == "done":
                e["done"] += n
                e["valid"] += int(nv or 0)
                e["lenient_valid"] += int(nl or 0)
        for e in per.values():
            e["validity_rate"] = (e["valid"] / e["done"]) if e["done"] else None
            e["lenient_validity_rate"] = (e["lenient_valid"] / e["done"]) if e["done"] else None
        out["per_llm"] = sorted(per.values(), key=lambda e: (e["design"], e["llm"]))
        return out

    def sqlite_path(self) -> Path | None:
        return sqlite_file(self.url)

    def is_empty(self) -> bool:
        """True when no table holds a row (the schema's own version record aside)."""
        with self.engine.connect() as conn:
            return all(conn.execute(sa.select(sa.func.count()).select_from(m.__table__)).scalar() == 0
                       for m in (LLM, Item, Source, World, Request, Trial, Attempt))

    def l2d_sources(self) -> pd.DataFrame:
        """The sources that planned Design A requests name (domain, reliability, popularity, pc1,
        fictional): what tells a report whether its sources are real."""
        with self.engine.connect() as conn:
            used = sa.select(Request.source).where(Request.design == "l2d", Request.source.is_not(None)).distinct()
            q = sa.select(Source.domain, Source.reliability, Source.popularity, Source.pc1,
                          Source.fictional).where(Source.domain.in_(used))
            return pd.DataFrame(conn.execute(q).mappings().all(),
                                columns=["domain", "reliability", "popularity", "pc1", "fictional"])

    def dispose(self) -> None:
        self.engine.dispose()

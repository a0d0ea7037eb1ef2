"""Database hiccups during collection: writes retried with back-off, and a local journal of
answered responses for when the database stays away.

- `with_db_retry`: a write that fails with a connection-level error (PostgreSQL restarting or
  unreachable, SQLite "disk I/O error", "database or disk is full", "database is locked") is retried
  with exponential back-off (tenacity) for up to the spec's ``database_patience_s``; then it raises
  `DatabaseAway`, and the collector stops sending.
- `keep`: the answered responses that could not be written go to a JSON-lines journal file, one
  per database (`journal_path`: ``$DISCERN_JOURNAL_DIR`` or ``~/.local/state/discern_stats/journal``,
  named by a hash of the database URL without its password), flushed and fsynced per batch.
- `load_journal` (run by `planning.prepare_run`): the next run on that database writes the kept
  answers to trials not done since (matched on id and key), with their attempt rows, and renames
  the file to ``*.loaded-<time>`` (kept, never deleted).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

import sqlalchemy as sa
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from ..store.db import Attempt, Run, Trial, upsert_many
from ..store.trialdb import TrialDB

T_ = TypeVar("T_")

# what a database that is restarting, unreachable, full or read-only raises; constraint errors and
# programming errors are bugs and are never retried
OUTAGE_ERRORS = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.DisconnectionError)


class DatabaseAway(Exception):
    """The database did not take a write within the patience of the spec."""


def describe(exc: BaseException) -> str:
    """One line naming a database error (the driver's first line, no SQL, no parameters)."""
    orig = getattr(exc, "orig", None) or exc
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    return f"{type(orig).__name__}: {first}"[:300]


def _is_outage(exc: BaseException) -> bool:
    return isinstance(exc, OUTAGE_ERRORS) or bool(getattr(exc, "connection_invalidated", False))


def with_db_retry(fn: Callable[..., T_], *args: Any, patience_s: float, **kw: Any) -> T_:
    """``fn(*args, **kw)`` retried on database outages (back-off 0.05 s doubling to 2 s) for up to
    ``patience_s`` seconds; then `DatabaseAway` naming the last error."""
    try:
        for attempt in Retrying(stop=stop_after_delay(patience_s), wait=wait_exponential(multiplier=0.05, max=2.0),
                                retry=retry_if_exception(_is_outage), reraise=True):
            with attempt:
                return fn(*args, **kw)
    except OUTAGE_ERRORS as exc:
        raise DatabaseAway(describe(exc)) from None
    raise AssertionError("unreachable")  # pragma: no cover


def journal_dir() -> Path:
    return Path(os.environ.get("DISCERN_JOURNAL_DIR") or Path.home() / ".local" / "state" / "discern_stats" / "journal")



def journal_path(db: TrialDB) -> Path:
    """The journal file of this database (by a hash of its URL without the password)."""
    return journal_dir() / f"{hashlib.sha256(db.display_url.encode()).hexdigest()[:16]}.jsonl"


def _default(o: Any) -> Any:
    if isinstance(o, dt.datetime):
        return {"$dt": o.isoformat()}
    raise TypeError(f"cannot journal {type(o).__name__}")


def _hook(d: dict[str, Any]) -> Any:
    return dt.datetime.fromisoformat(d["$dt"]) if set(d) == {"$dt"} else d


def keep(db: TrialDB, run_id: int, rows: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> Path:
    """Append answered trials (the writer's update and the attempt rows of each) to the journal."""
    path = journal_path(db)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for upd, atts in rows:
            f.write(json.dumps({"db": db.display_url, "run_id": run_id, "trial": upd, "attempts": atts},
                               default=_default, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return path


def keep_run_end(db: TrialDB, run_id: int, status: str) -> None:
    """Note in the journal how a run ended that could not say so in the database (best effort)."""
    try:
        path = journal_path(db)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"db": db.display_url, "run_end": run_id, "status": status,
                                "ended_at": dt.datetime.now(dt.timezone.utc)}, default=_default) + "\n")
    except OSError:
        pass


TRIAL_COLUMNS = ["state", "raw_response", "status", "valid", "answer", "value", "rated_reliability", "choice",
                 "correct", "parse_error", "strict_valid", "strict_rule", "lenient_valid", "lenient_rule",
                 "lenient_error", "finish_reason", "error", "latency_ms", "tokens_in", "tokens_out", "messages_json",
                 "n_attempts", "started_at", "finished_at", "model_reported", "system_fingerprint"]


def load_journal(db: TrialDB) -> int:
    """Write the answers an earlier run kept in this database's journal (see module docstring);
    returns how many trials they completed. A trial done since (another collector answered it) keeps
    its answer."""
    path = journal_path(db)
    if not path.exists():
        return 0
    recs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            recs.append(json.loads(line, object_hook=_hook))
        except json.JSONDecodeError:  # a line cut off by the outage that stopped the run
            continue
    T, Rn = Trial.__table__, Run.__table__
    n = 0
    with db.engine.begin() as conn:
        for r in recs:
            if "run_end" in r:  # a run that could not mark its end
                conn.execute(sa.update(Rn).where(Rn.c.id == r["run_end"], Rn.c.status == "running")
                             .values(status=r["status"], ended_at=r["ended_at"]))
                continue
            upd = r["trial"]
            vals = {c: upd.get(c) for c in TRIAL_COLUMNS if c in upd}
            res = conn.execute(sa.update(T).where(T.c.id == upd["id"], T.c.key == upd["key"], T.c.state != "done")
                               .values(**vals, run_id=r["run_id"], claimed_by=None, lease_until=None)
                               .returning(T.c.id)).first()
            if res is not None:
                n += 1
                upsert_many(conn, Attempt, r["attempts"], ["trial_id", "n"])
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path.rename(path.with_name(f"{path.name}.loaded-{stamp}"))
    if n:  # a run that kept answers here ended with its database away
        conn_runs = {r["run_id"] for r in recs if "trial" in r}
        with db.engine.begin() as conn:
            conn.execute(sa.update(Rn).where(Rn.c.id.in_(conn_runs), Rn.c.status == "running")
                         .values(status="database_away"))
        warnings.warn(f"{n} answered response(s) that an earlier run kept in {path} while the database was away "
                      f"are now in the database", stacklevel=2)
    return n

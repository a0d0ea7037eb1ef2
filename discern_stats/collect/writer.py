"""The writer of a collector: results in batches, only for trials the collector still holds, every
attempt's outcome; through a database outage, retried with back-off, then kept in the journal.

`ResultWriter.run` is one task of the collector's event loop: it takes ``(llm name, trial update,
attempt rows)`` from ``results``, writes a batch in a thread (`_flush`), and updates the
collector's counts and progress line. When the database stays away past the spec's
``database_patience_s`` (`journal.with_db_retry`), the answered trials of the batch go to the
journal (`journal.keep`), the collector stops sending, and the run ends as ``database_away``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from ..store.db import Attempt, Trial, upsert_many
from .journal import DatabaseAway, keep, with_db_retry
from .parsing import PARSE_COLUMNS

COLUMNS = ["state", *PARSE_COLUMNS, "error", "latency_ms", "tokens_in", "tokens_out", "messages_json",
           "n_attempts", "started_at", "finished_at", "model_reported", "system_fingerprint"]


class ResultWriter:
    def __init__(self, collector: Any) -> None:  # a collector.Collector
        self.c = collector
        self.results: asyncio.Queue = asyncio.Queue()
        T = Trial.__table__
        self.stmt = (sa.update(T).where(T.c.id == sa.bindparam("_id"), T.c.claimed_by == collector.me,
                                        T.c.state == "claimed")
                     .values({c: sa.bindparam("_" + c) for c in COLUMNS + ["run_id"]}))

    async def run(self, t0: float) -> None:
        stop = False
        while not stop:
            item = await self.results.get()
            batch = [item]
            await asyncio.sleep(0.05)
            while not self.results.empty():
                batch.append(self.results.get_nowait())
            if None in batch:
                stop = True
                batch = [b for b in batch if b is not None]
            if batch:
                written = await asyncio.to_thread(self.write, batch)
                self._count(batch, written, t0)

    def drain(self) -> None:
        """Write what is queued now (the run is stopping: Ctrl-C); nothing is awaited."""
        batch = []
        while not self.results.empty():
            b = self.results.get_nowait()
            if b is not None:
                batch.append(b)
        if batch:
            self.write(batch)

    def write(self, batch: list[tuple[str, dict[str, Any], list[dict[str, Any]]]]) -> set[int]:
        """Write a batch (retried through an outage); with the database away, keep its answered
        trials in the journal. Returns the ids of the trials written."""
        c = self.c
        params, attempts = [], []
        for _name, upd, atts in batch:
            if upd.get("state") != "lost":
                params.append({"_id": upd["id"], "_run_id": c.result.run_id, **{"_" + k: upd.get(k) for k in COLUMNS}})
            attempts.extend(atts)
        c.leases.release([p["_id"] for p in params])
        if c.database_away is None:
            try:
                return with_db_retry(self._flush, params, attempts, patience_s=c.spec.database_patience_s)
            except DatabaseAway as exc:
                c.database_away = str(exc)
        answered = [(upd, atts) for _n, upd, atts in batch if upd.get("state") == "done"]
        if answered:
            try:
                path = keep(c.db, c.result.run_id, answered)
                c.result.kept += len(answered)
                c.result.journal = str(path)
            except OSError as exc:  # the disk of the journal is full too: say so, never a traceback
                c.result.journal = f"nowhere (the journal could not be written: {exc})"
        return set()

    def _flush(self, params: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> set[int]:
        """Write results of trials this collector still holds and every attempt's outcome; returns the
        ids of the trials written (rowcount of executemany is unreliable across drivers)."""
        T = Trial.__table__
        with self.c.db.engine.begin() as conn:
            ids = [p["_id"] for p in params]
            # held: still claimed, or already written by this run (a retry after a commit whose reply was lost)
            held = {r[0] for r in conn.execute(sa.select(T.c.id).where(
                T.c.id.in_(ids), T.c.claimed_by == self.c.me,
                sa.or_(T.c.state == "claimed", T.c.run_id == self.c.result.run_id)))} if ids else set()
            if params:
                conn.execute(self.stmt, params)
            upsert_many(conn, Attempt, attempts, ["trial_id", "n"])
        return held

    def _count(self, batch: list[tuple[str, dict[str, Any], list[dict[str, Any]]]], written: set[int],
               t0: float) -> None:
        c, res = self.c, self.c.result
        for name, upd, atts in batch:
            c.state[name]["unflushed"] -= 1
            c.state[name]["event"].set()
            e = res.per_llm.setdefault(name, {"done": 0, "valid": 0, "failed": 0, "attempts": 0})
            sent = [a for a in atts if a.get("error_type") != "not_sent"]
            e["attempts"] += len(sent)
            res.attempts += len(sent)
            res.retries += max(0, len(sent) - 1)
            if upd["state"] == "pending" or (c.database_away is not None and upd["id"] not in written):
                res.deferred += 1
            elif upd["id"] not in written:  # the lease was lost: another collector answers this trial
                res.lost_leases += 1
            elif upd["state"] == "done":
                e["done"] += 1
                res.done += 1
                if upd.get("valid"):
                    e["valid"] += 1
                    res.valid += 1
            else:
                e["failed"] += 1
                res.failed += 1
                key = upd.get("cause") or "unknown"
                res.failure_causes[key] = res.failure_causes.get(key, 0) + 1
        if c.shared_done is not None:
            with c.shared_done.get_lock():
                c.shared_done.value += len(batch)
        c._show_progress(t0, retries=res.retries, invalid=res.done - res.valid)

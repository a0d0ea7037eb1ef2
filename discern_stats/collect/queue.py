"""The SQL work queue of collection: claims, leases and their heartbeat (the plan is `collect.planning`).

Collectors claim pending trials in small batches (on PostgreSQL with
``SELECT ... FOR UPDATE SKIP LOCKED``) and hold them under a lease (``lease_until``) that a
heartbeat renews while the collector lives (`LeaseKeeper`). A collector that dies leaves its
claims to expire; on the same host a restarted collector releases claims of dead processes at
once. Results are written only by the claim holder (``WHERE claimed_by = me``), and a collector
that finds a lease gone sends no further attempt of that trial, so no request is paid twice.
Each claim writes the first attempt's row in its own transaction: every request that leaves the
machine has an attempt row, even if the collector is killed before the answer comes back.

Design A posteriors are claimed only after their prior is done: the posterior turn is sent
in the same conversation (system, prior question, the prior's raw answer, posterior turn).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import sqlalchemy as sa

from ..store.db import Attempt, Request, Run, Trial, insert_ignore_many, utcnow
from ..store.trialdb import TrialDB

log = logging.getLogger(__name__)

NO_OUTCOME = "no_outcome"
NOT_SENT = "not_sent"  # attempt rows of a first attempt that never left (its claim wrote the row)
NO_OUTCOME_TEXT = "no outcome recorded: the collector stopped (or lost its lease) after claiming this attempt"


def collector_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _dead_here(holders: list[str]) -> list[str]:
    """Collector ids (host:pid:uuid) of processes on this host that no longer exist."""
    host = socket.gethostname()
    dead = []
    for h in holders:
        parts = (h or "").split(":")
        if len(parts) >= 2 and parts[0] == host and parts[1].isdigit():
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                dead.append(h)
            except PermissionError:
                pass
    return dead


def mark_interrupted_runs(db: TrialDB) -> int:
    """Runs still 'running' whose collector process on this host is gone become 'interrupted'."""
    Rn = Run.__table__
    with db.engine.begin() as conn:
        dead = _dead_here([r[0] for r in conn.execute(sa.select(Rn.c.host).where(Rn.c.status == "running"))])
        if not dead:
            return 0
        return len(conn.execute(sa.update(Rn).where(Rn.c.status == "running", Rn.c.host.in_(dead))
                                .values(status="interrupted").returning(Rn.c.id)).fetchall())


def release_dead_claims(db: TrialDB) -> int:
    """Return to 'pending' the claims of collectors on this host whose process is gone."""
    T = Trial.__table__
    with db.engine.begin() as conn:
        dead = _dead_here([r[0] for r in conn.execute(sa.select(T.c.claimed_by).where(T.c.state == "claimed")
                                                      .distinct())])
        if not dead:
            return 0
        res = conn.execute(sa.update(T).where(T.c.state == "claimed", T.c.claimed_by.in_(dead))
                           .values(state="pending", claimed_by=None, lease_until=None).returning(T.c.id))
        return len(res.fetchall())


def claim(db: TrialDB, llm_id: int, me: str, n: int, lease_s: float, retry_failed: bool = False) -> list[dict[str, Any]]:
    """Atomically claim up to ``n`` eligible trials of one LLM and return what is needed to run them."""
    claim_ids, jobs, priors, last_attempt = _claim_statements(retry_failed)
    now = utcnow()
    with db.engine.begin() as conn:
        ids = [r[0] for r in conn.execute(claim_ids, {"b_llm": llm_id, "b_now": now, "b_n": n, "b_me": me,
                                                      "b_lease": now + dt.timedelta(seconds=lease_s)})]
        if not ids:
            return []
        out = [dict(r) for r in conn.execute(jobs, {"b_ids": ids}).mappings().all()]
        # the first attempt of each claimed trial gets its row now, in the claim's transaction, so a
        # request that leaves the machine always has one (a later kill leaves it with no outcome)
        last = dict(conn.execute(last_attempt, {"b_ids": ids}).all())
        for r in out:
            r["first_attempt"] = max(int(last.get(r["id"]) or 0), int(r["n_attempts"] or 0)) + 1
        insert_ignore_many(conn, Attempt, [{"trial_id": r["id"], "n": r["first_attempt"], "collector": me,
                                            "started_at": now, "ok": False, "error_type": NO_OUTCOME,
                                            "error": NO_OUTCOME_TEXT} for r in out], ["trial_id", "n"])
        parents = [r["parent_key"] for r in out if r["parent_key"]]
        if parents:
            prior = {(r.key, r.repeat): r for r in conn.execute(priors, {"b_parents": sorted(set(parents)),
                                                                         "b_llm": llm_id})}
            for r in out:
                if r["parent_key"]:
                    p = prior[(r["parent_key"], r["repeat"])]
                    r["prior_messages_json"], r["prior_raw"] = p.messages_json, p.raw_response
    return out


def release_orphan_claims(db: TrialDB, llm_id: int, me: str) -> int:
    """Return to 'pending' the trials of ``llm_id`` claimed by ``me`` that this collector does not
    hold: a claim whose commit reached the database while the reply was lost (the connection
    dropped at the commit; `with_db_retry` then claimed other trials). Called only when the
    collector has none of this LLM's trials in flight, so every such claim is an orphan. Their
    first-attempt rows (written in the claim's transaction) say they were not sent."""
    T, A = Trial.__table__, Attempt.__table__
    with db.engine.begin() as conn:
        ids = [r[0] for r in conn.execute(sa.update(T).where(T.c.llm_id == llm_id, T.c.claimed_by == me,
                                                            T.c.state == "claimed")
                                          .values(state="pending", claimed_by=None, lease_until=None)
                                          .returning(T.c.id))]
        if ids:
            conn.execute(sa.update(A).where(A.c.trial_id.in_(ids), A.c.collector == me, A.c.error_type == NO_OUTCOME)
                         .values(error_type=NOT_SENT, error=ORPHAN_CLAIM_TEXT))
    return len(ids)


ORPHAN_CLAIM_TEXT = "not sent: the database connection dropped as the claim committed, and the claim was given back"


def count_claimable(db: TrialDB, llm_id: int, retry_failed: bool = False) -> int:
    """Trials of ``llm_id`` that `claim` would take if no other transaction held a lock on them (the
    same eligibility, without ``SKIP LOCKED``: a plain read sees the committed state and waits on no
    lock). Where `claim` finds nothing but this is not 0, another database session holds those rows
    in an open transaction: another collector's claim about to commit, or the backend of a dropped
    connection that the server has not yet noticed (idle in transaction; its changes roll back when
    it does, and the trials are pending again)."""
    T, R = Trial.__table__, Request.__table__
    with db.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(T.join(R, T.c.request_id == R.c.id))
                                .where(*_eligible(utcnow(), retry_failed, llm_id))).scalar_one())


def _eligible(now: Any, retry_failed: bool, llm_id: Any) -> list[Any]:
    """The WHERE clauses of a claimable trial of ``llm_id`` (a row of trial JOIN request): pending, or
    claimed under a lease that ended before ``now`` (or failed, with ``retry_failed``); a posterior
    only once its prior is done."""
    T, R = Trial.__table__, Request.__table__
    P, PR = T.alias("p"), R.alias("pr")
    states = [T.c.state == "pending", sa.and_(T.c.state == "claimed", T.c.lease_until < now)]
    if retry_failed:
        states.append(T.c.state == "failed")
    prior_done = (sa.select(P.c.id).select_from(P.join(PR, P.c.request_id == PR.c.id))
                  .where(PR.c.key == R.c.parent_key, P.c.llm_id == T.c.llm_id, P.c.repeat == T.c.repeat,
                         P.c.state == "done").exists())
    return [T.c.llm_id == llm_id, sa.or_(*states), sa.or_(R.c.stage.is_(None), R.c.stage != "posterior", prior_done)]


@functools.cache
def _claim_statements(retry_failed: bool) -> tuple[Any, Any, Any, Any]:
    """The statements of `claim`, built once with bound parameters (SQLAlchemy then reuses
    their compiled form; building them took a few per cent of the collector's CPU):
    claim up to ``n`` eligible trials of ``llm_id`` (``FOR UPDATE SKIP LOCKED`` on PostgreSQL;
    a posterior only once its prior is done), read the claimed jobs, read the priors' answers,
    read the last attempt number of each claimed trial."""
    T, R = Trial.__table__, Request.__table__
    P, PR = T.alias("p"), R.alias("pr")
    now = sa.bindparam("b_now", type_=T.c.lease_until.type)  # b_: column names are reserved in UPDATE
    sub = (sa.select(T.c.id).select_from(T.join(R, T.c.request_id == R.c.id))
           .where(*_eligible(now, retry_failed, sa.bindparam("b_llm")))
           .order_by(T.c.id).limit(sa.bindparam("b_n")).with_for_update(skip_locked=True, of=T))
    claim_ids = (sa.update(T).where(T.c.id.in_(sub.scalar_subquery()))
                 .values(state="claimed", claimed_by=sa.bindparam("b_me"), lease_until=sa.bindparam("b_lease"))
                 .returning(T.c.id))
    jobs = (sa.select(T.c.id, T.c.key, T.c.repeat, T.c.n_attempts, R.c.key.label("request_key"), R.c.messages_json,
                      R.c.answer_format, R.c.options_json, R.c.gold, R.c.stage, R.c.strategy, R.c.parent_key)
            .select_from(T.join(R, T.c.request_id == R.c.id))
            .where(T.c.id.in_(sa.bindparam("b_ids", expanding=True))).order_by(T.c.id))
    priors = (sa.select(PR.c.key, PR.c.messages_json, P.c.raw_response, P.c.repeat)
              .select_from(P.join(PR, P.c.request_id == PR.c.id))
              .where(PR.c.key.in_(sa.bindparam("b_parents", expanding=True)), P.c.llm_id == sa.bindparam("b_llm"),
                     P.c.state == "done"))
    A = Attempt.__table__
    last_attempt = (sa.select(A.c.trial_id, sa.func.max(A.c.n))
                    .where(A.c.trial_id.in_(sa.bindparam("b_ids", expanding=True))).group_by(A.c.trial_id))
    return claim_ids, jobs, priors, last_attempt


def awake_clock() -> float:
    """Seconds on a clock that keeps running while the process is stopped (SIGSTOP) and while the
    machine sleeps (Linux CLOCK_BOOTTIME; elsewhere time.monotonic, which counts sleep on macOS):
    what a lease, measured by the database's wall clock, has been running for."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


class LeaseKeeper:
    """The leases of one collector: the trials it holds (claimed, result not yet written), a
    heartbeat thread that renews them every lease_s / 3 seconds (a thread of its own, so a busy
    event loop cannot starve it), and the trials whose lease a renewal found gone (it expired
    first and another collector took the trial): no further attempt of those is sent.

    What the heartbeat last saw is stale after a pause (a stopped process, a laptop that slept):
    `still_held` is asked before each send. A trial is safe to send while the time since its last
    successful renewal (or its claim; `awake_clock`, which runs through pauses) is under
    ``lease_s - margin`` with margin = lease_s / 3, the heartbeat's period; past that, the lease is
    renewed for that trial at once, and the trial is given up if the renewal finds it gone."""

    def __init__(self, db: TrialDB, me: str, lease_s: float) -> None:
        self.db, self.me, self.lease_s = db, me, lease_s
        self.held: set[int] = set()
        self.lost: set[int] = set()
        self.renewed_at: dict[int, float] = {}  # trial id -> awake_clock() when its lease was last set
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: str | None = None  # the heartbeat's last error, while it keeps failing

    def hold(self, jobs: list[dict[str, Any]], claimed_at: float) -> None:
        """``claimed_at``: `awake_clock` read before the claim's transaction began."""
        with self._lock:
            for j in jobs:
                self.held.add(j["id"])
                self.renewed_at[j["id"]] = claimed_at

    def release(self, ids: list[int]) -> None:
        """Before a result is written: the trial is no longer this heartbeat's business."""
        with self._lock:
            self.held.difference_update(ids)
            for i in ids:
                self.renewed_at.pop(i, None)

    def is_lost(self, trial_id: int) -> bool:
        return trial_id in self.lost

    def fresh(self, trial_id: int) -> bool:
        """The trial's lease has at least a heartbeat period (lease_s / 3) left, by this collector's clock."""
        with self._lock:
            at = self.renewed_at.get(trial_id)
        return at is not None and awake_clock() - at < self.lease_s * 2 / 3

    def still_held(self, trial_id: int) -> bool:
        """Right before a send (in a thread: it may ask the database): False if the trial is no longer this
        collector's (lost at a heartbeat, or found gone by a renewal now)."""
        if trial_id in self.lost:
            return False
        if self.fresh(trial_id):
            return True
        t = awake_clock()
        T = Trial.__table__
        with self.db.engine.begin() as conn:
            ok = conn.execute(sa.update(T).where(T.c.id == trial_id, T.c.claimed_by == self.me, T.c.state == "claimed")
                              .values(lease_until=utcnow() + dt.timedelta(seconds=self.lease_s))
                              .returning(T.c.id)).first() is not None
        with self._lock:
            if ok:
                self.renewed_at[trial_id] = t
            else:
                self.lost.add(trial_id)
                self.held.discard(trial_id)
        return ok

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, daemon=True, name="lease-heartbeat")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def renew(self) -> None:
        """One heartbeat: extend every lease this collector still has; note the ones that are gone."""
        T = Trial.__table__
        with self._lock:
            before = set(self.held)
        if not before:
            return
        t = awake_clock()
        with self.db.engine.begin() as conn:
            renewed = {r[0] for r in conn.execute(
                sa.update(T).where(T.c.claimed_by == self.me, T.c.state == "claimed")
                .values(lease_until=utcnow() + dt.timedelta(seconds=self.lease_s)).returning(T.c.id))}
        with self._lock:
            gone = (before - renewed) & self.held
            self.lost.update(gone)
            self.held.difference_update(gone)
            for i in renewed & self.held:
                self.renewed_at[i] = t

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 - a database hiccup: logged once, tried again at the next beat
                what = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                if self._failing is None:
                    log.warning("lease heartbeat failed (%s); retrying every %.3g s; each send checks its own "
                                "lease meanwhile", what[:300], self.lease_s / 3)
                self._failing = what
            else:
                if self._failing is not None:
                    log.warning("lease heartbeat works again")
                self._failing = None

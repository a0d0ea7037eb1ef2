"""The SQL work queue of collection: planning, claims, leases and their heartbeat.

The plan (one ``trial`` row per LLM x request x repeat, unique ``trial.key``) is inserted
with INSERT ... ON CONFLICT DO NOTHING, so re-running a spec never duplicates a trial.
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
import os
import socket
import threading
import uuid
from typing import Any

import sqlalchemy as sa

from ..core.keys import trial_key
from ..store.db import LLM, Attempt, Request, Run, Trial, insert_ignore, insert_ignore_many, utcnow
from ..core.errors import SpecError
from ..store.trialdb import TrialDB
from .providers import validate_llms
from .spec import RunSpec

NO_OUTCOME = "no_outcome"
NO_OUTCOME_TEXT = "no outcome recorded: the collector stopped (or lost its lease) after claiming this attempt"


def collector_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def preflight(db: TrialDB, spec: RunSpec) -> None:
    """Every check that can refuse a run, before its first write (a refused run leaves the database
    as it was): the LLMs' settings, keys, profiles and URLs (`providers.validate_llms`), LLM names
    bound to other settings, and planned requests for the spec."""
    validate_llms(spec)
    _check_llm_names(db, spec)
    _planned_requests(db, spec)


def _check_llm_names(db: TrialDB, spec: RunSpec) -> None:
    with db.engine.connect() as conn:
        got = {r.name: r.params_json for r in conn.execute(sa.select(LLM.name, LLM.params_json)
                                                           .where(LLM.name.in_([m.name for m in spec.llms])))}
    for m in spec.llms:
        if m.name in got and got[m.name] != m.params_json():
            raise SpecError(f"LLM name {m.name!r} is already in the database with other settings "
                            f"({got[m.name]}); give these settings a new name")


def ensure_llms(db: TrialDB, spec: RunSpec) -> dict[str, int]:
    _check_llm_names(db, spec)
    rows = [{"name": m.name, "provider": m.kind, "model_id": m.model, "base_url": m.base_url,
             "params_json": m.params_json(), "is_simulator": m.kind == "synthetic"} for m in spec.llms]
    with db.engine.begin() as conn:
        insert_ignore(conn, LLM, rows, ["name"])
        got = {r.name: r for r in conn.execute(sa.select(LLM.name, LLM.id, LLM.params_json)
                                               .where(LLM.name.in_([m.name for m in spec.llms])))}
    _check_llm_names(db, spec)  # another collector may have bound a name in between
    return {n: r.id for n, r in got.items()}


def _request_filter(spec: RunSpec) -> list[Any]:
    R = Request.__table__
    cond = [R.c.design == spec.design]
    if spec.design == "cue":
        cond.append(R.c.intervention.in_(spec.interventions or ["C0"]))
    elif spec.strategies:
        cond.append(R.c.strategy.in_(spec.strategies))
    return cond


def _planned_requests(db: TrialDB, spec: RunSpec) -> list[Any]:
    R = Request.__table__
    with db.engine.connect() as conn:
        reqs = conn.execute(sa.select(R.c.id, R.c.key).where(*_request_filter(spec)).order_by(R.c.id)).all()
    if not reqs:
        raise SpecError(f"no planned {spec.design} requests in the database for this spec; run "
                        f"`discern-stats design {spec.design}` first")
    return reqs


def plan_trials(db: TrialDB, spec: RunSpec, llm_ids: dict[str, int]) -> int:
    """Insert the plan's trial rows (idempotent). Returns the number of planned trials."""
    R, T = Request.__table__, Trial.__table__
    cond = _request_filter(spec)
    reqs = _planned_requests(db, spec)
    total = 0
    with db.engine.begin() as conn:
        for m in spec.llms:
            total += len(reqs) * spec.repeats
            have = conn.execute(sa.select(sa.func.count()).select_from(T.join(R, T.c.request_id == R.c.id))
                                .where(T.c.llm_id == llm_ids[m.name], T.c.repeat < spec.repeats, *cond)).scalar()
            if have == len(reqs) * spec.repeats:  # planned before (a resume): nothing to insert
                continue
            pj = m.params_json()
            rows = [{"key": trial_key(m.name, pj, key, rep), "request_id": rid, "llm_id": llm_ids[m.name],
                     "repeat": rep, "state": "pending"} for rep in range(spec.repeats) for rid, key in reqs]
            insert_ignore(conn, Trial, rows, ["key"])
    return total


def open_trials(db: TrialDB, spec: RunSpec, llm_ids: dict[str, int]) -> int:
    """Trials of the spec's LLMs still to answer: pending or claimed (and failed, with ``retry_failed``)."""
    T = Trial.__table__
    states = [T.c.state == "pending", T.c.state == "claimed"] + ([T.c.state == "failed"] if spec.retry_failed else [])
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(T)
                            .where(T.c.llm_id.in_(list(llm_ids.values())), sa.or_(*states))).scalar()


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
    states = [T.c.state == "pending", sa.and_(T.c.state == "claimed", T.c.lease_until < now)]
    if retry_failed:
        states.append(T.c.state == "failed")
    prior_done = (sa.select(P.c.id).select_from(P.join(PR, P.c.request_id == PR.c.id))
                  .where(PR.c.key == R.c.parent_key, P.c.llm_id == T.c.llm_id, P.c.repeat == T.c.repeat,
                         P.c.state == "done").exists())
    sub = (sa.select(T.c.id).select_from(T.join(R, T.c.request_id == R.c.id))
           .where(T.c.llm_id == sa.bindparam("b_llm"), sa.or_(*states),
                  sa.or_(R.c.stage.is_(None), R.c.stage != "posterior", prior_done))
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


class LeaseKeeper:
    """The leases of one collector: the trials it holds (claimed, result not yet written), a
    heartbeat thread that renews them every lease_s / 3 seconds (a thread of its own, so a busy
    event loop cannot starve it), and the trials whose lease a renewal found gone (it expired
    first and another collector took the trial): no further attempt of those is sent."""

    def __init__(self, db: TrialDB, me: str, lease_s: float) -> None:
        self.db, self.me, self.lease_s = db, me, lease_s
        self.held: set[int] = set()
        self.lost: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, jobs: list[dict[str, Any]]) -> None:
        with self._lock:
            self.held.update(j["id"] for j in jobs)

    def release(self, ids: list[int]) -> None:
        """Before a result is written: the trial is no longer this heartbeat's business."""
        with self._lock:
            self.held.difference_update(ids)

    def is_lost(self, trial_id: int) -> bool:
        return trial_id in self.lost

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
        with self.db.engine.begin() as conn:
            renewed = {r[0] for r in conn.execute(
                sa.update(T).where(T.c.claimed_by == self.me, T.c.state == "claimed")
                .values(lease_until=utcnow() + dt.timedelta(seconds=self.lease_s)).returning(T.c.id))}
        with self._lock:
            gone = (before - renewed) & self.held
            self.lost.update(gone)
            self.held.difference_update(gone)

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.renew()
            except Exception:  # noqa: BLE001 - a database hiccup: try again at the next beat
                continue

"""Resumable, idempotent, concurrent collection (SPEC "Collection layer").

The plan (one ``trial`` row per LLM x request x repeat, unique ``trial.key``) is inserted
with INSERT ... ON CONFLICT DO NOTHING, so re-running a spec never duplicates a trial.
Collectors claim pending trials in small batches — on PostgreSQL with
``SELECT ... FOR UPDATE SKIP LOCKED`` — and hold them under a lease (``lease_until``). A
collector that dies leaves its claims to expire; on the same host a restarted collector
releases claims of dead processes at once. Results are written only by the claim holder
(``WHERE claimed_by = me``), so no request is answered twice.

Design A posteriors are claimed only after their prior is done: the posterior turn is sent
in the same conversation (system, prior question, the prior's raw answer, posterior turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import gc
import json
import os
import queue
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from ..db import (LLM, Attempt, Item, Request, Run, Source, Trial, dumps, insert_ignore, insert_ignore_many,
                  upsert_many, utcnow)
from ..errors import CollectorError, SpecError
from ..interchange import trial_key
from ..trialdb import TrialDB
from .parsing import failure_status, parse
from .ratelimit import AdaptiveLimit, retry_after_s
from .providers import (build_chat_model, close_chat_model, endpoint, error_type, http_status, is_retryable,
                        validate_llms)
from .spec import LLMSpec, RetryPolicy, RunSpec


NO_OUTCOME = "no_outcome"
NO_OUTCOME_TEXT = "no outcome recorded: the collector stopped (or lost its lease) after claiming this attempt"


def collector_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def code_version() -> str:
    from .. import __version__
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(__file__)).stdout.strip()
    except Exception:
        rev = ""
    return f"{__version__}" + (f"+{rev}" if rev else "")


@dataclass
class CollectResult:
    run_id: int
    planned: int
    sent: int = 0
    done: int = 0
    valid: int = 0
    failed: int = 0
    attempts: int = 0
    retries: int = 0
    lost_leases: int = 0
    elapsed_s: float = 0.0
    per_llm: dict[str, dict[str, int]] = field(default_factory=dict)
    failure_causes: dict[str, int] = field(default_factory=dict)  # "llm: cause at host:port" -> trials

    @property
    def rate(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s else 0.0


# ---------------------------------------------------------------- planning
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


def _to_messages(job: dict[str, Any]) -> list[BaseMessage]:
    def conv(ms: list[dict[str, str]]) -> list[BaseMessage]:
        return [SystemMessage(m["content"]) if m["role"] == "system" else
                AIMessage(m["content"]) if m["role"] == "assistant" else HumanMessage(m["content"]) for m in ms]
    msgs = json.loads(job["messages_json"] or "[]")
    if job.get("parent_key"):
        prior = json.loads(job["prior_messages_json"] or "[]")
        return conv(prior) + [AIMessage(job["prior_raw"] or "")] + conv(msgs)
    return conv(msgs)


def _redact(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


# ---------------------------------------------------------------- execution
async def _with_retries(once: Any, r: RetryPolicy) -> Any:
    """``await once()`` with tenacity's retries (exponential backoff with jitter) on retryable errors;
    a wait is never shorter than the server's Retry-After.

    The first attempt runs outside tenacity, since most requests succeed at once and tenacity's
    machinery cost about 7 % of the collector's CPU per request (py-spy). After a retryable
    failure, tenacity runs the remaining ``max_attempts - 1`` attempts with the same waits as
    if it had run from the start: wait n follows attempt n, for n = 1, 2, ...
    """
    try:
        return await once()
    except Exception as exc:  # noqa: BLE001 - re-raised unless retryable
        if r.max_attempts <= 1 or not is_retryable(exc):
            raise
        first_error = exc
    backoff = wait_exponential_jitter(initial=r.initial_wait_s, max=r.max_wait_s, jitter=r.jitter_s)

    def wait(state: Any) -> float:  # tenacity's attempt k is attempt k + 1 of the request
        exc = state.outcome.exception() if state.outcome is not None else None
        return max(backoff(SimpleNamespace(attempt_number=state.attempt_number + 1)),
                   (retry_after_s(exc) or 0.0) if exc is not None else 0.0)

    await asyncio.sleep(max(backoff(SimpleNamespace(attempt_number=1)), retry_after_s(first_error) or 0.0))
    return await AsyncRetrying(stop=stop_after_attempt(r.max_attempts - 1), wait=wait,
                               retry=retry_if_exception(is_retryable), reraise=True)(once)


class LeaseLost(Exception):
    """The collector no longer holds the trial (its lease expired and another collector claimed it)."""


class Collector:
    def __init__(self, db: TrialDB, spec: RunSpec, *, me: str | None = None, progress: bool = True,
                 max_requests: int | None = None, plan: bool = True, shared_done: Any = None,
                 others_done: list[Any] | None = None, shared_sent: Any = None, borrow: int = 0,
                 lenders_ready: Any = None, ready: Any = None):
        self.db, self.spec = db, spec
        # `workers: N`: until ``lenders_ready()`` says the worker processes collect, the parent runs
        # ``borrow`` extra slots per LLM (their share of the concurrency), so their start-up costs no
        # throughput; ``ready`` (a multiprocessing.Value) is how a worker process says it collects
        self.borrow, self.lenders_ready, self.ready = borrow, lenders_ready, ready
        self.plan = plan  # False in worker processes: the parent has planned
        self.shared_done = shared_done  # multiprocessing.Value this collector adds its finished trials to
        self.others_done = others_done or []  # the other workers' counters, shown in this progress bar
        self.shared_sent = shared_sent  # multiprocessing.Value: requests sent by all workers (shared budget)
        self.me = me or collector_id()
        self.show_progress = progress
        self.budget = max_requests if max_requests is not None else spec.budget.max_requests
        self.secrets = [os.environ.get(m.api_key_env, "") for m in spec.llms if m.api_key_env]
        self.results: asyncio.Queue = asyncio.Queue()
        self.sent = 0
        self.state: dict[str, dict[str, Any]] = {}
        # leases: ids of the trials this collector holds (claimed, result not yet written), and those
        # whose lease a heartbeat found gone (another collector may have claimed them)
        self.held: set[int] = set()
        self.lost: set[int] = set()
        self._lease_lock = threading.Lock()

    def _hold(self, jobs: list[dict[str, Any]]) -> None:
        with self._lease_lock:
            self.held.update(j["id"] for j in jobs)

    def _release(self, ids: list[int]) -> None:
        with self._lease_lock:
            self.held.difference_update(ids)

    def _heartbeat(self, stop: threading.Event) -> None:
        """Renew the lease of every trial this collector holds, every lease_s / 3 seconds (a thread of
        its own, so a busy event loop cannot starve it); a trial the renewal no longer finds claimed
        by this collector has lost its lease (it expired first, and another collector took it)."""
        T = Trial.__table__
        every = self.spec.lease_s / 3
        while not stop.wait(every):
            with self._lease_lock:
                before = set(self.held)
            if not before:
                continue
            try:
                with self.db.engine.begin() as conn:
                    renewed = {r[0] for r in conn.execute(
                        sa.update(T).where(T.c.claimed_by == self.me, T.c.state == "claimed")
                        .values(lease_until=utcnow() + dt.timedelta(seconds=self.spec.lease_s)).returning(T.c.id))}
            except Exception:  # noqa: BLE001 - a database hiccup: try again at the next beat
                continue
            with self._lease_lock:
                gone = (before - renewed) & self.held
                self.lost.update(gone)
                self.held.difference_update(gone)

    def _note_failure(self, upd: dict[str, Any]) -> None:
        key = upd.get("cause") or "unknown"
        self.result.failure_causes[key] = self.result.failure_causes.get(key, 0) + 1

    def _record_attempt_start(self, a: dict[str, Any]) -> None:
        with self.db.engine.begin() as conn:
            insert_ignore_many(conn, Attempt, [a], ["trial_id", "n"])

    def _knowledge(self) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
        with self.db.engine.connect() as conn:
            items = {r.question: float(r.truth) for r in conn.execute(sa.select(Item.question, Item.truth)) if r.question}
            srcs = {r.domain: (float(r.reliability), float(r.popularity if r.popularity is not None else 0.5))
                    for r in conn.execute(sa.select(Source.domain, Source.reliability, Source.popularity))}
        return items, srcs

    async def run(self) -> CollectResult:
        spec = self.spec
        llm_ids = ensure_llms(self.db, spec)
        planned = plan_trials(self.db, spec, llm_ids) if self.plan else 0
        if self.plan:
            release_dead_claims(self.db)
            mark_interrupted_runs(self.db)
        with self.db.engine.begin() as conn:
            run_id = conn.execute(sa.insert(Run.__table__).values(
                spec_name=spec.name, spec_json=spec.model_dump_json(), code_version=code_version(),
                started_at=utcnow(), status="running", host=self.me).returning(Run.__table__.c.id)).scalar_one()
        self.result = CollectResult(run_id=run_id, planned=planned)
        todo = open_trials(self.db, spec, llm_ids)
        if self.budget is not None:
            todo = min(todo, self.budget)
        knowledge, src_knowledge = self._knowledge() if spec.design == "l2d" else ({}, {})
        models = {m.name: build_chat_model(m, spec, knowledge=knowledge, source_knowledge=src_knowledge)
                  for m in spec.llms}
        t0 = time.perf_counter()
        progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]:.1f} req/s"), TextColumn("retries {task.fields[retries]}"),
                            TextColumn("invalid {task.fields[invalid]}"), TextColumn("429s {task.fields[rate_limited]}"),
                            TextColumn("in flight ≤ {task.fields[limit]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                            disable=not self.show_progress, transient=False)
        beat_stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(beat_stop,), daemon=True, name="lease-heartbeat")
        beat.start()
        with progress:
            self.task = progress.add_task(f"collect {spec.name}", total=todo, rate=0.0, retries=0, invalid=0,
                                          rate_limited=0, limit=spec.concurrency * len(spec.llms))
            self.progress = progress
            writer = asyncio.create_task(self._writer(t0))
            if self.ready is not None:
                with self.ready.get_lock():
                    self.ready.value += 1
            ticker = asyncio.create_task(self._tick(t0)) if self.others_done else None
            try:
                await asyncio.gather(*(self._llm_loop(m, llm_ids[m.name], models[m.name]) for m in spec.llms))
                await self.results.put(None)
                await writer
            finally:
                if ticker is not None:
                    ticker.cancel()
                beat_stop.set()
                for model in models.values():
                    await close_chat_model(model)
        self.result.elapsed_s = time.perf_counter() - t0
        self.result.sent = self.sent
        with self.db.engine.begin() as conn:
            conn.execute(sa.update(Run.__table__).where(Run.__table__.c.id == run_id)
                         .values(ended_at=utcnow(), status="finished"))
        return self.result

    def _finished(self) -> int:
        return self.result.done + self.result.failed + sum(c.value for c in self.others_done)

    def _show_progress(self, t0: float, **fields: Any) -> None:
        el = time.perf_counter() - t0
        n = self._finished()
        limits = [st["limit"] for st in self.state.values() if "limit" in st]
        if limits:  # 429s seen and the adaptive in-flight limits, all LLMs of this process together
            fields.update(rate_limited=sum(x.rate_limited_n for x in limits), limit=sum(int(x.limit) for x in limits))
        self.progress.update(self.task, completed=n, rate=n / el if el else 0.0, **fields)

    async def _tick(self, t0: float) -> None:
        """Refresh the progress bar with the other worker processes' counts."""
        while True:
            await asyncio.sleep(0.5)
            self._show_progress(t0)

    def _take_budget(self, n: int) -> int:
        """Reserve up to ``n`` requests of the budget (shared by all worker processes) and return how
        many were granted. The reservation counts at once, so two LLM loops (or processes) never read
        the same unspent budget across the await of a claim; `_return_budget` gives back what the
        claim did not use."""
        if self.budget is None:
            self.sent += n
            return n
        if self.shared_sent is None:
            granted = max(0, min(n, self.budget - self.sent))
            self.sent += granted
            return granted
        with self.shared_sent.get_lock():
            granted = max(0, min(n, self.budget - self.shared_sent.value))
            self.shared_sent.value += granted
        self.sent += granted
        return granted

    def _return_budget(self, n: int) -> None:
        if n <= 0:
            return
        self.sent -= n
        if self.budget is not None and self.shared_sent is not None:
            with self.shared_sent.get_lock():
                self.shared_sent.value -= n

    def _budget_left(self) -> bool:
        if self.budget is None:
            return True
        used = self.shared_sent.value if self.shared_sent is not None else self.sent
        return used < self.budget

    async def _llm_loop(self, m: LLMSpec, llm_id: int, model: Any) -> None:
        """Claim -> run -> write for one LLM. ``running`` bounds concurrency; ``unflushed``
        counts results not yet in the database (a Design A posterior becomes claimable only
        once its prior is written)."""
        spec = self.spec
        queue: asyncio.Queue = asyncio.Queue()
        st = self.state[m.name] = {"running": 0, "unflushed": 0, "event": asyncio.Event()}

        async def worker(borrowed: bool) -> None:
            while True:
                if borrowed and self.lenders_ready():  # the lending workers collect now: hand the slot back
                    st["slots"] -= 1
                    return
                job = await queue.get()
                if job is None:
                    return
                try:
                    await self._execute(m, model, job)
                finally:
                    st["running"] -= 1
                    st["event"].set()

        borrow = self.borrow if self.lenders_ready is not None and not self.lenders_ready() else 0
        st["slots"] = spec.concurrency + borrow
        st["limit"] = AdaptiveLimit(st["slots"])
        workers = [asyncio.create_task(worker(i >= spec.concurrency)) for i in range(st["slots"])]
        while True:
            # claim ahead: top the queue up to 3x the slots whenever it holds less than 2x, so that
            # the database round trip of a claim is hidden behind queued work
            slots = st["slots"]
            want = self._take_budget(max(4, 3 * slots) - st["running"]) if st["running"] < 2 * slots else 0
            jobs = []
            if want > 0:
                try:
                    jobs = await asyncio.to_thread(claim, self.db, llm_id, self.me, want, spec.lease_s,
                                                   spec.retry_failed)
                finally:
                    self._return_budget(want - len(jobs))
            if jobs:
                self._hold(jobs)
                st["running"] += len(jobs)
                st["unflushed"] += len(jobs)
                for j in jobs:
                    queue.put_nowait(j)
                continue
            if st["running"] == 0 and st["unflushed"] == 0 and (want > 0 or not self._budget_left()):
                break
            st["event"].clear()
            try:
                await asyncio.wait_for(st["event"].wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass
        for _ in workers:
            queue.put_nowait(None)
        await asyncio.gather(*workers)

    async def _execute(self, m: LLMSpec, model: Any, job: dict[str, Any]) -> None:
        spec = self.spec
        messages = _to_messages(job)
        attempts: list[dict[str, Any]] = []
        n0 = int(job["first_attempt"]) - 1  # the claim wrote the first attempt's row
        started = utcnow()

        limit = self.state[m.name]["limit"]

        async def once() -> Any:
            await limit.acquire()  # the adaptive in-flight limit of this LLM
            try:
                if job["id"] in self.lost:  # another collector holds this trial now: do not pay for it twice
                    raise LeaseLost(f"the lease on trial {job['id']} was lost")
                a = {"trial_id": job["id"], "n": n0 + len(attempts) + 1, "collector": self.me,
                     "started_at": utcnow(), "ok": False, "error_type": NO_OUTCOME, "error": NO_OUTCOME_TEXT}
                if attempts:  # a retry: its row goes in before the request leaves
                    await asyncio.to_thread(self._record_attempt_start, a)
                attempts.append(a)
                t = time.perf_counter()
                try:
                    out = await asyncio.wait_for(model.ainvoke(messages), timeout=spec.timeout_s)
                except BaseException as exc:  # noqa: BLE001 - every error is recorded
                    text = f"{type(exc).__name__}: {exc}"
                    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) and not str(exc):
                        text = f"TimeoutError: no answer within timeout_s={spec.timeout_s:g} s from {endpoint(m)}"
                    kind = error_type(exc)
                    a.update(latency_ms=1000 * (time.perf_counter() - t), ok=False, error_type=kind,
                             error=_redact(text, self.secrets)[:2000], http_status=http_status(exc))
                    if kind == "rate_limit":
                        limit.rate_limited()
                    raise
                a.update(latency_ms=1000 * (time.perf_counter() - t), ok=True)
                limit.success(a["latency_ms"] / 1000)
                return out
            finally:
                await limit.release()

        upd: dict[str, Any] = {"id": job["id"], "started_at": started}
        try:
            out = await _with_retries(once, spec.retry)
        except LeaseLost:
            upd.update(state="lost")
        except Exception as exc:  # noqa: BLE001
            last = attempts[-1] if attempts else {}
            cause = last.get("error_type") or error_type(exc)
            if last.get("http_status"):
                cause += f" (HTTP {last['http_status']})"
            upd.update(state="failed", status="api_error", valid=False,
                       error=last.get("error") or _redact(f"{type(exc).__name__}: {exc}", self.secrets)[:2000],
                       cause=f"{m.name}: {cause} at {endpoint(m)}")
        else:
            raw = out.content if isinstance(out.content, str) else json.dumps(out.content)
            want_rel = job.get("strategy") == "Reliability" and job.get("stage") == "posterior"
            p = parse(job["answer_format"], raw, want_reliability=want_rel)
            usage = getattr(out, "usage_metadata", None) or {}
            choice = correct = None
            if p.valid and job["answer_format"] == "letter":
                opts = json.loads(job["options_json"] or "{}")
                choice = opts.get(p.answer)
            if p.valid and job["gold"] is not None:
                correct = p.answer == job["gold"]
            upd.update(state="done", status="ok" if p.valid else failure_status(raw), raw_response=raw, answer=p.answer,
                       value=p.value, valid=p.valid, parse_error=p.error, rated_reliability=p.rated_reliability,
                       choice=choice, correct=correct, latency_ms=attempts[-1]["latency_ms"],
                       tokens_in=usage.get("input_tokens"), tokens_out=usage.get("output_tokens"),
                       messages_json=dumps([{"role": x.type, "content": x.content} for x in messages])
                       if job.get("parent_key") else None)
        upd["n_attempts"] = n0 + len(attempts)
        upd["finished_at"] = utcnow()
        await self.results.put((m.name, upd, attempts))

    async def _writer(self, t0: float) -> None:
        T = Trial.__table__
        cols = ["state", "status", "raw_response", "answer", "value", "valid", "parse_error", "error",
                "rated_reliability", "choice", "correct", "latency_ms", "tokens_in", "tokens_out", "messages_json",
                "n_attempts", "started_at", "finished_at"]
        stmt = (sa.update(T).where(T.c.id == sa.bindparam("_id"), T.c.claimed_by == self.me, T.c.state == "claimed")
                .values({c: sa.bindparam("_" + c) for c in cols + ["run_id"]}))
        stop = False
        res = self.result
        while not stop:
            item = await self.results.get()
            batch = [item]
            await asyncio.sleep(0.05)
            while not self.results.empty():
                batch.append(self.results.get_nowait())
            if batch[-1] is None or None in batch:
                stop = True
                batch = [b for b in batch if b is not None]
            if not batch:
                continue
            params, attempts = [], []
            for name, upd, atts in batch:
                if upd.get("state") != "lost":
                    params.append({"_id": upd["id"], "_run_id": res.run_id, **{"_" + c: upd.get(c) for c in cols}})
                attempts.extend(atts)
            self._release([p["_id"] for p in params])
            written = await asyncio.to_thread(self._flush, stmt, params, attempts)
            for name, upd, atts in batch:
                self.state[name]["unflushed"] -= 1
                self.state[name]["event"].set()
                e = res.per_llm.setdefault(name, {"done": 0, "valid": 0, "failed": 0, "attempts": 0})
                e["attempts"] += len(atts)
                res.attempts += len(atts)
                res.retries += max(0, len(atts) - 1)
                if upd["id"] not in written:  # the lease was lost: another collector answers this trial
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
                    self._note_failure(upd)
            if self.shared_done is not None:
                with self.shared_done.get_lock():
                    self.shared_done.value += len(batch)
            self._show_progress(t0, retries=res.retries, invalid=res.done - res.valid)

    def _flush(self, stmt: Any, params: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> set[int]:
        """Write results of trials this collector still holds and every attempt's outcome; returns the
        ids of the trials written (rowcount of executemany is unreliable across drivers)."""
        T = Trial.__table__
        with self.db.engine.begin() as conn:
            ids = [p["_id"] for p in params]
            held = {r[0] for r in conn.execute(sa.select(T.c.id).where(
                T.c.id.in_(ids), T.c.claimed_by == self.me, T.c.state == "claimed"))} if ids else set()
            if params:
                conn.execute(stmt, params)
            upsert_many(conn, Attempt, attempts, ["trial_id", "n"])
        return held


def collect(db: TrialDB | str, spec: RunSpec, *, progress: bool = True, max_requests: int | None = None,
            me: str | None = None, workers: int | None = None) -> CollectResult:
    """Run a collection spec against a database (resumable; see module docstring).

    ``workers`` (default ``spec.workers``) > 1 runs that many collector processes on this machine.
    They split ``spec.concurrency`` and the request budget, and claim from the same database
    exactly as collectors on several machines do; use it when one Python process's CPU, not the
    LLM server, limits the rate. A final pass in this process picks up what the workers left (a
    Design A posterior whose prior another worker finished last).
    """
    if isinstance(db, str):
        db = TrialDB(db)
    preflight(db, spec)
    n = min(workers or spec.workers, spec.concurrency)
    if n <= 1:
        return _run_async(Collector(db, spec, progress=progress, max_requests=max_requests, me=me).run())
    return _collect_with_workers(db, spec, n, progress=progress, max_requests=max_requests)


def _run_async(coro: Any) -> Any:
    """asyncio.run on uvloop's event loop where it is installed (less CPU per request), with the
    garbage collector tuned for the run (`_collector_gc`)."""
    with _collector_gc():
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
            return asyncio.run(coro)
        return asyncio.run(coro, loop_factory=uvloop.new_event_loop)


@contextlib.contextmanager
def _collector_gc(young_threshold: int = 50_000) -> Iterator[None]:
    """During a collection run: objects that exist at its start (imported modules, the plan) are
    moved out of the collector's reach (``gc.freeze``), and the youngest generation is collected
    every ``young_threshold`` allocations instead of every 2,000. Each request allocates many
    short-lived objects, most freed by reference counting; a young collection costs about as much
    whatever the threshold (it walks the requests in flight), so fewer of them cost less. Measured
    (BENCHMARKS.md): about 4 % of the event loop's time went to collections before. Restored after."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], young_threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _shares(total: int, n: int) -> list[int]:
    return [total // n + (i < total % n) for i in range(n)]


def _exit_with_parent(parent: int, every_s: float = 0.5) -> None:
    """A worker's watch: when the parent process is gone (killed), the worker stops at once. Its
    claims stay leased until they expire, or until the next collector on this host releases them
    (`release_dead_claims`); every request it sent has its attempt row (written at claim time)."""
    while True:
        time.sleep(every_s)
        if os.getppid() != parent:
            os._exit(3)


def _worker_main(url: str, spec_json: str, concurrency: int, budget: int | None, done: Any, sent: Any,
                 ready: Any, go: Any, out: Any) -> None:
    """Entry point of a collector worker process (spawned by `collect`): it imports while the
    parent plans, then waits for ``go`` (and gives up if the parent dies first)."""
    parent = os.getppid()
    spec = RunSpec.model_validate_json(spec_json).model_copy(update={"concurrency": concurrency, "workers": 1})
    while not go.wait(1.0):
        if os.getppid() != parent:
            return
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True, name="parent-watch").start()
    db = TrialDB(url, create=False)
    try:
        res = _run_async(Collector(db, spec, progress=False, max_requests=budget, plan=False, shared_done=done,
                                    shared_sent=sent, ready=ready).run())
        out.put(("ok", res.__dict__))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))
        raise


def _collect_with_workers(db: TrialDB, spec: RunSpec, n: int, *, progress: bool,
                          max_requests: int | None) -> CollectResult:
    import multiprocessing as mp

    u = sa.engine.make_url(db.url)
    if u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:"):
        raise SpecError("workers > 1 need a database file or server; an in-memory SQLite database is "
                        "private to one process")
    t0 = time.perf_counter()
    budget = max_requests if max_requests is not None else spec.budget.max_requests
    conc = _shares(spec.concurrency, n)
    ctx = mp.get_context("spawn")  # fork would copy open connections and threads
    counters = [ctx.Value("q", 0) for _ in range(n)]
    sent = ctx.Value("q", 0)  # the budget is shared: a worker takes requests from it as it claims
    ready = ctx.Value("q", 0)  # workers collecting; until all are, this process runs their slots too
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker_main, args=(db.url, spec.model_dump_json(), conc[i], budget, counters[i],
                                                    sent, ready, go, out), daemon=True) for i in range(1, n)]
    for p in procs:  # they import while this process plans
        p.start()
    try:
        llm_ids = ensure_llms(db, spec)
        planned = plan_trials(db, spec, llm_ids)
        release_dead_claims(db)
        mark_interrupted_runs(db)
        go.set()
        mine = Collector(db, spec.model_copy(update={"concurrency": conc[0]}), progress=progress,
                         max_requests=budget, plan=False, shared_done=counters[0], others_done=counters[1:],
                         shared_sent=sent, borrow=spec.concurrency - conc[0],
                         lenders_ready=lambda: ready.value >= len(procs))
        total = _run_async(mine.run())
        results, errors = [], []
        while len(results) + len(errors) < len(procs):
            try:
                kind, val = out.get(timeout=1.0)
            except queue.Empty:  # a worker that died without reporting (killed, crashed)
                if all(not p.is_alive() for p in procs) and out.empty():
                    codes = [p.exitcode for p in procs if p.exitcode != 0]
                    errors.append(f"{len(procs) - len(results) - len(errors)} worker(s) exited without a result "
                                  f"(exit codes {codes})")
                continue
            (results if kind == "ok" else errors).append(val)
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    if errors:
        raise CollectorError("collector worker failed: " + "; ".join(errors) + ". Re-run the same command to "
                             "resume: nothing done is lost, and the worker's claims return to the plan")
    for r in results:
        _add_counts(total, r)
    # what the workers left: e.g. Design A posteriors whose prior another worker wrote last
    left = None if budget is None else max(0, budget - total.sent)
    if (left is None or left > 0) and open_trials(db, spec, llm_ids) > 0:
        sweep = _run_async(Collector(db, spec, progress=False, max_requests=left, plan=False).run())
        _add_counts(total, sweep.__dict__)
    total.planned = planned
    total.elapsed_s = time.perf_counter() - t0
    return total


def _add_counts(total: CollectResult, r: dict[str, Any]) -> None:
    for k in ("sent", "done", "valid", "failed", "attempts", "retries", "lost_leases"):
        setattr(total, k, getattr(total, k) + r[k])
    for cause, k in r.get("failure_causes", {}).items():
        total.failure_causes[cause] = total.failure_causes.get(cause, 0) + k
    for name, e in r["per_llm"].items():
        t = total.per_llm.setdefault(name, {"done": 0, "valid": 0, "failed": 0, "attempts": 0})
        for k, v in e.items():
            t[k] += v

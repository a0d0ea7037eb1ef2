"""The async collector: claim -> run -> write for each LLM of a spec, in one process.

Per LLM, ``concurrency`` worker slots take claimed trials from a claim-ahead queue; each request
goes through an adaptive in-flight limit (`ratelimit.AdaptiveLimit`: fewer in flight while the
provider answers 429) and tenacity's retries (waits never shorter than Retry-After, never longer
than ``retry.max_retry_after_s``); before each send the lease is checked (`queue.LeaseKeeper.still_held`)
and the request budget charged (`budget.RequestBudget`); the writer (`writer.ResultWriter`) writes
results in batches, only for trials this collector still holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from ..store.db import Attempt, Item, Request, Run, Source, Trial, dumps, insert_ignore_many, utcnow
from ..store.trialdb import TrialDB
from .budget import RequestBudget
from .journal import DatabaseAway, keep_run_end, with_db_retry
from .parsing import message_fields
from .planning import PreparedRun, open_trials
from .providers import (build_chat_model, close_chat_model, endpoint, error_type, http_status, is_retryable,
                        request_kwargs)
from .queue import (NO_OUTCOME, NO_OUTCOME_TEXT, NOT_SENT, LeaseKeeper, awake_clock, claim, collector_id,
                    count_claimable, release_orphan_claims)
from .ratelimit import AdaptiveLimit, retry_after_s
from .spec import LLMSpec, RetryPolicy, RunSpec
from .writer import ResultWriter

def code_version() -> str:
    from ..core.version import __version__
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
    deferred: int = 0  # trials returned to the plan: a retry the budget refused, the database away
    restored: int = 0  # answered responses loaded from an earlier run's journal
    elapsed_s: float = 0.0
    run_group: str | None = None
    run_ids: list[int] = field(default_factory=list)
    database_away: str | None = None  # the error, when the database stopped taking writes
    kept: int = 0  # answered responses written to the journal instead of the database
    journal: str | None = None
    per_llm: dict[str, dict[str, int]] = field(default_factory=dict)
    failure_causes: dict[str, int] = field(default_factory=dict)  # "llm: cause at host:port" -> trials

    @property
    def rate(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s else 0.0


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


async def _with_retries(once: Any, r: RetryPolicy, sleep: Any = asyncio.sleep) -> Any:
    """``await once()`` with tenacity's retries (exponential backoff with jitter) on retryable errors;
    a wait is never shorter than the server's Retry-After, and never longer than
    ``r.max_retry_after_s`` (a server asking for an hour does not stall the run: the retry goes
    at the cap, and a request refused every time fails after ``max_attempts``). ``sleep`` does
    each wait (the collector's shows them in the progress line).

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

    def capped(b: float, exc: BaseException | None) -> float:
        asked = (retry_after_s(exc) or 0.0) if exc is not None else 0.0
        return max(b, min(asked, r.max_retry_after_s))

    def wait(state: Any) -> float:  # tenacity's attempt k is attempt k + 1 of the request
        exc = state.outcome.exception() if state.outcome is not None else None
        return capped(backoff(SimpleNamespace(attempt_number=state.attempt_number + 1)), exc)

    await sleep(capped(backoff(SimpleNamespace(attempt_number=1)), first_error))
    return await AsyncRetrying(stop=stop_after_attempt(r.max_attempts - 1), wait=wait, sleep=sleep,
                               retry=retry_if_exception(is_retryable), reraise=True)(once)




class LeaseLost(Exception):
    """The collector no longer holds the trial (its lease expired and another collector claimed it)."""


class BudgetSpent(Exception):
    """The request budget has no request left for this retry: the trial goes back to the plan."""


class Collector:
    """The collector of one process. ``prepared`` is the run's preamble (`planning.prepare_run`, done
    once per run by the caller); ``budget`` the run's request budget (shared by its processes).

    `workers: N`: until ``lenders_ready()`` says the worker processes collect, the parent runs
    ``borrow`` extra slots per LLM (their share of the concurrency), so their start-up costs no
    throughput; ``ready`` (a multiprocessing.Value) is how a worker process says it collects;
    ``parent_pid``: a worker sends nothing once that process is gone."""

    def __init__(self, db: TrialDB, spec: RunSpec, prepared: PreparedRun, *, budget: RequestBudget | None = None,
                 me: str | None = None, progress: bool = True, shared_done: Any = None,
                 others_done: list[Any] | None = None, borrow: int = 0, lenders_ready: Any = None, ready: Any = None,
                 parent_pid: int | None = None, run_group: str | None = None, halt: Any = None):
        self.db, self.spec, self.prepared = db, spec, prepared
        self.budget = budget or RequestBudget(spec.budget.max_requests)
        self.borrow, self.lenders_ready, self.ready = borrow, lenders_ready, ready
        self.shared_done = shared_done  # multiprocessing.Value this collector adds its finished trials to
        self.others_done = others_done or []  # the other workers' counters, shown in this progress bar
        self.parent_pid = parent_pid
        self.run_group = run_group
        self.halt = halt  # a multiprocessing.Event: the parent was interrupted (Ctrl-C); stop as it does
        self.me = me or collector_id()
        self.show_progress = progress
        self.secrets = [os.environ.get(m.api_key_env, "") for m in spec.llms if m.api_key_env]
        self.sent = 0  # requests that left this process
        self.state: dict[str, dict[str, Any]] = {}
        self.waits: dict[int, float] = {}  # id of a waiting retry -> time.monotonic() it ends
        self.database_away: str | None = None
        self.leases = LeaseKeeper(db, self.me, spec.lease_s)  # heartbeat renewals, lost leases

    def _db(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """A database call retried through an outage (`journal.with_db_retry`)."""
        return with_db_retry(fn, *args, patience_s=self.spec.database_patience_s, **kw)

    def _give_back_orphans(self, llm_id: int) -> None:
        """`queue.release_orphan_claims` (with the database away, the run stops: `_end_run` tries)."""
        try:
            self._db(release_orphan_claims, self.db, llm_id, self.me)
        except DatabaseAway as exc:
            self.database_away = self.database_away or str(exc)

    def _record_attempt_start(self, a: dict[str, Any]) -> None:
        def write() -> None:
            with self.db.engine.begin() as conn:
                insert_ignore_many(conn, Attempt, [a], ["trial_id", "n"])
        self._db(write)

    def _simulator_knowledge(self) -> dict[str, Any]:
        """What a synthetic respondent knows of the plan: Design A's item truths and source table;
        Design B's structured facts per request text (SIMULATOR only; a real LLM gets none)."""
        if not any(m.kind == "synthetic" for m in self.spec.llms):
            return {}
        with self.db.engine.connect() as conn:
            if self.spec.design == "l2d":
                items = {r.question: float(r.truth) for r in conn.execute(sa.select(Item.question, Item.truth))
                         if r.question}
                srcs = {r.domain: (float(r.reliability), float(r.popularity if r.popularity is not None else 0.5))
                        for r in conn.execute(sa.select(Source.domain, Source.reliability, Source.popularity))}
                return {"knowledge": items, "source_knowledge": srcs}
            from ..simulate.respondent import text_key
            q = sa.select(Request.messages_json, Request.facts_json, Request.probe, Request.intervention,
                          Request.options_json).where(Request.design == "cue", Request.facts_json.is_not(None))
            facts = {}
            for r in conn.execute(q):
                user = json.loads(r.messages_json)[-1]["content"]
                facts[text_key(user)] = (f'{{"facts": {r.facts_json}, "probe": {json.dumps(r.probe)}, '
                                         f'"intervention": {json.dumps(r.intervention)}, "options": {r.options_json}}}')
            missing = conn.execute(sa.select(sa.func.count()).select_from(Request).where(
                Request.design == "cue", Request.facts_json.is_(None))).scalar()
            if missing:
                import warnings
                warnings.warn(f"{missing:,} planned Design B requests have no structured facts (planned by a version "
                              f"before evidence graphs): the synthetic respondents answer them at random; plan them "
                              f"again in a new database for simulated cue weights", stacklevel=2)
            return {"cue_facts": facts}

    def _start_run(self) -> int:
        from .spec import redacted_spec_json
        def insert() -> int:
            with self.db.engine.begin() as conn:
                # a retry after a commit whose reply was lost finds the row it wrote (host is this collector's id)
                mine = conn.execute(sa.select(Run.__table__.c.id).where(Run.__table__.c.host == self.me)).scalar()
                if mine is not None:
                    return mine
                return conn.execute(sa.insert(Run.__table__).values(
                    spec_name=self.spec.name, spec_json=redacted_spec_json(self.spec), code_version=code_version(),
                    started_at=utcnow(), status="running", host=self.me, run_group=self.run_group)
                    .returning(Run.__table__.c.id)).scalar_one()
        return self._db(insert)

    def _end_run(self, status: str) -> None:
        """Mark the run and give this collector's unanswered claims back to the plan (best effort:
        with the database away, a later collector on this host does both)."""
        Rn, T = Run.__table__, Trial.__table__
        def end() -> None:
            with self.db.engine.begin() as conn:
                conn.execute(sa.update(Rn).where(Rn.c.id == self.result.run_id).values(ended_at=utcnow(), status=status))
                conn.execute(sa.update(T).where(T.c.claimed_by == self.me, T.c.state == "claimed")
                             .values(state="pending", claimed_by=None, lease_until=None))
        try:
            with_db_retry(end, patience_s=0 if status == "database_away" else self.spec.database_patience_s)
        except DatabaseAway:  # the next run on this database marks it (`journal.load_journal`)
            keep_run_end(self.db, self.result.run_id, status)

    async def run(self) -> CollectResult:
        spec = self.spec
        llm_ids = self.prepared.llm_ids
        run_id = self._start_run()
        self.result = CollectResult(run_id=run_id, planned=self.prepared.planned, run_group=self.run_group,
                                    run_ids=[run_id])
        todo = self._db(open_trials, self.db, spec, llm_ids)
        if self.budget.limit is not None:
            todo = min(todo, max(0, self.budget.limit - self.budget.used))
        known = self._simulator_knowledge()
        models = {m.name: build_chat_model(m, spec, simulator_knowledge=known) for m in spec.llms}
        t0 = time.perf_counter()
        progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]:.1f} req/s"), TextColumn("retries {task.fields[retries]}"),
                            TextColumn("invalid {task.fields[invalid]}"), TextColumn("429s {task.fields[rate_limited]}"),
                            TextColumn("in flight ≤ {task.fields[limit]}"), TextColumn("{task.fields[waiting]}"),
                            TimeElapsedColumn(), TimeRemainingColumn(),
                            disable=not self.show_progress, transient=False,
                            # not a terminal (a log file, CI): one full line, not one cut at 80 columns
                            console=None if sys.stdout.isatty() else Console(width=200))
        self.leases.start()
        self.writer = ResultWriter(self)
        status = "finished"
        with progress:
            self.task = progress.add_task(f"collect {spec.name}", total=todo, rate=0.0, retries=0, invalid=0,
                                          rate_limited=0, limit=spec.concurrency * len(spec.llms), waiting="")
            self.progress = progress
            writer = asyncio.create_task(self.writer.run(t0))
            if self.ready is not None:
                with self.ready.get_lock():
                    self.ready.value += 1
            ticker = asyncio.create_task(self._tick(t0, asyncio.current_task()))
            try:
                await asyncio.gather(*(self._llm_loop(m, llm_ids[m.name], models[m.name]) for m in spec.llms))
                await self.writer.results.put(None)
                await writer
            except BaseException:  # Ctrl-C (the loop cancels this task), or a bug: keep what was answered
                status = "interrupted"
                writer.cancel()
                await asyncio.to_thread(self.writer.drain)
                raise
            finally:
                ticker.cancel()
                self.leases.stop()
                for model in models.values():
                    await close_chat_model(model)
                self.result.elapsed_s = time.perf_counter() - t0
                self.result.sent = self.sent
                if self.database_away is not None:
                    status = "database_away"
                    self.result.database_away = self.database_away
                await asyncio.to_thread(self._end_run, status)
        return self.result

    def _finished(self) -> int:
        return self.result.done + self.result.failed + sum(c.value for c in self.others_done)

    def _show_progress(self, t0: float, **fields: Any) -> None:
        el = time.perf_counter() - t0
        n = self._finished()
        limits = [st["limit"] for st in self.state.values() if "limit" in st]
        if limits:  # 429s seen and the adaptive in-flight limits, all LLMs of this process together
            fields.update(rate_limited=sum(x.rate_limited_n for x in limits), limit=sum(int(x.limit) for x in limits))
        if self.waits:  # retries waiting (back-off, Retry-After) and the longest wait still to go
            fields["waiting"] = (f"{len(self.waits)} waiting ≤ {max(self.waits.values()) - time.monotonic():.0f} s")
        else:
            fields["waiting"] = ""
        self.progress.update(self.task, completed=n, rate=n / el if el else 0.0, **fields)

    async def _tick(self, t0: float, main: Any) -> None:
        """Refresh the progress bar (the other worker processes' counts, the waits); stop the run
        (``main``, the task of `run`) when the parent says so (``halt``)."""
        while True:
            await asyncio.sleep(0.2)
            if self.halt is not None and self.halt.is_set():
                main.cancel()
                return
            self._show_progress(t0)

    async def _sleep(self, seconds: float) -> None:
        """A retry's wait, shown in the progress line while it lasts."""
        key = id(asyncio.current_task())
        self.waits[key] = time.monotonic() + seconds
        try:
            await asyncio.sleep(seconds)
        finally:
            self.waits.pop(key, None)

    def _parent_gone(self) -> bool:
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    async def _llm_loop(self, m: LLMSpec, llm_id: int, model: Any) -> None:
        """Claim -> run -> write for one LLM. ``running`` bounds concurrency; ``unflushed``
        counts results not yet in the database (a Design A posterior becomes claimable only
        once its prior is written). A claim reserves one request of the budget per trial."""
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
        orphans_checked = False
        while True:
            # claim ahead: top the queue up to 3x the slots whenever it holds less than 2x, so that
            # the database round trip of a claim is hidden behind queued work
            slots = st["slots"]
            stop = self.database_away is not None or self._parent_gone()
            want = (self.budget.take(max(4, 3 * slots) - st["running"])
                    if st["running"] < 2 * slots and not stop else 0)
            jobs = []
            if want > 0:
                claimed_at = awake_clock()
                try:
                    jobs = await asyncio.to_thread(self._db, claim, self.db, llm_id, self.me, want, spec.lease_s,
                                                   spec.retry_failed)
                except DatabaseAway as exc:
                    self.database_away = self.database_away or str(exc)
                finally:
                    self.budget.give_back(want - len(jobs))
            if jobs:
                orphans_checked = False
                st.pop("locked_since", None)
                self.leases.hold(jobs, claimed_at)
                st["running"] += len(jobs)
                st["unflushed"] += len(jobs)
                for j in jobs:
                    j["reserved"] = True  # its first request is paid for out of the budget already
                    queue.put_nowait(j)
                continue
            if st["running"] == 0 and st["unflushed"] == 0 and (want > 0 or stop or not self.budget.left()):
                if want > 0 and not stop and not orphans_checked:
                    # a claim whose reply the database lost may hold trials no one sends: give them
                    # back and claim once more (idempotent, so a lost reply of this call is harmless)
                    orphans_checked = True
                    await asyncio.to_thread(self._give_back_orphans, llm_id)
                    continue
                if want > 0 and not stop and await self._locked_elsewhere(m, llm_id, st):
                    orphans_checked = False
                    continue
                break
            st["event"].clear()
            try:
                await asyncio.wait_for(st["event"].wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass
        for _ in workers:
            queue.put_nowait(None)
        await asyncio.gather(*workers)

    async def _locked_elsewhere(self, m: LLMSpec, llm_id: int, st: dict[str, Any]) -> bool:
        """True (after a 0.5 s wait) where `claim` found nothing although trials of this LLM are still
        claimable (`queue.count_claimable`): another database session holds them in an open
        transaction (``SKIP LOCKED`` passes them over), e.g. the backend of a connection that dropped
        mid-claim and that the server has not noticed yet; when it does, the claim rolls back and the
        trials are pending again. Before, the collector ended there and left them pending (stop 36's
        note, test_a_postgres_restart_mid_run_loses_nothing). Waits up to ``database_patience_s`` in
        all, then warns (one line naming the count) and lets the run end: a later run collects them."""
        try:
            left = await asyncio.to_thread(self._db, count_claimable, self.db, llm_id, self.spec.retry_failed)
        except DatabaseAway as exc:
            self.database_away = self.database_away or str(exc)
            return False
        if not left:
            st.pop("locked_since", None)
            return False
        since = st.setdefault("locked_since", time.monotonic())
        if time.monotonic() - since > self.spec.database_patience_s:
            import warnings
            warnings.warn(f"{m.name}: {left:,} trial(s) stayed locked by another database session for "
                          f"{self.spec.database_patience_s:g} s (database_patience_s; an open transaction of a "
                          f"dropped connection?); they stay pending for the next run", stacklevel=2)
            return False
        await asyncio.sleep(0.5)
        return True

    async def _execute(self, m: LLMSpec, model: Any, job: dict[str, Any]) -> None:
        spec = self.spec
        messages = _to_messages(job)
        attempts: list[dict[str, Any]] = []
        n0 = int(job["first_attempt"]) - 1  # the claim wrote the first attempt's row
        started = utcnow()

        limit = self.state[m.name]["limit"]
        kwargs = request_kwargs(m, model, job)  # the spec's response_format, where this request asks for JSON

        async def once() -> Any:
            await limit.acquire()  # the adaptive in-flight limit of this LLM
            try:
                if self._parent_gone():  # a worker whose parent was killed sends nothing more
                    os._exit(3)
                if self.database_away is not None:
                    raise DatabaseAway(self.database_away)
                # another collector may hold this trial now (the heartbeat saw it, or a pause outlasted
                # the lease): do not pay for it twice
                if not (self.leases.fresh(job["id"]) or await asyncio.to_thread(self._db, self.leases.still_held,
                                                                                job["id"])):
                    raise LeaseLost(f"the lease on trial {job['id']} was lost")
                if job.get("reserved"):
                    job["reserved"] = False
                elif not self.budget.take(1):
                    raise BudgetSpent()
                a = {"trial_id": job["id"], "n": n0 + len(attempts) + 1, "collector": self.me,
                     "started_at": utcnow(), "ok": False, "error_type": NO_OUTCOME, "error": NO_OUTCOME_TEXT}
                if attempts:  # a retry: its row goes in before the request leaves
                    try:
                        await asyncio.to_thread(self._record_attempt_start, a)
                    except DatabaseAway as exc:
                        self.database_away = self.database_away or str(exc)
                        self.budget.give_back(1)
                        raise
                attempts.append(a)
                self.sent += 1
                t = time.perf_counter()
                try:
                    out = await asyncio.wait_for(model.ainvoke(messages, **kwargs), timeout=spec.timeout_s)
                except BaseException as exc:  # noqa: BLE001 - every error is recorded
                    text = f"{type(exc).__name__}: {exc}"
                    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) and not str(exc):
                        text = f"TimeoutError: no answer within timeout_s={spec.timeout_s:g} s from {endpoint(m)}"
                    kind = error_type(exc)
                    if isinstance(exc, asyncio.CancelledError):  # stopped (Ctrl-C) with the request in flight
                        kind, text = NO_OUTCOME, NO_OUTCOME_TEXT
                    a.update(latency_ms=1000 * (time.perf_counter() - t), ok=False, error_type=kind,
                             error=_redact(text, self.secrets)[:2000], http_status=http_status(exc))
                    if kind == "rate_limit":
                        limit.rate_limited()
                    raise
                a.update(latency_ms=1000 * (time.perf_counter() - t), ok=True, error_type=None, error=None,
                         http_status=None)
                limit.success(a["latency_ms"] / 1000)
                return out
            finally:
                await limit.release()

        upd: dict[str, Any] = {"id": job["id"], "key": job["key"], "started_at": started}
        try:
            out = await _with_retries(once, spec.retry, sleep=self._sleep)
        except LeaseLost:
            upd.update(state="lost")
        except (BudgetSpent, DatabaseAway) as exc:  # back to the plan: a later run sends it
            if isinstance(exc, DatabaseAway):
                self.database_away = self.database_away or str(exc)
            upd.update(state="pending")
        except Exception as exc:  # noqa: BLE001
            last = attempts[-1] if attempts else {}
            cause = last.get("error_type") or error_type(exc)
            if last.get("http_status"):
                cause += f" (HTTP {last['http_status']})"
            upd.update(state="failed", status="api_error", valid=False,
                       error=last.get("error") or _redact(f"{type(exc).__name__}: {exc}", self.secrets)[:2000],
                       cause=f"{m.name}: {cause} at {endpoint(m)}")
        else:
            usage = getattr(out, "usage_metadata", None) or {}
            meta = getattr(out, "response_metadata", None) or {}
            # both parses, the recovered answer, status and the provider's finish reason (collect.parsing)
            upd.update(state="done", **message_fields(job, out), latency_ms=attempts[-1]["latency_ms"],
                       tokens_in=usage.get("input_tokens"), tokens_out=usage.get("output_tokens"),
                       model_reported=meta.get("model_name") or meta.get("model"),
                       system_fingerprint=meta.get("system_fingerprint"),
                       messages_json=dumps([{"role": x.type, "content": x.content} for x in messages])
                       if job.get("parent_key") else None)
        finally:
            if job.get("reserved"):  # its first request never left: the reservation goes back
                job["reserved"] = False
                self.budget.give_back(1)
                why = {"lost": "another collector took the trial first (its lease had run out)",
                       "pending": "the database stopped taking writes"}.get(upd.get("state"), "the collector stopped")
                attempts.append({"trial_id": job["id"], "n": n0 + 1, "collector": self.me, "started_at": started,
                                 "ok": False, "error_type": NOT_SENT, "error": f"not sent: {why}"})
        upd["n_attempts"] = n0 + len(attempts)
        upd["finished_at"] = utcnow()
        await self.writer.results.put((m.name, upd, attempts))

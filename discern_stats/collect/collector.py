"""The async collector: claim -> run -> write for each LLM of a spec, in one process.

Per LLM, ``concurrency`` worker slots take claimed trials from a claim-ahead queue; each request
goes through an adaptive in-flight limit (`ratelimit.AdaptiveLimit`: fewer in flight while the
provider answers 429) and tenacity's retries (waits never shorter than Retry-After); one writer
task writes results in batches, only for trials this collector still holds (`queue.LeaseKeeper`).
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

from ..store.db import Attempt, Item, Request, Run, Source, Trial, dumps, insert_ignore_many, upsert_many, utcnow
from ..store.trialdb import TrialDB
from .parsing import PARSE_COLUMNS, message_fields
from .providers import (build_chat_model, close_chat_model, endpoint, error_type, http_status, is_retryable,
                        request_kwargs)
from .queue import (NO_OUTCOME, NO_OUTCOME_TEXT, LeaseKeeper, claim, collector_id, ensure_llms,
                    mark_interrupted_runs, open_trials, plan_trials, release_dead_claims)
from .ratelimit import AdaptiveLimit, retry_after_s
from .spec import LLMSpec, RetryPolicy, RunSpec

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
    elapsed_s: float = 0.0
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
        self.leases = LeaseKeeper(db, self.me, spec.lease_s)  # heartbeat renewals, lost leases

    def _note_failure(self, upd: dict[str, Any]) -> None:
        key = upd.get("cause") or "unknown"
        self.result.failure_causes[key] = self.result.failure_causes.get(key, 0) + 1

    def _record_attempt_start(self, a: dict[str, Any]) -> None:
        with self.db.engine.begin() as conn:
            insert_ignore_many(conn, Attempt, [a], ["trial_id", "n"])

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
        known = self._simulator_knowledge()
        models = {m.name: build_chat_model(m, spec, simulator_knowledge=known) for m in spec.llms}
        t0 = time.perf_counter()
        progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]:.1f} req/s"), TextColumn("retries {task.fields[retries]}"),
                            TextColumn("invalid {task.fields[invalid]}"), TextColumn("429s {task.fields[rate_limited]}"),
                            TextColumn("in flight ≤ {task.fields[limit]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                            disable=not self.show_progress, transient=False,
                            # not a terminal (a log file, CI): one full line, not one cut at 80 columns
                            console=None if sys.stdout.isatty() else Console(width=200))
        self.leases.start()
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
                self.leases.stop()
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
                self.leases.hold(jobs)
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
        kwargs = request_kwargs(m, model, job)  # the spec's response_format, where this request asks for JSON

        async def once() -> Any:
            await limit.acquire()  # the adaptive in-flight limit of this LLM
            try:
                if self.leases.is_lost(job["id"]):  # another collector holds this trial now: do not pay for it twice
                    raise LeaseLost(f"the lease on trial {job['id']} was lost")
                a = {"trial_id": job["id"], "n": n0 + len(attempts) + 1, "collector": self.me,
                     "started_at": utcnow(), "ok": False, "error_type": NO_OUTCOME, "error": NO_OUTCOME_TEXT}
                if attempts:  # a retry: its row goes in before the request leaves
                    await asyncio.to_thread(self._record_attempt_start, a)
                attempts.append(a)
                t = time.perf_counter()
                try:
                    out = await asyncio.wait_for(model.ainvoke(messages, **kwargs), timeout=spec.timeout_s)
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
            usage = getattr(out, "usage_metadata", None) or {}
            # both parses, the recovered answer, status and the provider's finish reason (collect.parsing)
            upd.update(state="done", **message_fields(job, out), latency_ms=attempts[-1]["latency_ms"],
                       tokens_in=usage.get("input_tokens"), tokens_out=usage.get("output_tokens"),
                       messages_json=dumps([{"role": x.type, "content": x.content} for x in messages])
                       if job.get("parent_key") else None)
        upd["n_attempts"] = n0 + len(attempts)
        upd["finished_at"] = utcnow()
        await self.results.put((m.name, upd, attempts))

    async def _writer(self, t0: float) -> None:
        T = Trial.__table__
        cols = ["state", *PARSE_COLUMNS, "error", "latency_ms", "tokens_in", "tokens_out", "messages_json",
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
            self.leases.release([p["_id"] for p in params])
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

"""Resumable, idempotent, concurrent collection (SPEC "Collection layer"): `collect`, in one process
or in ``workers`` processes on this machine that claim from the same database.

The work queue (planning, claims, leases) is `collect.queue`; the async loop of one process is
`collect.collector`. Worker processes stop when their parent dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from ..core.errors import CollectorError, SpecError
from ..store.trialdb import TrialDB
from .collector import Collector, CollectResult
from .queue import ensure_llms, mark_interrupted_runs, open_trials, plan_trials, preflight, release_dead_claims
from .spec import RunSpec

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

"""Resumable, idempotent, concurrent collection (SPEC "Collection layer"): `collect`, in one process
or in ``workers`` processes on this machine that claim from the same database.

The preamble of a run is `planning.prepare_run` (once, in this process); the work queue (claims,
leases) is `collect.queue`; the async loop of one process is `collect.collector`. Worker processes
get this process's PID and stop as soon as it is gone, at any phase of their start-up. Ctrl-C marks
the run interrupted and says what was kept; a database that stays away ends the run with the
answered responses in a journal (`collect.journal`), loaded by the next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import queue
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from ..core.errors import CollectorError, SpecError
from ..store.db import Run, Trial
from ..store.trialdb import TrialDB, sqlite_file
from .budget import RequestBudget
from .collector import Collector, CollectResult
from .journal import DatabaseAway, with_db_retry
from .planning import PreparedRun, llm_ids, open_trials, prepare_run, preflight
from .spec import RunSpec


class CollectInterrupted(KeyboardInterrupt):
    """Ctrl-C during `collect`: the run is marked 'interrupted'; the message says what was kept and
    how to resume."""


def collect(db: TrialDB | str, spec: RunSpec, *, progress: bool = True, max_requests: int | None = None,
            me: str | None = None, workers: int | None = None) -> CollectResult:
    """Run a collection spec against a database (resumable; see module docstring).

    ``workers`` (default ``spec.workers``) > 1 runs that many collector processes on this machine.
    They split ``spec.concurrency`` and the request budget, and claim from the same database
    exactly as collectors on several machines do; use it when one Python process's CPU, not the
    LLM server, limits the rate. A final pass in this process picks up what the workers left (a
    Design A posterior whose prior another worker finished last). Every run row of the call has
    the same ``run_group``.

    ``max_requests`` (default ``spec.budget.max_requests``): requests sent, retries included, by
    every process of the call together.
    """
    if isinstance(db, str):
        db = TrialDB(db)
    _check_writable(db)
    preflight(db, spec)
    n = min(workers or spec.workers, spec.concurrency)
    limit = max_requests if max_requests is not None else spec.budget.max_requests
    group = uuid.uuid4().hex[:16]
    try:
        if n <= 1:
            prepared = _prepare(db, spec)
            res = _run_async(Collector(db, spec, prepared, budget=RequestBudget(limit), progress=progress, me=me,
                                       run_group=group).run())
            res.restored = prepared.restored
        else:
            res = _collect_with_workers(db, spec, n, progress=progress, limit=limit, group=group)
    except KeyboardInterrupt:
        line = _interrupted_line(db, group)
        print(line, file=sys.stderr, flush=True)
        raise CollectInterrupted(line) from None
    if res.database_away is not None:
        raise CollectorError(_away_line(db, res))
    return res


def _check_writable(db: TrialDB) -> None:
    """A SQLite file (or its folder) the collector cannot write is refused before anything runs."""
    path = sqlite_file(db.url)
    if path is None:
        return
    for p in (path, path.parent):
        if p.exists() and not os.access(p, os.W_OK):
            raise SpecError(f"the database {path} is read-only here ({'file' if p == path else 'its folder'} "
                            f"{p} is not writable); collect into a copy you can write, or fix its permissions")


def _prepare(db: TrialDB, spec: RunSpec) -> PreparedRun:
    try:
        return with_db_retry(prepare_run, db, spec, patience_s=spec.database_patience_s)
    except DatabaseAway as exc:
        raise CollectorError(f"the database {db.display_url} did not answer for {spec.database_patience_s:g} s "
                             f"(database_patience_s) while planning: {exc}; nothing was sent") from None



def _away_line(db: TrialDB, res: CollectResult) -> str:
    kept = (f"{res.kept} answered response(s) are kept in {res.journal} and are written to the database by "
            f"the next `collect` on it" if res.kept else "no answered response was waiting to be written")
    return (f"the database {db.display_url} stopped taking writes ({res.database_away}); collection stopped: "
            f"{res.done} trial(s) of this run were written, {kept}; claims go back to the plan when the database "
            f"answers again; re-run the same command to resume")


def _interrupted_line(db: TrialDB, group: str) -> str:
    Rn, T = Run.__table__, Trial.__table__
    try:
        with db.engine.connect() as conn:
            runs = [r[0] for r in conn.execute(sa.select(Rn.c.id).where(Rn.c.run_group == group))]
            done = conn.execute(sa.select(sa.func.count()).select_from(T).where(
                T.c.run_id.in_(runs), T.c.state.in_(["done", "failed"]))).scalar() if runs else 0
        which = ", ".join(str(r) for r in runs) or "none"
        return (f"interrupted: {done} trial(s) answered by this collection (run {which}, marked interrupted) are "
                f"kept in {db.display_url}; unanswered claims went back to the plan; re-run the same command to resume "
                f"(nothing answered is sent again)")
    except sa.exc.SQLAlchemyError:
        return "interrupted; re-run the same command to resume (nothing answered is sent again)"


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


def _die_with_parent(parent: int, every_s: float = 0.2) -> None:
    """A worker's watch on its parent (``parent``: the PID the parent passed in, never read here, since
    the parent may be gone before this process has imported): on Linux the kernel kills the worker
    when the parent dies (PR_SET_PDEATHSIG); everywhere, a thread checks every ``every_s`` seconds and
    exits the process when the parent is gone; and the collector checks before each send. Its claims
    stay leased until they expire, or until the next collector on this host releases them
    (`queue.release_dead_claims`); every request it sent has its attempt row."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):  # pragma: no cover - no libc by that name: the thread still watches
            pass
    if os.getppid() != parent:  # gone before the watch began
        os._exit(3)

    def watch() -> None:
        while True:
            time.sleep(every_s)
            if os.getppid() != parent:
                os._exit(3)
    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _worker_main(parent: int, url: str, spec_json: str, concurrency: int, limit: int | None, done: Any, sent: Any,
                 ready: Any, go: Any, halt: Any, out: Any, group: str) -> None:
    """Entry point of a collector worker process (spawned by `collect`): it watches its parent from its
    first statement, imports while the parent plans, then waits for ``go``. It ignores SIGINT (it is
    started with SIGINT ignored, so a Ctrl-C during its imports prints nothing): on Ctrl-C the parent
    sets ``halt``, and the worker stops as the parent does (its run marked 'interrupted')."""
    _die_with_parent(parent)
    try:
        spec = RunSpec.model_validate_json(spec_json).model_copy(update={"concurrency": concurrency, "workers": 1})
        while not go.wait(0.5):
            if os.getppid() != parent:
                os._exit(3)
        if halt.is_set():
            out.put(("interrupted", ""))
            return
        db = TrialDB(url, create=False)
        prepared = PreparedRun(llm_ids(db, spec), planned=0)  # the parent prepared the run
        res = _run_async(Collector(db, spec, prepared, budget=RequestBudget(limit, sent), progress=False,
                                   shared_done=done, ready=ready, parent_pid=parent, run_group=group,
                                   halt=halt).run())
        out.put(("ok", res.__dict__))
    except (KeyboardInterrupt, asyncio.CancelledError):  # halted on Ctrl-C: the parent says what was kept
        out.put(("interrupted", ""))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def _collect_with_workers(db: TrialDB, spec: RunSpec, n: int, *, progress: bool, limit: int | None,
                          group: str) -> CollectResult:
    import multiprocessing as mp

    u = sa.engine.make_url(db.url)
    if u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:"):
        raise SpecError("workers > 1 need a database file or server; an in-memory SQLite database is "
                        "private to one process")
    t0 = time.perf_counter()
    conc = _shares(spec.concurrency, n)
    ctx = mp.get_context("spawn")  # fork would copy open connections and threads
    counters = [ctx.Value("q", 0) for _ in range(n)]
    sent = ctx.Value("q", 0)  # the budget is shared: requests reserved or sent by every process
    budget = RequestBudget(limit, sent)
    ready = ctx.Value("q", 0)  # workers collecting; until all are, this process runs their slots too
    go, halt, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker_main, args=(os.getpid(), db.url, spec.model_dump_json(), conc[i], limit,
                                                    counters[i], sent, ready, go, halt, out, group), daemon=True)
             for i in range(1, n)]
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited: workers ignore Ctrl-C (see _worker_main)
    try:
        for p in procs:  # they import while this process plans
            p.start()
    finally:
        signal.signal(signal.SIGINT, old)
    interrupted = False
    try:
        prepared = _prepare(db, spec)
        go.set()
        mine = Collector(db, spec.model_copy(update={"concurrency": conc[0]}), prepared, budget=budget,
                         progress=progress, shared_done=counters[0], others_done=counters[1:],
                         borrow=spec.concurrency - conc[0], lenders_ready=lambda: ready.value >= len(procs),
                         run_group=group)
        total = _run_async(mine.run())
        total.restored = prepared.restored
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
            if kind == "interrupted":
                raise KeyboardInterrupt
            (results if kind == "ok" else errors).append(val)
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if interrupted:  # halt the workers: they mark their runs and give their claims back
            halt.set()
            deadline = time.monotonic() + 10
            for p in procs:
                p.join(max(0.1, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.terminate()
    if errors:
        raise CollectorError("collector worker failed: " + "; ".join(errors) + ". Re-run the same command to "
                             "resume: nothing done is lost, and the worker's claims return to the plan")
    for r in results:
        _add_counts(total, r)
    # what the workers left: e.g. Design A posteriors whose prior another worker wrote last
    if total.database_away is None and budget.left() and open_trials(db, spec, prepared.llm_ids) > 0:
        sweep = _run_async(Collector(db, spec, prepared, budget=budget, progress=False, run_group=group).run())
        _add_counts(total, sweep.__dict__)
    total.planned = prepared.planned
    total.elapsed_s = time.perf_counter() - t0
    return total


def _add_counts(total: CollectResult, r: dict[str, Any]) -> None:
    for k in ("sent", "done", "valid", "failed", "attempts", "retries", "lost_leases", "deferred", "kept"):
        setattr(total, k, getattr(total, k) + r[k])
    total.run_ids += r.get("run_ids", [])
    if r.get("database_away") and total.database_away is None:
        total.database_away, total.journal = r["database_away"], r.get("journal")
    for cause, k in r.get("failure_causes", {}).items():
        total.failure_causes[cause] = total.failure_causes.get(cause, 0) + k
    for name, e in r["per_llm"].items():
        t = total.per_llm.setdefault(name, {"done": 0, "valid": 0, "failed": 0, "attempts": 0})
        for k, v in e.items():
            t[k] += v

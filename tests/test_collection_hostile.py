"""Collection against a hostile world (issue 26): parents killed during the workers' start-up,
collectors paused past their lease, attempt rows that record what happened, a budget that counts
every request sent, database outages, capped Retry-After waits, Ctrl-C. Every server is on
127.0.0.1; every loop is bounded in count and time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

import discern_stats as ds
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.designs import design_cue
from discern_stats.simulate.server import FakeOpenAIServer
from discern_stats.store.db import Run, Trial
from server_specs import server_spec

COLLECT = textwrap.dedent("""
    import faulthandler, json, signal, sys
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    if __name__ == "__main__":  # worker processes are spawned: they import this file too
        faulthandler.register(signal.SIGUSR1, file=sys.stderr)  # a stuck collector's stacks, for the test
        r = collect(sys.argv[1], spec_from_dict(json.loads(sys.argv[2])), progress=False)
        print("DONE", r.done, "LOST", r.lost_leases, "SENT", r.sent, flush=True)
""")


def _collector(tmp_path: Path, url: str, spec: dict, marker: str = "") -> subprocess.Popen:
    f = tmp_path / "collect_once.py"
    f.write_text(COLLECT)
    env = dict(os.environ, DISCERN_TEST_MARKER=marker or uuid.uuid4().hex)
    return subprocess.Popen([sys.executable, str(f), url, json.dumps(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _marked(marker: str) -> list[int]:
    """Live (not zombie) processes whose environment carries ``marker``: a collector and its workers."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if f"DISCERN_TEST_MARKER={marker}".encode() in (d / "environ").read_bytes().split(b"\0") \
                    and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(int(d.name))
        except OSError:
            continue
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _done(db: ds.TrialDB) -> int:
    t = db.table(Trial)
    return int((t.state == "done").sum()) if len(t) else 0


def _wait_for(cond, timeout_s: float, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every_s)
    return cond()


# ----------------------------------------------------------------------------------------- point 1
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_workers_stop_when_the_parent_is_killed_at_any_phase_of_start_up(sqlite_url, tmp_path):
    """Kill a `workers: 3` collector at each phase of its start-up: at once (workers not yet
    spawned), when its workers exist (importing), when the plan is written, when the first request
    arrives (the parent collects while its workers still import: they are held there with SIGSTOP
    and continued after the kill), and mid-run. Within 60 s no process of it is left (a worker
    that is still importing exits at its first statement), and the server sees no request later
    than 1.5 s after the kill.
    Before (the worker read its parent's PID after its import): workers that finished importing
    after the kill saw PID 1 as their parent and collected the whole plan (265 requests in 10 s)."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=4)  # 192 requests
    base: dict[str, int] = {}

    def children(p: subprocess.Popen, workers_only: bool = False) -> list[int]:
        try:
            kids = [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        except OSError:
            return []
        if workers_only:  # spawned workers past their exec (freezing one before it blocks the parent's spawn)
            kids = [c for c in kids if b"spawn_main" in _cmdline(c)]
        return kids
    # (phase, condition to kill at, freeze the workers as soon as they exist until after the kill)
    phases = [
        ("at once", lambda p, srv: True, False),
        ("workers spawned", lambda p, srv: bool(children(p)), False),
        # the parent collects while its workers still import (they are held there): the reported case
        ("first request, workers importing", lambda p, srv: srv.counts["requests"] > base["requests"], True),
        ("run row written", lambda p, srv: len(db.table(Run)) > base["runs"], False),
        ("mid-run", lambda p, srv: _done(db) >= base["done"] + 20, False),
    ]
    late: dict[str, int] = {}
    left: dict[str, list[int]] = {}
    with FakeOpenAIServer("credulous", latency_ms=100) as srv:
        spec = server_spec(srv, concurrency=6, workers=3)
        for phase, reached, freeze in phases:
            marker = uuid.uuid4().hex
            base.update(runs=len(db.table(Run)), requests=srv.counts["requests"], done=_done(db))
            p = _collector(tmp_path, sqlite_url, spec, marker)
            frozen: list[int] = []
            if freeze:
                assert _wait_for(lambda: len(children(p, True)) >= 2 or p.poll() is not None, 60, 0.005), phase
                frozen = children(p, True)
                for c in frozen:
                    os.kill(c, signal.SIGSTOP)
            if not _wait_for(lambda: p.poll() is None and reached(p, srv) or p.poll() is not None, 60):
                os.kill(p.pid, signal.SIGUSR1)
                time.sleep(1)
                os.kill(p.pid, signal.SIGKILL)
                for c in frozen:
                    os.kill(c, signal.SIGKILL)
                pytest.fail(f"{phase}: not reached in 60 s; collector's stacks: {p.communicate()[1][-6000:]}")
            if p.poll() is not None:  # finished before the phase: nothing to kill
                continue
            os.kill(p.pid, signal.SIGKILL)
            killed = time.monotonic()
            p.wait()
            for c in frozen:
                try:
                    os.kill(c, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            # a worker still importing (seconds on a loaded machine) sends nothing; its first statement exits
            _wait_for(lambda: not _marked(marker), 60, 0.2)
            left[phase] = [(pid, _cmdline(pid)[:80], Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2])
                           for pid in _marked(marker)]
            for pid, *_ in left[phase]:  # leave nothing behind, whatever the verdict
                os.kill(pid, signal.SIGKILL)
            late[phase] = sum(t > killed + 1.5 for t in list(srv.arrivals))
    assert all(not v for v in left.values()), f"processes alive 60 s after the kill: {left}; late {late}"
    assert all(v == 0 for v in late.values()), f"requests arriving > 1.5 s after the kill: {late}"


# ----------------------------------------------------------------------------------------- point 2
def _paused_collectors(url: str, tmp_path: Path) -> tuple[int, int, int, int]:
    """Three collectors, lease 1.5 s; one is stopped (SIGSTOP) for 5 s once 20 requests went out,
    then continued. Returns (requests the server saw, trials, attempts sent, requests the paused
    collector sent after its pause for trials another collector also sent)."""
    import datetime as dt
    db = ds.TrialDB(url)
    design_cue(db.engine, n_worlds=2)  # 96 requests
    with FakeOpenAIServer("credulous", latency_ms=150) as srv:
        spec = server_spec(srv, concurrency=3, lease_s=1.5)
        ps = [_collector(tmp_path, url, spec) for _ in range(3)]
        assert _wait_for(lambda: srv.counts["requests"] >= 20, 90)
        stopped_at = dt.datetime.now(dt.timezone.utc)
        os.kill(ps[0].pid, signal.SIGSTOP)
        time.sleep(5.0)
        os.kill(ps[0].pid, signal.SIGCONT)
        outs = [p.communicate(timeout=180) for p in ps]
        assert all(p.returncode == 0 for p in ps), [o[1][-2000:] for o in outs]
        requests = srv.counts["requests"]
    t = db.table(Trial)
    assert (t.state == "done").all()
    att = db.attempts()
    sent = att[att.error_type.fillna("") != "not_sent"].copy()
    sent["paused"] = sent.collector.str.split(":").str[1] == str(ps[0].pid)
    started = sent.started_at.map(lambda x: x if x.tzinfo else x.replace(tzinfo=dt.timezone.utc))
    twice = sent.groupby("trial_id").collector.transform("nunique") > 1
    after = int((twice & sent.paused & (started > stopped_at)).sum())
    return requests, len(t), len(sent), after


def test_a_collector_paused_past_its_lease_sends_nothing_another_took(sqlite_url, tmp_path):
    """Before: the lost-lease check read what the heartbeat last saw, stale after the pause: the
    paused collector sent trials another collector had taken (102 requests for 96 trials, 3 of
    them sent after the pause). Now each send checks that the last renewal plus the lease has not
    passed, and renews at once (or gives the trial up) when it has. Only requests already sent
    (or answered, not yet written) when the pause began can be sent twice."""
    requests, trials, sent, after = _paused_collectors(sqlite_url, tmp_path)
    assert after == 0 and sent == requests >= trials


@pytest.mark.postgres
def test_a_collector_paused_past_its_lease_sends_nothing_another_took_postgres(pg_url, tmp_path):
    requests, trials, sent, after = _paused_collectors(pg_url, tmp_path)
    assert after == 0 and sent == requests >= trials


# ----------------------------------------------------------------------------------------- point 4
def test_attempt_rows_record_each_outcome(sqlite_url):
    """Before: every successful attempt said error_type='no_outcome', 'the collector stopped ...'."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous", fault_rate=0.3, faults=("500",), seed=3) as srv:
        r = collect(db, spec_from_dict(server_spec(srv, retry={"max_attempts": 10, "initial_wait_s": 0.01,
                                                                "max_wait_s": 0.02, "jitter_s": 0})), progress=False)
        counts = dict(srv.counts)
    assert r.done == 48
    att = db.attempts()
    ok, bad = att[att.ok.astype(bool)], att[~att.ok.astype(bool)]
    assert len(ok) == counts["ok"] == 48
    assert ok.error_type.isna().all() and ok.error.isna().all() and ok.latency_ms.notna().all()
    assert len(bad) == counts["500"] > 0
    assert (bad.error_type == "server_error").all() and (bad.http_status == 500).all()
    assert bad.error.str.contains("HTTP 500").all()


# ----------------------------------------------------------------------------------------- point 5
@pytest.mark.parametrize("budget", [25, 7])
def test_max_requests_counts_every_request_retries_included(sqlite_url, budget):
    """Before, with 30 % 500s: budgets of 25 and 7 sent 36 and 12 requests."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous", fault_rate=0.3, faults=("500",), seed=1) as srv:
        spec = server_spec(srv, retry={"max_attempts": 5, "initial_wait_s": 0.01, "max_wait_s": 0.02,
                                        "jitter_s": 0})
        r = collect(db, spec_from_dict(spec), progress=False, max_requests=budget)
        requests = srv.counts["requests"]
        assert requests == budget == r.sent
        att = db.attempts()
        assert (att.error_type != "not_sent").sum() == budget
        # a trial whose retry the budget refused goes back to the plan, not to 'failed'
        t = db.table(Trial)
        assert (t.state == "claimed").sum() == 0 and r.deferred == (t.state == "pending").sum() - (48 - len(
            set(att.trial_id)))
        srv.fault_rate = 0.0
        r2 = collect(db, spec_from_dict(spec), progress=False)  # resumes: every trial ends done or failed
    t = db.table(Trial)
    assert t.state.isin(["done", "failed"]).all() and r2.done + r.done + r.failed + r2.failed == 48


def test_max_requests_counts_timeouts_across_workers(sqlite_url):
    """Before: with timeouts, a budget of 24 sent 48 requests."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous", latency_ms=1500) as srv:
        spec = server_spec(srv, concurrency=4, workers=2, timeout_s=0.3,
                            retry={"max_attempts": 3, "initial_wait_s": 0.01, "max_wait_s": 0.02, "jitter_s": 0})
        r = collect(db, spec_from_dict(spec), progress=False, max_requests=12)
        time.sleep(0.2)
        requests = srv.counts["requests"]
    assert requests == 12 == r.sent


# ----------------------------------------------------------------------------------------- point 3
class _Outage:
    """Every INSERT / UPDATE on ``engine`` fails with SQLite's "disk I/O error" while ``on`` (a
    full or failing disk, seen from the collector); reads go through."""

    def __init__(self, engine, message: str = "disk I/O error") -> None:
        import sqlalchemy as sa
        self.on, self.failed, self.message = False, 0, message

        @sa.event.listens_for(engine, "before_cursor_execute")
        def fail(conn, cursor, statement, params, context, executemany):  # noqa: ANN001
            if self.on and statement.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE"):
                self.failed += 1
                import sqlite3
                raise sqlite3.OperationalError(self.message)


def test_a_short_database_hiccup_loses_nothing(sqlite_url, tmp_path, monkeypatch):
    """Writes fail for 0.8 s mid-run (retried with back-off): every trial done, each answered once,
    nothing journaled. Before: the writer died with the first failed write (a traceback, trials
    left claimed, the run left 'running')."""
    import threading
    monkeypatch.setenv("DISCERN_JOURNAL_DIR", str(tmp_path / "journal"))
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    out = _Outage(db.engine)
    with FakeOpenAIServer("credulous", latency_ms=50) as srv:
        def hiccup():
            _wait_for(lambda: srv.counts["ok"] >= 10, 30)
            out.on = True
            time.sleep(0.8)
            out.on = False
        th = threading.Thread(target=hiccup)
        th.start()
        r = collect(db, spec_from_dict(server_spec(srv, concurrency=4)), progress=False)
        th.join()
        ok = srv.counts["ok"]
    assert out.failed > 0
    assert r.done == 48 and ok == 48
    assert (db.table(Trial).state == "done").all()
    assert list(db.table(Run).status) == ["finished"]
    assert not (tmp_path / "journal").exists() or not list((tmp_path / "journal").glob("*.jsonl"))


def test_a_database_that_stays_away_keeps_answers_in_a_journal(sqlite_url, tmp_path, monkeypatch):
    """The disk fails for good after 10 answers (patience 1 s): one line naming the journal, the
    answered responses in it; the next run loads them, and every answer the server gave is a done
    trial (none paid twice). Before: 'database or disk is full' lost every answer in flight with a
    traceback, the run stayed 'running' and its trials 'claimed'."""
    import threading

    from discern_stats.core.errors import CollectorError
    monkeypatch.setenv("DISCERN_JOURNAL_DIR", str(tmp_path / "journal"))
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    out = _Outage(db.engine, "database or disk is full")
    with FakeOpenAIServer("credulous", latency_ms=100) as srv:
        spec = server_spec(srv, concurrency=4, database_patience_s=1.0)

        def fail_for_good():
            _wait_for(lambda: srv.counts["ok"] >= 10, 30)
            out.on = True
        th = threading.Thread(target=fail_for_good)
        th.start()
        with pytest.raises(CollectorError) as err:
            collect(db, spec_from_dict(spec), progress=False)
        th.join()
        msg = str(err.value)
        assert "\n" not in msg and "stopped taking writes" in msg and "database or disk is full" in msg
        journals = list((tmp_path / "journal").glob("*.jsonl"))
        assert len(journals) == 1 and str(journals[0]) in msg
        kept = sum("trial" in json.loads(ln) for ln in journals[0].read_text().splitlines())
        assert kept > 0 and f"{kept} answered response(s) are kept" in msg
        out.on = False  # the disk has room again
        with pytest.warns(UserWarning, match=f"{kept} answered response"):
            r = collect(db, spec_from_dict(spec), progress=False)
        ok = srv.counts["ok"]
    t = db.table(Trial)
    assert (t.state == "done").all() and len(t) == 48
    assert ok == 48  # every answer paid for is a trial: none lost, none asked again
    assert not list((tmp_path / "journal").glob("*.jsonl"))  # loaded (kept as *.loaded-<time>)
    runs = db.table(Run).set_index("id")
    assert runs.loc[r.run_id, "status"] == "finished" and set(runs.status) == {"database_away", "finished"}
    att = db.attempts()
    assert att[att.ok.astype(bool)].trial_id.nunique() == 48


class _CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of PostgreSQL: ``restart(s)`` drops every connection and
    refuses new ones for ``s`` seconds, as a PostgreSQL restart does to its clients (the tests
    share one server with other sessions: restarting it is not safe)."""

    def __init__(self, port: int = 5432) -> None:
        import socket
        import threading
        self.target = ("127.0.0.1", port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.refusing_until = 0.0
        self.conns: list = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if time.monotonic() < self.refusing_until:
                c.close()
                continue
            try:
                u = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b) -> None:  # noqa: ANN001
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def restart(self, seconds: float) -> None:
        import socket
        self.refusing_until = time.monotonic() + seconds
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.sock.close()
        self.restart(0)


@pytest.mark.postgres
def test_a_postgres_restart_mid_run_loses_nothing(pg_url, tmp_path):
    """PostgreSQL 'restarts' (every connection dropped, new ones refused for 0.5 s) twice mid-run,
    under a collector process: exit 0, no traceback, every trial done, each request sent once.
    Before: exit 1 with 4 tracebacks, 35 answered responses not recorded, 43 trials left claimed,
    the run left 'running'."""
    db = ds.TrialDB(pg_url)
    design_cue(db.engine, n_worlds=2)  # 96 requests
    proxy = _CuttableProxy()
    via = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    try:
        with FakeOpenAIServer("credulous", latency_ms=100) as srv:
            p = _collector(tmp_path, via, server_spec(srv, concurrency=4))
            for at in (15, 50):
                assert _wait_for(lambda: srv.counts["ok"] >= at or p.poll() is not None, 90)
                proxy.restart(0.5)
            out, err = p.communicate(timeout=180)
            requests = srv.counts["requests"]
    finally:
        proxy.close()
    assert p.returncode == 0 and "Traceback" not in err, err[-3000:]
    t = db.table(Trial)
    seen = f"{out.strip()}; states {t.state.value_counts().to_dict()}; requests {requests}; stderr {err[-2000:]}"
    assert (t.state == "done").all() and len(t) == 96, seen
    assert requests == 96, seen
    assert list(db.table(Run).status) == ["finished"], seen


def _hold_pending_rows(pg_url: str, spec, n: int, release, timeout_s: float):  # noqa: ANN001, ANN202
    """A thread that claims ``n`` pending trials in a transaction it leaves open (as the backend of a
    connection that dropped mid-claim does, until the server notices) and rolls it back once
    ``release()`` is true (or after ``timeout_s``). Returns (thread, ids held)."""
    import threading

    import sqlalchemy as sa

    from discern_stats.collect.planning import prepare_run
    prepare_run(ds.TrialDB(pg_url), spec)  # the trial rows (idempotent: the collector plans the same)
    eng = sa.create_engine(pg_url)
    conn = eng.connect()
    tx = conn.begin()
    T = Trial.__table__
    ids = [r[0] for r in conn.execute(sa.update(T).where(T.c.id.in_(
        sa.select(T.c.id).where(T.c.state == "pending").order_by(T.c.id.desc()).limit(n).scalar_subquery()))
        .values(state="claimed", claimed_by="ghost:1:dropped").returning(T.c.id))]

    def hold() -> None:
        t0 = time.monotonic()
        while not release() and time.monotonic() - t0 < timeout_s:
            time.sleep(0.05)
        tx.rollback()
        conn.close()
        eng.dispose()
    th = threading.Thread(target=hold, daemon=True)
    th.start()
    return th, ids


@pytest.mark.postgres
def test_trials_locked_by_a_dropped_claim_are_waited_for_not_left_pending(pg_url):
    """5 pending trials are held by another session's open transaction (a claim whose connection
    dropped and whose backend the server has not yet ended: CI and local runs of
    test_a_postgres_restart_mid_run_loses_nothing saw one 'idle in transaction' 2-4 s after the run
    had ended with 91 of 96 done and 5 pending). The transaction rolls back 1 s after every other
    trial is answered: the collector waits for them (SKIP LOCKED passes them over), so all are done,
    each request sent once. Before: it ended 'finished' with the 5 pending."""
    db = ds.TrialDB(pg_url)
    design_cue(db.engine, n_worlds=1)  # 48 requests
    with FakeOpenAIServer("credulous") as srv:
        ended: dict[str, float] = {}

        def release() -> bool:
            if srv.counts["ok"] >= 43:
                ended.setdefault("at", time.monotonic())
            return "at" in ended and time.monotonic() - ended["at"] > 1.0
        spec = spec_from_dict(server_spec(srv, concurrency=4))
        th, ids = _hold_pending_rows(pg_url, spec, 5, release, timeout_s=60)
        r = collect(db, spec, progress=False)
        requests = srv.counts["requests"]
    th.join(10)
    t = db.table(Trial)
    assert len(ids) == 5
    assert (t.state == "done").all() and len(t) == 48, t.state.value_counts().to_dict()
    assert requests == 48 and r.done == 48
    assert list(db.table(Run).status) == ["finished"]


@pytest.mark.postgres
def test_trials_locked_past_the_patience_are_left_pending_with_a_warning(pg_url):
    """The same lock held past ``database_patience_s`` (1 s): the collector ends after about that
    long with one warning naming the count, and the 5 trials are pending again for the next run
    (nothing sent for them, nothing lost); a second run collects them."""
    db = ds.TrialDB(pg_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous") as srv:
        spec = spec_from_dict(server_spec(srv, concurrency=4, database_patience_s=1))
        th, ids = _hold_pending_rows(pg_url, spec, 5, lambda: False, timeout_s=8)
        t0 = time.monotonic()
        with pytest.warns(UserWarning, match=r"5 trial\(s\) stayed locked by another database session"):
            r = collect(db, spec, progress=False)
        took = time.monotonic() - t0
        th.join(15)
        assert r.done == 43 and srv.counts["requests"] == 43 and took < 7
        t = db.table(Trial)
        assert sorted(t[t.state == "pending"].id) == sorted(ids)
        r2 = collect(db, spec_from_dict(server_spec(srv, concurrency=4)), progress=False)
        assert r2.done == 5 and srv.counts["requests"] == 48
    assert (db.table(Trial).state == "done").all()


def test_commits_whose_reply_is_lost_claim_nothing_twice_and_strand_nothing(sqlite_url, monkeypatch):
    """Every kind of database call of the collector commits once and then loses its reply (the
    connection drops at the commit, as in a PostgreSQL restart), so `with_db_retry` runs it again:
    every trial is done, each request sent once, one run row, finished, the counts right.
    Before: a retried claim left the first claim's trials claimed and never sent; the run ended
    'finished' with them back at 'pending' (CI, stop 33: test_a_postgres_restart_mid_run_loses_nothing);
    a retried run insert left a second run row 'running'; a retried write counted its trials as lost."""
    import sqlalchemy as sa

    import discern_stats.collect.collector as C
    import discern_stats.collect.writer as W
    from discern_stats.collect.journal import with_db_retry
    from discern_stats.collect.queue import ORPHAN_CLAIM_TEXT
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)  # 48 requests
    lost: dict[str, int] = {}

    def reply_lost_once(fn, *args, **kw):  # noqa: ANN001, ANN202
        name = getattr(fn, "__name__", "?")

        def once(*a, **k):  # noqa: ANN002, ANN003, ANN202
            out = fn(*a, **k)
            if lost.get(name, 0) < (3 if name == "claim" else 1):
                lost[name] = lost.get(name, 0) + 1
                raise sa.exc.OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))
            return out
        return with_db_retry(once, *args, **kw)
    monkeypatch.setattr(C, "with_db_retry", reply_lost_once)
    monkeypatch.setattr(W, "with_db_retry", reply_lost_once)
    with FakeOpenAIServer("credulous") as srv:
        r = collect(db, spec_from_dict(server_spec(srv, concurrency=4)), progress=False)
        requests = srv.counts["requests"]
    assert {"claim", "insert", "_flush", "end"} <= set(lost), lost
    t = db.table(Trial)
    assert (t.state == "done").all() and len(t) == 48
    assert requests == 48 and r.sent == 48
    assert r.done == 48 and r.lost_leases == 0
    assert list(db.table(Run).status) == ["finished"]
    att = db.attempts()
    orphans = att[att.error == ORPHAN_CLAIM_TEXT]
    assert len(orphans) > 0 and (orphans.error_type == "not_sent").all()
    assert att[att.ok.astype(bool)].trial_id.nunique() == 48 and (att.error_type != "no_outcome").all()


# ----------------------------------------------------------------------------------------- point 8
def test_a_long_retry_after_is_capped():
    """Retry-After: 3600 with retry.max_retry_after_s = 0.2: the retries go 0.2 s apart and the
    request fails after max_attempts. Before: each wait was 3600 s (the run stalled silently)."""
    import asyncio

    from discern_stats.collect.collector import _with_retries
    from discern_stats.collect.direct_client import DirectHTTPError
    from discern_stats.collect.spec import RetryPolicy
    calls: list[float] = []

    async def once():
        calls.append(time.monotonic())
        raise DirectHTTPError(429, "slow down", {"Retry-After": "3600"})
    policy = RetryPolicy(max_attempts=3, initial_wait_s=0.01, max_wait_s=0.02, jitter_s=0.0, max_retry_after_s=0.2)
    with pytest.raises(DirectHTTPError):
        asyncio.run(asyncio.wait_for(_with_retries(once, policy), timeout=10))
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert len(calls) == 3 and all(0.19 <= g < 1.0 for g in gaps), gaps


def test_waits_show_in_the_progress_line(sqlite_url):
    """While retries wait (Retry-After 0.6 s here), the progress line says how many and for how long."""
    import discern_stats.collect.collector as C
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    shown: list[str] = []
    orig = C.Collector._show_progress

    def spy(self, t0, **fields):
        orig(self, t0, **fields)
        shown.append(self.progress.tasks[0].fields.get("waiting", ""))
    with FakeOpenAIServer("credulous", fault_rate=1.0, faults=("429",), retry_after_s=0.6) as srv:
        spec = server_spec(srv, concurrency=2, retry={"max_attempts": 3, "initial_wait_s": 0.01, "max_wait_s": 0.02,
                                                       "jitter_s": 0, "max_retry_after_s": 5})
        C.Collector._show_progress = spy
        try:
            r = collect(db, spec_from_dict(spec), progress=False, max_requests=6)
        finally:
            C.Collector._show_progress = orig
    assert r.sent == 6
    assert any("waiting ≤" in s for s in shown), shown[:20]


# ----------------------------------------------------------------------------------------- point 9
LLM_OK = {"name": "s", "provider": "synthetic:credulous"}


@pytest.mark.parametrize("change, msg", [
    ({"lease_s": 1e15}, "lease_s"),
    ({"lease_s": float("inf")}, "lease_s"),
    ({"timeout_s": float("inf")}, "timeout_s"),
    ({"requests_per_second": 1e-12}, "requests_per_second"),
    ({"interventions": []}, "names no intervention"),
    ({"llms": [dict(LLM_OK, extra={"api_key": "sk-123"})]}, "api_key_env"),
    ({"llms": [dict(LLM_OK, name="")]}, "llms.0.name"),
    ({"llms": [dict(LLM_OK, max_tokens=-5)]}, "max_tokens"),
    ({"llms": [{"name": "o", "provider": "openai:x", "base_url": "http://127.0.0.1:8000/v1\n"}]}, "line break"),
    ({"retry": {"max_wait_s": float("inf")}}, "max_wait_s"),
])
def test_spec_edges_are_one_line_errors(sqlite_url, change, msg):
    """Before: OverflowError tracebacks after writing an LLM row, 48 trials and a 'running' run
    (lease_s 1e15 / .inf); every trial failed (timeout_s .inf); a hang (1e-12 req/s); silently C0
    (interventions []); accepted (empty name, negative max_tokens, a key in extra); a traceback
    (a base_url ending in a newline)."""
    from discern_stats.core.errors import SpecError
    with pytest.raises(SpecError, match=msg) as err:
        spec_from_dict({"name": "e", "design": "cue", "llms": [LLM_OK], **change})
    assert "\n" not in str(err.value).replace("\\n", "")


def test_more_spec_edges_leave_the_database_unchanged(sqlite_url, tmp_path):
    """A duplicated YAML key, a missing profile_file, an 'extra' the chat model refuses, a read-only
    database: one line each (SpecError), the database byte-for-byte as it was."""
    import sqlite3

    from discern_stats.collect.spec import load_spec
    from discern_stats.core.errors import SpecError
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    db.engine.dispose()
    path = Path(sqlite_url.removeprefix("sqlite:///"))

    def dump() -> str:
        with sqlite3.connect(path) as conn:
            return "\n".join(conn.iterdump())
    before = dump()
    y = tmp_path / "dup.yaml"
    y.write_text("name: a\ndesign: cue\nname: b\nllms: [{name: s, provider: 'synthetic:credulous'}]\n")
    with pytest.raises(SpecError, match="'name' is given twice"):
        load_spec(y)
    bad = [({"name": "p", "design": "cue", "llms": [dict(LLM_OK, profile_file=str(tmp_path / "nope.yaml"))]},
            "does not exist"),
           ({"name": "x", "design": "cue", "llms": [dict(LLM_OK, extra={"latency_ms": "slow"})]},
            "refused by the chat model")]
    for spec, msg in bad:
        with pytest.raises(SpecError, match=msg):
            collect(sqlite_url, spec_from_dict(spec), progress=False)
        assert dump() == before
    os.chmod(path, 0o444)
    try:
        if os.access(path, os.W_OK):
            pytest.skip("running as a user who can write read-only files")
        with pytest.raises(SpecError, match="read-only"):
            collect(sqlite_url, spec_from_dict({"name": "r", "design": "cue", "llms": [LLM_OK]}), progress=False)
    finally:
        os.chmod(path, 0o644)
    assert dump() == before


# ---------------------------------------------------------------------------------------- point 10
def test_secrets_in_extra_are_never_stored(sqlite_url):
    """Before: extra.default_headers.X-Secret was written verbatim to run.spec_json and llm.params_json."""
    from discern_stats.store.db import LLM
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous") as srv:
        spec = server_spec(srv)
        spec["llms"][0]["extra"] = {"default_headers": {"X-Secret": "hunter2-header"}, "model_kwargs":
                                    {"user": "me", "access_token": "hunter2-token"}}
        collect(db, spec_from_dict(spec), progress=False, max_requests=2)
    stored = " ".join(db.table(Run).spec_json) + " ".join(db.table(LLM).params_json)
    assert "hunter2" not in stored
    assert "X-Secret" in stored and '"user": "me"' in stored.replace('":"', '": "')  # names kept, non-secrets kept


# ---------------------------------------------------------------------------------------- 28.6
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_says_what_was_kept_and_marks_the_run(sqlite_url, tmp_path, workers):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) during `collect`: one line saying
    what was kept and how to resume, the runs marked 'interrupted', no claim left behind, no
    traceback. Before: exit 130 with nothing said, the run left 'running'. The child gets the default
    SIGINT disposition: a suite started in the background (``nohup ./run.sh test &``) ignores SIGINT,
    the child would inherit that, finish the run and exit 0 (both parameters failed so)."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=2)
    with FakeOpenAIServer("credulous", latency_ms=200) as srv:
        spec = tmp_path / "s.yaml"
        spec.write_text(json.dumps(server_spec(srv, concurrency=4, workers=workers)))  # JSON is YAML
        p = subprocess.Popen([sys.executable, "-c", "from discern_stats.cli import app; app()", "collect", str(spec),
                              "--db", sqlite_url, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert _wait_for(lambda: _done(db) >= 10 or p.poll() is not None, 90)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode != 0 and "Traceback" not in err, err[-3000:]
    said = [ln for ln in lines if ln.startswith("interrupted:")]
    assert len(said) == 1 and "re-run the same command to resume" in said[0], lines
    assert len([ln for ln in lines if ln != said[0] and ln.strip() != "Aborted!"]) == 0, lines
    runs = db.table(Run)
    assert set(runs.status) == {"interrupted"} and runs.run_group.nunique() == 1
    t = db.table(Trial)
    assert (t.state == "claimed").sum() == 0
    assert f"{int(t.state.isin(['done', 'failed']).sum())} trial(s) answered" in said[0]


# ---------------------------------------------------------------------------------------- point 11
def test_worker_runs_share_a_run_group_and_trials_record_the_served_model(sqlite_url):
    """Before: a `--workers N` run left N run rows with nothing linking them, and no trial said which
    model the server reported or its system fingerprint."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous", latency_ms=20) as srv:
        r = collect(db, spec_from_dict(server_spec(srv, concurrency=4, workers=2)), progress=False)
    assert r.done == 48
    runs = db.table(Run)
    assert len(runs) >= 2 and runs.run_group.notna().all() and runs.run_group.nunique() == 1
    assert runs.run_group.iloc[0] == r.run_group and sorted(r.run_ids) == sorted(runs.id)
    t = db.table(Trial)
    assert (t.model_reported == "synthetic-served").all() and (t.system_fingerprint == "fp_simulator").all()
    assert t.tokens_in.notna().all() and t.finish_reason.eq("stop").all()


# ----------------------------------------------------------------------------------------- point 7
def test_anthropic_requests_follow_the_messages_api_contract(sqlite_url, monkeypatch):
    """Against a server that enforces the Messages API (x-api-key, anthropic-version, body): every
    trial answered; no Authorization header; the system prompt top-level; a wrong key fails with
    HTTP 401 and appears nowhere. Before: with the pinned SDK every request carried
    'Authorization: Bearer' and no x-api-key (48 of 48 rejected with 401)."""
    from discern_stats.simulate.server import AnthropicMessagesServer
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "sk-ant-test-good")
    monkeypatch.setenv("TEST_ANTHROPIC_BAD", "sk-ant-test-wrong")
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with AnthropicMessagesServer("sk-ant-test-good") as srv:
        llm = {"name": "claude", "provider": "anthropic:claude-test", "base_url": srv.base_url,
               "api_key_env": "TEST_ANTHROPIC_KEY"}
        spec = {"name": "a", "design": "cue", "concurrency": 4, "retry": {"max_attempts": 1}, "llms": [llm]}
        r = collect(db, spec_from_dict(spec), progress=False)
        bad = dict(spec, llms=[dict(llm, name="claude-bad", api_key_env="TEST_ANTHROPIC_BAD")])
        r_bad = collect(db, spec_from_dict(bad), progress=False, max_requests=2)
        seen, counts = list(srv.seen), dict(srv.counts)
    assert r.done == 48 and r.failed == 0 and counts["ok"] == 48 and counts["invalid"] == 0
    good = [(h, b) for h, b in seen if h.get("x-api-key") == "sk-ant-test-good"]
    assert len(good) == 48
    assert all("authorization" not in h and h["anthropic-version"] == "2023-06-01" for h, _ in good)
    assert all(isinstance(b["system"], str) and all(m["role"] != "system" for m in b["messages"]) for _, b in good)
    assert r_bad.failed == 2 and counts["unauthorized"] == 2
    att = db.attempts()
    assert (att[~att.ok.astype(bool)].http_status == 401).all()
    stored = " ".join(att.error.dropna()) + " ".join(db.table(Run).spec_json)
    assert "sk-ant-test" not in stored


# ------------------------------------------------------------------------------------ issue 27.5
def test_the_heartbeat_says_when_it_fails_and_when_it_works_again(sqlite_url, caplog):
    """Before: the heartbeat loop retried any error without logging it."""
    import logging

    from discern_stats.collect.queue import LeaseKeeper, awake_clock
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    out = _Outage(db.engine)
    keeper = LeaseKeeper(db, "me", 1.0)  # a beat every 1/3 s
    keeper.hold([{"id": 1}], awake_clock())
    with caplog.at_level(logging.WARNING, logger="discern_stats.collect.queue"):
        out.on = True
        keeper.start()
        assert _wait_for(lambda: out.failed >= 3, 10)
        out.on = False
        assert _wait_for(lambda: any("works again" in r.message for r in caplog.records), 10)
        keeper.stop()
    failed = [r.message for r in caplog.records if "heartbeat failed" in r.message]
    assert len(failed) == 1 and "disk I/O error" in failed[0]


def test_costs_from_a_price_table(sqlite_url, tmp_path):
    """Per LLM and per run: tokens reported by the server times the user's prices, checked by hand."""
    from discern_stats.collect.costs import cost_table, load_prices
    from discern_stats.core.errors import InputError
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous") as srv:
        r1 = collect(db, spec_from_dict(server_spec(srv)), progress=False, max_requests=10)
        r2 = collect(db, spec_from_dict(server_spec(srv)), progress=False)
    prices = tmp_path / "prices.csv"
    prices.write_text("llm,input_per_million,output_per_million,currency\nfake,2.5,10,USD\n")
    c = cost_table(db, load_prices(prices))
    t = db.table(Trial)
    by_run = {rid: (g.tokens_in.sum() * 2.5 + g.tokens_out.sum() * 10) / 1e6 for rid, g in t.groupby("run_id")}
    got = {int(x.run_id): x.cost for x in c.itertuples() if not pd.isna(x.run_id)}
    assert got.keys() == {r1.run_id, r2.run_id} and all(abs(got[k] - by_run[k]) < 1e-12 for k in got)
    total = c[c.run_id.isna()].iloc[0]
    assert total.trials == 48 and abs(total.cost - sum(by_run.values())) < 1e-12 and total.currency == "USD"
    bad = tmp_path / "bad.csv"
    bad.write_text("llm,input_per_million,output_per_million\nfake,-1,10\n")
    with pytest.raises(InputError, match="row 2, column 'input_per_million'"):
        load_prices(bad)


def test_db_info_shows_costs_from_a_price_table(sqlite_url, tmp_path):
    """`db info --prices FILE`: the cost table per LLM and run on screen and in --json; a bad price
    file is one line, exit 2, before the database is read."""
    from typer.testing import CliRunner
    from discern_stats.cli import app
    cli = CliRunner()
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous") as srv:
        collect(db, spec_from_dict(server_spec(srv)), progress=False)
    prices = tmp_path / "prices.csv"
    prices.write_text("llm,input_per_million,output_per_million,currency\nfake,2.5,10,USD\n")
    t = db.table(Trial)
    want = (t.tokens_in.sum() * 2.5 + t.tokens_out.sum() * 10) / 1e6
    assert want > 0
    r = cli.invoke(app, ["db", "info", "--db", sqlite_url, "--prices", str(prices), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["costs"]
    total = next(x for x in rows if x["run_id"] is None)
    assert abs(total["cost"] - want) < 1e-12 and total["trials"] == 48
    r = cli.invoke(app, ["db", "info", "--db", sqlite_url, "--prices", str(prices)])
    assert r.exit_code == 0 and "Tokens and cost per LLM and run" in r.output and f"{want:,.4f} USD" in r.output, r.output
    r = cli.invoke(app, ["db", "info", "--db", sqlite_url, "--prices", str(tmp_path / "nope.csv")])
    assert r.exit_code == 2 and "price table not found" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output

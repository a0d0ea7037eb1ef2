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

import pytest

import discern_stats as ds
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.designs import design_cue
from discern_stats.simulate.server import FakeOpenAIServer
from discern_stats.store.db import Run, Trial

COLLECT = textwrap.dedent("""
    import faulthandler, json, signal, sys
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    if __name__ == "__main__":  # worker processes are spawned: they import this file too
        faulthandler.register(signal.SIGUSR1, file=sys.stderr)  # a stuck collector's stacks, for the test
        r = collect(sys.argv[1], spec_from_dict(json.loads(sys.argv[2])), progress=False)
        print("DONE", r.done, "LOST", r.lost_leases, "SENT", r.sent, flush=True)
""")


def _server_spec(srv: FakeOpenAIServer, **kw) -> dict:
    spec = {"name": "t", "design": "cue", "concurrency": 8, "timeout_s": 10,
            "retry": {"max_attempts": 3, "initial_wait_s": 0.05, "max_wait_s": 0.1, "jitter_s": 0.0},
            "llms": [{"name": "fake", "provider": "openai:synthetic", "base_url": srv.base_url}]}
    spec.update(kw)
    return spec


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
        spec = _server_spec(srv, concurrency=6, workers=3)
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
        spec = _server_spec(srv, concurrency=3, lease_s=1.5)
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
        r = collect(db, spec_from_dict(_server_spec(srv, retry={"max_attempts": 10, "initial_wait_s": 0.01,
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
        spec = _server_spec(srv, retry={"max_attempts": 5, "initial_wait_s": 0.01, "max_wait_s": 0.02,
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
        spec = _server_spec(srv, concurrency=4, workers=2, timeout_s=0.3,
                            retry={"max_attempts": 3, "initial_wait_s": 0.01, "max_wait_s": 0.02, "jitter_s": 0})
        r = collect(db, spec_from_dict(spec), progress=False, max_requests=12)
        time.sleep(0.2)
        requests = srv.counts["requests"]
    assert requests == 12 == r.sent

"""Collection that never pays twice and always says what happened (issue 15): lease heartbeats,
attempt rows before requests leave, an exact budget, refused runs that write nothing, failures
that exit non-zero with their causes, workers that die with their parent, read-only commands
that create nothing, a demo that deletes only its own folder, runs marked when interrupted."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.cli import app
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.store.db import Run, Trial
from discern_stats.designs import design_cue
from discern_stats.core.errors import SpecError
from discern_stats.simulate.server import FakeOpenAIServer
from server_specs import server_spec

runner = CliRunner()

# the guard matters: spawned workers import this script again, and must not start a collection of their own
COLLECT = textwrap.dedent("""
    import json, sys
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    if __name__ == "__main__":
        r = collect(sys.argv[1], spec_from_dict(json.loads(sys.argv[2])), progress=False)
        print("DONE", r.done, "LOST", r.lost_leases, "SENT", r.sent, flush=True)
""")


def _collector(tmp_path: Path, url: str, spec: dict) -> subprocess.Popen:
    f = tmp_path / "collect_once.py"
    f.write_text(COLLECT)
    return subprocess.Popen([sys.executable, str(f), url, json.dumps(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _done(db: ds.TrialDB) -> int:
    t = db.table(Trial)
    return int((t.state == "done").sum()) if len(t) else 0


def _dump(url: str) -> str:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return "\n".join(conn.iterdump())


def test_two_collectors_with_a_short_lease_send_each_request_once(sqlite_url, tmp_path):
    """Lease 2 s, server latency 1 s, two collectors: claimed requests wait in the claim-ahead
    queue longer than the lease, so without a heartbeat the other collector claims and sends them
    again (measured before: 189 server requests for 96 trials)."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)  # 48 requests
    with FakeOpenAIServer("credulous", latency_ms=1000) as srv:
        spec = server_spec(srv, lease_s=2.0, concurrency=4)
        ps = [_collector(tmp_path, sqlite_url, spec) for _ in range(2)]
        outs = [p.communicate(timeout=240) for p in ps]
        assert all(p.returncode == 0 for p in ps), [o[1][-3000:] for o in outs]
        requests = srv.counts["requests"]
    assert requests == 48, outs
    t = db.table(Trial)
    assert (t.state == "done").all() and len(t) == 48
    done = sum(int(o[0].split("DONE")[1].split()[0]) for o in outs)
    lost = sum(int(o[0].split("LOST")[1].split()[0]) for o in outs)
    assert done == 48 and lost == 0
    assert len(db.attempts()) == 48


def test_sigkill_leaves_an_attempt_row_for_every_request_the_server_saw(sqlite_url, tmp_path):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=2)  # 96 requests
    rng = random.Random()  # the kill moments are random on purpose; the property must hold for any
    with FakeOpenAIServer("credulous", latency_ms=150) as srv:
        spec = server_spec(srv, concurrency=8)
        for _ in range(4):
            p = _collector(tmp_path, sqlite_url, spec)
            time.sleep(rng.uniform(1.5, 3.5))  # past the start-up, somewhere in the run
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            assert len(db.attempts()) >= srv.counts["requests"]
        p = _collector(tmp_path, sqlite_url, spec)
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        requests = srv.counts["requests"]
    att = db.attempts()
    assert len(att) >= requests  # every request that left the machine has a row
    assert (db.table(Trial).state == "done").all()
    answered = att[att.ok].groupby("trial_id").size()
    assert len(answered) == 96


def test_budget_is_exact_across_llms(sqlite_url):
    """Two LLM loops used to read the same unspent budget across the await of a claim (8 -> 16 sent)."""
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous", latency_ms=20) as srv:
        spec = server_spec(srv)
        spec["llms"] = [dict(spec["llms"][0], name=f"fake-{k}") for k in range(2)]
        for budget in (8, 20):
            before = srv.counts["requests"]
            r = collect(db, spec_from_dict(spec), progress=False, max_requests=budget)
            assert srv.counts["requests"] - before == budget == r.sent


def test_refused_runs_leave_the_database_unchanged(sqlite_url, monkeypatch):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    monkeypatch.delenv("MISSING_KEY_VAR", raising=False)
    before = _dump(sqlite_url)
    bad = [
        ({"name": "k", "design": "cue", "llms": [{"name": "o", "provider": "openai:gpt-x",
                                                   "api_key_env": "MISSING_KEY_VAR"}]}, "MISSING_KEY_VAR is not set"),
        ({"name": "p", "design": "cue", "llms": [{"name": "s", "provider": "synthetic:no-such-profile"}]},
         "no-such-profile"),
        ({"name": "u", "design": "cue", "llms": [{"name": "v", "provider": "openai:x", "base_url": "127.0.0.1:8000"}]},
         "not an http"),
        ({"name": "r", "design": "cue", "interventions": ["C3"],
          "llms": [{"name": "s2", "provider": "synthetic:credulous"}]}, "no planned cue requests"),
    ]
    for spec, msg in bad:
        with pytest.raises(SpecError, match=msg):
            collect(db, spec_from_dict(spec), progress=False)
        assert _dump(sqlite_url) == before, spec
    # a corrected run is not refused: no LLM name was bound to the bad settings
    ok = {"name": "p", "design": "cue", "llms": [{"name": "s", "provider": "synthetic:credulous"}]}
    assert collect(db, spec_from_dict(ok), progress=False).done == 48


def test_failures_exit_non_zero_with_their_causes(sqlite_url, tmp_path):
    r = runner.invoke(app, ["design", "cue", "--worlds", "1", "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    spec = tmp_path / "down.yaml"
    spec.write_text(textwrap.dedent("""
        name: down
        design: cue
        llms: [{name: m-down, provider: "openai:x", base_url: "http://127.0.0.1:9/v1"}]
        concurrency: 4
        retry: {max_attempts: 1, initial_wait_s: 0.01, max_wait_s: 0.02, jitter_s: 0}
    """))
    # one attempt per trial: --max-requests counts requests, retries included (issue 26)
    r = runner.invoke(app, ["collect", str(spec), "--db", sqlite_url, "--quiet", "--max-requests", "6"])
    assert r.exit_code == 1
    assert "6 trial(s) failed: m-down: connection at 127.0.0.1:9" in r.output
    assert f"discern-stats collect {spec} --retry-failed --db {sqlite_url}" in r.output


def test_a_timeout_names_its_limit_and_endpoint(sqlite_url):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=1)
    with FakeOpenAIServer("credulous", latency_ms=2000) as srv:
        spec = server_spec(srv, timeout_s=0.3, retry={"max_attempts": 1})
        r = collect(db, spec_from_dict(spec), progress=False, max_requests=2)
    assert r.failed == 2 and list(r.failure_causes.values()) == [2]
    err = db.attempts().error
    assert err.str.contains(f"no answer within timeout_s=0.3 s from 127.0.0.1:{srv.port}").all()


def test_workers_stop_when_their_parent_is_killed(sqlite_url, tmp_path):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=4)
    with FakeOpenAIServer("credulous", latency_ms=300) as srv:
        spec = server_spec(srv, concurrency=4, workers=2)
        p = _collector(tmp_path, sqlite_url, spec)
        deadline = time.time() + 60
        children: list[int] = []
        while time.time() < deadline and not children:
            time.sleep(0.5)
            children = [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        assert children, "no worker process started"
        while time.time() < deadline and _done(db) < 10:
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(Path(f"/proc/{c}").exists() and
                                             Path(f"/proc/{c}/stat").read_text().split()[2] != "Z" for c in children):
            time.sleep(0.2)
        alive = [c for c in children if Path(f"/proc/{c}").exists() and Path(f"/proc/{c}/stat").read_text().split()[2] != "Z"]
        assert not alive, "a worker outlived its parent"


def test_read_only_commands_create_no_database(tmp_path):
    target = tmp_path / "typo.db"
    for args in (["db", "info"], ["metrics", "cue", "--out", str(tmp_path / "m.csv")],
                 ["export", "trials", "cue", "--out", str(tmp_path / "e.csv")], ["report"]):
        r = runner.invoke(app, args + ["--db", f"sqlite:///{target}"])
        assert r.exit_code == 2 and "no database at" in r.output and not target.exists(), (args, r.output)
        assert "Traceback" not in r.output


def test_demo_refuses_a_folder_it_did_not_make(tmp_path):
    mine = tmp_path / "precious"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    r = runner.invoke(app, ["demo", "--out", str(mine), "--no-fit", "--no-report", "--worlds", "1"])
    assert r.exit_code == 2 and "was not made by the demo" in r.output
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_runs_record_their_trials_and_interrupted_runs_are_marked(sqlite_url, tmp_path):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=2)
    with FakeOpenAIServer("credulous", latency_ms=200) as srv:
        spec = server_spec(srv, concurrency=2)
        p = _collector(tmp_path, sqlite_url, spec)
        deadline = time.time() + 60
        while time.time() < deadline and _done(db) < 4:
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert list(db.table(Run).status) == ["running"]
        r = collect(db, spec_from_dict(spec), progress=False)
    runs = db.table(Run).set_index("id")
    assert runs.loc[1, "status"] == "interrupted" and runs.loc[r.run_id, "status"] == "finished"
    t = db.table(Trial)
    assert t.run_id.notna().all() and set(t.run_id) == {1, r.run_id}
    assert (t.run_id == r.run_id).sum() == r.done


def test_retry_after_is_read_and_honoured():
    import asyncio
    import email.utils

    from discern_stats.collect.direct_client import DirectHTTPError
    from discern_stats.collect.ratelimit import retry_after_s
    from discern_stats.collect.collector import _with_retries
    from discern_stats.collect.spec import RetryPolicy
    assert retry_after_s(DirectHTTPError(429, "slow down", {"Retry-After": "0.3"})) == 0.3
    assert retry_after_s(DirectHTTPError(429, "", {"retry-after-ms": "250"})) == 0.25
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_after_s(DirectHTTPError(429, "", {"Retry-After": later})) <= 30
    assert retry_after_s(DirectHTTPError(429, "", {})) is None and retry_after_s(ValueError("x")) is None
    calls: list[float] = []

    async def once():
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise DirectHTTPError(429, "slow down", {"Retry-After": "0.4"})
        return "ok"
    policy = RetryPolicy(max_attempts=5, initial_wait_s=0.01, max_wait_s=0.02, jitter_s=0.0)
    assert asyncio.run(_with_retries(once, policy)) == "ok"
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert len(gaps) == 2 and min(gaps) >= 0.39  # the backoff alone would wait 0.01-0.02 s


def test_adaptive_limit_cuts_once_per_round_trip_and_recovers():
    from discern_stats.collect.ratelimit import BACKOFF, AdaptiveLimit
    lim = AdaptiveLimit(40, window_s=0.2)
    for _ in range(10):  # a burst of 429s from requests already in flight: one cut
        lim.rate_limited()
    assert lim.limit == pytest.approx(40 * BACKOFF) and lim.rate_limited_n == 10
    time.sleep(0.25)
    lim.rate_limited()
    assert lim.limit == pytest.approx(40 * BACKOFF ** 2)
    before = lim.limit
    for _ in range(int(before)):  # one more slot per `limit` successes
        lim.success()
    assert before + 0.9 < lim.limit < before + 1.1
    for _ in range(10_000):
        lim.success()
    assert lim.limit == 40


def test_collection_adapts_to_a_rate_limited_server(tmp_path, monkeypatch):
    """Against a server allowing 100 req/s (48 in flight at 100 ms would be ~5x that), every trial
    is answered once, and the adaptive limit draws far fewer 429s than the same run at a fixed
    limit (its cuts switched off), measured side by side."""
    from discern_stats.collect.ratelimit import AdaptiveLimit
    n429 = {}
    for mode in ("adaptive", "fixed"):
        if mode == "fixed":
            monkeypatch.setattr(AdaptiveLimit, "rate_limited", lambda self: None)
        url = f"sqlite:///{tmp_path / (mode + '.db')}"
        db = ds.TrialDB(url)
        design_cue(db.engine, n_worlds=6)  # 288 requests
        with FakeOpenAIServer("credulous", latency_ms=100, rate_limit_rps=100) as srv:
            spec = server_spec(srv, concurrency=48, retry={"max_attempts": 60, "initial_wait_s": 0.05,
                                                            "max_wait_s": 0.5, "jitter_s": 0.02})
            r = collect(db, spec_from_dict(spec), progress=False)
            counts = dict(srv.counts)
        assert r.done == 288 and r.failed == 0
        assert counts["ok"] == 288  # each trial answered once
        att = db.attempts()
        assert (att.http_status == 429).sum() == counts["rate_limited"] == r.retries
        n429[mode] = counts["rate_limited"]
    assert n429["adaptive"] < 0.5 * n429["fixed"], n429


def test_demo_run_twice_in_one_folder_deletes_nothing_a_user_added(tmp_path, monkeypatch):
    """Issue 26.9: `demo --out .` run twice deleted the files a user had added in between (the marker
    made the whole folder the demo's). Now the marker lists what the demo wrote: a second run refuses
    while a user's file is there (or a demo file changed) and deletes nothing; once they are gone it
    replaces exactly the demo's own files."""
    monkeypatch.chdir(tmp_path)
    args = ["demo", "--out", ".", "--no-fit", "--no-report", "--worlds", "1", "--resamples", "50"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "trials.db" in written and "contrasts.csv" in written
    (tmp_path / "notes.txt").write_text("mine")
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "notes.txt" in r.output and "Traceback" not in r.output, r.output
    assert (tmp_path / "notes.txt").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        written + ["notes.txt"])
    (tmp_path / "notes.txt").unlink()
    with open(tmp_path / "contrasts.csv", "a") as f:  # a demo file the user edited is theirs now
        f.write("my row\n")
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "contrasts.csv" in r.output, r.output
    assert (tmp_path / "contrasts.csv").read_text().endswith("my row\n")
    (tmp_path / "contrasts.csv").unlink()
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == written


def test_an_interrupted_demo_folder_is_cleared_only_of_the_demos_names(tmp_path):
    """A demo stopped before it finished has no manifest yet: a re-run removes only the names the demo
    writes, and refuses when anything else is there."""
    from discern_stats.demo import DEMO_MARKER, prepare_output_folder
    from discern_stats.core.errors import InputError
    out = tmp_path / "d"
    prepare_output_folder(out)
    (out / "trials.db").write_text("x")
    (out / "report").mkdir()
    (out / "report" / "index.html").write_text("x")
    (out / "draft.md").write_text("mine")
    with pytest.raises(InputError, match="draft.md"):
        prepare_output_folder(out)
    assert (out / "draft.md").exists() and (out / "trials.db").exists()
    (out / "draft.md").unlink()
    prepare_output_folder(out)
    assert sorted(p.name for p in out.iterdir()) == [DEMO_MARKER]

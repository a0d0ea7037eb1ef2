"""Kill-and-pause study of collection (issue 26): collectors SIGKILLed at random phases (start-up
included, some with worker processes), one stopped (SIGSTOP) longer than its lease, the database
restarted under them (PostgreSQL through a loopback proxy that drops every connection), against a
loopback server with 10 % 5xx and 5 % 429; then request budgets checked under three concurrent
collectors and under worker processes. Reports answers lost, requests beyond the budget, and
requests sent twice that no kill or pause explains.

    python benchmarks/study_kill_pause.py [--kills 20] [--pg] [--seed 0]

Every server and proxy binds 127.0.0.1. One run takes 2-4 minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import discern_stats as ds  # noqa: E402
from discern_stats.designs import design_cue  # noqa: E402
from discern_stats.simulate.server import FakeOpenAIServer  # noqa: E402
from discern_stats.store.db import Trial  # noqa: E402

COLLECT = """
import json, sys
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
if __name__ == "__main__":
    budget = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] != "-" else None
    r = collect(sys.argv[1], spec_from_dict(json.loads(sys.argv[2])), progress=False, max_requests=budget)
    print("SENT", r.sent, flush=True)
"""


def _spec(srv: FakeOpenAIServer, **kw) -> dict:
    spec = {"name": "study", "design": "cue", "concurrency": 4, "timeout_s": 10, "lease_s": 1.5,
            "retry": {"max_attempts": 8, "initial_wait_s": 0.05, "max_wait_s": 0.2, "jitter_s": 0.02},
            "llms": [{"name": "fake", "provider": "openai:synthetic", "base_url": srv.base_url}]}
    spec.update(kw)
    return spec


def _start(script: Path, url: str, spec: dict, budget: int | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script), url, json.dumps(spec), str(budget) if budget else "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)  # the collector and any workers it spawned
    except ProcessLookupError:
        pass
    p.wait()


def _fresh_pg() -> str:
    import psycopg
    name = f"ds_study_{uuid.uuid4().hex[:10]}"
    with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop_pg(name: str) -> None:
    import psycopg
    with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--pg", action="store_true", help="PostgreSQL on 127.0.0.1:5432 (database restarts included)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="study_"))
    os.environ["DISCERN_JOURNAL_DIR"] = str(tmp / "journal")
    script = tmp / "collect_once.py"
    script.write_text(COLLECT)
    pg_name = _fresh_pg() if args.pg else None
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{pg_name}" if pg_name else f"sqlite:///{tmp / 'trials.db'}"
    proxy = None
    via = url
    if pg_name:
        from test_collection_hostile import _CuttableProxy
        proxy = _CuttableProxy()
        via = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    db = ds.TrialDB(url)
    design_cue(db.engine, n_worlds=6)  # 288 trials
    t0 = time.time()
    kills: list[tuple[float, int]] = []
    paused = None
    with FakeOpenAIServer("credulous", latency_ms=100, fault_rate=0.15, faults=("500", "429", "500"),
                          seed=args.seed) as srv:
        # phase 1: three collectors at a time, one killed every 0-4 s (start-up included), replaced at once
        live = [_start(script, via, _spec(srv, workers=rng.choice([1, 1, 2]))) for _ in range(3)]
        for k in range(args.kills):
            time.sleep(rng.uniform(0.0, 4.0))
            i = rng.randrange(len(live))
            kills.append((round(time.time() - t0, 1), live[i].pid))
            _kill_group(live[i])
            live[i] = _start(script, via, _spec(srv, workers=rng.choice([1, 1, 2])))
            if k == args.kills // 2 and proxy is not None:
                proxy.restart(0.5)  # the database restarts under the collectors
        # phase 2: one collector stopped for 5 s (> lease 1.5 s) while the others go on
        time.sleep(2.0)
        paused = live[0].pid
        paused_at = dt.datetime.now(dt.timezone.utc)
        os.killpg(paused, signal.SIGSTOP)
        time.sleep(5.0)
        os.killpg(paused, signal.SIGCONT)
        if proxy is not None:
            time.sleep(1.0)
            proxy.restart(0.5)
        for p in live:
            try:
                p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                _kill_group(p)
        errors = [p.returncode for p in live if p.returncode != 0]
        final = _start(script, via, _spec(srv))  # picks up what the killed collectors left
        final.communicate(timeout=240)
        answers = srv.counts["ok"]
        requests = srv.counts["requests"]
        # phase 3: budgets. Three concurrent collectors with 30 requests each, then 2 workers with 40
        db2_url = f"sqlite:///{tmp / 'budget.db'}"
        design_cue(ds.TrialDB(db2_url).engine, n_worlds=6)
        before = srv.counts["requests"]
        ps = [_start(script, db2_url, _spec(srv), budget=30) for _ in range(3)]
        for p in ps:
            p.communicate(timeout=240)
        sent_a = srv.counts["requests"] - before
        beyond_a = max(0, sent_a - 90)
        before = srv.counts["requests"]
        p = _start(script, db2_url, _spec(srv, workers=2), budget=40)
        p.communicate(timeout=240)
        sent_b = srv.counts["requests"] - before
        beyond_b = max(0, sent_b - 40)
    if proxy is not None:
        proxy.close()
    t = db.table(Trial)
    att = db.attempts()
    sent = att[att.error_type.fillna("") != "not_sent"].copy()
    in_flight_at_kill = int((sent.error_type == "no_outcome").sum())
    ok = sent[sent.ok.astype(bool)].copy()
    started = ok.started_at.map(lambda x: x if x.tzinfo else x.replace(tzinfo=dt.timezone.utc))
    ok["paused_in_flight"] = (ok.collector.str.split(":").str[1] == str(paused)) & (started <= paused_at)
    twice = ok.groupby("trial_id").filter(lambda g: len(g) > 1)
    explained_by_pause = int(twice.paused_in_flight.sum())
    dup_ok = int(len(twice) - twice.trial_id.nunique())
    lost = int((t.state != "done").sum())
    journal_left = list((tmp / "journal").glob("*.jsonl")) if (tmp / "journal").exists() else []
    out = {"database": "postgresql" if pg_name else "sqlite", "trials": len(t), "kills": len(kills),
           "answers_lost (trials not done at the end)": lost, "server_requests": requests, "server_answers": answers,
           "attempts_in_flight_at_a_kill (no_outcome)": in_flight_at_kill,
           "answers_recorded_twice": dup_ok, "of_them_in_flight_at_the_pause": explained_by_pause,
           "sent_twice_unexplained": max(0, dup_ok - explained_by_pause),
           "requests_sent (3 collectors x 30)": sent_a, "requests_beyond_budget (3 collectors x 30)": beyond_a,
           "requests_sent (2 workers, 40)": sent_b, "requests_beyond_budget (2 workers, 40)": beyond_b,
           "collectors_exiting_non_zero": errors, "journal_files_left": len(journal_left),
           "wall_s": round(time.time() - t0, 1)}
    print(json.dumps(out, indent=1))
    if pg_name:
        db.engine.dispose()
        _drop_pg(pg_name)


if __name__ == "__main__":
    main()

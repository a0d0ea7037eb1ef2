"""Collection against a rate-limited server (issue 15): the loopback server (a separate process,
100 ms latency) allows --rps requests per second (a token bucket holding 0.1 s worth) and answers
429 beyond, with ``Retry-After`` when --retry-after is given. The collector starts at
--concurrency in flight (64 x 10 req/s = 640 req/s would be 3x the limit) and adapts (AIMD,
collect/ratelimit.py).

Prints the rate of answered trials against the server's limit, the 429s, requests over the budget
(trials attempted beyond --max-requests) and trials answered twice.

    python benchmarks/bench_rate_limit.py --rps 200 --requests 4000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import discern_stats as ds
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.designs import design_cue


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rps", type=float, default=200.0)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--retry-after", type=float, default=None, help="seconds in the 429's Retry-After header")
    ap.add_argument("--port", type=int, default=8766)
    a = ap.parse_args()
    srv = subprocess.Popen([sys.executable, "-c", f"from discern_stats.simulate.server import serve_forever; "
                            f"serve_forever('credulous', port={a.port}, latency_ms={a.latency_ms}, "
                            f"rate_limit_rps={a.rps}, retry_after_s={a.retry_after})"],
                           stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()
    try:
        with tempfile.TemporaryDirectory() as d:
            db = ds.TrialDB(f"sqlite:///{Path(d) / 'bench.db'}")
            design_cue(db.engine, n_worlds=(a.requests + 47) // 48 + 1)  # more planned than the budget
            spec = spec_from_dict({"name": "bench", "design": "cue", "concurrency": a.concurrency, "timeout_s": 30,
                                   "retry": {"max_attempts": 20, "initial_wait_s": 0.05, "max_wait_s": 2.0,
                                             "jitter_s": 0.05},
                                   "llms": [{"name": "loopback", "provider": "openai:synthetic",
                                             "base_url": f"http://127.0.0.1:{a.port}/v1"}]})
            collect(db, spec, progress=False, max_requests=0)  # plan only
            t = time.perf_counter()
            r = collect(db, spec, progress=False, max_requests=a.requests)
            el = time.perf_counter() - t
            att = db.attempts()
            trials = db.table(ds.db.Trial)
    finally:
        srv.terminate()
    attempted = att.trial_id.nunique()
    answered_twice = int((att[att.ok].groupby("trial_id").size() > 1).sum())
    n429 = int((att.http_status == 429).sum())
    done = int((trials.state == "done").sum())
    print(f"server limit {a.rps:.0f} req/s, latency {a.latency_ms:.0f} ms, start concurrency {a.concurrency}, "
          f"Retry-After {a.retry_after}")
    print(f"answered {done} trials in {el:.1f}s = {done / el:.1f} req/s = {100 * done / el / a.rps:.1f}% of the limit; "
          f"{n429} 429s ({n429 / max(len(att), 1):.1%} of {len(att)} attempts); failed {r.failed}")
    print(f"trials attempted {attempted} for a budget of {a.requests}: over budget {max(0, attempted - a.requests)}; "
          f"answered twice {answered_twice}")


if __name__ == "__main__":
    main()

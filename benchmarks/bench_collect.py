"""Collection throughput against the loopback OpenAI-compatible server (issue 4).

The server (a separate process, synthetic respondent, 100 ms latency per request) and the
collector (langchain-openai through base_url, SQLite writes) run on this machine. Ideal
throughput is concurrency / latency = 64 / 0.1 s = 640 req/s.

    python benchmarks/bench_collect.py --requests 6000 --concurrency 64 --latency-ms 100
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import discern_stats as ds
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.designs import design_cue


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--workers", type=int, default=1, help="collector processes (spec key workers)")
    ap.add_argument("--http-client", default="auto", choices=["auto", "aiohttp", "httpx", "direct"],
                    help="HTTP layer of the openai: LLM (spec key http_client)")
    ap.add_argument("--timeline", action="store_true", help="print the attempts started in each second of the run")
    a = ap.parse_args()
    srv = subprocess.Popen([sys.executable, "-c", f"from discern_stats.simulate.server import serve_forever; "
                            f"serve_forever('credulous', port={a.port}, latency_ms={a.latency_ms})"],
                           stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()
    try:
        with tempfile.TemporaryDirectory() as d:
            db = ds.TrialDB(f"sqlite:///{Path(d) / 'bench.db'}")
            design_cue(db.engine, n_worlds=(a.requests + 47) // 48)
            spec = spec_from_dict({"name": "bench", "design": "cue", "concurrency": a.concurrency,
                                   "llms": [{"name": "loopback", "provider": "openai:synthetic",
                                             "base_url": f"http://127.0.0.1:{a.port}/v1",
                                             "http_client": a.http_client}]})
            t = time.perf_counter()
            collect(db, spec, progress=False, max_requests=0, workers=1)  # plan only (idempotent; timed apart)
            t_plan = time.perf_counter() - t
            c0, s0 = os.times(), _cpu_s(srv.pid)
            t, wall0 = time.perf_counter(), time.time()
            r = collect(db, spec, progress=False, max_requests=a.requests, workers=a.workers)
            el = time.perf_counter() - t
            c1, s1 = os.times(), _cpu_s(srv.pid)
            att = db.attempts()
            lat = att["latency_ms"].to_numpy()
            st = pd.to_datetime(att["started_at"])
            ts = np.sort((st - st.min()).dt.total_seconds().to_numpy())
            lo, hi = ts[int(0.1 * len(ts))], ts[int(0.9 * len(ts)) - 1]
            print(f"steady-state rate (attempts started between the 10th and 90th percentile of start times): "
                  f"{0.8 * len(ts) / (hi - lo):.1f} req/s")
            if a.timeline:
                t_first = (st.min() - pd.Timestamp(wall0, unit="s", tz=st.dt.tz)).total_seconds()
                per_s = np.bincount(ts.astype(int))
                print(f"first attempt started {t_first:.2f}s after the call; attempts started per second: "
                      + " ".join(str(v) for v in per_s))
            print(f"client-side latency per attempt: median {np.median(lat):.0f} ms, p90 {np.quantile(lat, 0.9):.0f} ms "
                  f"(server adds {a.latency_ms:.0f} ms)")
    finally:
        srv.terminate()
    coll_cpu = (c1.user + c1.system + c1.children_user + c1.children_system) - (c0.user + c0.system + c0.children_user
                                                                                + c0.children_system)
    print(f"CPU per request: collector {1000 * coll_cpu / max(r.done, 1):.2f} ms, "
          f"loopback server {1000 * (s1 - s0) / max(r.done, 1):.2f} ms (2 cores shared by both)")
    ideal = a.concurrency / (a.latency_ms / 1000)
    print(f"requests={r.done} elapsed={el:.2f}s rate={r.done / el:.1f} req/s ideal={ideal:.0f} req/s "
          f"share={100 * r.done / el / ideal:.1f}% (SQLite writes included; planning the {r.planned} trials took "
          f"{t_plan:.2f}s before, apart; workers={a.workers}, their start-up included)")


if __name__ == "__main__":
    main()

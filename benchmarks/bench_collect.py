"""Collection throughput against the loopback OpenAI-compatible server (issue 4).

The server (a separate process, synthetic respondent, 100 ms latency per request) and the
collector (langchain-openai through base_url, SQLite writes) run on this machine. Ideal
throughput is concurrency / latency = 64 / 0.1 s = 640 req/s.

    python benchmarks/bench_collect.py --requests 6000 --concurrency 64 --latency-ms 100
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
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--port", type=int, default=8765)
    a = ap.parse_args()
    srv = subprocess.Popen([sys.executable, "-c", f"from discern_stats.testing import serve_forever; "
                            f"serve_forever('credulous', port={a.port}, latency_ms={a.latency_ms})"],
                           stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()
    try:
        with tempfile.TemporaryDirectory() as d:
            db = ds.TrialDB(f"sqlite:///{Path(d) / 'bench.db'}")
            design_cue(db.engine, n_worlds=(a.requests + 47) // 48)
            spec = spec_from_dict({"name": "bench", "design": "cue", "concurrency": a.concurrency,
                                   "llms": [{"name": "loopback", "provider": "openai:synthetic",
                                             "base_url": f"http://127.0.0.1:{a.port}/v1"}]})
            t = time.perf_counter()
            r = collect(db, spec, progress=False, max_requests=a.requests)
            el = time.perf_counter() - t
    finally:
        srv.terminate()
    ideal = a.concurrency / (a.latency_ms / 1000)
    print(f"requests={r.done} elapsed={el:.2f}s rate={r.done / el:.1f} req/s ideal={ideal:.0f} req/s "
          f"share={100 * r.done / el / ideal:.1f}% (includes planning {r.planned} trials and SQLite writes)")


if __name__ == "__main__":
    main()

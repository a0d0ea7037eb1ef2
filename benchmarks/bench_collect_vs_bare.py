"""Collection throughput against a bare aiohttp client in the same run (issue 26): concurrency 32,
200 ms server latency (ideal 160 req/s). The bare client is 32 coroutines POSTing chat completions to
the same loopback server with no LangChain and no database; the collector is `collect` (SQLite,
lease checks and budget per send). Runs alternate bare / collector ``--rounds`` times.

    python benchmarks/bench_collect_vs_bare.py --requests 3200 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import discern_stats as ds
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.designs import design_cue


async def _bare(url: str, n: int, conc: int) -> float:
    import aiohttp
    body = json.dumps({"model": "synthetic", "messages": [{"role": "user", "content": "Which? A or B"}]}).encode()
    left = [n]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--port", type=int, default=8766)
    a = ap.parse_args()
    srv = subprocess.Popen([sys.executable, "-c", f"from discern_stats.simulate.server import serve_forever; "
                            f"serve_forever('credulous', port={a.port}, latency_ms={a.latency_ms})"],
                           stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()
    ideal = a.concurrency / (a.latency_ms / 1000)
    try:
        for k in range(a.rounds):
            bare = asyncio.run(_bare(f"http://127.0.0.1:{a.port}/v1/chat/completions", a.requests, a.concurrency))
            with tempfile.TemporaryDirectory() as d:
                db = ds.TrialDB(f"sqlite:///{Path(d) / 'bench.db'}")
                design_cue(db.engine, n_worlds=(a.requests + 47) // 48)
                spec = spec_from_dict({"name": "bench", "design": "cue", "concurrency": a.concurrency,
                                       "llms": [{"name": "loopback", "provider": "openai:synthetic",
                                                 "base_url": f"http://127.0.0.1:{a.port}/v1"}]})
                collect(db, spec, progress=False, max_requests=0)  # plan only, timed apart
                t = time.perf_counter()
                r = collect(db, spec, progress=False, max_requests=a.requests)
                rate = r.done / (time.perf_counter() - t)
            print(f"round {k + 1}: bare aiohttp {bare:.1f} req/s ({100 * bare / ideal:.1f} % of ideal {ideal:.0f}); "
                  f"collector {rate:.1f} req/s ({100 * rate / ideal:.1f} % of ideal, {100 * rate / bare:.1f} % of bare)",
                  flush=True)
    finally:
        srv.terminate()


if __name__ == "__main__":
    main()

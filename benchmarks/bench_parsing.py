"""Cost of parsing one answer in the collector (`collect.parsing.trial_fields`: both parses, the
recovered answer, choice and status) per trial, against ``json.loads`` of the request's messages
(which the collector already does for every request, to send it) measured in the same run
(machine speed drifts, the ratio less).

    python benchmarks/bench_parsing.py [--worlds 4] [--repeat 30]

Three answer mixes over the planned Design B requests of ``--worlds`` worlds: the strict format
(``{"answer": "A"}``, ``5``), shapes only the lenient parse reads (prose and a code fence,
``**5**``), and a long reasoning block before the answer (about 4,000 characters).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import timeit
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    import discern_stats as ds
    from discern_stats.collect.parsing import trial_fields
    from discern_stats.designs import design_cue
    from discern_stats.store.db import Request

    with tempfile.TemporaryDirectory() as d:
        db = ds.TrialDB(f"sqlite:///{Path(d) / 'b.db'}")
        design_cue(db.engine, n_worlds=args.worlds)
        jobs = [dict(r._asdict()) for r in db.table(Request).itertuples(index=False)]
        db.dispose()
    think = "<think>" + "O1 has seven of eight verified reports; O2 has four. " * 75 + "</think>\n"
    mixes = {"strict format": {"letter": '{"answer": "A"}', "integer": "5"},
             "lenient only": {"letter": 'The record favours O1.\n```json\n{"answer": "A"}\n```', "integer": "**5**"},
             "long reasoning block": {"letter": think + '{"answer": "A"}', "integer": think + "5"}}
    print(f"{len(jobs)} planned requests, {args.repeat} passes each")
    for name, texts in mixes.items():
        def parse_all() -> None:
            for j in jobs:
                trial_fields(j, texts[j["answer_format"]], "stop")

        def floor() -> None:
            for j in jobs:
                json.loads(j["messages_json"])

        parse_all(), floor()
        tp = timeit.timeit(parse_all, number=args.repeat) / args.repeat / len(jobs)
        tf = timeit.timeit(floor, number=args.repeat) / args.repeat / len(jobs)
        print(f"{name:22s} trial_fields {1e6 * tp:7.1f} us per trial; json.loads(messages) {1e6 * tf:5.1f} us "
              f"(ratio {tp / tf:.1f})")


if __name__ == "__main__":
    main()

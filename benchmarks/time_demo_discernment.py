"""Wall time and gate of the discernment model on the demo's Design A data, per model config.

Builds the demo database once (`discern_stats.demo.run_demo(fit=False, report=False)`, SQLite,
synthetic respondents) in ``--out``, then fits `DiscernmentModel` under each ``--configs`` entry one
after the other in this process, with the demo's chains and draws (2 x 1,000 x ``draws_factor``), and
prints seconds, max R-hat, min ESS and the nuisance gate (BENCHMARKS.md, "Discernment crossed
effects on by default").

    python benchmarks/time_demo_discernment.py --out /tmp/demo_time \\
        --configs '{"source_effects": false, "shared_item_effects": false}' '{}'
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/demo_time", help="folder of the demo database (built if absent)")
    ap.add_argument("--configs", nargs="+", default=['{"source_effects": false, "shared_item_effects": false}', "{}"],
                    help="model configs as JSON, fitted in this order")
    ap.add_argument("--chains", type=int, default=2)
    args = ap.parse_args()
    from discern_stats.bayes.discernment import DiscernmentModel
    from discern_stats.demo import run_demo
    from discern_stats.store.trialdb import TrialDB
    out = Path(args.out)
    if not (out / "trials.db").exists():
        run_demo(out, fit=False, report=False, models_dir=out / "models")
    df = TrialDB(f"sqlite:///{out / 'trials.db'}").trials("l2d")
    print(f"{len(df):,} Design A trials", flush=True)
    for text in args.configs:
        cfg = json.loads(text)
        t0 = time.perf_counter()
        m = DiscernmentModel(df, **cfg)
        m.fit(draws=1000 * DiscernmentModel.draws_factor, chains=args.chains, random_seed=0, tune=None)
        d, nu = m.diagnostics, m.diagnostics["nuisance"]
        print(f"{text}: {time.perf_counter() - t0:.0f} s; gate {'passed' if d['ok'] else 'FAILED'}, max R-hat "
              f"{d['max_rhat']:.3f}, min ESS {min(d['min_ess_bulk'], d['min_ess_tail']):.0f}; nuisance max R-hat "
              f"{nu['max_rhat']:.3f}, min ESS {min(nu['min_ess_bulk'], nu['min_ess_tail']):.0f}", flush=True)


if __name__ == "__main__":
    main()

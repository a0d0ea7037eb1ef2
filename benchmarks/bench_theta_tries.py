"""Mixing of the intervention model's 53-parameter theta blocks (issue 25, the CI failure of
tests/test_bayes.py::test_overdispersed_chains_still_mix_in_large_blocks): the same data as that
test (30 worlds x C0-C4 x 3 synthetic LLMs), 2 chains x 1,000 draws after 200 burn-in, seed 0,
with each setting of the theta step given as JSON keywords of `logit_gibbs`.

    python benchmarks/bench_theta_tries.py '{"theta_rho": 0}' '{"theta_rho": 0.5}'
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import arviz as az
import numpy as np


def data():
    import discern_stats as ds
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    from discern_stats.designs import design_cue
    from discern_stats.designs.cue import INTERVENTIONS
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'iv.db'}"
    design_cue(ds.TrialDB(url).engine, seed=0, n_worlds=30, interventions=list(INTERVENTIONS))
    llms = [{"name": f"sim-{p}", "provider": f"synthetic:{p}"} for p in ("credulous", "source-sensitive", "order-biased")]
    collect(ds.TrialDB(url), spec_from_dict({"name": "t", "design": "cue", "llms": llms, "concurrency": 32,
                                             "interventions": list(INTERVENTIONS)}), progress=False)
    return ds.TrialDB(url).trials("cue")


def main() -> None:
    from discern_stats.bayes import InterventionContrastModel
    from discern_stats.bayes.logit_gibbs import logit_gibbs
    design = InterventionContrastModel(data()).spec().logit_design()
    for arg in sys.argv[1:] or ['{"theta_rho": 0}', '{"theta_rho": 0.5}']:
        kw = {"theta_tries": 2, **json.loads(arg)}
        t = time.perf_counter()
        out = logit_gibbs(design, draws=1000, tune=200, chains=2, random_seed=kw.pop("seed", 0), keep_u=False, **kw)
        wall = time.perf_counter() - t
        res = {}
        for k in ("theta", "mu", "tau", "sigma"):
            v = out[k].reshape(2, 1000, -1)
            s = az.summary(az.from_dict({"posterior": {k: v}}), kind="diagnostics", round_to="none")
            res[k] = f"R-hat {s.r_hat.max():.4f}, bulk {s.ess_bulk.min():.0f}, tail {s.ess_tail.min():.0f}"
        print(arg, f"wall {wall:.0f} s;", res, "min acceptance theta", round(float(np.min(out["accept_theta"])), 3),
              flush=True)


if __name__ == "__main__":
    main()

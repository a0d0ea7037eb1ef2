"""Cue-weight model benchmark (issue 6): 13 LLMs x 300 worlds x 20 choice requests = 78,000
rows, 5 cues, simulated from the model's own generative process (weights drawn around the
synthetic profiles' scale, world random effects sd 0.5).

Compares, in one run (the same draws and chains):
  naive-nc  - what a bambi formula `chose_B ~ 0 + llm:block + llm:(cues) + (1|world)` builds:
              Bernoulli rows, unpooled weights, a world intercept non-centred as bambi does
              (offset ~ N(0, 1) times sigma); nutpie, tune = draws
  naive-c   - the same with the world intercept centred (u ~ N(0, sigma)); nutpie
  ours      - `CueWeightModel` (pooled centred weights, per-LLM world effects, binomial
              cells) with its default sampler, the blocked Gibbs sampler of
              `discern_stats.bayes.logit_gibbs` (200 burn-in sweeps)
  ours-nuts - the same model's PyMC build sampled by nutpie, tune = draws (``--models``)
Reports wall time, min bulk ESS over the weights, max R-hat, and ESS per second; the
speed-up is the ratio of ESS/s (time to the same ESS).

    python benchmarks/bench_cue_model.py --draws 1000 --tune 1000 --chains 2

``--ladder 250,500,1000`` measures time to target instead: each model is fitted with
draws = 250, then 500, then 1000 (2 chains; NUTS with tune = draws, the Gibbs sampler with
its 200 burn-in sweeps) until its weights reach R-hat <= 1.01 and bulk ESS >= 400; its time to
target is the wall time of the first fit that does (compile and, for ours, building the
model and the convergence checks included), and the failed rungs are reported beside it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

CUES5 = ["history", "Q", "I", "order", "time"]


def simulate(n_llm: int = 13, n_world: int = 300, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    from discern_stats.core.coding import CUES
    rng = np.random.default_rng(seed)
    w = rng.normal(0.8, 1.0, size=(n_llm, 5))
    u = rng.normal(0, 0.5, size=(n_llm, n_world))
    # 20 choices per world: 8 factorial-like (Q x I x 2 reps), 4 swap (2 x 2), 8 order x time (2x2 x 2)
    cells = ([("factorial", {"Q": q, "I": i}) for q in (.5, -.5) for i in (.5, -.5)] * 2
             + [("swap", {"history": h}) for h in (.5, -.5)] * 2
             + [("order-time", {"order": o, "time": t}) for o in (.5, -.5) for t in (.5, -.5)] * 2)
    rows = []
    for l in range(n_llm):
        for k in range(n_world):
            for block, x in cells:
                eta = 0.1 + sum(w[l, CUES5.index(c)] * v for c, v in x.items()) + u[l, k]
                row = dict.fromkeys(CUES, 0.0)
                row.update(x)
                rows.append({"llm": f"m{l:02d}", "intervention": "C0", "stratum": "core", "world_id": f"w{k:03d}",
                             "block": block, **row, "y": int(rng.random() < 1 / (1 + np.exp(-eta)))})
    return pd.DataFrame(rows), w


def naive_model(d: pd.DataFrame, centred: bool = True):
    import pymc as pm
    llm = pd.factorize(d.llm, sort=True)
    blk = pd.factorize(d.llm + "|" + d.block, sort=True)
    wld = pd.factorize(d.world_id, sort=True)
    X = d[CUES5].to_numpy(float)
    with pm.Model(coords={"llm": llm[1], "cue": CUES5, "lb": blk[1], "world": wld[1]}) as m:
        a = pm.Normal("a", 0, 1.5, dims="lb")
        b = pm.Normal("beta", 0, 2.5, dims=("llm", "cue"))
        s = pm.HalfNormal("sigma_world", 1.0)
        if centred:
            u = pm.Normal("u", 0, s, dims="world")
        else:  # bambi's default for a group-specific intercept
            u = pm.Deterministic("u", s * pm.Normal("u_offset", 0, 1, dims="world"), dims="world")
        eta = a[blk[0]] + (X * b[llm[0]]).sum(axis=1) + u[wld[0]]
        pm.Bernoulli("y", logit_p=eta, observed=d.y.to_numpy())
    return m


def _fit(name: str, d: pd.DataFrame, n: int, chains: int) -> tuple[float, float, float]:
    """(wall s, min bulk ESS, max R-hat) of the weights for one model fitted with tune = draws = n."""
    import arviz as az
    import pymc as pm
    from discern_stats.bayes import CueWeightModel
    t = time.perf_counter()
    if name in ("ours", "ours-nuts"):
        m = CueWeightModel(d)
        if name == "ours":
            m.fit(draws=n, chains=chains, random_seed=1)
        else:
            m.fit(draws=n, tune=n, chains=chains, random_seed=1, sampler="nutpie")
        idata = m.idata
    else:
        with naive_model(d, centred=name == "naive-c"):
            idata = pm.sample(n, tune=n, chains=chains, nuts_sampler="nutpie", progressbar=False, random_seed=1)
    el = time.perf_counter() - t
    s = az.summary(idata, var_names=["beta"], kind="diagnostics", round_to="none")
    return el, float(s.ess_bulk.min()), float(s.r_hat.max())


def ladder(d: pd.DataFrame, rungs: list[int], chains: int, models: list[str]) -> None:
    import warnings
    reached: dict[str, float] = {}
    for name in models:
        spent = 0.0
        for n in rungs:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                el, ess, rhat = _fit(name, d, n, chains)
            spent += el
            ok = rhat <= 1.01 and ess >= 400
            print(f"{name:9s} {'draws' if name == 'ours' else 'tune=draws'}={n:5d} wall={el:7.1f}s min_bulk_ESS={ess:7.1f} max_Rhat={rhat:.4f} "
                  f"{'target reached' if ok else 'not yet'}", flush=True)
            if ok:
                reached[name] = el
                print(f"{name:8s} time to target: {el:.1f}s (all rungs tried: {spent:.1f}s)", flush=True)
                break
        else:
            print(f"{name:8s} did not reach the target on the ladder", flush=True)
    if "ours" in reached:
        for name, el in reached.items():
            if name != "ours":
                print(f"ours is {el / reached['ours']:.1f}x faster to target than {name}")


def main() -> None:
    import arviz as az
    import pymc as pm
    from discern_stats.bayes import CueWeightModel
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--worlds", type=int, default=300)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--ladder", default="", help="e.g. 250,500,1000: time to target (see above)")
    ap.add_argument("--models", default="naive-nc,naive-c,ours", help="for --ladder: naive-nc, naive-c, ours, ours-nuts")
    a = ap.parse_args()
    d, w = simulate(n_world=a.worlds)
    print(f"rows={len(d)} llms=13 worlds={a.worlds} cues=5")
    if a.ladder:
        ladder(d, [int(x) for x in a.ladder.split(",")], a.chains,
               ["ours"] if a.skip_naive else a.models.split(","))
        return
    out = []
    for name, centred in (("naive-nc", False), ("naive-c", True)):
        if a.skip_naive:
            break
        t = time.perf_counter()
        with naive_model(d, centred):
            idata = pm.sample(a.draws, tune=a.tune, chains=a.chains, nuts_sampler="nutpie", progressbar=False,
                              random_seed=1)
        el = time.perf_counter() - t
        s = az.summary(idata, var_names=["beta"], kind="diagnostics", round_to="none")
        out.append((name, el, s.ess_bulk.min(), s.r_hat.max()))
        print(f"{name:8s} wall={el:7.1f}s min_bulk_ESS(beta)={s.ess_bulk.min():7.1f} max_Rhat(beta)={s.r_hat.max():.3f}",
              flush=True)
    t = time.perf_counter()
    m = CueWeightModel(d)
    m.fit(draws=a.draws, chains=a.chains, random_seed=1)  # the default sampler (Gibbs), its own burn-in
    el = time.perf_counter() - t
    s = az.summary(m.idata, var_names=["beta"], kind="diagnostics", round_to="none")
    out.append(("ours", el, s.ess_bulk.min(), s.r_hat.max()))
    beta = m.draws("beta")
    ix = m.index
    cover = np.mean([(np.quantile(beta[:, i, ix["cue"].index(c)], 0.03) <= w[i, k] <= np.quantile(beta[:, i, ix["cue"].index(c)], 0.97))
                     for i in range(13) for k, c in enumerate(CUES5)])
    for name, el, ess, rhat in out:
        ok = "converged" if rhat <= 1.01 and ess >= 400 else "NOT converged (R-hat > 1.01 or ESS < 400)"
        print(f"{name:8s} wall={el:7.1f}s min_bulk_ESS(beta)={ess:7.1f} max_Rhat(beta)={rhat:.3f} ESS/s={ess / el:.2f} {ok}")
    for name, el, ess, _ in out[:-1]:
        print(f"speed-up of ours in ESS/s over {name}: {(out[-1][2] / out[-1][1]) / (ess / el):.1f}x")
    print(f"ours: diagnostics {m.diagnostics['problems'] or 'ok'}; true weights inside central 94% interval: {cover:.2f}")


if __name__ == "__main__":
    main()

"""`discern-stats demo`: design -> collect (synthetic respondents) -> metrics, on embedded defaults."""

from __future__ import annotations

import shutil
import time
from importlib import resources
from pathlib import Path

from rich.console import Console

from .collect.runner import collect
from .collect.spec import load_spec
from .collect.synthetic import SIMULATOR_NOTE, get_profile, true_cue_weights
from .designs import INTERVENTIONS, design_cue, design_l2d
from .interchange import write_table
from .stats import holm_contrasts, metrics
from .trialdb import TrialDB

DEMO_SPECS = ("demo_cue.yaml", "demo_l2d.yaml")


def _spec_path(name: str) -> Path:
    here = Path.cwd() / "collection" / name
    if here.exists():
        return here
    return Path(str(resources.files("discern_stats.data").joinpath(name)))


def run_demo(out: Path | str = "demo_out", *, worlds: int = 30, resamples: int = 2000, seed: int = 0,
             console: Console | None = None) -> dict[str, Path]:
    console = console or Console()
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    url = f"sqlite:///{out / 'trials.db'}"
    t0 = time.perf_counter()
    console.rule("discern_stats demo")
    console.print(f"database: {url}\nrespondents: {SIMULATOR_NOTE}")
    db = TrialDB(url)
    a = design_l2d(db.engine, seed=seed, use_demo=True)
    b = design_cue(db.engine, seed=seed, n_worlds=worlds, interventions=list(INTERVENTIONS))
    console.print(f"Design A: {a['planned']} planned requests; Design B: {b['worlds']} worlds, {b['planned']} requests")
    for name in DEMO_SPECS:
        spec = load_spec(_spec_path(name))
        res = collect(db, spec, progress=True)
        console.print(f"{spec.name}: {res.done} trials ({res.done - res.valid} invalid) at {res.rate:.0f} req/s")
    files = {}
    for design in ("l2d", "cue"):
        df = db.trials(design)
        files[f"{design}_trials"] = write_table(df, out / f"{design}_trials.csv")
        with console.status(f"metrics {design} ({resamples} bootstrap resamples)"):
            files[f"{design}_metrics"] = write_table(metrics(design, df, n_resamples=resamples, seed=seed),
                                                     out / f"{design}_metrics.csv")
    cue = db.trials("cue")
    files["contrasts"] = write_table(holm_contrasts(cue, n_resamples=resamples, seed=seed), out / "contrasts.csv")
    truth = []
    for llm in sorted(cue.llm.unique()):
        prof = get_profile(llm.removeprefix("sim-"))
        for iv in INTERVENTIONS:
            for k, v in true_cue_weights(prof, iv).items():
                truth.append({"llm": llm, "intervention": iv, "cue": k, "true_logit_weight": v})
    import pandas as pd
    files["true_weights"] = write_table(pd.DataFrame(truth), out / "true_weights.csv")
    console.print(f"done in {time.perf_counter() - t0:.0f} s; outputs in {out}/:")
    for k, p in files.items():
        console.print(f"  {k:15s} {p}")
    return files

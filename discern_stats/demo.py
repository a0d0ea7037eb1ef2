"""`discern-stats demo`: design -> collect (synthetic respondents) -> metrics, on embedded defaults."""

from __future__ import annotations

import json
import re
import time
from importlib import resources
from pathlib import Path

from rich.console import Console

from .collect.runner import collect
from .collect.spec import load_spec
from .simulate.respondent import SIMULATOR_NOTE, get_profile, true_cue_weights
from .designs import INTERVENTIONS, design_cue, design_l2d
from .store.tables import write_table
from .store.trialdb import TrialDB

DEMO_SPECS = ("demo_cue.yaml", "demo_l2d.yaml")
DEMO_ITEMS = 24  # Design A items drawn from the Gapminder bank, evenly across era x OECD x topic


def _spec_path(name: str) -> Path:
    """The demo's run spec: always the package's copy (collection/ holds the same files as examples for
    users to copy; a test keeps them equal), never whatever the current folder holds."""
    return Path(str(resources.files("discern_stats.data").joinpath(name)))


DEMO_MARKER = ".discern_stats_demo"
# the names the demo writes in its folder (what an interrupted demo, with no manifest yet, may have left)
DEMO_NAMES = re.compile(r"(trials\.db(-wal|-shm|-journal)?|(l2d|cue)_(trials|metrics)\.csv|contrasts\.csv"
                        r"|true_weights\.csv|report/.*)")


def _demo_files(out: Path) -> dict[str, list[int]]:
    """Every file under ``out`` but the marker: relative path -> [size, mtime in ns]."""
    return {str(f.relative_to(out)): [f.stat().st_size, f.stat().st_mtime_ns]
            for f in sorted(out.rglob("*")) if f.is_file() and f.name != DEMO_MARKER}


def record_demo_files(out: Path) -> None:
    """Write the marker with the manifest of what the demo left in ``out`` (size and modification
    time of each file), so that the next run clears exactly those files and nothing a user added or
    changed since."""
    (out / DEMO_MARKER).write_text(json.dumps({
        "note": "made by `discern-stats demo`; the next demo run with this --out replaces the files listed here, "
                "and refuses if the folder holds anything else or a listed file changed",
        "files": _demo_files(out)}, indent=1) + "\n")


def prepare_output_folder(out: Path) -> None:
    """An empty ``out`` for the demo. A folder the demo made before (it holds the marker file with
    the manifest of the files the demo wrote) loses exactly those files, and only when nothing else is
    there: a file added or changed since (a user's notes, trials collected into the demo's database)
    makes the run refuse, naming it. An empty folder is used; any other existing path is refused.
    Nothing is ever deleted that the demo did not write."""
    from .core.errors import InputError
    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out} exists and is not a folder; choose another --out")
        marker = out / DEMO_MARKER
        if marker.is_file():
            try:
                listed = json.loads(marker.read_text()).get("files")
            except (ValueError, AttributeError):
                listed = None
            now = _demo_files(out)
            if isinstance(listed, dict):
                foreign = [f for f, st in now.items() if listed.get(f) != st]
            else:  # an older marker, or a demo stopped before it finished: only the demo's own names go
                foreign = [f for f in now if not DEMO_NAMES.fullmatch(f)]
            if foreign:
                shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
                raise InputError(f"--out {out} holds files the demo did not write or that changed since it did "
                                 f"({shown}); the demo deletes only its own files: choose another --out")
            for f in now:
                (out / f).unlink()
            for d in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                if not any(d.iterdir()):
                    d.rmdir()
            marker.unlink()
        elif any(out.iterdir()):
            raise InputError(f"--out {out} exists and was not made by the demo (no {DEMO_MARKER} file); the demo "
                             f"deletes only its own folders: choose another --out or empty this one yourself")
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text(json.dumps({"note": "made by `discern-stats demo` (still running, or stopped "
                                                       "before it finished)"}) + "\n")


def run_demo(out: Path | str = "demo_out", *, worlds: int = 30, resamples: int = 5000, seed: int = 0,
             console: Console | None = None, models_dir: Path | str = "models", fit: bool = True,
             report: bool = True, draws: int = 1000, chains: int = 2, project: Path | str = ".",
             sensitivity: bool = False) -> dict[str, Path]:
    console = console or Console()
    out = Path(out)
    prepare_output_folder(out)
    url = f"sqlite:///{out / 'trials.db'}"
    t0 = time.perf_counter()
    console.rule("discern_stats demo")
    console.print(f"database: {url}\nrespondents: {SIMULATOR_NOTE}")
    db = TrialDB(url)
    # the demo has no real popularity ranking to ship (data/README.md): it asks for the fictional
    # sources explicitly, and its tables and figures say so
    a = design_l2d(db.engine, seed=seed, bank="gapminder", n_items=DEMO_ITEMS, fictional_sources=True)
    b = design_cue(db.engine, seed=seed, n_worlds=worlds, interventions=list(INTERVENTIONS))
    console.print(f"Design A: {a['items']} Gapminder items, {a['planned']:,} planned requests per respondent (priors and "
                  f"posteriors); Design B: "
                  f"{b['worlds']} worlds, {b['planned']:,} planned requests per respondent")
    console.print(f"Design A sources: {a['sources']}", soft_wrap=True, highlight=False)
    for name in DEMO_SPECS:
        spec = load_spec(_spec_path(name))
        res = collect(db, spec, progress=True)
        console.print(f"{spec.name}: {res.done:,} trials = planned requests x {len(spec.llms)} respondents "
                      f"({res.done - res.valid:,} invalid answers: unparseable, kept and excluded from the statistics) "
                      f"at {res.rate:.0f} req/s")
    files = {}
    # metric tables through the report's cache (<models>/metric_tables, keyed by data hash): the
    # report rendered below reads them instead of repeating every bootstrap
    from .report.context import context as report_context
    ctx = report_context(url, models_dir, resamples)
    ctx.seed = seed
    for design in ("l2d", "cue"):
        t1 = time.perf_counter()
        files[f"{design}_trials"] = write_table(ctx.trials(design), out / f"{design}_trials.csv")
        with console.status(f"metrics {design} ({resamples:,} bootstrap resamples)"):
            files[f"{design}_metrics"] = write_table(ctx.metrics(design), out / f"{design}_metrics.csv")
        console.print(f"metrics {design}: {time.perf_counter() - t1:.0f} s ({resamples:,} bootstrap resamples)")
    t1 = time.perf_counter()
    cue = ctx.trials("cue")
    files["contrasts"] = write_table(ctx.contrasts(), out / "contrasts.csv")
    console.print(f"intervention contrasts (Holm family of {len(ctx.contrasts())}): {time.perf_counter() - t1:.0f} s")
    truth = []
    for llm in sorted(cue.llm.unique()):
        prof = get_profile(llm.removeprefix("sim-"))
        for iv in INTERVENTIONS:
            for k, v in true_cue_weights(prof, iv).items():
                truth.append({"llm": llm, "intervention": iv, "cue": k, "true_logit_weight": v})
    import pandas as pd
    files["true_weights"] = write_table(pd.DataFrame(truth), out / "true_weights.csv")
    unconverged = []
    if fit:
        from .bayes import DESIGN_OF, MODELS
        for kind, cls in MODELS.items():
            t1 = time.perf_counter()
            n_draws = draws * cls.draws_factor  # a model that needs more draws for its gate says so
            with console.status(f"fitting the {kind} model ({chains} chains x {n_draws} draws, {cls.default_sampler})"):
                m = cls.fit_or_load(db.trials(DESIGN_OF[kind]), models_dir,
                                    fit_kwargs={"draws": n_draws,
                                                "chains": chains, "random_seed": seed,
                                                # NUTS tunes for as many steps; Gibbs burns in 200
                                                "tune": None if cls.default_sampler == "gibbs" else draws})
            d = m.diagnostics
            flag = "converged" if d["ok"] else "[bold red]NOT CONVERGED[/]: " + "; ".join(d["problems"])
            if not d["ok"]:
                unconverged.append(f"{kind} model: " + "; ".join(d["problems"]))
            console.print(f"{kind} model: {time.perf_counter() - t1:.0f} s, max R-hat {d['max_rhat']:.3f}, "
                          f"min ESS {min(d['min_ess_bulk'], d['min_ess_tail']):.0f}, divergences {d['divergences']}: {flag}")
            files[f"model_{kind}"] = Path(models_dir) / f"{m.name}.nc"
        if sensitivity:  # opt-in: the discernment model refitted under the other scale priors, saved for the report
            from .bayes import discernment_prior_sensitivity
            from .bayes.discernment import DISCERNMENT_SCALE_PRIORS, DiscernmentModel
            t1 = time.perf_counter()
            kw = {"draws": draws * DiscernmentModel.draws_factor, "chains": chains, "random_seed": seed, "tune": None}
            with console.status(f"prior sensitivity: the discernment model under {len(DISCERNMENT_SCALE_PRIORS)} "
                                f"scale priors"):
                t = discernment_prior_sensitivity(db.trials("l2d"), fit_kwargs=kw, models_dir=models_dir)
            bad = sorted(set(t.scale_prior[~t.converged.astype(bool)]))
            if bad:
                unconverged.append("discernment prior sensitivity: " + ", ".join(bad))
            console.print(f"prior sensitivity ({', '.join(dict.fromkeys(t.scale_prior))}): "
                          f"{time.perf_counter() - t1:.0f} s" + (f"; NOT CONVERGED: {', '.join(bad)}" if bad else ""))
    if report:
        if not (Path(project) / "_quarto.yml").exists():
            console.print(f"no _quarto.yml in {Path(project).resolve()}: run the demo from the repository root "
                          f"to render the report")
        else:
            from .report.render import render
            res = render(project, out_dir=out / "report", env={
                "DISCERN_DB": url, "DISCERN_MODELS": str(Path(models_dir).resolve()),
                "DISCERN_RESAMPLES": str(resamples)}, progress=console.print)
            console.print(f"report rendered by {res.renderer}")
            files["report"] = res.out_dir / "index.html"
    record_demo_files(out)
    console.print(f"done in {time.perf_counter() - t0:.0f} s; outputs:")
    for line in unconverged:  # repeated here so that a failed check is not lost above the progress output
        console.print(f"[bold red]NOT CONVERGED[/] {line}")
    for k, p in files.items():
        console.print(f"  {k:15s} {p}")
    return files

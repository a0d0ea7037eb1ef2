"""The `discern-stats` command line (typer + rich). Every command has --help with an example."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .core.vocab import STRATEGIES
from .store.db import DEFAULT_DB_URL
from .core.errors import DiscernError, InputError

# a terminal sets the width; a pipe or a log file gets long lines, not rich's 80-column default
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """Warnings the package raises on purpose (e.g. too few resamples for a Holm family) as one line."""
    err_console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)


warnings.showwarning = _one_line_warning

app = typer.Typer(help="discern_stats: collect LLM trials and analyse how models weigh evidence.",
                  no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode="markdown")
db_app = typer.Typer(help="Create and inspect the trial database.", no_args_is_help=True)
import_app = typer.Typer(help="Import item banks, source tables and trials logged elsewhere.", no_args_is_help=True)
export_app = typer.Typer(help="Export trials in the interchange format.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")

DbOpt = typer.Option(None, "--db", show_default=False,
                     help="SQLAlchemy URL of the trial database, e.g. sqlite:///trials.db or "
                     "postgresql://user@host:5432/dbname. Default: $DISCERN_DB, else sqlite:///trials.db; commands "
                     "that only read fall back to the demo's sqlite:///demo_out/trials.db when ./trials.db is absent.")
DEMO_DB_URL = "sqlite:///demo_out/trials.db"


def resolve_db(db: Optional[str], read_only: bool = False) -> str:
    """The database a command uses: --db, else $DISCERN_DB, else ./trials.db; a read-only command
    with neither falls back to the demo's database when ./trials.db is absent and the demo's exists."""
    if db:
        return db
    if os.environ.get("DISCERN_DB"):
        return os.environ["DISCERN_DB"]
    if read_only and not Path("trials.db").exists() and Path("demo_out/trials.db").exists():
        err_console.print(f"using the demo database {DEMO_DB_URL} (no ./trials.db; --db chooses another)",
                          highlight=False)
        return DEMO_DB_URL
    return DEFAULT_DB_URL


def _fail(exc: Exception) -> None:
    from rich.markup import escape
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
    raise typer.Exit(code=2)


def _open(db: Optional[str], read_only: bool = False):
    """The database at ``db`` (`resolve_db`); ``read_only`` commands refuse a URL with no database behind it."""
    from .store.trialdb import TrialDB
    return TrialDB(resolve_db(db, read_only), must_exist=read_only)


def _design_arg(design: str) -> str:
    from .store.tables import check_design
    return check_design(design)


@db_app.command("init")
def db_init(db: Optional[str] = DbOpt) -> None:
    """Create or migrate the schema; idempotent.

    Example: `discern-stats db init --db sqlite:///trials.db`
    """
    try:
        tdb = _open(db)
        tdb.init()
    except DiscernError as exc:
        _fail(exc)
    console.print(f"schema ready at {tdb.info()['url']}")


@db_app.command("info")
def db_info(db: Optional[str] = DbOpt, as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables.")) -> None:
    """Counts per table, per design and per LLM, with validity rates.

    Example: `discern-stats db info --db sqlite:///trials.db`
    """
    try:
        info = _open(db, read_only=True).info()
    except DiscernError as exc:
        _fail(exc)
    if as_json:
        console.print_json(json.dumps(info, default=str))
        return
    t = Table(title=f"Tables in {info['url']}")
    t.add_column("table"); t.add_column("rows", justify="right")
    for k, v in info["tables"].items():
        t.add_row(k, str(v))
    console.print(t)
    if info["requests_per_design"]:
        console.print("planned requests per design: " + ", ".join(f"{k}={v}" for k, v in info["requests_per_design"].items()))
    if info["per_llm"]:
        t = Table(title="Trials per design and LLM")
        for c in ("design", "llm", "planned", "done", "valid", "validity"):
            t.add_column(c, justify="right" if c in ("planned", "done", "valid", "validity") else "left")
        for e in info["per_llm"]:
            name = e["llm"] + (" (simulator)" if e["simulator"] else "")
            vr = "-" if e["validity_rate"] is None else f"{100 * e['validity_rate']:.1f}%"
            t.add_row(e["design"], name, str(e["planned"]), str(e["done"]), str(e["valid"]), vr)
        console.print(t)


@import_app.command("items")
def import_items(file: Path = typer.Argument(..., help="CSV/parquet with item_id,question,truth[,tags]"),
                 db: Optional[str] = DbOpt) -> None:
    """Import a Design A item bank (`item_id,question,truth[,tag columns]`).

    Example: `discern-stats import items my_items.csv --db sqlite:///trials.db`
    """
    try:
        n = _open(db).import_items(file)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"imported {n} new item(s) from {file}")


@import_app.command("sources")
def import_sources(file: Path = typer.Argument(..., help="CSV/parquet with domain plus pc1 or reliability, optional popularity"),
                   db: Optional[str] = DbOpt) -> None:
    """Import a source table (`domain` plus `pc1` or `reliability`, optional `popularity`).

    Example: `discern-stats import sources lin2023_domain_pc1.csv`
    """
    try:
        n = _open(db).import_sources(file)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"imported {n} new source(s) from {file}")


@import_app.command("popularity")
def import_popularity_cmd(file: Path = typer.Argument(..., help="Tranco list (rank,domain) or Open PageRank CSV"),
                          unmatched: Optional[Path] = typer.Option(None, "--unmatched", help="write the sources that "
                                                                   "matched no listed domain to this text file"),
                          db: Optional[str] = DbOpt) -> None:
    """Set the popularity of the database's sources from a ranking (Tranco or Open PageRank CSV).

    Domains are matched in lower case without `www.`; a subdomain takes its nearest listed parent.

    Example: `discern-stats import popularity tranco_top1m.csv --unmatched unmatched.txt`
    """
    from .store.importing import import_popularity
    try:
        res = import_popularity(_open(db).engine, file)
    except DiscernError as exc:
        _fail(exc)
    n_match = res["matched_exact"] + len(res["matched_parent"])
    console.print(f"{n_match:,} of {res['sources']:,} sources matched {res['listed']:,} listed domains "
                  f"({res['matched_exact']:,} exactly, {len(res['matched_parent']):,} through a parent domain); "
                  f"popularity = {res['scale']}; {res['replaced']:,} earlier value(s) replaced")
    for child, parent in res["matched_parent"][:5]:
        console.print(f"  {child} -> {parent}")
    if res["unmatched"]:
        shown = ", ".join(res["unmatched"][:10])
        console.print(f"{len(res['unmatched']):,} source(s) unmatched, popularity unchanged: {shown}"
                      f"{' ...' if len(res['unmatched']) > 10 else ''}")
        if unmatched is not None:
            unmatched.write_text("\n".join(res["unmatched"]) + "\n")
            console.print(f"wrote the unmatched list to {unmatched}")


@import_app.command("trials")
def import_trials(design: str = typer.Argument(..., help="l2d or cue"),
                  file: Path = typer.Argument(..., help="interchange CSV/parquet"), db: Optional[str] = DbOpt) -> None:
    """Import trials logged elsewhere, in the interchange columns of SPEC.

    Example: `discern-stats import trials cue cue_trials.parquet`
    """
    try:
        n = _open(db).import_trials(_design_arg(design), file)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"imported {n} new trial(s) from {file}")


@export_app.command("trials")
def export_trials(design: str = typer.Argument(..., help="l2d or cue"),
                  out: Path = typer.Option(..., "--out", help="output .csv or .parquet"), db: Optional[str] = DbOpt) -> None:
    """Export finished trials in the interchange columns (`.csv` or `.parquet` by extension).

    Example: `discern-stats export trials l2d --out l2d.csv`
    """
    try:
        p = _open(db, read_only=True).export_trials(_design_arg(design), out)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"wrote {p}")


@export_app.command("stimuli")
def export_stimuli_cmd(design: str = typer.Argument(..., help="cue or l2d"),
                       out: Path = typer.Option(..., "--out", help="output .jsonl file"), db: Optional[str] = DbOpt) -> None:
    """Export every planned request as JSON lines for other harnesses (inspect_ai, lm-evaluation-harness).

    Each line: id, input (chat messages), target, choices, metadata (conditions, evidence graph).

    Example: `discern-stats export stimuli cue --out cue_stimuli.jsonl`
    """
    from .store.exporting import export_stimuli
    try:
        n = export_stimuli(_open(db, read_only=True).engine, _design_arg(design), out)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"wrote {n:,} planned {design} requests to {out}")


design_app = typer.Typer(help="Build stimuli and planned requests in the database.", no_args_is_help=True)
app.add_typer(design_app, name="design")


@design_app.command("l2d")
def design_l2d_cmd(seed: int = typer.Option(0, "--seed", help="random seed of the source draws (and of --items)"),
                   per_stratum: int = typer.Option(1, "--per-stratum", help="sources per popularity x reliability stratum and item"),
                   strategies: str = typer.Option(",".join(STRATEGIES), "--strategies",
                                                  help="comma-separated prompt strategies"),
                   bank: Optional[str] = typer.Option(None, "--bank", help="built-in item bank to import and plan: "
                                                      "gapminder (1,704 numeric country-year questions) or demo (24 "
                                                      "trivia questions). Default: gapminder when the database has no "
                                                      "items, else the database's items"),
                   n_items: Optional[int] = typer.Option(None, "--items", help="plan only N items, drawn evenly across "
                                                         "era x OECD x topic"),
                   demo: Optional[bool] = typer.Option(None, "--demo/--no-demo", help="the demo bank and the fictional "
                                                       "sources (default: fictional sources only when the database has "
                                                       "fewer than 6 sources with a popularity value)"),
                   db: Optional[str] = DbOpt) -> None:
    """Plan Design A (Learn2Discern): a prior per item x strategy, a posterior per source x factor.

    Example: `discern-stats design l2d --items 120 --strategies zero-shot,CoT --seed 1`
    """
    from .designs import design_l2d
    try:
        tdb = _open(db)
        res = design_l2d(tdb.engine, seed=seed, per_stratum=per_stratum, bank=bank, n_items=n_items,
                         strategies=tuple(s.strip() for s in strategies.split(",") if s.strip()), use_demo=demo)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"Design A: {res['items']:,} items x {res['sources_per_item']} sources per item; "
                  f"{res['planned']:,} planned requests ({res['new']:,} new)")


@design_app.command("cue")
def design_cue_cmd(seed: int = typer.Option(0, "--seed", help="random seed of the world bank"),
                   worlds: Optional[int] = typer.Option(None, "--worlds", help="use only the first N worlds (demo sizes)"),
                   interventions: str = typer.Option("C0", "--interventions", help="comma-separated: C0,C1,C2,C3,C4"),
                   db: Optional[str] = DbOpt) -> None:
    """Plan Design B: the 500-world cue bank, 48 requests per world (plus 20 per extra intervention).

    Example: `discern-stats design cue --seed 0 --interventions C0,C1,C2,C3,C4`
    """
    from .designs import design_cue
    try:
        tdb = _open(db)
        res = design_cue(tdb.engine, seed=seed, n_worlds=worlds,
                         interventions=[s.strip() for s in interventions.split(",") if s.strip()])
    except DiscernError as exc:
        _fail(exc)
    console.print(f"Design B: {res['worlds']} worlds; {res['planned']} planned requests ({res['new']} new)")


@app.command("collect")
def collect_cmd(spec: Path = typer.Argument(..., help="YAML run spec in collection/"),
                max_requests: Optional[int] = typer.Option(None, "--max-requests", help="stop after this many requests (overrides the spec budget)"),
                retry_failed: bool = typer.Option(False, "--retry-failed", help="also retry trials that failed with API errors"),
                quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
                workers: Optional[int] = typer.Option(None, "--workers", help="collector processes on this machine "
                                                      "(overrides the spec's workers; they share its concurrency)"),
                db: Optional[str] = DbOpt) -> None:
    """Run a collection spec; resumable and idempotent (re-running never duplicates a trial).

    Example: `discern-stats collect collection/demo_cue.yaml --db sqlite:///trials.db --workers 2`
    """
    from .collect.runner import collect
    from .collect.spec import load_spec
    try:
        s = load_spec(spec)
        if retry_failed:
            s.retry_failed = True
        res = collect(_open(db), s, progress=not quiet, max_requests=max_requests, workers=workers)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"run {res.run_id}: {res.done} done ({res.valid} valid, {res.done - res.valid} invalid), "
                  f"{res.failed} failed, {res.retries} retries, {res.lost_leases} lost leases, {res.rate:.1f} req/s; "
                  f"plan of {res.planned} trials", soft_wrap=True)
    if res.failed:
        for cause, n in sorted(res.failure_causes.items(), key=lambda kv: -kv[1]):
            err_console.print(f"  {n} trial(s) failed: {cause}", soft_wrap=True, highlight=False, markup=False)
        err_console.print(f"error: {res.failed} trial(s) failed after every retry; fix the cause, then retry them "
                          f"with: discern-stats collect {spec} --retry-failed --db {resolve_db(db)}", soft_wrap=True,
                          highlight=False, markup=False)
        raise typer.Exit(code=1)


@app.command("metrics")
def metrics_cmd(design: str = typer.Argument(..., help="l2d or cue"),
                out: Path = typer.Option(..., "--out", help="output .csv or .parquet"),
                resamples: int = typer.Option(5000, "--resamples", help="bootstrap resamples (0: no intervals)"),
                seed: int = typer.Option(0, "--seed", help="bootstrap seed"),
                method: Optional[str] = typer.Option(None, "--method",
                                                     help="interval method. l2d: crossed (default: items x sources), "
                                                          "percentile or bca (items only); cue: percentile (default) or bca"),
                subgroup: list[str] = typer.Option([], "--subgroup",
                                                   help="l2d: also the gaps between the two levels of this item tag "
                                                        "(e.g. oecd, era; repeatable), appended to the table"),
                tol: float = typer.Option(0.0, "--tol", help="Design A: relative tolerance of 'equal to the truth'"),
                contrasts_out: Optional[Path] = typer.Option(None, "--contrasts-out",
                                                             help="Design B: also write the Holm-corrected intervention contrasts here"),
                db: Optional[str] = DbOpt) -> None:
    """The metric tables of SPEC with cluster-bootstrap intervals (CSV/parquet by extension).

    Example: `discern-stats metrics cue --out cue_metrics.csv --resamples 5000 --contrasts-out contrasts.csv`

    Example: `discern-stats metrics l2d --out l2d_metrics.csv --subgroup oecd --subgroup era`
    """
    from .store.tables import write_table
    from .stats import holm_contrasts, metrics
    try:
        d = _design_arg(design)
        df = _open(db, read_only=True).trials(d)
        if df.empty:
            raise DiscernError(f"no finished {d} trials in the database")
        kw = {"n_resamples": resamples, "seed": seed}
        if method is not None:
            kw["method"] = method
        if d == "l2d":
            kw["tol"] = tol
        elif subgroup:
            raise InputError("--subgroup applies to Design A (l2d) only")
        table = metrics(d, df, **kw)
        if subgroup:
            import pandas as pd

            from .stats import subgroup_gaps
            table = pd.concat([table] + [subgroup_gaps(df, tag, **kw) for tag in subgroup], ignore_index=True)
        write_table(table, out)
        console.print(f"wrote {len(table)} metric rows to {out}")
        if contrasts_out is not None and d == "cue":
            res = holm_contrasts(df, n_resamples=resamples or 5000, seed=seed)
            write_table(res, contrasts_out)
            console.print(f"wrote {len(res)} contrasts (Holm family of {res.family_size.iloc[0]}) to {contrasts_out}")
    except DiscernError as exc:
        _fail(exc)


@app.command("demo")
def demo_cmd(out: Path = typer.Option(Path("demo_out"), "--out", help="folder for the demo database and tables"),
             worlds: int = typer.Option(30, "--worlds", help="Design B worlds (the full bank is 500)"),
             resamples: int = typer.Option(5000, "--resamples", help="bootstrap resamples"),
             seed: int = typer.Option(0, "--seed", help="design and bootstrap seed"),
             models_dir: Path = typer.Option(Path("models"), "--models", help="folder for the saved fits"),
             fit: bool = typer.Option(True, "--fit/--no-fit", help="fit the three Bayesian models"),
             report: bool = typer.Option(True, "--report/--no-report", help="render the report"),
             draws: int = typer.Option(1000, "--draws", help="posterior draws per chain (NUTS also tunes for as many steps)"),
             chains: int = typer.Option(2, "--chains", help="chains (this machine has 2 cores)")) -> None:
    """The main job on embedded defaults: a fresh SQLite database, both designs at demo size,
    three synthetic respondents (SIMULATORS with known weights), collection, metrics, the
    three Bayesian fits and the report.

    Example: `discern-stats demo --out demo_out --worlds 30`
    """
    from .demo import run_demo
    try:
        files = run_demo(out, worlds=worlds, resamples=resamples, seed=seed, console=console, models_dir=models_dir,
                         fit=fit, report=report, draws=draws, chains=chains)
        if "report" in files:
            console.print(f"[bold]report:[/] {files['report']}")
    except DiscernError as exc:
        _fail(exc)


@app.command("fit")
def fit_cmd(model: str = typer.Argument(..., help="cue, discernment or intervention"),
            models_dir: Path = typer.Option(Path("models"), "--models", help="folder for the saved posterior + manifest"),
            draws: int = typer.Option(1000, "--draws"),
            tune: Optional[int] = typer.Option(None, "--tune", help="NUTS warm-up (default 1000) or Gibbs burn-in "
                                               "(default 200)"),
            chains: int = typer.Option(4, "--chains"),
            sampler: Optional[str] = typer.Option(None, "--sampler", help="gibbs (the default: the models' exact "
                                                  "Gibbs samplers), nutpie, pymc, numpyro or blackjax (NUTS)"),
            seed: int = typer.Option(0, "--seed"),
            refit: bool = typer.Option(False, "--refit", help="fit even when a saved fit matches the data"),
            db: Optional[str] = DbOpt) -> None:
    """Fit a hierarchical Bayesian model and save it to the models folder (netCDF + manifest).

    A saved fit whose data hash and spec match is reused, never refitted, unless --refit.

    Example: `discern-stats fit cue --draws 1000 --chains 4 --models models`
    (or `discern-stats fit cue --sampler nutpie` to sample the PyMC model by NUTS)
    """
    import warnings
    from .bayes import DESIGN_OF, MODELS
    if model not in MODELS:
        _fail(DiscernError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}"))
    try:
        df = _open(db, read_only=True).trials(DESIGN_OF[model])
        if df.empty:
            raise DiscernError(f"no finished {DESIGN_OF[model]} trials in the database")
        cls = MODELS[model]
        fit_kwargs = {"draws": draws, "tune": tune, "chains": chains, "sampler": sampler, "random_seed": seed}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if refit:
                m = cls(df)
                m.fit(**fit_kwargs)
                m.save(models_dir)
                m.reuse_note = "fitted: --refit"
            else:
                m = cls.fit_or_load(df, models_dir, fit_kwargs=fit_kwargs)
        d = m.diagnostics
        for w in caught:
            if "convergence" in str(w.message).lower():
                err_console.print(f"[bold red]WARNING:[/] {w.message}")
        console.print(f"{m.name}: max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
                      f"min tail ESS {d['min_ess_tail']:.0f}, divergences {d['divergences']} -> "
                      + ("converged" if d["ok"] else "NOT CONVERGED"))
        console.print(m.summary().round(3).to_string(index=False))
        if m.reused:
            console.print(m.reuse_note, soft_wrap=True)
        else:
            console.print(f"{m.reuse_note}\nsaved in {models_dir}/{m.name}.nc (+ .json manifest)", soft_wrap=True)
    except DiscernError as exc:
        _fail(exc)


@app.command("report")
def report_cmd(models_dir: Path = typer.Option(Path("models"), "--models", help="folder of saved fits"),
               out: Optional[Path] = typer.Option(None, "--out", help="output folder (default _site/)"),
               resamples: int = typer.Option(5000, "--resamples", help="bootstrap resamples for the tables"),
               fallback: bool = typer.Option(False, "--fallback", help="use the fallback renderer even if quarto is on PATH"),
               project: Path = typer.Option(Path("."), "--project", help="the Quarto project root (with _quarto.yml)"),
               db: Optional[str] = DbOpt) -> None:
    """Render the reports: `quarto render` when Quarto is on PATH, else the fallback
    (the same .qmd pages executed in a Jupyter kernel, self-contained HTML via pandoc).

    Example: `discern-stats report --db sqlite:///demo_out/trials.db --models models`
    """
    from .report.render import render
    try:
        tdb = _open(db, read_only=True)
        if tdb.trials("l2d").empty and tdb.trials("cue").empty:
            raise DiscernError(f"the database {tdb.url} holds no finished trials; collect some first "
                               f"(`discern-stats collect SPEC.yaml`) or run `discern-stats demo`")
        env = {"DISCERN_DB": tdb.url, "DISCERN_MODELS": str(models_dir.resolve()), "DISCERN_RESAMPLES": str(resamples)}
        res = render(project, out_dir=out, env=env, force_fallback=fallback, progress=console.print)
    except DiscernError as exc:
        _fail(exc)
    console.print(f"renderer: {res.renderer}")
    for p in res.outputs:
        console.print(f"  {p}")
    console.print(f"report in {res.out_dir}/index.html")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())

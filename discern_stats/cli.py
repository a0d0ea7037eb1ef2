"""The `discern-stats` command line (typer + rich). Every command has --help with an example."""

from __future__ import annotations

import functools
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

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

FIT_CHAINS = 2  # `fit` and `demo` share their sampler defaults, so a fit after the demo reuses the demo's fits

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


def user_errors(command: Callable[..., None]) -> Callable[..., None]:
    """The one error boundary of every command: an error the package raises on purpose
    (`DiscernError`: bad input, a database that is not there, an invalid spec) becomes one line
    on stderr and exit code 2. Anything else is a bug and keeps its traceback."""
    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        _NEW_DATABASES.clear()
        try:
            command(*args, **kwargs)
        except DiscernError as exc:
            _forget_new_empty_databases()
            _fail(exc)
        finally:
            _NEW_DATABASES.clear()
    return run


_NEW_DATABASES: list[Any] = []  # SQLite databases this command created (`_open`)


def _forget_new_empty_databases() -> None:
    """A command that fails leaves no database behind that it created and wrote nothing into
    (e.g. `import items missing.csv` must not leave an empty ./trials.db that later commands pick up)."""
    while _NEW_DATABASES:
        tdb = _NEW_DATABASES.pop()
        path = tdb.sqlite_path()
        if tdb.is_empty():
            tdb.dispose()
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


def _open(db: Optional[str], read_only: bool = False):
    """The database at ``db`` (`resolve_db`); ``read_only`` commands refuse a URL with no database behind it."""
    from .store.trialdb import TrialDB, sqlite_file
    url = resolve_db(db, read_only)
    path = sqlite_file(url)
    new = path is not None and not path.exists()
    tdb = TrialDB(url, must_exist=read_only)
    if new and not read_only:
        _NEW_DATABASES.append(tdb)
    return tdb


def _design_arg(design: str) -> str:
    from .store.tables import check_design
    return check_design(design)


def _finished_trials(db: Optional[str], design: str):
    """The finished trials of ``design`` in the (existing) database; none is one line naming the database."""
    tdb = _open(db, read_only=True)
    df = tdb.trials(design)
    if df.empty:
        raise DiscernError(f"no finished {design} trials in {tdb.url}; collect some first "
                           f"(`discern-stats collect SPEC.yaml --db {tdb.url}`) or run `discern-stats demo`")
    return df


def _print_metrics(table, design: str) -> None:
    """A metric table on the terminal: one row per LLM x condition x metric, estimate [interval], p, n."""
    from .core.vocab import CUE_METRIC_LABELS, L2D_METRIC_LABELS
    labels = L2D_METRIC_LABELS if design == "l2d" else CUE_METRIC_LABELS
    keys = [c for c in ("llm", "strategy", "intervention", "stratum", "scope", "tag", "contrast") if c in table.columns
            and table[c].astype(str).str.len().gt(0).any()]
    from .core.vocab import UNADJUSTED_P
    t = Table(title=f"Design {'A' if design == 'l2d' else 'B'} metrics ({len(table):,} rows)", show_lines=False,
              caption=f"p: {UNADJUSTED_P}")
    for c in keys + ["metric", "estimate", "interval", "p", "n"]:
        t.add_column(c, justify="right" if c in ("estimate", "p", "n") else "left", overflow="fold")

    def num(v: Any, fmt: str) -> str:
        return "" if v is None or v != v else format(v, fmt)
    for r in table.to_dict("records"):
        interval = f"[{num(r.get('lo'), '.3f')}, {num(r.get('hi'), '.3f')}]" if r.get("lo") == r.get("lo") and \
            r.get("lo") is not None else ""
        t.add_row(*[str(r[c]) for c in keys], labels.get(r["metric"], str(r["metric"])), num(r.get("estimate"), ".3f"),
                  interval, num(r.get("p_value"), ".3g"), num(r.get("n"), ",.0f"))
    console.print(t)


@db_app.command("init")
@user_errors
def db_init(db: Optional[str] = DbOpt) -> None:
    """Create or migrate the schema; idempotent.

    Example: `discern-stats db init --db sqlite:///trials.db`
    """
    tdb = _open(db)
    tdb.init()
    console.print(f"schema ready at {tdb.info()['url']}")


@db_app.command("info")
@user_errors
def db_info(db: Optional[str] = DbOpt, as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
            prices: Optional[Path] = typer.Option(None, "--prices", help="price table (CSV or YAML: llm, input_per_million, "
                                                  "output_per_million[, currency]): adds tokens and cost per LLM and run")) -> None:
    """Counts per table, per design and per LLM, with validity rates (and cost, with --prices).

    Example: `discern-stats db info --db sqlite:///trials.db --prices prices.csv`
    """
    from .collect.costs import cost_table, load_prices
    price_table = load_prices(prices) if prices is not None else None  # checked before the database is opened
    trial_db = _open(db, read_only=True)
    info = trial_db.info()
    costs = cost_table(trial_db, price_table) if price_table is not None else None
    if as_json:
        if costs is not None:
            info["costs"] = json.loads(costs.to_json(orient="records"))
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
        t = Table(title="Trials per design and LLM",
                  caption="valid: the strict parse (the format the prompt asks for; what the statistics use); "
                          "lenient: answers recovered from other shapes too (README, 'Valid answers')")
        cols = ("design", "llm", "planned", "done", "valid", "validity", "lenient valid", "lenient validity")
        for c in cols:
            t.add_column(c, justify="left" if c in ("design", "llm") else "right")
        pct = lambda r: "-" if r is None else f"{100 * r:.1f}%"  # noqa: E731
        for e in info["per_llm"]:
            name = e["llm"] + (" (simulator)" if e["simulator"] else "")
            t.add_row(e["design"], name, str(e["planned"]), str(e["done"]), str(e["valid"]), pct(e["validity_rate"]),
                      str(e["lenient_valid"]), pct(e["lenient_validity_rate"]))
        console.print(t)
    if costs is not None:
        import pandas as pd
        t = Table(title="Tokens and cost per LLM and run",
                  caption="cost = tokens in x input price + tokens out x output price (per million, from the provider's "
                          "reported token counts of finished trials); a run of 'all' sums the LLM's runs; '-' = not priced")
        for c in ("llm", "run", "trials", "tokens in", "tokens out", "cost"):
            t.add_column(c, justify="left" if c == "llm" else "right")
        for r in costs.itertuples():
            cost = "-" if pd.isna(r.cost) else f"{r.cost:,.4f} {r.currency or ''}".strip()
            t.add_row(r.llm, "all" if pd.isna(r.run_id) else str(int(r.run_id)), f"{r.trials:,}", f"{r.tokens_in:,}",
                      f"{r.tokens_out:,}", cost)
        console.print(t)


@import_app.command("items")
@user_errors
def import_items(file: Path = typer.Argument(..., help="CSV/parquet with columns item_id, question, truth; any other column is kept as an item tag"),
                 db: Optional[str] = DbOpt) -> None:
    """Import a Design A item bank (`item_id,question,truth[,tag columns]`).

    Example: `discern-stats import items my_items.csv --db sqlite:///trials.db`
    """
    n = _open(db).import_items(file)
    console.print(f"imported {n} new item(s) from {file}")


@import_app.command("sources")
@user_errors
def import_sources(file: Optional[Path] = typer.Argument(None, help="CSV/parquet with domain plus pc1 or reliability, "
                                                         "optional popularity"),
                   lin2023: bool = typer.Option(False, "--lin2023", help="import the shipped Lin et al. (2023) PC1 "
                                                "ratings of 11,520 news domains (reliability R = PC1; no popularity: "
                                                "add it with `import popularity`)"),
                   db: Optional[str] = DbOpt) -> None:
    """Import a source table (`domain` plus `pc1` or `reliability`, optional `popularity`), or the
    shipped Lin et al. (2023) PC1 table with `--lin2023`.

    Example: `discern-stats import sources --lin2023 && discern-stats import popularity openpagerank.csv`
    """
    if (file is None) == (not lin2023):
        raise InputError("give a source file or --lin2023 (exactly one of them)")
    if lin2023:
        from importlib import resources
        with resources.as_file(resources.files("discern_stats.data").joinpath("lin2023_domain_pc1.csv")) as p:
            n = _open(db).import_sources(p)
        file = "the shipped Lin et al. (2023) PC1 table"
    else:
        n = _open(db).import_sources(file)
    console.print(f"imported {n} new source(s) from {file}")


@import_app.command("popularity")
@user_errors
def import_popularity_cmd(file: Path = typer.Argument(..., help="Tranco list (rank,domain) or Open PageRank CSV"),
                          unmatched: Optional[Path] = typer.Option(None, "--unmatched", help="write the sources that "
                                                                   "matched no listed domain to this text file"),
                          db: Optional[str] = DbOpt) -> None:
    """Set the popularity of the database's sources from a ranking (Tranco or Open PageRank CSV).

    Domains are matched in lower case without `www.`; a subdomain takes its nearest listed parent.

    Example: `discern-stats import popularity tranco_top1m.csv --unmatched unmatched.txt`
    """
    from .store.importing import import_popularity
    res = import_popularity(_open(db).engine, file)
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
@user_errors
def import_trials(design: str = typer.Argument(..., help="l2d or cue"),
                  file: Path = typer.Argument(..., help="interchange CSV/parquet"), db: Optional[str] = DbOpt) -> None:
    """Import trials logged elsewhere, in the interchange columns of SPEC.

    Example: `discern-stats import trials cue cue_trials.parquet`
    """
    n = _open(db).import_trials(_design_arg(design), file)
    console.print(f"imported {n} new trial(s) from {file}")


@export_app.command("trials")
@user_errors
def export_trials(design: str = typer.Argument(..., help="l2d or cue"),
                  out: Path = typer.Option(..., "--out", help="output .csv or .parquet"), db: Optional[str] = DbOpt) -> None:
    """Export finished trials in the interchange columns (`.csv` or `.parquet` by extension).

    Example: `discern-stats export trials l2d --out l2d.csv`
    """
    p = _open(db, read_only=True).export_trials(_design_arg(design), out)
    console.print(f"wrote {p}")


@export_app.command("stimuli")
@user_errors
def export_stimuli_cmd(design: str = typer.Argument(..., help="cue or l2d"),
                       out: Path = typer.Option(..., "--out", help="output .jsonl file"), db: Optional[str] = DbOpt) -> None:
    """Export every planned request as JSON lines for other harnesses (inspect_ai, lm-evaluation-harness).

    Each line: id, input (chat messages), target, choices, metadata (conditions, evidence graph).

    Example: `discern-stats export stimuli cue --out cue_stimuli.jsonl`
    """
    from .store.exporting import export_stimuli
    n = export_stimuli(_open(db, read_only=True).engine, _design_arg(design), out)
    console.print(f"wrote {n:,} planned {design} requests to {out}")


design_app = typer.Typer(help="Build stimuli and planned requests in the database.", no_args_is_help=True)
app.add_typer(design_app, name="design")


@design_app.command("l2d")
@user_errors
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
                   demo: Optional[bool] = typer.Option(None, "--demo/--no-demo", help="the demo bank (24 trivia "
                                                       "questions) with the fictional demo sources"),
                   fictional_sources: bool = typer.Option(False, "--fictional-sources", help="plan with the 24 "
                                                          "invented demo domains (*.example) instead of real sources; "
                                                          "every table built on them says so"),
                   source_pool: Optional[int] = typer.Option(None, "--source-pool", help="draw a fixed pool of N real "
                                                             "sources first, N/6 per popularity x reliability stratum "
                                                             "(seed 000: 132), and record each posterior's stratum (run again on "
                                                             "an older pool plan: records its strata)"),
                   db: Optional[str] = DbOpt) -> None:
    """Plan Design A (Learn2Discern): a prior per item x strategy, a posterior per source x factor.

    Sources must be real (`import sources --lin2023` and `import popularity FILE`) unless
    `--fictional-sources` is given; the command says where they come from.

    Example: `discern-stats design l2d --items 120 --strategies zero-shot,CoT --seed 1 --source-pool 132`
    """
    from .designs import design_l2d
    tdb = _open(db)
    res = design_l2d(tdb.engine, seed=seed, per_stratum=per_stratum, bank=bank, n_items=n_items,
                     strategies=tuple(s.strip() for s in strategies.split(",") if s.strip()), use_demo=demo,
                     fictional_sources=fictional_sources, source_pool=source_pool)
    console.print(f"Design A: {res['items']:,} items x {res['sources_per_item']} sources per item; "
                  f"{res['planned']:,} planned requests ({res['new']:,} new)")
    if res.get("strata_recorded"):
        console.print(f"recorded the source stratum of {res['strata_recorded']:,} posterior(s) planned before strata "
                      f"were recorded (the crossed intervals now take every source term within the strata)")
    console.print(f"sources ({res['n_sources']:,} used): {res['sources']}", soft_wrap=True, highlight=False)


@design_app.command("cue")
@user_errors
def design_cue_cmd(seed: int = typer.Option(0, "--seed", help="random seed of the world bank"),
                   worlds: Optional[int] = typer.Option(None, "--worlds", help="use only the first N worlds (demo sizes)"),
                   interventions: str = typer.Option("C0", "--interventions", help="comma-separated: C0,C1,C2,C3,C4"),
                   db: Optional[str] = DbOpt) -> None:
    """Plan Design B: the 500-world cue bank, 48 requests per world (plus 20 per extra intervention).

    Example: `discern-stats design cue --seed 0 --interventions C0,C1,C2,C3,C4`
    """
    from .designs import design_cue
    tdb = _open(db)
    res = design_cue(tdb.engine, seed=seed, n_worlds=worlds,
                     interventions=[s.strip() for s in interventions.split(",") if s.strip()])
    console.print(f"Design B: {res['worlds']} worlds; {res['planned']} planned requests ({res['new']} new)")


@app.command("collect")
@user_errors
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
    s = load_spec(spec)
    if retry_failed:
        s.retry_failed = True
    res = collect(_open(db), s, progress=not quiet, max_requests=max_requests, workers=workers)
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
@user_errors
def metrics_cmd(design: str = typer.Argument(..., help="l2d or cue"),
                out: Optional[Path] = typer.Option(None, "--out", help="write the table to this .csv or .parquet "
                                                   "(default: print it on the terminal)"),
                resamples: int = typer.Option(5000, "--resamples", help="bootstrap resamples (0: no intervals)"),
                seed: int = typer.Option(0, "--seed", help="bootstrap seed"),
                method: Optional[str] = typer.Option(None, "--method",
                                                     help="interval method. l2d: crossed (default: items x sources), "
                                                          "percentile or bca (items only); cue: percentile (default) or bca"),
                subgroup: list[str] = typer.Option([], "--subgroup",
                                                   help="l2d: also the gaps between the two levels of this item tag "
                                                        "(e.g. oecd, era; repeatable), appended to the table; "
                                                        "TAG=LEVEL names the reference level (default: seed 000's "
                                                        "direction, e.g. era post-internet - pre-internet)"),
                tol: Optional[float] = typer.Option(None, "--tol", help="Design A: a relative tolerance of 'correct' "
                                                    "for every item, overriding the items' own correctness rules "
                                                    "(column correct_rule; items without one: exact)"),
                contrasts_out: Optional[Path] = typer.Option(None, "--contrasts-out",
                                                             help="Design B: also write the Holm-corrected intervention contrasts here"),
                fixed_strata: Optional[bool] = typer.Option(None, "--fixed-strata/--no-fixed-strata",
                                                  help="Design A, crossed intervals: the source pool was drawn within "
                                                       "the 6 popularity x reliability strata at fixed thresholds, so "
                                                       "every metric's source term is taken within the strata; "
                                                       "--no-fixed-strata: SD and rho(Delta, popularity) only. "
                                                       "Default: fixed where the plan recorded the strata "
                                                       "(`design l2d --source-pool`, column source_stratum)"),
                db: Optional[str] = DbOpt) -> None:
    """The metric tables of SPEC with cluster-bootstrap intervals: on the terminal, or to a CSV/parquet
    file (by extension) with --out.

    Example: `discern-stats metrics l2d` (print the table)

    Example: `discern-stats metrics cue --out cue_metrics.csv --resamples 5000 --contrasts-out contrasts.csv`

    Example: `discern-stats metrics l2d --out l2d_metrics.csv --subgroup oecd --subgroup era`

    Example: `discern-stats metrics l2d --fixed-strata` (sources imported from a pool drawn at fixed thresholds)
    """
    from .store.tables import write_table
    from .stats import holm_contrasts, metrics
    d = _design_arg(design)
    if subgroup and d != "l2d":
        raise InputError("--subgroup applies to Design A (l2d) only")
    if fixed_strata is not None and d != "l2d":
        raise InputError(f"--{'' if fixed_strata else 'no-'}fixed-strata applies to Design A (l2d) only")
    for path in (out, contrasts_out):
        if path is not None and path.suffix.lower() not in (".csv", ".parquet", ".pq"):
            raise InputError(f"unsupported output type {path.suffix or '(none)'!r}; use .csv or .parquet", file=str(path))
    df = _finished_trials(db, d)
    kw = {"n_resamples": resamples, "seed": seed}
    if method is not None:
        kw["method"] = method
    if d == "l2d" and tol is not None:
        kw["tol"] = tol
    table = metrics(d, df, **kw, **({"fixed_strata": fixed_strata} if fixed_strata is not None else {}))
    if subgroup:
        import pandas as pd

        from .stats import subgroup_gaps
        gaps = []
        for spec in subgroup:  # TAG or TAG=REFERENCE (the level the other is compared against)
            tag, _, ref = spec.partition("=")
            gaps.append(subgroup_gaps(df, tag, reference=ref or None, **kw))
        table = pd.concat([table] + gaps, ignore_index=True)
    # the contrasts before any file is written: an incomplete plan (InputError) leaves no partial output
    res = holm_contrasts(df, n_resamples=resamples or 5000, seed=seed) if contrasts_out is not None and d == "cue" \
        else None
    if out is None:
        _print_metrics(table, d)
    else:
        write_table(table, out)
        console.print(f"wrote {len(table)} metric rows to {out}")
    if res is not None:
        write_table(res, contrasts_out)
        left = res.left_out_llms.iloc[0]
        console.print(f"wrote {len(res)} contrasts (Holm family of {res.family_size.iloc[0]} over the LLMs with "
                      f"every intervention: {res.family_llms.iloc[0]}"
                      + (f"; baseline-only LLMs left out: {left}" if left else "") + f") to {contrasts_out}")


@app.command("demo")
@user_errors
def demo_cmd(out: Path = typer.Option(Path("demo_out"), "--out", help="folder for the demo database and tables"),
             worlds: int = typer.Option(30, "--worlds", help="Design B worlds (the full bank is 500)"),
             resamples: int = typer.Option(5000, "--resamples", help="bootstrap resamples"),
             seed: int = typer.Option(0, "--seed", help="design and bootstrap seed"),
             models_dir: Path = typer.Option(Path("models"), "--models", help="folder for the saved fits"),
             fit: bool = typer.Option(True, "--fit/--no-fit", help="fit the three Bayesian models"),
             report: bool = typer.Option(True, "--report/--no-report", help="render the report"),
             draws: int = typer.Option(1000, "--draws", min=1, help="posterior draws per chain (NUTS also tunes for as many "
                                       "steps; the discernment model takes 4 times as many, its draws_factor); `fit` has the "
                                       "same defaults"),
             chains: int = typer.Option(FIT_CHAINS, "--chains", min=1, help="chains (the same default as `fit`)"),
             sensitivity: bool = typer.Option(False, "--sensitivity/--no-sensitivity", help="also fit the discernment "
                                              "model under the other scale priors (saved; the report's prior "
                                              "sensitivity table)")) -> None:
    """The main job on embedded defaults: a fresh SQLite database, both designs at demo size,
    three synthetic respondents (SIMULATORS with known weights), collection, metrics, the
    three Bayesian fits and the report.

    Example: `discern-stats demo --out demo_out --worlds 30`
    """
    from .demo import run_demo
    files = run_demo(out, worlds=worlds, resamples=resamples, seed=seed, console=console, models_dir=models_dir,
                     fit=fit, report=report, draws=draws, chains=chains, sensitivity=sensitivity)
    if "report" in files:
        console.print(f"[bold]report:[/] {files['report']}")


def _json_object_option(text: Optional[str], flag: str) -> dict:
    """A command-line option holding a JSON object ({} when not given); anything else is one line."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{flag}: not valid JSON ({e.msg} at character {e.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise InputError(f"{flag}: expected a JSON object such as '{{\"strategy_effects\": true}}', got {text!r}")
    return value


@app.command("fit")
@user_errors
def fit_cmd(model: str = typer.Argument(..., help="cue, discernment or intervention"),
            models_dir: Path = typer.Option(Path("models"), "--models", help="folder for the saved posterior + manifest"),
            draws: Optional[int] = typer.Option(None, "--draws", min=1, help="posterior draws per chain (default 1000 "
                                                "x the model's draws_factor: the discernment model 4000), as the demo"),
            tune: Optional[int] = typer.Option(None, "--tune", min=0, help="NUTS warm-up (default 1000) or Gibbs burn-in "
                                               "(default 200)"),
            chains: int = typer.Option(FIT_CHAINS, "--chains", min=1, help="chains (the demo's default too, so a `fit` "
                                       "right after the demo reuses its fits)"),
            sampler: Optional[str] = typer.Option(None, "--sampler", help="gibbs (the default: the models' exact "
                                                  "Gibbs samplers), nutpie, pymc, numpyro or blackjax (NUTS)"),
            seed: int = typer.Option(0, "--seed"),
            refit: bool = typer.Option(False, "--refit", help="fit even when a saved fit matches the data"),
            config: Optional[str] = typer.Option(None, "--config", help="model options over the defaults, as a JSON "
                                                 "object, e.g. '{\"strategy_effects\": true}' (a saved fit is "
                                                 "reused only under the same options)"),
            db: Optional[str] = DbOpt) -> None:
    """Fit a hierarchical Bayesian model and save it to the models folder (netCDF + manifest).

    A saved fit whose data hash and spec match is reused, never refitted, unless --refit.

    Example: `discern-stats fit cue --draws 1000 --chains 2 --models models`
    (or `discern-stats fit cue --sampler nutpie` to sample the PyMC model by NUTS;
    `discern-stats fit discernment --config '{"strategy_effects": true}'` for model options)
    """
    import warnings
    from .bayes import DESIGN_OF, MODELS, fit as fit_model
    if model not in MODELS:
        raise InputError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}")
    options = _json_object_option(config, "--config")
    df = _finished_trials(db, DESIGN_OF[model])
    if draws is None:
        draws = 1000 * MODELS[model].draws_factor  # the demo's draws (a model that needs more for its gate says so)
    fit_kwargs = {"draws": draws, "tune": tune, "chains": chains, "sampler": sampler, "random_seed": seed}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = fit_model(model, df, models_dir, refit=refit, fit_kwargs=fit_kwargs, **options)
    if m.reused:
        console.print(m.reuse_note, soft_wrap=True)
    else:
        console.print(f"{m.reuse_note}\nsaved in {models_dir}/{m.name}.nc (+ .json manifest)", soft_wrap=True)
    d = m.diagnostics
    for w in caught:
        if "convergence" in str(w.message).lower():
            err_console.print(f"[bold red]WARNING:[/] {w.message}")
    console.print(f"{m.name}: max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
                  f"min tail ESS {d['min_ess_tail']:.0f}, divergences {d['divergences']} -> "
                  + ("converged" if d["ok"] else "NOT CONVERGED"))
    console.print(m.summary().round(3).to_string(index=False))


@app.command("report")
@user_errors
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
    from .store.trialdb import absolute_url
    if not (project / "_quarto.yml").is_file():
        raise InputError(f"no _quarto.yml in {project.resolve()}: run `discern-stats report` in the discern_stats "
                         f"repository (where _quarto.yml and reports/ are), or pass --project DIR")
    tdb = _open(db, read_only=True)
    if tdb.trials("l2d").empty and tdb.trials("cue").empty:
        raise DiscernError(f"the database {tdb.url} holds no finished trials; collect some first "
                           f"(`discern-stats collect SPEC.yaml`) or run `discern-stats demo`")
    # the pages run inside the project folder: a relative SQLite path is resolved here, once
    env = {"DISCERN_DB": absolute_url(tdb.url), "DISCERN_MODELS": str(models_dir.resolve()),
           "DISCERN_RESAMPLES": str(resamples)}
    res = render(project, out_dir=out, env=env, force_fallback=fallback, progress=console.print)
    console.print(f"renderer: {res.renderer}")
    for p in res.outputs:
        console.print(f"  {p}")
    console.print(f"report in {res.out_dir}/index.html")


def main(argv: list[str] | None = None) -> int:
    """The console entry point: ``app`` with a usage error (a bad option value, an unknown
    option or command) as one line on stderr and exit code 2, instead of click's boxed panel.
    ``--help``, a command group called bare (its help) and every command's own exit code pass
    through unchanged."""
    try:  # typer >= 0.24 carries its own click
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - an older typer on click
        from click import exceptions as cx
    prog = "discern-stats"
    try:
        rv = app(args=argv, prog_name=prog, standalone_mode=False)
    except cx.NoArgsIsHelpError:  # a group called bare: typer has printed its help
        return 0
    except cx.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else prog
        hint = f" (see '{where} --help')"
        print(f"error: {where}: {e.format_message()}{hint}", file=sys.stderr)
        return 2
    except typer.Abort:
        print(f"error: {prog}: aborted", file=sys.stderr)
        return 1
    return rv if isinstance(rv, int) else 0


def console_main() -> None:  # pragma: no cover - the installed script
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    console_main()

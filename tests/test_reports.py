"""Report pages execute in a real Jupyter kernel against a small demo database; the fallback
HTML holds each section's tables and figures; known weights appear beside recovered ones."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.bayes import DESIGN_OF, MODELS
from discern_stats.cli import app
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
from discern_stats.core.vocab import DISCERNMENT_PARTS, POPULATION_MEAN
from discern_stats.designs import design_cue, design_l2d
from discern_stats.report.render import PAGES, embedded_images, execute_page, fallback_render

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("credulous", "source-sensitive", "order-biased")


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("rep")
    url = f"sqlite:///{d / 'trials.db'}"
    db = ds.TrialDB(url)
    design_cue(db.engine, n_worlds=8, interventions=["C0", "C1", "C2", "C3", "C4"])
    design_l2d(db.engine, strategies=("zero-shot", "Reliability"), items=[f"demo-{i:02d}" for i in range(1, 9)], bank="demo", fictional_sources=True)
    llms = [{"name": f"sim-{p}", "provider": f"synthetic:{p}"} for p in PROFILES]
    collect(db, spec_from_dict({"name": "c", "design": "cue", "interventions": ["C0", "C1", "C2", "C3", "C4"],
                                "llms": llms, "concurrency": 32}), progress=False)
    collect(db, spec_from_dict({"name": "a", "design": "l2d", "llms": llms, "concurrency": 32}), progress=False)
    models = d / "models"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains: convergence flags are expected and shown
        for kind, cls in MODELS.items():
            cls.fit_or_load(db.trials(DESIGN_OF[kind]), models, fit_kwargs={"draws": 150, "tune": 150, "chains": 2})
    return {"DISCERN_DB": url, "DISCERN_MODELS": str(models), "DISCERN_RESAMPLES": "100"}, d


@pytest.mark.parametrize("page", PAGES)
def test_each_page_executes(small_demo, page):
    env, _ = small_demo
    meta, nb = execute_page(ROOT / page, ROOT, env)
    assert meta["title"]
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


def test_the_page_list_is_quartos():
    from discern_stats.report.render import project_pages
    assert project_pages(ROOT) == PAGES


def _child_kernels() -> list[int]:
    """Live ipykernel processes whose parent is this process (Linux /proc)."""
    import os
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"ipykernel" in cmd and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            pids.append(int(d.name))
    return pids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts child processes through /proc")
def test_execute_page_stops_its_kernel(tmp_path):
    """The fallback renderer starts one kernel per page and stops it when the page is done (nbclient
    leaves a kernel manager it is given running; the kernels used to outlive the render)."""
    page = tmp_path / "p.qmd"
    page.write_text('---\ntitle: "t"\n---\n\n```{python}\nprint(1 + 1)\n```\n')
    before = set(_child_kernels())
    meta, nb = execute_page(page, tmp_path)
    assert nb.cells[-1].outputs[0]["text"].strip() == "2"
    assert set(_child_kernels()) - before == set()


@pytest.fixture(scope="module")
def rendered(small_demo):
    env, d = small_demo
    outs = fallback_render(ROOT, d / "site", env)
    return {p.stem: p.read_text() for p in outs}


def _visible_text(html: str) -> str:
    """The text a reader sees: tags, styles and embedded images removed."""
    import html as html_lib
    html = re.sub(r"<style.*?</style>|<script.*?</script>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", html)))  # pandoc wraps lines


RAW_CODES = ["text_order", "event_time", "recognition_HH", "recognition_LL", "order_at_08", "order_at_12",
             "swap_if_recognised", "time_if_A_first", "rel_propensity", "truth_propensity", "abs_text_order",
             "parse_failure", "api_error", "valid_rate", "count_single", "initial_state", "effect_pp", "p_holm",
             "logit_mean", "hdi_lo", "move_theta", "move_tau", "fraction_tau", "away_u", "LLM(s)"]


def test_fallback_html_has_sections_tables_and_figures(rendered):
    assert set(rendered) == {Path(p).stem for p in PAGES}
    llms = [f"sim-{p}" for p in PROFILES]
    for name, html in rendered.items():
        assert "fallback renderer" in html and "Quarto was not on PATH" in html
        assert "<script src=" not in html  # self-contained
        text = _visible_text(html)
        raw = [c for c in RAW_CODES if c in text]
        assert not raw, (name, raw)  # human labels everywhere a reader looks
        for m in llms:  # every LLM named in a table or legend carries the simulator tag
            assert text.count(m) == text.count(f"{m} (simulator)"), (name, m)
    home = rendered["index"]
    assert "At a glance" in home and "reports/discernment.html" in home
    a = rendered["discernment"]
    text = _visible_text(a)
    assert "SD, TD and CD per prompt strategy" in text and "random chance" in text and "theoretical range" in text
    assert text.index("Zero-shot") < text.index("Reliability rating") < text.index("All strategies pooled")
    assert "CD (Correct Defense)" in text and "Sycophantic Cave" in text and "Good" in text and "Bad" in text
    assert "OECD member: yes − no" in text  # the fixture's 8 demo items are all pre-internet: no era gap
    assert "ρ(Δ, R): acting on R" in text and "ρ(Δ, R̂): execution" in text
    assert all(f"{m} (simulator)" in a for m in llms)
    assert embedded_images(a) == 2 and "Figure 1." in a and "Table 1." in a
    b = rendered["cue_profiles"]
    text = _visible_text(b)
    for stratum in ("Core", "All", "Structural", "Naturalized"):
        assert f"Cue profile, {stratum} worlds" in text
    assert all(h in text for h in ("Valid", "Rec.", "Sw.", "Text", "Time", "Ver."))
    assert "Swap (history)" in text and "Text order, B at 08:00" in text
    assert embedded_images(b) == 4  # heat map, scatter, forest, recovery
    i = rendered["interventions"]
    text = _visible_text(i)
    assert "Holm" in text and "Flat − Base (C2−C0)" in text and "+Rule − Ledger (C4−C3)" in text
    assert "Holm-adjusted over the whole family of 48" in text and "* < 0.05, ** < 0.01, *** < 0.001" in text
    assert "unadjusted 95% intervals" in text  # why an interval may exclude 0 without a star
    assert embedded_images(i) == 2  # the intervention profile and the contrast forest
    dq = rendered["data_quality"]
    assert "unparseable" in _visible_text(dq) and embedded_images(dq) == 1
    dg = rendered["diagnostics"]
    assert "NOT CONVERGED" in dg and "max R-hat" in dg
    assert embedded_images(dg) == 4  # a rank plot per saved fit and the update-fraction predictive check
    dgt = _visible_text(dg)
    assert "Leave-one-cluster-out cross-validation (PSIS-LOO)" in dgt and "LLM × strategy × item" in dgt
    assert "Posterior predictive check of the discernment model" in dgt and "P(away | moved)" in dgt


def test_unconverged_fits_are_flagged_where_their_numbers_appear(rendered):
    """The fixture's fits are deliberately short (150 draws): every table built on them says so."""
    for page, n in (("cue_profiles", 1), ("interventions", 1), ("index", 3)):
        assert _visible_text(rendered[page]).count("NOT CONVERGED") >= n, page


def test_known_weights_beside_recovered(rendered):
    text = _visible_text(rendered["cue_profiles"])
    assert "Cue weights from the hierarchical model" in text and "(true 3.00" in text  # source-sensitive history weight
    assert "C0 Base" in text and "C4 +Rule" in text


def test_holm_stars_in_the_compact_contrast_table(small_demo, monkeypatch):
    from discern_stats import report as R
    env, _ = small_demo
    ctx = R.context(env["DISCERN_DB"], env["DISCERN_MODELS"], int(env["DISCERN_RESAMPLES"]))
    c = ctx.contrasts().copy()
    c["p_holm"] = np.resize([0.0004, 0.004, 0.04, 0.4], len(c))
    monkeypatch.setattr(type(ctx), "contrasts", lambda self: c)
    cells = R.tables.contrasts_compact_frame(ctx).drop(columns=["group", "LLM"]).to_numpy().ravel()
    ends = [x.split("]")[-1] for x in cells]
    assert {"***", "**", "*", ""} == set(ends)
    assert [R.tables.holm_stars(p) for p in (0.0009, 0.001, 0.0099, 0.049, 0.05, np.nan)] == ["***", "**", "**", "*", "",
                                                                                               ""]
    html = R.tables.contrasts_table(ctx).as_raw_html()
    assert "]***" in html.replace("\u00a0", " ")


def test_two_databases_render_their_own_numbers(small_demo, tmp_path):
    """Rendering for another database never shows the first one's numbers (no frozen pages, the
    metric cache keyed by data hash)."""
    env, d = small_demo
    url2 = f"sqlite:///{tmp_path / 'other.db'}"
    db2 = ds.TrialDB(url2)
    design_cue(db2.engine, n_worlds=6, seed=3)
    collect(db2, spec_from_dict({"name": "c", "design": "cue", "llms": [{"name": "sim-credulous",
                                                                         "provider": "synthetic:credulous"}]}),
            progress=False)
    pages = ["index.qmd", "reports/cue_profiles.qmd"]
    shared_cache = {"DISCERN_CACHE": str(tmp_path / "cache")}
    one = fallback_render(ROOT, tmp_path / "one", {**env, **shared_cache}, pages=pages)
    two = fallback_render(ROOT, tmp_path / "two", {**env, **shared_cache, "DISCERN_DB": url2,
                                                   "DISCERN_MODELS": str(tmp_path / "no-models")}, pages=pages)
    t1, t2 = (_visible_text(p.read_text()) for p in (one[0], two[0]))
    assert env["DISCERN_DB"] in t1 and url2 in t2 and url2 not in t1
    assert "288 finished trials of 288 planned" in t2  # 6 worlds x 48 requests, one LLM
    c1, c2 = (_visible_text(p.read_text()) for p in (one[1], two[1]))
    assert "Cue profile, Core worlds (5)" in c1 and "Cue profile, Core worlds (4)" in c2
    assert "sim-order-biased" in c1 and "sim-order-biased" not in c2


def test_report_command_says_which_renderer(small_demo, tmp_path, monkeypatch):
    env, d = small_demo
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no quarto
    r = CliRunner().invoke(app, ["report", "--db", env["DISCERN_DB"], "--models", env["DISCERN_MODELS"],
                                 "--resamples", "50", "--out", str(tmp_path / "site"), "--project", str(ROOT)])
    assert r.exit_code == 0, r.output
    assert "renderer: fallback (nbclient + pandoc)" in r.output
    assert (tmp_path / "site" / "index.html").exists() and (tmp_path / "site" / "reports" / "discernment.html").exists()
    assert "[3/7] reports/discernment.qmd:" in r.output and "rendered 7 pages in" in r.output  # progress per page


def test_metric_tables_are_cached_per_data_hash(tmp_path):
    """A metric table is computed once per (data hash, settings, statistics code) and read back
    after; other data get their own entry, never the previous table."""
    from discern_stats.report.cache import cached_table
    calls = []

    def compute(df):
        calls.append(1)
        return pd.DataFrame({"metric": ["n"], "estimate": [float(len(df))]})

    a = pd.DataFrame({"llm": ["m", "m", "n"], "x": [1.0, 2.0, 3.0]})
    first = cached_table(tmp_path, "t", a, lambda: compute(a), resamples=10, seed=0)
    again = cached_table(tmp_path, "t", a.iloc[::-1], lambda: compute(a), resamples=10, seed=0)  # row order: same data
    assert len(calls) == 1 and again.equals(first)
    b = a.assign(x=[1.0, 2.0, 4.0])
    other = cached_table(tmp_path, "t", b, lambda: compute(b.iloc[:2]), resamples=10, seed=0)
    assert len(calls) == 2 and other.estimate.iloc[0] == 2.0
    cached_table(tmp_path, "t", a, lambda: compute(a), resamples=20, seed=0)  # other settings: recomputed
    assert len(calls) == 3 and len(list(tmp_path.glob("t-*.parquet"))) == 3
    for p in tmp_path.glob("t-*.parquet"):
        p.write_bytes(b"damaged")
    assert cached_table(tmp_path, "t", a, lambda: compute(a), resamples=10, seed=0).equals(first)
    assert len(calls) == 4  # a damaged file is recomputed (and rewritten), never trusted
    cached_table(tmp_path, "t", a, lambda: compute(a), resamples=10, seed=0)
    assert len(calls) == 4


# ---------------------------------------------------------------- issue 28: pages that fit and explain themselves
def _screenshot_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("screenshot_report", ROOT / "docs" / "screenshot_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _chromium():
    import shutil
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("no chromium on PATH: the layout check needs a browser (Debian: apt-get install chromium)")
    return exe


def test_every_table_fits_the_body_at_1400px(rendered, tmp_path):
    """Laid out by headless Chromium at 1,400 px: no table is wider than the page body."""
    shot = _screenshot_module()
    exe = _chromium()
    for name, html in rendered.items():
        page = tmp_path / f"{name}.html"
        page.write_text(html)
        assert shot.table_overflow(page, 1400, exe) == [], name


def test_the_layout_check_sees_a_table_too_wide(tmp_path):
    """A negative control for the check above: 30 unbreakable columns overflow the body."""
    shot = _screenshot_module()
    exe = _chromium()
    from discern_stats.report.render import CSS
    cells = "".join(f"<td style='white-space:nowrap'>estimate{k}&nbsp;[low,&nbsp;high]</td>" for k in range(30))
    page = tmp_path / "wide.html"
    page.write_text(f"<html><head><style>{CSS}</style></head><body><div class='output' id='tbl-wide'>"
                    f"<table><tr>{cells}</tr></table></div></body></html>")
    bad = shot.table_overflow(page, 1400, exe)
    assert [b["table"] for b in bad] == ["tbl-wide"]


def test_tables_may_wrap_between_estimate_and_interval():
    from discern_stats.report.tables import NBSP, _ci
    cell = _ci(1.5, 0.25, 2.75, 2)
    assert cell == f"1.50 [0.25,{NBSP}2.75]"  # a break only before the bracket, never inside it


def test_labels_come_from_vocab():
    from discern_stats.core import vocab
    from discern_stats.report import figures, tables
    assert tables.STRATEGY_LABELS is vocab.STRATEGY_LABELS
    assert figures._group_label("sim-x / CoT", {"sim-x": "sim-x (simulator)"}) == "sim-x (simulator) / Chain of thought"
    assert figures.parameter_label("move_tau", "improvement") == "P(move): between-group SD τ, improvement I"
    assert figures.parameter_label("tau", "history") == "between-LLM SD τ, Swap (history)"
    assert tables._parameter_name("away_u").startswith("P(away or past | move): random effects")


def _legend_colours(fig) -> dict[str, str]:
    """Legend label -> the colour of its artist (an errorbar's marker line, a histogram's outline)."""
    import matplotlib.colors as mcolors
    out = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if hasattr(h, "lines"):  # ErrorbarContainer
                colour = h.lines[0].get_color()
            elif hasattr(h, "get_edgecolor"):  # a step histogram's patch
                colour = h.get_edgecolor()
            else:
                colour = h.get_color()
            out[lab] = mcolors.to_hex(colour)
    return out


def test_one_colour_blind_safe_palette_per_llm(small_demo):
    """Each LLM has one colour, from the Okabe-Ito palette, in every figure that tells LLMs apart."""
    from discern_stats import report as R
    env, _ = small_demo
    ctx = R.context(env["DISCERN_DB"], env["DISCERN_MODELS"], int(env["DISCERN_RESAMPLES"]))
    want = {f"{name} (simulator)": c.lower() for name, c in R.figures.llm_colors(ctx).items()}
    assert set(want.values()) <= {c.lower() for c in R.figures.OKABE_ITO} and len(set(want.values())) == len(want)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figs = [R.figures.identification_vs_influence(ctx), R.figures.weights_recovery(ctx), R.figures.latency_hist(ctx)]
    for fig in figs:
        got = {k: v for k, v in _legend_colours(fig).items() if k in want}
        assert got and got == {k: want[k] for k in got}, got


def test_rank_plots_name_their_parameters(small_demo):
    from discern_stats import report as R
    env, _ = small_demo
    ctx = R.context(env["DISCERN_DB"], env["DISCERN_MODELS"], int(env["DISCERN_RESAMPLES"]))
    fig = R.figures.rank_plot(ctx, "discernment")
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    assert titles and all("_" not in t for t in titles), titles
    assert "P(move): between-group SD τ, reliability" in titles
    assert all(a.get_ylabel() for a in fig.axes[::3] if a.get_title())
    caption = (ROOT / "reports" / "diagnostics.qmd").read_text()
    assert "ECDF" not in caption and "grey band" in caption  # the caption describes what is drawn


def test_strategy_labels_in_the_popularity_figure(small_demo):
    from discern_stats import report as R
    env, _ = small_demo
    ctx = R.context(env["DISCERN_DB"], env["DISCERN_MODELS"], int(env["DISCERN_RESAMPLES"]))
    fig = R.figures.popularity_vs_reliability(ctx)
    ticks = [t.get_text() for a in fig.axes for t in a.get_yticklabels()]
    assert any("Reliability rating" in t for t in ticks) and not any(t.endswith("/ Reliability") for t in ticks)


def test_home_page_has_no_codes_or_placeholders(rendered):
    text = _visible_text(rendered["index"])
    assert " item value " not in text and "LLM(s)" not in text and "3 LLMs" in text
    assert "Runs, LLMs and counts" not in _visible_text(rendered["overview"])


def test_appendix_says_whether_holm_rejects(rendered):
    text = _visible_text(rendered["interventions"])
    assert "Holm rejects" in text and "p (Holm) < 0.05" in text


@pytest.fixture(scope="module")
def design_a_only(tmp_path_factory):
    d = tmp_path_factory.mktemp("a_only")
    url = f"sqlite:///{d / 'trials.db'}"
    db = ds.TrialDB(url)
    design_l2d(db.engine, strategies=("zero-shot",), items=[f"demo-{i:02d}" for i in range(1, 7)], bank="demo",
               fictional_sources=True)
    collect(db, spec_from_dict({"name": "a", "design": "l2d", "concurrency": 32,
                                "llms": [{"name": f"sim-{p}", "provider": f"synthetic:{p}"} for p in PROFILES]}),
            progress=False)
    env = {"DISCERN_DB": url, "DISCERN_MODELS": str(d / "models"), "DISCERN_RESAMPLES": "50"}
    outs = fallback_render(ROOT, d / "site", env)
    return url, {p.stem: _visible_text(p.read_text()) for p in outs}


def test_a_design_a_only_report_says_once_what_is_missing(design_a_only):
    url, pages = design_a_only
    for page in ("cue_profiles", "interventions"):
        text = pages[page]
        assert text.count(f"no Design B trials in {url}") == 1, (page, text.count("no Design B trials"))
        assert "note" not in text.split()  # no table of one 'note' cell
    home = pages["index"]
    assert "no valid P4 choices" not in home and f"no Design B trials in {url}" in home
    assert "no Design A trials" not in pages["discernment"] and "Zero-shot" in pages["discernment"]
    assert "right panel" not in (ROOT / "reports" / "discernment.qmd").read_text().lower()


def test_a_figure_with_nothing_to_show_takes_no_number():
    import nbformat
    from discern_stats.report.render import notebook_to_markdown
    nb = nbformat.v4.new_notebook()
    empty = nbformat.v4.new_code_cell('#| label: fig-a\n#| fig-cap: "A"\nNone')
    drawn = nbformat.v4.new_code_cell('#| label: fig-b\n#| fig-cap: "B"\nfig')
    drawn.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"})]
    nb.cells = [empty, drawn]
    md = notebook_to_markdown({}, nb)
    assert "Figure 1.</b> B" in md and "Figure 2" not in md and "</b> A" not in md


# ---------------------------------------------------------------- issue 25.4 / 25.5: the discernment model on the paper's scale
def test_discernment_model_section_reads_saved_fits_only(small_demo, tmp_path, monkeypatch):
    """The implied-effects table is the `bayes.implied` numbers of the saved fit beside the
    frequentist metrics; the gate note names the failed (short) fit; prior sensitivity shows the
    saved fits only (the default prior's is the main fit; the others are listed as missing until
    saved), and building the section never fits."""
    import shutil
    from discern_stats import report as R
    from discern_stats.bayes import DiscernmentModel, discernment_prior_sensitivity
    from discern_stats.bayes.implied import implied_correct_defense, implied_effects
    from discern_stats.report.tables import NBSP, _ci
    env, d = small_demo
    models = tmp_path / "models"
    shutil.copytree(env["DISCERN_MODELS"], models)
    ctx = R.context(env["DISCERN_DB"], models, int(env["DISCERN_RESAMPLES"]), cache_dir="off")
    fitting = []
    monkeypatch.setattr(DiscernmentModel, "fit", lambda self, **kw: fitting.append(kw))
    note = R.tables.discernment_gate_note(ctx).html
    assert "Convergence gate FAILED" in note and "the discernment fit: max R-hat" in note  # 150 draws
    assert "no saved fit under Gamma(2, 20), Gamma(5, 5)" in note
    s = R.tables.sensitivity_frame(ctx)
    assert set(s.prior) == {"τ ~ Gamma(2, 8) (default)"} and (s["gate passed"] == "NO").all()
    # the table's cells are the implied numbers of the saved fit, and the frequentist ones beside them
    m = ctx.model("discernment")
    # the sensitivity table's slope rows are the population mean mu (where tau's prior acts), not the groups' mean
    sm = m.summary()
    mu = sm[(sm.group == POPULATION_MEAN) & (sm.part == "move") & (sm.term == "reliability")].iloc[0]
    row = s[s.row == f"{DISCERNMENT_PARTS['move']}: population mean slope μ, logit per SD"].iloc[0]
    assert row["reliability"] == _ci(mu["mean"], mu.hdi_lo, mu.hdi_hi, 2)
    # the figure shows each group and the groups' mean (one tick each), not mu
    fig = R.figures.popularity_vs_reliability(ctx)
    ticks = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert len(ticks) == m.data.group.nunique() + 1 and ticks[-1] == "mean over groups"
    f = R.tables.implied_frame(ctx)
    eff, cd = implied_effects(m), implied_correct_defense(m).set_index("group")
    assert len(f) == m.data.group.nunique() + 1 and f.LLM.iloc[-1] == "all groups (unweighted mean)"
    g = sorted(m.data.group.unique())[0]
    llm, strat = g.split(" / ")
    row = f[(f.LLM == f"{llm} (simulator)") & (f.strategy == R.tables.STRATEGY_LABELS[strat])].iloc[0]
    want = eff[(eff.group == g) & (eff.quantity == "P(update)") & (eff.term == "popularity - reliability")].iloc[0]
    assert row["P(update)|popularity - reliability"] == _ci(want["mean"], want.hdi_lo, want.hdi_hi, 1)
    assert row["cd_model"] == _ci(*cd.loc[g, ["mean", "hdi_lo", "hdi_hi"]], 1)
    met = ctx.metrics("l2d").set_index(["llm", "strategy", "metric"]).loc[(llm, strat, "SD")]
    assert row["freq_SD"] == _ci(met.estimate, met.lo, met.hi, 2) and NBSP in row["freq_SD"]
    pp = R.tables.prior_predictive_frame(ctx)
    assert list(pp.quantity)[:4] == ["no move", "partial move", "full adoption", "away from or past the claim"]
    assert fitting == []  # the page never fits
    monkeypatch.undo()
    # once the other priors' fits are saved, the section shows a block per prior, still without fitting
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        discernment_prior_sensitivity(ctx.trials("l2d"), priors=((2.0, 0.25), (5.0, 1.0)), models_dir=models,
                                      fit_kwargs={"draws": 150, "tune": 150, "chains": 2})
    monkeypatch.setattr(DiscernmentModel, "fit", lambda self, **kw: fitting.append(kw))
    ctx = R.context(env["DISCERN_DB"], models, int(env["DISCERN_RESAMPLES"]), cache_dir="off")
    s = R.tables.sensitivity_frame(ctx)
    assert list(dict.fromkeys(s.prior)) == ["τ ~ Gamma(2, 8) (default)", "τ ~ Gamma(5, 5)"] and fitting == []
    assert "no saved fit under Gamma(2, 20)" in R.tables.discernment_gate_note(ctx).html
    assert "the fit under the scale prior Gamma(5, 5)" in R.tables.discernment_gate_note(ctx).html


def test_discernment_page_shows_the_model_section(rendered):
    text = _visible_text(rendered["discernment"])
    assert "The discernment model on the paper's scale" in text and "Convergence gate FAILED" in text
    assert "pp per −1 → +1 SD" in text and "Correct defense, %" in text and "CD (observed)" in text
    assert "Prior predictive check of the discernment model" in text
    assert "Prior sensitivity of the discernment model" in text
    from discern_stats.bayes import DiscernmentModel  # the implied table says what it integrated out
    crossed = DiscernmentModel.default_config["source_effects"]
    assert ("integrated over their distribution (a new item from a new source)" if crossed
            else "integrated over their distribution (a new item)") in text
    assert ("source SD HalfNormal(" in text) == crossed  # the prior predictive note names the priors it drew
    assert "away from claim (f < 0)" in text and "past claim (f > 1)" in text  # the away split, counted

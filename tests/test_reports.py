"""Report pages execute in a real Jupyter kernel against a small demo database; the fallback
HTML holds each section's tables and figures; known weights appear beside recovered ones."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.bayes import DESIGN_OF, MODELS
from discern_stats.cli import app
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import spec_from_dict
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
    design_l2d(db.engine, strategies=("zero-shot", "Reliability"), items=[f"demo-{i:02d}" for i in range(1, 9)], bank="demo")
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
    meta, nb = execute_page(ROOT / "reports" / page, ROOT, env)
    assert meta["title"]
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


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


def test_fallback_html_has_sections_tables_and_figures(rendered):
    assert set(rendered) == {Path(p).stem for p in PAGES}
    llms = [f"sim-{p}" for p in PROFILES]
    for name, html in rendered.items():
        assert "fallback renderer" in html and "Quarto was not on PATH" in html
        assert "<script src=" not in html  # self-contained
    a = rendered["discernment"]
    assert "<h2" in a and "SD, TD and CD" in a and "random chance" in a
    assert all(f"{m} (simulator)" in a for m in llms)
    assert embedded_images(a) == 2 and "Figure 1." in a and "Table 1." in a
    b = rendered["cue_profiles"]
    assert embedded_images(b) == 4 and "Cue profiles (C0, core)" in b  # heat map, scatter, forest, recovery
    for m in llms:
        assert b.count(m) >= 3
    i = rendered["interventions"]
    assert "Holm" in i and "C4-C3" in i and embedded_images(i) == 1
    assert len(re.findall(r"C2-C0", i)) >= 6  # 3 LLMs x 2 endpoints (All) in the table, plus Core rows
    dq = rendered["data_quality"]
    assert "parse_failure" in dq and embedded_images(dq) == 1
    dg = rendered["diagnostics"]
    assert "NOT CONVERGED" in dg and "max R-hat" in dg


def test_known_weights_beside_recovered(rendered):
    b = rendered["cue_profiles"]
    assert "true logit (simulator)" in b and "inside 94% HDI" in b
    # the table lists each simulator's true source-sensitive history weight (3.00)
    assert "3.00" in b


def test_report_command_says_which_renderer(small_demo, tmp_path, monkeypatch):
    env, d = small_demo
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no quarto
    r = CliRunner().invoke(app, ["report", "--db", env["DISCERN_DB"], "--models", env["DISCERN_MODELS"],
                                 "--resamples", "50", "--out", str(tmp_path / "site"), "--project", str(ROOT)])
    assert r.exit_code == 0, r.output
    assert "renderer: fallback (nbclient + pandoc)" in r.output
    assert (tmp_path / "site" / "index.html").exists()


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

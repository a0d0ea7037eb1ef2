"""The first hour at the command line: every user error is one line on stderr, exit code 2, and
leaves no file behind that the command was not asked to create (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.cli import app
from test_foundation import l2d_frame

runner = CliRunner()


def _one_line_error(r) -> str:
    """The command's error output, checked to be exactly one line starting 'error:'."""
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.output
    return lines[0]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty folder without $DISCERN_DB, as a new user would."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISCERN_DB", raising=False)
    return tmp_path


def test_import_of_a_missing_file_creates_no_database(in_tmp):
    line = _one_line_error(runner.invoke(app, ["import", "items", "my_items.csv"]))
    assert "my_items.csv" in line and "does not exist" in line
    assert list(in_tmp.iterdir()) == []  # no ./trials.db that would take over from the demo's database


@pytest.mark.parametrize("argv", [
    ["import", "sources", "nope.csv"],
    ["import", "trials", "l2d", "nope.csv"],
    ["design", "cue", "--interventions", "C9"],
    ["design", "cue", "--seed", "123456"],
    ["design", "l2d", "--strategies", "zero-shot,Telepathy"],
])
def test_failing_commands_leave_no_new_database(in_tmp, argv):
    _one_line_error(runner.invoke(app, argv))
    assert list(in_tmp.iterdir()) == []


def test_a_failing_command_keeps_an_existing_database(in_tmp):
    runner.invoke(app, ["db", "init"])
    runner.invoke(app, ["import", "trials", "l2d", str(_l2d_csv(in_tmp))])
    before = ds.TrialDB("sqlite:///trials.db").info()["tables"]
    _one_line_error(runner.invoke(app, ["import", "items", "nope.csv"]))
    assert (in_tmp / "trials.db").is_file() and ds.TrialDB("sqlite:///trials.db").info()["tables"] == before


def _l2d_csv(folder: Path) -> Path:
    path = folder / "l2d.csv"
    l2d_frame().to_csv(path, index=False)
    return path


def test_no_data_messages_name_the_database(in_tmp):
    runner.invoke(app, ["db", "init"])
    url = "sqlite:///trials.db"
    for argv in (["metrics", "l2d"], ["fit", "cue"]):
        line = _one_line_error(runner.invoke(app, argv + ["--db", url]))
        assert url in line and "no finished" in line, line


def test_metrics_without_out_prints_a_table(in_tmp):
    url = f"sqlite:///{in_tmp / 'trials.db'}"
    ds.TrialDB(url).import_trials("l2d", l2d_frame())
    r = runner.invoke(app, ["metrics", "l2d", "--resamples", "0", "--db", url])
    assert r.exit_code == 0, r.output
    assert "Design A metrics" in r.stdout and "SD ρ(Δ, R)" in r.stdout and "gpt-ø" in r.stdout
    assert {p.name for p in in_tmp.iterdir()} <= {"trials.db", "trials.db-wal", "trials.db-shm"}  # no output file


def test_metrics_refuses_an_unknown_output_type_before_computing(in_tmp):
    url = f"sqlite:///{in_tmp / 'trials.db'}"
    ds.TrialDB(url).import_trials("l2d", l2d_frame())
    line = _one_line_error(runner.invoke(app, ["metrics", "l2d", "--out", "table.xlsx", "--db", url]))
    assert ".xlsx" in line


@pytest.mark.parametrize("argv", [["fit", "discernment", "--draws", "0"], ["fit", "discernment", "--draws", "-5"],
                                  ["fit", "cue", "--chains", "0"]])
def test_fit_settings_out_of_range_are_refused_without_traceback(in_tmp, argv):
    r = runner.invoke(app, argv)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "Invalid value" in r.stderr and len([ln for ln in r.stderr.splitlines() if "Invalid value" in ln]) == 1


def test_url_without_scheme_suggests_sqlite(in_tmp):
    line = _one_line_error(runner.invoke(app, ["db", "info", "--db", "demo_out/trials.db"]))
    assert "sqlite:///demo_out/trials.db" in line
    assert list(in_tmp.iterdir()) == []


def test_sources_error_lists_the_columns_found(in_tmp):
    (in_tmp / "s.csv").write_text("site,score\nexample.com,0.5\n")
    line = _one_line_error(runner.invoke(app, ["import", "sources", "s.csv"]))
    assert "'site'" in line and "'score'" in line
    assert sorted(p.name for p in in_tmp.iterdir()) == ["s.csv"]


def test_report_outside_the_project_says_where_to_run_it(in_tmp):
    url = f"sqlite:///{in_tmp / 'trials.db'}"
    ds.TrialDB(url).import_trials("l2d", l2d_frame())
    line = _one_line_error(runner.invoke(app, ["report", "--db", url]))
    assert "_quarto.yml" in line and "--project" in line


def test_report_resolves_a_relative_sqlite_url_before_the_pages_run(in_tmp, monkeypatch):
    """`report --db sqlite:///mine.db --project DIR` must read ./mine.db, not create DIR/mine.db."""
    ds.TrialDB("sqlite:///mine.db").import_trials("l2d", l2d_frame())
    project = in_tmp / "project"
    project.mkdir()
    (project / "_quarto.yml").write_text("project:\n  type: website\n")
    seen = {}

    def fake_render(project_dir, *, out_dir=None, env=None, force_fallback=False, progress=None):
        seen["env"] = env
        raise ds.InputError("stop here")
    import importlib
    monkeypatch.setattr(importlib.import_module("discern_stats.report.render"), "render", fake_render)
    _one_line_error(runner.invoke(app, ["report", "--db", "sqlite:///mine.db", "--project", str(project)]))
    assert seen["env"]["DISCERN_DB"] == f"sqlite:///{(in_tmp / 'mine.db').resolve()}"
    assert not (project / "mine.db").exists()


def test_no_command_repeats_the_error_boundary():
    """One boundary (`cli.user_errors`), not a try/except per command."""
    src = (Path(ds.__file__).parent / "cli.py").read_text()
    assert src.count("except DiscernError") == 1


def test_a_bug_in_the_statistics_is_an_error_on_the_page_not_an_empty_table(tmp_path, monkeypatch):
    """The report's context catches only `InputError` (no complete contrast in the data); any other
    failure of a computation reaches the page as an error, never as a table captioned 'no data'."""
    from discern_stats.report.context import context
    from discern_stats.report.tables import contrasts_table
    from test_foundation import cue_frame
    url = f"sqlite:///{tmp_path / 'trials.db'}"
    ds.TrialDB(url).import_trials("cue", cue_frame())

    def broken(*args, **kwargs):
        raise RuntimeError("bootstrap bug")
    monkeypatch.setattr("discern_stats.stats.holm_contrasts", broken)
    with pytest.raises(RuntimeError, match="bootstrap bug"):
        contrasts_table(context(url, tmp_path / "models", 0, cache_dir="off"))
    monkeypatch.undo()
    # the expected case: C0 only, so no contrast has both arms; the table says why
    ctx = context(url, tmp_path / "models", 0, cache_dir="off")
    assert ctx.contrasts().empty and "C0..C4" in ctx.contrasts_note()


@pytest.mark.parametrize("argv, names", [
    (["fit", "discernment", "--draws", "0"], "--draws"),
    (["fit", "cue", "--chains", "x"], "--chains"),
    (["fit", "--bogus"], "--bogus"),
    (["no-such-command"], "no-such-command"),
])
def test_a_usage_error_is_one_line_with_exit_code_2(in_tmp, capsys, argv, names):
    """The installed script (`cli.main`): a bad option value, an unknown option or command is one
    line on stderr naming it (not click's boxed panel), exit code 2, and no file is created."""
    from discern_stats.cli import main
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: discern-stats") and names in err[0], err
    assert "--help" in err[0]
    assert list(in_tmp.iterdir()) == []


def test_the_script_passes_help_and_exit_codes_through(in_tmp, capsys):
    from discern_stats.cli import main
    assert main(["--help"]) == 0 and "Usage" in capsys.readouterr().out
    assert main(["db"]) == 0 and "info" in capsys.readouterr().out  # a bare group: its help
    assert main(["db", "info", "--db", "nosuch://x"]) == 2  # a command's own error code
    assert "nosuch" in capsys.readouterr().err

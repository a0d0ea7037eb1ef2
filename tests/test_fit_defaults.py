"""`discern-stats fit` right after the demo reuses the demo's fits (issue 28, point 2): the
command's sampler defaults are the demo's, model by model."""

from __future__ import annotations

import inspect

import pytest

from discern_stats import cli
from discern_stats.bayes import MODELS


def _defaults(command) -> dict:
    return {name: p.default.default for name, p in inspect.signature(command).parameters.items()
            if hasattr(p.default, "default")}


def _fit_settings(monkeypatch, tmp_path, model: str, argv: list[str]) -> dict:
    """The fit_kwargs `discern-stats fit MODEL ...` hands to fit_or_load (recorded, nothing fitted)."""
    from typer.testing import CliRunner
    seen = {}

    class Recorded(Exception):
        pass

    def record(cls, df, folder, fit_kwargs=None, **config):
        seen.update(fit_kwargs)
        raise Recorded

    monkeypatch.setattr(cli, "_finished_trials", lambda db, design: None)
    monkeypatch.setattr(MODELS[model], "fit_or_load", classmethod(record))
    r = CliRunner().invoke(cli.app, ["fit", model, "--models", str(tmp_path), *argv])
    assert isinstance(r.exception, Recorded), r.output
    return seen


@pytest.mark.parametrize("model", sorted(MODELS))
def test_fit_defaults_are_the_demos(monkeypatch, tmp_path, model):
    demo = _defaults(cli.demo_cmd)
    cls = MODELS[model]
    got = _fit_settings(monkeypatch, tmp_path, model, [])
    # what run_demo passes to fit_or_load for this model (discern_stats/demo.py)
    want = {"draws": demo["draws"] * cls.draws_factor, "chains": demo["chains"], "random_seed": demo["seed"],
            "tune": None if cls.default_sampler == "gibbs" else demo["draws"]}
    assert {k: got[k] for k in want} == want
    assert got["sampler"] in (None, cls.default_sampler)


def test_explicit_settings_are_passed_through(monkeypatch, tmp_path):
    """A negative control: the recorder sees what the command line says."""
    got = _fit_settings(monkeypatch, tmp_path, "cue", ["--draws", "17", "--chains", "3"])
    assert got["draws"] == 17 and got["chains"] == 3


def test_refit_fits_and_saves_through_the_one_fit_function(monkeypatch, tmp_path):
    """`fit --refit` goes through `discern_stats.bayes.fit` (the one refit branch): the model is fitted
    with the command's settings and saved, never loaded."""
    from typer.testing import CliRunner
    seen = {}

    class Stop(Exception):
        pass

    cls = MODELS["cue"]
    monkeypatch.setattr(cli, "_finished_trials", lambda db, design: None)
    monkeypatch.setattr(cls, "__init__", lambda self, df, **config: None)
    monkeypatch.setattr(cls, "fit", lambda self, **kw: seen.update(kw))
    monkeypatch.setattr(cls, "save", lambda self, folder: seen.update(saved=str(folder)) or (_ for _ in ()).throw(Stop()))
    monkeypatch.setattr(cls, "fit_or_load", classmethod(lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded"))))
    r = CliRunner().invoke(cli.app, ["fit", "cue", "--models", str(tmp_path), "--refit", "--draws", "9"])
    assert isinstance(r.exception, Stop), r.output
    assert seen["draws"] == 9 and seen["saved"] == str(tmp_path)


def _fit_config(monkeypatch, tmp_path, model: str, argv: list[str]):
    """The model options `discern-stats fit MODEL ...` hands to fit_or_load, and the CLI result."""
    from typer.testing import CliRunner
    seen = {}

    class Recorded(Exception):
        pass

    def record(cls, df, folder, fit_kwargs=None, **config):
        seen.update(config)
        raise Recorded

    monkeypatch.setattr(cli, "_finished_trials", lambda db, design: None)
    monkeypatch.setattr(MODELS[model], "fit_or_load", classmethod(record))
    r = CliRunner().invoke(cli.app, ["fit", model, "--models", str(tmp_path), *argv])
    return seen, r


def test_config_option_reaches_the_model(monkeypatch, tmp_path):
    """`fit --config JSON` passes the object's keys as model options (nothing else without it)."""
    seen, r = _fit_config(monkeypatch, tmp_path, "discernment",
                          ["--config", '{"strategy_effects": true, "source_effects": true}'])
    assert seen == {"strategy_effects": True, "source_effects": True}, r.output
    seen, r = _fit_config(monkeypatch, tmp_path, "discernment", [])
    assert seen == {}, r.output


@pytest.mark.parametrize("text, why", [("{strategy_effects: true}", "--config: not valid JSON"),
                                       ('["strategy_effects"]', "--config: expected a JSON object"),
                                       ('{"no_such_option": 1}', "unknown option(s) ['no_such_option']")])
def test_bad_config_is_one_line_and_exit_2(monkeypatch, tmp_path, text, why):
    """Bad --config: one line naming the problem, exit 2, no traceback, nothing written."""
    from typer.testing import CliRunner
    monkeypatch.setattr(cli, "_finished_trials", lambda db, design: None)
    r = CliRunner().invoke(cli.app, ["fit", "discernment", "--models", str(tmp_path / "m"), "--config", text])
    assert r.exit_code == 2, r.output
    assert why in r.output and "Traceback" not in r.output
    assert len([ln for ln in r.output.strip().splitlines() if ln.strip()]) == 1, r.output
    assert not (tmp_path / "m").exists()

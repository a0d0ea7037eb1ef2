"""Issue 23.13: the exported stimuli run end to end in inspect_ai (its mockllm model), and the
replies come back with `discern-stats import trials`.

inspect_ai is not a dependency of discern_stats: the test runs docs/inspect_task.py with a Python
that has it, named by $DISCERN_INSPECT_PYTHON (e.g. a venv made with `python3 -m venv
/tmp/inspect-venv && /tmp/inspect-venv/bin/pip install inspect-ai`), or this Python if it imports
inspect_ai; it skips otherwise."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import discern_stats as ds
from discern_stats.cli import app
from discern_stats.collect.harness import replies_to_trials

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _inspect_python() -> str | None:
    exe = os.environ.get("DISCERN_INSPECT_PYTHON")
    if exe:
        return exe
    return sys.executable if importlib.util.find_spec("inspect_ai") else None


@pytest.mark.skipif(_inspect_python() is None, reason="no Python with inspect_ai (set DISCERN_INSPECT_PYTHON)")
def test_inspect_ai_task_end_to_end(sqlite_url, tmp_path):
    exe = _inspect_python()
    assert runner.invoke(app, ["design", "cue", "--worlds", "1", "--db", sqlite_url]).exit_code == 0
    assert runner.invoke(app, ["design", "l2d", "--items", "2", "--strategies", "Reliability,Defense",
                               "--fictional-sources", "--db", sqlite_url]).exit_code == 0
    for design, n_trials in (("cue", 48), ("l2d", 2 * 2 + 2 * 2 * 6 * 5)):  # l2d: priors + posteriors
        stim, replies = tmp_path / f"{design}.jsonl", tmp_path / f"{design}_replies.jsonl"
        assert runner.invoke(app, ["export", "stimuli", design, "--out", str(stim), "--db", sqlite_url]).exit_code == 0
        res = subprocess.run([exe, str(ROOT / "docs" / "inspect_task.py"), design, str(stim), str(replies),
                              "--model", "mockllm/model"], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "INSPECT_LOG_DIR": str(tmp_path / "logs")})
        assert res.returncode == 0, res.stderr[-3000:]
        recs = [json.loads(ln) for ln in replies.read_text().splitlines()]
        assert len(recs) == len(stim.read_text().splitlines())
        trials = replies_to_trials(ds.TrialDB(sqlite_url).engine, design, replies, "mockllm")
        csv = tmp_path / f"{design}_trials.csv"
        trials.to_csv(csv, index=False)
        r = runner.invoke(app, ["import", "trials", design, str(csv), "--db", sqlite_url])
        assert r.exit_code == 0 and f"imported {n_trials} new trial(s)" in r.output, r.output
        back = ds.TrialDB(sqlite_url).trials(design)
        back = back[back.llm == "mockllm"]
        if design == "cue":  # letters are valid for letter probes, counts for count probes
            assert back.valid.all() and set(back.answer) <= {"A", "4"}
        else:  # the prior reply went into the conversation, the posterior parsed with its rating
            assert back.valid.all() and (back.prior == 100).all() and (back.posterior == 120).all()
            rel = back[back.strategy == "Reliability"]
            assert (rel.rated_reliability == 0.5).all()
            post = next(x for x in recs if x["metadata"]["stage"] == "posterior")
            assert post["prior_reply"] == '{"answer": 100}'

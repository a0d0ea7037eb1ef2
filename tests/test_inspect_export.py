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


def test_harness_replies_parse_as_collect_parses_them(sqlite_url, tmp_path):
    """Replies from another harness are parsed by the request's own format (runs without inspect_ai):
    a Defense posterior whose check comes before the JSON on the last line is valid (the prompt asks for
    that shape), a Reliability posterior without its justification is not, and a letter that was not
    among the options shown is invalid. Before, the harness parsed every number reply as bare JSON
    (every Defense posterior invalid) and every letter against A-D."""
    assert runner.invoke(app, ["design", "cue", "--worlds", "1", "--db", sqlite_url]).exit_code == 0
    assert runner.invoke(app, ["design", "l2d", "--items", "1", "--strategies", "Reliability,Defense",
                               "--fictional-sources", "--db", sqlite_url]).exit_code == 0
    for design in ("cue", "l2d"):
        stim = tmp_path / f"{design}.jsonl"
        assert runner.invoke(app, ["export", "stimuli", design, "--out", str(stim), "--db", sqlite_url]).exit_code == 0
    samples = [json.loads(ln) for ln in (tmp_path / "l2d.jsonl").read_text().splitlines()]
    bad_source = next(s["metadata"]["source"] for s in samples
                      if s["metadata"]["stage"] == "posterior" and s["metadata"]["strategy"] == "Reliability")
    out = []
    for s in samples:
        m = s["metadata"]
        if m["stage"] != "posterior":
            continue
        if m["strategy"] == "Defense":
            reply = 'My previous answer of 100 may be too low.\n{"answer": 120}'
        elif m["source"] == bad_source:
            reply = '{"reliability": 0.5, "answer": 120}'  # the justification the prompt asks for is missing
        else:
            reply = '{"reliability": 0.5, "justification": "A mixed record.", "answer": 120}'
        out.append({"id": s["id"], "metadata": m, "reply": reply, "prior_reply": '{"answer": 100}'})
    (tmp_path / "l2d_replies.jsonl").write_text("\n".join(json.dumps(x) for x in out))
    t = replies_to_trials(ds.TrialDB(sqlite_url).engine, "l2d", tmp_path / "l2d_replies.jsonl", "other")
    dfn = t[t.strategy == "Defense"]
    assert len(dfn) == 30 and dfn.valid.all() and (dfn.posterior == 120).all() and (dfn.prior == 100).all()
    rel = t[t.strategy == "Reliability"]
    bad = rel.source == bad_source
    assert bad.any() and not rel[bad].valid.any() and rel[~bad].valid.all()
    assert (rel[~bad].rated_reliability == 0.5).all()

    cue = [json.loads(ln) for ln in (tmp_path / "cue.jsonl").read_text().splitlines()]
    two = [s for s in cue if s["metadata"]["answer_format"] == "letter" and len(s["metadata"].get("options") or {}) == 2]
    assert two
    recs = [{"id": s["id"], "metadata": s["metadata"], "reply": '{"answer": "C"}', "prior_reply": None} for s in two]
    (tmp_path / "cue_replies.jsonl").write_text("\n".join(json.dumps(x) for x in recs))
    t = replies_to_trials(ds.TrialDB(sqlite_url).engine, "cue", tmp_path / "cue_replies.jsonl", "other")
    assert len(t) == len(two) and not t.valid.any() and t.choice.isna().all()

"""Every code block of README.md runs as written (issue 28, point 8), so the README cannot drift.

The blocks run in README order in one fresh folder laid out like the repository root (the
Quarto project and `collection/` copied in), as a new user following the README top to bottom
would: the command-line block builds `./trials.db`, the blocks after it read it. The files the
README asks the user to bring (`my_items.csv`, `tranco_top1m.csv`, `trials_from_elsewhere.csv`)
are made here from the package's own data, in the formats the README names.

Exempt: the set-up block (`./run.sh demo`, `./run.sh test`). `./run.sh` creates `.venv/` and
installs the pinned dependencies (this suite already runs inside that environment), `./run.sh
test` is this suite itself, and `./run.sh demo` is `discern-stats demo` (its code path is
tests/test_reports.py's small demo and the demo's own tests). A block that calls `quarto` runs
where Quarto is on PATH and is skipped, saying so, where it is not (Quarto is not a pip
dependency; its output is never imitated).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
SETUP_COMMANDS = ("./run.sh demo", "./run.sh test")


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """[(language, code)] of every fenced block, in order."""
    return [(m.group(1).lower(), m.group(2)) for m in FENCE.finditer(text)]


def _commands(code: str) -> list[str]:
    return [ln.split("#", 1)[0].strip() for ln in code.splitlines() if ln.split("#", 1)[0].strip()]


def is_setup_block(code: str) -> bool:
    return bool(_commands(code)) and all(c.startswith(SETUP_COMMANDS) for c in _commands(code))


BLOCKS = readme_blocks((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_readme_has_blocks_and_every_one_is_known():
    """A negative control for the extraction: it finds the blocks, each is bash or python, and
    exactly one (the set-up) is exempt."""
    assert len(BLOCKS) >= 4
    assert {lang for lang, _ in BLOCKS} <= {"bash", "python"}, [lang for lang, _ in BLOCKS]
    assert sum(is_setup_block(code) for _, code in BLOCKS) == 1
    assert not is_setup_block("./run.sh demo\ndiscern-stats db info\n")
    # the README table of valid answers is no code block: fences only
    assert readme_blocks("text\n```bash\necho a\n```\nmore\n```python\nx = 1\n```\n") == [
        ("bash", "echo a\n"), ("python", "x = 1\n")]


def _user_files(work: Path) -> None:
    """The inputs the README's commands name, in the formats it describes."""
    data = resources.files("discern_stats.data")
    # items: item_id, question, truth, then tags (topic; era and oecd: two levels each), two per cell
    from discern_stats.designs.item_bank import gapminder_items
    bank = gapminder_items()
    bank.groupby(["era", "oecd", "topic"]).head(2)[["item_id", "question", "truth", "topic", "era", "oecd",
                                                    "sig_figs", "correct_rule"]].to_csv(work / "my_items.csv", index=False)
    # a Tranco list (rank,domain; no header) over shuffled Lin et al. 2023 domains
    lin = pd.read_csv(data.joinpath("lin2023_domain_pc1.csv"))
    domains = lin["domain"].to_numpy()[np.random.default_rng(1).permutation(len(lin))[:900]]
    pd.DataFrame({"rank": np.arange(1, len(domains) + 1), "domain": domains}).to_csv(
        work / "tranco_top1m.csv", header=False, index=False)
    # trials logged by another harness: one more respondent on the same 10 worlds
    import discern_stats as ds
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    from discern_stats.designs import design_cue
    (work / "elsewhere").mkdir()
    other = ds.TrialDB(f"sqlite:///{work / 'elsewhere' / 'trials.db'}")
    design_cue(other.engine, n_worlds=10, interventions=["C0", "C1", "C2", "C3", "C4"])
    collect(other, spec_from_dict({"name": "elsewhere", "design": "cue", "concurrency": 32,
                                   "interventions": ["C0", "C1", "C2", "C3", "C4"],
                                   "llms": [{"name": "elsewhere-llm", "provider": "synthetic:credulous"}]}),
            progress=False)
    other.trials("cue").to_csv(work / "trials_from_elsewhere.csv", index=False)
    other.engine.dispose()
    shutil.rmtree(work / "elsewhere")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder laid out like the repository root, without any database or saved fit."""
    d = tmp_path_factory.mktemp("readme")
    for name in ("_quarto.yml", "index.qmd"):
        shutil.copy(ROOT / name, d / name)
    for name in ("reports", "collection"):
        shutil.copytree(ROOT / name, d / name)
    _user_files(d)
    return d


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISCERN_")}
    # the discern-stats command of the environment running the tests, this checkout first
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "120"
    return env


@pytest.mark.parametrize("index", range(len(BLOCKS)),
                         ids=[f"{i}-{lang}-{(_commands(code) or ['empty'])[0][:40]}" for i, (lang, code) in enumerate(BLOCKS)])
def test_readme_block_runs(work, index):
    lang, code = BLOCKS[index]
    if is_setup_block(code):
        (work / f".block{index}.skipped").touch()
        pytest.skip("set-up commands (./run.sh demo|test): they create .venv and install; exempt (module docstring)")
    if lang == "bash" and any(re.match(r"(\w+=\S+\s+)*quarto\b", c) for c in _commands(code)) \
            and shutil.which("quarto") is None:
        (work / f".block{index}.skipped").touch()
        pytest.skip("calls quarto, which is not on PATH here (not a pip dependency)")
    for earlier in range(index):  # in README order: a block may read what an earlier one wrote
        if not any((work / f".block{earlier}.{state}").exists() for state in ("done", "skipped")):
            pytest.skip(f"README block {earlier} did not run")
    if lang == "bash":
        argv = ["bash", "-euo", "pipefail", "-c", code]
    else:
        argv = [sys.executable, "-c", code]
    r = subprocess.run(argv, cwd=work, env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"README block {index} ({lang}) failed, exit {r.returncode}:\n{code}\n" \
                              f"--- stdout (tail)\n{r.stdout[-3000:]}\n--- stderr (tail)\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    (work / f".block{index}.done").touch()

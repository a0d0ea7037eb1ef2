"""Run exported discern_stats stimuli with inspect_ai and write the raw replies as JSON lines.

Runs in an environment that has inspect_ai (not discern_stats'); see docs/inspect_ai.md:

    python docs/inspect_task.py cue cue_stimuli.jsonl cue_replies.jsonl --model mockllm/model
    python docs/inspect_task.py l2d l2d_stimuli.jsonl l2d_replies.jsonl --model openai/gpt-4o

Each sample is run with inspect's plain ``generate()`` (the options of a letter request are in
its text; ``choices`` is empty on purpose). Design A runs in two passes, as seed 000 does: the
priors first, then every posterior with the ``{prior reply}`` turn replaced by the model's own raw
reply to its prior (``metadata.parent_id``), so one prior serves all of its posteriors. Each output
line: ``{"id", "metadata", "reply", "prior_reply"}``; `discern-stats` turns them into interchange
rows (docs/inspect_ai.md) for ``discern-stats import trials``.

``--model mockllm/model`` answers with fixed, format-correct replies (for tests: a letter, a
count, a number, a rating with its justification).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from inspect_ai import Task, eval
from inspect_ai.dataset import json_dataset
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.solver import generate

PRIOR_REPLY = "{prior reply}"


def mock_reply(messages, tools, tool_choice, config) -> ModelOutput:  # noqa: ANN001 - inspect's signature
    """A fixed, valid reply for every kind of request (the mockllm model of the tests)."""
    system = next((m.text for m in messages if m.role == "system"), "")
    last = messages[-1].text
    if "exactly one integer" in system:
        text = "4"
    elif "says the answer is" in last:
        ans = {"answer": 120}
        if "rate how reliable" in last:
            ans = {"reliability": 0.5, "justification": "A national outlet with a mixed record.", "answer": 120}
        text = json.dumps(ans)
        if "check explicitly" in last:
            text = "Check: my previous answer may be wrong.\n" + text
    elif last.startswith("Question:"):
        text = json.dumps({"answer": 100})
    else:
        text = json.dumps({"answer": "A"})
    out = ModelOutput.from_content(model="mockllm/model", content=text)
    # usage given, so mockllm does not count tokens with tiktoken (which downloads its vocabulary)
    out.usage = ModelUsage(input_tokens=0, output_tokens=0, total_tokens=0)
    return out


def run(samples_file: Path, model_name: str, log_dir: str) -> dict[str, str]:
    """id -> the model's raw reply, for every sample of ``samples_file``."""
    model = get_model(model_name, custom_outputs=mock_reply) if model_name == "mockllm/model" else get_model(model_name)
    task = Task(dataset=json_dataset(str(samples_file)), solver=[generate()])
    log = eval(task, model=model, log_dir=log_dir, display="none")[0]
    if log.status != "success":
        raise SystemExit(f"inspect eval failed: {log.error}")
    return {str(s.id): s.output.completion for s in log.samples}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("design", choices=["cue", "l2d"])
    ap.add_argument("stimuli", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="mockllm/model")
    a = ap.parse_args()
    recs = [json.loads(ln) for ln in a.stimuli.read_text().splitlines() if ln.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        if a.design == "cue":
            replies = run(a.stimuli, a.model, tmp)
            prior_replies: dict[str, str] = {}
        else:  # pass 1: priors; pass 2: posteriors with the model's own prior reply in place
            priors = [r for r in recs if r["metadata"]["stage"] == "prior"]
            p1 = Path(tmp) / "priors.jsonl"
            p1.write_text("".join(json.dumps(r) + "\n" for r in priors))
            prior_replies = run(p1, a.model, tmp)
            posts = []
            for r in recs:
                if r["metadata"]["stage"] != "posterior":
                    continue
                reply = prior_replies[r["metadata"]["parent_id"]]
                r = dict(r, input=[dict(m, content=reply) if m["role"] == "assistant" and m["content"] == PRIOR_REPLY
                                   else m for m in r["input"]])
                posts.append(r)
            p2 = Path(tmp) / "posteriors.jsonl"
            p2.write_text("".join(json.dumps(r) + "\n" for r in posts))
            replies = {**prior_replies, **run(p2, a.model, tmp)}
    with open(a.out, "w", encoding="utf-8") as f:
        for r in recs:
            parent = r["metadata"].get("parent_id")
            f.write(json.dumps({"id": r["id"], "metadata": r["metadata"], "reply": replies[r["id"]],
                                "prior_reply": prior_replies.get(parent) if parent else None}) + "\n")


if __name__ == "__main__":
    main()

"""Collection: real client path with faults, resume after SIGKILL, two PostgreSQL collectors,
invalid outputs kept, spec validation, API keys never stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
import sqlalchemy as sa

import discern_stats as ds
from discern_stats.collect.parsing import parse
from discern_stats.collect.runner import collect
from discern_stats.collect.spec import load_spec, spec_from_dict
from discern_stats.store.db import Attempt, Trial
from discern_stats.designs import design_cue, design_l2d
from discern_stats.core.errors import SpecError
from discern_stats.simulate.server import FakeOpenAIServer


def _spec(**kw):
    base = {"name": "t", "design": "cue", "llms": [{"name": "sim", "provider": "synthetic:source-sensitive"}],
            "concurrency": 8, "retry": {"max_attempts": 8, "initial_wait_s": 0.01, "max_wait_s": 0.05, "jitter_s": 0.01}}
    base.update(kw)
    return spec_from_dict(base)


def parse_letter(t):
    return parse("letter", t)


def parse_integer(t):
    return parse("integer", t)


def parse_number(t, want_reliability=False):
    return parse("number", t, want_reliability=want_reliability)


def test_parsers():
    """The headline (strict) parse; both parses and real-model shapes: tests/test_parsing.py."""
    assert parse_letter('{"answer": "B"}').answer == "B"
    assert not parse_letter('```json\n{"answer": "c"}\n```').valid  # strict: the format exactly (lenient reads it)
    assert not parse_letter("B").valid and not parse_letter('{"answer": "E"}').valid
    assert not parse_letter('{"answer": "A", "why": "x"}').valid
    assert parse_integer("7").value == 7 and not parse_integer("9").valid and not parse_integer("seven").valid
    assert parse_number('{"answer": 1.5e3}').value == 1500
    assert not parse_number('Step 1...\n{"answer": "42"}').valid  # prose and a string: lenient only
    p = parse_number('{"reliability": 0.7, "justification": "a wire service", "answer": 3}', want_reliability=True)
    assert p.valid and p.rated_reliability == 0.7
    assert not parse_number('{"answer": 3}', want_reliability=True).valid


def test_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="unknown key 'concurency'"):
        spec_from_dict({"name": "x", "design": "cue", "llms": [{"name": "a", "provider": "synthetic:credulous"}],
                        "concurency": 3})
    with pytest.raises(SpecError, match="unknown provider 'foo:bar'"):
        spec_from_dict({"name": "x", "design": "cue", "llms": [{"name": "a", "provider": "foo:bar"}]})
    with pytest.raises(SpecError, match="design"):
        spec_from_dict({"name": "x", "design": "abc", "llms": [{"name": "a", "provider": "synthetic:credulous"}]})
    f = tmp_path / "s.yaml"
    f.write_text("name: x\ndesign: cue\nllms: [{name: a, provider: 'synthetic:credulous'}]\ninterventions: [C7]\n")
    with pytest.raises(SpecError, match="unknown intervention 'C7'"):
        load_spec(f)
    for p in ("collection/demo_cue.yaml", "collection/demo_l2d.yaml", "collection/example_real_llms.yaml"):
        load_spec(os.path.join(os.path.dirname(__file__), "..", p))



def test_example_specs_equal_the_demo_specs_the_package_runs():
    """collection/demo_*.yaml are copies for users of the specs the demo reads from the package."""
    from importlib import resources
    for name in ("demo_cue.yaml", "demo_l2d.yaml"):
        example = open(os.path.join(os.path.dirname(__file__), "..", "collection", name), encoding="utf-8").read()
        assert example == resources.files("discern_stats.data").joinpath(name).read_text(encoding="utf-8"), name


@pytest.mark.parametrize("http_client", ["aiohttp", "direct"])
def test_fault_injecting_server_every_attempt_recorded(sqlite_url, monkeypatch, http_client):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=4)
    monkeypatch.setenv("FAKE_KEY", "sk-secret-value-123")
    with FakeOpenAIServer("credulous", fault_rate=0.2, delay_s=0.05, seed=1) as srv:
        spec = _spec(llms=[{"name": "fake-openai", "provider": "openai:synthetic", "base_url": srv.base_url,
                            "api_key_env": "FAKE_KEY", "http_client": http_client}], timeout_s=5)
        res = collect(db, spec, progress=False)
        counts = dict(srv.counts)
    assert res.planned == 4 * 48 and res.done == 4 * 48 and res.failed == 0
    att = db.attempts()
    assert len(att) == counts["requests"] == res.attempts
    failed_attempts = att[~att.ok]
    assert len(failed_attempts) == counts["429"] + counts["500"] + counts["malformed"]
    assert counts["429"] > 0 and counts["500"] > 0 and counts["malformed"] > 0 and counts["delay"] > 0
    assert set(failed_attempts.error_type) == {"rate_limit", "server_error", "malformed_response"}
    assert (failed_attempts[failed_attempts.http_status == 429].error_type == "rate_limit").all()
    # the errors come from the HTTP layer the spec chose (the openai SDK's, or the direct client's)
    direct = failed_attempts.error.str.startswith(("DirectHTTPError", "MalformedResponseError"))
    assert direct.all() if http_client == "direct" else not direct.any()
    log = db.trial_log("cue")
    assert log.raw_response.notna().all() and (log.tokens_in > 0).all() and log.latency_ms.notna().all()
    assert (log.n_attempts >= 1).all() and log.n_attempts.sum() == len(att)
    # API keys never written
    with db.engine.connect() as c:
        for t in sa.inspect(db.engine).get_table_names():
            for row in c.execute(sa.text(f'SELECT * FROM "{t}"')):  # table names from the inspector, not user input
                assert "sk-secret-value-123" not in str(row)


def test_direct_client_errors_are_classified():
    """http_client 'direct': a refused connection is a retryable connection error; a 2xx body
    without 'choices' is a malformed response (retried); a 4xx is a client error (not retried);
    the API key appears in no error message."""
    import asyncio
    import json

    from aiohttp import web

    from discern_stats.collect.direct_client import DirectChatCompletions
    from discern_stats.collect.providers import error_type, http_status, is_retryable

    async def scenario() -> list[BaseException]:
        async def handler(request: web.Request) -> web.Response:
            body = await request.json()
            if body["model"] == "no-choices":
                return web.json_response({"id": "x"})
            if body["model"] == "echo":  # extra_body keys are merged into the body, extra_headers sent
                seen = {"top_k": body.get("top_k"), "extra_body": "extra_body" in body,
                        "header": request.headers.get("X-Test")}
                return web.json_response({"id": "e", "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": json.dumps(seen)}}]})
            return web.json_response({"error": {"message": "bad model"}}, status=404)

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        echo = DirectChatCompletions(f"http://127.0.0.1:{port}/v1", None, timeout_s=5)
        raw = await echo.with_raw_response.create(model="echo", messages=[], extra_body={"top_k": 5},
                                                  extra_headers={"X-Test": "1"}, stream=False)
        await echo.aclose()
        errors = [json.loads(raw.parse()["choices"][0]["message"]["content"])]
        for url, model in ((f"http://127.0.0.1:{port}/v1", "no-choices"), (f"http://127.0.0.1:{port}/v1", "other"),
                           ("http://127.0.0.1:1/v1", "any")):
            client = DirectChatCompletions(url, "sk-secret-value-123", timeout_s=5)
            try:
                await client.with_raw_response.create(model=model, messages=[{"role": "user", "content": "hi"}])
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
            finally:
                await client.aclose()
        await runner.cleanup()
        return errors

    echo, malformed, not_found, refused = asyncio.run(scenario())
    assert echo == {"top_k": 5, "extra_body": False, "header": "1"}
    assert error_type(malformed) == "malformed_response" and is_retryable(malformed)
    assert http_status(not_found) == 404 and error_type(not_found) == "client_error" and not is_retryable(not_found)
    assert error_type(refused) == "connection" and is_retryable(refused)
    assert all("sk-secret" not in str(e) for e in (malformed, not_found, refused))


def test_retries_first_attempt_outside_tenacity():
    """`_with_retries`: a request that fails k times with retryable errors is tried k + 1 times;
    one that always fails is tried exactly max_attempts times; a client error is tried once."""
    import asyncio

    from discern_stats.collect.direct_client import DirectHTTPError
    from discern_stats.collect.collector import _with_retries
    from discern_stats.collect.spec import RetryPolicy

    policy = RetryPolicy(max_attempts=4, initial_wait_s=0.001, max_wait_s=0.002, jitter_s=0.0)

    def flaky(fail: int, status: int = 429):
        calls = []

        async def once():
            calls.append(1)
            if len(calls) <= fail:
                raise DirectHTTPError(status, "injected")
            return "ok"
        return once, calls

    for fail in (0, 1, 3):
        once, calls = flaky(fail)
        assert asyncio.run(_with_retries(once, policy)) == "ok" and len(calls) == fail + 1
    once, calls = flaky(10)
    with pytest.raises(DirectHTTPError):
        asyncio.run(_with_retries(once, policy))
    assert len(calls) == 4
    once, calls = flaky(10, status=400)
    with pytest.raises(DirectHTTPError):
        asyncio.run(_with_retries(once, policy))
    assert len(calls) == 1


def test_invalid_outputs_kept_and_counted(sqlite_url):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=5)
    spec = _spec(llms=[{"name": "sim", "provider": "synthetic:credulous", "extra": {"invalid_rate": 0.25}}])
    res = collect(db, spec, progress=False)
    df = db.trials("cue")
    assert len(df) == 240 and res.done == 240
    n_invalid = (~df.valid).sum()
    assert 30 < n_invalid < 90 and res.done - res.valid == n_invalid
    log = db.trial_log("cue")
    bad = log[log.valid == False]  # noqa: E712
    assert bad.raw_response.notna().all() and bad.parse_error.notna().all()
    assert set(bad.status) <= {"parse_failure", "refusal"}
    assert (bad.n_attempts == 1).all()  # never silently retried into validity


def test_design_a_conversation_and_resume(sqlite_url):
    db = ds.TrialDB(sqlite_url)
    design_l2d(db.engine, strategies=("zero-shot", "Reliability"), items=["demo-01", "demo-02"], bank="demo", fictional_sources=True)
    spec = spec_from_dict({"name": "a", "design": "l2d", "llms": [{"name": "sim", "provider": "synthetic:source-sensitive"}]})
    r1 = collect(db, spec, progress=False, max_requests=10)
    assert r1.sent == 10
    r2 = collect(db, spec, progress=False)
    df = db.trials("l2d")
    assert len(df) == 2 * 2 * 30 and r1.done + r2.done == 4 + 120
    log = db.trial_log("l2d")
    post = log[log.stage == "posterior"]
    assert len(post) == 120
    with db.engine.connect() as c:
        msgs = [m for (m,) in c.execute(sa.select(Trial.messages_json).where(Trial.messages_json.is_not(None)))]
    import json
    m = json.loads(msgs[0])
    assert [x["role"] for x in m] == ["system", "human", "ai", "human"] and "says the answer is" in m[-1]["content"]
    rel = df[df.strategy == "Reliability"]
    assert rel.rated_reliability.notna().mean() > 0.9
    assert collect(db, spec, progress=False).sent == 0


WORKER = textwrap.dedent('''
    import sys
    from discern_stats.collect.runner import collect
    from discern_stats.collect.spec import spec_from_dict
    import discern_stats as ds
    url, latency = sys.argv[1], float(sys.argv[2])
    spec = spec_from_dict({"name": "w", "design": "cue", "concurrency": 4, "lease_s": 600,
                           "llms": [{"name": "sim", "provider": "synthetic:credulous", "extra": {"latency_ms": latency}}]})
    r = collect(ds.TrialDB(url), spec, progress=False)
    print("DONE", r.done, flush=True)
''')


def _run_worker(url, latency, tmp_path):
    f = tmp_path / "worker.py"
    f.write_text(WORKER)
    return subprocess.Popen([sys.executable, str(f), url, str(latency)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _no_duplicates(db, n_expected):
    df = db.table(Trial)
    assert len(df) == n_expected and df.key.is_unique
    assert (df.state == "done").all()
    att = db.attempts()
    ok = att[att.ok].groupby("trial_id").size()
    assert ok.max() == 1 and len(ok) == n_expected  # each request answered exactly once


def test_sigkill_then_resume(sqlite_url, tmp_path):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=3)
    p = _run_worker(sqlite_url, 40, tmp_path)
    deadline = time.time() + 60
    while time.time() < deadline:
        done = (db.table(Trial).state == "done").sum() if len(db.table(Trial)) else 0
        if done >= 20:
            break
        time.sleep(0.1)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    t = db.table(Trial)
    assert 20 <= (t.state == "done").sum() < 144
    q = _run_worker(sqlite_url, 40, tmp_path)
    out, err = q.communicate(timeout=120)
    assert q.returncode == 0, err
    _no_duplicates(db, 144)


@pytest.mark.postgres
def test_two_collectors_share_one_postgres_plan(pg_url, tmp_path):
    db = ds.TrialDB(pg_url)
    design_cue(db.engine, n_worlds=4)
    ps = [_run_worker(pg_url, 5, tmp_path) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in ps]
    assert all(p.returncode == 0 for p in ps), [o[1][-2000:] for o in outs]
    dones = [int(o[0].split("DONE")[1]) for o in outs]
    assert sum(dones) == 192 and min(dones) > 0  # both did work, none twice
    _no_duplicates(db, 192)
    owners = db.attempts().groupby("collector").size()
    assert len(owners) == 2


def test_worker_processes_share_one_plan(sqlite_url):
    """workers=2: two collector processes on one SQLite file; Design A posteriors whose prior the
    other process wrote are still collected, every trial answered once, by both processes."""
    db = ds.TrialDB(sqlite_url)
    design_l2d(db.engine, strategies=("zero-shot", "Reliability"), items=["demo-01", "demo-02"], bank="demo", fictional_sources=True)
    spec = spec_from_dict({"name": "a", "design": "l2d", "concurrency": 4, "workers": 2,
                           "llms": [{"name": "sim", "provider": "synthetic:source-sensitive",
                                     "extra": {"latency_ms": 300}}]})  # outlasts the worker start-up
    r = collect(db, spec, progress=False)
    assert r.planned == 124 and r.done == 124 and r.sent == 124
    _no_duplicates(db, 124)
    assert db.attempts().collector.str.split(":").str[1].nunique() == 2  # two processes answered
    assert collect(db, spec, progress=False).sent == 0


def test_worker_processes_share_the_budget(sqlite_url):
    db = ds.TrialDB(sqlite_url)
    design_cue(db.engine, n_worlds=2)
    r = collect(db, _spec(workers=2, concurrency=4), progress=False, max_requests=30)
    assert r.sent == 30 and r.done == 30
    assert (db.table(Trial).state == "done").sum() == 30


def test_workers_refuse_an_in_memory_database():
    db = ds.TrialDB("sqlite://")
    design_cue(db.engine, n_worlds=1)
    with pytest.raises(SpecError, match="in-memory"):
        collect(db, _spec(workers=2), progress=False)


def test_collector_gc_tuning_is_restored_and_direct_params_match_chatopenai():
    """The collector's GC settings apply only during a run; DirectChatOpenAI reports the same
    invocation parameters to LangChain's callbacks as ChatOpenAI, from a cache that callers
    cannot alter."""
    import gc

    from langchain_openai import ChatOpenAI

    from discern_stats.collect.direct_client import DirectChatOpenAI
    from discern_stats.collect.runner import _collector_gc

    before = gc.get_threshold()
    with _collector_gc(young_threshold=123_456):
        assert gc.get_threshold()[0] == max(before[0], 123_456)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    kw = dict(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", temperature=0.2, max_tokens=7)
    direct, plain = DirectChatOpenAI(**kw), ChatOpenAI(**kw)
    assert direct._get_invocation_params(stop=["x"]) == plain._get_invocation_params(stop=["x"])
    direct._dict_for_compat()["temperature"] = 9.0  # a caller's change does not reach the cache
    assert direct._get_invocation_params()["temperature"] == 0.2
    assert "_params_cache" not in direct.model_dump()


def test_http_client_auto_is_direct_for_a_base_url_only(monkeypatch):
    """'auto' (the default) takes the lean client for an OpenAI-compatible server (base_url) and the
    openai SDK for OpenAI itself; an explicit choice wins."""
    from langchain_openai import ChatOpenAI

    from discern_stats.collect.direct_client import DirectChatOpenAI
    from discern_stats.collect.providers import build_chat_model

    monkeypatch.setenv("FAKE_KEY", "sk-test")

    def model(**llm):
        run = spec_from_dict({"name": "t", "design": "cue", "llms": [{"name": "x", "provider": "openai:m", **llm}]})
        return build_chat_model(run.llms[0], run)

    local = model(base_url="http://127.0.0.1:9/v1")
    assert _http_layer_of(local) == "direct"
    assert _http_layer_of(model(api_key_env="FAKE_KEY")) == "sdk"
    assert _http_layer_of(model(base_url="http://127.0.0.1:9/v1", http_client="aiohttp")) == "sdk"
    assert isinstance(local, DirectChatOpenAI) and isinstance(local, ChatOpenAI)


def _http_layer_of(model):
    from discern_stats.collect.direct_client import DirectChatCompletions
    return "direct" if isinstance(model.async_client, DirectChatCompletions) else "sdk"

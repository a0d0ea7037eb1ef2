"""The collection spec the collection tests point at a loopback server (shared by
tests/test_collection_safety.py and tests/test_collection_hostile.py)."""

from __future__ import annotations

from discern_stats.simulate.server import FakeOpenAIServer


def server_spec(srv: FakeOpenAIServer, **kw) -> dict:
    """One OpenAI-format LLM at ``srv``, short retries; ``kw`` overrides any top-level key."""
    spec = {"name": "t", "design": "cue", "concurrency": 8, "timeout_s": 10,
            "retry": {"max_attempts": 3, "initial_wait_s": 0.05, "max_wait_s": 0.1, "jitter_s": 0.0},
            "llms": [{"name": "fake", "provider": "openai:synthetic", "base_url": srv.base_url}]}
    spec.update(kw)
    return spec

"""LangChain chat models by provider string, and the retryable-error classifier."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel

from ..core.errors import SpecError
from .spec import LLMSpec, RunSpec

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}


def api_key(spec: LLMSpec) -> str | None:
    if spec.api_key_env:
        key = os.environ.get(spec.api_key_env)
        if not key:
            raise SpecError(f"LLM {spec.name!r}: environment variable {spec.api_key_env} is not set")
        return key
    return None


def build_chat_model(spec: LLMSpec, run: RunSpec, *, simulator_knowledge: dict[str, Any] | None = None) -> BaseChatModel:
    """The LangChain chat model of one LLM subject. Retries are ours (tenacity), so the
    provider clients get ``max_retries=0``; the optional rate limiter is LangChain's.
    ``simulator_knowledge`` (synthetic respondents only): the plan's item truths, source table
    and Design B facts (`SyntheticChatModel` fields ``knowledge``, ``source_knowledge``, ``cue_facts``)."""
    limiter = None
    if run.requests_per_second:
        from langchain_core.rate_limiters import InMemoryRateLimiter
        limiter = InMemoryRateLimiter(requests_per_second=run.requests_per_second, check_every_n_seconds=0.05,
                                      max_bucket_size=max(1, int(run.requests_per_second)))
    common: dict[str, Any] = {}
    if limiter is not None:
        common["rate_limiter"] = limiter
    if spec.kind == "synthetic":
        from ..simulate.respondent import SyntheticChatModel, get_profile
        kw: dict[str, Any] = {"profile_name": spec.model, "respondent_profile": get_profile(spec.model, spec.profile_file),
                              "seed": spec.seed or 0}
        kw.update({k: v for k, v in (simulator_knowledge or {}).items() if v})
        kw.update(spec.extra)
        return SyntheticChatModel(**kw, **common)
    sampling = {k: v for k, v in {"temperature": spec.temperature, "top_p": spec.top_p}.items() if v is not None}
    if spec.kind == "openai":
        from langchain_openai import ChatOpenAI
        key = api_key(spec) or ("not-needed" if spec.base_url else None)
        if key is None:
            raise SpecError(f"LLM {spec.name!r}: set api_key_env (e.g. OPENAI_API_KEY) or a base_url")
        kw = dict(model=spec.model, base_url=spec.base_url, api_key=key, max_retries=0, timeout=run.timeout_s,
                  max_tokens=spec.max_tokens, **sampling)
        if spec.seed is not None:
            kw["seed"] = spec.seed
        if spec.http_layer == "aiohttp":
            # aiohttp transport: about a quarter less client CPU per request than the default httpx
            # transport (BENCHMARKS.md); owned by the collector, which closes it
            import openai
            kw["http_async_client"] = openai.DefaultAioHttpClient(timeout=run.timeout_s)
        if spec.http_layer != "direct":
            return ChatOpenAI(**kw, **spec.extra, **common)
        # LangChain builds the payload and reads the response; the HTTP call is a plain aiohttp
        # POST, without the openai SDK's request layers (collect/direct_client.py)
        from .direct_client import DirectChatCompletions, DirectChatOpenAI
        model = DirectChatOpenAI(**kw, **spec.extra, **common)
        model.async_client = DirectChatCompletions(spec.base_url or "https://api.openai.com/v1", key, run.timeout_s)
        return model
    if spec.kind == "anthropic":
        ChatAnthropic = _messages_api_chat_model()
        key = api_key(spec)
        if key is None:
            raise SpecError(f"LLM {spec.name!r}: set api_key_env (e.g. ANTHROPIC_API_KEY)")
        kw = dict(model=spec.model, api_key=key, max_retries=0, timeout=run.timeout_s,
                  max_tokens=spec.max_tokens or 1024, **sampling)
        if spec.base_url:
            kw["base_url"] = spec.base_url
        return ChatAnthropic(**kw, **spec.extra, **common)
    if spec.kind == "ollama":
        from langchain_ollama import ChatOllama
        kw = dict(model=spec.model, num_predict=spec.max_tokens, **sampling)
        if spec.base_url:
            kw["base_url"] = spec.base_url
        if spec.seed is not None:
            kw["seed"] = spec.seed
        return ChatOllama(**kw, **spec.extra, **common)
    raise SpecError(f"unknown provider {spec.provider!r}")  # pragma: no cover - validated in spec


ANTHROPIC_VERSION = "2023-06-01"  # the Messages API version (https://docs.anthropic.com/en/api/versioning)


def _messages_api_chat_model() -> type:
    """LangChain's ChatAnthropic, sending what the Anthropic Messages API contract asks for: the key in
    ``x-api-key`` and ``anthropic-version: 2023-06-01``. The pinned SDK (anthropic 2.16) sends the key
    as ``Authorization: Bearer`` with a newer version header, which a Messages-API server (the
    Anthropic API's documented contract, and third-party servers that implement it) rejects with 401;
    the SDK's own ``Authorization`` header is omitted (``anthropic.omit``)."""
    from functools import cached_property

    import anthropic
    from langchain_anthropic import ChatAnthropic

    class MessagesAPIChatAnthropic(ChatAnthropic):
        @cached_property
        def _client_params(self) -> dict[str, Any]:
            params = dict(ChatAnthropic._client_params.func(self))  # type: ignore[attr-defined]
            params["default_headers"] = {**params.get("default_headers", {}), "x-api-key": params["api_key"],
                                         "anthropic-version": ANTHROPIC_VERSION, "Authorization": anthropic.omit}
            return params

    return MessagesAPIChatAnthropic


def endpoint(spec: LLMSpec) -> str:
    """host:port the LLM's requests go to (for error messages; never a key)."""
    from urllib.parse import urlsplit
    if spec.kind == "synthetic":
        return "in-process simulator"
    default = {"openai": "https://api.openai.com", "anthropic": "https://api.anthropic.com",
               "ollama": "http://127.0.0.1:11434"}[spec.kind]
    u = urlsplit(spec.base_url or default)
    port = u.port or (443 if u.scheme == "https" else 80)
    return f"{u.hostname}:{port}"


def validate_llms(run: RunSpec) -> None:
    """Everything about the spec's LLMs that can be checked without sending a request: provider
    settings, API-key variables, synthetic profiles and base URLs. Raises `SpecError` before any
    database write, so a refused run leaves the database as it was."""
    from urllib.parse import urlsplit
    for m in run.llms:
        if m.base_url is not None:
            u = urlsplit(m.base_url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise SpecError(f"LLM {m.name!r}: base_url {m.base_url!r} is not an http(s) URL with a host")
            try:
                u.port
            except ValueError:
                raise SpecError(f"LLM {m.name!r}: base_url {m.base_url!r} has an invalid port") from None
        if m.profile_file is not None and not Path(m.profile_file).is_file():
            raise SpecError(f"LLM {m.name!r}: profile_file {m.profile_file} does not exist (relative paths start "
                            f"at {Path.cwd()})")
        try:
            model = build_chat_model(m, run)
        except SpecError:
            raise
        except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            first = " ".join(str(exc).split())[:300]
            raise SpecError(f"LLM {m.name!r}: its settings are refused by the chat model ({type(exc).__name__}: "
                            f"{first}); check 'extra' and the sampling settings") from None
        try:
            asyncio.run(close_chat_model(model))
        except RuntimeError:  # pragma: no cover - called inside a running loop: nothing was opened there
            pass


async def close_chat_model(model: Any) -> None:
    """Close an HTTP client the collector created for a chat model (no-op otherwise)."""
    for attr in ("http_async_client", "async_client"):
        client = getattr(model, attr, None)
        if client is not None and hasattr(client, "aclose"):
            try:
                await client.aclose()
            except Exception:  # pragma: no cover - closing is best effort
                pass


def http_status(exc: BaseException) -> int | None:
    for attr in ("status_code", "status", "http_status"):
        v = getattr(exc, attr, None)
        if isinstance(v, int):
            return v
    resp = getattr(exc, "response", None)
    v = getattr(resp, "status_code", None)
    return v if isinstance(v, int) else None


def is_retryable(exc: BaseException) -> bool:
    """429, 5xx, timeouts and connection errors are retried; 4xx client errors are not."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)) or _malformed(exc):
        return True
    status = http_status(exc)
    if status is not None:
        return status in RETRYABLE_STATUS or status >= 500
    name = type(exc).__name__
    return any(s in name for s in ("Timeout", "Connection", "RateLimit", "ServiceUnavailable", "InternalServer",
                                   "RemoteProtocol", "ReadError", "Overloaded"))


def _malformed(exc: BaseException) -> bool:
    """A 2xx response whose body cannot be decoded: a transient server fault, retried."""
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    return any(n in names for n in ("JSONDecodeError", "APIResponseValidationError", "DecodingError",
                                   "MalformedResponseError"))


def error_type(exc: BaseException) -> str:
    if _malformed(exc):
        return "malformed_response"
    status = http_status(exc)
    if status == 429 or "RateLimit" in type(exc).__name__:
        return "rate_limit"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "Timeout" in type(exc).__name__:
        return "timeout"
    if status is not None and status >= 500:
        return "server_error"
    if "Connection" in type(exc).__name__ or isinstance(exc, ConnectionError):
        return "connection"
    if status is not None:
        return "client_error"
    return "other"


def request_kwargs(spec: LLMSpec, model: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Per-request keyword arguments of ``model.ainvoke`` for the LLM's ``response_format``: JSON mode or
    the answer's JSON schema (`parsing.response_schema`) on requests whose prompt asks for only a JSON
    object; nothing on the others (exact counts, CoT), nor for a simulator. OpenAI-compatible servers get
    ``response_format`` in the request body (through ``extra_body``, so every http_client sends it);
    Ollama gets ``format``. Anthropic has no JSON mode (refused by the spec)."""
    if spec.response_format == "none" or spec.kind not in ("openai", "ollama"):
        return {}
    from .parsing import answer_spec, response_schema
    schema = response_schema(answer_spec(job["answer_format"], options_json=job.get("options_json"),
                                         messages_json=job.get("messages_json"), strategy=job.get("strategy"),
                                         stage=job.get("stage")))
    if schema is None:
        return {}
    if spec.kind == "ollama":
        return {"format": "json" if spec.response_format == "json_object" else schema}
    rf = ({"type": "json_object"} if spec.response_format == "json_object"
          else {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": schema}})
    return {"extra_body": {**(getattr(model, "extra_body", None) or {}), "response_format": rf}}

"""A lean chat-completions client for OpenAI-compatible servers, plugged under LangChain's ChatOpenAI.

``http_client: direct`` in a run spec. LangChain still builds the request payload from the
messages and turns the response into an ``AIMessage`` (with token usage); only the HTTP call
is ours: the JSON payload is POSTed with aiohttp to ``{base_url}/chat/completions`` and the JSON
body is handed back as a dict, which ChatOpenAI accepts as a response. This skips the openai
SDK's request layers (its typed-dict transform of every payload and the httpx request model
built before the aiohttp transport), which took about 45 % of the collector's CPU per request
in a py-spy profile (BENCHMARKS.md). Errors carry their HTTP status, so the collector's retry
classifier treats them as it treats the SDK's: 429 and 5xx are retried, other 4xx are not; a
2xx body that is not a chat completion is a malformed response (retried); timeouts and
connection failures are retried.

`DirectChatOpenAI` is the ChatOpenAI that uses it: for a plain chat completion it turns the
response into the ``ChatResult`` in the event loop, where ChatOpenAI hands that step to a thread
pool (a thread hop per response), and its ``_agenerate`` carries a precomputed signature, which
LangChain inspects on every call. Structured-output and Responses-API calls take ChatOpenAI's own
path unchanged.

The API key goes into the Authorization header only; no error message contains it.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import aiohttp
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr


class DirectHTTPError(Exception):
    """A non-2xx answer; ``status_code`` is what the retry classifier reads."""

    def __init__(self, status_code: int, body: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status_code}: {body[:500]}")
        self.status_code = status_code
        self.headers = headers or {}  # Retry-After of a 429


class MalformedResponseError(ValueError):
    """A 2xx answer whose body is not a chat completion (not JSON, or no ``choices``)."""


class DirectConnectionError(ConnectionError):
    """The server could not be reached or dropped the connection."""


class _RawResponse:
    """What ChatOpenAI expects from ``with_raw_response.create``: ``parse()`` and ``headers``."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        self._body = body
        self.headers = headers

    def parse(self) -> dict[str, Any]:
        return self._body


class DirectChatCompletions:
    """Stands in for ``AsyncOpenAI().chat.completions`` in a ChatOpenAI model (``model.async_client``)."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    @property
    def with_raw_response(self) -> "DirectChatCompletions":
        return self

    async def create(self, **payload: Any) -> _RawResponse:
        if payload.get("stream"):
            raise ValueError("http_client 'direct' does not stream; leave streaming off for collection")
        payload.pop("stream", None)
        # the openai SDK's request options, which it does not send as body keys
        if payload.pop("extra_query", None):
            raise ValueError("http_client 'direct' does not send extra_query; use http_client 'aiohttp'")
        payload.pop("timeout", None)  # the client's own timeout applies
        headers = {**self._headers, **(payload.pop("extra_headers", None) or {})}
        payload.update(payload.pop("extra_body", None) or {})
        if self._session is None or self._session.closed:  # created inside the running event loop
            # no connection cap of aiohttp's own (100 by default): the collector's slots bound the connections
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=aiohttp.TCPConnector(limit=0))
        data = json.dumps(payload).encode()
        try:
            async with self._session.post(self.url, data=data, headers=headers) as resp:
                text = await resp.text()
                status, resp_headers = resp.status, dict(resp.headers)
        except aiohttp.ClientConnectionError as exc:  # refused, reset, server disconnected
            raise DirectConnectionError(f"{type(exc).__name__}: {exc}") from exc
        if not 200 <= status < 300:
            raise DirectHTTPError(status, text, resp_headers)
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedResponseError(f"response body is not JSON: {exc}; body starts {text[:200]!r}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
            raise MalformedResponseError(f"response body has no 'choices' list; body starts {text[:200]!r}")
        return _RawResponse(body, resp_headers)

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()


class DirectChatOpenAI(ChatOpenAI):
    """ChatOpenAI for ``http_client: direct``: set ``async_client`` to a `DirectChatCompletions`."""

    _params_cache: dict[str, Any] | None = PrivateAttr(default=None)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        payload = self._get_request_payload(messages, stop=stop, **kwargs)
        if "response_format" in payload or self._use_responses_api(payload):
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        raw = await self.async_client.with_raw_response.create(**payload)
        info = {"headers": dict(raw.headers)} if self.include_response_headers else {}
        return self._create_chat_result(raw.parse(), info)  # a few dict look-ups: no thread hop

    def _dict_for_compat(self) -> dict[str, Any]:
        """The model's parameters for LangChain's callbacks, built once (LangChain rebuilds them,
        through a deprecated ``dict()``, on every call). The collector builds the model and does not
        change its fields afterwards."""
        if self._params_cache is None:
            self._params_cache = super()._dict_for_compat()
        return dict(self._params_cache)


# LangChain reads the signature of ``_agenerate`` on every call (is there a run_manager
# parameter?); a precomputed one makes that a look-up instead of an inspection
DirectChatOpenAI._agenerate.__signature__ = inspect.signature(DirectChatOpenAI._agenerate)  # type: ignore[attr-defined]

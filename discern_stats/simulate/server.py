"""A loopback OpenAI-compatible chat-completions server backed by the synthetic respondent.

For tests and benchmarks of the real client path (``langchain-openai`` through ``base_url``):
it can inject HTTP 429s, 500s, delays and malformed bodies at configured rates. It binds
only to 127.0.0.1. It is a SIMULATOR endpoint, never a real LLM.

    with FakeOpenAIServer(profile="credulous", fault_rate=0.2) as srv:
        ChatOpenAI(base_url=srv.base_url, api_key="x", model="synthetic")
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
import threading
import time
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage


# the request headers of the request being answered (each connection is its own task)
REQUEST_HEADERS: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("request_headers", default={})


class FakeOpenAIServer:
    def __init__(self, profile: str = "source-sensitive", *, latency_ms: float = 0.0, fault_rate: float = 0.0,
                 faults: tuple[str, ...] = ("429", "500", "delay", "malformed"), delay_s: float = 0.3,
                 seed: int = 0, port: int = 0, invalid_rate: float | None = None,
                 rate_limit_rps: float | None = None, retry_after_s: float | None = None,
                 cue_facts: dict[str, Any] | None = None):
        from .respondent import SyntheticChatModel
        # cue_facts: the plan's Design B facts (see SyntheticChatModel); without them a Design B
        # request gets a random valid answer
        self.model = SyntheticChatModel(profile_name=profile, latency_ms=0, invalid_rate=invalid_rate,
                                        cue_facts=cue_facts or {})
        self.latency_ms, self.fault_rate, self.faults, self.delay_s = latency_ms, fault_rate, faults, delay_s
        self.rng = random.Random(seed)
        self.port = port
        self.counts: dict[str, int] = {"requests": 0, "ok": 0, "rate_limited": 0, **{f: 0 for f in faults}}
        self.arrivals: list[float] = []  # time.monotonic() of every request's arrival (tests: sent after a kill)
        # rate limit: a token bucket of rate_limit_rps tokens per second holding at most a tenth of a
        # second's worth; a request without a token gets 429 (with Retry-After when retry_after_s is set)
        self.rate_limit_rps, self.retry_after_s = rate_limit_rps, retry_after_s
        self._tokens, self._refilled = (max(1.0, rate_limit_rps / 10) if rate_limit_rps else 0.0), time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                REQUEST_HEADERS.set(headers)
                status, payload = await self._respond(method, path, body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                extra = (f"Retry-After: {self.retry_after_s:g}\r\n" if status == 429 and self.retry_after_s is not None
                         else "")
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                             f"{extra}Connection: keep-alive\r\n\r\n".encode() + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError, asyncio.LimitOverrunError, ValueError,
                asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _respond(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        self.counts["requests"] += 1
        self.arrivals.append(time.monotonic())
        if not path.endswith("/chat/completions") or method != "POST":
            return 404, {"error": {"message": f"no route {method} {path}"}}
        if self.rate_limit_rps:
            now = time.monotonic()
            cap = max(1.0, self.rate_limit_rps / 10)
            self._tokens = min(cap, self._tokens + (now - self._refilled) * self.rate_limit_rps)
            self._refilled = now
            if self._tokens < 1:
                self.counts["rate_limited"] += 1
                return 429, {"error": {"message": "rate limit exceeded", "type": "rate_limit"}}
            self._tokens -= 1
        fault = None
        if self.fault_rate and self.rng.random() < self.fault_rate:
            fault = self.rng.choice(self.faults)
            self.counts[fault] += 1
        if fault == "429":
            return 429, {"error": {"message": "rate limited (injected)", "type": "rate_limit"}}
        if fault == "500":
            return 500, {"error": {"message": "internal error (injected)"}}
        if fault == "malformed":
            return 200, b'{"id": "x", "choices": [ {"message": '
        if fault == "delay":
            await asyncio.sleep(self.delay_s)
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        req = json.loads(body)
        msgs = [SystemMessage(m["content"]) if m["role"] == "system" else AIMessage(m["content"])
                if m["role"] == "assistant" else HumanMessage(m["content"]) for m in req["messages"]]
        text = self.model.respond(msgs)
        self.counts["ok"] += 1
        n_in = sum(len(m["content"].split()) for m in req["messages"])
        return 200, {"id": f"chatcmpl-{self.counts['requests']}", "object": "chat.completion", "created": int(time.time()),
                     "model": f"{req.get('model', 'synthetic')}-served", "system_fingerprint": "fp_simulator",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": n_in, "completion_tokens": len(text.split()),
                               "total_tokens": n_in + len(text.split())}}

    # -- lifecycle
    def _run(self) -> None:
        try:  # uvloop where installed: less server CPU per request, so the benchmark measures the client
            import uvloop
            self._loop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
            self._loop = asyncio.new_event_loop()

        async def main() -> None:
            server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, limit=2 ** 22, backlog=1024)
            self.port = server.sockets[0].getsockname()[1]
            self._server = server
            self._ready.set()
            async with server:
                await server.serve_forever()
        try:
            self._loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass

    def start(self) -> "FakeOpenAIServer":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            def _close() -> None:
                self._server.close()
                for t in asyncio.all_tasks(self._loop):
                    t.cancel()
            self._loop.call_soon_threadsafe(_close)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve_forever(profile: str = "source-sensitive", port: int = 8765, latency_ms: float = 0.0,
                  fault_rate: float = 0.0, rate_limit_rps: float | None = None,
                  retry_after_s: float | None = None) -> None:  # pragma: no cover - benchmarks, in a subprocess
    srv = FakeOpenAIServer(profile, port=port, latency_ms=latency_ms, fault_rate=fault_rate,
                           rate_limit_rps=rate_limit_rps, retry_after_s=retry_after_s).start()
    print(f"serving {srv.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


# ---------------------------------------------------------------- real-model-shaped replies (parsing tests)
class ShapedReplyServer(FakeOpenAIServer):
    """A loopback server whose replies have the shapes real models give (collect.parsing's tests):
    ``reply(request_body) -> (text, stop_reason)`` decides each answer, and the body comes back in
    the wire format of the route: OpenAI-format ``POST /v1/chat/completions`` (``finish_reason``:
    ``length`` when ``stop_reason`` is ``length`` or ``max_tokens``) or Anthropic-format
    ``POST /v1/messages`` (``stop_reason``: ``max_tokens`` likewise; a text block, or a
    ``thinking`` block and a text block when the text is ``(thinking, text)``). Every request
    body is kept in ``bodies`` (to check what a client sent, e.g. ``response_format``).
    A SIMULATOR endpoint, never a real LLM."""

    def __init__(self, reply: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.reply = reply
        self.bodies: list[dict[str, Any]] = []

    async def _respond(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        self.counts["requests"] += 1
        if method != "POST" or not (path.endswith("/chat/completions") or path.endswith("/messages")):
            return 404, {"error": {"message": f"no route {method} {path}"}}
        req = json.loads(body)
        self.bodies.append(req)
        text, stop = self.reply(req)
        self.counts["ok"] += 1
        n = self.counts["requests"]
        if path.endswith("/messages"):
            return 200, anthropic_body(n, req.get("model", "shaped"), text, stop)
        return 200, openai_body(n, req.get("model", "shaped"), text if isinstance(text, str) else text[1], stop)


def openai_body(n: int, model: str, text: str, stop: str | None) -> dict[str, Any]:
    """An OpenAI-format chat completion with ``finish_reason`` (``length`` for a cut-off answer)."""
    finish = "length" if stop in ("length", "max_tokens") else (stop or "stop")
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": len(text.split()),
                      "total_tokens": 10 + len(text.split())}}


def anthropic_body(n: int, model: str, text: Any, stop: str | None) -> dict[str, Any]:
    """An Anthropic Messages API response with ``stop_reason`` (``max_tokens`` for a cut-off answer);
    ``text`` = ``(thinking, text)`` gives an extended-thinking reply (a thinking block first)."""
    blocks: list[dict[str, Any]] = []
    if not isinstance(text, str):
        blocks.append({"type": "thinking", "thinking": text[0], "signature": "sig"})
        text = text[1]
    blocks.append({"type": "text", "text": text})
    return {"id": f"msg_{n:08d}", "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": "max_tokens" if stop in ("length", "max_tokens") else (stop or "end_turn"),
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": len(text.split())}}


# ---------------------------------------------------------------- the Anthropic Messages API contract
ANTHROPIC_VERSIONS = ("2023-06-01", "2023-01-01")


class AnthropicMessagesServer(FakeOpenAIServer):
    """A loopback ``POST /v1/messages`` server that enforces the Anthropic Messages API contract as
    the real API does (https://docs.anthropic.com/en/api/messages): the key in ``x-api-key`` (an
    ``Authorization: Bearer`` header, or a wrong key, gets 401 ``authentication_error``), an
    ``anthropic-version`` header, a JSON body with ``model``, a positive ``max_tokens`` and
    ``messages`` of roles user / assistant starting with user, the system prompt as the top-level
    ``system`` (a ``system`` role in ``messages`` gets 400 ``invalid_request_error``). Answers come
    from the synthetic respondent, in the Messages API's response shape. Every request's headers
    and body are kept in ``seen``. A SIMULATOR endpoint, never a real LLM."""

    def __init__(self, api_key: str, profile: str = "credulous", **kw: Any) -> None:
        super().__init__(profile, **kw)
        self.api_key = api_key
        self.seen: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.counts.update(unauthorized=0, invalid=0)

    @property
    def base_url(self) -> str:  # the SDK appends /v1/messages itself
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def _error(status: int, kind: str, message: str) -> tuple[int, Any]:
        return status, {"type": "error", "error": {"type": kind, "message": message}}

    async def _respond(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        self.counts["requests"] += 1
        self.arrivals.append(time.monotonic())
        h = REQUEST_HEADERS.get()
        if method != "POST" or not path.split("?")[0].endswith("/v1/messages"):
            return self._error(404, "not_found_error", f"no route {method} {path}")
        try:
            req = json.loads(body)
        except json.JSONDecodeError:
            req = None
        self.seen.append((dict(h), req if isinstance(req, dict) else {}))
        if "authorization" in h or h.get("x-api-key") != self.api_key:
            self.counts["unauthorized"] += 1
            return self._error(401, "authentication_error", "invalid x-api-key" if "x-api-key" in h else
                               "x-api-key header is required")
        problem = self._check(h, req)
        if problem:
            self.counts["invalid"] += 1
            return self._error(400, "invalid_request_error", problem)
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        msgs = ([SystemMessage(req["system"] if isinstance(req["system"], str) else
                               "".join(b.get("text", "") for b in req["system"]))] if req.get("system") else [])
        for m in req["messages"]:
            text = m["content"] if isinstance(m["content"], str) else "".join(
                b.get("text", "") for b in m["content"] if b.get("type") == "text")
            msgs.append(HumanMessage(text) if m["role"] == "user" else AIMessage(text))
        self.counts["ok"] += 1
        return 200, anthropic_body(self.counts["requests"], req["model"], self.model.respond(msgs), None)

    @staticmethod
    def _check(h: dict[str, str], req: Any) -> str | None:
        if h.get("anthropic-version") not in ANTHROPIC_VERSIONS:
            return f"anthropic-version header missing or unknown: {h.get('anthropic-version')!r}"
        if not h.get("content-type", "").startswith("application/json") or not isinstance(req, dict):
            return "the body must be JSON (content-type: application/json)"
        if not isinstance(req.get("model"), str) or not req["model"]:
            return "model: field required"
        if not isinstance(req.get("max_tokens"), int) or req["max_tokens"] < 1:
            return "max_tokens: a positive integer is required"
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return "messages: at least one message is required"
        for i, m in enumerate(msgs):
            if m.get("role") not in ("user", "assistant"):
                return (f"messages.{i}.role: {m.get('role')!r}; the system prompt goes in the top-level 'system' "
                        f"field")
            if i == 0 and m["role"] != "user" or i and m["role"] == msgs[i - 1]["role"]:
                return f"messages.{i}: roles must alternate, starting with user"
        return None

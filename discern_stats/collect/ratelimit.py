"""Adaptive concurrency per LLM: fewer requests in flight while the provider answers 429, more when
it stops (AIMD, as TCP's congestion window); Retry-After sets the wait before the retry of the
request that received it.

- Additive increase: every success adds 1 / limit to the limit (one more slot per ``limit``
  successes), up to the spec's ``concurrency``.
- Multiplicative decrease: a 429 multiplies the limit by ``BACKOFF`` (0.75), at most once per
  round trip (a moving average of the answered requests' latency): the answers of requests
  already in flight when the first 429 came back are the same signal, not new ones. Never
  below 1.
- Retry-After (seconds or an HTTP date; also ``retry-after-ms``; `retry_after_s`): the request
  that received it is retried no sooner (runner._with_retries); the other requests go on within
  the lowered limit. Pausing every request of the LLM for it instead cost 59 % of the throughput
  against a token-bucket server that sends Retry-After: 1 (benchmarks/bench_rate_limit.py).
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any

BACKOFF = 0.75


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` / ``retry-after-ms`` of a 429 or 503), or None."""
    headers = getattr(exc, "headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    h = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    if "retry-after-ms" in h:
        try:
            return max(0.0, float(h["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    v = h.get("retry-after")
    if v is None:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        when = email.utils.parsedate_to_datetime(v) if v else None
        return max(0.0, when.timestamp() - time.time()) if when is not None else None


class AdaptiveLimit:
    """The in-flight limit of one LLM (see the module docstring); ``acquire``/``release`` around
    each request, ``success``/``rate_limited`` with its outcome."""

    def __init__(self, concurrency: int, window_s: float = 0.1) -> None:
        self.max = float(concurrency)
        self.limit = float(concurrency)
        self.window_s = window_s  # round trip: moving average of answered requests' latency
        self.inflight = 0
        self.rate_limited_n = 0
        self._last_cut = -1e9
        self._cond: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # made inside the running loop
            self._cond = asyncio.Condition()
        return self._cond

    async def acquire(self) -> None:
        cond = self._condition()
        async with cond:
            while self.inflight >= max(1, int(self.limit)):
                await cond.wait()
            self.inflight += 1

    async def release(self) -> None:
        cond = self._condition()
        async with cond:
            self.inflight -= 1
            cond.notify()

    def success(self, latency_s: float | None = None) -> None:
        if latency_s is not None:
            self.window_s = 0.9 * self.window_s + 0.1 * latency_s
        if self.limit < self.max:
            self.limit = min(self.max, self.limit + 1.0 / self.limit)

    def rate_limited(self) -> None:
        now = time.monotonic()
        self.rate_limited_n += 1
        if now - self._last_cut >= self.window_s:
            self.limit = max(1.0, self.limit * BACKOFF)
            self._last_cut = now

    def status(self) -> dict[str, Any]:
        return {"limit": int(self.limit), "rate_limited": self.rate_limited_n}

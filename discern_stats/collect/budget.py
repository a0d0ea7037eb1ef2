"""The request budget of a run (``--max-requests``, ``budget.max_requests``): every request sent counts,
first attempts and retries alike, across every LLM and every worker process of the run.

A claim reserves one request per trial it takes (its first attempt), so claimed-ahead trials never
hold more than the budget; a retry takes one more request before it leaves, and a trial whose retry
finds the budget spent goes back to the plan (`Collector`). A reservation that is never sent (the
lease was lost, the run stopped) is given back.
"""

from __future__ import annotations

from typing import Any


class RequestBudget:
    """``limit`` requests (None: no limit), shared through ``shared`` (a multiprocessing.Value) by every
    process of a run, else counted in this process alone."""

    def __init__(self, limit: int | None, shared: Any = None) -> None:
        self.limit, self.shared = limit, shared
        self._used = 0  # this process's reservations, when nothing is shared

    def take(self, n: int) -> int:
        """Reserve up to ``n`` requests and return how many were granted (at once, so two LLM loops or
        processes never read the same unspent budget across an await)."""
        if n <= 0:
            return 0
        if self.limit is None:
            return n
        if self.shared is None:
            granted = max(0, min(n, self.limit - self._used))
            self._used += granted
            return granted
        with self.shared.get_lock():
            granted = max(0, min(n, self.limit - self.shared.value))
            self.shared.value += granted
        return granted

    def give_back(self, n: int) -> None:
        if n <= 0 or self.limit is None:
            return
        if self.shared is None:
            self._used -= n
            return
        with self.shared.get_lock():
            self.shared.value -= n

    @property
    def used(self) -> int:
        return self.shared.value if self.shared is not None else self._used

    def left(self) -> bool:
        return self.limit is None or self.used < self.limit

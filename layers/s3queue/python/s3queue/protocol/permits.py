"""A ticket's permit: when, and how many of, its handlers may start (rate limits).

    "permit": {"from": <ms>, "by": <ms>, "starts": <n>}     in a ticket (tickets.py)

The leader of a rate-limited queue gives each ticket a window of the queue's rate-limit clock
(``[from, by)``, one second) and a number of starts out of that window's budget
(`dispatching.limits`). A worker starts no handler of the ticket before ``from`` (it waits),
none at or after ``by`` and no more than ``starts`` of them: the rest are released untouched
(no attempt counted) and dispatched again in a later window. A ticket without a permit (every
queue without ``rate_limit``) starts as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Permit:
    """Handler starts a ticket may make: at most `starts`, within ``[from_ms, by_ms)``."""

    from_ms: int
    by_ms: int
    starts: int

    def to_json(self) -> dict[str, Any]:
        return {"from": self.from_ms, "by": self.by_ms, "starts": self.starts}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> Permit | None:
        if doc is None:
            return None
        return cls(int(doc["from"]), int(doc["by"]), int(doc["starts"]))

    def wait_ms(self, now_ms: int) -> int:
        """How long a worker waits before its first start (its clock is early)."""
        return max(self.from_ms - now_ms, 0)

    def refuses(self, now_ms: int, started: int) -> str | None:
        """Why one more handler may not start now, after `started` of this delivery; None: it
        may."""
        if now_ms >= self.by_ms:
            return "rate window over"
        if started >= self.starts:
            return "rate limit"
        return None

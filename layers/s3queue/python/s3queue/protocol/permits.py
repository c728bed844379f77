"""A ticket's permit: the rate limits its handler starts are taken against.

    "permit": {"rate": <n>, "partition_rate": <n>, "messages": <n>}     in a ticket (tickets.py)

The leader of a rate-limited queue marks each ticket with the limits that bind its starts
(``rate``: the queue's ``rate_limit``; ``partition_rate``: ``partition_rate_limit`` of the
ticket's one partition; 0: none) and the messages it holds. The worker takes the starts it
needs from the counters of those limits (`s3queue.protocol.budgets`) before it claims the
ticket, and again whenever its ticket outlasts the window it took them in: a permit is spent
where the handler starts, never at dispatch, so a ticket that waits for a worker loses nothing.
A ticket without a permit (every queue without a rate limit) starts as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Permit:
    """The rate limits (starts per second; 0: none) that bind a ticket's handler starts."""

    rate: int = 0
    partition_rate: int = 0
    messages: int = 0
    """The messages the ticket holds: what its worker asks a counter for at most."""

    def to_json(self) -> dict[str, Any]:
        return {"rate": self.rate, "partition_rate": self.partition_rate, "messages": self.messages}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> Permit | None:
        if doc is None:
            return None
        return cls(
            int(doc.get("rate", 0)), int(doc.get("partition_rate", 0)), int(doc.get("messages", 0))
        )

    @property
    def limited(self) -> bool:
        return bool(self.rate or self.partition_rate)

"""What the leader holds back, and why: the ``held`` of ``stats()``.

    <prefix>/<queue>/budgets/~held    {"v": 1, "token": ..., "at": <ms>, "held": {...}}

Written by the leader of a limited queue (`dispatching.limits`), only when its counts changed
and at most every `dispatching.holds.EVERY_MS`; read by `Queue.stats()` (one GET). The counts
are ready messages the leader's last tick read and did not dispatch because a limit bound them,
under the limit's setting name. A document older than `STALE_MS` by the reader's clock is no
leader's current word (none leads, or the queue lost its limits): it reads as nothing held.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from s3queue.storage.base import Storage

VERSION = 1
STALE_MS = 120_000
HELD_REASONS = ("rate_limit", "partition_rate_limit", "partition_concurrency")
"""The limits a report counts under (the settings' names); ``stats()`` adds ``paused``."""


@dataclass(frozen=True, slots=True)
class Holds:
    """Ready messages held back, by the setting that held them, as of `at_ms`."""

    held: dict[str, int] = field(default_factory=dict)
    at_ms: int = 0

    def encode(self, token: str) -> bytes:
        doc: dict[str, Any] = {"v": VERSION, "token": token, "at": self.at_ms, "held": self.held}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Holds:
        """The counts a stored body says; nothing held if it cannot be read."""
        try:
            doc = json.loads(data)
            held = {str(k): int(v) for k, v in dict(doc["held"]).items()}
            return cls(held, int(doc["at"]))
        except (ValueError, KeyError, TypeError):
            return cls()


def read_holds(storage: Storage, key: str, now_ms: int) -> dict[str, int]:
    """The leader's last counts, or {} when there are none or they are stale."""
    obj = storage.get(key)
    if obj is None:
        return {}
    holds = Holds.decode(obj.body)
    return holds.held if now_ms - holds.at_ms <= STALE_MS else {}

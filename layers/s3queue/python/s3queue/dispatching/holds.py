"""The leader's report of what its limits hold back (`protocol.holds`), kept cheap.

A tick of a limited queue counts what each limit held back (`limits.Budgets.held`). Writing
that every tick would cost a PUT a tick, so the report is written only when the counts changed,
at most every `EVERY_MS`, and again every `REFRESH_MS` while something is held (a reader takes
a report older than `protocol.holds.STALE_MS` for none). A queue that holds nothing writes
nothing; a queue without limits has no report at all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from s3queue.errors import StorageError
from s3queue.protocol.holds import Holds
from s3queue.storage.base import Storage, new_token

log = logging.getLogger(__name__)

EVERY_MS = 5_000
REFRESH_MS = 60_000


@dataclass(slots=True)
class HoldReport:
    """The counts this leader last wrote, and when."""

    storage: Storage
    key: str
    written: dict[str, int] = field(default_factory=dict)
    at_ms: int | None = None

    def update(self, held: dict[str, int], now_ms: int) -> None:
        """Write `held` if it is news and the last write is old enough (S3 trouble: next time).
        Unconditional: a report only leaders write, read by nothing that decides."""
        counts = {k: v for k, v in held.items() if v}
        if self.at_ms is not None and now_ms - self.at_ms < EVERY_MS:
            return
        stale = self.at_ms is None or now_ms - self.at_ms >= REFRESH_MS
        if counts == self.written and not (counts and stale):
            return
        token = new_token()
        try:
            self.storage.put(self.key, Holds(counts, now_ms).encode(token), token=token)
        except StorageError as exc:
            log.info("held counts not written (next time): %s", exc)
            return
        self.written, self.at_ms = counts, now_ms

"""What the dashboard shows, read through the operator's calls (`Queue`): it reads, and acts
only when an action asks (actions.py). One `Queue` per name is kept, so `stats()` reads only
the tickets that changed since the last refresh (its `TicketCache`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from s3queue.common.clock import Clock, SystemClock
from s3queue.errors import QueueNotFound
from s3queue.local.console import Connection
from s3queue.local.ui.trend import Rate, Trend
from s3queue.operations import admin
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import check_queue_name

PEEK = 20
DEAD_PAGE = 50


@dataclass
class Board:
    """One bucket's queues as the pages show them."""

    conn: Connection
    endpoint: str | None
    clock: Clock = field(default_factory=SystemClock)
    _queues: dict[str, Queue] = field(default_factory=dict)
    _trends: dict[str, Trend] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def where(self) -> dict[str, str]:
        """Bucket, prefix and endpoint (without any user:password in the URL): never a secret."""
        return {
            "bucket": self.conn.bucket,
            "prefix": self.conn.prefix,
            "endpoint": _public(self.endpoint) if self.endpoint else "AWS S3",
        }

    def names(self) -> list[str]:
        return self.conn.queues()

    def queue(self, name: str, *, check: bool = True) -> Queue:
        """The named queue; `QueueNotFound` for a bad name or (with `check`, one LIST) one
        without objects."""
        try:
            check_queue_name(name)
        except ValueError as exc:
            raise QueueNotFound(str(exc)) from exc
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = Queue(
                    name, storage=self.conn.storage, prefix=self.conn.prefix, clock=self.clock
                )
                self._queues[name] = queue
        if check and not admin.exists(queue.storage, queue.keys):
            raise QueueNotFound(f"no queue {name!r} in bucket {self.conn.bucket!r}")
        return queue

    def stats(self, name: str, *, check: bool = True) -> dict[str, Any]:
        """A queue's `stats()`, with the rate of its last minutes under ``rate``."""
        queue = self.queue(name, check=check)
        with self._lock:  # one refresh of a queue at a time: its TicketCache is not shared
            stats = queue.stats()
            trend = self._trends.setdefault(name, Trend())
            backlog = stats["pending"] + stats["delayed"] + stats["in_flight"]
            trend.add(self.clock.now_ms(), backlog, stats["dead"])
            rate: Rate | None = trend.rate()
        return {**stats, "rate": rate}

    def overview(self) -> list[dict[str, Any]]:
        # The names come from a LIST of the bucket: no LIST more per queue to check it exists.
        return [self.stats(name, check=False) for name in self.names()]


def _public(url: str) -> str:
    """`url` without user information."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

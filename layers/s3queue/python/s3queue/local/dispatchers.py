"""Is anyone dispatching? ``s3queue worker`` only works the tickets others publish.

A coordinator that leads a queue writes its lease object (``<queue>/coordinator``) every
third of its lease: a lease written within `RECENT` means someone dispatches that queue (the
coordinator Lambda runs every minute, a local leader every second). A worker that finds no
queue so led warns, instead of waiting silently for tickets that never come; one HEAD per
queue per check, judged by S3's own ``Last-Modified``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from s3queue.common.clock import Clock, SystemClock
from s3queue.errors import S3QueueError
from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Storage

logger = logging.getLogger(__name__)

RECENT_MS = 180_000
"""Three schedule periods of the coordinator Lambda (``rate(1 minute)``)."""
CHECK_EVERY = 60.0


def dispatched(
    storage: Storage, prefix: str, queues: Sequence[str], now_ms: int, recent_ms: int = RECENT_MS
) -> list[str]:
    """The queues whose lease some coordinator wrote within `recent_ms` of `now_ms`."""
    found = []
    for queue in queues:
        head = storage.head(QueueKeys(prefix, queue).lease)
        if head is not None and head.last_modified_ms + recent_ms >= now_ms:
            found.append(queue)
    return found


class DispatcherWatch:
    """Warns once while no queue has a dispatcher, and once more when one appears."""

    def __init__(
        self,
        storage: Storage,
        prefix: str,
        queues: Sequence[str],
        warn: Callable[[str], None],
        *,
        bucket: str = "",
        clock: Clock | None = None,
    ) -> None:
        self.storage, self.prefix, self.queues = storage, prefix, list(queues)
        self.warn, self.bucket = warn, bucket
        self.clock = clock or SystemClock()
        self.missing = False

    def check(self) -> bool:
        """Look once; True if some queue has a dispatcher."""
        found = dispatched(self.storage, self.prefix, self.queues, self.clock.now_ms())
        if not found and not self.missing:
            where = f" of bucket {self.bucket}" if self.bucket else ""
            self.warn(
                f"warning: no dispatcher: no coordinator led any queue{where} "
                f"({', '.join(self.queues)}) in the last {RECENT_MS // 60_000} minutes. A worker "
                "only runs the tickets others publish: start `s3queue dev` for this bucket and "
                "prefix, or deploy the coordinator Lambda."
            )
        elif found and self.missing:
            self.warn(f"a dispatcher leads {', '.join(found)} now")
        self.missing = not found
        return bool(found)

    def start(self, stop: threading.Event, every: float = CHECK_EVERY) -> threading.Thread:
        """Check now (before returning), then every `every` seconds until `stop` is set, on a
        daemon thread."""

        def look() -> None:
            try:
                self.check()
            except S3QueueError as exc:  # S3 trouble: the worker itself reports it
                logger.debug("dispatcher check failed: %s", exc)

        def loop() -> None:
            while not stop.wait(every):
                look()

        look()
        thread = threading.Thread(target=loop, name="s3queue-dispatcher-watch", daemon=True)
        thread.start()
        return thread

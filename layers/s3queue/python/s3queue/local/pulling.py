"""The pull loop: a runtime's worker threads take pending tickets of its queues from S3.

Every runtime runs it, leader or not, so any number of processes on any hosts share one queue's
work (see `s3queue.working.pull`).
It polls only while a thread is free, at once when one frees up, and
backs off to `PULL_IDLE` seconds while it finds nothing: an idle runtime costs one LIST per
queue per `PULL_IDLE` (12 a minute per queue with the default 5 s).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from s3queue.errors import StorageError
from s3queue.local.pool import WorkerPool
from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Storage
from s3queue.working.pull import Puller

log = logging.getLogger(__name__)

PULL_BUSY = 0.2
"""Seconds between polls while they find work (sooner when a thread frees up)."""
PULL_IDLE = 5.0
"""The longest wait between polls that find nothing (the idle cost, and how long an idle
standby takes to join in when work appears)."""


class PullLoop:
    """Feeds `pool` with the pending tickets of `queues`, fairly, until `stop` is set."""

    def __init__(
        self,
        storage: Storage,
        prefix: str,
        queues: list[str],
        pool: WorkerPool,
        stop: threading.Event,
        *,
        idle: float = PULL_IDLE,
    ) -> None:
        self.pullers: Mapping[str, Puller] = {
            name: Puller(storage, QueueKeys(prefix, name)) for name in queues
        }
        self.pool, self.stop, self.idle = pool, stop, idle
        self._turn = 0

    def run(self) -> None:
        delay = PULL_BUSY
        while not self.stop.is_set():
            found = self.poll_once()
            delay = PULL_BUSY if found else min(max(delay, PULL_BUSY) * 2, self.idle)
            self.pool.freed.wait(delay if self.pool.free() else self.idle)
            self.pool.freed.clear()

    def poll_once(self) -> int:
        """One poll of each queue, starting with a different one each time; payloads taken."""
        names = list(self.pullers)
        self._turn = (self._turn + 1) % max(len(names), 1)
        taken = 0
        for name in names[self._turn :] + names[: self._turn]:
            free = self.pool.free()
            if free <= 0 or self.stop.is_set():
                break
            try:
                payloads = self.pullers[name].poll(free)
            except StorageError as exc:  # S3 trouble: the next poll tries again
                log.warning("queue %s: pulling tickets failed: %s", name, exc)
                continue
            for payload in payloads:
                if self.pool.offer(payload):
                    taken += 1
                else:  # a thread was taken meanwhile: it stays for the next poll
                    self.pullers[name].forget(payload)
        return taken

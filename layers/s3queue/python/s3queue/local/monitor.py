"""Watching a local run: progress reports, the drained check, and waiting for S3 to answer."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from s3queue.dispatching.service import FATAL
from s3queue.errors import EndpointUnreachable, StorageError
from s3queue.local.pool import WorkerPool
from s3queue.operations import admin
from s3queue.storage.base import Storage

log = logging.getLogger(__name__)

Progress = Callable[[dict[str, dict[str, int]]], None]
"""Receives ``{queue: {pending, delayed, in_flight, processed, retried, dead_lettered, dlq}}``."""
Stats = dict[str, admin.Stats]
FULL_CHECK = 2.0
"""Seconds a drain check may trust the pull loop's listing instead of counting the queue."""
RETRY_INTERVAL = 2.0
MAX_RETRY_INTERVAL = 30.0


class Watched(Protocol):
    """What `watch` needs of a running runtime."""

    stop: threading.Event
    pool: WorkerPool

    def stats(self) -> Stats: ...

    def snapshot(self, stats: Stats) -> dict[str, dict[str, int]]: ...

    def drained(self, stats: Stats) -> bool: ...

    def tickets_listed(self) -> bool:
        """Whether the pull loop's last LIST, made within the last second, showed tickets."""
        ...


def watch(
    runtime: Watched,
    drain: bool,
    progress: Progress | None,
    interval: float,
    timeout: float | None,
    started: float,
) -> bool:
    """Report progress, replace dead worker threads, and watch for the end; True once drained.

    A drain check counts the whole queue (`admin.stats`: a LIST of every folder and a GET of
    every ticket changed since the last check). While the pull loop's own fresh LIST shows
    tickets the queue is not drained, so the check waits for that to change, counting the
    queue at least every `FULL_CHECK` seconds all the same (a malformed ticket counts for
    nothing): an idle worker process beside a busy queue adds no requests of its own."""
    poll = min(interval, 0.25)
    reported = checked = 0.0
    while not runtime.stop.wait(poll):
        runtime.pool.revive()
        now = time.monotonic()
        if timeout is not None and now - started >= timeout:
            return False
        report = progress is not None and now - reported >= interval
        if not (report or (drain and runtime.pool.idle())):
            continue
        if not report and now - checked < FULL_CHECK and runtime.tickets_listed():
            continue
        checked = now
        try:
            stats = runtime.stats()
        except FATAL:
            raise
        except StorageError as exc:  # S3 trouble: the workers retry on their own; so do we
            log.warning("stats failed: %s", exc)
            continue
        if report and progress is not None:
            progress(runtime.snapshot(stats))
            reported = now
        if drain and runtime.drained(stats):
            if progress is not None:
                progress(runtime.snapshot(stats))
            return True
    return False


def reach(storage: Storage, prefix: str, stop: threading.Event, *, wait: bool) -> bool:
    """One LIST of the bucket; with `wait`, retried while the endpoint is unreachable.

    False if `stop` was set while waiting. A missing bucket or refused credentials raise at
    once: waiting does not cure them.
    """
    return retry_unreachable(lambda: storage.list(f"{prefix}/", limit=1), stop, wait=wait)


def retry_unreachable(
    check: Callable[[], object],
    stop: threading.Event,
    *,
    wait: bool,
    interval: float | None = None,
) -> bool:
    """Call `check` until no `EndpointUnreachable` (logged as a warning); False if stopped."""
    delay = RETRY_INTERVAL if interval is None else interval
    waited = False
    while True:
        try:
            check()
        except EndpointUnreachable as exc:
            if not wait:
                raise
            log.warning("waiting for S3: %s (next try in %.0f s; Ctrl-C stops)", exc, delay)
        else:
            if waited:
                log.warning("S3 answers: starting")
            return True
        if stop.wait(delay):
            return False
        delay, waited = min(delay * 2, MAX_RETRY_INTERVAL), True

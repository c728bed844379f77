"""Applying a committed ticket behind its worker thread, while the thread takes its next ticket.

Under AWS-like round trips a worker thread's ticket is a chain of requests one after another:
lease check, claim, the window of GETs, commit, then the apply (the sources' DeleteObjects, the
ticket's DELETE: about 60 ms on AWS, a third of a small ticket's time). Nothing the thread
decides next depends on that apply: once committed, a ticket may be applied by anyone at any
time (apply.py; a crash before it is done leaves a committed ticket that the coordinator
dispatches again, and any worker applies it). So the apply can run behind the thread while the
thread takes, checks, claims and runs its next ticket: only I/O moves, no decision. The order
rules hold as before: a group's next message is dispatched only once the ticket that held the
group is gone, which the apply still decides.

`ApplyBehind` keeps at most one apply behind each worker thread: a thread's next `submit` (the
end of its next ticket) first waits for the one before, so the applies in flight never outnumber
the threads and a slow S3 slows the threads down instead of piling up work. `join` waits for
every apply: a process stops only after it (`run_local`), as a Lambda invocation would have to.
A Lambda invocation works one ticket and returns, so the worker Lambda applies inline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

log = logging.getLogger(__name__)

__all__ = ["ApplyBehind", "Behind"]


class Behind(Protocol):
    """Where a worker hands the apply of a ticket it committed (None on the worker: inline)."""

    def submit(self, ticket: str, job: Callable[[], object]) -> None:
        """Run `job` (the apply of `ticket`) behind the calling thread."""
        ...


class ApplyBehind:
    """Applies on threads of their own, at most one behind each of `threads` worker threads."""

    def __init__(self, threads: int, name: str = "s3queue-apply") -> None:
        self._threads, self._name = max(threads, 1), name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._mine = threading.local()
        self._running: dict[Future[object], str] = {}
        self._done = threading.Condition(self._lock)
        self.errors = 0
        """Applies that raised (logged: the ticket stays committed, and is applied again)."""

    def submit(self, ticket: str, job: Callable[[], object]) -> None:
        before: Future[object] | None = getattr(self._mine, "last", None)
        if before is not None:
            before.exception()  # wait for this thread's last apply first (its error is logged)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
            future = self._pool.submit(self._run, ticket, job)
            self._running[future] = ticket
        future.add_done_callback(self._finished)
        self._mine.last = future

    def _run(self, ticket: str, job: Callable[[], object]) -> object:
        try:
            return job()
        except Exception:  # as a worker thread's: logged, counted; the ticket stays committed
            log.exception("applying ticket %s failed", ticket)
            with self._lock:
                self.errors += 1
            return None

    def _finished(self, future: Future[object]) -> None:
        with self._lock:
            self._running.pop(future, None)
            self._done.notify_all()

    def working(self) -> frozenset[str]:
        """The tickets being applied: their writes are this process's own."""
        with self._lock:
            return frozenset(self._running.values())

    def idle(self) -> bool:
        with self._lock:
            return not self._running

    def join(self) -> None:
        """Wait until every apply submitted so far has returned."""
        with self._lock:
            while self._running:
                self._done.wait()

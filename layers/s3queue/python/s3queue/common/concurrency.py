"""Running a few I/O-bound calls at once: the coordinator's block of ticket publications, the
worker's read-ahead of a ticket's messages.

A `RunAll` takes zero-argument jobs and returns their results in the jobs' order, once every
job has returned. Production runs them on threads (`Threads`); tests and simulations pass
`in_order` (deterministic, every call a crash point) or one of their own (the chaos
simulation shuffles them; the AWS simulation overlaps them in virtual time).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

RunAll = Callable[[list[Callable[[], Any]]], list[Any]]


def in_order(jobs: list[Callable[[], Any]]) -> list[Any]:
    """A `RunAll` that runs the jobs one by one, in order."""
    return [job() for job in jobs]


class Threads:
    """A `RunAll` on a pool of at most `size` threads, made on first use in each process (a
    forked child has none of its parent's threads: it makes its own pool and lock)."""

    def __init__(self, size: int, name: str) -> None:
        self.size, self.name = max(size, 1), name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __call__(self, jobs: list[Callable[[], Any]]) -> list[Any]:
        if len(jobs) < 2:
            return in_order(jobs)
        if self._pid != os.getpid():
            self._pid, self._pool, self._lock = os.getpid(), None, threading.Lock()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.size, thread_name_prefix=self.name)
        return list(self._pool.map(lambda job: job(), jobs))


def settled(run_all: RunAll, jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run `jobs` with `run_all`, and return their results once every one has returned; the
    first exception one raised is raised then (none is lost in a thread, none stops the
    others)."""

    def attempt(job: Callable[[], Any]) -> Any:
        try:
            return job()
        except Exception as exc:  # noqa: BLE001 - raised below, once all returned
            return _Raised(exc)

    results = run_all([partial(attempt, job) for job in jobs])
    for result in results:
        if isinstance(result, _Raised):
            raise result.error
    return results


def attempted(run_all: RunAll, jobs: list[Callable[[], Any]]) -> tuple[list[Any], Exception | None]:
    """`settled`, but what the jobs that returned gave (in order) and the first exception one
    raised, for a caller that must undo what succeeded when one failed."""

    def attempt(job: Callable[[], Any]) -> Any:
        try:
            return job()
        except Exception as exc:  # noqa: BLE001 - returned below, once all returned
            return _Raised(exc)

    results = run_all([partial(attempt, job) for job in jobs])
    errors = [r.error for r in results if isinstance(r, _Raised)]
    return [r for r in results if not isinstance(r, _Raised)], errors[0] if errors else None


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

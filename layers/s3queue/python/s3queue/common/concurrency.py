"""Running a few I/O-bound calls at once: the coordinator's block of ticket publications, the
worker's read-ahead of a ticket's messages.

A `RunAll` takes zero-argument jobs and returns their results in the jobs' order, once every
job has returned. Production runs them on threads (`Threads`); tests and simulations pass
`in_order` (deterministic, every call a crash point) or one of their own (the chaos
simulation shuffles them; the AWS simulation overlaps them in virtual time).

A `Submit` takes one job at a time and hands back its `Pending` result at once, so a caller can
use the first result while later jobs still run (the worker's handler starts when its own
object's GET returns, not when its window's slowest does). `Threads` and the AWS simulation's
lanes take jobs so; `submitter` makes any other `RunAll` into one that runs what was submitted
together, when the first of it is wanted (`Batched`: the order and crash points of a `RunAll`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from functools import partial
from typing import Any, Protocol

RunAll = Callable[[list[Callable[[], Any]]], list[Any]]


class Pending(Protocol):
    """A submitted job's result (a `concurrent.futures.Future` is one)."""

    def result(self) -> Any:
        """The job's return value once it returned (waiting until then); its exception, raised."""
        ...

    def cancel(self) -> bool:
        """Drop the job if it has not started; whether it was dropped."""
        ...


Submit = Callable[[Callable[[], Any]], Pending]


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
        return list(self._executor().map(lambda job: job(), jobs))

    def submit(self, job: Callable[[], Any]) -> Pending:
        """Start `job` on a free thread (or when one frees up); its result when wanted."""
        return self._executor().submit(job)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pid != os.getpid():
            self._pid, self._pool, self._lock = os.getpid(), None, threading.Lock()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.size, thread_name_prefix=self.name)
            return self._pool


def is_done(pending: Pending) -> bool:
    """Whether `pending` has returned, without waiting for it (a `Future`'s ``done()``; the
    ``done`` flag of `Batched`'s cells and of the AWS simulation's jobs)."""
    done = getattr(pending, "done", False)
    return bool(done()) if callable(done) else bool(done)


def wait_any(pending: list[Pending]) -> None:
    """Return once one of `pending` has returned (at once if one has): `Future`s through
    `concurrent.futures.wait`; a kind of its own with a ``wait_any`` (the AWS simulation's
    jobs, in virtual time); else the first's result (`Batched` runs them all then)."""
    if not pending or any(is_done(p) for p in pending):
        return
    own = getattr(type(pending[0]), "wait_any", None)
    if own is not None:
        own(pending)
    elif all(isinstance(p, Future) for p in pending):
        wait(pending, return_when=FIRST_COMPLETED)  # type: ignore[arg-type]
    else:
        with contextlib.suppress(Exception):  # raised where that result is wanted
            pending[0].result()


def submitter(run_all: RunAll) -> Submit:
    """`run_all`'s own ``submit`` if it has one (`Threads`, the AWS simulation's lanes), else a
    new `Batched` over it."""
    submit: Submit | None = getattr(run_all, "submit", None)
    return submit if submit is not None else Batched(run_all)


class Batched:
    """A `Submit` over a `RunAll` that only runs lists: the jobs submitted since its last run
    run together, by `run_all`, when the first of them is wanted; a job cancelled before then
    never runs. What a job raises, `run_all` raises (a crash point stops the run, as it would
    have stopped the list), where the result that started the run was wanted; the jobs it did
    not reach wait for the next run."""

    def __init__(self, run_all: RunAll) -> None:
        self.run_all = run_all
        self._waiting: list[_Cell] = []

    def __call__(self, job: Callable[[], Any]) -> Pending:
        cell = _Cell(self, job)
        self._waiting.append(cell)
        return cell

    def run(self) -> None:
        batch, self._waiting = self._waiting, []
        try:
            self.run_all([cell.run for cell in batch])
        finally:
            self._waiting[:0] = [cell for cell in batch if not cell.done]

    def drop(self, cell: _Cell) -> bool:
        if cell in self._waiting:
            self._waiting.remove(cell)
            return True
        return False


class _Cell:
    __slots__ = ("batched", "done", "job", "value")
    done: bool
    value: Any

    def __init__(self, batched: Batched, job: Callable[[], Any]) -> None:
        self.batched, self.job = batched, job
        self.done, self.value = False, None

    def run(self) -> None:
        self.value = self.job()
        self.done = True

    def result(self) -> Any:
        while not self.done:
            self.batched.run()
        return self.value

    def cancel(self) -> bool:
        return not self.done and self.batched.drop(self)


def settled(run_all: RunAll, jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run `jobs` with `run_all`, and return their results once every one has returned; the
    first exception one raised is raised then (none is lost in a thread, none stops the
    others)."""

    results = run_all([partial(_attempt, job) for job in jobs])
    for result in results:
        if isinstance(result, Raised):
            raise result.error
    return results


def attempted(run_all: RunAll, jobs: list[Callable[[], Any]]) -> tuple[list[Any], Exception | None]:
    """`settled`, but what the jobs that returned gave (in order) and the first exception one
    raised, for a caller that must undo what succeeded when one failed."""

    results = run_all([partial(_attempt, job) for job in jobs])
    errors = [r.error for r in results if isinstance(r, Raised)]
    return [r for r in results if not isinstance(r, Raised)], errors[0] if errors else None


def beside(run_all: RunAll, side: Callable[[], Any], main: Callable[[], Any]) -> tuple[Any, Any]:
    """`side` and `main` at once, with `run_all`'s threads (`side` on one of them, `main` in
    the caller's thread, so that a `main` which runs jobs of its own on the same pool never
    waits for a thread its caller holds); a `RunAll` without threads runs both in its own
    order (the chaos simulation's: either may go first). Each one's result, or its exception
    as a `Raised`, once both returned."""
    submit: Submit | None = getattr(run_all, "submit", None)
    if submit is None:
        side_result, main_result = run_all([partial(_attempt, side), partial(_attempt, main)])
        return side_result, main_result
    pending = submit(partial(_attempt, side))
    main_result = _attempt(main)
    return pending.result(), main_result


def _attempt(job: Callable[[], Any]) -> Any:
    try:
        return job()
    except Exception as exc:  # noqa: BLE001 - handed back, for the caller to raise or undo
        return Raised(exc)


class Raised:
    """A job's exception, as `beside` hands it back."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

"""The local runtime under measurement: `Tracker` (what happened, from events) and `LocalRun`.

`Tracker` is both the producer's and the runtime's event listener. It records when each message
was enqueued and when its handler first started (the ``at_ms`` of the ``enqueue`` and
``handler_start`` events, both read from the system clock), and which tickets were dispatched and
applied, so a run is known to be over without the runtime's own drain check (which lists the
whole queue and reads every ticket: requests that would be counted against the queue).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from s3queue.common.events import Event
from s3queue.local.runtime import RunSummary, run_local
from s3queue.storage.base import Storage

OnDone = Callable[[int], None]
"""Told how many messages have finished so far."""


class Tracker:
    """Event listener: enqueue and handler-start times per message, tickets dispatched/applied."""

    def __init__(self, on_done: OnDone | None = None) -> None:
        self.enqueued: dict[str, int] = {}
        self.started: dict[str, int] = {}
        self.finished = 0
        self.first_start_ms: int | None = None
        self.last_finish_ms: int | None = None
        self.finishes_ms: list[int] = []
        """When each handler finished: the drain's steady middle (`bench.drainrate`)."""
        self.dispatched: set[str] = set()
        self.applied: set[str] = set()
        self.claimed_ms: dict[str, int] = {}
        self.dispatch_ticks: set[int] = set()
        """Distinct times of dispatch events: a tick stamps every ticket it publishes alike."""
        self.busy_ms = 0
        """Summed claim-to-applied time of every ticket: how long workers were inside tickets."""
        self._expected: int | None = None
        self._complete = threading.Event()
        self._lock = threading.Lock()
        self._on_done = on_done

    def __call__(self, event: Event) -> None:
        fields = event.fields
        with self._lock:
            if event.kind == "enqueue":
                for message_id in fields.get("message_ids") or [fields.get("message_id")]:
                    self.enqueued[str(message_id)] = event.at_ms
            elif event.kind == "handler_start":
                self.started.setdefault(str(fields["message_id"]), event.at_ms)
                if self.first_start_ms is None:
                    self.first_start_ms = event.at_ms
            elif event.kind == "handler_finish":
                self.finished += 1
                self.last_finish_ms = event.at_ms
                self.finishes_ms.append(event.at_ms)
            elif event.kind == "dispatch":
                self.dispatched.add(str(fields["ticket"]))
                self.dispatch_ticks.add(event.at_ms)
            elif event.kind == "claim":
                self.claimed_ms[str(fields["ticket"])] = event.at_ms
            elif event.kind == "applied":
                ticket = str(fields["ticket"])
                self.applied.add(ticket)
                self.busy_ms += event.at_ms - self.claimed_ms.pop(ticket, event.at_ms)
            else:
                return
            finished = self.finished
            self._check()
        if self._on_done is not None and event.kind == "handler_finish":
            self._on_done(finished)

    def expect(self, messages: int) -> None:
        """Arm `wait`: complete once this many handlers finished and every ticket is applied."""
        with self._lock:
            self._expected = messages
            self._complete.clear()
            self._check()

    def wait(self, timeout: float) -> bool:
        return self._complete.wait(timeout)

    def latencies_ms(self, ids: list[str] | None = None) -> list[int]:
        """Enqueue-to-handler-start of every started message (of `ids`, if given)."""
        with self._lock:
            wanted = ids if ids is not None else list(self.started)
            return [
                self.started[i] - self.enqueued[i]
                for i in wanted
                if i in self.started and i in self.enqueued
            ]

    def span_ms(self, ids: list[str]) -> int:
        """From the first enqueue of `ids` to the last handler start among them."""
        with self._lock:
            enqueued = [self.enqueued[i] for i in ids if i in self.enqueued]
            started = [self.started[i] for i in ids if i in self.started]
        return max(started) - min(enqueued) if enqueued and started else 0

    def _check(self) -> None:
        expected = self._expected
        if expected is not None and self.finished >= expected and self.dispatched <= self.applied:
            self._complete.set()


class LocalRun:
    """`run_local` on one queue in a background thread, for as long as the ``with`` lasts."""

    def __init__(
        self,
        storage: Storage,
        queue: str,
        handler: Callable[[Any], object],
        *,
        prefix: str,
        workers: int,
        listener: Tracker,
    ) -> None:
        self.stop = threading.Event()
        self.summary: RunSummary | None = None
        self.failure: BaseException | None = None
        self.started = 0.0
        self._kwargs: dict[str, Any] = {
            "storage": storage,
            "prefix": prefix,
            "workers": workers,
            "listener": listener,
            "stop": self.stop,
        }
        self._handlers = {queue: handler}
        self._thread = threading.Thread(target=self._run, name="bench-runtime", daemon=True)

    def _run(self) -> None:
        try:
            self.summary = run_local(self._handlers, **self._kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.failure = exc
            self.stop.set()

    @contextmanager
    def running(self) -> Iterator[LocalRun]:
        self.started = time.monotonic()
        self._thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            self._thread.join(timeout=120)
        if self.failure is not None:
            raise self.failure


def noop(_message: Any) -> None:
    """The benchmark handler: does nothing, so the queue's own cost is what is measured."""

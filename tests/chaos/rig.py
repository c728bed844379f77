"""`Bench`: one queue driven by hand, step by step, with every event in a `History`.

Like ``tests/harness.py`` (MemoryStorage, a FakeClock, invocations in a list), but each
coordinator and worker is a named process whose storage can crash or pause at a chosen call,
and the run ends with the checker: for crash-point matrices and races set up call by call.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from s3queue.common.clock import FakeClock, SystemClock
from s3queue.common.concurrency import in_order
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.errors import S3QueueError
from s3queue.producing.producer import Queue
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Storage
from s3queue.working.worker import Worker, WorkResult

from chaos import checker, workload
from chaos.actors import QUEUE
from chaos.history import FinalState, History, Oracle, live_work, snapshot
from chaos.process import CrashAt, ProcessStorage, SkewedClock
from chaos.scenario import KEYS, PREFIX

Hook = Callable[[int, str, str], None]
"""Called before a process's storage call: (index, operation, key)."""


class Paused(ProcessStorage):
    """A process's storage that runs `hook` before each call: to let others act "meanwhile"."""

    def __init__(self, inner: Storage, actor: str, hook: Hook, **kwargs: Any) -> None:
        super().__init__(inner, actor, **kwargs)
        self.hook = hook

    def _call(self, op: str, key: str, run: Callable[[], Any], body: bytes | None = None) -> Any:
        self.hook(len(self.calls), op, key)
        return super()._call(op, key, run, body)


class Bench:
    """A queue, its processes and their invocations, all driven by the test."""

    def __init__(
        self,
        settings: QueueSettings | None = None,
        coordination: CoordinatorSettings | None = None,
        *,
        max_retries: int | None = None,
        backend: Storage | None = None,
    ) -> None:
        self.settings = settings or QueueSettings(
            visibility_timeout=30, max_retries=max_retries or 2, max_message_bytes=4096
        )
        self.coordination = coordination or CoordinatorSettings()
        # On a real server, start at the real time: S3 stamps Last-Modified with it.
        self.clock = FakeClock(SystemClock().now_ms()) if backend is not None else FakeClock()
        self.history = History(self.clock.now_ms)
        self.backend: Storage = backend or MemoryStorage(self.clock)
        """Where the queue lives: MemoryStorage, or an S3Storage on a real server."""
        self.storage = self.oracle(self.backend)
        self.invocations: list[dict[str, Any]] = []
        self.queue = Queue(
            QUEUE,
            storage=self.storage,
            clock=self.clock,
            prefix=PREFIX,
            max_message_bytes=self.settings.max_message_bytes,
            listener=self.history.listener("producer"),
        )
        self.expected = workload.Expected()
        self.producer = workload.Producer(self.queue, self.history, self.expected, random.Random(1))

    def oracle(self, storage: Storage) -> Oracle:
        """`storage` with its ticket writes recorded in the history."""
        return Oracle(storage, self.history, KEYS.tickets)

    def process_storage(
        self, name: str, *, crash_at: CrashAt | None = None, hook: Hook | None = None
    ) -> ProcessStorage:
        if hook is not None:
            return Paused(self.storage, name, hook, history=self.history, crash_at=crash_at)
        return ProcessStorage(self.storage, name, history=self.history, crash_at=crash_at)

    def coordinator(
        self, name: str, storage: Storage | None = None, offset_ms: int = 0
    ) -> Coordinator:
        return Coordinator(
            storage or self.process_storage(name),
            QUEUE,
            invoker=self.invocations.append,
            prefix=PREFIX,
            settings=self.settings,
            coordination=self.coordination,
            clock=SkewedClock(self.clock, offset_ms),
            owner=name,
            listener=self.history.listener(name),
            run_all=in_order,  # a block's tickets one by one: every call is a crash point
        )

    def worker(self, name: str, storage: Storage | None = None, offset_ms: int = 0) -> Worker:
        return Worker(
            storage or self.process_storage(name),
            QUEUE,
            prefix=PREFIX,
            settings=self.settings,
            coordination=self.coordination,
            clock=SkewedClock(self.clock, offset_ms),
            rng=random.Random(name),
            owner=name,
            listener=self.history.listener(name),
            read_ahead=in_order,
        )

    def handler(self, worker: Worker) -> Callable[[Any], None]:
        """The workload handler; a message's ``ms`` passes on the bench's clock."""
        clock = worker.clock
        return workload.handler(
            self.history, worker.owner, self.clock.advance, clock.now_ms, lambda: 2**62
        )

    def work(self, worker: Worker, **kwargs: Any) -> list[WorkResult]:
        """Process every pending invocation with `worker`, oldest first. An S3QueueError fails
        that invocation only, as in the worker Lambda (logged; the protocol recovers)."""
        results = []
        while self.invocations:
            payload = self.invocations.pop(0)
            try:
                results.append(worker.process(payload, self.handler(worker), **kwargs))
            except S3QueueError as exc:
                self.history.record("worker_error", worker.owner, error=repr(exc))
        return results

    def expire(self) -> None:
        """Move the clock past any lease, claim and dispatch timeout."""
        c, s = self.coordination, self.settings
        self.clock.advance(max(c.lease_ttl, s.visibility_timeout, c.dispatch_timeout))
        self.clock.advance(c.skew_tolerance + 1)

    def drain(self, coordinator: Coordinator, worker: Worker, *, rounds: int = 300) -> None:
        """Tick and work until nothing is left in the queue."""
        for _ in range(rounds):
            tick = coordinator.tick()
            self.work(worker)
            if tick.dispatched == 0 and self.empty():
                return
            if tick.dispatched == 0:
                self.clock.advance(1.0)
        raise AssertionError(f"not drained after {rounds} rounds: {self.queue.stats()}")

    def empty(self) -> bool:
        return not live_work(self.backend, KEYS)

    def final(self) -> FinalState:
        return snapshot(self.backend, KEYS)

    def check(self, *, drained: bool = True, skew_ms: int = 0) -> checker.Report:
        s = self.settings
        expect = checker.Expect(
            max_retries=s.max_retries,
            visibility_ms=round(s.visibility_timeout * 1000),
            backoff_base=s.backoff_base,
            backoff_cap=s.backoff_cap,
            poison=frozenset(self.expected.poison),
            dead_at_once=frozenset(self.expected.dead_at_once),
            maybe_dead=frozenset(self.expected.maybe_dead),
            skew_ms=skew_ms,
            drained=drained,
        )
        return checker.check(list(self.history), self.final(), expect)

    def spec(self, n: int, kind: str = "ok", **body: Any) -> workload.Spec:
        return workload.Spec(n, kind, {"n": n, "kind": kind, "ms": 100, **body})

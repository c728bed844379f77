"""A deterministic single-threaded queue system on MemoryStorage and a FakeClock."""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from typing import Any, ClassVar

from s3queue.common.clock import FakeClock
from s3queue.common.concurrency import in_order
from s3queue.common.events import Event
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.coordinator import Coordinator, TickResult
from s3queue.message import Message
from s3queue.producing.producer import Queue
from s3queue.storage import MemoryStorage, Storage
from s3queue.working.guard import WorkerKilled
from s3queue.working.worker import Worker, WorkResult

QUEUE = "jobs"


class Crash(WorkerKilled):
    """Raised by a test handler to stop the worker dead, as a killed process would."""


class Harness:
    """One queue, a coordinator, a worker and a list of invocations, all driven by hand."""

    def __init__(
        self,
        *,
        settings: QueueSettings | None = None,
        coordination: CoordinatorSettings | None = None,
        storage: Storage | None = None,
        clock: FakeClock | None = None,
        seed: int = 7,
        chain: bool = False,
    ) -> None:
        self.chain = chain
        """Coordinator and workers park and chain successors (as the Lambda functions do)."""
        self.clock = clock or FakeClock()
        self.storage: Storage = storage if storage is not None else MemoryStorage(self.clock)
        self.settings = settings or QueueSettings()
        self.coordination = coordination or CoordinatorSettings()
        self.events: list[Event] = []
        self.invocations: list[dict[str, Any]] = []
        self.queue = Queue(QUEUE, storage=self.storage, clock=self.clock)
        self.coordinator = self.new_coordinator("c1")
        self.worker = self.new_worker("w1", seed)

    def new_coordinator(self, owner: str) -> Coordinator:
        return Coordinator(
            self.storage,
            QUEUE,
            invoker=self.invocations.append,
            settings=self.settings,
            coordination=self.coordination,
            clock=self.clock,
            owner=owner,
            listener=self.events.append,
            run_all=in_order,
            chain=self.chain,
        )

    def new_worker(self, owner: str, seed: int = 7) -> Worker:
        return Worker(
            self.storage,
            QUEUE,
            settings=self.settings,
            coordination=self.coordination,
            clock=self.clock,
            rng=random.Random(seed),
            owner=owner,
            listener=self.events.append,
            read_ahead=in_order,
            chain=self.chain,
        )

    def tick(self) -> TickResult:
        return self.coordinator.tick()

    def work(
        self,
        handler: Callable[[Message], object],
        *,
        worker: Worker | None = None,
        remaining_ms: Callable[[], int] | None = None,
    ) -> list[WorkResult]:
        """Process every pending invocation, oldest first."""
        results = []
        while self.invocations:
            payload = self.invocations.pop(0)
            results.append(
                (worker or self.worker).process(payload, handler, remaining_ms=remaining_ms)
            )
        return results

    def drain(
        self, handler: Callable[[Message], object], *, rounds: int = 500, step: float = 1.0
    ) -> int:
        """Tick and work until nothing is left; the clock moves `step` s on idle rounds."""
        for count in range(rounds):
            result = self.tick()
            self.work(handler)
            if result.dispatched == 0:
                stats = self.queue.stats()
                if not (stats["pending"] or stats["delayed"] or stats["in_flight"]):
                    return count
                self.clock.advance(step)
        raise AssertionError(f"not drained after {rounds} rounds: {self.queue.stats()}")

    def kinds(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def keys(self, prefix: str = "", *, tombstones: bool = False) -> list[str]:
        """Keys under the queue's root + prefix; consumed copies' tombstones only if asked."""
        root = self.queue.keys.root + prefix
        keys: list[str] = []
        start = None
        while True:
            page = self.storage.list(root, start_after=start)
            keys += [e.key for e in page.entries if e.size or tombstones]
            if not page.truncated:
                return keys
            start = page.entries[-1].key


class Recorder:
    """A handler that records every message it sees and fails as told."""

    def __init__(self, fail: Callable[[Message], BaseException | None] | None = None) -> None:
        self.seen: list[Message] = []
        self.fail = fail

    def __call__(self, message: Message) -> None:
        self.seen.append(message)
        error = self.fail(message) if self.fail else None
        if error is not None:
            raise error

    def bodies(self) -> list[Any]:
        return [m.body for m in self.seen]


class CountingStorage:
    """Wraps a storage and counts calls by kind (one call = one S3 request)."""

    KINDS: ClassVar[dict[str, str]] = {
        "get": "GET",
        "head": "HEAD",
        "put": "PUT",
        "delete": "DELETE",
        "delete_many": "DELETE",
        "list": "LIST",
        "list_folders": "LIST",
    }

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.counts: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        kind = self.KINDS.get(name)
        if kind is None:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            return attr(*args, **kwargs)

        return counted

    def reset(self) -> dict[str, int]:
        counts, self.counts = self.counts, {}
        return counts


class Unseekable(io.RawIOBase):
    """A pipe-like source: read only, no seek, no size."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._data.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

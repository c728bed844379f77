"""`s3queue worker` warns while no coordinator dispatches its queues (it would wait forever)."""

from __future__ import annotations

import threading

from s3queue import Queue
from s3queue.common.clock import FakeClock
from s3queue.dispatching.coordinator import Coordinator
from s3queue.local.dispatchers import DispatcherWatch, dispatched
from s3queue.storage.memory import MemoryStorage


def test_a_worker_warns_once_while_nothing_dispatches_and_says_when_something_does() -> None:
    # GIVEN a bucket with a message in queue jobs, and no coordinator anywhere
    clock = FakeClock()
    storage = MemoryStorage(clock)
    Queue("jobs", storage=storage).enqueue({"n": 1})
    said: list[str] = []
    watch = DispatcherWatch(storage, "s3queue", ["jobs", "mail"], said.append, bucket="b")
    watch.clock = clock
    # WHEN the worker looks, twice
    assert watch.check() is False
    assert watch.check() is False
    # THEN it warned once, naming the bucket and the queues
    assert len(said) == 1
    assert "no dispatcher" in said[0] and "bucket b" in said[0] and "jobs, mail" in said[0]
    # WHEN a coordinator leads jobs (its tick writes the lease)
    Coordinator(storage, "jobs", invoker=lambda payload: None, clock=clock).tick()
    # THEN the next look finds it and says so once
    assert watch.check() is True
    assert said[1] == "a dispatcher leads jobs now"
    assert watch.check() is True and len(said) == 2
    # WHEN that coordinator is gone for longer than three schedule periods
    clock.advance(181)
    # THEN the worker warns again
    assert watch.check() is False and "no dispatcher" in said[2]


def test_a_lease_written_recently_counts_however_its_holder_left() -> None:
    clock = FakeClock()
    storage = MemoryStorage(clock)
    Coordinator(storage, "jobs", invoker=lambda payload: None, clock=clock).tick()
    clock.advance(179)
    assert dispatched(storage, "s3queue", ["jobs", "mail"], clock.now_ms()) == ["jobs"]


def test_the_watch_looks_at_start_and_stops_with_the_worker() -> None:
    said: list[str] = []
    stop = threading.Event()
    watch = DispatcherWatch(MemoryStorage(), "s3queue", ["jobs"], said.append)
    stop.set()
    watch.start(stop, every=3600).join()
    assert len(said) == 1

"""Per-partition limits: partition_rate_limit and partition_concurrency, and stats()["held"]."""

from __future__ import annotations

from collections import Counter

import pytest
from harness import Harness
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.limits import WINDOW_MS
from s3queue.errors import ConfigError
from s3queue.message import Message
from s3queue.storage.base import Storage

PARTITIONS = ("acme", "tiny")


class Starts:
    """A handler that records each start (its partition, by the worker's clock)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.at: list[tuple[int, str | None, Message]] = []

    def __call__(self, message: Message) -> None:
        self.at.append((self.h.clock.now_ms(), message.body["p"], message))
        self.h.clock.advance(0.01)

    def per_window(self) -> Counter[tuple[str | None, int]]:
        return Counter((p, at // WINDOW_MS) for at, p, _ in self.at)


def _limited(storage: Storage | None = None, **settings: int) -> Harness:
    return Harness(storage=storage, settings=QueueSettings.from_mapping(settings))


def _fill(h: Harness, counts: dict[str, int]) -> int:
    for partition, count in counts.items():
        for i in range(count):
            h.queue.enqueue({"p": partition, "n": i}, partition=partition)
    return sum(counts.values())


def _run(h: Harness, handler: Starts, rounds: int = 600) -> list[dict[str, int]]:
    """Tick, then work, a tenth of a second a round, until drained; each tick's held counts."""
    held = []
    for _ in range(rounds):
        held.append(h.tick().held)
        h.work(handler)
        stats = h.queue.stats()
        if not (stats["pending"] or stats["delayed"] or stats["in_flight"]):
            return held
        h.clock.advance(0.1)
    raise AssertionError(f"not drained: {h.queue.stats()}")


def test_no_partition_starts_more_than_its_rate_in_a_second(storage: Storage) -> None:
    h = _limited(storage, partition_rate_limit=3, batch_size=4)
    total = _fill(h, {"acme": 20, "tiny": 6})
    handler = Starts(h)
    held = _run(h, handler)
    assert len(handler.at) == total
    assert all(m.attempt == 1 for _, _, m in handler.at) and h.queue.stats()["dead"] == 0
    windows = handler.per_window()
    assert max(windows.values()) <= 3, windows
    # the limit is per partition: both partitions started in one second, 6 > 3 together
    seconds = Counter(at // WINDOW_MS for at, _, _ in handler.at)
    assert max(seconds.values()) > 3
    assert any(h_["partition_rate_limit"] for h_ in held)


def test_a_partition_never_has_more_in_flight_than_its_cap(storage: Storage) -> None:
    h = _limited(storage, partition_concurrency=3, batch_size=2)
    total = _fill(h, {"acme": 12, "tiny": 2})
    handler = Starts(h)
    seen = []
    for _ in range(100):  # tick, check what is in flight, then finish one ticket only
        h.tick()
        partitions = h.queue.stats()["partitions"]
        seen.append({p: partitions.get(p, {}).get("in_flight", 0) for p in PARTITIONS})
        if h.invocations:
            h.worker.process(h.invocations.pop(0), handler)
        if len(handler.at) == total and not h.invocations:
            break
        h.clock.advance(0.1)
    assert len(handler.at) == total and all(m.attempt == 1 for _, _, m in handler.at)
    assert max(s["acme"] for s in seen) == 3  # the cap was reached, never passed
    # the small partition was never held back behind the big one's cap
    assert seen[0]["tiny"] == 2


def test_a_pack_larger_than_the_cap_goes_alone() -> None:
    h = _limited(partition_concurrency=3)
    h.queue.enqueue_many([{"p": "acme", "n": i} for i in range(5)], partition="acme")
    h.queue.enqueue({"p": "acme", "n": 5}, partition="acme")
    h.tick()
    assert len(h.invocations) == 1  # the pack, and nothing beside it
    assert h.tick().held["partition_concurrency"] == 1
    handler = Starts(h)
    _run(h, handler)
    assert len(handler.at) == 6


def test_stats_shows_what_is_held_and_why(storage: Storage) -> None:
    h = _limited(storage, rate_limit=4, partition_concurrency=2, batch_size=1)
    _fill(h, {"acme": 10})
    result = h.tick()
    # concurrency binds first (2 < 4): acme has 2 out, 8 wait behind its cap
    assert result.held == {"rate_limit": 0, "partition_rate_limit": 0, "partition_concurrency": 8}
    held = h.queue.stats()["held"]
    assert held == {
        "rate_limit": 0,
        "partition_rate_limit": 0,
        "partition_concurrency": 8,
        "paused": 0,
    }
    h.queue.pause()
    assert h.queue.stats()["held"]["paused"] == 8


def test_a_queue_without_limits_writes_no_report() -> None:
    h = Harness()
    h.queue.enqueue("x")
    h.tick()
    assert not h.keys("budgets/")
    assert h.queue.stats()["held"] == {
        "rate_limit": 0,
        "partition_rate_limit": 0,
        "partition_concurrency": 0,
        "paused": 0,
    }


def test_partition_limit_settings_are_checked() -> None:
    s = QueueSettings.from_mapping({"partition_rate_limit": 5, "partition_concurrency": 2})
    assert (s.partition_rate_limit, s.partition_concurrency) == (5, 2)
    for name in ("partition_rate_limit", "partition_concurrency"):
        with pytest.raises(ConfigError, match=name):
            QueueSettings.from_mapping({name: -1})

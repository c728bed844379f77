"""Budget: S3 requests per message, by kind, for a drained queue; deterministic counts.

On SeaweedFS the requests are counted where they leave boto3 (a botocore event hook), so
SDK retries would count too; on MemoryStorage each storage call is one request. Both must
give the same figures, which the protocol document derives by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from harness import CountingStorage, Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.local.metering import RequestCounter
from s3queue.storage import MemoryStorage, Storage
from s3queue.storage.s3 import S3Storage

N = 100
SINGLE = {"PUT": 131, "GET": 111, "LIST": 6, "DELETE": 20, "HEAD": 0}
PACKED = {"PUT": 5, "GET": 3, "LIST": 6, "DELETE": 2, "HEAD": 0}
# LIST: the first tick lists the partition folders (``parts/``) and the inbox once; the clock
# stands still, so the drain's other ticks are within `discover_interval` of it and skip the
# empty inbox (folders.py): tickets and msg/ only. PUT (single): the tick that publishes the
# ten tickets at once needs no lease PUT to reserve their seqs: the lease's creation did (lease.py).


def drain_costs(
    storage: Storage, counts: Callable[[], dict[str, int]], enqueue: Callable[[Harness], None]
) -> dict[str, int]:
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)
    h = Harness(storage=storage, clock=clock, settings=QueueSettings(batch_size=10))
    enqueue(h)
    handler = Recorder()
    while True:
        result = h.tick()
        h.work(handler)
        if not (result.dispatched or result.live_tickets):
            break
    spent = {k: v for k, v in counts().items() if k in SINGLE}
    assert len(handler.seen) == N
    assert h.keys("msg/") == [] and h.keys("tickets/") == []
    return spent


def single(h: Harness) -> None:
    for i in range(N):
        h.queue.enqueue({"n": i})


def packed(h: Harness) -> None:
    h.queue.enqueue_many({"n": i} for i in range(N))


def _memory() -> tuple[Storage, Callable[[], dict[str, int]]]:
    counting = CountingStorage(MemoryStorage())
    return counting, lambda: {k: counting.counts.get(k, 0) for k in SINGLE}


@pytest.mark.parametrize(("enqueue", "expected"), [(single, SINGLE), (packed, PACKED)])
def test_requests_per_message_in_memory(enqueue: Any, expected: dict[str, int]) -> None:
    storage, counts = _memory()
    assert drain_costs(storage, counts, enqueue) == expected


@pytest.mark.s3
@pytest.mark.parametrize(("enqueue", "expected"), [(single, SINGLE), (packed, PACKED)])
def test_requests_per_message_on_s3(
    s3_client: Any, bucket: str, enqueue: Any, expected: dict[str, int]
) -> None:
    counter = RequestCounter.attach(s3_client)
    storage = S3Storage(s3_client, bucket)
    assert drain_costs(storage, counter.counts, enqueue) == expected


def test_budget_targets() -> None:
    assert sum(SINGLE.values()) / N <= 3.0  # 2.69 requests per message
    assert sum(PACKED.values()) / N <= 0.2  # 0.17 requests per message

"""Unit: a coordinator tick costs the same number of requests whatever the backlog."""

from __future__ import annotations

import pytest
from harness import CountingStorage, Harness, Recorder
from s3queue.clock import FakeClock
from s3queue.config import QueueSettings
from s3queue.keys import MsgKey
from s3queue.model import encode_records, record_for
from s3queue.storage import MemoryStorage


def _backlog(storage: MemoryStorage, h: Harness, count: int) -> None:
    now = h.clock.now_ms()
    for i in range(count):
        key = h.queue.keys.msg_key(MsgKey(now - count + i, f"m{i:07d}"))
        storage.put(key, encode_records([record_for(f"m{i:07d}", i, now)], "t"))


def _tick_costs(backlog: int) -> list[dict[str, int]]:
    clock = FakeClock()
    inner = MemoryStorage(clock)
    storage = CountingStorage(inner)
    h = Harness(
        storage=storage, clock=clock, settings=QueueSettings(batch_size=10, max_in_flight_tickets=8)
    )
    _backlog(inner, h, backlog)
    clock.advance(1)
    storage.reset()
    costs = []
    for _ in range(4):
        h.tick()
        costs.append(storage.reset())
        h.tick()  # nothing finished since the last tick: saturated
        costs.append(storage.reset())
        h.work(Recorder())  # finish every ticket (worker requests are not the tick's)
        storage.reset()
    return costs


@pytest.mark.parametrize("backlog", [10_000, 100_000])
def test_tick_cost_is_flat_in_the_backlog(backlog: int) -> None:
    assert _tick_costs(backlog) == _tick_costs(1_000)  # the same requests, kind by kind


def test_tick_cost_figures() -> None:
    costs = _tick_costs(1_000)
    # first tick: lease GET + PUT, LIST tickets, LIST inbox, LIST parts/ (the partitions),
    # LIST msg/, a lease PUT reserving a block of 64 seqs, 8 ticket PUTs
    assert costs[0] == {"GET": 1, "PUT": 10, "LIST": 4}
    # later dispatching ticks (within `discover_interval` of the first, and the block): LIST
    # tickets, LIST inbox, LIST msg/ from the cursor, 8 PUTs
    assert costs[2] == {"LIST": 3, "PUT": 8}
    # a saturated tick: one LIST of tickets
    assert costs[1] == costs[3] == {"LIST": 1}

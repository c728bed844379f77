"""Unit: a coordinator tick costs the same number of requests whatever the backlog."""

from __future__ import annotations

import pytest
from harness import CountingStorage, Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.protocol.keys import MsgKey
from s3queue.protocol.records import encode_records, record_for
from s3queue.storage import MemoryStorage


def _backlog(storage: MemoryStorage, h: Harness, count: int) -> None:
    now = h.clock.now_ms()
    for i in range(count):
        key = h.queue.keys.msg_key(MsgKey(now - count + i, f"m{i:07d}"))
        storage.put(key, encode_records([record_for(f"m{i:07d}", i, now)], "t"))


def _tick_costs(backlog: int, max_batch_size: int = 10) -> list[dict[str, int]]:
    """Tickets of 10 by default (max_batch_size 10: no elastic growth, sizing.py), so that
    every dispatching tick has the same work whatever the backlog."""
    clock = FakeClock()
    inner = MemoryStorage(clock)
    storage = CountingStorage(inner)
    settings = QueueSettings(batch_size=10, max_batch_size=max_batch_size, max_in_flight_tickets=8)
    h = Harness(storage=storage, clock=clock, settings=settings)
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
    # first tick: lease GET + PUT (which reserves the epoch's first block of 64 seqs), LIST
    # tickets, LIST inbox, LIST parts/ (the partitions), LIST msg/, 8 ticket PUTs
    assert costs[0] == {"GET": 1, "PUT": 9, "LIST": 4}
    # later dispatching ticks (within `discover_interval` of the first, and the block): LIST
    # tickets, LIST msg/ from the cursor, 8 PUTs; the inbox was empty: listed again only with
    # the partition folders (folders.py)
    assert costs[2] == {"LIST": 2, "PUT": 8}
    # a saturated tick: one LIST of tickets
    assert costs[1] == costs[3] == {"LIST": 1}


def test_grown_tickets_keep_a_tick_bounded_in_a_deep_backlog() -> None:
    """With elastic tickets a tick reads up to `scan_pages` pages of msg/ (2,000 keys) to fill
    its grown tickets: still a bound, whatever the backlog."""
    pages = CoordinatorSettings().scan_pages
    for cost in _tick_costs(100_000, max_batch_size=1000)[2::2]:
        assert cost["LIST"] <= 2 + pages and cost["PUT"] <= 8 + 1  # a block reservation

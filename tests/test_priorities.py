"""Priorities: lanes of a partition, read and served highest first; FIFO groups untouched."""

from __future__ import annotations

import time

import pytest
from harness import Harness, Recorder
from s3queue import Item
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.view import by_priority, prioritized_shares
from s3queue.errors import InvalidArgument
from s3queue.message import Message
from s3queue.protocol.keys import QueueKeys, lane_name, split_lane
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Storage

LOW, HIGH = 300, 10


def _starts(seen: list[Message]) -> tuple[list[int], int]:
    """Where each priority-9 message started, and where the 100th priority-0 one did."""
    high = [i for i, m in enumerate(seen) if m.body.get("high") is not None]
    low = [i for i, m in enumerate(seen) if m.body.get("low") is not None]
    return high, low[99]


def test_ten_urgent_messages_start_before_the_hundredth_of_a_backlog(storage: Storage) -> None:
    # GIVEN 300 priority-0 messages (in packs of 10 on S3, to keep it quick), THEN 10 of 9
    h = Harness(storage=storage, settings=QueueSettings(batch_size=10, max_in_flight_tickets=8))
    if isinstance(storage, MemoryStorage):
        for i in range(LOW):
            h.queue.enqueue({"low": i})
    else:
        for pack in range(LOW // 10):
            h.queue.enqueue_many({"low": pack * 10 + i} for i in range(10))
    h.clock.advance(1)
    for i in range(HIGH):
        h.queue.enqueue({"high": i}, priority=9)
    # WHEN the queue is drained
    handler = Recorder()
    h.drain(handler, rounds=1_000)
    # THEN every urgent one started before the 100th of the backlog (in the first round)
    high, hundredth = _starts(handler.seen)
    assert len(handler.seen) == LOW + HIGH and max(high) < hundredth
    assert all(m.partition is None and m.attempt == 1 for m in handler.seen)


def test_without_priorities_the_same_messages_wait_behind_the_backlog() -> None:
    h = Harness(settings=QueueSettings(batch_size=10, max_in_flight_tickets=8))
    for i in range(LOW):
        h.queue.enqueue({"low": i})
    h.clock.advance(1)
    for i in range(HIGH):
        h.queue.enqueue({"high": i})
    handler = Recorder()
    h.drain(handler, rounds=1_000)
    high, hundredth = _starts(handler.seen)
    assert min(high) > hundredth


def test_an_urgent_message_waits_at_most_one_round_behind_tickets_already_out() -> None:
    """Priority orders what waits; it never preempts a ticket already published."""
    h = Harness(settings=QueueSettings(batch_size=10, max_in_flight_tickets=4))
    for i in range(LOW):
        h.queue.enqueue({"low": i})
    assert h.tick().dispatched == 40  # every slot taken by the backlog
    h.queue.enqueue({"high": 0}, priority=5)
    handler = Recorder()
    h.drain(handler, rounds=1_000)
    high, _ = _starts(handler.seen)
    assert high == [40]  # first of the next round


def test_priorities_compose_with_partitions() -> None:
    """Strict across the queue, fair within a priority: a partition's urgent messages go before
    any partition's ordinary ones, and two partitions' urgent ones share the slots."""
    h = Harness(settings=QueueSettings(batch_size=5, max_in_flight_tickets=4))
    for i in range(100):
        h.queue.enqueue({"low": i}, partition="big")
    h.clock.advance(1)
    for i in range(10):
        h.queue.enqueue({"high": i, "p": "a"}, partition="a", priority=7)
        h.queue.enqueue({"high": i, "p": "b"}, partition="b", priority=7)
    result = h.tick()
    assert result.dispatched == 20  # 4 slots: 2 for a's urgent, 2 for b's, none for big
    handler = Recorder()
    h.work(handler)
    assert {m.partition for m in handler.seen} == {"a", "b"}
    h.drain(handler, rounds=1_000)
    assert len(handler.seen) == 120
    stats = h.queue.stats()
    assert set(stats["partitions"]) <= {"", "a", "b", "big"}  # lanes count as their partition


def test_shares_are_strict_across_priorities_and_fair_within_one() -> None:
    assert prioritized_shares([5, 5, 5], [0, 9, 9], 4) == [0, 2, 2]
    assert prioritized_shares([1, 5, 1], [9, 0, 5], 4) == [1, 2, 1]
    assert prioritized_shares([3, 3], [0, 0], 4) == [2, 2]
    assert by_priority([None, "~2", "a", "a~9", "b~2"]) == ["a~9", "~2", "b~2", None, "a"]


def test_lanes_are_folders_named_by_partition_and_priority() -> None:
    keys = QueueKeys("s3queue", "q")
    assert lane_name(None, 0) is None and lane_name("acme", 0) == "acme"
    assert lane_name(None, 9) == "~9" and lane_name("acme", 3) == "acme~3"
    assert split_lane("acme~3") == ("acme", 3) and split_lane("~9") == (None, 9)
    assert split_lane("acme") == ("acme", 0) and split_lane(None) == (None, 0)
    key = "s3queue/q/parts/acme~3/0000000000001-X"
    assert keys.partition_of(key) == "acme" and keys.lane_of(key) == "acme~3"
    assert keys.owning(key).msg == "s3queue/q/parts/acme~3/"
    assert keys.partition_of("s3queue/q/inbox/~9/x.json") is None
    assert keys.lane_of("s3queue/q/inbox/~9/x.json") == "~9"
    assert keys.lane_of("s3queue/q/inbox/~0/x.json") is None  # not a lane: a name's folder


def test_enqueue_writes_into_the_lane_and_checks_the_priority() -> None:
    h = Harness()
    h.queue.enqueue("x", priority=9)
    h.queue.enqueue("y", priority=2, partition="acme")
    h.queue.enqueue_many(["a", Item("b", priority=4), Item("c", priority=0)], priority=1)
    folders = sorted({k.rsplit("/", 1)[0] for k in h.keys("parts/")})
    root = h.queue.keys.parts
    assert folders == [root + f for f in ("acme~2", "~1", "~4", "~9")]
    assert len(h.keys("msg/")) == 1  # c: priority 0 is the partition's own folder
    for bad in (10, -1, True, "9", 1.0):
        with pytest.raises(InvalidArgument, match="priority"):
            h.queue.enqueue("z", priority=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="priority"):
            h.queue.enqueue_many([Item("z", priority=bad)])  # type: ignore[arg-type]


def test_a_group_keeps_its_order_and_takes_no_priority() -> None:
    h = Harness(settings=QueueSettings(batch_size=3, max_in_flight_tickets=4))
    with pytest.raises(InvalidArgument, match="group"):
        h.queue.enqueue("x", group="g", priority=3)
    with pytest.raises(InvalidArgument, match="group"):
        h.queue.enqueue_many([Item("x", group="g")], priority=3)
    # GIVEN a group's messages interleaved with urgent ungrouped ones
    for i in range(12):
        h.queue.enqueue({"g": i}, group="g")
        h.queue.enqueue({"high": i}, priority=9)
    handler = Recorder()
    h.drain(handler, rounds=1_000)
    grouped = [m.body["g"] for m in handler.seen if "g" in m.body]
    assert grouped == list(range(12))
    high = [i for i, m in enumerate(handler.seen) if "high" in m.body]
    assert high == list(range(12))  # the urgent ones all went first


def test_a_retry_stays_in_its_lane_and_a_dead_letter_names_its_partition() -> None:
    h = Harness(settings=QueueSettings(max_retries=1, backoff_base=0))
    h.queue.enqueue({"n": 1}, partition="acme", priority=6)
    handler = Recorder(fail=lambda m: ValueError("no"))
    h.drain(handler)
    assert [m.attempt for m in handler.seen] == [1, 2]
    assert all(m.partition == "acme" for m in handler.seen)
    [dead] = h.queue.dead_letters()
    assert dead["partition"] == "acme"
    assert h.queue.redrive() == 1
    assert [k.split("/")[-2] for k in h.keys("parts/")] == ["acme~6"]  # back into its lane


def test_a_plain_put_names_its_priority_in_its_folder(storage: Storage) -> None:
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)  # the inbox's times are S3's
    settings = QueueSettings(batch_size=5, max_in_flight_tickets=2)
    h = Harness(storage=storage, settings=settings, clock=clock)
    for i in range(30):
        h.queue.enqueue({"low": i})
    h.clock.advance(1)
    h.storage.put(h.queue.keys.inbox + "~9/urgent.json", b'{"high": 1}')
    h.storage.put(h.queue.keys.inbox + "acme~9/urgent.json", b'{"high": 2}')
    handler = Recorder()
    h.drain(handler, rounds=1_000)
    firsts = handler.seen[:2]
    assert sorted(m.body["high"] for m in firsts) == [1, 2]
    assert {m.partition for m in firsts} == {None, "acme"}

"""Partitions: enqueued into, served fairly, counted, and kept through retries and the DLQ."""

from __future__ import annotations

import json
import time

import pytest
from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.probe import probe
from s3queue.dispatching.view import fair_shares
from s3queue.errors import InvalidArgument
from s3queue.message import Message
from s3queue.storage.s3 import S3Storage

BIG, SMALL = 5_000, 10


def _fairness_run(*, partitioned: bool) -> list[Message]:
    """A 5,000-message backlog, then 10 messages of another tenant; the handled order."""
    h = Harness(settings=QueueSettings(batch_size=10, max_in_flight_tickets=8))
    for i in range(BIG):
        h.queue.enqueue({"n": i}, partition="big" if partitioned else None)
    h.clock.advance(1)
    for i in range(SMALL):
        h.queue.enqueue({"small": i}, partition="small" if partitioned else None)
    handler = Recorder()
    h.drain(handler, rounds=2_000)
    assert len(handler.seen) == BIG + SMALL
    return handler.seen


def _last_small(seen: list[Message]) -> int:
    return max(i for i, m in enumerate(seen) if "small" in m.body)


def test_a_small_partition_is_served_in_the_first_round_behind_a_big_backlog() -> None:
    seen = _fairness_run(partitioned=True)
    # The first tick shares 8 tickets: 1 for the small partition (its 10 messages), 7 for the
    # big one. Every small message is among the first round's 80.
    assert _last_small(seen) < 8 * 10
    assert {m.partition for m in seen} == {"big", "small"}
    assert all(m.partition == ("small" if "small" in m.body else "big") for m in seen)


def test_without_partitions_the_same_messages_wait_behind_the_backlog() -> None:
    seen = _fairness_run(partitioned=False)
    assert _last_small(seen) == BIG + SMALL - 1  # served last: what partitions are for
    assert {m.partition for m in seen} == {None}


def test_fair_shares_take_turns_before_anyone_gets_a_second() -> None:
    assert fair_shares([8, 1], 8) == [7, 1]
    assert fair_shares([3, 3, 3], 4) == [2, 1, 1]  # the earlier turn gets the odd one
    assert fair_shares([0, 5, 1], 3) == [0, 2, 1]
    assert fair_shares([2, 2], 10) == [2, 2]
    assert fair_shares([], 3) == []


def test_turns_rotate_when_capacity_is_short_of_the_partitions() -> None:
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=1))
    for name in ("a", "b", "c"):
        for i in range(3):
            h.queue.enqueue({"p": name, "i": i}, partition=name)
    handler = Recorder()
    h.drain(handler)
    first_round = [m.partition for m in handler.seen[:3]]
    assert sorted(first_round) == ["a", "b", "c"]  # one ticket each before any second
    assert [m.body["i"] for m in handler.seen if m.partition == "b"] == [0, 1, 2]


def test_more_partitions_than_a_tick_reads_are_all_served() -> None:
    h = Harness(
        settings=QueueSettings(batch_size=10, max_in_flight_tickets=4),
        coordination=CoordinatorSettings(partitions_per_tick=3),
    )
    names = [f"tenant-{i}" for i in range(10)]
    for name in names:
        h.queue.enqueue({"p": name}, partition=name)
    handler = Recorder()
    h.drain(handler)
    assert sorted(m.partition for m in handler.seen) == sorted(names)


def test_plain_puts_into_an_inbox_folder_are_that_partitions() -> None:
    h = Harness()
    h.storage.put(h.queue.keys.inbox + "acme/order-1.json", b'{"order": 1}')
    h.storage.put(h.queue.keys.inbox + "order-2.json", b'{"order": 2}')
    h.storage.put(h.queue.keys.inbox + "not a partition!/order-3.json", b'{"order": 3}')
    assert h.queue.stats()["partitions"]["acme"]["pending"] == 1
    handler = Recorder(fail=lambda m: ValueError("once") if m.attempt == 1 else None)
    h.drain(handler)
    partitions = {m.body["order"]: m.partition for m in handler.seen}
    assert partitions == {1: "acme", 2: None, 3: None}
    # the retry copy of the inbox message stayed in its partition
    retried = [m for m in handler.seen if m.attempt == 2]
    assert {m.partition for m in retried} == {"acme", None}


def test_retries_dead_letters_and_redrive_keep_the_partition() -> None:
    h = Harness(settings=QueueSettings(max_retries=1, backoff_base=0.1, backoff_cap=0.1))
    h.queue.enqueue({"x": 1}, partition="t1")
    failing = Recorder(fail=lambda m: ValueError("no"))
    h.drain(failing)
    assert [(m.attempt, m.partition) for m in failing.seen] == [(1, "t1"), (2, "t1")]
    (dead,) = h.queue.dead_letters()
    assert dead["partition"] == "t1"
    assert h.queue.redrive() == 1
    assert h.keys("parts/t1/") and not h.keys("msg/")
    ok = Recorder()
    h.drain(ok)
    assert [(m.body, m.partition) for m in ok.seen] == [({"x": 1}, "t1")]


def test_stats_count_each_partition() -> None:
    h = Harness()
    h.queue.enqueue_many(({"n": i} for i in range(5)), partition="acme")
    h.queue.enqueue({"n": 5}, partition="acme", delay=60)
    h.queue.enqueue({"n": 6})
    h.queue.enqueue({"n": 7}, partition="globex")
    stats = h.queue.stats()
    assert stats["pending"] == 7 and stats["delayed"] == 1
    counts = {name: (p["pending"], p["delayed"]) for name, p in stats["partitions"].items()}
    assert counts == {"": (1, 0), "acme": (5, 1), "globex": (1, 0)}
    h.tick()
    in_flight = {name: p["in_flight"] for name, p in h.queue.stats()["partitions"].items()}
    assert in_flight == {"": 1, "acme": 5, "globex": 1}


def test_a_group_lives_inside_its_partition() -> None:
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=8))
    for i in range(3):
        h.queue.enqueue({"p": "a", "i": i}, group="g", partition="a")
        h.queue.enqueue({"p": "b", "i": i}, group="g", partition="b")
    h.tick()
    # one ticket per group at a time, and "g" of a and "g" of b are two groups
    refs = [p["doc"]["refs"] for p in h.invocations]
    assert sorted(h.queue.keys.partition_of(r[0]["key"]) or "" for r in refs) == ["a", "b"]
    handler = Recorder()
    h.drain(handler)
    for name in ("a", "b"):
        assert [m.body["i"] for m in handler.seen if m.partition == name] == [0, 1, 2]


def test_the_idle_probe_sees_work_in_a_partition_alone() -> None:
    h = Harness()
    assert not probe(h.storage, h.queue.keys, h.clock)
    h.queue.enqueue({"later": True}, delay=600)  # a future message in msg/ is no work
    assert not probe(h.storage, h.queue.keys, h.clock)
    h.queue.enqueue({"now": True}, partition="zeta")
    assert probe(h.storage, h.queue.keys, h.clock)


@pytest.mark.parametrize("bad", ["", "-lead", "a/b", "x" * 65, "sp ace", 7])
def test_a_bad_partition_name_is_refused_before_anything_is_written(bad: object) -> None:
    h = Harness()
    with pytest.raises(InvalidArgument, match="invalid partition"):
        h.queue.enqueue({}, partition=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="invalid partition"):
        h.queue.enqueue_many([{}], partition=bad)  # type: ignore[arg-type]
    assert h.keys() == []


@pytest.mark.s3
def test_partitions_on_a_real_s3_server(s3_storage: S3Storage) -> None:
    """The same on SeaweedFS: library and plain-PUT routes, folders listed with a delimiter,
    per-partition stats, and a small partition served in the first round."""
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)
    h = Harness(
        storage=s3_storage,
        clock=clock,
        settings=QueueSettings(batch_size=10, max_in_flight_tickets=4),
    )
    for i in range(200):
        h.queue.enqueue({"n": i}, partition="big")
    clock.advance(1)
    for i in range(10):
        s3_storage.put(
            f"{h.queue.keys.inbox}small/order-{i}.json", json.dumps({"small": i}).encode()
        )
    # An inbox object's time is the server's: the test's clock must not lag behind it (the 200
    # PUTs took real seconds), or its messages would count as delayed.
    clock.advance(max(time.time_ns() // 1_000_000 - clock.now_ms(), 0) / 1000 + 1)
    stats = h.queue.stats()["partitions"]
    assert (stats["big"]["pending"], stats["small"]["pending"]) == (200, 10)
    handler = Recorder()
    h.drain(handler, rounds=200)
    assert len(handler.seen) == 210
    assert _last_small(handler.seen) < 4 * 10  # the first round of 4 tickets
    assert {m.partition for m in handler.seen if "small" in m.body} == {"small"}

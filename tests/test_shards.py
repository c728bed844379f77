"""Shards: a folder's ungrouped messages spread over sibling folders (protocol/shards.py); every
message still runs once, groups in order, and a shard is never a tenant."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from harness import QUEUE, Harness, Recorder
from s3queue import Item
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.shares import folder_shares
from s3queue.errors import InvalidArgument
from s3queue.producing.producer import Queue
from s3queue.protocol import markers
from s3queue.protocol.keys import QueueKeys, is_folder_name, split_lane
from s3queue.protocol.records import Record, record_for
from s3queue.protocol.shards import MAX_SHARDS, Spread, shard_folder, split_shard
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Storage

KEYS = QueueKeys("s3queue", QUEUE)


def sharded(h: Harness, shards: int) -> Queue:
    """The harness's producer, with `shards`."""
    h.queue = Queue(QUEUE, storage=h.storage, clock=h.clock, shards=shards)
    return h.queue


def folders(h: Harness) -> Counter[str | None]:
    """Message objects by folder."""
    listed = h.keys()  # the harness lists keys: not a dict
    return Counter(h.queue.keys.lane_of(k) for k in listed if "/msg/" in k or "/parts/" in k)


def test_a_shard_is_a_folder_whose_name_says_its_folder() -> None:
    assert [shard_folder(f, 2) for f in (None, "acme", "~9", "acme~9")] == [
        "~s2",
        "acme~s2",
        "~9~s2",
        "acme~9~s2",
    ]
    assert shard_folder("acme", 0) == "acme" and shard_folder(None, 0) is None
    for folder in (None, "acme", "~9", "acme~9", "a.b-c"):
        assert split_shard(shard_folder(folder, 7)) == (folder, 7)
        assert split_lane(shard_folder(folder, 7)) == split_lane(folder)
    assert all(is_folder_name(n) for n in ("~s1", "acme~s63", "~9~s2", "acme~9~s2"))
    assert not any(is_folder_name(n) for n in ("~s0", "acme~s1~s2", "~s", "acme~s1~9", "~s100"))
    key = KEYS.partitioned("acme~9~s3").msg + "0000000000001-X"
    assert KEYS.lane_of(key) == "acme~9~s3" and KEYS.partition_of(key) == "acme"
    assert KEYS.owning(key).tenant == "acme" and KEYS.owning(key).priority == 9
    assert KEYS.partitioned("acme~9~s3").sharded(1).partition == "acme~9~s1"
    assert KEYS.partitioned("acme~9~s3").sharded(0).partition == "acme~9"
    assert KEYS.sharded(0).msg == KEYS.root + "msg/"  # shard 0: the folder of before
    assert KEYS.sharded(5).msg == KEYS.root + "parts/~s5/"


@pytest.mark.parametrize("shards", [0, MAX_SHARDS + 1, True, 2.0, "4"])
def test_a_bad_shards_is_refused_before_anything(shards: object) -> None:
    with pytest.raises(InvalidArgument):
        Queue(QUEUE, storage=MemoryStorage(), shards=shards)  # type: ignore[arg-type]


def test_ungrouped_messages_go_round_the_shards_and_groups_stay_in_shard_zero() -> None:
    h = Harness()
    queue = sharded(h, 4)
    for i in range(40):
        queue.enqueue({"n": i})
    for i in range(6):
        queue.enqueue({"g": i}, group="g1")
    assert folders(h) == {None: 10 + 6, "~s1": 10, "~s2": 10, "~s3": 10}
    # a partition's and a lane's messages spread within their own folder
    for i in range(8):
        queue.enqueue({"p": i}, partition="acme", priority=9)
    assert {f: n for f, n in folders(h).items() if f and f.startswith("acme")} == {
        "acme~9": 2,
        "acme~9~s1": 2,
        "acme~9~s2": 2,
        "acme~9~s3": 2,
    }


def test_packed_and_group_committed_objects_go_round_the_shards() -> None:
    h = Harness()
    queue = sharded(h, 2)
    for pack in range(4):
        queue.enqueue_many([pack, pack, Item(pack, group="g")])
    assert folders(h) == {None: 2 + 4, "~s1": 2}  # packs spread; grouped items in shard 0
    with queue.batching(window=0) as batching:
        for i in range(4):
            batching.enqueue(i)
    assert sum(folders(h).values()) == 12 and folders(h)["~s1"] >= 3


def test_spread_is_even_from_any_start() -> None:
    spread = Spread(8)
    assert sorted(Counter(spread.pick(None) for _ in range(800)).values()) == [100] * 8
    assert {spread.pick("g") for _ in range(10)} == {0} and Spread().pick(None) == 0


def test_a_sharded_queue_runs_everything_once_groups_in_order(storage: Storage) -> None:
    """Ungrouped, grouped, delayed, explicit ids (sent twice), payload files, retries, dead
    letters and their redrive: in shard folders as in the folder of before."""
    h = Harness(
        storage=storage,
        settings=QueueSettings(batch_size=4, max_retries=1, backoff_base=0.1, backoff_cap=0.1),
    )
    queue = sharded(h, 3)
    for i in range(12):
        queue.enqueue({"n": i}, partition="acme" if i % 2 else None)
    for i in range(5):
        queue.enqueue({"g": i}, group="g1")
    queue.enqueue({"late": 1}, delay=2)
    for _ in range(2):  # the repeat's turn is another shard: the id's marker still decides
        queue.enqueue({"id": 1}, id="order-1")
        queue.enqueue({"id": 2}, id="order-2")
    queue.enqueue_file(io.BytesIO(b"x" * 300_000))
    queue.enqueue({"dead": 1})
    assert len([f for f in folders(h) if f and "~s" in f]) >= 4  # both partitions sharded
    handler = Recorder(
        fail=lambda m: (
            ValueError("once")
            if (m.attempt == 1 and m.body == {"n": 4})
            # never: dead-lettered after its retry
            or (isinstance(m.body, dict) and m.body.get("dead"))
            else None
        )
    )
    h.drain(handler, rounds=2_000)
    done = [m for m in handler.seen if not (isinstance(m.body, dict) and m.body.get("dead"))]
    bodies = [m.body for m in done if not (m.body == {"n": 4} and m.attempt == 1)]
    assert len(bodies) == 12 + 5 + 1 + 2 + 1 == len({repr(b) for b in bodies})
    assert [m.body["g"] for m in done if isinstance(m.body, dict) and "g" in m.body] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert {m.partition for m in done} == {None, "acme"}
    numbered = [m for m in done if isinstance(m.body, dict) and "n" in m.body]
    assert all(m.partition == ("acme" if m.body["n"] % 2 else None) for m in numbered)
    assert [m.body for m in done if isinstance(m.body, bytes)] == [b"x" * 300_000]
    assert [m.attempt for m in done if m.body == {"n": 4}] == [1, 2]
    (dead,) = h.queue.dead_letters()
    assert dead["partition"] is None
    assert h.queue.redrive() == 1
    again = Recorder()
    h.drain(again)
    assert [m.body for m in again.seen] == [{"dead": 1}]


def test_an_explicit_id_retried_in_another_shard_lands_at_its_first_key() -> None:
    """The first enqueue wrote its marker (naming shard 2) and died: the retry, whose turn is
    shard 1, puts the message where the marker says, and says so."""
    h = Harness()
    events: list[str] = []
    queue = Queue(
        QUEUE,
        storage=h.storage,
        clock=h.clock,
        shards=3,
        listener=lambda e: events.append(e.fields.get("key", "")),
    )
    h.queue = queue
    first = queue.keys.sharded(2).msg_key(queue.writer.key_for(_record("x"), 0, h.clock.now_ms()))
    markers.create(h.storage, queue.keys, "x", first)
    while queue.spread.pick(None) != 0:  # the next turn is shard 1
        pass
    queue.enqueue({"id": "x"}, id="x")
    assert h.keys("parts/") == [first] and events == [first]
    handler = Recorder()
    h.drain(handler)
    assert [m.body for m in handler.seen] == [{"id": "x"}]


def _record(message_id: str) -> Record:
    return record_for(message_id, {}, 0, None, {})


def test_changing_the_shards_of_a_live_queue_loses_nothing_and_keeps_groups_in_order() -> None:
    """Producers with shards=1, 4 and 2 at once (a rolling change), while the queue runs: a group
    always lives in shard 0, so its order is exact whatever each producer says."""
    h = Harness(settings=QueueSettings(batch_size=3, max_in_flight_tickets=4))
    producers = [Queue(QUEUE, storage=h.storage, clock=h.clock, shards=n) for n in (1, 4, 2)]
    handler = Recorder()
    for i in range(90):
        producer = producers[i % 3]
        producer.enqueue({"u": i})
        producer.enqueue({"g": i}, group=f"g{i % 2}")
        if i % 7 == 0:
            h.tick()
            h.work(handler)  # part of it runs while the layout changes
    assert {"~s1", "~s2", "~s3"} <= set(folders(h))
    h.drain(handler)
    ungrouped = sorted(m.body["u"] for m in handler.seen if "u" in m.body)
    assert ungrouped == list(range(90))
    for group in ("g0", "g1"):
        order = [m.body["g"] for m in handler.seen if m.group == group]
        assert order == sorted(order) and len(order) == 45


def test_a_sharded_partition_gets_one_turn_like_an_unsharded_one() -> None:
    # folders in turn order: acme in 4 shards, globex in 1; 4 slots
    wanted, names = [5, 5, 5, 5, 5], ["acme", "acme~s1", "acme~s2", "acme~s3", "globex"]
    assert folder_shares(wanted, names, 4) == [1, 1, 0, 0, 2]
    assert folder_shares([5, 5], ["a~9~s1", "b"], 3) == [3, 0]  # priority first, as lanes
    assert folder_shares([2, 3], ["a", "b"], 4) == [2, 2]  # no shards: as prioritized_shares
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=4))
    sharded(h, 4)
    for i in range(20):
        h.queue.enqueue({"p": "acme", "i": i}, partition="acme")
        h.queue.enqueue({"p": "globex", "i": i}, partition="globex")
    assert h.tick().dispatched == 4
    handler = Recorder()
    h.work(handler)
    assert Counter(m.partition for m in handler.seen) == {"acme": 2, "globex": 2}


def test_plain_puts_may_name_a_shard_folder_and_the_probe_sees_every_shard() -> None:
    h = Harness()
    h.storage.put(h.queue.keys.inbox + "acme~s2/order-1.json", b'{"order": 1}')
    h.storage.put(h.queue.keys.inbox + "~s1/order-2.json", b'{"order": 2}')
    assert h.coordinator.probe()
    handler = Recorder(fail=lambda m: ValueError("once") if m.attempt == 1 else None)
    h.drain(handler)
    assert {(m.body["order"], m.attempt, m.partition) for m in handler.seen} == {
        (1, 1, "acme"),
        (1, 2, "acme"),
        (2, 1, None),
        (2, 2, None),
    }
    # WHEN the only live message is in a shard folder THEN the idle probe sees it
    assert not h.coordinator.probe()
    queue = sharded(h, 4)
    for body in ("w", "x", "y", "z"):  # round-robin: three of the four in shard folders
        queue.enqueue(body)
    h.storage.delete_many(h.keys("msg/"))
    assert len(h.keys("parts/~s")) == 3 and h.coordinator.probe()


def test_a_tick_reads_a_lanes_shards_with_partitions_per_tick_counting_folders() -> None:
    h = Harness(coordination=CoordinatorSettings(partitions_per_tick=64))
    queue = sharded(h, MAX_SHARDS)
    for i in range(MAX_SHARDS):
        queue.enqueue(i)
    handler = Recorder()
    h.drain(handler)
    assert sorted(m.body for m in handler.seen) == list(range(MAX_SHARDS))

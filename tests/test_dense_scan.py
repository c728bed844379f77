"""Unit: a cursor whose scan read more than a page lists what is new from its frontier, with
one trailing page of the straggler margin beside it (cursor.py, issue 22).

Pages of 10 keys here (`cursor.PAGE` is 1,000 on S3), so that 15 messages in flight fill
more than a page of the margin, as 1,000 and more do at 1,880 messages a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching import cursor
from s3queue.dispatching.folders import adopt_frontiers
from s3queue.protocol.keys import MsgKey
from s3queue.protocol.records import encode_records, record_for
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Page


class Listings(MemoryStorage):
    """The memory storage, noting where each LIST of `prefix` started."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.prefix, self.starts = "\0", list[str | None]()

    def list(self, prefix: str, **kwargs: Any) -> Page:
        if prefix == self.prefix:
            self.starts.append(kwargs.get("start_after"))
        return super().list(prefix, **kwargs)


@pytest.fixture(autouse=True)
def small_pages() -> Iterator[None]:
    saved, cursor.PAGE = cursor.PAGE, 10
    yield
    cursor.PAGE = saved


def _put(h: Harness, sort_ms: int, name: str, group: str | None = None) -> str:
    key = h.queue.keys.msg_key(MsgKey(sort_ms, name, group))
    h.storage.put(key, encode_records([record_for(name, name, sort_ms, group)], "t"))
    return key


def _in_flight(count: int = 15) -> tuple[Harness, Listings, int]:
    """`count` messages of the last 1.5 s dispatched by one tick that read two pages to the
    end: the cursor is dense, its frontier at the last of them. Nothing is worked yet."""
    clock = FakeClock()
    storage = Listings(clock)
    settings = QueueSettings(batch_size=5, max_batch_size=5, max_in_flight_tickets=20)
    h = Harness(storage=storage, clock=clock, settings=settings)
    storage.prefix = h.queue.keys.msg
    start = clock.now_ms()
    keys = [_put(h, start - 1500 + 100 * i, f"old{i:02d}") for i in range(count)]
    clock.advance(0.001)
    assert h.tick().dispatched == count
    assert len(storage.starts) == 2  # two pages, one after the other, to the end
    assert h.coordinator.memory.cursors.of(None).frontier == keys[-1]
    return h, storage, start


def _dispatched(h: Harness) -> list[str]:
    return [ref.split("/")[-1] for e in h.kinds("dispatch") for ref in e.fields["refs"]]


def test_a_dense_cursor_lists_from_its_frontier_and_the_margin_beside_it() -> None:
    h, storage, start = _in_flight()
    frontier = h.coordinator.memory.cursors.of(None).frontier
    new = [_put(h, start + 50 + i, f"new{i}") for i in range(3)]
    h.clock.advance(0.1)
    storage.starts.clear()
    before = len(_dispatched(h))
    assert h.tick().dispatched == 3
    margin = h.queue.keys.msg_after(start + 1 - 2000)  # the margin of the first tick's now
    # the trailing page of the margin (its 10 keys, all in flight) and one page from the
    # frontier: not the margin's two pages first, then what is new
    assert sorted(storage.starts) == sorted([margin, frontier])
    assert sorted(_dispatched(h)[before:]) == sorted(k.split("/")[-1] for k in new)


def test_a_trailing_page_short_of_the_frontier_holds_back_grouped_messages_past_it() -> None:
    """The trailing page ends at the 10th key in flight, so keys 11-15 of the margin are not
    read again: a group's head that lands there late (a straggler) must still go first."""
    h, _, start = _in_flight()
    straggler = _put(h, start - 250, "g1", group="g")  # between the 13th and 14th old keys
    follower = _put(h, start + 60, "g2", group="g")
    loose = _put(h, start + 70, "u1")
    h.clock.advance(0.1)
    before = len(_dispatched(h))
    h.tick()
    this_tick = _dispatched(h)[before:]
    assert loose.split("/")[-1] in this_tick  # no order binds it: out at once
    assert follower.split("/")[-1] not in this_tick
    recorder = Recorder()
    h.drain(recorder)
    assert [m.id for m in recorder.seen if m.group] == ["g1", "g2"]
    assert straggler.split("/")[-1] not in this_tick and not h.keys("msg/")


def test_a_quiet_queue_keeps_no_frontier() -> None:
    """A tick that listed no more than a page reads the margin and what is new in one LIST,
    as before: a second LIST a tick would only cost requests."""
    clock = FakeClock()
    storage = Listings(clock)
    h = Harness(storage=storage, clock=clock)
    storage.prefix = h.queue.keys.msg
    for i in range(8):
        _put(h, clock.now_ms() - 800 + 100 * i, f"m{i}")
    clock.advance(0.001)
    h.tick()
    assert h.coordinator.memory.cursors.of(None).frontier == ""
    _put(h, clock.now_ms() + 10, "later")
    clock.advance(0.1)
    storage.starts.clear()
    h.tick()
    assert len(storage.starts) == 1


def test_a_new_leader_lists_from_its_predecessors_frontier_at_once() -> None:
    """The frontier travels in the lease (`LeaseDoc.frontiers`, protocol/advisory.py): the
    next leader's first tick lists what arrived during the handover from there, one page of
    the folder's start beside it, instead of walking from the start through every message
    still in flight; nothing in flight goes out twice."""
    h, storage, start = _in_flight()
    frontier = h.coordinator.memory.cursors.of(None).frontier
    h.coordinator.release()
    new = [_put(h, start + 50 + i, f"new{i}") for i in range(3)]
    h.clock.advance(0.1)
    storage.starts.clear()
    before = len(_dispatched(h))
    successor = h.new_coordinator("c2")
    assert successor.tick().dispatched == 3
    assert sorted(storage.starts, key=str) == sorted(["", frontier], key=str)
    assert sorted(_dispatched(h)[before:]) == sorted(k.split("/")[-1] for k in new)
    h.coordinator = successor
    recorder = Recorder()
    h.drain(recorder)
    assert sorted(m.id for m in recorder.seen) == sorted(
        [f"old{i:02d}" for i in range(15)] + [f"new{i}" for i in range(3)]
    )


def test_a_frontier_from_the_lease_is_only_a_place_to_list_from() -> None:
    """Advisory: a frontier outside its folder is ignored, and an unreadable one is dropped
    without making the lease unreadable (which would seal every epoch)."""
    from s3queue.protocol.lease import LeaseDoc

    doc = LeaseDoc("c1", 3, 0, frontiers={"": "s3queue/q/msg/x"})
    assert LeaseDoc.decode(doc.encode("t")).frontiers == {"": "s3queue/q/msg/x"}
    broken = doc.encode("t").replace(b'"frontiers":{"":"s3queue/q/msg/x"}', b'"frontiers":[7]')
    assert LeaseDoc.decode(broken).frontiers == {} and LeaseDoc.decode(broken).epoch == 3
    h, _, _ = _in_flight()
    memory = h.new_coordinator("c2").memory
    adopt_frontiers(memory, {"": "s3queue/elsewhere/msg/zzz", "../x": "s3queue/q/msg/1"}, 0)
    assert memory.cursors.of(None).frontier == "" and list(memory.cursors.by_partition) == [None]


def test_a_leader_whose_last_scan_read_one_page_hands_over_where_it_ended_too() -> None:
    """A quiet queue's cursor keeps no frontier of its own (one LIST a tick), but where its
    last scan ended still goes to the successor, whose first tick lists from there."""
    clock = FakeClock()
    storage = Listings(clock)
    h = Harness(storage=storage, clock=clock)
    storage.prefix = h.queue.keys.msg
    keys = [_put(h, clock.now_ms() - 800 + 100 * i, f"m{i}") for i in range(8)]
    clock.advance(0.001)
    h.tick()
    assert h.coordinator.memory.cursors.of(None).frontier == ""
    h.coordinator.release()
    later = _put(h, clock.now_ms() + 10, "later")
    clock.advance(0.1)
    storage.starts.clear()
    successor = h.new_coordinator("c2")
    assert successor.tick().dispatched == 1
    assert sorted(storage.starts, key=str) == sorted(["", keys[-1]], key=str)
    assert later.split("/")[-1] in _dispatched(h)

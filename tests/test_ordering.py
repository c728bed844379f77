"""Unit: FIFO within a group, one ticket in flight per group, ungrouped never blocked."""

from __future__ import annotations

import json
import threading
from typing import Any

from harness import QUEUE, Harness, Recorder
from s3queue.common.events import Event
from s3queue.contract.settings import QueueSettings
from s3queue.producing.batch import Item
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import key_time


def test_group_in_order_one_in_flight() -> None:
    h = Harness(settings=QueueSettings(batch_size=1))
    for i in range(3):
        h.queue.enqueue(f"a{i}", group="A")
    for i in range(2):
        h.queue.enqueue(f"b{i}", group="B")
    h.queue.enqueue("free")
    h.tick()
    assert sorted(_bodies(h)) == ["a0", "b0", "free"]  # each group's head, and the free one
    assert h.tick().dispatched == 0  # A and B are busy: their next messages wait
    handler = Recorder()
    h.drain(handler)
    a = [b for b in handler.bodies() if b.startswith("a")]
    b = [x for x in handler.bodies() if x.startswith("b")]
    assert a == ["a0", "a1", "a2"] and b == ["b0", "b1"]


def test_group_batch_keeps_order_inside_a_ticket() -> None:
    h = Harness(settings=QueueSettings(batch_size=10))
    for i in range(5):
        h.queue.enqueue(i, group="g")
    h.tick()
    assert len(h.invocations) == 1
    handler = Recorder()
    h.work(handler)
    assert handler.bodies() == [0, 1, 2, 3, 4]


def test_busy_group_does_not_block_ungrouped_messages() -> None:
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=10))
    h.queue.enqueue("g0", group="slow")
    h.queue.enqueue("g1", group="slow")
    for i in range(3):
        h.queue.enqueue(f"u{i}")
    h.tick()
    assert h.tick().dispatched == 0
    bodies = sorted(_bodies(h))
    assert bodies == ["g0", "u0", "u1", "u2"]


def test_failed_group_message_blocks_its_group_until_retried() -> None:
    # GIVEN a0 fails once, WHEN the group is drained, THEN a1 never overtakes a0
    h = Harness(settings=QueueSettings(batch_size=10, backoff_base=4.0, backoff_cap=4.0))
    for i in range(3):
        h.queue.enqueue(f"a{i}", group="A")
    h.queue.enqueue("other")
    failed: set[str] = set()

    def fail_once(m):  # type: ignore[no-untyped-def]
        if m.body == "a0" and m.body not in failed:
            failed.add(m.body)
            return RuntimeError("transient")
        return None

    handler = Recorder(fail=fail_once)
    h.drain(handler, step=0.5)
    a = [(m.body, m.attempt) for m in handler.seen if m.body.startswith("a")]
    assert a == [("a0", 1), ("a0", 2), ("a1", 1), ("a2", 1)]
    releases = h.kinds("release")
    assert {e.fields["reason"] for e in releases} == {"earlier message of its group failed"}


def test_grouped_retry_dead_letters_then_group_continues() -> None:
    h = Harness(settings=QueueSettings(batch_size=1, max_retries=1, backoff_base=0.1))
    h.queue.enqueue("poison", group="G")
    h.queue.enqueue("next", group="G")
    handler = Recorder(fail=lambda m: RuntimeError("x") if m.body == "poison" else None)
    h.drain(handler, step=0.5)
    assert [(m.body, m.attempt) for m in handler.seen] == [
        ("poison", 1),
        ("poison", 2),
        ("next", 1),
    ]


def _bodies(h: Harness) -> list[str]:
    out = []
    for payload in h.invocations:
        for ref in payload["doc"]["refs"]:
            obj = h.storage.get(ref["key"])
            assert obj is not None
            out += [m["body"] for m in json.loads(obj.body)["messages"]]
    return out


def test_long_group_backlog_never_starves_later_ungrouped_messages() -> None:
    # GIVEN 3,000 messages of one group ahead of ungrouped ones (more than a tick's scan)
    h = Harness(settings=QueueSettings(batch_size=10, max_in_flight_tickets=4))
    h.queue.enqueue_many([])  # nothing: packing an empty list writes nothing
    for i in range(3000):
        h.queue.enqueue(i, group="hot")
    h.clock.advance(1)
    h.queue.enqueue("free-1")
    h.queue.enqueue("free-2")
    # WHEN group tickets keep finishing tick after tick
    handler = Recorder()
    for _ in range(6):
        h.tick()
        h.work(handler)
    # THEN the ungrouped messages went out within those ticks, and the group stayed in order
    assert {"free-1", "free-2"} <= set(handler.bodies())
    hot = [b for b in handler.bodies() if isinstance(b, int)]
    assert hot == sorted(hot) and len(hot) >= 50


def test_ungrouped_retry_after_a_long_ticket_goes_out_without_a_sweep() -> None:
    # GIVEN a ticket whose first message fails and whose others take 20 s in all
    h = Harness(settings=QueueSettings(batch_size=5, backoff_base=0.001, backoff_cap=0.001))
    h.queue.enqueue_many(range(5))

    def slow(m: object) -> BaseException | None:
        h.clock.advance(4)
        body = getattr(m, "body", None)
        return RuntimeError("once") if body == 0 and getattr(m, "attempt", 0) == 1 else None

    handler = Recorder(fail=slow)
    h.tick()
    h.work(handler)
    h.queue.enqueue("bystander")  # keeps the cursor moving
    # THEN the next tick (well before the 60 s sweep) dispatches the retry copy
    h.clock.advance(0.1)
    h.tick()
    h.work(handler)
    assert [(m.body, m.attempt) for m in handler.seen][-2:] in (
        [(0, 2), ("bystander", 1)],
        [("bystander", 1), (0, 2)],
    )
    assert h.kinds("dispatch")[-1].at_ms - h.kinds("dispatch")[0].at_ms < 30_000


class _SlowPuts:
    """A storage whose message PUTs take `seconds` on the clock (a retried 503, a slow link)."""

    def __init__(self, h: Harness, seconds: list[float]) -> None:
        self.inner, self.h, self.seconds = h.storage, h, seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, key: str, body: bytes, **kwargs: Any) -> str:
        etag = self.inner.put(key, body, **kwargs)
        if "/msg/" in key and self.seconds:
            self.h.clock.advance(self.seconds.pop(0))
            self.h.tick()  # the leader ticks meanwhile: its cursor moves past the key's time
        return etag


def test_a_grouped_put_that_lands_late_leaves_a_notice_the_leader_follows_and_deletes() -> None:
    # GIVEN a grouped enqueue whose PUT takes 3 s, and whose first late notice takes 1.5 s too
    h = Harness()
    h.tick()
    events: list[Event] = []
    storage = _SlowPuts(h, [3.0, 1.5])
    slow = Queue(QUEUE, storage=storage, clock=h.clock, listener=events.append)  # type: ignore[arg-type]
    slow.enqueue("head", group="g")
    # THEN two notices were put (the second because the first landed late as well); the leader
    # ticking meanwhile followed the first; the second is there and does not count as a message
    assert len([e for e in events if e.kind == "late_notice"]) == 2
    assert len([k for k in h.keys("msg/") if "~p" in k]) == 1
    stats = h.queue.stats()
    assert stats["pending"] + stats["in_flight"] + stats["delayed"] == 1, stats
    # WHEN a later message of the group is enqueued quickly (no notice) and the leader ticks
    h.queue.enqueue("next", group="g")
    handler = Recorder()
    h.drain(handler)
    # THEN the head ran first and the notices are gone
    assert handler.bodies() == ["head", "next"]
    assert h.keys("msg/") == []


def test_a_fast_grouped_put_and_an_ungrouped_slow_put_leave_no_notice() -> None:
    h = Harness()
    slow = Queue(QUEUE, storage=_SlowPuts(h, [0.5, 5.0]), clock=h.clock)  # type: ignore[arg-type]
    slow.enqueue("quick", group="g")
    slow.enqueue("free")  # ungrouped: no order to keep, a sweep finds it
    assert not [k for k in h.keys("msg/") if "~p" in k]
    assert len(h.keys("msg/")) == 2


class _SteppedClock:
    """The harness clock seen through an offset the test moves (an NTP step on one host)."""

    def __init__(self, h: Harness) -> None:
        self.h, self.offset_ms = h, 0

    def now_ms(self) -> int:
        return self.h.clock.now_ms() + self.offset_ms

    def sleep(self, seconds: float) -> None:
        self.h.clock.sleep(seconds)


def test_a_producer_clock_that_steps_back_keeps_its_group_in_order() -> None:
    # GIVEN a producer that enqueues 0, 1 of a group, then its wall clock steps back 1 s
    # (issue 19.5), then enqueues 2, 3 (one of each through enqueue_many, where keys are the same)
    h = Harness(settings=QueueSettings(batch_size=1))
    clock = _SteppedClock(h)
    producer = Queue(QUEUE, storage=h.storage, clock=clock)
    producer.enqueue(0, group="g")
    producer.enqueue_many([Item(1, group="g")])
    clock.offset_ms -= 1000
    h.clock.advance(0.01)
    producer.enqueue(2, group="g")
    producer.enqueue_many([Item(3, group="g")])
    # WHEN the queue is drained
    handler = Recorder()
    h.drain(handler)
    # THEN the handler saw the group in enqueue order
    assert handler.bodies() == [0, 1, 2, 3]


def test_key_times_never_go_back_across_threads() -> None:
    # GIVEN one injected clock that every thread reads while it steps back and forth
    h = Harness()
    clock = _SteppedClock(h)
    stamps: list[list[int]] = [[] for _ in range(4)]

    def stamp(out: list[int]) -> None:
        for i in range(2000):
            clock.offset_ms = -((i * 37) % 500)
            out.append(key_time(clock))

    threads = [threading.Thread(target=stamp, args=(out,)) for out in stamps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # THEN each thread's stamps never decrease
    assert all(out == sorted(out) for out in stamps)

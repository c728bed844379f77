"""Parked successors (tickets.py `after`, the worker's `chain`): once every slot is taken, the
leader parks the next ticket behind a live one, and that ticket's worker takes it next, with
no invoke; a successor nobody took is invoked once its predecessor is gone or reaped."""

from __future__ import annotations

import contextlib
from typing import Any

from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.message import Message
from s3queue.storage import MemoryStorage

from tests.harness import Crash, Harness, Recorder

ONE_SLOT = QueueSettings(batch_size=2, max_in_flight_tickets=1, visibility_timeout=30)


class Recording(MemoryStorage):
    """Memory storage that notes each write to a ticket (claim, commit, delete) in order."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.writes: list[tuple[str, str, str]] = []

    def put(self, key: str, body: bytes, **kwargs: Any) -> str:
        if "/tickets/" in key:
            state = "claim" if b'"state":"claimed"' in body else "put"
            self.writes.append((state, key, ""))
        return super().put(key, body, **kwargs)

    def delete(self, key: str, **kwargs: Any) -> None:
        if "/tickets/" in key:
            self.writes.append(("delete", key, ""))
        super().delete(key, **kwargs)


def _parked(h: Harness, bodies: list[str]) -> tuple[str, str]:
    """Two tickets: the first invoked into the only slot, the second parked behind it."""
    h.queue.enqueue_many(bodies[:2])
    h.tick()
    h.queue.enqueue_many(bodies[2:])
    h.tick()
    first, second = (e.fields["ticket"] for e in h.kinds("dispatch"))
    assert [e.fields["ticket"] for e in h.kinds("park")] == [second]
    assert [i["ticket"] for i in h.invocations] == [first]  # the parked one is not invoked
    return first, second


def test_the_worker_takes_the_successor_parked_behind_its_ticket() -> None:
    # GIVEN one slot taken, and a second ticket parked behind the first
    clock = FakeClock()
    storage = Recording(clock)
    h = Harness(settings=ONE_SLOT, storage=storage, clock=clock, chain=True)
    first, second = _parked(h, ["a", "b", "c", "d"])
    assert h.keys("chain/") == [h.queue.keys.chain(first)]
    # WHEN the worker runs the invoked ticket
    recorder = Recorder()
    [result] = h.work(recorder)
    # THEN it ran the successor in the same call, claimed before its own ticket was deleted
    # (a leader that sees the first gone and the second pending knows nobody took it)
    assert [(r.ticket, r.status) for r in result.each()] == [
        (first, "committed"),
        (second, "committed"),
    ]
    assert sorted(recorder.bodies()) == ["a", "b", "c", "d"]
    order = [(op, key) for op, key, _ in storage.writes]
    assert order.index(("claim", second)) < order.index(("delete", first))
    # AND the leader, seeing both gone, deletes the pointer; nothing was invoked again
    h.tick()
    assert h.keys("chain/") == [] and h.keys("tickets/") == []
    assert h.invocations == [] and not h.kinds("reinvoke")


def test_a_worker_waits_about_a_tick_for_its_successor() -> None:
    # GIVEN one slot taken by a ticket marked to chain, and messages that arrive meanwhile
    h = Harness(settings=ONE_SLOT, chain=True)
    h.queue.enqueue_many(["a", "b"])
    h.tick()
    h.queue.enqueue_many(["c", "d"])
    ticked: list[int] = []
    sleep = h.clock.sleep

    def leader_ticks_while_the_worker_waits(seconds: float) -> None:
        sleep(seconds)
        if not ticked:
            ticked.append(h.tick().dispatched)

    h.worker.clock.sleep = leader_ticks_while_the_worker_waits  # type: ignore[method-assign]
    recorder = Recorder()
    # WHEN the worker finishes its ticket before the leader parked the next one
    [result] = h.work(recorder)
    # THEN it waited, found the successor the leader parked meanwhile, and ran it
    assert ticked == [2]
    assert len(result.each()) == 2 and sorted(recorder.bodies()) == ["a", "b", "c", "d"]


def test_a_successor_nobody_took_is_invoked_once_its_predecessor_is_gone() -> None:
    # GIVEN a parked ticket, and a worker that does not chain (an older version, no time left)
    h = Harness(settings=ONE_SLOT, chain=True)
    first, second = _parked(h, ["a", "b", "c", "d"])
    plain = h.new_worker("plain")
    plain.chain = False
    recorder = Recorder()
    assert [r.ticket for r in h.work(recorder, worker=plain)[0].each()] == [first]
    # WHEN the leader sees the first ticket gone and the second still pending
    h.tick()
    # THEN it invokes a worker on the second, and deletes the pointer
    assert [i["ticket"] for i in h.invocations] == [second]
    assert [e.fields["reason"] for e in h.kinds("reinvoke")] == ["unparked"]
    assert h.keys("chain/") == []
    h.work(recorder, worker=plain)
    assert sorted(recorder.bodies()) == ["a", "b", "c", "d"]


def test_a_successor_is_invoked_when_its_predecessor_is_reaped() -> None:
    # GIVEN a parked ticket behind one whose worker died holding it
    h = Harness(settings=ONE_SLOT, chain=True)
    first, second = _parked(h, ["a", "b", "c", "d"])

    def dies(_: Message) -> BaseException:
        return Crash()

    with contextlib.suppress(Crash):
        h.work(Recorder(fail=dies))
    # WHEN its claim expires and the leader reaps it
    h.clock.advance(60)
    result = h.tick()
    # THEN the successor is invoked too, not left to wait for the redelivery to end
    assert result.reaped == 1, h.kinds("reinvoke")
    assert sorted(i["ticket"] for i in h.invocations) == [first, second]
    recorder = Recorder()
    h.work(recorder)
    h.tick()
    assert sorted(recorder.bodies()) == ["a", "b", "c", "d"]


def test_no_ticket_is_parked_while_a_slot_is_free() -> None:
    h = Harness(settings=QueueSettings(batch_size=2, max_in_flight_tickets=3), chain=True)
    h.queue.enqueue_many(["a", "b"])
    h.tick()
    h.queue.enqueue_many(["c", "d"])
    h.tick()
    assert len(h.invocations) == 2 and not h.kinds("park") and h.keys("chain/") == []

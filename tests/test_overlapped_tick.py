"""Unit: a steady leader lists its tickets and its messages at once (issue 22).

A tick listed tickets, then messages, one answer after the other; at AWS latencies that is
~50 ms of every busy tick, which every message waits through. Once a leader has ticked cleanly
(and a slot is free, the pace known, no FIFO group live), the two LISTs go out together and the
read is judged by the tickets known *before* both (`Sight`), never by what the LIST of tickets
says: a ticket it shows gone may have been deleted after the LIST of messages saw its messages.
A listed ticket the leader did not know before makes it read again, after the LIST.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.protocol.tickets import Ref, Ticket
from s3queue.storage import new_token


def _steady(settings: QueueSettings | None = None) -> tuple[Harness, Recorder]:
    """A busy leader whose first tick's ticket finished: the pace is known, and its last tick
    sent a full ticket (`batch_size` 1), so its next tick may overlap."""
    h = Harness(settings=settings or QueueSettings(batch_size=1, max_in_flight_tickets=4))
    handler = Recorder()
    h.queue.enqueue("first")
    assert h.tick().dispatched == 1
    h.work(handler)
    h.clock.advance(0.1)
    h.queue.enqueue("warm")
    assert h.tick().dispatched == 1  # learns the pace; ends cleanly, busy
    assert h.coordinator.memory.overlap
    h.work(handler)
    return h, handler


def _read_first(coordinator: Coordinator, between: Callable[[], None]) -> Callable[..., Any]:
    """A `RunAll` that runs the tick's read before its LIST of tickets, and `between` them (a
    worker's whole ticket); every other batch in order."""

    def run_all(jobs: list[Callable[[], Any]]) -> list[Any]:
        side = getattr(jobs[0], "args", (None,))[0] if len(jobs) == 2 else None
        if side != coordinator._list_tickets:
            return [job() for job in jobs]
        read = jobs[1]()
        between()
        return [jobs[0](), read]

    return run_all


def test_a_ticket_deleted_between_the_two_lists_is_still_in_flight() -> None:
    # GIVEN a steady leader with a live ticket holding "a"
    h, handler = _steady()
    h.queue.enqueue("a")
    assert h.tick().dispatched == 1
    [ticket] = h.coordinator.memory.known
    h.queue.enqueue("b")
    # WHEN its next tick's LIST of messages still shows "a", then the worker runs and deletes
    # the ticket, then the LIST of tickets shows it gone
    h.coordinator.run_all = _read_first(h.coordinator, lambda: h.work(handler))
    assert h.coordinator._may_overlap()
    result = h.tick()
    # THEN "a" did not go out again (the read knew its ticket live), "b" did
    assert ticket not in h.coordinator.memory.known
    assert result.dispatched == 1
    h.drain(handler)
    assert sorted(handler.bodies()) == ["a", "b", "first", "warm"]


def test_a_ticket_the_leader_did_not_know_makes_it_read_again_after_the_list() -> None:
    # GIVEN a steady leader, and a ticket of its epoch it never knew, holding "stray" (a create
    # whose answer it lost, say), beside a message "free"
    h, _ = _steady()
    coordinator, keys = h.coordinator, h.queue.keys
    h.queue.enqueue("stray")
    h.queue.enqueue("free")
    [stray] = [e for e in h.storage.list(keys.msg).entries if e.key.endswith(_id(h, "stray"))]
    epoch = coordinator.memory.epoch
    ticket = Ticket(keys.queue, epoch, 40, [Ref(stray.key, stray.etag, stray.size)], created_ms=0)
    token = new_token()
    h.storage.put(keys.ticket(epoch, 40), ticket.encode(token), token=token)
    reads: list[str] = []
    list_msgs = h.storage.list

    def listing(prefix: str, **kwargs: Any) -> Any:
        reads.append(prefix)
        return list_msgs(prefix, **kwargs)

    h.storage.list = listing  # type: ignore[method-assign]
    # WHEN the next tick lists tickets and messages at once
    assert coordinator._may_overlap()
    result = coordinator.tick()
    # THEN it learnt the stray ticket, read the messages again after the LIST of tickets, and
    # sent only "free": "stray" is the stray ticket's
    assert keys.ticket(epoch, 40) in coordinator.memory.known
    assert reads.count(keys.msg) == 2
    assert result.dispatched == 1
    [payload] = h.invocations
    assert [r["key"] for r in payload["doc"]["refs"]] != [stray.key]


def test_a_saturated_or_fifo_queue_lists_its_tickets_first() -> None:
    # GIVEN a steady leader
    h, _ = _steady(QueueSettings(batch_size=1, max_in_flight_tickets=2))
    coordinator = h.coordinator
    # WHEN a FIFO group is live: THEN no overlap (its next message goes out in the tick that
    # sees its ticket gone)
    h.queue.enqueue("g1", group="g")
    assert h.tick().dispatched == 1
    assert not coordinator._may_overlap()
    # WHEN every slot is taken by ungrouped work: THEN no overlap (the read would be wasted)
    h.invocations.clear()
    h2, _ = _steady(QueueSettings(batch_size=1, max_in_flight_tickets=2))
    for body in ("x", "y"):
        h2.queue.enqueue(body)
    assert h2.tick().dispatched == 2
    assert not h2.coordinator._may_overlap()
    # and with a slot free and nothing grouped, it does
    h2.work(Recorder())
    h2.tick()
    assert h2.coordinator._may_overlap()


def test_a_quiet_tick_makes_the_next_one_list_in_turn() -> None:
    """On a quiet queue the read beside the LIST only takes the CPU of the invokes just sent
    (the AWS simulation's first message after an idle spell: 998 ms, 1,031 with overlap)."""
    h, _ = _steady()
    assert h.tick().dispatched == 0
    assert not h.coordinator.memory.overlap
    h.queue.enqueue("a")
    assert h.tick().dispatched == 1  # in turn, and busy again
    assert h.coordinator.memory.overlap


def test_a_failed_tick_makes_the_next_one_list_in_turn() -> None:
    h, _ = _steady()
    h.queue.enqueue("a")
    fail = {"on": True}
    list_ = h.storage.list

    def failing(prefix: str, **kwargs: Any) -> Any:
        if fail["on"] and prefix == h.queue.keys.msg:
            raise OSError("LIST failed")
        return list_(prefix, **kwargs)

    h.storage.list = failing  # type: ignore[method-assign]
    try:
        h.tick()
    except OSError:
        pass
    else:
        raise AssertionError("the tick should have failed")
    assert not h.coordinator.memory.overlap
    fail["on"] = False
    assert h.tick().dispatched == 1  # in turn; "a" read again from where the cursor was
    assert h.coordinator.memory.overlap


def _id(h: Harness, body: str) -> str:
    """The name of the message whose stored body holds `body`."""
    for entry in h.storage.list(h.queue.keys.msg).entries:
        obj = h.storage.get(entry.key)
        if obj is not None and body.encode() in obj.body:
            return entry.key.rsplit("/", 1)[-1]
    raise AssertionError(body)

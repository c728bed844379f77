"""Unit: a leader's first tick waits for no S3 answer it could have had at once (issue 22).

On Lambda every scheduled run takes over from the one before, and the messages enqueued during
that handover wait for the new leader's first tick: its reads of the predecessor's live tickets
and its discovery of the queue's folders were one answer after another (the worst 1 % of the
simulation's p99 at half capacity, in one seed of three, was that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.protocol.tickets import Ticket
from s3queue.storage import MemoryStorage, Object, Page, new_token


class Batches(MemoryStorage):
    """The memory storage, noting each LIST and GET with the `RunAll` batch it was sent in (0:
    none, the tick's own thread); `run_all` is the batching `RunAll`."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.batch, self.batches = 0, 0
        self.calls: list[tuple[str, str, int]] = []

    def run_all(self, jobs: list[Callable[[], Any]]) -> list[Any]:
        self.batches += 1
        self.batch = self.batches
        try:
            return [job() for job in jobs]
        finally:
            self.batch = 0

    def list(self, prefix: str, **kwargs: Any) -> Page:
        self.calls.append(("LIST", prefix, self.batch))
        return super().list(prefix, **kwargs)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        self.calls.append(("LIST", prefix, self.batch))
        return super().list_folders(prefix)

    def get(self, key: str, **kwargs: Any) -> Object | None:
        self.calls.append(("GET", key, self.batch))
        return super().get(key, **kwargs)


def _harness() -> tuple[Harness, Batches]:
    clock = FakeClock()
    storage = Batches(clock)
    settings = QueueSettings(batch_size=2, max_batch_size=2)
    return Harness(storage=storage, clock=clock, settings=settings), storage


def test_a_new_leader_reads_its_predecessors_live_tickets_at_once() -> None:
    # GIVEN a leader that dispatched three tickets nobody has worked yet, and released
    h, storage = _harness()
    for n in range(6):
        h.queue.enqueue({"n": n})
    assert h.tick().dispatched == 6
    tickets = {entry.key for entry in storage.list(h.queue.keys.tickets).entries}
    assert len(tickets) == 3
    h.coordinator.release()
    # WHEN the next leader's first tick learns them
    successor = h.new_coordinator("c2")
    successor.run_all = storage.run_all
    storage.calls.clear()
    assert successor.tick().dispatched == 0  # all six are in flight
    # THEN it read each once, all three in one batch of GETs at once
    gets = [(key, batch) for kind, key, batch in storage.calls if kind == "GET" and key in tickets]
    assert sorted(key for key, _ in gets) == sorted(tickets)
    (batch,) = {batch for _, batch in gets}
    assert batch > 0


def test_a_lambda_leaders_first_tick_discovers_beside_its_list_of_tickets() -> None:
    # GIVEN a coordinator that sends its invokes from threads, as the Lambda's, on a queue
    # with a message and a plain PUT waiting in the inbox
    h, storage = _harness()
    keys = h.queue.keys
    jobs: list[Callable[[], None]] = []
    h.coordinator.reconciler.send = jobs.append
    h.coordinator.run_all = storage.run_all
    h.queue.enqueue("library")
    storage.put(keys.inbox + "a.json", b'{"n": 1}')
    # WHEN its first tick runs
    assert h.tick().dispatched == 2
    lists = [(prefix, batch) for kind, prefix, batch in storage.calls if kind == "LIST"]
    # THEN the folders and whether the inbox has objects are asked beside the LIST of
    # tickets, and the inbox's objects are listed after it (coordinator.py's order)
    assert lists[:3] == [(keys.tickets, 1), (keys.inbox, 1), (keys.parts, 1)]
    assert (keys.inbox, 0) in lists[3:]
    # AND a local coordinator (no `send`) keeps its first tick as it was: the LIST of tickets,
    # then the discovery
    local, storage2 = _harness()
    local.coordinator.run_all = storage2.run_all
    local.tick()
    assert [(p, b) for kind, p, b in storage2.calls if kind == "LIST"][:1] == [
        (local.queue.keys.tickets, 0)
    ]


def test_a_new_leader_invokes_a_ticket_left_committed_once_it_was_quiet_long_enough() -> None:
    """A worker committed a ticket and died before its apply: the leader invokes it again once
    it has been known `dispatch_timeout` without going. A new leader learns it as invoked at its
    last write (S3's time), not at the takeover: leaders that each lead for less than
    `dispatch_timeout` (short Lambda runs, found by the chaos suite) would never invoke it."""
    h, _ = _harness()
    h.queue.enqueue({"n": 1})
    assert h.tick().dispatched == 1
    [payload] = h.invocations
    worker = h.new_worker("w1")
    worker.process(payload, Recorder(), remaining_ms=lambda: 60_000)  # committed and applied
    h.invocations.clear()
    # GIVEN a ticket left committed (its applier gone), and the leader that knew it gone too
    h.queue.enqueue({"n": 2})
    h.clock.advance(1)
    assert h.tick().dispatched == 1
    [payload] = h.invocations
    h.invocations.clear()
    key = payload["ticket"]
    obj = h.storage.get(key)
    assert obj is not None
    committed = Ticket.decode(obj.body)
    committed.state, committed.owner = "committed", "w-dead"
    token = new_token()
    h.storage.put(key, committed.encode(token), token=token)
    h.coordinator.release()
    timeout = h.coordination.dispatch_timeout
    # WHEN a new leader takes over a little less than dispatch_timeout after that write
    h.clock.advance(timeout - 1)
    successor = h.new_coordinator("c2")
    successor.tick()
    assert h.invocations == []  # the write may be an applier's, still at work
    # THEN a leader that takes over after it invokes it at its first tick
    successor.release()
    h.clock.advance(2)
    third = h.new_coordinator("c3")
    third.tick()
    assert [p["ticket"] for p in h.invocations] == [key]


def test_a_takeover_reserves_the_new_epochs_first_block_in_its_own_write() -> None:
    """A new leader's first tick publishes its tickets at once without a second lease CAS to
    reserve their seqs: the takeover's write reserved the first block (lease.py, "Blocks")."""
    h, storage = _harness()
    h.coordinator.release()
    for n in range(6):
        h.queue.enqueue({"n": n})
    puts: list[str] = []
    put = storage.put

    def counted(key: str, *args: Any, **kwargs: Any) -> str:
        puts.append(key)
        return put(key, *args, **kwargs)

    storage.put = counted  # type: ignore[method-assign]
    successor = h.new_coordinator("c2")
    assert successor.tick().dispatched == 6  # three tickets of two, at once
    lease = h.queue.keys.lease
    assert puts.count(lease) == 1  # the takeover; its block holds the three seqs
    assert successor.lease.doc is not None
    assert successor.lease.doc.blocks[successor.lease.epoch][0] == 0
    assert len([k for k in puts if k.startswith(h.queue.keys.tickets)]) == 3

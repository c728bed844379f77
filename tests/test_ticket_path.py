"""The message path: a ticket says its partition, a claim owns its ticket's writes, reconcile
says which tickets finished."""

from __future__ import annotations

import json

from harness import Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.tickets import Ref, Ticket

KEYS = QueueKeys("s3queue", "jobs")


def test_a_published_ticket_carries_its_folder_and_the_worker_shows_its_partition() -> None:
    h = Harness()
    h.queue.enqueue({"n": 1}, partition="acme", priority=3)
    h.tick()
    [payload] = h.invocations
    ticket = Ticket.decode(payload["doc"])
    assert (ticket.partition, ticket.partition_known) == ("acme~3", True)
    assert ticket.tenant(KEYS) == "acme"
    handler = Recorder()
    h.drain(handler)
    assert [m.partition for m in handler.seen] == ["acme"]


def test_the_default_partition_is_written_as_null_not_left_out() -> None:
    ticket = Ticket("jobs", 1, 0, [Ref("s3queue/jobs/msg/x", "e", 1)], 0)
    doc = json.loads(ticket.encode("t"))
    assert "part" in doc
    assert doc["part"] is None
    again = Ticket.decode(doc)
    assert (again.partition, again.partition_known) == (None, True)
    assert again.folder(KEYS) == KEYS


def test_an_older_versions_ticket_without_a_partition_is_read_off_its_first_key() -> None:
    # GIVEN a ticket written before tickets carried their folder (a rolling deploy)
    key = KEYS.partitioned("acme~2").msg + "0000000000001-ABC"
    doc = json.loads(Ticket("jobs", 1, 0, [Ref(key, "e", 1)], 0).encode("t"))
    del doc["part"]
    # WHEN it is read THEN its folder is the one its first message's key names
    old = Ticket.decode(doc)
    assert old.partition_known is False
    assert old.folder(KEYS).partition == "acme~2"
    assert old.tenant(KEYS) == "acme"
    # ... and it is written back as it came, for the older versions still reading it
    assert "part" not in json.loads(old.encode("t"))


def test_an_older_versions_ticket_is_worked_in_its_partition() -> None:
    h = Harness(settings=QueueSettings(max_retries=0))
    h.queue.enqueue({"n": 1}, partition="acme")
    h.tick()
    [payload] = h.invocations
    doc = dict(payload["doc"])
    del doc["part"]
    h.invocations[0] = {**payload, "doc": doc}
    handler = Recorder()
    h.drain(handler)
    assert [m.partition for m in handler.seen] == ["acme"]


def test_a_copy_changes_apart_from_its_ticket() -> None:
    ticket = Ticket("jobs", 1, 0, [Ref("k", "e", 1)], 0, state="claimed", running="k")
    copy = ticket.copy()
    copy.expire(5)
    assert ticket.generation == 0
    assert ticket.refs[0].expiries == {}
    assert ticket.history == []
    assert copy.refs[0].expiries == {"0": 1}
    assert Ticket.decode(ticket.encode("t")).encode("t") == ticket.encode("t")


def test_reconcile_returns_the_tickets_that_finished() -> None:
    # GIVEN a published ticket that its worker has applied (deleted) since the last tick
    h = Harness()
    h.queue.enqueue({"n": 1})
    h.tick()
    coordinator = h.coordinator
    [key] = coordinator.memory.known
    assert [r.status for r in h.work(Recorder())] == ["committed"]
    # WHEN the leader reconciles the tickets it lists
    memory = coordinator.memory
    listed = coordinator._list_tickets()
    reconciled = coordinator.reconciler.reconcile(listed, memory.known)
    # THEN the finished one is returned, and no longer known
    assert list(reconciled.finished) == [key]
    assert reconciled.reaped == 0
    assert memory.known == {}


def test_stats_and_an_invocation_are_exactly_their_typed_contracts() -> None:
    from s3queue.operations.admin import Counts, QueueStats
    from s3queue.protocol.tickets import Invocation

    h = Harness()
    h.queue.enqueue({"n": 1}, partition="acme")
    stats = h.queue.stats()
    assert set(stats) == QueueStats.__required_keys__
    assert set(stats["partitions"]["acme"]) == set(Counts.__required_keys__)
    h.tick()
    [invocation] = h.invocations  # as a Lambda gets it: the document, never the object
    # held, pulled: local only; stalls: only on an invoke again of a ticket left pending
    assert set(invocation) == set(Invocation.__annotations__) - {"held", "pulled", "stalls"}


def test_an_in_process_worker_gets_the_ticket_itself_not_its_json() -> None:
    """The local runtime's coordinator hands its threads a copy of the ticket (issue 20): no
    encode and no decode on the way; each claim works on a copy of its own."""
    h = Harness()
    h.coordinator = Coordinator(
        h.storage, "jobs", invoker=h.invocations.append, clock=h.clock, in_process=True
    )
    h.queue.enqueue({"n": 1})
    h.tick()
    [invocation] = h.invocations
    held = invocation.get("held")
    assert "doc" not in invocation and held is not None
    handler = Recorder()
    h.work(handler)
    assert [m.body for m in handler.seen] == [{"n": 1}] and held.state == "pending"

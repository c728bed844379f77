"""Zombie requests: a write its client gave up on that S3 applies later (issue 19).

The leader never resends a ticket and never forgets one whose create failed: it doubts it in
the lease, looks, and settles it (protocol/lease.py, "Doubts"). These tests land a ticket's
create late, after its messages went out again, and check that it never runs; that a create
which did apply despite its error runs once; and that a leader deposed between its doubt and
its settlement leaves the question to its successor's seal.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.errors import Conflict, StorageError
from s3queue.protocol import markers
from s3queue.protocol.lease import PENDING, LeaseDoc, read_lease
from s3queue.storage import MemoryStorage


class Zombies:
    """MemoryStorage whose chosen ticket creates fail and are kept, to land when asked: the
    client saw an error, S3 applies the request later (its condition judged then)."""

    def __init__(self, inner: MemoryStorage, *, applied: bool = False) -> None:
        self.inner, self.applied = inner, applied
        self.failing = 0
        self.kept: list[tuple[str, bytes, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, key: str, body: bytes, **kw: Any) -> str:
        if self.failing and "/tickets/" in key and kw.get("if_none_match"):
            self.failing -= 1
            kw.pop("resend_if", None)
            if self.applied:  # applied, and then the answer was an error
                self.inner.put(key, body, **kw)
            else:
                self.kept.append((key, body, kw))
            raise StorageError(f"injected: {key} timed out")
        return self.inner.put(key, body, **kw)

    def land(self) -> list[str]:
        """Apply every kept request now; the keys created."""
        created = []
        for key, body, kw in self.kept:
            try:
                self.inner.put(key, body, **kw)
                created.append(key)
            except Exception:  # noqa: BLE001 - a refused condition: the zombie changed nothing
                pass
        self.kept.clear()
        return created


def test_a_ticket_create_that_lands_after_its_messages_went_out_again_never_runs() -> None:
    clock = FakeClock()
    storage = Zombies(MemoryStorage(clock))
    h = Harness(storage=storage, clock=clock)  # type: ignore[arg-type]
    handler = Recorder()
    for n in range(3):
        h.queue.enqueue(f"m{n}")
    # GIVEN a ticket whose create timed out (doubted, found missing: a hole)
    storage.failing = 1
    with contextlib.suppress(StorageError):  # (before doubts, the tick raised)
        h.tick()
    [zombie] = [key for key, _, _ in storage.kept]
    # WHEN its messages go out in another ticket, and the old create lands meanwhile
    assert h.tick().dispatched == 3
    assert storage.land() == [zombie]
    # (a pulling worker lists the zombie first and tries it)
    [result] = [h.worker.process({"queue": h.queue.keys.queue, "ticket": zombie}, handler)]
    h.work(handler)
    h.drain(handler)
    # THEN each message ran once; the zombie ticket was rejected and dropped
    assert sorted(handler.bodies()) == ["m0", "m1", "m2"]
    assert result.status == "rejected" and zombie not in h.keys("tickets/")
    assert [e.fields["ticket"] for e in h.kinds("fenced")] == [zombie]
    lease = read_lease(h.storage, h.queue.keys.lease)
    assert lease is not None and lease.holes == {1: (0,)} and not lease.doubts


def test_a_ticket_create_that_applied_despite_its_error_runs_once() -> None:
    clock = FakeClock()
    storage = Zombies(MemoryStorage(clock), applied=True)
    h = Harness(storage=storage, clock=clock)  # type: ignore[arg-type]
    handler = Recorder()
    h.queue.enqueue("m0")
    storage.failing = 1
    # GIVEN a ticket create that applied but answered with an error
    assert h.tick().dispatched == 1  # found by the HEAD after its doubt: it runs
    assert [e.fields["landed"] for e in h.kinds("settled")] == [True]
    lease = read_lease(h.storage, h.queue.keys.lease)
    assert lease is not None and lease.accepts(1, 0) is True
    h.work(handler)
    h.drain(handler)
    assert handler.bodies() == ["m0"]


def test_a_successor_settles_its_predecessors_doubts_when_it_seals() -> None:
    clock = FakeClock()
    storage = MemoryStorage(clock)
    h = Harness(storage=storage, clock=clock)
    h.queue.enqueue("a")
    h.queue.enqueue("b")
    assert h.tick().dispatched == 2  # ticket 1-0 holds both
    # GIVEN the lease of a leader deposed between two doubts and their settlements: seq 0
    # landed (listed), seq 5 did not
    obj = storage.get(h.queue.keys.lease)
    assert obj is not None
    doc = LeaseDoc.decode(obj.body).evolve(doubts={1: (0, 5)}, lease_until_ms=0)
    storage.put(h.queue.keys.lease, doc.encode("t"), if_match=obj.etag)
    assert doc.accepts(1, 0) is False and doc.accepts(1, 5) is False
    # WHEN another coordinator takes over and seals epoch 1
    successor = h.new_coordinator("c2")
    successor.tick()
    sealed = read_lease(storage, h.queue.keys.lease)
    # THEN the listed doubt is valid again, the unseen one a hole, and no doubt is left
    assert sealed is not None and sealed.epoch == 2 and sealed.seals.get(1) not in (None, PENDING)
    assert sealed.accepts(1, 0) is True and sealed.accepts(1, 5) is False
    assert sealed.doubts == {}
    handler = Recorder()
    h.coordinator = successor
    h.work(handler)
    h.drain(handler)
    assert sorted(handler.bodies()) == ["a", "b"]


def test_doubts_and_own_holes_survive_encoding_and_seals() -> None:
    doc = LeaseDoc("me", 3, 10, seals={2: 7}, holes={3: (1,)}, doubts={3: (4,)})
    again = LeaseDoc.decode(doc.encode("t"))
    assert again.doubts == {3: (4,)} and again.holes == {3: (1,)}
    assert again.accepts(3, 1) is False  # our own hole
    assert again.accepts(3, 4) is False  # our own doubt
    assert again.accepts(3, 2) is True


def test_the_advisory_pace_survives_encoding_and_an_unreadable_one_is_ignored() -> None:
    """`LeaseDoc.pace` hands the leader's ticket pace to its successor; it decides nothing
    about a ticket, so a pace that cannot be read leaves the lease readable (no fallback to
    `_from_tickets`, which would jump epochs)."""
    doc = LeaseDoc("me", 3, 10, seals={2: 7}, pace=(1000.5, 10.0, 1.0, 100.0, 10005.0))
    assert LeaseDoc.decode(doc.encode("t")).pace == (1000.5, 10.0, 1.0, 100.0, 10005.0)
    body = json.loads(doc.encode("t"))
    body["pace"] = ["fast", None]
    broken = LeaseDoc.decode(json.dumps(body).encode())
    assert broken.pace == () and broken.epoch == 3 and broken.seals == {2: 7}
    assert "pace" not in json.loads(LeaseDoc("me", 1, 10).encode("t"))


def test_purge_while_the_queue_runs_spares_what_keeps_it_safe() -> None:
    """Purge during a run (issue 19): a message a live ticket holds finishes once, a consumed
    copy's tombstone stays, a handled id stays handled and a purged id can be sent again."""
    h = Harness()
    handler = Recorder()
    h.queue.enqueue("done-once", id="handled")
    h.drain(handler)
    h.queue.enqueue("in-flight")
    assert h.tick().dispatched == 1  # its ticket is live, no worker has it yet
    h.queue.enqueue("waiting", id="purged-id", delay=60)
    tombstone = h.queue.keys.msg + "0000000000000-TOMB~o1-0"
    h.storage.put(tombstone, b"")
    # WHEN the queue is purged
    assert h.queue.purge() == 1  # the delayed one; the ticket's message is left to finish
    # THEN the tombstone is still there, the live ticket's message runs once
    assert tombstone in h.keys("msg/", tombstones=True)
    h.work(handler)
    # AND a handled id stays handled, a purged one goes in again and runs once
    h.queue.enqueue("done-once", id="handled")
    h.queue.enqueue("waiting", id="purged-id")
    h.drain(handler)
    assert sorted(handler.bodies()) == ["done-once", "in-flight", "waiting"]


def test_a_zombie_start_of_a_released_message_does_not_strand_its_marker() -> None:
    """Found by the chaos suite's zombie fault (everything, seed 1): a worker's CAS of an
    explicit id's marker to "started" timed out, so it released the message unrun; the CAS
    landed later, between the apply's read of the marker and its move to the release copy. The
    move's Conflict was taken for "an earlier apply moved it", the marker kept naming the
    deleted record, and the copy was skipped as "handled elsewhere": the message was lost."""
    clock = FakeClock()
    inner = MemoryStorage(clock)
    keys = Harness(storage=inner, clock=clock).queue.keys
    source, copy = keys.msg + "1-a", keys.msg + "2-a~o1-0"
    markers.create(inner, keys, "order-1", source)
    found = markers.read(inner, keys, "order-1")
    assert found is not None

    class ZombieFirst:
        """Lands the worker's late "started" CAS just before the first marker write."""

        def __init__(self) -> None:
            self.landed = False

        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def put(self, key: str, body: bytes, **kw: Any) -> str:
            if not self.landed and key == keys.marker("order-1"):
                self.landed = True
                markers.start(inner, keys, "order-1", found)  # the zombie lands first
            return inner.put(key, body, **kw)

    markers.point_from(ZombieFirst(), keys, "order-1", source, copy)  # type: ignore[arg-type]
    moved = markers.read(inner, keys, "order-1")
    assert moved is not None and moved.marker == markers.Marker(markers.PENDING, copy)


def test_purge_takes_the_payloads_of_what_it_purged_and_nothing_on_its_way(
    tmp_path: Path,
) -> None:
    h = Harness()
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(300 * 1024))
    h.queue.enqueue_file(big, delay=60)
    [purged_blob] = h.keys("blobs/")
    # a payload whose record is still on its way (a producer between its two PUTs)
    on_its_way = h.queue.keys.blob("01ARZ3NDEKTSV4RRFFQ69G5FAV")
    h.storage.put(on_its_way, b"x" * 10)
    assert h.queue.purge() == 1
    assert h.keys("blobs/") == [on_its_way] and purged_blob != on_its_way


def test_a_purged_copy_leaves_a_tombstone_a_late_applier_cannot_create_again() -> None:
    """A copy purged while a ticket the purge did not list held it (published during the
    purge) may have been handled; the committer of the ticket that wrote it, paused before
    its apply with the record in hand, creates it If-None-Match: a tombstone refuses that,
    where a delete would let the message run again."""
    h = Harness()
    h.queue.enqueue("flaky")
    h.tick()
    h.work(Recorder(fail=lambda m: RuntimeError("once")))  # a retry copy, in backoff
    [copy] = [k for k in h.keys("msg/") if "~o" in k]
    # WHEN the queue is purged
    assert h.queue.purge() == 1
    # THEN the copy is a tombstone, and a late create of it (the paused committer's) fails
    assert h.keys("msg/") == [] and copy in h.keys("msg/", tombstones=True)
    with pytest.raises(Conflict):
        h.storage.put(copy, b"late copy", if_none_match=True)

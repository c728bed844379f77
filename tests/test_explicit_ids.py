"""Explicit ids (``enqueue(id=)``) at every moment of a message's life: while it is applied,
after it died, after a redrive (issue 19, defects 2 and 4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from harness import QUEUE, Crash, Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.errors import PermanentError
from s3queue.message import Message
from s3queue.protocol import markers
from s3queue.protocol.keys import QueueKeys
from s3queue.storage import MemoryStorage, Object, Storage


class AfterGet(MemoryStorage):
    """MemoryStorage that runs `during` once, right after a GET of `key` has read its answer:
    what another process does between a reader's GET and its next request."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.key: str | None = None
        self.during: Callable[[], object] = lambda: None

    def arm(self, key: str, during: Callable[[], object]) -> None:
        self.key, self.during = key, during

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        found = super().get(key, if_match=if_match)
        if key == self.key:
            self.key = None
            self.during()
        return found


def test_an_id_enqueued_again_while_its_retry_is_applied_runs_once() -> None:
    # GIVEN an explicit-id message at key K whose first delivery fails (a retry follows)
    clock = FakeClock()
    storage = AfterGet(clock)
    h = Harness(storage=storage, clock=clock, settings=QueueSettings(backoff_base=1))
    h.queue.enqueue({"order": 1}, id="order-1")
    [first] = h.keys("msg/")
    handler = Recorder(fail=lambda m: ValueError("down") if m.attempt == 1 else None)

    def deliver_and_apply() -> None:
        h.tick()
        h.work(handler)  # fails: retry copy R written, marker moved to R, K deleted

    # WHEN the producer enqueues the id again, and that whole apply happens between its GET
    # of the marker (pending at K) and its PUT of the message (which re-creates K)
    storage.arm(h.queue.keys.marker("order-1"), deliver_and_apply)
    h.queue.enqueue({"order": 1}, id="order-1")
    assert first in h.keys("msg/") and len(h.keys("msg/")) == 2  # K is back beside R
    h.drain(handler)
    # THEN the handler ran it once more, as the retry (K is retired unrun: the marker names R)
    assert [(m.id, m.attempt, m.redelivered) for m in handler.seen] == [
        ("order-1", 1, False),
        ("order-1", 2, False),
    ]
    assert [e.fields["message_id"] for e in h.kinds("skip")] == ["order-1"]
    assert h.keys("msg/") == []


def test_a_record_runs_only_where_its_marker_points() -> None:
    found = markers.Found(markers.Marker("pending", "q/msg/R"), "etag")
    assert markers.may_run(found, "q/msg/R")
    assert not markers.may_run(found, "q/msg/K")
    assert not markers.may_run(markers.Found(markers.Marker("done"), "etag"), "q/msg/R")
    assert markers.may_run(None, "q/msg/K")  # no marker (expired, purged): nothing forbids it


def test_an_undecodable_marker_reads_as_none_for_every_reader() -> None:
    storage = MemoryStorage()
    keys = QueueKeys("s3queue", QUEUE)
    storage.put(keys.marker("x"), b"not json")
    assert markers.read(storage, keys, "x") is None


def poisoned(message: Message) -> None:
    if message.body.get("poison"):
        raise PermanentError("bad data")


def run_to_death(h: Harness) -> None:
    """Enqueue order-1 with bad data and run it into the DLQ; order-1's marker is then done."""
    h.queue.enqueue({"poison": True}, id="order-1")
    h.drain(poisoned)
    [dead] = h.queue.dead_letters()
    assert dead["id"] == "order-1"


@pytest.fixture(params=["memory", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest) -> Storage:
    if request.param == "memory":
        return MemoryStorage()
    s3: Storage = request.getfixturevalue("s3_storage")
    return s3


def test_a_redriven_explicit_id_runs_again_once(backend: Storage) -> None:
    # GIVEN an explicit-id message in the DLQ, and an enqueue of its id after it died
    h = Harness(storage=backend)
    run_to_death(h)
    h.queue.enqueue({"poison": False}, id="order-1")  # a producer's retry: no resurrection
    assert h.keys("msg/") == []
    # WHEN the operator fixed the handler and redrives
    handler = Recorder()
    assert h.queue.redrive() == 1
    h.drain(handler)
    # THEN it ran once, as a fresh message with its history, and is gone from the DLQ
    assert [(m.id, m.body, m.attempt) for m in handler.seen] == [("order-1", {"poison": True}, 1)]
    assert h.queue.dead_letters() == [] and h.kinds("skip") == []
    # AND an enqueue of the id afterwards still puts nothing
    h.queue.enqueue({"poison": False}, id="order-1")
    h.drain(handler)
    assert len(handler.seen) == 1


def test_a_redrive_that_died_after_the_message_does_not_put_it_twice() -> None:
    # GIVEN an explicit-id dead letter, redriven by a process that died after its message PUT
    h = Harness()
    run_to_death(h)
    storage: Any = h.storage
    tombstone = storage.put

    def die_on_tombstone(key: str, body: bytes, **kwargs: Any) -> str:
        if key.startswith(h.queue.keys.dlq) and body == b"":
            raise KeyboardInterrupt("killed")
        return str(tombstone(key, body, **kwargs))

    storage.put = die_on_tombstone
    with pytest.raises(KeyboardInterrupt):
        h.queue.redrive()
    storage.put = tombstone
    # WHEN the redrive is run again THEN the message is put once, and runs once
    assert h.queue.redrive() == 1
    handler = Recorder()
    h.drain(handler)
    assert [(m.id, m.attempt) for m in handler.seen] == [("order-1", 1)]
    assert h.queue.dead_letters() == []


class DiesReadingMarkers(MemoryStorage):
    """A worker that dies on its next read of a dedup marker once `armed`."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.armed = False

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        if self.armed and "/ids/" in key:
            self.armed = False
            raise Crash()
        return super().get(key, if_match=if_match)


def test_an_id_handled_then_purged_before_its_apply_stays_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chaos soak (`--profile everything`, seed 1827): an operator's purge listed the live
    tickets before the one holding an explicit id's message was published, then deleted the
    message after it was handled and committed, while the committer's apply had died before
    the marker; the helper's apply found the object gone and left the marker "started", and
    the id enqueued again ran a second time."""
    clock = FakeClock()
    storage = DiesReadingMarkers(clock)
    h = Harness(storage=storage, clock=clock)
    h.queue.enqueue("once", id="e1")
    h.tick()
    handler = Recorder()

    def run(m: Message) -> None:
        handler(m)
        storage.armed = True  # the apply's read of the marker kills the worker

    with pytest.raises(Crash):
        h.work(run)
    assert [t.rsplit("/", 1)[-1] for t in h.keys("tickets/")]  # committed, not applied
    # WHEN a purge that listed the tickets before this one existed deletes the message
    monkeypatch.setattr("s3queue.operations.purging._live_refs", lambda *a: set())
    assert h.queue.purge() == 1
    # and a helper applies the committed ticket
    h.clock.advance(h.coordination.dispatch_timeout + 1)
    h.tick()
    h.work(handler)
    assert h.keys("tickets/") == []
    # THEN the id is handled for good: enqueued again, it never runs again
    h.queue.enqueue("once", id="e1")
    h.drain(handler)
    assert handler.bodies() == ["once"]


def test_an_id_whose_retry_copy_was_purged_runs_when_enqueued_again(backend: Storage) -> None:
    """A chaos soak (`--profile shards`, seed 1964): an explicit id's handler failed, its retry
    copy was purged (a copy becomes a tombstone, so a late applier cannot create it again),
    and the id's enqueue afterwards found the tombstone at its marker's key and took it for
    the message: acknowledged, never run. After a purge an id goes back, copy or original."""
    h = Harness(storage=backend)
    h.queue.enqueue("again", id="r1")
    h.tick()
    h.work(Recorder(fail=lambda m: RuntimeError("fails once")))
    [copy] = h.keys("msg/")
    assert copy.rsplit("/", 1)[-1].startswith(tuple("0123456789")) and "~o" in copy
    # WHEN the operator purges the queue: the retry copy becomes a tombstone
    assert h.queue.purge() == 1
    assert h.keys("msg/") == [] and h.keys("msg/", tombstones=True) == [copy]
    # AND the producer enqueues the id again, message and file alike
    assert not h.queue.writer.enqueued("r1")
    h.queue.enqueue("again", id="r1")
    # THEN it runs, once, and the id is handled for good
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["again"]
    h.queue.enqueue("again", id="r1")
    h.drain(handler)
    assert handler.bodies() == ["again"]

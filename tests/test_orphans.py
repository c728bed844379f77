"""Stored payloads never leak: a dead producer's upload is collected once no record can refer to
it (`orphans.collect_orphans`, ``s3queue gc``), and nothing a record holds ever is."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue import Message, PermanentError
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.operations.orphans import DEFAULT_GRACE_MS, collect_orphans
from s3queue.protocol.keys import MsgKey, new_id
from s3queue.protocol.records import Payload, Record, encode_records
from s3queue.storage import MemoryStorage
from s3queue.storage.base import new_token
from s3queue.storage.s3 import S3Storage

KiB = 1024
DAY = 24 * 3600.0
WEEK = timedelta(days=7)


class ProducerKilled(Exception):
    """The producer died between its upload and its record's PUT."""


def harness(storage: Any = None, clock: FakeClock | None = None, **settings: Any) -> Harness:
    clock = clock or FakeClock()
    storage = storage if storage is not None else MemoryStorage(clock)
    return Harness(
        settings=QueueSettings(max_message_bytes=100 * KiB, **settings),
        storage=storage,
        clock=clock,
    )


def payload_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(os.urandom(300 * KiB))
    return path


def kill_producer(h: Harness, source: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Upload a payload whose record is never put; the orphan's key."""
    before = set(h.keys("blobs/"))

    def killed(*args: Any, **kwargs: Any) -> bool:
        raise ProducerKilled

    with monkeypatch.context() as patch:
        patch.setattr(h.queue.writer, "send_one", killed)
        with pytest.raises(ProducerKilled):
            h.queue.enqueue_file(source)
    [orphan] = set(h.keys("blobs/")) - before
    return orphan


def test_a_dead_producers_upload_is_collected_after_the_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a message with a payload, and a producer that died after uploading another
    h = harness()
    h.queue.enqueue_file(payload_file(tmp_path, "live.bin"), delay=timedelta(days=30))
    [live] = h.keys("blobs/")
    orphan = kill_producer(h, payload_file(tmp_path, "lost.bin"), monkeypatch)
    # WHEN a collection runs within the grace period: nothing is old enough to suspect
    h.clock.advance(6 * DAY)
    assert h.queue.collect_orphans(grace=WEEK).suspects == 0
    # WHEN it runs after it, dry
    h.clock.advance(2 * DAY)
    found = h.queue.collect_orphans(grace=WEEK, dry_run=True)
    # THEN it names the orphan only, and deletes nothing
    assert (found.suspects, found.orphans, found.deleted) == (2, [orphan], False)
    assert sorted(h.keys("blobs/")) == sorted([live, orphan])
    # WHEN it runs for real: the orphan goes, the waiting message's payload stays and is read
    assert h.queue.collect_orphans(grace=WEEK).deleted
    assert h.keys("blobs/") == [live]
    h.clock.advance(30 * DAY)
    seen: list[bytes] = []

    def read(message: Message) -> None:
        with message.open() as stream:
            seen.append(stream.read())

    h.drain(Recorder(read))
    assert len(seen) == 1 and len(seen[0]) == 300 * KiB and h.keys("blobs/") == []


def test_payloads_of_waiting_retried_partitioned_and_dead_messages_are_never_collected(
    tmp_path: Path,
) -> None:
    # GIVEN payloads held by a retry copy, a message in a partition and a dead letter
    h = harness(max_retries=1, backoff_base=DAY, backoff_cap=DAY)
    h.queue.enqueue_file(payload_file(tmp_path, "a.bin"), id="retried")
    h.queue.enqueue_file(payload_file(tmp_path, "b.bin"), id="dead")
    h.queue.enqueue_file(
        payload_file(tmp_path, "c.bin"), partition="acme", delay=timedelta(days=30)
    )

    def fail(message: Message) -> BaseException | None:
        return PermanentError("no") if message.id == "dead" else RuntimeError("later")

    h.tick()
    h.work(Recorder(fail))
    held = h.keys("blobs/") + h.keys("dlq/~payloads/")
    assert len(held) == 3 and len(h.queue.dead_letters()) == 1
    # WHEN every payload is far older than the grace period
    h.clock.advance(8 * DAY)
    found = h.queue.collect_orphans(grace=WEEK)
    # THEN each was a suspect and none an orphan
    assert (found.suspects, found.orphans) == (3, [])
    assert h.keys("blobs/") + h.keys("dlq/~payloads/") == held


class MovesOnRead(MemoryStorage):
    """Retires a message as the collector reads it, after putting its copy at a key the
    collector's LIST has already passed: what an apply running during a scan can do."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.moving: str | None = None

    def get(self, key: str, *, if_match: str | None = None) -> Any:
        if key != self.moving:
            return super().get(key, if_match=if_match)
        self.moving = None
        obj = super().get(key)
        assert obj is not None
        self.put(key.rsplit("/", 1)[0] + "/0000000000000-copy", obj.body, if_none_match=True)
        self.delete(key)
        return None


def test_a_payload_whose_record_moves_during_a_scan_is_kept() -> None:
    # GIVEN an old payload whose message is moved while the first scan reads it
    clock = FakeClock()
    storage = MovesOnRead(clock)
    h = harness(storage, clock)
    keys = h.queue.keys
    blob = keys.blob(new_id(clock.now_ms()))
    storage.put(blob, b"payload")
    holder = keys.msg_key(MsgKey(clock.now_ms(), new_id(clock.now_ms())))
    message = Record("m1", None, clock.now_ms(), payload=Payload(blob, 7))
    storage.put(holder, encode_records([message], new_token()))
    storage.moving = holder
    clock.advance(8 * DAY)
    # WHEN a collection runs: the first scan misses both the source and its copy
    found = collect_orphans(storage, keys, clock.now_ms(), grace_ms=DEFAULT_GRACE_MS)
    # THEN the second scan sees the copy, and the payload is kept
    assert storage.moving is None and found.orphans == []
    assert storage.get(blob) is not None


def test_an_orphaned_dead_letter_payload_is_collected_and_a_held_one_kept(
    tmp_path: Path,
) -> None:
    # GIVEN two dead letters with payloads; one was redriven by a redrive that died before it
    # deleted the payload (its dead letter is a tombstone)
    h = harness()
    for name in ("a.bin", "b.bin"):
        h.queue.enqueue_file(payload_file(tmp_path, name))
    h.drain(Recorder(lambda m: PermanentError("no")))
    first, second = h.queue.dead_letters()
    keys = h.queue.keys
    h.storage.put(first["key"], b"")  # the redrive's tombstone
    # WHEN a collection runs after the grace period
    h.clock.advance(8 * DAY)
    found = h.queue.collect_orphans(grace=WEEK)
    # THEN only the payload without a dead letter went
    assert found.orphans == [keys.dead_payload(first["key"])]
    assert h.keys("dlq/~payloads/") == [keys.dead_payload(second["key"])]


def test_a_payload_an_older_dead_letter_holds_in_blobs_is_kept(tmp_path: Path) -> None:
    # GIVEN a dead letter written before dead letters kept their payloads under dlq/
    h = harness()
    h.queue.enqueue_file(payload_file(tmp_path, "a.bin"))
    h.drain(Recorder(lambda m: PermanentError("no")))
    [dead] = h.queue.dead_letters()
    keys = h.queue.keys
    blob = keys.blob(new_id(h.clock.now_ms()))
    h.storage.copy(dead["payload"]["key"], blob, if_match=None, size=300 * KiB)
    obj = h.storage.get(dead["key"])
    assert obj is not None
    old = obj.body.replace(dead["payload"]["key"].encode(), blob.encode())
    h.storage.put(dead["key"], old)
    h.storage.delete(dead["payload"]["key"])
    # WHEN a collection runs after the grace period THEN that payload stays
    h.clock.advance(8 * DAY)
    assert h.queue.collect_orphans(grace=WEEK).orphans == []
    assert h.keys("blobs/") == [blob]


def test_a_redrive_leaves_a_dead_letter_whose_payload_expired_first(tmp_path: Path) -> None:
    # GIVEN a dead letter whose payload the lifecycle rule took a day before it
    h = harness()
    h.queue.enqueue_file(payload_file(tmp_path, "a.bin"))
    h.drain(Recorder(lambda m: PermanentError("no")))
    h.storage.delete_many(h.keys("dlq/~payloads/"))
    # WHEN it is redriven THEN it stays in the DLQ, and no message without a payload is made
    assert h.queue.redrive() == 0
    assert len(h.queue.dead_letters()) == 1 and h.queue.stats()["pending"] == 0


def test_a_negative_grace_period_is_refused() -> None:
    h = harness()
    with pytest.raises(ValueError, match="grace_ms"):
        collect_orphans(h.storage, h.queue.keys, h.clock.now_ms(), grace_ms=-1)


@pytest.mark.s3
def test_payloads_never_leak_on_seaweedfs(
    s3_storage: S3Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN on a real S3 server: a dead letter with a payload, a message waiting with one, and
    # a dead producer's upload
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)
    h = harness(s3_storage, clock)
    h.queue.enqueue_file(payload_file(tmp_path, "dead.bin"))
    h.drain(Recorder(lambda m: PermanentError("no")))
    [dead] = h.queue.dead_letters()
    h.queue.enqueue_file(payload_file(tmp_path, "live.bin"), delay=timedelta(days=30))
    [live] = h.keys("blobs/")
    orphan = kill_producer(h, payload_file(tmp_path, "lost.bin"), monkeypatch)
    # THEN the dead letter's payload is under dlq/, where the DLQ's lifecycle rule expires it
    assert h.keys("dlq/") == [dead["key"], h.queue.keys.dead_payload(dead["key"])]
    assert dead["payload"]["key"] == h.queue.keys.dead_payload(dead["key"])
    # WHEN a collection runs after the grace period (the server's clock stays real)
    clock.advance(8 * DAY)
    found = h.queue.collect_orphans(grace=WEEK)
    # THEN only the dead producer's upload went
    assert (found.suspects, found.orphans) == (3, [orphan])
    assert h.keys("blobs/") == [live] and len(h.keys("dlq/")) == 2
    # WHEN the dead letter is redriven and handled, and the rest purged
    assert h.queue.redrive() == 1 and h.keys("dlq/") == []
    handler = Recorder()
    for _ in range(5):  # not drain(): the waiting message is due in 30 days
        clock.advance(1)
        h.tick()
        h.work(handler)
    # THEN its payload came back with it and went when it was done
    assert [m.size for m in handler.seen] == [300 * KiB]
    assert h.keys("blobs/") == [live]
    h.queue.purge()
    assert h.keys("blobs/") == [] and h.keys("dlq/") == []

"""Payloads of any size (issue 14 item 1): `enqueue_file`, large plain PUTs, `message.open()`
and `message.size`; a payload is read only when the handler asks, stays in place through
retries, and moves with its dead letter under ``dlq/`` (expired with it) and back on redrive."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from harness import Harness, Recorder, Unseekable
from s3queue import Message, PermanentError, StorageError, run_local
from s3queue.contract.settings import QueueSettings
from s3queue.producing.producer import Queue
from s3queue.storage import MemoryStorage

KiB = 1024
INBOX_KEY = "s3queue/jobs/inbox/video.bin"


class Reads(MemoryStorage):
    """MemoryStorage that records which keys were read (GET or stream)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: list[str] = []

    def get(self, key: str, *, if_match: str | None = None) -> Any:
        self.read.append(key)
        return super().get(key, if_match=if_match)

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        self.read.append(key)
        return super().open(key, etag=etag)


def harness(eager: int = 100 * KiB, **settings: Any) -> Harness:
    clock_storage = Reads()
    h = Harness(settings=QueueSettings(max_message_bytes=eager, **settings), storage=clock_storage)
    clock_storage._clock = h.clock
    return h


def reading(seen: dict[str, bytes], fail: Any = None) -> Recorder:
    """A handler that reads every payload to the end, by its stream."""

    def handle(message: Message) -> BaseException | None:
        with message.open() as stream:
            seen[message.id] = stream.read()
        return fail(message) if fail else None

    return Recorder(handle)


def test_a_file_is_streamed_up_and_read_by_the_handler(tmp_path: Path) -> None:
    # GIVEN a payload over the inline limit but under the eager limit, and one over both
    h = harness(eager=400 * KiB)
    small, big = os.urandom(300 * KiB), os.urandom(500 * KiB)
    (tmp_path / "small.bin").write_bytes(small)
    (tmp_path / "big.bin").write_bytes(big)
    first = h.queue.enqueue_file(tmp_path / "small.bin", attributes={"kind": "small"})
    with (tmp_path / "big.bin").open("rb") as source:
        second = h.queue.enqueue_file(source)
    assert len(h.keys("blobs/")) == 2
    # WHEN the queue is drained by a handler that reads each stream
    seen: dict[str, bytes] = {}
    handler = reading(seen)
    h.drain(handler)
    # THEN each arrived whole: the small one also as `body`, the big one only by its stream
    assert seen == {first: small, second: big}
    by_id = {m.id: m for m in handler.seen}
    assert (by_id[first].body, by_id[first].size, by_id[first].attributes) == (
        small,
        len(small),
        {"kind": "small"},
    )
    assert (by_id[second].body, by_id[second].size) == (None, len(big))
    # AND nothing is left: the payloads went with their messages
    assert h.keys("blobs/") == [] and h.keys("msg/") == []


def test_the_worker_never_reads_a_large_payload_the_handler_leaves_alone(tmp_path: Path) -> None:
    h = harness()
    (tmp_path / "big.bin").write_bytes(os.urandom(500 * KiB))
    h.queue.enqueue_file(tmp_path / "big.bin")
    h.storage.put(INBOX_KEY, os.urandom(200 * KiB))
    storage = h.storage
    assert isinstance(storage, Reads)
    storage.read.clear()
    h.drain(Recorder())
    assert not [k for k in storage.read if "/blobs/" in k or "/inbox/" in k]


def test_small_files_are_inlined() -> None:
    h = harness()
    message_id = h.queue.enqueue_file(io.BytesIO(b"tiny payload"))
    assert h.keys("blobs/") == []
    handler = Recorder()
    h.drain(handler)
    [message] = handler.seen
    assert (message.id, message.body, message.size) == (message_id, b"tiny payload", 12)
    assert message.open().read() == b"tiny payload"


def test_an_unseekable_stream_is_uploaded_with_what_was_read_of_it() -> None:
    h = harness()
    data = os.urandom(700 * KiB)
    h.queue.enqueue_file(io.BufferedReader(Unseekable(data)))
    seen: dict[str, bytes] = {}
    h.drain(reading(seen))
    assert list(seen.values()) == [data]


def test_a_payload_stays_through_retries_and_moves_with_its_dead_letter(tmp_path: Path) -> None:
    # GIVEN a large payload whose handler fails every time
    h = harness(max_retries=1, backoff_base=0.01, backoff_cap=0.01)
    data = os.urandom(500 * KiB)
    (tmp_path / "big.bin").write_bytes(data)
    h.queue.enqueue_file(tmp_path / "big.bin", attributes={"tenant": "acme"})
    [blob] = h.keys("blobs/")
    seen: dict[str, bytes] = {}
    h.drain(reading(seen, lambda m: RuntimeError("boom")))
    # THEN its retry read the same payload; the dead letter holds a copy under dlq/, named
    # after it (the DLQ's lifecycle rule expires both), and the blobs/ original is gone
    assert len(seen) == 1 and list(seen.values()) == [data]
    [dead] = h.queue.dead_letters()
    kept = h.queue.keys.dead_payload(dead["key"])
    assert dead["payload"] == {"key": kept, "size": len(data)}
    assert (dead["body"], dead["body_encoding"]) == (None, "payload")
    assert dead["attributes"] == {"tenant": "acme"} and h.keys("blobs/") == []
    assert h.keys("dlq/") == [dead["key"], kept] and h.queue.stats()["dead"] == 1
    # WHEN it is redriven and succeeds
    assert h.queue.redrive() == 1
    assert h.keys("dlq/") == [] and len(h.keys("blobs/")) == 1 and blob not in h.keys("blobs/")
    seen.clear()
    handler = reading(seen)
    h.drain(handler)
    # THEN the handler read it whole, and the payload went with the message
    assert list(seen.values()) == [data] and handler.seen[0].attempt == 1
    assert h.keys("blobs/") == [] and h.keys("dlq/") == []


def test_a_large_plain_put_is_kept_for_its_retry_by_a_server_side_copy() -> None:
    # GIVEN another service's large PUT whose first delivery fails
    h = harness(max_retries=2, backoff_base=0.01, backoff_cap=0.01)
    data = os.urandom(300 * KiB)
    h.storage.put(INBOX_KEY, data, metadata={"tenant": "acme"})
    seen: dict[str, bytes] = {}
    attempts: list[int] = []

    def fail_first(message: Message) -> BaseException | None:
        attempts.append(message.attempt)
        return RuntimeError("once") if message.attempt == 1 else None

    handler = reading(seen, fail_first)
    h.tick()
    h.work(handler)
    # THEN the inbox object was retired, and a copy in blobs/ holds the payload
    assert h.keys("inbox/") == [] and len(h.keys("blobs/")) == 1
    # WHEN the retry runs
    h.drain(handler)
    # THEN it read the same bytes, with its metadata, and the copy is gone with it
    assert attempts == [1, 2] and list(seen.values()) == [data]
    assert [m.attributes for m in handler.seen] == [{"tenant": "acme"}] * 2
    assert h.keys("blobs/") == []


def test_a_dead_large_plain_put_keeps_its_payload_beside_it_until_purged() -> None:
    h = harness()
    h.storage.put(INBOX_KEY, os.urandom(300 * KiB))
    h.drain(Recorder(lambda m: PermanentError("no")))
    [dead] = h.queue.dead_letters()
    kept = h.queue.keys.dead_payload(dead["key"])
    assert dead["payload"] == {"key": kept, "size": 300 * KiB}
    assert h.keys("blobs/") == [] and h.keys("inbox/") == []  # copied straight to dlq/
    h.queue.purge()
    assert h.keys("dlq/") == [dead["key"], kept]  # a dead letter still holds it
    assert h.queue.purge(include_dlq=True) == 1  # its payload is not a message
    assert h.keys("dlq/") == []


def test_a_missing_payload_is_a_dead_letter_with_the_reason(tmp_path: Path) -> None:
    h = harness(eager=1000 * KiB)
    (tmp_path / "big.bin").write_bytes(os.urandom(300 * KiB))
    h.queue.enqueue_file(tmp_path / "big.bin")
    h.storage.delete_many(h.keys("blobs/"))
    handler = Recorder()
    h.drain(handler)
    assert handler.seen == []
    assert h.queue.dead_letters()[0]["reason"].startswith("PayloadMissing: ")


def test_a_repeated_id_uploads_nothing_and_runs_once(tmp_path: Path) -> None:
    h = harness()
    (tmp_path / "big.bin").write_bytes(os.urandom(300 * KiB))
    assert h.queue.enqueue_file(tmp_path / "big.bin", id="video-1") == "video-1"
    assert h.queue.enqueue_file(tmp_path / "big.bin", id="video-1") == "video-1"
    assert len(h.keys("blobs/")) == 1
    handler = Recorder()
    h.drain(handler)
    assert [m.id for m in handler.seen] == ["video-1"]
    h.queue.enqueue_file(tmp_path / "big.bin", id="video-1")  # handled already: a no-op
    assert h.keys("blobs/") == [] and h.tick().dispatched == 0


def test_a_repeat_that_lost_the_race_deletes_its_own_upload(tmp_path: Path) -> None:
    # GIVEN the first enqueue of an id whose marker was written, but whose message is not yet
    h = harness()
    (tmp_path / "big.bin").write_bytes(os.urandom(300 * KiB))
    queue = h.queue
    queue.enqueue_file(tmp_path / "big.bin", id="video-1")
    [first] = h.keys("blobs/")
    # WHEN a repeat finds no message yet (it checks before uploading) and uploads its own
    queue._enqueued = lambda message_id: False  # type: ignore[method-assign]
    queue.enqueue_file(tmp_path / "big.bin", id="video-1")
    # THEN its upload lost to the first message, and is deleted
    assert h.keys("blobs/") == [first]


@pytest.mark.s3
def test_payloads_end_to_end_on_seaweedfs(
    shared_s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a 20 MiB file (a multipart upload) and a 12 MiB plain PUT, eager limit 1 MiB
    data = os.urandom(20 * 1024 * KiB)
    (tmp_path / "big.bin").write_bytes(data)
    raw = os.urandom(12 * 1024 * KiB)
    queue = Queue("jobs", bucket=bucket, s3=shared_s3_client)
    message_id = queue.enqueue_file(tmp_path / "big.bin", attributes={"tenant": "acme"})
    shared_s3_client.put_object(Bucket=bucket, Key=INBOX_KEY, Body=raw, Metadata={"t": "1"})
    digests: dict[str, tuple[str, int, Any]] = {}

    def handle(message: Message) -> None:
        digest = hashlib.sha256()
        with message.open() as stream:
            while chunk := stream.read(1024 * KiB):
                digest.update(chunk)
        if message.attempt == 1:
            raise RuntimeError("retry me: the payload stays where it is")
        digests[message.id] = (digest.hexdigest(), message.size, message.body)

    # WHEN the local runtime drains the queue (each fails once)
    summary = run_local(
        {"jobs": handle},
        bucket=bucket,
        s3=shared_s3_client,
        drain=True,
        overrides={"max_message_bytes": 1024 * KiB, "backoff_base": 0.01, "backoff_cap": 0.01},
        timeout=120,
    )
    # THEN both were read whole on their retry, and nothing is left behind (but the consumed
    # retry copies' tombstones)
    assert summary.drained and summary.queues["jobs"].retried == 2
    assert digests[message_id] == (hashlib.sha256(data).hexdigest(), len(data), None)
    [(other, size, _)] = [v for k, v in digests.items() if k != message_id]
    assert (other, size) == (hashlib.sha256(raw).hexdigest(), len(raw))
    for folder in ("blobs/", "inbox/", "msg/"):
        left = shared_s3_client.list_objects_v2(Bucket=bucket, Prefix="s3queue/jobs/" + folder)
        live = [o["Key"] for o in left.get("Contents", []) if o["Size"]]  # not tombstones
        assert live == [], folder


class FlakyReads(MemoryStorage):
    """Fails the first read of any payload in blobs/."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        if "/blobs/" in key and not self.failed:
            self.failed = True
            raise StorageError(f"injected: GET {key}")
        return super().open(key, etag=etag)


def test_a_payload_read_that_fails_is_a_failed_delivery_retried(tmp_path: Path) -> None:
    storage = FlakyReads()
    h = Harness(settings=QueueSettings(backoff_base=0.01, backoff_cap=0.01), storage=storage)
    storage._clock = h.clock
    data = os.urandom(300 * KiB)
    (tmp_path / "p.bin").write_bytes(data)
    h.queue.enqueue_file(tmp_path / "p.bin")
    handler = Recorder()
    h.drain(handler)
    assert [(m.attempt, m.body) for m in handler.seen] == [(2, data)]


def test_a_file_into_a_partition(tmp_path: Path) -> None:
    h = harness()
    (tmp_path / "p.bin").write_bytes(os.urandom(300 * KiB))
    h.queue.enqueue_file(tmp_path / "p.bin", partition="tenant-7")
    seen: dict[str, bytes] = {}
    handler = reading(seen)
    h.drain(handler)
    assert [(m.partition, m.size) for m in handler.seen] == [("tenant-7", 300 * KiB)]
    assert h.keys("blobs/") == []

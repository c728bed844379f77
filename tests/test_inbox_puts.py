"""Plain S3 PUTs into an idle queue's inbox are seen on every S3 server (issue 9 item 3).

SeaweedFS skipped the whole ``inbox/`` folder for ``StartAfter="<root>inbox"``, the idle
probe's listing: a queue fed only by other services never started, and ``dev --drain`` never
returned. The probe no longer starts at a folder's bare name, and `S3Storage.list` gives AWS
semantics where a caller still does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import Harness
from s3queue import run_local
from s3queue.dispatching.coordinator import Coordinator
from s3queue.errors import StorageError
from s3queue.local.cli import main
from s3queue.local.seaweed import EmbeddedS3
from s3queue.message import Message
from s3queue.producing.producer import Queue
from s3queue.storage import MemoryStorage, Page
from s3queue.storage.s3 import S3Storage

RAW_KEY = "s3queue/jobs/inbox/order-7.json"


class FolderWalk(MemoryStorage):
    """Lists as SeaweedFS does: a `start_after` naming a folder skips that whole folder."""

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        page = super().list(prefix, start_after=start_after, limit=1000)
        if start_after and not start_after.endswith("/"):
            hidden = start_after + "/"
            kept = [e for e in page.entries if not e.key.startswith(hidden)]
            return Page(kept[:limit], page.truncated or len(kept) > limit)
        return Page(page.entries[:limit], page.truncated or len(page.entries) > limit)


def test_the_probe_sees_an_inbox_put_on_a_server_that_walks_folders() -> None:
    # GIVEN an idle queue with dedup markers, on storage that skips a named folder
    storage = FolderWalk()
    Queue("jobs", storage=storage).enqueue("handled earlier", id="order-1")
    storage.delete_many(e.key for e in storage.list("s3queue/jobs/msg/").entries)
    probe = Coordinator(storage, "jobs", invoker=lambda payload: None)
    assert probe.probe() is False
    # WHEN another service PUTs one object into the inbox
    storage.put(RAW_KEY, b'{"order": 7}')
    # THEN the probe sees work
    assert probe.probe() is True


@pytest.mark.s3
def test_the_probe_sees_an_inbox_put_on_seaweedfs(shared_s3_client: Any, bucket: str) -> None:
    probe = Coordinator(S3Storage(shared_s3_client, bucket), "jobs", invoker=lambda p: None)
    assert probe.probe() is False
    shared_s3_client.put_object(Bucket=bucket, Key=RAW_KEY, Body=b'{"order": 7}')
    assert probe.probe() is True


@pytest.mark.s3
def test_one_raw_put_into_an_idle_queue_is_drained(shared_s3_client: Any, bucket: str) -> None:
    # GIVEN a queue that has only ever had one plain PUT, from another service
    shared_s3_client.put_object(Bucket=bucket, Key=RAW_KEY, Body=b'{"order": 7}')
    bodies: list[Any] = []
    # WHEN the local runtime drains it (the timeout only bounds a failing run)
    summary = run_local(
        {"jobs": lambda m: bodies.append(m.body)},
        bucket=bucket,
        s3=shared_s3_client,
        drain=True,
        timeout=60,
    )
    # THEN the message was handled once and nothing is left
    assert summary.drained and bodies == [{"order": 7}]
    assert summary.queues["jobs"].processed == 1
    assert (
        shared_s3_client.list_objects_v2(Bucket=bucket, Prefix="s3queue/jobs/inbox/")["KeyCount"]
        == 0
    )


class CountedLists(S3Storage):
    """`S3Storage` that signals once it has answered `count` LISTs (the runtime is idle)."""

    def __init__(self, client: Any, bucket: str, count: int) -> None:
        super().__init__(client, bucket)
        self.count, self.reached = count, threading.Event()

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        self.count -= 1
        if self.count <= 0:
            self.reached.set()
        return super().list(prefix, start_after=start_after, limit=limit)


@pytest.mark.s3
def test_a_raw_put_wakes_a_runtime_that_went_idle(seaweed: EmbeddedS3, bucket: str) -> None:
    # GIVEN a runtime probing an empty queue on SeaweedFS
    client = seaweed.make_client()
    storage = CountedLists(client, bucket, count=4)
    handled, stop = threading.Event(), threading.Event()

    def handle(message: Message) -> None:
        if message.body == {"order": 7}:
            handled.set()

    runner = threading.Thread(
        target=lambda: run_local({"jobs": handle}, storage=storage, stop=stop)
    )
    runner.start()
    try:
        assert storage.reached.wait(30)
        # WHEN another service PUTs one object into the inbox
        client.put_object(Bucket=bucket, Key=RAW_KEY, Body=b'{"order": 7}')
        # THEN the runtime wakes up and handles it
        assert handled.wait(30)
    finally:
        stop.set()
        runner.join()


@pytest.mark.s3
def test_dev_drain_returns_after_one_raw_put(
    seaweed: EmbeddedS3,
    bucket: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "s3queue")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3queue-secret")
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "jobs.py").write_text(
        "def handle(message):\n    assert message.body == {'order': 7}, message.body\n"
    )
    seaweed.make_client().put_object(Bucket=bucket, Key=RAW_KEY, Body=b'{"order": 7}')
    base = ["--endpoint-url", seaweed.endpoint_url, "--bucket", bucket]
    code = main([*base, "dev", "--handlers", str(folder), "--drain", "--workers", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "drained after" in out
    [row] = [line.split() for line in out.splitlines() if line.startswith("jobs")]
    assert row[1:3] == ["1", "0"]  # processed 1, failed 0


def test_an_empty_inbox_is_listed_with_the_folders_and_a_busy_one_at_every_tick() -> None:
    # GIVEN a queue whose ticks follow each other at once (its clock stands still)
    h = Harness()
    h.queue.enqueue("library")
    listed: list[str] = []
    h.storage.list = _recording(h.storage.list, listed)  # type: ignore[method-assign]
    inbox = h.queue.keys.inbox
    assert h.tick().dispatched == 1  # the first tick lists the inbox (empty) and the folders
    # WHEN another service PUTs into the inbox, right after a tick that found it empty
    h.storage.put(inbox + "a.json", b'{"n": 1}')
    listed.clear()
    # THEN the next ticks within `discover_interval` do not list it (two LISTs, not three) ...
    assert h.tick().dispatched == 0 and inbox not in listed
    # ... the next one at the folders' interval does, and finds it
    h.clock.advance(1.0)
    assert h.tick().dispatched == 1 and inbox in listed
    # AND an inbox that had objects is listed at every tick, until it is found empty again
    h.storage.put(inbox + "b.json", b'{"n": 2}')
    assert h.tick().dispatched == 1
    h.work(lambda _m: None)  # handled: the inbox objects are deleted
    listed.clear()
    assert h.tick().dispatched == 0 and inbox in listed  # found empty here
    listed.clear()
    assert h.tick().dispatched == 0 and inbox not in listed


def test_a_lambda_coordinator_discovers_beside_its_tick_and_lists_the_inbox_at_the_next() -> None:
    # GIVEN a coordinator that runs its invokes on threads of their own, as the Lambda does
    h = Harness()
    jobs: list[Callable[[], None]] = []
    h.coordinator.reconciler.send = jobs.append
    listed: list[str] = []
    h.storage.list = _recording(h.storage.list, listed)  # type: ignore[method-assign]
    keys = h.queue.keys
    h.tick()  # the first tick knows no folders yet: it discovers in line
    assert keys.inbox in listed
    _run(jobs)
    # WHEN another service PUTs into the empty inbox, and the folders' interval has passed
    h.storage.put(keys.inbox + "a.json", b'{"n": 1}')
    h.clock.advance(1.0)
    listed.clear()
    # THEN the tick does not wait for the discovery: the discovery is left beside it ...
    assert h.tick().dispatched == 0 and keys.inbox not in listed and len(jobs) == 1
    _run(jobs)
    assert listed == [keys.tickets, keys.msg, keys.inbox]  # the inbox, after the tick's LISTs
    # ... and the next tick lists the inbox itself after its LIST of tickets, and dispatches
    listed.clear()
    assert h.tick().dispatched == 1
    assert listed.index(keys.tickets) < listed.index(keys.inbox)


def test_a_discovery_beside_the_tick_that_fails_is_done_in_line_by_the_next_tick() -> None:
    # GIVEN a Lambda-like coordinator whose discovery beside the tick meets an S3 error
    h = Harness()
    jobs: list[Callable[[], None]] = []
    h.coordinator.reconciler.send = jobs.append
    keys = h.queue.keys
    h.tick()
    _run(jobs)
    h.clock.advance(1.0)
    real = h.storage.list_folders

    def failing(prefix: str) -> tuple[str, ...]:
        raise StorageError("ListObjectsV2 failed: SlowDown (HTTP 503)")

    h.storage.list_folders = failing  # type: ignore[method-assign]
    h.tick()
    _run(jobs)  # WHEN it fails (no error escapes the thread)
    h.storage.list_folders = real  # type: ignore[method-assign]
    # THEN the next tick discovers in line, and sees a plain PUT at once
    h.storage.put(keys.inbox + "a.json", b'{"n": 1}')
    assert h.tick().dispatched == 1


def _run(jobs: list[Callable[[], None]]) -> None:
    while jobs:
        jobs.pop(0)()


def _recording(list_: Any, listed: list[str]) -> Any:
    def recorded(prefix: str, **kwargs: Any) -> Page:
        listed.append(prefix)
        return list_(prefix, **kwargs)  # type: ignore[no-any-return]

    return recorded

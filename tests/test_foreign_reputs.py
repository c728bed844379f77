"""Another service PUTs the same key again (issue 19, defect 3): every version it PUT that a
worker could read runs once, and no version is retired unhandled, in ``inbox/`` and ``msg/``.

The ticket lists (key, ETag): the worker reads that version only (GET If-Match; a large one's
HEAD must show that ETag), and retires that version only (DELETE / DeleteObjects with the ETag).
"""

from __future__ import annotations

import time

import pytest
from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.errors import Conflict
from s3queue.message import Message
from s3queue.storage import MemoryStorage, Storage

INBOX = "s3queue/jobs/inbox/order.json"
FOREIGN_MSG = "s3queue/jobs/msg/order.json"


@pytest.fixture(params=["memory", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest) -> Storage:
    if request.param == "memory":
        return MemoryStorage()
    s3: Storage = request.getfixturevalue("s3_storage")
    return s3


def harness(storage: Storage, max_message_bytes: int = 1024) -> Harness:
    """A harness whose clock is ahead of the server's, so a plain PUT is ready at once."""
    settings = QueueSettings(max_message_bytes=max_message_bytes)
    clock = FakeClock(time.time_ns() // 1_000_000 + 60_000)
    return Harness(storage=storage, clock=clock, settings=settings)


@pytest.mark.parametrize("key", [INBOX, FOREIGN_MSG])
def test_a_version_put_between_dispatch_and_read_runs_once(backend: Storage, key: str) -> None:
    # GIVEN version 1 of a plain PUT, dispatched in a ticket as (key, ETag 1)
    h = harness(backend)
    backend.put(key, b'{"v": 1}')
    assert h.tick().dispatched == 1
    # WHEN the other service PUTs version 2 before the worker reads it
    backend.put(key, b'{"v": 2}')
    handler = Recorder()
    h.drain(handler)
    # THEN version 2 ran once, on its own ticket (version 1 is gone from S3 itself)
    assert handler.bodies() == [{"v": 2}]
    assert backend.head(key) is None


def test_a_large_version_put_between_dispatch_and_read_runs_once(backend: Storage) -> None:
    # GIVEN version 1 of a plain PUT above max_message_bytes (read by HEAD, then streamed)
    h = harness(backend, max_message_bytes=8)
    backend.put(INBOX, b'"version 1"')
    assert h.tick().dispatched == 1
    # WHEN version 2 is PUT before the worker's HEAD
    backend.put(INBOX, b'"version 2"')
    seen: list[bytes] = []

    def handle(message: Message) -> None:
        with message.open() as stream:
            seen.append(stream.read())

    h.drain(handle)
    # THEN version 2 ran once
    assert seen == [b'"version 2"']
    assert backend.head(INBOX) is None


@pytest.mark.parametrize("key", [INBOX, FOREIGN_MSG])
def test_a_version_put_while_the_first_is_handled_runs_too(backend: Storage, key: str) -> None:
    # GIVEN version 1 of a plain PUT, whose handler runs while version 2 is PUT
    h = harness(backend)
    backend.put(key, b'{"v": 1}')

    def put_again(message: Message) -> BaseException | None:
        if message.body == {"v": 1}:
            backend.put(key, b'{"v": 2}')
        return None

    handler = Recorder(fail=put_again)
    # WHEN both are worked
    h.drain(handler)
    # THEN each version ran once: retiring version 1 left version 2 in place
    assert handler.bodies() == [{"v": 1}, {"v": 2}]
    assert backend.head(key) is None


def test_get_and_delete_many_at_a_version(backend: Storage) -> None:
    # GIVEN two versions of a key, and the ETag of the first
    first = backend.put("k", b"one")
    second = backend.put("k", b"two")
    # THEN a GET at the first is a Conflict, at the second reads it, and missing is None
    with pytest.raises(Conflict):
        backend.get("k", if_match=first)
    found = backend.get("k", if_match=second)
    assert found is not None and found.body == b"two"
    assert backend.get("nothing", if_match=first) is None
    # AND a DeleteObjects at the first version leaves the second, at the second deletes it
    backend.put("other", b"x")
    backend.delete_many(["k", "other", "missing"], if_match={"k": first, "missing": first})
    assert backend.head("k") is not None and backend.head("other") is None
    backend.delete_many(["k"], if_match={"k": second})
    assert backend.head("k") is None

"""Shared fixtures: one SeaweedFS server per session, storage backends, fault injection.

The server starts lazily, on the first test that asks for it, so `pytest -m "not s3"` never
starts one. Every storage test that takes `storage` runs once per backend.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from s3queue.local.seaweed import EmbeddedS3
from s3queue.storage import MemoryStorage, Storage
from s3queue.storage.s3 import S3Storage


@pytest.fixture(scope="session")
def seaweed() -> Iterator[EmbeddedS3]:
    """One SeaweedFS server for the whole session, stopped (and its data removed) at the end."""
    with EmbeddedS3() as server:
        yield server


@pytest.fixture(scope="session")
def shared_s3_client(seaweed: EmbeddedS3) -> Any:
    """A client shared by the tests that do not hook into it (a client takes ~0.1 s to build)."""
    return seaweed.make_client()


@pytest.fixture
def s3_client(seaweed: EmbeddedS3) -> Any:
    """A fresh client of its own, for tests that register event hooks on it."""
    return seaweed.make_client()


def unique_bucket() -> str:
    """A bucket name no other test uses."""
    return f"t-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def bucket(seaweed: EmbeddedS3) -> str:
    """A new empty bucket on the session server."""
    name = unique_bucket()
    seaweed.create_bucket(name)
    return name


@pytest.fixture
def s3_storage(shared_s3_client: Any, bucket: str) -> S3Storage:
    """An `S3Storage` on a new empty bucket; retries do not really sleep."""
    return S3Storage(shared_s3_client, bucket, sleep=lambda _: None)


@pytest.fixture(params=["memory", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest) -> Storage:
    """Each storage backend in turn: the same tests run against memory and a real S3 server."""
    if request.param == "memory":
        return MemoryStorage()
    s3: Storage = request.getfixturevalue("s3_storage")
    return s3


@dataclass
class Injection:
    """Answers a client's requests for one operation with a canned error, `times` times.

    With `forward`, the real request is sent first and only its response replaced: the write
    is applied but the client sees an error, as when a response is lost.
    """

    operation: str
    status: int
    code: str
    times: int
    forward: bool = False
    body: str | None = None
    injected: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse
        from botocore.httpsession import URLLib3Session

        with self._lock:
            if self.injected >= self.times:
                return None
            self.injected += 1
        if self.forward:
            URLLib3Session().send(request)
        body = self.body or f"<Error><Code>{self.code}</Code><Message>injected</Message></Error>"
        return AWSResponse(request.url, self.status, {}, _Raw(body.encode()))


class _Raw:
    """The raw stream `AWSResponse` reads a body from."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


_injection_ids = itertools.count()


def inject(
    client: Any,
    operation: str,
    status: int,
    code: str = "",
    *,
    times: int = 1,
    forward: bool = False,
    body: str | None = None,
) -> Injection:
    """Make `client` see `status`/`code` (or `body`) for its next `times` `operation` requests."""
    injection = Injection(operation, status, code, times, forward, body)
    client.meta.events.register(
        f"before-send.s3.{operation}", injection, unique_id=f"inject-{next(_injection_ids)}"
    )
    return injection


@pytest.fixture
def injector() -> Any:
    """`inject(client, operation, status, code, times=, forward=)`: canned S3 error responses."""
    return inject

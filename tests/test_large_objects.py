"""Large objects on a real S3 server (SeaweedFS): multipart upload and copy, and a streamed
read that resumes with a ranged GET after its connection drops."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import IncompleteReadError
from s3queue.errors import StorageError
from s3queue.storage.s3 import S3Storage
from s3queue.storage.streams import ResumableReader

MiB = 1024 * 1024


class Dropping:
    """A response body whose connection drops at its first read."""

    def read(self, n: int = -1) -> bytes:
        raise IncompleteReadError(actual_bytes=0, expected_bytes=n)

    def close(self) -> None:
        pass


@pytest.mark.s3
def test_multipart_upload_copy_and_a_resumed_read(
    shared_s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a 12 MiB file and parts of 5 MiB (S3's smallest)
    data = os.urandom(12 * MiB)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    storage = S3Storage(shared_s3_client, bucket, part_bytes=5 * MiB, copy_limit=MiB)
    # WHEN it is uploaded and copied (above copy_limit: a multipart copy)
    head = storage.put_file("q/big", path)
    storage.copy("q/big", "q/copy", if_match=head.etag, size=head.size)
    # THEN both are multipart objects with the file's bytes
    assert head.size == len(data) and head.etag.endswith("-3")
    # WHEN a read's connection drops after the first MiB
    stream = storage.open("q/copy")
    assert stream is not None
    first = stream.read(MiB)
    raw = stream.raw  # type: ignore[attr-defined]
    raw._body = Dropping()
    rest = stream.read()
    # THEN a ranged GET resumes it at the right byte
    digest = hashlib.sha256(first + rest).hexdigest()
    assert digest == hashlib.sha256(data).hexdigest()


def test_a_reader_gives_up_after_its_attempts() -> None:
    opened: list[int] = []

    def reopen(offset: int) -> Dropping:
        opened.append(offset)
        return Dropping()

    def read(body: Any, n: int) -> bytes:
        try:
            return bytes(body.read(n))
        except IncompleteReadError as exc:
            raise StorageError("dropped") from exc

    reader = ResumableReader(Dropping(), 10, reopen=reopen, read_body=read, attempts=3)
    with pytest.raises(StorageError):
        reader.read(5)
    assert opened == [0, 0]

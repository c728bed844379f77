"""Large objects for `S3Storage`: `open` a streamed GET resumed by ranged GETs
(`streams.ResumableReader`), `put_file` boto3's managed (multipart) upload, `copy` a server-side
CopyObject (a managed multipart copy above 5 GiB).

Apart from s3.py because these are the calls that move a body too large to hold whole: they
need boto3's transfer manager and its settings (part size, threads), and none of the small
conditional writes' retry story (s3.py's docstring) applies to them. boto3 is imported here
for the transfer manager and its errors, translated like every other (`retry.Retrier`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, BinaryIO

from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from s3queue.errors import Conflict, StorageError
from s3queue.storage.base import Head
from s3queue.storage.responses import Missing as _Missing
from s3queue.storage.responses import etag as _etag
from s3queue.storage.retry import Retrier
from s3queue.storage.streams import Body, ResumableReader, Source, buffered

PART_BYTES = 8 * 1024 * 1024
"""Multipart uploads and copies use parts of this size, above this size."""
COPY_LIMIT = 5 * 1024**3
"""The largest object one CopyObject copies; larger ones take a multipart copy."""


class Transfers:
    """The large-object calls of one `S3Storage` (its client, bucket, retry loop and `head`)."""

    def __init__(
        self,
        retry: Retrier,
        head: Callable[[str], Head | None],
        *,
        part_bytes: int,
        transfer_threads: int,
        copy_limit: int,
    ) -> None:
        self._retry, self._head = retry, head
        self._client, self.bucket = retry.client, retry.bucket
        # Memory of a managed upload from a file object: up to about 2 x threads parts.
        self._config = TransferConfig(
            multipart_threshold=part_bytes,
            multipart_chunksize=part_bytes,
            max_concurrency=transfer_threads,
        )
        self._copy_limit = copy_limit

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        """A streamed GET (see `streams.ResumableReader`): the body is read as the caller reads."""
        try:
            first = self._get_from(key, 0, etag)
        except _Missing:
            return None
        except Conflict:
            if self._head(key) is None:  # SeaweedFS answers 412 to If-Match on a missing key
                return None
            raise
        version = etag or _etag(first)
        raw = ResumableReader(
            first["Body"],
            int(first["ContentLength"]),
            reopen=lambda offset: self._get_from(key, offset, version)["Body"],
            read_body=lambda body, n: self._read_body(key, body, n),
        )
        return buffered(raw)

    def _get_from(self, key: str, offset: int, etag: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"Key": key}
        if offset:
            params["Range"] = f"bytes={offset}-"
        if etag is not None:
            params["IfMatch"] = f'"{etag}"'
        return self._retry.call("get_object", key, **params)

    def _read_body(self, key: str, body: Body, n: int) -> bytes:
        try:
            return body.read(n)
        except BotoCoreError as exc:  # the connection dropped mid-body: resume (ResumableReader)
            raise StorageError(f"GetObject s3://{self.bucket}/{key}: {exc}") from exc

    def put_file(self, key: str, source: Source) -> Head:
        """boto3's managed upload: one PUT, or a multipart upload above `part_bytes`, with
        parts sent by `transfer_threads` threads. From a path, parts are read from the file as
        they are sent; a file object's are read into memory first (a few parts at a time)."""
        try:
            if isinstance(source, str | os.PathLike):
                self._client.upload_file(os.fspath(source), self.bucket, key, Config=self._config)
            else:
                self._client.upload_fileobj(source, self.bucket, key, Config=self._config)
        except (ClientError, BotoCoreError) as exc:
            raise self._retry.translate(exc, "PutObject", key)[0] from exc
        except S3UploadFailedError as exc:
            raise StorageError(f"upload to s3://{self.bucket}/{key} failed: {exc}") from exc
        head = self._head(key)
        if head is None:
            raise StorageError(f"s3://{self.bucket}/{key} is missing right after its upload")
        return head

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        """One CopyObject up to 5 GiB, a managed multipart copy above (UploadPartCopy)."""
        extra = {"CopySourceIfMatch": f'"{if_match}"'} if if_match is not None else {}
        origin = {"Bucket": self.bucket, "Key": source}
        try:
            if size <= self._copy_limit:
                self._retry.call("copy_object", dest, Key=dest, CopySource=origin, **extra)
                return
            self._client.copy(origin, self.bucket, dest, ExtraArgs=extra, Config=self._config)
        except _Missing as exc:
            raise Conflict(f"copy source {source} is gone") from exc
        except (ClientError, BotoCoreError) as exc:
            error = self._retry.translate(exc, "CopyObject", source)[0]
            if isinstance(error, _Missing):
                error = Conflict(f"copy source {source} is gone")
            raise error from exc

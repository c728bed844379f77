"""`S3Storage`: the `Storage` protocol over a boto3 S3 client.

Every `ClientError` and `BotoCoreError` is translated into the tree of `s3queue.errors` before
it leaves `s3queue.storage` (`retry.py`; the tables: `responses`).

Retries. botocore retries each call itself (standard mode); on top of that every call here runs
in a bounded loop with exponential backoff and full jitter, for throttling, 5xx and lost
connections. Retrying a conditional write is safe because each write carries its writer's token:

    writer                       S3
    PUT If-Match: e1  token=t -> applied, object is now e2 (token t)
                      <- response lost (timeout, 503 from a proxy, reset)
    PUT If-Match: e1  token=t -> 412: e1 is gone
    HEAD              -> token t: the 412 is our own write; return e2, not Conflict

A create (`If-None-Match: *`) needs more: a resend after its object was consumed and deleted
would create the message again. So the SDK never resends one of our creates
(`sending.no_blind_resend`), and after a failure that may have applied, `put` asks first (HEAD, at
once, before any backoff) and resends only if the object is not there:

    producer                      S3                          workers
    PUT If-None-Match token=t  -> applied
                               <- response lost
    HEAD                       -> token t: done, return        (consume, delete: too late to
                                                                 be created again)

The HEAD can come late (retried after a 503, or slow), after a fast consumer took the object
and deleted it: missing then does not mean "never applied". Nor does another writer's token:
a consumer may have written over ours (a claim) and delete it before a resend lands, which
would then create it again. A writer that can tell passes `resend_if` (the coordinator never
resends a ticket), and such a create raises `Consumed` instead of sending it again.

Listing. `list` gives AWS semantics on servers that walk keys as folders (SeaweedFS): a
``start_after`` equal to a folder's name no longer skips that folder (`sending.just_below`).
Such a server still orders a folder before a sibling that extends its name with a character below
``/`` (``a/x`` before ``a-b``, where AWS has ``a-b`` first; a queue's own keys never do): that
order is kept, so a walk from each page's last key still sees every key once.

Large objects. `open` is a streamed GET resumed by ranged GETs, `put_file` boto3's managed
(multipart) upload, `copy` a server-side CopyObject (a managed multipart copy above 5 GiB):
`transfers.py`.

This module calls the boto3 client it is given (or, on the clients `make_client` made, the
lean path of its hot calls: `lean.py`) and imports no boto3 itself: `transfers.py`, `retry.py`,
`clients.py` and `lean.py` do. What needs none lives in `sending.py` (what we send),
`responses.py` (what S3 answers) and `streams.py` (the resumable stream).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, BinaryIO

from s3queue.errors import Conflict, S3QueueError, StorageError
from s3queue.storage.base import (
    Entry,
    Head,
    Object,
    Page,
    recheck_create,
    settle_delete_conflict,
    settle_put_conflict,
)
from s3queue.storage.clients import make_client
from s3queue.storage.endpoints import lean_path
from s3queue.storage.responses import AlreadyOwned as _AlreadyOwned
from s3queue.storage.responses import Missing as _Missing
from s3queue.storage.responses import etag as _etag
from s3queue.storage.responses import ms as _ms
from s3queue.storage.responses import served as _served
from s3queue.storage.responses import unquote as _unquote
from s3queue.storage.responses import user_metadata as _user_metadata
from s3queue.storage.retry import Retrier, Sleep
from s3queue.storage.sending import (
    TOKEN_METADATA,
    delete_entry,
    just_below,
    no_blind_resend,
    not_after,
)
from s3queue.storage.servertime import ServerClock
from s3queue.storage.streams import Source
from s3queue.storage.transfers import COPY_LIMIT, PART_BYTES, Transfers

log = logging.getLogger(__name__)


MAX_KEYS = 1000
FOLDER_PAGE = MAX_KEYS
"""Keys and folders per LIST of `S3Storage.list_folders` (a test pages with fewer)."""


CLOCK_PROBE_KEY = "s3queue-clock-probe"
"""Asked for by HEAD only: its 404 answer carries S3's time."""


class S3Storage:
    """The `Storage` protocol on one S3 bucket; thread-safe if the client is (boto3's are).

    `head` cannot tell a missing bucket from a missing key (a HEAD response has no body, so S3
    answers a bare 404 to both): it returns None for both.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        attempts: int = 6,
        base_delay: float = 0.1,
        max_delay: float = 5.0,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        part_bytes: int = PART_BYTES,
        transfer_threads: int = 4,
        copy_limit: int = COPY_LIMIT,
    ) -> None:
        self._client = client
        # A child forked after this storage was used holds its parent's pooled connections: a
        # request of each on one socket would read the other's response. Drop them in the child.
        os.register_at_fork(after_in_child=functools.partial(_drop_connections, weakref.ref(self)))
        self.bucket = bucket
        self._retry = Retrier(
            client, bucket, max(attempts, 1), base_delay, max_delay, sleep, rng or random.Random()
        )
        self._lean = self._retry.lean = lean_path(client, bucket)  # None: botocore's path
        self._transfers = Transfers(
            self._retry,
            self.head,
            part_bytes=part_bytes,
            transfer_threads=transfer_threads,
            copy_limit=copy_limit,
        )
        client.meta.events.register_first(
            "needs-retry.s3.PutObject", no_blind_resend, unique_id="s3queue-create-once"
        )
        self.server_clock = ServerClock(probe=self._probe_time)
        """S3's time, learnt from the ``Date`` of every answer (servertime.py)."""
        self._retry.watcher = self.server_clock

    def _probe_time(self) -> None:
        """One HEAD (of a key nobody writes) for its ``Date``, when no answer told S3's time."""
        with contextlib.suppress(S3QueueError):
            self.head(CLOCK_PROBE_KEY)

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        params: dict[str, Any] = {"IfMatch": f'"{if_match}"'} if if_match is not None else {}

        def fetch() -> Object:
            response = (self._lean or self._client).get_object(
                Bucket=self.bucket, Key=key, **params
            )
            # Read inside the retried call: a connection dropped mid-body is retried too.
            body = response["Body"].read()
            meta = _user_metadata(response)
            modified = _ms(response["LastModified"])
            return Object(key, body, _etag(response), modified, meta, _served(response))

        try:
            return self._retry.run("GetObject", key, fetch)
        except _Missing:
            return None
        except Conflict:
            if self.head(key) is None:  # SeaweedFS answers 412 to If-Match on a missing key
                return None
            raise

    def head(self, key: str) -> Head | None:
        try:
            response = self._retry.call("head_object", key, Key=key)
        except _Missing:
            return None
        token = response.get("Metadata", {}).get(TOKEN_METADATA)
        size = int(response.get("ContentLength", 0))
        modified = _ms(response["LastModified"])
        meta = _user_metadata(response)
        return Head(_etag(response), token, meta, size, modified, _served(response))

    def put(
        self,
        key: str,
        body: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        token: str | None = None,
        metadata: Mapping[str, str] | None = None,
        resend_if: Callable[[], bool] | None = None,
    ) -> str:
        params: dict[str, Any] = {"Key": key, "Body": body}
        if if_match is not None:
            params["IfMatch"] = f'"{if_match}"'
        if if_none_match:
            params["IfNoneMatch"] = "*"
        if token is not None or metadata:
            sent = dict(metadata or {})
            if token is not None:
                sent[TOKEN_METADATA] = token
            params["Metadata"] = sent
        try:
            return _etag(self._put(key, params, token if if_none_match else None, resend_if))
        except Conflict:
            # Our own earlier attempt may have applied (see the module docstring), or a 409
            # left everything as it was: only a failed condition is a Conflict.
            return settle_put_conflict(
                self, key, token=token, if_match=if_match, if_none_match=if_none_match
            )

    def _put(
        self,
        key: str,
        params: dict[str, Any],
        create_token: str | None,
        resend_if: Callable[[], bool] | None = None,
    ) -> dict[str, Any]:
        def mine() -> dict[str, Any] | None:
            """Our create applied after all (its response was lost): its ETag, before a resend
            (`recheck_create`: `Consumed` where the writer says a resend is unsafe)."""
            assert create_token is not None
            etag = recheck_create(self, key, create_token, resend_if)
            return {"ETag": etag} if etag is not None else None

        call = (self._lean or self._client).put_object
        try:
            return self._retry.run(
                "PutObject",
                key,
                lambda: call(Bucket=self.bucket, **params),
                recheck=mine if create_token is not None else None,
            )
        except _Missing as exc:
            # AWS answers 404 NoSuchKey to If-Match on a missing key: the condition failed.
            raise Conflict(f"{key} is gone") from exc

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        params: dict[str, Any] = {"Key": key}
        if if_match is not None:
            params["IfMatch"] = f'"{if_match}"'
        try:
            self._retry.call("delete_object", key, **params)
        except _Missing:
            return
        except Conflict:
            # SeaweedFS answers 412 where AWS answers 404 to If-Match on a missing key, and a
            # retried delete whose first attempt applied lands here too: missing is success.
            if if_match is None:
                raise
            settle_delete_conflict(self, key, if_match)

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        """A streamed GET (see `streams.ResumableReader`): the body is read as the caller reads."""
        return self._transfers.open(key, etag=etag)

    def put_file(self, key: str, source: Source) -> Head:
        """boto3's managed upload: one PUT, or a multipart one above `part_bytes` (transfers.py)."""
        return self._transfers.put_file(key, source)

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        """One CopyObject up to 5 GiB, a managed multipart copy above (UploadPartCopy)."""
        self._transfers.copy(source, dest, if_match=if_match, size=size)

    def delete_many(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        batch = list(keys)
        versions = if_match or {}
        for start in range(0, len(batch), MAX_KEYS):
            chunk = batch[start : start + MAX_KEYS]
            objects = [delete_entry(key, versions.get(key)) for key in chunk]
            response = self._retry.call(
                "delete_objects", chunk[0], Delete={"Objects": objects, "Quiet": True}
            )
            # PreconditionFailed: another version, left in place as asked (as is a key whose
            # If-Match SeaweedFS answers 412 to because it is missing).
            errors = [
                e
                for e in response.get("Errors", [])
                if e.get("Code") not in ("NoSuchKey", "PreconditionFailed")
            ]
            if errors:
                first = errors[0]
                raise StorageError(
                    f"DeleteObjects on s3://{self.bucket} failed for {len(errors)} keys, "
                    f"first {first.get('Key')!r}: {first.get('Code')} {first.get('Message', '')}"
                )

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        """AWS semantics on every server: the keys after `start_after` as strings, even where
        it names a folder (see `sending.just_below`)."""
        limit = min(limit, MAX_KEYS)
        params: dict[str, Any] = {"Prefix": prefix, "MaxKeys": limit}
        sent = just_below(start_after) if start_after else None
        if sent is not None:
            params["StartAfter"] = sent
        lower = sent is not None and sent != start_after
        if lower:
            params["MaxKeys"] = min(limit + 1, MAX_KEYS)  # `start_after` itself comes back too
        response = self._retry.call("list_objects_v2", prefix, **params)
        served = _served(response)
        entries = [
            Entry(
                item["Key"], _unquote(item["ETag"]), item["Size"], _ms(item["LastModified"]), served
            )
            for item in response.get("Contents", [])
            if not (lower and not_after(item["Key"], str(start_after), str(sent)))
        ]
        truncated = bool(response.get("IsTruncated")) or len(entries) > limit
        return Page(entries[:limit], truncated=truncated)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        folders: tuple[str, ...] = ()
        params: dict[str, Any] = {"Prefix": prefix, "Delimiter": "/", "MaxKeys": FOLDER_PAGE}
        while True:
            response = self._retry.call("list_objects_v2", prefix, **params)
            folders += tuple(item["Prefix"] for item in response.get("CommonPrefixes", []))
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return tuple(sorted(folders))  # SeaweedFS orders "a/" before "a-b/"
            params["ContinuationToken"] = token

    def create_bucket(self) -> None:
        """Create the bucket if it does not exist yet (for development servers and tests)."""
        params: dict[str, Any] = {}
        region = self._client.meta.region_name
        if region and region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": region}
        with contextlib.suppress(_AlreadyOwned):
            self._retry.call("create_bucket", None, **params)


def _drop_connections(ref: weakref.ReferenceType[S3Storage]) -> None:
    """In a forked child: close the pooled connections the client inherited (the parent keeps
    its own; new ones are made on the next request)."""
    storage = ref()
    session = getattr(getattr(storage and storage._client, "_endpoint", None), "http_session", None)
    close = getattr(session, "close", None)
    if close is not None:
        close()


__all__ = ["S3Storage", "make_client"]
# `make_client` lives in `s3queue.storage.clients`; docs/usage.md named it here, so it stays
# importable from this module for a release. Nothing in the tree imports it from here.

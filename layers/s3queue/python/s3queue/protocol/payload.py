"""Payloads stored apart from their message record: large bodies, read and written as streams.

A message whose body is too large to inline (`Queue.enqueue_file`, or a plain PUT into
``inbox/`` above ``max_message_bytes``) is a small record pointing at its payload
(`model.Payload`). Only that record moves through the queue: a retry copy, a released copy, a
dead letter and a redrive each rewrite the record and leave the payload where it is, so a retry
of a 2 GiB message costs what a retry of a small one does. Where payloads live:

- ``blobs/<id>``: uploaded by `enqueue_file` (multipart above 8 MiB) before its record is put;
- ``inbox/<name>``: a large PUT by another service is read in place on its first delivery. The
  inbox object is retired when its ticket is applied, so the first apply that keeps the message
  (retry, release) first copies it server-side to ``blobs/<id>.<etag>`` (one CopyObject, no
  byte through the worker) and the record points there from then on; a dead letter's is
  copied to ``dlq/`` instead (below).

A payload in ``blobs/`` is deleted when its message is done (after the commit, before its
record is retired, so a crash in between leaves the record to a re-apply that deletes it
again). A dead letter gets its own copy in ``dlq/~payloads/<name of the dead letter>`` (one
CopyObject, then the ``blobs/`` original is deleted), which the DLQ's lifecycle rule expires with
it; a redrive copies it back to a new ``blobs/`` key, and ``purge`` deletes what no record holds.
A payload that no record will ever refer to (its producer died between the upload and its
record's PUT) is found and deleted by `orphans.collect_orphans` (``s3queue gc``).
"""

from __future__ import annotations

import os
import re
from typing import BinaryIO

from s3queue.errors import Conflict, PayloadMissing
from s3queue.protocol.records import Payload
from s3queue.storage.base import Storage
from s3queue.storage.streams import Source

INLINE_BYTES = 256 * 1024
"""`enqueue_file` of a file up to this size (and half of ``max_message_bytes``) inlines it as
a bytes body: one PUT and no blob, as `enqueue(bytes)`."""


def open_payload(storage: Storage, payload: Payload) -> BinaryIO:
    """A stream of `payload`; `PayloadMissing` if it is gone or was replaced."""
    try:
        stream = storage.open(payload.key, etag=payload.etag)
    except Conflict as exc:
        raise PayloadMissing(f"payload {payload.key} was replaced since it was enqueued") from exc
    if stream is None:
        raise PayloadMissing(f"payload {payload.key} is gone (purged?)")
    return stream


def kept_name(message_id: str, etag: str) -> str:
    """The ``blobs/`` name of an inbox payload kept for a retry: one per message and version,
    so two appliers copy to the same key."""
    return f"{message_id}.{re.sub(r'[^A-Za-z0-9_-]', '_', etag)}"


def source_size(source: Source) -> int | None:
    """The bytes left to read from `source`, when that is known without reading it."""
    if isinstance(source, str | os.PathLike):
        return os.stat(source).st_size
    try:
        if not source.seekable():
            return None
        here = source.tell()
        end = source.seek(0, os.SEEK_END)
        source.seek(here)
    except (OSError, AttributeError, ValueError):
        return None
    return end - here

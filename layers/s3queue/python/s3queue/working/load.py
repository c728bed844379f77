"""Loading a ticket's refs: GET each object and decode its records (or HEAD a large foreign one)."""

from __future__ import annotations

from dataclasses import dataclass

from s3queue.errors import Conflict, MalformedMessage
from s3queue.protocol.attributes import from_metadata
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.records import Payload, Record, decode_records, foreign_id
from s3queue.protocol.records import foreign_record as _foreign
from s3queue.protocol.tickets import Ref
from s3queue.storage.base import Storage


@dataclass(frozen=True, slots=True)
class Loaded:
    """The records of one ref, or why there are none."""

    records: list[Record]
    error: str | None = None
    """Set when the object could not be decoded; `records` then holds one raw record."""


def load_ref(storage: Storage, keys: QueueKeys, ref: Ref, max_bytes: int) -> Loaded | None:
    """GET a ref's object and decode it; None if it is gone (its outcomes were applied).

    An object another service put that is larger than `max_bytes` is not read: a HEAD gives
    its metadata, and its message's payload is the object itself (payload.py).

    An object another service put is read at the version the ticket lists (If-Match; a HEAD
    that finds another ETag): a re-PUT of its key is another message, which this ticket must
    neither run nor retire. Should the listed version be overwritten before it is read, it is
    gone from S3 (None here), and the new one is dispatched on its own."""
    name = ref.key[len(keys.root) :]
    library = keys.owning(ref.key).parse_msg(ref.key) is not None
    if not library and ref.size > max_bytes:
        head = storage.head(ref.key)
        if head is None or head.etag != ref.etag:
            return None
        payload = Payload(ref.key, head.size, head.etag)
        return Loaded([_large(name, payload, head.last_modified_ms, head.metadata)])
    try:
        obj = storage.get(ref.key, if_match=None if library else ref.etag)
    except Conflict:
        return None  # another version: not this ref's message
    if obj is None or keys.is_tombstone(ref.key, len(obj.body)):
        return None
    if library:
        try:
            records = decode_records(obj.body)
        except MalformedMessage as exc:
            return Loaded([_foreign(name, obj.body, obj.last_modified_ms)], str(exc))
    elif len(obj.body) > max_bytes:  # it grew since it was listed
        payload = Payload(ref.key, len(obj.body), obj.etag)
        return Loaded([_large(name, payload, obj.last_modified_ms, obj.metadata)])
    else:
        attributes = from_metadata(obj.metadata)
        records = [_foreign(name, obj.body, obj.last_modified_ms, attributes)]
    if len(obj.body) > max_bytes:
        return Loaded(records, f"oversized: {len(obj.body)} bytes > {max_bytes}")
    return Loaded(records)


def _large(name: str, payload: Payload, modified_ms: int, metadata: dict[str, str]) -> Record:
    """The message of a large object another service put: its payload is the object."""
    attributes = from_metadata(metadata)
    return Record(foreign_id(name), None, modified_ms, attributes=attributes, payload=payload)

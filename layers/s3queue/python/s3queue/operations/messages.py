"""Operations on one message at a time: peek at waiting messages, cancel one by its explicit id,
read or delete dead letters by id (redrive by id is `admin.redrive`'s filter).

A cancel races the dispatch of the same message, and the marker ``ids/<id>`` decides it: the
worker CASes ``pending`` to ``started`` before the handler runs (`Runner._start_explicit`), a
cancel CASes ``pending`` to ``cancelled``; both write with ``If-Match`` on the ETag they read,
so exactly one wins::

    cancel   GET marker (pending, e1) ----------- PUT cancelled If-Match e1 -> wins | 412
    worker        GET marker (pending, e1) --- PUT started If-Match e1 -> wins | 412

A cancel that wins retires the message object (a worker that holds it in a ticket reads the
marker and runs nothing); one that loses re-reads and raises `AlreadyDispatched`. A crash after
the marker's CAS leaves the object, and the worker that gets it skips it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any, Literal, TypedDict

from s3queue.errors import AlreadyDispatched, Conflict, MalformedMessage, MessageNotFound
from s3queue.operations import admin
from s3queue.protocol import deadletters, markers
from s3queue.protocol.deadletters import DeadLetter, ErrorEntry
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.markers import Marker
from s3queue.protocol.records import TOMBSTONE, Record, decode_records, foreign_record
from s3queue.storage.base import Entry, Storage

State = Literal["pending", "delayed", "in_flight"]


class WaitingMessage(TypedDict):
    """A message still in the queue, as `peek` shows it (bodies as in `DeadLetter`)."""

    id: str
    key: str
    partition: str | None
    group: str | None
    state: State
    ready_ms: int
    enqueued_ms: int
    attempt: int
    attributes: dict[str, str]
    errors: list[ErrorEntry]
    body: Any
    body_encoding: Literal["json", "base64", "payload", "undecodable"]
    payload: dict[str, Any] | None


def peek(storage: Storage, keys: QueueKeys, now_ms: int, limit: int) -> list[WaitingMessage]:
    """The first `limit` messages of the queue (inbox, then each partition's folder, in key
    order) with their state, read without taking them: a LIST per 1,000 keys and a GET per
    object read, plus what `admin.in_flight` costs."""
    flying = admin.in_flight(storage, keys, {})
    found: list[WaitingMessage] = []
    for entry, _, ready_ms in admin.iter_messages(storage, keys):
        if len(found) >= limit:
            break
        state: State = "in_flight" if entry.key in flying else "pending"
        if state == "pending" and ready_ms > now_ms:
            state = "delayed"
        found.extend(_read(storage, keys, entry, state, ready_ms)[: limit - len(found)])
    return found


def _read(
    storage: Storage, keys: QueueKeys, entry: Entry, state: State, ready_ms: int
) -> list[WaitingMessage]:
    obj = storage.get(entry.key)
    if obj is None:
        return []  # handled since the LIST
    partition = keys.partition_of(entry.key)
    if entry.key.startswith(keys.inbox):
        name = entry.key[len(keys.inbox) :]
        records = [foreign_record(name, obj.body, obj.last_modified_ms, obj.metadata)]
    else:
        try:
            records = decode_records(obj.body)
        except MalformedMessage:
            return [_undecodable(entry, partition, state, ready_ms)]
    return [_waiting(r, entry.key, partition, state, ready_ms) for r in records]


def _waiting(
    record: Record, key: str, partition: str | None, state: State, ready_ms: int
) -> WaitingMessage:
    doc = record.to_json()
    payload = doc.get("payload")
    return {
        "id": record.id,
        "key": key,
        "partition": partition,
        "group": record.group,
        "state": state,
        "ready_ms": ready_ms,
        "enqueued_ms": record.enqueued_ms,
        "attempt": record.attempt,
        "attributes": dict(record.attributes),
        "errors": [deadletters.decode_error(e) for e in record.errors],
        "body": doc.get("b64") if record.raw else doc.get("body"),
        "body_encoding": "payload" if payload else "base64" if record.raw else "json",
        "payload": payload,
    }


def _undecodable(entry: Entry, partition: str | None, state: State, ready: int) -> WaitingMessage:
    """An object in ``msg/`` the library did not write: the worker dead-letters it."""
    name = entry.key.rsplit("/", 1)[-1]
    return {
        "id": name,
        "key": entry.key,
        "partition": partition,
        "group": None,
        "state": state,
        "ready_ms": ready,
        "enqueued_ms": entry.last_modified_ms,
        "attempt": 1,
        "attributes": {},
        "errors": [],
        "body": None,
        "body_encoding": "undecodable",
        "payload": None,
    }


def cancel(storage: Storage, keys: QueueKeys, message_id: str) -> bool:
    """Cancel the pending or delayed message enqueued with the explicit id `message_id`: it
    will never run. True if this call cancelled it, False if it was cancelled before.

    `MessageNotFound` if no marker names it (no such id, or enqueued without ``id=``);
    `AlreadyDispatched` if a worker started it (or it was handled): the race is decided by the
    marker's CAS (module docstring).
    """
    while True:
        found = markers.read(storage, keys, message_id)
        if found is None:
            raise MessageNotFound(
                f"no message with the explicit id {message_id!r} in queue {keys.queue!r} "
                "(cancel needs the id given to enqueue(id=...); it may also have been handled "
                "long ago and its marker expired)"
            )
        marker = found.marker
        if marker.state == markers.CANCELLED:
            return False
        if marker.state != markers.PENDING:
            raise AlreadyDispatched(_too_late(keys, message_id, marker), marker.state)
        try:
            markers.cancel(storage, keys, message_id, found)
        except Conflict:
            continue  # started, moved to a retry copy, or cancelled meanwhile: read again
        if marker.key is not None:
            _retire(storage, keys, marker.key, message_id)
        return True


def _too_late(keys: QueueKeys, message_id: str, marker: Marker) -> str:
    if marker.done:
        return (
            f"message {message_id!r} of {keys.queue!r} was already handled (done, or dead-"
            "lettered): nothing to cancel"
        )
    return (
        f"message {message_id!r} of {keys.queue!r} was already dispatched: a worker started its "
        "handler, so it runs to its outcome (a retry in backoff can be cancelled once pending)"
    )


def _retire(storage: Storage, keys: QueueKeys, key: str, message_id: str) -> None:
    """Remove a cancelled message's object if it holds that message alone. A copy (``~o``) is
    tombstoned, as apply retires copies, so a late applier cannot put it back."""
    obj = storage.get(key)
    if obj is None:
        return
    try:
        alone = [r.id for r in decode_records(obj.body)] == [message_id]
    except MalformedMessage:
        return
    if not alone:
        return  # shared: the worker skips the cancelled one, runs the others
    parsed = keys.owning(key).parse_msg(key)
    with contextlib.suppress(Conflict):  # changed meanwhile: the worker skips it
        if parsed is not None and parsed.origin:
            storage.put(key, TOMBSTONE, if_match=obj.etag)
        else:
            storage.delete(key, if_match=obj.etag)


def dead_letters_of(storage: Storage, keys: QueueKeys, message_id: str) -> list[DeadLetter]:
    """The dead letters of one message id (usually one), oldest first: LISTs of the DLQ, a GET
    for each of that id."""
    found: list[DeadLetter] = []
    for entry in admin.iter_dead(storage, keys):
        if keys.dead_id(entry.key) != message_id or keys.is_tombstone(entry.key, entry.size):
            continue
        obj = storage.get(entry.key)
        if obj is not None:
            found.append(deadletters.decode(entry.key, obj.body))
    return found


def delete_dead(storage: Storage, keys: QueueKeys, ids: Collection[str] | None = None) -> int:
    """Delete the dead letters (of `ids` only, if given) and their kept payloads; how many.

    Each becomes a tombstone with ``If-Match`` on its listed ETag, as a redriven one does, so a
    late applier of the commit that wrote it cannot create it again; one redriven meanwhile is
    left to the redrive. LISTs, one PUT and one DELETE per dead letter, no GET.
    """
    deleted = 0
    for entry in list(admin.iter_dead(storage, keys)):
        if keys.is_tombstone(entry.key, entry.size):
            continue
        if ids is not None and keys.dead_id(entry.key) not in ids:
            continue
        try:
            storage.put(entry.key, TOMBSTONE, if_match=entry.etag)
        except Conflict:
            continue
        storage.delete(keys.dead_payload(entry.key))
        deleted += 1
    return deleted

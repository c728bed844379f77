"""Dedup markers (``ids/<id>``): the stored form of an explicit id's state, and its one reader.

A marker is created "pending" with its message's key before the message (writer.py), pointed at
each new home of the message (a retry or released copy, apply.py; a redrive, admin.py), and
marked "done" when the message is handled or dead-lettered. The record the marker names is the
only one of its id that may run: a record of that id under any other key is a stale object (a
repeated enqueue that re-created a key the message had left), and is retired unrun
(`may_run`; docs/protocol.md, "Explicit ids").

A worker CASes "pending" to "started" before the handler runs (`start`), and an operator's
cancel CASes "pending" to "cancelled" (operations/messages.py): exactly one of the two wins.
"done" and "cancelled" are final: nothing of the id runs again, and a repeated enqueue is a
no-op.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from s3queue.errors import Conflict, MalformedMessage
from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Storage, new_token

_log = logging.getLogger(__name__)


PENDING, STARTED, DONE, CANCELLED = "pending", "started", "done", "cancelled"


@dataclass(frozen=True, slots=True)
class Marker:
    """An explicit id's state: "pending" or "started" at `key`, "done" or "cancelled"."""

    state: str
    key: str | None = None

    @property
    def done(self) -> bool:
        return self.state == DONE

    @property
    def final(self) -> bool:
        """Handled or cancelled: nothing of this id runs any more."""
        return self.state in (DONE, CANCELLED)

    def encode(self, token: str) -> bytes:
        doc: dict[str, Any] = {"v": 1, "token": token, "state": self.state}
        if self.key is not None:
            doc["key"] = self.key
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes) -> Marker:
        try:
            doc = json.loads(data)
            state, key = doc.get("state"), doc.get("key")
        except (ValueError, AttributeError) as exc:
            raise MalformedMessage("undecodable marker") from exc
        return cls(str(state), key if isinstance(key, str) else None)


@dataclass(frozen=True, slots=True)
class Found:
    """A marker as read, with the ETag to change it by."""

    marker: Marker
    etag: str


def read(storage: Storage, keys: QueueKeys, message_id: str) -> Found | None:
    """The id's marker; None if there is none. An undecodable one (S3Queue never writes one)
    counts as none, for every reader alike: its message runs, and an enqueue puts it."""
    obj = storage.get(keys.marker(message_id))
    if obj is None:
        return None
    try:
        return Found(Marker.decode(obj.body), obj.etag)
    except MalformedMessage:
        _log.warning("%s: undecodable dedup marker, taken as none", keys.marker(message_id))
        return None


def may_run(found: Found | None, key: str) -> bool:
    """Whether a record of an explicit id, stored at `key`, may run: not once its id is done,
    nor when the marker names another key (the message moved on and `key` is stale). With no
    marker (expired by the lifecycle rule, purged) nothing says otherwise: it runs."""
    if found is None:
        return True
    return not found.marker.final and found.marker.key in (None, key)


def start(storage: Storage, keys: QueueKeys, message_id: str, found: Found) -> None:
    """CAS a pending marker `found` to started (the handler is about to run); `Conflict` if it
    changed since (a cancel, or a move, came first: read it again)."""
    token = new_token()
    body = Marker(STARTED, found.marker.key).encode(token)
    storage.put(keys.marker(message_id), body, if_match=found.etag, token=token)


def cancel(storage: Storage, keys: QueueKeys, message_id: str, found: Found) -> None:
    """CAS a pending marker `found` to cancelled (its message never runs); `Conflict` if it
    changed since (a worker started it, or it moved: read it again)."""
    token = new_token()
    body = Marker(CANCELLED, found.marker.key).encode(token)
    storage.put(keys.marker(message_id), body, if_match=found.etag, token=token)


def create(storage: Storage, keys: QueueKeys, message_id: str, key: str) -> None:
    """Create the id's marker pending at `key` (If-None-Match); `Conflict` if it exists."""
    token = new_token()
    body = Marker(PENDING, key).encode(token)
    storage.put(keys.marker(message_id), body, if_none_match=True, token=token)


def point(storage: Storage, keys: QueueKeys, message_id: str, key: str, found: Found) -> None:
    """CAS the marker `found` to pending at `key`; `Conflict` if it changed since."""
    token = new_token()
    body = Marker(PENDING, key).encode(token)
    storage.put(keys.marker(message_id), body, if_match=found.etag, token=token)


def mark_done(storage: Storage, keys: QueueKeys, message_id: str, key: str) -> None:
    """Mark the id done: its record at `key` was handled or dead-lettered. Only if the marker
    still names `key` (CAS): an apply run again late, after a redrive pointed the marker at the
    message's next life, must not end that life unrun. No marker (expired, purged): one is
    created done, so a repeated enqueue stays a no-op."""
    token = new_token()
    body = Marker(DONE).encode(token)
    for _ in range(_TRIES):
        found = read(storage, keys, message_id)
        if found is None:
            with contextlib.suppress(Conflict):  # one appeared meanwhile: it is not ours to end
                storage.put(keys.marker(message_id), body, if_none_match=True, token=token)
            return
        if found.marker.final or found.marker.key not in (None, key):
            return
        try:
            storage.put(keys.marker(message_id), body, if_match=found.etag, token=token)
            return
        except Conflict:  # changed meanwhile: read it again (see `_TRIES`)
            continue


def point_from(storage: Storage, keys: QueueKeys, message_id: str, source: str, key: str) -> None:
    """Point the marker from `source` (the record a ticket handled) to its copy at `key`; a
    marker that names anything else (done, a redrive's key, this copy already) is left."""
    for _ in range(_TRIES):
        found = read(storage, keys, message_id)
        if found is None or found.marker.final or found.marker.key != source:
            return
        try:
            point(storage, keys, message_id, key, found)
            return
        except Conflict:  # changed meanwhile: read it again (see `_TRIES`)
            continue


_TRIES = 3
"""Reads of a marker that changed between our read and our CAS. Usually an earlier apply of
the same commit moved it on, and the next read says so; but it may still name our record in
another state: a worker's "started" CAS that it gave up on (a timeout: it released the message
unrun) and that S3 applied later (a zombie request). Giving up then would leave the marker
naming a record that is gone: its copy would never run, or a handled id would run again."""

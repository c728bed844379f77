"""Operations on a whole queue: stats, dead letters, redrive, purge, delete.

These read every key of a prefix (O(keys)); they are for people and dashboards, not the hot
path. The coordinator never calls them. What `stats` costs: one LIST per 1,000 keys under
``inbox/``, ``msg/``, ``parts/``, ``tickets/`` and ``dlq/``, and one GET per ticket that
changed since the last call with the same `TicketCache` (every ticket the first time).

Dead letters are read in the one schema of `s3queue.protocol.deadletters`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TypedDict

from s3queue.errors import Conflict, MalformedMessage, QueueNotFound, StorageError
from s3queue.protocol import deadletters, markers
from s3queue.protocol.deadletters import DeadLetter
from s3queue.protocol.keys import MsgKey, QueueKeys, new_id
from s3queue.protocol.records import TOMBSTONE, Payload, Record, encode_records
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Entry, Storage, iter_keys, new_token


def exists(storage: Storage, keys: QueueKeys) -> bool:
    return bool(storage.list(keys.root, limit=1).entries)


TicketCache = dict[str, tuple[str, dict[str, int] | None]]
"""Ticket key -> (etag, in-flight adjustment per message key, None if undecodable)."""


def in_flight(storage: Storage, keys: QueueKeys, cache: TicketCache) -> dict[str, int]:
    """Message key -> minus the messages of it a live ticket has finished; one GET per change."""
    seen: TicketCache = {}
    for entry in iter_keys(storage, keys.tickets):
        cached = cache.get(entry.key)
        if cached is not None and cached[0] == entry.etag:
            seen[entry.key] = cached
            continue
        obj = storage.get(entry.key)
        if obj is not None:
            seen[entry.key] = (obj.etag, _ticket_refs(obj.body))
    cache.clear()
    cache.update(seen)
    in_flight_keys: dict[str, int] = {}
    for _, refs in seen.values():
        in_flight_keys.update(refs or {})
    return in_flight_keys


def _ticket_refs(body: bytes) -> dict[str, int] | None:
    try:
        ticket = Ticket.decode(body)
    except MalformedMessage:
        return None
    done = ticket.finished()
    return {ref.key: -sum(1 for r, _ in done if r == ref.key) for ref in ticket.refs}


class Counts(TypedDict):
    """A queue's or a partition's messages by state (`stats`)."""

    pending: int
    delayed: int
    in_flight: int
    oldest_age_s: float
    """Seconds since the oldest pending message became ready (0.0: none pending)."""


class Stats(Counts):
    """What `stats` (and `Queue.stats`, ``s3queue stats``) answers."""

    queue: str
    dead: int
    tickets: int
    """Live tickets (dispatched, not yet applied)."""
    partitions: dict[str, Counts]
    """By partition name ("" for the default partition)."""


class QueueStats(Stats):
    """`Queue.stats`: `Stats`, and what dispatch holds back (two GETs more)."""

    paused: bool
    held: dict[str, int]
    """Ready messages held back, by why: ``paused``, and the leader's limits (holds.py)."""


def stats(
    storage: Storage, keys: QueueKeys, now_ms: int, cache: TicketCache | None = None
) -> Stats:
    """Counts of pending, delayed, in-flight and dead messages; what it costs: module docstring."""
    cache = {} if cache is None else cache
    in_flight_keys = in_flight(storage, keys, cache)
    tickets = sum(1 for _, refs in cache.values() if refs is not None)
    total = _Counts()
    partitions: dict[str, _Counts] = {}
    for entry, count, ready_ms in iter_messages(storage, keys):
        part = partitions.setdefault(keys.partition_of(entry.key) or "", _Counts())
        for counts in (total, part):
            if entry.key in in_flight_keys:
                counts.in_flight += count + in_flight_keys[entry.key]
            elif ready_ms > now_ms:
                counts.delayed += count
            else:
                counts.pending += count
                counts.oldest = ready_ms if counts.oldest is None else min(counts.oldest, ready_ms)
    return Stats(
        queue=keys.queue,
        **total.as_dict(now_ms),
        dead=count_dead_letters(storage, keys),
        tickets=tickets,
        partitions={name: partitions[name].as_dict(now_ms) for name in sorted(partitions)},
    )


@dataclass(slots=True)
class _Counts:
    pending: int = 0
    delayed: int = 0
    in_flight: int = 0
    oldest: int | None = None

    def as_dict(self, now_ms: int) -> Counts:
        oldest = self.oldest
        return Counts(
            pending=self.pending,
            delayed=self.delayed,
            in_flight=self.in_flight,
            oldest_age_s=round((now_ms - oldest) / 1000, 3) if oldest is not None else 0.0,
        )


def iter_messages(storage: Storage, keys: QueueKeys) -> Iterator[tuple[Entry, int, int]]:
    for entry in iter_keys(storage, keys.inbox):
        yield entry, 1, entry.last_modified_ms
    for folder in (keys.msg, keys.parts):
        for entry in iter_keys(storage, folder):
            if keys.is_tombstone(entry.key, entry.size):
                continue
            parsed = keys.owning(entry.key).parse_msg(entry.key)
            if parsed is None:
                yield entry, 1, 0
            elif parsed.target is None:  # else a late notice (producer.py): not a message
                yield entry, parsed.count, parsed.ready_ms


def count_dead_letters(storage: Storage, keys: QueueKeys) -> int:
    """Dead letters in the DLQ (LISTs only; an empty object is a redriven one's tombstone)."""
    return sum(1 for e in iter_dead(storage, keys) if not keys.is_tombstone(e.key, e.size))


def iter_dead(storage: Storage, keys: QueueKeys, after: str | None = None) -> Iterator[Entry]:
    """The DLQ's entries after the key `after`, up to its payloads (they sort after them)."""
    for entry in iter_keys(storage, keys.dlq, after):
        if keys.is_dead_payload(entry.key):
            return
        yield entry


def dead_letters(
    storage: Storage, keys: QueueKeys, limit: int | None = 100, after: str | None = None
) -> list[DeadLetter]:
    """At most `limit` (None: all) dead letters, oldest first, after the DLQ key `after`."""
    entries: list[DeadLetter] = []
    for entry in iter_dead(storage, keys, after):
        if limit is not None and len(entries) >= limit:
            break
        obj = None if keys.is_tombstone(entry.key, entry.size) else storage.get(entry.key)
        if obj is not None:
            entries.append(deadletters.decode(entry.key, obj.body))
    return entries


def redrive(
    storage: Storage, keys: QueueKeys, now_ms: int, ids: Collection[str] | None = None
) -> int:
    """Every dead letter (of `ids` only, if given) becomes a fresh message (`redrive_entry`);
    how many did."""
    return sum(
        redrive_entry(storage, keys, entry, now_ms)
        for entry in list(iter_dead(storage, keys))
        if ids is None or keys.dead_id(entry.key) in ids
    )


def redrive_entry(storage: Storage, keys: QueueKeys, entry: Entry, now_ms: int) -> bool:
    """One dead letter (a DLQ entry as listed) becomes a fresh message (attempt 1, errors kept),
    then is tombstoned; its payload goes back to ``blobs/``. False if there was nothing to
    redrive: a tombstone, an entry gone or not re-enqueueable, a payload that expired first,
    or a dead letter another redrive holds.

    A redrive is exactly-once however often it is run again after dying midway, and for any
    message (a generated id too): the redriven message has a marker like an explicit id's, and
    the dead letter records each step before the next (docs/protocol.md, "Redrive")::

        CAS dead letter: redriving to N    (the claim: a second redrive stops here)
        marker ids/<id> -> pending N       (a done marker, since the death, is reopened)
        CAS dead letter: ... pointed
        PUT N (If-None-Match), tombstone the dead letter, delete its kept payload

    Run again, it goes on from the last step on record. Once the marker was pointed, only a
    marker still pending at N lets it PUT N: done, or at a retry copy, means N ran already."""
    obj = None if keys.is_tombstone(entry.key, entry.size) else storage.get(entry.key)
    held = deadletters.decode_record(obj.body) if obj is not None else None
    if obj is None or held is None:
        return False  # left in place: nothing we could re-enqueue faithfully
    record, source = held
    record.attempt, record.dedup = 1, True
    kept = record.payload.key if record.payload else None
    moving = kept is not None and keys.is_dead_payload(kept)
    state = deadletters.redrive_state(obj.body)
    etag: str | None = obj.etag
    if state is None:
        home = keys.owning(source)  # back into its partition
        key = home.msg_key(MsgKey(now_ms, new_id(now_ms), record.group))
        etag = _claim(storage, entry.key, obj.body, obj.etag, key, pointed=False)
        state = (key, False)
    key, pointed = state
    if etag is not None and not pointed:
        _reopen(storage, keys, record.id, key)
        etag = _claim(storage, entry.key, obj.body, etag, key, pointed=True)
        put = True
    else:
        found = markers.read(storage, keys, record.id)
        put = found is None or (found.marker.state == markers.PENDING and found.marker.key == key)
    if etag is None:
        return False  # another redrive holds it
    if put:
        if moving and not _payload_back(storage, keys, record, now_ms):
            return False  # its payload expired first: left to the DLQ's lifecycle rule
        # Conflict: the earlier run of this redrive put it.
        with contextlib.suppress(Conflict):
            storage.put(key, encode_records([record], new_token()), if_none_match=True)
    # A tombstone, not a delete: a late applier of the commit that wrote this dead letter
    # cannot create it again (apply.py); the DLQ's lifecycle rule removes it.
    storage.put(entry.key, TOMBSTONE, if_match=etag)
    if moving and kept is not None:
        storage.delete(kept)
    return True


def _claim(
    storage: Storage, dead_key: str, body: bytes, etag: str, key: str, *, pointed: bool
) -> str | None:
    """Record a redrive's step in its dead letter (CAS); its new ETag, None if it changed."""
    token = new_token()
    data = deadletters.redriving(body, key, pointed=pointed, token=token)
    try:
        return storage.put(dead_key, data, if_match=etag, token=token)
    except Conflict:
        return None


def _reopen(storage: Storage, keys: QueueKeys, message_id: str, key: str) -> None:
    """Point a redriven message's marker at its new key (done since it died, or none for a
    generated id); a marker that changes meanwhile is read again."""
    for _ in range(5):
        found = markers.read(storage, keys, message_id)
        if found is not None and not found.marker.done and found.marker.key == key:
            return
        try:
            if found is None:
                markers.create(storage, keys, message_id, key)
            else:
                markers.point(storage, keys, message_id, key, found)
        except Conflict:
            continue
        return
    raise StorageError(f"{keys.marker(message_id)} kept changing: redrive it again")


def _payload_back(storage: Storage, keys: QueueKeys, record: Record, now_ms: int) -> bool:
    """Copy a dead letter's payload to a new ``blobs/`` key and point `record` at it; False if
    the payload is gone. A crash before the message is put leaves an orphan for `orphans`."""
    assert record.payload is not None
    blob = keys.blob(new_id(now_ms))
    try:
        storage.copy(record.payload.key, blob, if_match=None, size=record.payload.size)
    except Conflict:
        return False
    record.payload = Payload(blob, record.payload.size)
    return True


def dead_payload_keys(storage: Storage, keys: QueueKeys) -> Iterator[str]:
    """The payload key of every dead letter that has one: a GET per dead letter."""
    for entry in iter_dead(storage, keys):
        obj = None if keys.is_tombstone(entry.key, entry.size) else storage.get(entry.key)
        payload = deadletters.decode(entry.key, obj.body)["payload"] if obj is not None else None
        if payload and isinstance(payload.get("key"), str):
            yield payload["key"]


def dead_count(keys: QueueKeys, entry: Entry) -> int:
    """1 for a dead letter; 0 for a tombstone or a dead letter's payload."""
    return 0 if keys.is_dead_payload(entry.key) else message_count(keys, entry)


def message_count(keys: QueueKeys, entry: Entry) -> int:
    """The messages a listed object holds: a packed one all of them, a tombstone none."""
    if keys.is_tombstone(entry.key, entry.size):
        return 0
    parsed = keys.parse_msg(entry.key)
    return 1 if parsed is None else parsed.count


def delete(storage: Storage, keys: QueueKeys) -> int:
    if not exists(storage, keys):
        raise QueueNotFound(f"queue {keys.queue!r} has no objects under {keys.root}")
    deleted = 0
    while page := storage.list(keys.root).entries:  # everything, tombstones and markers too
        storage.delete_many(e.key for e in page)
        deleted += len(page)
    return deleted

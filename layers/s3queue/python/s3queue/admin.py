"""Operations on a whole queue: stats, dead letters, redrive, purge, delete.

These read every key of a prefix (O(keys)); they are for people and dashboards, not the hot
path. The coordinator never calls them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from s3queue.errors import MalformedMessage, QueueNotFound
from s3queue.keys import MsgKey, QueueKeys, new_id
from s3queue.model import Record, Ticket, encode_records
from s3queue.storage.base import Entry, Storage, new_token


def iter_keys(storage: Storage, prefix: str) -> Iterator[Entry]:
    """Every entry under a prefix, page by page."""
    start: str | None = None
    while True:
        page = storage.list(prefix, start_after=start)
        yield from page.entries
        if not page.truncated or not page.entries:
            return
        start = page.entries[-1].key


def exists(storage: Storage, keys: QueueKeys) -> bool:
    return bool(storage.list(keys.root, limit=1).entries)


def stats(storage: Storage, keys: QueueKeys, now_ms: int) -> dict[str, Any]:
    in_flight_keys: dict[str, int] = {}
    tickets = 0
    for entry in iter_keys(storage, keys.tickets):
        obj = storage.get(entry.key)
        if obj is None:
            continue
        try:
            ticket = Ticket.decode(obj.body)
        except MalformedMessage:
            continue
        tickets += 1
        done = ticket.finished()
        for ref in ticket.refs:
            in_flight_keys[ref.key] = -sum(1 for r, _ in done if r == ref.key)
    pending = delayed = in_flight = 0
    oldest: int | None = None
    for entry, count, ready_ms in _messages(storage, keys):
        if entry.key in in_flight_keys:
            in_flight += count + in_flight_keys[entry.key]
        elif ready_ms > now_ms:
            delayed += count
        else:
            pending += count
            oldest = ready_ms if oldest is None else min(oldest, ready_ms)
    dead = sum(1 for entry in iter_keys(storage, keys.dlq) if entry.size)
    return {
        "queue": keys.queue,
        "pending": pending,
        "delayed": delayed,
        "in_flight": in_flight,
        "dead": dead,
        "tickets": tickets,
        "oldest_age_s": round((now_ms - oldest) / 1000, 3) if oldest is not None else 0.0,
    }


def _messages(storage: Storage, keys: QueueKeys) -> Iterator[tuple[Entry, int, int]]:
    for entry in iter_keys(storage, keys.inbox):
        yield entry, 1, entry.last_modified_ms
    for entry in iter_keys(storage, keys.msg):
        if entry.size == 0:
            continue  # a consumed copy's tombstone (apply.py)
        parsed = keys.parse_msg(entry.key)
        if parsed is None:
            yield entry, 1, 0
        elif parsed.target is None:  # else a late notice (producer.py): not a message
            yield entry, parsed.count, parsed.ready_ms


def dead_letters(storage: Storage, keys: QueueKeys, limit: int = 100) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for entry in iter_keys(storage, keys.dlq):
        if len(entries) >= limit:
            break
        obj = storage.get(entry.key) if entry.size else None  # empty: redriven
        if obj is None:
            continue
        try:
            doc = json.loads(obj.body)
        except ValueError:
            doc = {"error": "undecodable dead letter"}
        doc["key"] = entry.key
        doc.pop("token", None)
        entries.append(doc)
    return entries


def redrive(storage: Storage, keys: QueueKeys, now_ms: int) -> int:
    """Each dead letter becomes a fresh message (attempt 1, errors kept), then is deleted."""
    moved = 0
    for entry in list(iter_keys(storage, keys.dlq)):
        obj = storage.get(entry.key) if entry.size else None  # empty: redriven already
        if obj is None:
            continue
        try:
            doc = json.loads(obj.body)
            record = Record.from_json(doc)
        except (ValueError, KeyError, TypeError):
            continue  # left in place: nothing we could re-enqueue faithfully
        record.attempt = 1
        group = record.group
        key = MsgKey(now_ms, new_id(now_ms), group) if group else MsgKey(now_ms, new_id(now_ms))
        storage.put(keys.msg_key(key), encode_records([record], new_token()), if_none_match=True)
        # A tombstone, not a delete: a late applier of the commit that wrote this dead letter
        # cannot create it again (apply.py); the DLQ's lifecycle rule removes it.
        storage.put(entry.key, b"", if_match=entry.etag)
        moved += 1
    return moved


def purge(storage: Storage, keys: QueueKeys, *, include_dlq: bool = False) -> int:
    if not exists(storage, keys):
        raise QueueNotFound(f"queue {keys.queue!r} has no objects under {keys.root}")
    prefixes = [keys.inbox, keys.msg, keys.ids] + ([keys.dlq] if include_dlq else [])
    return sum(_delete_prefix(storage, p) for p in prefixes)


def delete(storage: Storage, keys: QueueKeys) -> int:
    if not exists(storage, keys):
        raise QueueNotFound(f"queue {keys.queue!r} has no objects under {keys.root}")
    return _delete_prefix(storage, keys.root)


def _delete_prefix(storage: Storage, prefix: str) -> int:
    deleted = 0
    while True:
        page = storage.list(prefix)
        if not page.entries:
            return deleted
        storage.delete_many(e.key for e in page.entries)
        deleted += len(page.entries)

"""`purge`: delete a queue's pending and delayed messages (and dead letters), while it runs.

Apart from admin.py because it is the one operation that races the running queue on purpose:
it must delete only what it listed, and leave alone what keeps the protocol safe (module of
`purge`, and docs/guarantees.md, "Purge").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection

from s3queue.errors import MalformedMessage, QueueNotFound
from s3queue.operations.admin import dead_count, dead_payload_keys, message_count
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.records import decode_records
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Entry, Storage, iter_keys


def purge(storage: Storage, keys: QueueKeys, *, include_dlq: bool = False) -> int:
    """Delete every pending and delayed message (and dead letters); how many messages went.

    A packed object counts as its messages; dedup markers and tombstones are not messages.
    Safe while the queue runs (issue 19):

    - a message a live ticket holds is left to finish (its worker may have started it), and
      so is its stored payload;
    - each object goes by ``If-Match`` of the version listed: another version PUT since (a
      foreign key PUT again), or a late zombie DELETE, takes nothing it did not list;
    - tombstones stay: they keep a late applier from creating a consumed copy again;
    - dedup markers stay: a purged id's marker still names its key, so enqueueing the id again
      puts the message back there (writer.py: `put_once`), while a handled id stays handled;
    - a payload uploaded after the purge began is kept (its record may be on its way).
    """
    head = storage.list(keys.root, limit=1).entries
    if not head:
        raise QueueNotFound(f"queue {keys.queue!r} has no objects under {keys.root}")
    began_ms = head[0].served_ms
    live = _live_refs(storage, keys)
    purged = _delete_prefix(storage, keys, keys.inbox, live, lambda entry: 1)
    purged += _delete_prefix(storage, keys, keys.msg, live, lambda e: message_count(keys, e))
    purged += _delete_prefix(
        storage, keys, keys.parts, live, lambda e: message_count(keys.owning(e.key), e)
    )
    if include_dlq:
        purged += _delete_prefix(storage, keys, keys.dlq, set(), lambda e: dead_count(keys, e))
    _purge_blobs(storage, keys, live, began_ms, include_dlq=include_dlq)
    return purged


def _live_refs(storage: Storage, keys: QueueKeys) -> set[str]:
    """The message keys live tickets hold: a GET per ticket."""
    held: set[str] = set()
    for entry in iter_keys(storage, keys.tickets):
        obj = None if keys.parse_ticket(entry.key) is None else storage.get(entry.key)
        if obj is None:
            continue
        with contextlib.suppress(MalformedMessage):
            held.update(ref.key for ref in Ticket.decode(obj.body).refs)
    return held


def _purge_blobs(
    storage: Storage, keys: QueueKeys, live: set[str], began_ms: int, *, include_dlq: bool
) -> None:
    """Delete the ``blobs/`` payloads (payload.py) that no dead letter kept and no message a
    live ticket holds refers to, and that were there when the purge began; one LIST when there
    are none, else a GET per dead letter and per held message."""
    if not storage.list(keys.blobs, limit=1).entries:
        return
    held = set() if include_dlq else set(dead_payload_keys(storage, keys))
    for key in live:
        obj = storage.get(key)
        with contextlib.suppress(MalformedMessage, ValueError):
            for record in decode_records(obj.body) if obj is not None else ():
                if record.payload is not None:
                    held.add(record.payload.key)
    doomed = [
        e.key
        for e in iter_keys(storage, keys.blobs)
        if e.key not in held and not (began_ms and e.last_modified_ms >= began_ms)
    ]
    for start in range(0, len(doomed), 1000):
        storage.delete_many(doomed[start : start + 1000])


def _delete_prefix(
    storage: Storage,
    keys: QueueKeys,
    prefix: str,
    keep: Collection[str],
    weigh: Callable[[Entry], int],
) -> int:
    """Delete every object under `prefix` but `keep` and tombstones, each by ``If-Match`` of
    the version listed; the sum of `weigh` over them."""
    deleted, after = 0, None
    while True:
        page = storage.list(prefix, start_after=after)
        doomed = [
            e for e in page.entries if e.key not in keep and not keys.is_tombstone(e.key, e.size)
        ]
        if doomed:
            storage.delete_many((e.key for e in doomed), if_match={e.key: e.etag for e in doomed})
            deleted += sum(weigh(e) for e in doomed)
        if not page.truncated:
            return deleted
        after = page.entries[-1].key

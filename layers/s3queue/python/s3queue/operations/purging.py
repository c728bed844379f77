"""`purge`: delete a queue's pending and delayed messages (and dead letters), while it runs.

Apart from admin.py because it is the one operation that races the running queue on purpose:
it must delete only what it listed, and leave alone what keeps the protocol safe (module of
`purge`, and docs/guarantees.md, "Purge").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator

from s3queue.errors import Conflict, MalformedMessage, QueueNotFound
from s3queue.operations.admin import dead_count, dead_payload_keys, exists, message_count
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.records import TOMBSTONE, decode_records
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Entry, Storage, iter_keys


def purge(storage: Storage, keys: QueueKeys, *, include_dlq: bool = False) -> int:
    """Delete every pending and delayed message (and dead letters); how many messages went.

    A packed object counts as its messages; dedup markers and tombstones are not messages.
    Safe while the queue runs (issue 19):

    - a message a live ticket holds is left to finish (its worker may have started it), and
      so is its stored payload (the tickets as listed when the purge starts: one published
      while it runs may lose its messages, as a purge meant; an explicit id it handled stays
      handled, working/apply.py);
    - a copy (a retry's or a release's) becomes a tombstone, not nothing: a committer paused
      before its apply, holding the record, must not create it again after a purge;
    - each object goes by ``If-Match`` of the version listed: another version PUT since (a
      foreign key PUT again), or a late zombie DELETE, takes nothing it did not list;
    - tombstones stay: they keep a late applier from creating a consumed copy again;
    - dedup markers stay: a purged id's marker still names its key, so enqueueing the id again
      puts the message back there, over a copy's tombstone too (writer.py: `put_once`), while
      a handled id stays handled;
    - a stored payload goes with the record purge deleted that named it (a GET per record,
      paid only when the queue has any under ``blobs/``); any other (a message on its way, in
      flight, or a dead producer's upload: ``s3queue gc``) stays.
    """
    if not exists(storage, keys):
        raise QueueNotFound(f"queue {keys.queue!r} has no objects under {keys.root}")
    live = _live_refs(storage, keys)
    blobs: set[str] | None = set() if storage.list(keys.blobs, limit=1).entries else None
    purged = _delete_prefix(storage, keys, keys.inbox, live, lambda entry: 1, blobs)
    purged += _delete_prefix(storage, keys, keys.msg, live, lambda e: message_count(keys, e), blobs)
    purged += _delete_prefix(
        storage, keys, keys.parts, live, lambda e: message_count(keys.owning(e.key), e), blobs
    )
    if include_dlq:
        if blobs is not None:  # a dead letter written before they kept theirs in dlq/
            blobs.update(k for k in dead_payload_keys(storage, keys) if k.startswith(keys.blobs))
        purged += _delete_prefix(storage, keys, keys.dlq, set(), lambda e: dead_count(keys, e))
    doomed = sorted(blobs or ())
    for at in range(0, len(doomed), 1000):
        storage.delete_many(doomed[at : at + 1000])
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


def _payloads(storage: Storage, keys: QueueKeys, entries: list[Entry]) -> Iterator[str]:
    """The ``blobs/`` payloads the records of `entries` name (a GET each)."""
    for entry in entries:
        obj = storage.get(entry.key)
        with contextlib.suppress(MalformedMessage, ValueError):
            for record in decode_records(obj.body) if obj is not None else ():
                if record.payload is not None and record.payload.key.startswith(keys.blobs):
                    yield record.payload.key


def _is_copy(keys: QueueKeys, key: str) -> bool:
    parsed = keys.owning(key).parse_msg(key)
    return parsed is not None and parsed.origin is not None


def _delete_prefix(
    storage: Storage,
    keys: QueueKeys,
    prefix: str,
    keep: Collection[str],
    weigh: Callable[[Entry], int],
    blobs: set[str] | None = None,
) -> int:
    """Delete every object under `prefix` but `keep` and tombstones, each by ``If-Match`` of
    the version listed; the sum of `weigh` over them. Into `blobs` (unless None): the payloads
    their records name."""
    deleted, after = 0, None
    while True:
        page = storage.list(prefix, start_after=after)
        doomed = [
            e for e in page.entries if e.key not in keep and not keys.is_tombstone(e.key, e.size)
        ]
        if doomed and blobs is not None:
            blobs.update(_payloads(storage, keys, doomed))
        copies: list[Entry] = []
        gone: list[Entry] = []
        for entry in doomed:
            (copies if _is_copy(keys, entry.key) else gone).append(entry)
        for entry in copies:
            with contextlib.suppress(Conflict):  # changed since the LIST: not ours to take
                storage.put(entry.key, TOMBSTONE, if_match=entry.etag)
        if gone:
            storage.delete_many((e.key for e in gone), if_match={e.key: e.etag for e in gone})
        deleted += sum(weigh(e) for e in doomed)
        if not page.truncated:
            return deleted
        after = page.entries[-1].key

"""`collect_orphans`: delete stored payloads that no record can refer to any more.

A payload is written before the record that points at it (payload.py), so a producer that dies
between its upload and its record's PUT leaves a ``blobs/`` object that nothing refers to; so
does a redrive that dies between its copy and its message. Nothing else deletes such a blob, and
no lifecycle rule may: ``msg/`` never expires, and an old blob is as likely a message that has
been waiting a long time.

A blob's name does not say which record holds it, and records move (a retry or released copy
carries its payload along), so the proof is a scan: a blob is an orphan when it is older than
`grace_ms` (longer than any producer takes between the start of its upload and its record's
PUT; a multipart object is dated by its upload's start) and no record in ``msg/``, ``parts/`` or
``dlq/`` refers to it. A move writes its copy before it retires its source, so a scan misses a
holder only when the copy lands behind the scan's position while the source is retired ahead of
it; an orphan must therefore be unreferenced in two scans, one after the other::

    scan 1   LIST+GET msg/ ... parts/ ... dlq/     -> old blobs nobody refers to: suspects
    scan 2   LIST+GET msg/ ... parts/ ... dlq/     -> suspects still unreferenced: orphans

Costs: one LIST per 1,000 blobs; when some blob is old, one LIST per 1,000 records and a GET
per record, twice only when there are suspects. It is an operator's command (``s3queue gc``),
not the coordinator's: on a long backlog a scan is many GETs. A dead letter's payload (under
``dlq/~payloads/``) is an orphan when it is older than `grace_ms` and its dead letter is gone or
redriven; the DLQ's lifecycle rule would take it anyway, this only does it sooner.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from s3queue.errors import MalformedMessage
from s3queue.operations.admin import dead_payload_keys, iter_dead
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.records import decode_records
from s3queue.storage.base import Storage, iter_keys

_log = logging.getLogger(__name__)

DEFAULT_GRACE_MS = 7 * 24 * 3600 * 1000
"""A week: far longer than any producer takes between uploading a payload and putting its
record, and short enough that an orphan costs little storage."""


@dataclass(frozen=True, slots=True)
class Orphans:
    """What a collection found: how many stored payloads were old enough to be suspects, and
    the orphans among them (deleted unless it was a dry run)."""

    suspects: int
    orphans: list[str] = field(default_factory=list)
    deleted: bool = False


def collect_orphans(
    storage: Storage,
    keys: QueueKeys,
    now_ms: int,
    *,
    grace_ms: int = DEFAULT_GRACE_MS,
    dry_run: bool = False,
) -> Orphans:
    """Find (and unless `dry_run`, delete) the payloads no record refers to; see module."""
    if grace_ms < 0:
        raise ValueError(f"grace_ms must be >= 0, not {grace_ms}")
    cutoff = now_ms - grace_ms
    old = {e.key for e in iter_keys(storage, keys.blobs) if e.last_modified_ms <= cutoff}
    dead = iter_keys(storage, keys.dead_payloads)
    old_dead = {e.key for e in dead if e.last_modified_ms <= cutoff}
    orphans = sorted(old_dead - _dead_letters_held(storage, keys))
    suspects = old
    for _ in range(2):  # see module: a holder moved during one scan is seen by the other
        if not suspects:
            break
        suspects = suspects - set(_referenced(storage, keys))
    orphans += sorted(suspects)
    if orphans and not dry_run:
        for start in range(0, len(orphans), 1000):
            storage.delete_many(orphans[start : start + 1000])
        _log.info("%s: deleted %d orphaned payloads", keys.queue, len(orphans))
    return Orphans(len(old) + len(old_dead), orphans, bool(orphans) and not dry_run)


def _dead_letters_held(storage: Storage, keys: QueueKeys) -> set[str]:
    """The ``dlq/~payloads/`` keys whose dead letter is there (LISTs only: the key names it)."""
    return {
        keys.dead_payload(e.key)
        for e in iter_dead(storage, keys)
        if not keys.is_tombstone(e.key, e.size)
    }


def _referenced(storage: Storage, keys: QueueKeys) -> Iterator[str]:
    """The payload keys of every record in ``msg/``, ``parts/`` and ``dlq/``: a GET each."""
    for folder in (keys.partitioned(None).msg, keys.parts):
        for entry in iter_keys(storage, folder):
            if keys.is_tombstone(entry.key, entry.size):
                continue
            obj = storage.get(entry.key)
            if obj is None:
                continue  # retired since the LIST
            try:
                records = decode_records(obj.body)
            except MalformedMessage:
                continue  # a late notice, or a foreign object: it holds no payload
            yield from (r.payload.key for r in records if r.payload is not None)
    yield from dead_payload_keys(storage, keys)

"""The copies one ref's outcomes make: a retry copy, a released remainder, a dead letter, and
where each one's payload goes (payload.py); an explicit id's marker follows its message.

Apart from apply.py because that module owns the order of a whole ticket (copies, markers,
retiring the sources, deleting the ticket; bounded steps, tombstones), and this one only
what one ref writes: every key here is deterministic and every create If-None-Match, so two
appliers write each copy once (`_create`).
"""

from __future__ import annotations

import contextlib

from s3queue.errors import Conflict
from s3queue.protocol import deadletters, markers
from s3queue.protocol.keys import MsgKey, QueueKeys, ticket_name
from s3queue.protocol.payload import kept_name
from s3queue.protocol.records import Payload, Record, encode_records
from s3queue.protocol.tickets import Outcome, Ref, Ticket
from s3queue.storage.base import Storage, new_token


def apply_ref(
    storage: Storage,
    keys: QueueKeys,
    ticket: Ticket,
    origin: str,
    ref: Ref,
    records: list[Record],
    outcomes: list[Outcome],
) -> list[str]:
    """Carry out one ref's outcomes; what was released goes back as one copy. The ``blobs/``
    payloads of the messages that are finished, for the caller to delete."""
    kinds = {o.id: o for o in outcomes}
    source = keys.parse_msg(ref.key)
    released: list[Record] = []
    finished: list[str] = []
    for index, stored in enumerate(records):
        outcome = kinds.get(stored.id)
        delivered = stored.attempt + ref.counted(index)
        record = _placed(storage, keys, ref, stored, outcome)
        gone = outcome is not None and outcome.kind in ("done", "skip", "dead")
        if gone and stored.payload is not None and stored.payload.key.startswith(keys.blobs):
            finished.append(stored.payload.key)  # a dead letter has its own copy by now
        if outcome is None or outcome.kind == "release":
            again = record.redelivered or ticket.generation > 0
            released.append(_with(record, attempt=delivered, redelivered=again))
        else:
            _apply_outcome(storage, keys, ticket, ref, source, record, outcome, delivered)
    if released:
        _put_released(storage, keys, ticket, origin, source, released, ref.key)
    return finished


def _placed(
    storage: Storage, keys: QueueKeys, ref: Ref, record: Record, outcome: Outcome | None
) -> Record:
    """`record` with its payload where its next home needs it (payload.py)."""
    if outcome is not None and outcome.kind in ("done", "skip"):
        return record
    if outcome is not None and outcome.kind == "dead":
        return _dead_payload(storage, keys, ref, record, keys.dead(outcome.at_ms, record.id))
    return _keep_payload(storage, keys, ref, record)


def _dead_payload(
    storage: Storage, keys: QueueKeys, ref: Ref, record: Record, dead_key: str
) -> Record:
    """A dead letter's payload is copied server-side beside it, under ``dlq/``, so the DLQ's
    lifecycle rule expires the two together; the caller deletes a ``blobs/`` original once
    the dead letter exists."""
    payload = record.payload
    if payload is None:
        return record
    if payload.key == ref.key:  # a large inbox object: the version that was read
        version: str | None = payload.etag or ref.etag
    elif payload.key.startswith(keys.blobs):  # written once: any version is the one
        version = None
    else:
        return record
    kept = keys.dead_payload(dead_key)
    # Conflict: the source is gone, deleted by an earlier apply that made this same copy.
    with contextlib.suppress(Conflict):
        storage.copy(payload.key, kept, if_match=version, size=payload.size)
    return _with(record, payload=Payload(kept, payload.size).to_json())


def _keep_payload(storage: Storage, keys: QueueKeys, ref: Ref, record: Record) -> Record:
    """A large inbox object is its message's payload, and is retired with the ticket: a
    message that stays (retry, release) gets a server-side copy in ``blobs/`` first, and its
    record points there (payload.py); a dead letter's goes to ``dlq/`` (`_dead_payload`)."""
    payload = record.payload
    if payload is None or payload.key != ref.key:
        return record
    version = payload.etag or ref.etag
    kept = keys.blob(kept_name(record.id, version))
    # Conflict: the source is gone, retired by an earlier apply that made this same copy.
    with contextlib.suppress(Conflict):
        storage.copy(ref.key, kept, if_match=version, size=payload.size)
    return _with(record, payload=Payload(kept, payload.size).to_json())


def _apply_outcome(
    storage: Storage,
    keys: QueueKeys,
    ticket: Ticket,
    ref: Ref,
    source: MsgKey | None,
    record: Record,
    outcome: Outcome,
    delivered: int,
) -> None:
    """A handled record: a retry copy, a dead letter, and an explicit id's marker done."""
    attempt = outcome.attempt or delivered
    if outcome.kind == "retry":
        _put_retry(storage, keys, record, outcome, attempt, source, ticket, ref.key)
    elif outcome.kind == "dead":
        _put_dead(storage, keys, record, outcome, attempt, ref.key)
    if outcome.kind in ("done", "dead") and record.dedup:
        markers.mark_done(storage, keys, record.id, ref.key)


def _put_released(
    storage: Storage,
    keys: QueueKeys,
    ticket: Ticket,
    origin: str,
    source: MsgKey | None,
    released: list[Record],
    ref_key: str,
) -> None:
    """One copy of a ref's released records: a group's in its place in line, else at commit."""
    grouped = source is not None and source.group is not None
    sort_ms = source.sort_ms if source and grouped else ticket.committed_ms
    base = source.id if source else released[0].id
    key = MsgKey(
        sort_ms,
        base,
        source.group if source else None,
        source.not_before_ms if source else 0,
        len(released),
        origin,
    )
    _create(storage, keys.msg_key(key), encode_records(released, new_token()))
    for record in released:
        if record.dedup:
            markers.point_from(storage, keys, record.id, ref_key, keys.msg_key(key))


def _with(record: Record, **changes: object) -> Record:
    data = record.to_json()
    data.update({k: v for k, v in changes.items()})
    return Record.from_json(data)


def _put_retry(
    storage: Storage,
    keys: QueueKeys,
    record: Record,
    outcome: Outcome,
    attempt: int,
    source: MsgKey | None,
    ticket: Ticket,
    ref_key: str,
) -> None:
    error = deadletters.error_entry(attempt, outcome.at_ms, outcome.error, outcome.traceback)
    retry = _with(record, attempt=attempt + 1, errors=[*record.errors, error])
    due = outcome.at_ms + outcome.delay_ms
    origin = ticket_name(ticket.epoch, ticket.seq)
    if record.group is not None and source is not None:
        # FIFO: keep the group's place in line; the group waits until the retry is due.
        key = MsgKey(source.sort_ms, record.id, record.group, due, 1, origin)
    else:
        key = MsgKey(max(due, ticket.committed_ms), record.id, None, 0, 1, origin)
    _create(storage, keys.msg_key(key), encode_records([retry], new_token()))
    if record.dedup:
        # The marker follows the message from the handled record to its copy: a repeated
        # enqueue then finds the copy (its PUT a no-op) instead of putting the message again
        # at its first key, deleted once this copy was made (markers.point_from).
        markers.point_from(storage, keys, record.id, ref_key, keys.msg_key(key))


def _put_dead(
    storage: Storage,
    keys: QueueKeys,
    record: Record,
    outcome: Outcome,
    attempt: int,
    source_key: str,
) -> None:
    entry = deadletters.encode(
        record,
        queue=keys.queue,
        partition=keys.tenant,
        source=source_key,
        dead_ms=outcome.at_ms,
        attempt=attempt,
        error=outcome.error,
        token=new_token(),
        traceback=outcome.traceback,
    )
    _create(storage, keys.dead(outcome.at_ms, record.id), entry)


def _create(storage: Storage, key: str, body: bytes) -> None:
    # Conflict: an earlier apply of this same commit wrote it (keys are deterministic).
    with contextlib.suppress(Conflict):
        storage.put(key, body, if_none_match=True)

"""Applying a committed ticket's outcomes: idempotent, so anyone who finds it committed may.

Order per ticket: PUT every copy (retry copies, remainders, dead letters: copies.py), mark
explicit-id markers done, retire the source objects, then DELETE the ticket. A source is
retired only after its copies exist, and the ticket only after all of that. A large ticket
that takes a while goes in steps of `APPLY_STEP` refs, its progress recorded in the ticket
(`apply_ticket`).

Copies are created with If-None-Match on deterministic keys, so two appliers write each once.
A copy must also never be written *again* after it was consumed (handled and retired), or it
would run twice:

    committer  commit ....(paused)........................................ PUT copy (again!)
    helper              (ticket quiet) apply: PUT copy, retire source, DELETE ticket
    coordinator                                    dispatch copy -> handled -> retire copy

So a consumed copy is not deleted but overwritten by an empty *tombstone* (PUT If-Match): the
late PUT If-None-Match then fails. The coordinator skips tombstones and deletes them after
``CoordinatorSettings.tombstone_ttl``. Copies also carry their ticket as origin
(``~o<epoch>-<seq>``) and are not dispatched while it lives. Original messages are deleted
outright: nothing ever writes their keys again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from s3queue.errors import Conflict
from s3queue.protocol import markers
from s3queue.protocol.keys import QueueKeys, ticket_name
from s3queue.protocol.records import TOMBSTONE
from s3queue.protocol.tickets import Outcome, Ref, Ticket
from s3queue.storage.base import Storage, new_token
from s3queue.working.copies import apply_ref
from s3queue.working.load import Loaded

Loader = Callable[[Ref], Loaded | None]


APPLY_STEP = 100
"""Refs applied between two records of progress in a ticket too large for one step..."""
APPLY_RECORD_MS = 1000
"""...once the apply has run this long since its start or last record: an apply that only
deletes (every message done) takes a moment per step, and recording it would cost more than
redoing it (a CAS PUT per 100 refs made a ticket of 1,000 wait ~600 ms for its deletes in the
AWS simulation, issue 22)."""


def apply_ticket(
    storage: Storage,
    keys: QueueKeys,
    ticket: Ticket,
    etag: str,
    loader: Loader,
    *,
    out_of_time: Callable[[], bool] | None = None,
    before_delete: Callable[[], object] | None = None,
    now_ms: Callable[[], int],
) -> bool:
    """Carry out a committed ticket's outcomes, then delete it (`before_delete` is called just
    before: a chaining worker takes the ticket's successor then); False if `out_of_time` cut it
    short (what was done is recorded in the ticket: the next applier goes on from there).

    Ungrouped copies get a sort time no earlier than the commit, so they land ahead of the
    coordinator's cursor (within its straggler margin); a group's stay in its place in line and
    the coordinator rewinds to them when the ticket is gone.

    Bounded steps (issue 19.8). Refs are applied in order; every `APPLY_STEP` refs once
    `APPLY_RECORD_MS` went by on `now_ms` since the last record, and when `out_of_time`
    (asked before each ref but the first, so every invocation moves on) stops us, the step's
    sources are retired, then ``applied`` = how many refs are done is recorded by CAS on the
    ticket. So a ticket too large for one invocation's time is finished by successive ones,
    none redoing a recorded step, and an apply that goes fast records nothing: its sources go
    in one DeleteObjects per 1,000. Losing that CAS (another applier recorded or finished
    first) only stops us: it is idempotent.
    """
    key = keys.ticket(ticket.epoch, ticket.seq)
    step = _Step(storage, keys, ticket, loader)
    first, last = ticket.applied, len(ticket.refs)
    since = now_ms()
    for at in range(first, last):
        if at > first and out_of_time is not None and out_of_time():
            step.record(key, etag, at)
            return False
        step.add(ticket.refs[at])
        stepped = at + 1 - first >= APPLY_STEP * (1 + step.recorded) and at + 1 < last
        if stepped and now_ms() - since >= APPLY_RECORD_MS:
            etag = step.record(key, etag, at + 1)
            if not etag:
                return False
            since = now_ms()
    step.retire()
    if before_delete is not None:
        before_delete()
    # Conflict: nobody writes a committed ticket, so only another applier deleting it first.
    with contextlib.suppress(Conflict):
        storage.delete(key, if_match=etag)
    return True


class _Step:
    """Refs applied since the last record of progress: their sources wait to be retired."""

    def __init__(self, storage: Storage, keys: QueueKeys, ticket: Ticket, loader: Loader) -> None:
        self.storage, self.keys, self.ticket, self.loader = storage, keys, ticket, loader
        self.origin = ticket_name(ticket.epoch, ticket.seq)
        self.by_ref: dict[str, list[Outcome]] = {}
        for outcome in ticket.outcomes:
            self.by_ref.setdefault(outcome.ref, []).append(outcome)
        self.sources: list[str] = []
        self.blobs: list[str] = []
        self.recorded = 0

    def add(self, ref: Ref) -> None:
        """Write `ref`'s copies (its source is retired with the step)."""
        outcomes = self.by_ref.get(ref.key, [])
        owning = self.ticket.folder(self.keys)  # copies stay in the message's partition
        if not outcomes or _untouched(owning, self.ticket, ref, outcomes):
            return
        loaded = self.loader(ref)
        if loaded is None:  # already applied by someone else, or purged before it was
            self._mark_done(owning, ref, outcomes)
            return
        records = loaded.records
        self.blobs += apply_ref(
            self.storage, owning, self.ticket, self.origin, ref, records, outcomes
        )
        self.sources.append(ref.key)

    def _mark_done(self, owning: QueueKeys, ref: Ref, outcomes: list[Outcome]) -> None:
        """An explicit id handled here ends done even if its object is gone: an operator's
        purge between the commit and an apply that failed midway took it, and the marker
        still names it, so a repeated enqueue would put it there again and run it twice (a
        chaos soak, seed 1827). A GET each; after another applier it finds them done."""
        for outcome in outcomes:
            if outcome.dedup and outcome.kind in ("done", "dead"):
                markers.mark_done(self.storage, owning, outcome.id, ref.key)

    def retire(self) -> None:
        """Delete the step's finished payloads, then retire its sources (after their copies)."""
        if self.blobs:  # payloads of finished messages, before their records (payload.py)
            self.storage.delete_many(self.blobs)
        _retire(self.storage, self.keys, self.ticket, self.sources)
        self.sources, self.blobs = [], []

    def record(self, key: str, etag: str, done: int) -> str:
        """Retire the step, then record the first `done` refs as applied; the ticket's new
        ETag, or "" if another applier changed or deleted it first."""
        self.retire()
        self.recorded += 1
        self.ticket.applied = done
        token = new_token()
        try:
            return self.storage.put(key, self.ticket.encode(token), if_match=etag, token=token)
        except Conflict:
            return ""


def _untouched(keys: QueueKeys, ticket: Ticket, ref: Ref, outcomes: list[Outcome]) -> bool:
    """A grouped message released as it was stays where it is, keeping its place in line
    (unless an expiry counted a delivery or may have run it: a copy records that)."""
    if ref.redeliveries or ref.expiries or ticket.generation > 0:
        return False
    if any(o.kind != "release" for o in outcomes):
        return False
    source = keys.parse_msg(ref.key)
    return source is not None and source.group is not None


def _retire(storage: Storage, keys: QueueKeys, ticket: Ticket, sources: list[str]) -> None:
    """Delete original messages and inbox objects if unchanged (the listed ETag), tombstone
    copies."""
    etags = {r.key: r.etag for r in ticket.refs}
    originals: list[str] = []
    for key in sources:
        owning = ticket.folder(keys)
        parsed = owning.parse_msg(key)
        if parsed is not None and parsed.origin is not None:
            # Conflict: already a tombstone (another applier), or long gone.
            with contextlib.suppress(Conflict):
                storage.put(key, TOMBSTONE, if_match=etags[key])
        elif key.startswith(owning.msg):
            originals.append(key)
        else:
            # Conflict: the other service put a new object under the same name, a new message.
            with contextlib.suppress(Conflict):
                storage.delete(key, if_match=etags[key])
    if originals:
        # If-Match: a key another service PUT again since it was listed holds a new message.
        storage.delete_many(originals, if_match={key: etags[key] for key in originals})

"""`OperatorCalls`: the operator's calls on one queue (stats, pause and resume, dead letters,
redrive, peek, cancel, purge, orphans, delete), as methods of `s3queue.Queue`.

Apart from producing/producer.py because a producer never needs them: that module is the
enqueue path and its arguments, and each call here is one line over this folder's modules
(`admin`, `messages`, `purging`, `orphans`) and the queue's controls and holds.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta

from s3queue.common.clock import Clock
from s3queue.errors import InvalidArgument
from s3queue.operations import admin, messages, purging
from s3queue.operations.messages import WaitingMessage
from s3queue.operations.orphans import Orphans, collect_orphans
from s3queue.protocol.controls import read_controls, set_paused
from s3queue.protocol.deadletters import DeadLetter
from s3queue.protocol.holds import HELD_REASONS, read_holds
from s3queue.protocol.keys import QueueKeys, check_message_id
from s3queue.storage.base import Storage


class OperatorCalls:
    """The operator's side of `Queue` (a base class of it): what it needs of the queue."""

    storage: Storage
    keys: QueueKeys
    clock: Clock
    _tickets: admin.TicketCache
    """What `stats` read of each ticket, with its ETag: a later call GETs only the changed ones."""

    def stats(self) -> admin.QueueStats:
        """Counts of pending, delayed, in-flight and dead messages, and the oldest's age.

        Costs one LIST per 1,000 keys of the queue, and one GET per ticket that changed since
        this object's previous call (all of them the first time): poll one `Queue`, not new ones.
        ``paused`` (one GET) and ``held`` (one GET): ready messages dispatch holds back, by why:
        ``paused`` (all pending), and what the leader's limits held at its last tick
        (``rate_limit``, ``partition_rate_limit``, ``partition_concurrency``; `protocol.holds`).
        """
        now = self.clock.now_ms()
        counts = admin.stats(self.storage, self.keys, now, self._tickets)
        paused = self.paused()
        limited = read_holds(self.storage, self.keys.holds, now)
        held = {
            **{reason: limited.get(reason, 0) for reason in HELD_REASONS},
            "paused": counts["pending"] if paused else 0,
        }
        return admin.QueueStats(**counts, paused=paused, held=held)

    def pause(self) -> None:
        """Dispatch nothing new until `resume`: enqueues are still accepted and tickets in flight
        finish. Stored in the bucket (``<queue>/controls``), so the leading coordinator, on
        Lambda or in any local process, honours it at its next tick."""
        set_paused(self.storage, self.keys.controls, True, self.clock.now_ms())

    def resume(self) -> None:
        """Undo `pause`: the next tick dispatches again (a deployment's ``paused`` setting
        still holds the queue, and is not seen here)."""
        set_paused(self.storage, self.keys.controls, False, self.clock.now_ms())

    def paused(self) -> bool:
        """Is the queue paused by `pause`? One GET."""
        return read_controls(self.storage, self.keys.controls)[0].paused

    def dead_letters(
        self, limit: int | None = 100, *, after: str | None = None
    ) -> list[DeadLetter]:
        """At most `limit` (None: all) DLQ entries, oldest first, each with its error history.

        The next page starts ``after=`` the last entry's ``key``; the schema is in
        `s3queue.protocol.deadletters`.
        """
        return admin.dead_letters(self.storage, self.keys, limit, after)

    def dead_letter(self, id: str) -> DeadLetter | None:
        """The dead letter of message `id` (its latest, if it died more than once), or None."""
        found = messages.dead_letters_of(self.storage, self.keys, check_message_id(id))
        return found[-1] if found else None

    def redrive(self, *, ids: Collection[str] | None = None) -> int:
        """Move every DLQ entry (of `ids` only, if given) back to the queue as a fresh
        message; how many moved."""
        wanted = _ids(ids)
        return admin.redrive(self.storage, self.keys, self.clock.now_ms(), wanted)

    def delete_dead(self, *, ids: Collection[str] | None = None) -> int:
        """Delete every dead letter (of `ids` only, if given) and its kept payload; how many."""
        return messages.delete_dead(self.storage, self.keys, _ids(ids))

    def peek(self, n: int = 10) -> list[WaitingMessage]:
        """The first `n` messages waiting in the queue (pending, delayed or in flight), bodies
        and attributes included, without taking them (`s3queue.operations.messages`)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgument(f"n must be a whole number >= 0, got {n!r}")
        return messages.peek(self.storage, self.keys, self.clock.now_ms(), n)

    def cancel(self, id: str) -> bool:
        """Cancel the pending or delayed message enqueued with ``id=``: it never runs. True if
        this call cancelled it, False if it already was; `AlreadyDispatched` if a worker
        started it first (or it was handled), `MessageNotFound` if the queue has no such id."""
        return messages.cancel(self.storage, self.keys, check_message_id(id))

    def purge(self, *, include_dlq: bool = False) -> int:
        """Delete every pending message (and the DLQ if asked); how many messages went."""
        return purging.purge(self.storage, self.keys, include_dlq=include_dlq)

    def collect_orphans(
        self, *, grace: timedelta = timedelta(days=7), dry_run: bool = False
    ) -> Orphans:
        """Delete the stored payloads older than `grace` that no record refers to (a producer
        died between its upload and its record); a scan of the queue's records (`orphans`)."""
        grace_ms = int(grace.total_seconds() * 1000)
        now = self.clock.now_ms()
        return collect_orphans(self.storage, self.keys, now, grace_ms=grace_ms, dry_run=dry_run)

    def delete(self) -> int:
        """Delete the queue: every object under its prefix."""
        return admin.delete(self.storage, self.keys)


def _ids(ids: Collection[str] | None) -> frozenset[str] | None:
    """Message ids given to an operator's call, checked; None stays None (every message)."""
    if ids is None:
        return None
    if isinstance(ids, str):
        raise InvalidArgument(f"ids must be a collection of message ids, not a string: {ids!r}")
    return frozenset(check_message_id(i) for i in ids)

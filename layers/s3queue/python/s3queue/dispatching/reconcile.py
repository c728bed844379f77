"""The leader's known tickets, kept in step with the tickets listed each tick.

Apart from dispatch (coordinator.py) because it answers another question: not "what goes out
next" but "what became of what went out". A ticket of a later epoch makes the leader stand
down; a taken-over epoch's highest ticket is sealed. Each listed ticket is learnt (one GET,
the first time or after it changed and went quiet), dropped if fenced below its epoch's seal,
re-invoked if nobody picked it up, or reaped if its claim expired; a known ticket no longer
listed is forgotten (its groups' next messages are the caller's to rewind to).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from s3queue.common.clock import Clock, ms
from s3queue.common.concurrency import RunAll, settled
from s3queue.common.events import Emitter
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.errors import Conflict, MalformedMessage, StorageError
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.lease import LeaderLease
from s3queue.protocol.tickets import Invocation, Ticket
from s3queue.storage.base import Entry, Object, Storage, new_token, written_ago

log = logging.getLogger(__name__)

Invoker = Callable[[Invocation], None]
"""Starts a worker on a ticket (Lambda ``Event`` invoke, or a local pool)."""
Send = Callable[[Callable[[], None]], object]
"""Runs an invoke elsewhere (invoke.py, `Background`) and returns at once."""


@dataclass(slots=True)
class Known:
    """A live ticket as the leader last saw it."""

    ticket: Ticket
    etag: str
    invoked_ms: int
    modified_ms: int = 0
    """This version's ``Last-Modified`` (S3's time of its write) ..."""
    served_ms: int = 0
    """... and S3's time in the answer that last showed it (its ``Date``)."""
    parked: bool = False
    """Published behind a live ticket (`Ticket.after`) and not invoked: its predecessor's
    worker takes it next, or the leader invokes it once the predecessor is gone."""
    started_ms: int = 0
    """When it could start: its creation, or for a parked one when it left the park (the
    pace counts a ticket's life from then, not its wait behind another)."""
    stalls: int = 0
    """Times invoked again while pending: sent with each invoke (`Invocation.stalls`)."""

    def __post_init__(self) -> None:
        ticket = self.ticket
        if not self.started_ms:
            self.started_ms = ticket.created_ms
        if ticket.after is not None and ticket.state == "pending" and not ticket.generation:
            self.parked = True


@dataclass(slots=True)
class Reconciled:
    """What a tick's reconcile found."""

    reaped: int
    """Expired claims put back as a new generation."""
    finished: dict[str, Known]
    """Tickets known until now and no longer listed: applied (or deleted), by key. Their
    groups' next messages are for the caller to rewind to (`Cursors.finished`), once no
    read of this tick's is under way (coordinator.py)."""
    unknown: int = 0
    """Listed tickets (not fenced) this leader did not know before: learnt now."""


class Reconciler:
    """Judges the listed tickets for one queue's leader: stand down, seal, learn, fence,
    re-invoke, reap, forget."""

    def __init__(
        self,
        storage: Storage,
        keys: QueueKeys,
        settings: QueueSettings,
        config: CoordinatorSettings,
        *,
        lease: LeaderLease,
        clock: Clock,
        invoker: Invoker,
        emit: Emitter,
        in_process: bool = False,
        send: Send | None = None,
    ) -> None:
        self.storage, self.keys, self.settings, self.config = storage, keys, settings, config
        self.lease, self.clock, self.invoker, self.emit = lease, clock, invoker, emit
        self.in_process = in_process
        """The invoker starts workers in this process: hand them the ticket, not its JSON."""
        self.send = send
        """Where invokes run (invoke.py, `Background`): None, in the tick itself."""
        self._listed: set[str] = set()
        """The keys of the tick's LIST of tickets."""

    def outranked(self, listed: list[Entry]) -> bool:
        """A ticket of a later epoch: another leader took over while we were paused (our lease
        renewal was not due yet, so we had not noticed). Stand down without touching anything:
        our lease document is stale, and judging its tickets by it would be wrong."""
        epoch = self.lease.epoch
        newer = [p for e in listed if (p := self.keys.parse_ticket(e.key)) and p[0] > epoch]
        if newer:
            self.lease.abdicate()
            self.emit("deposed", self.clock.now_ms(), epoch=epoch, newer=newer[0][0])
        return bool(newer)

    def seal(self, listed: list[Entry]) -> bool:
        """Fix the highest valid seq of every taken-over epoch, and forget empty epochs."""
        doc = self.lease.doc
        assert doc is not None
        seen: dict[int, set[int]] = {}
        for entry in listed:
            parsed = self.keys.parse_ticket(entry.key)
            if parsed is not None:
                seen.setdefault(parsed[0], set()).add(parsed[1])
        highest = {epoch: max(seqs) for epoch, seqs in seen.items()}
        seals = {
            epoch: highest[epoch] if seal < 0 else seal
            for epoch, seal in doc.seals.items()
            if epoch in highest
        }
        holes = {e: h for e, h in doc.holes.items() if e in seals}
        for epoch, seal in doc.seals.items():
            if seal >= 0 or epoch not in seals:
                continue
            # Never to run (lease.py): unseen seqs of its last block at or below the seal, and
            # its leader's unsettled doubts that did not land (a seen one may be held: valid).
            start, end = doc.blocks.get(epoch, (0, 0))
            unseen = {q for q in range(start, min(end, seals[epoch] + 1)) if q not in seen[epoch]}
            unseen |= {q for q in doc.doubts.get(epoch, ()) if q not in seen[epoch]}
            if unseen:
                holes[epoch] = tuple(sorted(unseen.union(holes.get(epoch, ()))))
        sealed = self.lease.update_seals(seals, holes)
        self.emit("seal", self.clock.now_ms(), epoch=doc.epoch, seals=seals, holes=holes, ok=sealed)
        return sealed

    def reconcile(
        self, listed: list[Entry], known: dict[str, Known], run_all: RunAll | None = None
    ) -> Reconciled:
        """Learn unknown tickets, drop fenced ones, forget finished ones, reap expired ones:
        how many were reaped, and the tickets that finished (no longer listed). With
        `run_all`, the unknown tickets' GETs go out at once (a new leader's first tick learns
        every live ticket of its predecessor: one GET's time, not one per ticket)."""
        doc = self.lease.doc
        assert doc is not None
        now, reaped = self.clock.now_ms(), 0
        seen: set[str] = set()
        self._listed = {entry.key for entry in listed}
        accepted: list[Entry] = []
        for entry in listed:
            parsed = self.keys.parse_ticket(entry.key)
            if parsed is None:
                continue
            if doc.accepts(*parsed) is False:  # below its epoch's seal: no worker ever runs it
                self._drop_fenced(entry)
                continue
            accepted.append(entry)
        unknown = [e.key for e in accepted if e.key not in known]
        fetched = self._fetch(unknown, run_all)
        for entry in accepted:
            seen.add(entry.key)
            if entry.key in fetched:
                found = self._take(known, entry, fetched[entry.key], now)
            else:
                found = known.get(entry.key) or self.learn(known, entry, now)
            if found is not None:
                reaped += self._check(known, entry, found, now)
        finished = {key: known.pop(key) for key in [k for k in known if k not in seen]}
        self._drop_pointers(known, finished)
        return Reconciled(reaped, finished, len(unknown))

    def _drop_fenced(self, entry: Entry) -> None:
        # No worker ever accepts it (LeaseDoc.accepts is stable while the ticket exists).
        try:
            self.storage.delete(entry.key, if_match=entry.etag)
        except Conflict:
            return
        self.emit("fenced", self.clock.now_ms(), ticket=entry.key)

    def _fetch(self, keys: list[str], run_all: RunAll | None) -> dict[str, Object | None]:
        """The tickets of `keys`, GET at once with `run_all` (none fetched with one or none:
        `learn` GETs it itself). A failed GET fails the tick, as `learn`'s would."""
        if run_all is None or len(keys) < 2:
            return {}
        objects = settled(run_all, [partial(self.storage.get, key) for key in keys])
        return dict(zip(keys, objects, strict=True))

    def learn(
        self, known: dict[str, Known], entry: Entry, now: int, *, invoked_ms: int | None = None
    ) -> Known | None:
        """GET a listed ticket into `known`; None if it is gone or unreadable."""
        return self._take(known, entry, self.storage.get(entry.key), now, invoked_ms)

    def _take(
        self,
        known: dict[str, Known],
        entry: Entry,
        obj: Object | None,
        now: int,
        invoked_ms: int | None = None,
    ) -> Known | None:
        """A listed ticket's GET answer (`obj`) into `known`; None if it is gone or unreadable."""
        if obj is None:
            return None
        try:
            ticket = Ticket.decode(obj.body)
        except MalformedMessage:
            self.emit("corrupt_ticket", now, ticket=entry.key)
            return None
        invoked = invoked_ms
        if invoked is None:
            # Not invoked by us (a predecessor's, or ours of unknown fate): as if invoked at
            # its last write, so that one left pending or committed by someone gone is invoked
            # again `dispatch_timeout` after that, even by leaders that each lead for less.
            invoked = now - max(0, written_ago(obj.last_modified_ms, obj.served_ms, now))
        found = Known(ticket, obj.etag, invoked, obj.last_modified_ms, obj.served_ms)
        known[entry.key] = found
        return found

    def _check(self, known: dict[str, Known], entry: Entry, found: Known, now: int) -> int:
        """Re-invoke a ticket nobody works on; reap one whose claim expired. 1 if reaped."""
        if found.parked and self._parked(known, entry, found, now):
            return 0
        timeout = ms(self.config.dispatch_timeout)
        if entry.etag == found.etag:
            found.modified_ms, found.served_ms = entry.last_modified_ms, entry.served_ms
        else:
            # Changed since we read it (claim, heartbeat, commit): read it again only once it
            # has been quiet for a while, so a healthy ticket costs no GET at all.
            quiet = written_ago(entry.last_modified_ms, entry.served_ms, now)
            if quiet < min(ms(self.settings.visibility_timeout), timeout):
                return 0
            fresh = self.learn(known, entry, now, invoked_ms=found.invoked_ms)
            if fresh is None:
                return 0
            fresh.started_ms = max(fresh.started_ms, found.started_ms)
            found = fresh
        ticket = found.ticket
        if ticket.state == "claimed":
            ago = written_ago(found.modified_ms, found.served_ms, now)
            if ticket.claim_expired(ago, now, ms(self.config.skew_tolerance)):
                return self._reap(entry.key, found, now)
            return 0
        if now - found.invoked_ms >= timeout:
            if ticket.state == "pending":
                found.stalls += 1
            self.invoke(entry.key, found, now, reason=f"{ticket.state} for {timeout} ms")
        return 0

    def _parked(self, known: dict[str, Known], entry: Entry, found: Known, now: int) -> bool:
        """Whether a parked ticket stays parked: its predecessor still listed, a first
        delivery (a reaped one is redelivered from the start, and may not chain). Else it
        leaves the park: claimed by the predecessor's worker (its ETag changed), or invoked
        now (that worker claims a successor before its own ticket is deleted, so one still
        pending behind a ticket gone was not taken)."""
        after = found.ticket.after
        assert after is not None
        before = known.get(after)
        listed = after in self._listed and before is not None and not before.ticket.generation
        if entry.etag == found.etag and listed:
            return True
        found.parked, found.started_ms = False, now
        if entry.etag != found.etag:
            return False
        self.invoke(entry.key, found, now, reason="unparked")
        return True

    def _drop_pointers(self, known: dict[str, Known], finished: dict[str, Known]) -> None:
        """Delete the pointers to the successors of the tickets that finished: taken or
        invoked, they serve nobody now (in the background with `send`)."""
        for found in [*known.values(), *finished.values()]:
            after = found.ticket.after
            if after is not None and after in finished:
                self.background(partial(self._drop_pointer, after))

    def _drop_pointer(self, after: str) -> None:
        try:
            self.storage.delete(self.keys.chain(after))
        except StorageError as exc:  # a stray pointer names a ticket no longer pending
            log.warning("pointer of %s not deleted: %s", after, exc)

    def _reap(self, key: str, found: Known, now: int) -> int:
        """Expired claim: CAS the ticket to a new generation, then invoke a worker again."""
        # Work on a copy: if the PUT fails, memory must still hold the ticket as it is in S3.
        ticket, owner = found.ticket.copy(), found.ticket.owner
        ticket.expire(now)
        token = new_token()
        try:
            etag = self.storage.put(key, ticket.encode(token), if_match=found.etag, token=token)
        except Conflict:
            # The holder heartbeat or committed first: its lease is valid again. The ticket
            # stays known (its messages in flight); the next quiet spell reads it afresh.
            self.emit("lost_race", now, ticket=key, op="reap")
            found.etag = ""
            return 0
        found.ticket, found.etag = ticket, etag
        self.emit("expire", now, ticket=key, generation=ticket.generation, owner=owner)
        self.invoke(key, found, now, reason="redeliver")
        return 1

    def invoke(self, key: str, found: Known, now: int, *, reason: str) -> None:
        """Start a worker on the ticket (on `send`'s threads if set: the tick does not wait for
        the answer); a failed invoke is retried after dispatch_timeout."""
        found.invoked_ms = now
        invocation = found.ticket.invocation(key, found.etag, held=self.in_process)
        if found.stalls:
            invocation["stalls"] = found.stalls
        self.background(partial(self._invoke, key, invocation, now, reason))

    def background(self, job: Callable[[], None]) -> None:
        """Run `job` on `send`'s threads if set (the tick does not wait for it), else now."""
        if self.send is not None:
            self.send(job)
        else:
            job()

    def _invoke(self, key: str, invocation: Invocation, now: int, reason: str) -> None:
        try:
            self.invoker(invocation)
        except Exception as exc:  # noqa: BLE001 - a lost invoke is retried after dispatch_timeout
            self.emit("invoke_failed", now, ticket=key, error=repr(exc))
            return
        if reason != "new":
            self.emit("reinvoke", now, ticket=key, reason=reason)

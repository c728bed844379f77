"""Publishing tickets: create each one (If-None-Match) and start a worker on it.

One ticket at a time, the lease checked before each; or a block of seqs reserved in the lease
first (one CAS), then every ticket of the block PUT and invoked at once. Why a reserved block
fences a stale leader: `s3queue.protocol.lease`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from s3queue.common.concurrency import RunAll, settled
from s3queue.common.events import Emitter
from s3queue.contract.settings import CoordinatorSettings
from s3queue.dispatching import scan
from s3queue.dispatching.reconcile import Known, Reconciler
from s3queue.dispatching.view import Memory, Part, interleaved, running
from s3queue.errors import Conflict, Consumed, StorageError
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.lease import LeaderLease
from s3queue.protocol.permits import Permit
from s3queue.protocol.tickets import Ref, Ticket
from s3queue.storage.base import Head, Storage, new_token

BLOCK_TICKETS_PER_THREAD = 4
"""A reserved block has room for this many ticks' worth of concurrent publications."""


@dataclass(slots=True)
class Publisher:
    """Publishes a leader's tickets into its `Memory` (seqs, reserved block, known tickets)."""

    storage: Storage
    keys: QueueKeys
    config: CoordinatorSettings
    lease: LeaderLease
    reconciler: Reconciler
    run_all: RunAll
    emit: Emitter
    doubting: threading.Lock = field(default_factory=threading.Lock)

    def publish_all(
        self,
        memory: Memory,
        batches: list[list[scan.Candidate]],
        now: int,
        permits: list[Permit | None] | None = None,
        afters: list[str | None] | None = None,
        chain: bool = False,
    ) -> list[int]:
        """Each batch's message count once published (0: not published).

        One batch, or `publish_concurrency` 1: one ticket after another, the lease checked
        before each. Several: their seqs must lie in a block reserved in the lease (one CAS,
        `LeaderLease.reserve`, for the next `BLOCK_TICKETS_PER_THREAD` x `publish_concurrency`
        seqs), then all are PUT and invoked at once (`run_all`). A tick returns only once every
        PUT has, so the next block is reserved after every PUT of this one returned (lease.py
        says why that fences). The first error is raised once every publication has returned;
        what was published is known. `permits`: each batch's, for a rate-limited queue;
        `afters`: the live ticket each batch is parked behind (None: invoked now); `chain`:
        mark them for their workers to look for a successor (`Ticket.chain`).
        """
        given: list[Permit | None] = permits if permits is not None else [None] * len(batches)
        behind: list[str | None] = afters if afters is not None else [None] * len(batches)
        if len(batches) < 2 or self.config.publish_concurrency < 2:
            return [
                self._publish(
                    memory, batch, now, _next_seq(memory), permit=permit, after=after, chain=chain
                )
                for batch, permit, after in zip(batches, given, behind, strict=True)
            ]
        start, end = memory.next_seq, memory.next_seq + len(batches)
        if not self.lease.ensure() or self.lease.epoch != memory.epoch:
            return [0] * len(batches)
        if end > memory.reserved:  # a block lasts several ticks: one lease PUT per block
            block = max(len(batches), block_size(self.config))
            if not self.lease.reserve(start, start + block):
                return [0] * len(batches)
            memory.reserved = start + block
        memory.next_seq = end
        jobs: list[Callable[[], int]] = [
            partial(
                self._publish,
                memory,
                batch,
                now,
                start + i,
                checked=True,
                permit=permit,
                after=after,
                chain=chain,
            )
            for i, (batch, permit, after) in enumerate(zip(batches, given, behind, strict=True))
        ]
        return settled(self.run_all, jobs)

    def publish_parts(
        self,
        memory: Memory,
        parts: list[Part],
        now: int,
        spots: list[str],
        *,
        chain: bool,
        slots: int,
    ) -> int:
        """Publish the parts' batches (a partition at a time in turn), each parked behind one
        of `spots` if any (every one of the `slots` is taken); move each partition's cursor on
        if all its batches went out, else back to where it was before this tick. `chain`: this
        leader parks tickets (coordinator.py)."""
        order = interleaved([part.plan.batches for part in parts])
        batches = [batch for _, batch in order]
        limits, permits = memory.limits, None
        if limits is not None and limits.permit(0) is not None:
            permits = [limits.permit(sum(c.count for c in b)) for b in batches]
        afters: list[str | None] = [*spots[: len(batches)]] if spots else [None] * len(batches)
        # Tickets that take every slot left: a parking leader marks them for a successor.
        full = chain and running(memory.known) + len(batches) >= slots
        published = self.publish_all(memory, batches, now, permits, afters, full)
        done: dict[int, list[int]] = {i: [] for i in range(len(parts))}
        for (i, _), count in zip(order, published, strict=True):
            done[i].append(count)
        for i, part in enumerate(parts):
            if all(done[i]):
                part.cursor.advance(part.plan, part.stopped, now)
            else:  # a batch did not go out: read its messages again, in their place in line
                part.cursor.restore(part.saved)
        return sum(sum(published) for published in done.values())

    def _publish(
        self,
        memory: Memory,
        batch: list[scan.Candidate],
        now: int,
        seq: int,
        *,
        checked: bool = False,
        permit: Permit | None = None,
        after: str | None = None,
        chain: bool = False,
    ) -> int:
        """Create ticket `seq` (If-None-Match) and start a worker on it, or park it behind the
        live ticket `after` (`_park`); its message count. Unless `checked` (its block
        reserved), first make sure we still lead."""
        if not checked and (not self.lease.ensure() or self.lease.epoch != memory.epoch):
            return 0
        key = self.keys.ticket(memory.epoch, seq)
        ticket = Ticket(
            self.keys.queue,
            memory.epoch,
            seq,
            [Ref(c.key, c.etag, c.size) for c in batch],
            created_ms=now,
            permit=permit,
            partition=self.keys.lane_of(batch[0].key),  # a batch is one folder's
            chain=chain,
            after=after,
        )
        token = new_token()
        count = sum(c.count for c in batch)
        etag: str | None
        try:
            # Never resent: a second request for one key could land after the first was run and
            # deleted, and create it again (lease.py, "Doubts").
            etag = self.storage.put(
                key, ticket.encode(token), if_none_match=True, token=token, resend_if=_never
            )
        except Conflict:
            self.emit("lost_race", now, ticket=key, op="publish")
            return 0
        except (Consumed, StorageError) as exc:
            landed = self._doubt(key, seq, exc, now)
            if landed is None:
                return 0
            # Ours as created only with our token: else it was written since (a puller claimed
            # it before we looked), and our pending copy is stale.
            etag = landed.etag if landed.token == token else None
        self.emit("dispatch", now, ticket=key, refs=[c.key for c in batch], messages=count)
        if etag is None:
            # A worker invoked with the stale copy and this ETag would claim it over its
            # holder. It is in flight; the next tick learns it (LIST, one GET).
            return count
        known = Known(ticket, etag, invoked_ms=now)
        memory.known[key] = known
        if after is None:
            self.reconciler.invoke(key, known, now, reason="new")
        else:
            self._park(key, known, after, now)
        return count

    def _park(self, key: str, known: Known, after: str, now: int) -> None:
        """Leave the invocation of a ticket parked behind `after` where that ticket's worker
        looks once it has committed (`QueueKeys.chain`). A pointer that fails, or lands after
        the worker looked, costs only time: the leader invokes the ticket once `after` is
        gone (reconcile.py)."""
        invocation = known.ticket.invocation(key, known.etag)
        body = json.dumps(invocation, separators=(",", ":")).encode()
        self.emit("park", now, ticket=key, after=after)
        # as an invoke: the tick does not wait for it
        self.reconciler.background(partial(self._point, self.keys.chain(after), body, key, now))

    def _point(self, pointer: str, body: bytes, key: str, now: int) -> None:
        try:
            self.storage.put(pointer, body)
        except StorageError as exc:
            self.emit("invoke_failed", now, ticket=key, error=repr(exc))

    def _doubt(self, key: str, seq: int, exc: Exception, now: int) -> Head | None:
        """A ticket whose create failed or lost its answer: it may have landed, may land later
        (a zombie request) or never. Doubt it, look, settle it (lease.py, "Doubts"): its HEAD
        if it landed (it runs; by the token, ours as created or written since), None if not
        (a hole: its messages may go out again).

        If the lease cannot be written meanwhile, we stop leading without a word (`abdicate`):
        our messages would otherwise go out again while the ticket may still land. Whoever
        takes over next (we, once the lease lapses) settles the doubt when sealing, or finds
        the seq in our last block or above the seal."""
        self.emit("doubt", now, ticket=key, error=str(exc))
        with self.doubting:  # one CAS chain: concurrent publications' doubts take turns
            try:
                if not self.lease.doubt(seq):
                    return None  # deposed: the new leader judges the ticket when it seals
                head = self.storage.head(key)
                if not self.lease.settle(seq, landed=head is not None):
                    return None
            except StorageError:
                self.lease.abdicate()
                raise
        self.emit("settled", now, ticket=key, landed=head is not None)
        return head


def block_size(config: CoordinatorSettings) -> int:
    """Seqs a reserved block holds: `BLOCK_TICKETS_PER_THREAD` ticks' worth of concurrent
    publications (0: one ticket at a time, none reserved). A takeover reserves the first."""
    concurrency = config.publish_concurrency
    return BLOCK_TICKETS_PER_THREAD * concurrency if concurrency >= 2 else 0


def _never() -> bool:
    return False


def _next_seq(memory: Memory) -> int:
    seq = memory.next_seq
    memory.next_seq += 1
    return seq

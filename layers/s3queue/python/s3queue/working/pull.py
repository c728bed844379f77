"""`Puller`: how a worker that was not invoked finds work (a fleet of worker processes).

The coordinator's invoke (``lambda:Invoke``, or the local pool) is one way a published ticket
reaches a worker. A process on any host can also list a queue's tickets and claim a pending one
with the same CAS claim (`Worker.process`), so the exactly-once claim, fencing and every other
guarantee are those of an invoked worker: two claimers of one ticket race on its ETag and one
wins; a ticket of a fenced epoch is rejected by the lease check as always.

Fair across partitions. Pending tickets are a queue in front of the workers: taken oldest
first, a partition's backlog of tickets would again stand in front of another partition's one
ticket, however fairly the coordinator shared them out. So a poll takes the pending tickets a
partition at a time in turn (a ticket holds one partition's messages), starting after the
partition it took from last, and oldest first within each partition (nearly, while contested:
below).

Cost: one LIST of ``tickets/`` per poll, and one GET per ticket that is new, or changed since
the last poll when a change could make it claimable. A ticket's ETag changes only when it is
written (claim, heartbeat, commit, reap), so a known ticket costs nothing between polls; a
pending one that changed was claimed (only a claim writes a pending ticket): no GET; a claimed
one read is not read again before its lease may have run out (only a reap makes it pending
again), a committed one never. So a ticket other processes work costs each puller one GET,
where it cost one per write. The caller paces the polls (and backs off when they find
nothing).

What the puller's own process knows costs nothing. A ticket this process is working (`poll`'s
`busy`) is neither read nor offered, however often its ETag changes (claim, heartbeats,
commit): it is gone once applied, and read again only if it is still there afterwards. A ticket
its own coordinator published and could not hand to a free thread is `learn`t from that
payload, no GET. `take` hands out, without any request, the pending tickets known to be pending
for less than `TRUST_MS` (learnt, or seen unchanged by the last LIST): past that, another
process may have claimed them, and only a poll's LIST that still shows them unchanged renews
them (`stale` says when one is due).

Contested: few claims lost to other processes. A lost claim is five requests wasted (the lease
and first-object GETs, the PUT, the HEAD that settles its conflict, a GET of the ticket), and
an invoked payload's window of reads besides. Three processes on one queue lost more claims
than they won (issue 22, item 4): nearly all were tickets `take` handed out from a listing up
to a second old, oldest first, the same ticket in every process. So once a poll sees a ticket
it knew pending claimed by another process (its ETag changed; this process lists none of its
own), or a worker of this process loses one (`lost`: the first sign a leader's process gets,
which takes its coordinator's tickets from memory and rarely lists), the queue is contested
for `CONTESTED_MS`: `take` trusts what it knows for `TRUST_CONTESTED_MS` only, so a freed
thread's ticket is confirmed by a LIST (one request for every ticket, against five for a lost
race); each puller takes a partition's tickets in an order of its own (`SPREAD`: none is passed
by that many newer ones), so rivals listing the same tickets start on different ones; and what
it hands out reads nothing ahead of the claim (``pulled``, start.py). A process alone on its
queue never sees a rival's claim: its cost and its order are as before.

The tickets one poll must read are read at once (`run_all`: the local pull loop's threads):
a poll that finds 30 new tickets of a busy queue waited 30 GETs one after another (600 ms at
20 ms a GET), and by then the leader's own threads had claimed most of them.

A ticket offered but not claimed (another won it, or it is fenced, or its epoch's seal is
pending) is not offered again by the same puller while its ETag is unchanged, for `RETRY_MS`:
a fenced ticket waits for the leader to drop it, and polling it in a loop would only spin.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Collection
from functools import partial

from s3queue.common.clock import Clock, SystemClock
from s3queue.common.concurrency import RunAll, in_order, settled
from s3queue.errors import MalformedMessage
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.tickets import Invocation, Ticket
from s3queue.storage.base import Object, Storage, new_token

RETRY_MS = 2_000
"""How long a puller leaves a pending ticket it offered alone, while it stays unchanged."""
TRUST_MS = 1_000
"""How long `take` trusts a ticket to be still pending since it was learnt or last listed."""
TRUST_CONTESTED_MS = 200
"""`TRUST_MS` while the queue is contested (`CONTESTED_MS`): another process claims what this
one knows pending, so knowledge older than about one of its claims is a likely lost race."""
CONTESTED_MS = 5_000
"""How long after its last poll saw a ticket it knew pending claimed by another process a
puller stays wary (`TRUST_CONTESTED_MS`, `SPREAD`)."""
SPREAD = 8
"""While contested, a ticket may be taken after at most this many newer ones of its partition:
rivals with one view of the pending tickets then mostly pick different ones."""


class Puller:
    """Finds pending tickets of one queue, partitions in turn, for a worker to claim."""

    def __init__(
        self,
        storage: Storage,
        keys: QueueKeys,
        clock: Clock | None = None,
        run_all: RunAll = in_order,
        salt: str | None = None,
    ) -> None:
        self.storage, self.keys = storage, keys
        self.clock = clock or SystemClock()
        self.run_all = run_all
        """How a poll's ticket GETs run: one by one (`in_order`), or at once on threads."""
        self.salt = new_token() if salt is None else salt
        """This puller's own order among a partition's pending tickets while contested."""
        self._contested_ms: int | None = None
        """When a poll last saw a ticket this puller knew pending claimed by another process."""
        self._offered: dict[str, tuple[str, int]] = {}
        """Ticket key -> (ETag, when) it was last offered."""
        self._seen: dict[str, tuple[str, float]] = {}
        """Ticket key -> the ETag it had when it was not claimable (claimed, committed, bad),
        and until when (ms) a change of it cannot make it claimable (`_quiet`)."""
        self._pending: dict[str, tuple[str | None, Invocation]] = {}
        """Ticket key -> (its partition, its payload) while its ETag is the payload's."""
        self._known: dict[str, int] = {}
        """Pending ticket key -> when it was last known pending (learnt, or listed unchanged)."""
        self._served: str | None = None
        self._turns = False
        self.others = 0
        """Tickets the last poll listed that this process does not work: the queue is busy."""
        self.listed_ms = 0
        """When the last poll listed (ms, by `clock`)."""

    def learn(self, payload: Invocation) -> None:
        """A pending ticket's payload as its publisher has it (this process's coordinator, which
        found no free thread for it): pulled without a GET, by `take` at once."""
        key, doc, ticket = str(payload["ticket"]), payload.get("doc"), payload.get("held")
        if not payload.get("etag") or (ticket is None and not doc):
            return  # a large ticket's reference: the next poll reads it
        if ticket is None:
            try:
                ticket = Ticket.decode(doc or {})
            except MalformedMessage:
                return
        partition = ticket.tenant(self.keys)
        self._pending[key] = (partition, payload)
        self._known[key] = self.clock.now_ms()

    def take(self, limit: int) -> list[Invocation]:
        """Up to `limit` payloads known to be pending within `TRUST_MS`, no request."""
        now = self.clock.now_ms()
        trust = self.trust_ms(now)
        return self._hand_out(limit, now, lambda key: now - self._known.get(key, 0) < trust)

    def stale(self) -> bool:
        """Whether a pending ticket waits that only a LIST can tell is still pending."""
        now = self.clock.now_ms()
        trust = self.trust_ms(now)
        return any(
            now - self._known.get(key, 0) >= trust
            for key in self._pending
            if key not in self._offered
        )

    def lost(self) -> None:
        """A worker of this process found a ticket it was given claimed, or gone, by another
        process: the queue is contested (the first sign a leader's process gets, which takes
        the tickets its coordinator published from memory and rarely lists)."""
        self._contested_ms = self.clock.now_ms()

    def contested(self, now: int) -> bool:
        """Whether another process claimed a ticket this one knew pending within
        `CONTESTED_MS` before `now` (by `clock`)."""
        return self._contested_ms is not None and now - self._contested_ms < CONTESTED_MS

    def trust_ms(self, now: int) -> int:
        """How long `take` trusts what it knows pending: `TRUST_MS`, or while contested
        `TRUST_CONTESTED_MS`."""
        return TRUST_CONTESTED_MS if self.contested(now) else TRUST_MS

    def poll(self, limit: int, busy: Collection[str] = ()) -> list[Invocation]:
        """Up to `limit` payloads of pending tickets (as the coordinator would invoke with);
        the tickets in `busy` (this process works them) are left alone."""
        if limit <= 0:
            return []
        page = self.storage.list(self.keys.tickets)
        listed = {entry.key: entry.etag for entry in page.entries if entry.key not in busy}
        self.others, self.listed_ms = len(listed), self.clock.now_ms()
        now = self.clock.now_ms()
        self._seen = {
            k: (etag, until)
            for k, (etag, until) in self._seen.items()
            if k in listed and (listed[k] == etag or now < until)
        }
        for key, (_, payload) in self._pending.items():
            if key in listed and listed[key] != payload["etag"]:
                # A pending ticket written since: claimed (nothing else writes one), so no
                # GET; a later change of it (a commit, or a reap back to pending) is read.
                # Not by this process (it lists none it works): the queue is contested.
                self._seen[key] = (listed[key], 0)
                self._contested_ms = now
        self._pending = {
            k: found for k, found in self._pending.items() if listed.get(k) == found[1]["etag"]
        }
        self._offered = {
            k: (etag, at)
            for k, (etag, at) in self._offered.items()
            if listed.get(k) == etag and now - at < RETRY_MS
        }
        unread = [
            key
            for key in listed
            if key not in self._pending
            and key not in self._seen
            and self.keys.parse_ticket(key) is not None
        ]
        found = settled(self.run_all, [partial(self.storage.get, key) for key in unread])
        for key, obj in zip(unread, found, strict=True):
            self._read(key, obj)
        self._known = dict.fromkeys(self._pending, now)
        return self._hand_out(limit, now)

    def _hand_out(
        self, limit: int, now: int, usable: Callable[[str], bool] | None = None
    ) -> list[Invocation]:
        taken = self._in_turn(limit, usable) if limit > 0 else []
        for payload in taken:
            self._offered[payload["ticket"]] = (payload["etag"], now)
        if self.contested(now):  # raced: no window of reads before the claim (start.py)
            taken = [_raced(payload) for payload in taken]
        return taken

    def forget(self, payload: Invocation) -> None:
        """`payload` was not taken after all (no free thread): offer it again at the next poll."""
        self._offered.pop(str(payload["ticket"]), None)

    def _in_turn(self, limit: int, usable: Callable[[str], bool] | None = None) -> list[Invocation]:
        """`limit` pending payloads, one partition at a time, after the last one served."""
        queues: dict[str | None, list[Invocation]] = {}
        for key in sorted(self._pending):
            if key in self._offered or (usable is not None and not usable(key)):
                continue
            partition, payload = self._pending[key]
            queues.setdefault(partition, []).append(payload)
        if self.contested(self.clock.now_ms()):
            queues = {p: self._spread(payloads) for p, payloads in queues.items()}
        order = sorted(queues, key=lambda p: (p is not None, p or ""))
        if self._turns and self._served in queues:
            at = order.index(self._served) + 1
            order = order[at:] + order[:at]
        taken: list[Invocation] = []
        while len(taken) < limit and any(queues.values()):
            for partition in order:
                if queues[partition] and len(taken) < limit:
                    taken.append(queues[partition].pop(0))
                    self._served, self._turns = partition, True
        return taken

    def _spread(self, payloads: list[Invocation]) -> list[Invocation]:
        """One partition's payloads, oldest first, each moved back by up to `SPREAD` - 1
        places by this puller's salt: rivals that list the same tickets start on different
        ones, and none is passed by `SPREAD` or more newer ones, so none waits forever."""

        def place(item: tuple[int, Invocation]) -> tuple[int, int]:
            index, payload = item
            shift = zlib.crc32(f"{self.salt}{payload['ticket']}".encode()) % SPREAD
            return index + shift, index

        return [payload for _, payload in sorted(enumerate(payloads), key=place)]

    def _read(self, key: str, obj: Object | None) -> None:
        if obj is None:
            return  # finished since the LIST
        try:
            ticket = Ticket.decode(obj.body)
        except MalformedMessage:
            ticket = None  # the coordinator reports it; nothing to claim
        if ticket is None or ticket.state != "pending":
            self._seen[key] = (obj.etag, _quiet(ticket))
            return
        partition = ticket.tenant(self.keys)
        invocation = ticket.invocation(key, obj.etag)
        invocation["pulled"] = True
        self._pending[key] = (partition, invocation)


def _raced(payload: Invocation) -> Invocation:
    """`payload` marked as one that other processes race to claim (start.py reads nothing
    ahead of its claim)."""
    if payload.get("pulled"):
        return payload
    raced = payload.copy()
    raced["pulled"] = True
    return raced


def _quiet(ticket: Ticket | None) -> float:
    """Until when (ms) no write of a ticket read unclaimable can make it claimable: a committed
    or malformed one never is again (it is applied, then deleted); a claimed one only once its
    lease ran out and the coordinator reaped it (by the claimer's clock, as written: a puller
    that looks again a little late only claims a reaped ticket late, never wrongly)."""
    if ticket is None or ticket.state == "committed":
        return float("inf")
    return ticket.lease_until_ms

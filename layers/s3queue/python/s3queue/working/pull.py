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
partition it took from last, and oldest first within each partition.

Cost: one LIST of ``tickets/`` per poll, and one GET per ticket that is new or changed since the
last poll. A ticket's ETag changes only when it is written (claim, heartbeat, commit), so a
known ticket, pending or claimed, costs nothing between polls. The caller paces the polls (and
backs off when they find nothing).

A ticket offered but not claimed (another won it, or it is fenced, or its epoch's seal is
pending) is not offered again by the same puller while its ETag is unchanged, for `RETRY_MS`:
a fenced ticket waits for the leader to drop it, and polling it in a loop would only spin.
"""

from __future__ import annotations

from s3queue.common.clock import Clock, SystemClock
from s3queue.errors import MalformedMessage
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.tickets import Invocation, Ticket
from s3queue.storage.base import Storage

RETRY_MS = 2_000
"""How long a puller leaves a pending ticket it offered alone, while it stays unchanged."""


class Puller:
    """Finds pending tickets of one queue, partitions in turn, for a worker to claim."""

    def __init__(self, storage: Storage, keys: QueueKeys, clock: Clock | None = None) -> None:
        self.storage, self.keys = storage, keys
        self.clock = clock or SystemClock()
        self._offered: dict[str, tuple[str, int]] = {}
        """Ticket key -> (ETag, when) it was last offered."""
        self._seen: dict[str, str] = {}
        """Ticket key -> the ETag it had when it was not claimable (claimed, committed, bad)."""
        self._pending: dict[str, tuple[str | None, Invocation]] = {}
        """Ticket key -> (its partition, its payload) while its ETag is the payload's."""
        self._served: str | None = None
        self._turns = False

    def poll(self, limit: int) -> list[Invocation]:
        """Up to `limit` payloads of pending tickets (as the coordinator would invoke with)."""
        if limit <= 0:
            return []
        page = self.storage.list(self.keys.tickets)
        listed = {entry.key: entry.etag for entry in page.entries}
        self._seen = {k: v for k, v in self._seen.items() if listed.get(k) == v}
        self._pending = {
            k: found for k, found in self._pending.items() if listed.get(k) == found[1]["etag"]
        }
        now = self.clock.now_ms()
        self._offered = {
            k: (etag, at)
            for k, (etag, at) in self._offered.items()
            if listed.get(k) == etag and now - at < RETRY_MS
        }
        for key, etag in listed.items():
            if key in self._pending or self._seen.get(key) == etag:
                continue
            if self.keys.parse_ticket(key) is not None:
                self._read(key)
        taken = self._in_turn(limit)
        for payload in taken:
            self._offered[payload["ticket"]] = (payload["etag"], now)
        return taken

    def forget(self, payload: Invocation) -> None:
        """`payload` was not taken after all (no free thread): offer it again at the next poll."""
        self._offered.pop(str(payload["ticket"]), None)

    def _in_turn(self, limit: int) -> list[Invocation]:
        """`limit` pending payloads, one partition at a time, after the last one served."""
        queues: dict[str | None, list[Invocation]] = {}
        for key in sorted(self._pending):
            if key in self._offered:
                continue
            partition, payload = self._pending[key]
            queues.setdefault(partition, []).append(payload)
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

    def _read(self, key: str) -> None:
        obj = self.storage.get(key)
        if obj is None:
            return  # finished since the LIST
        try:
            ticket = Ticket.decode(obj.body)
        except MalformedMessage:
            ticket = None  # the coordinator reports it; nothing to claim
        if ticket is None or ticket.state != "pending":
            self._seen[key] = obj.etag
            return
        partition = ticket.tenant(self.keys)
        self._pending[key] = (partition, ticket.invocation(key, obj.etag))

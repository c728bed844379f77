"""`Puller`: how a worker that was not invoked finds work (a fleet of worker processes).

The coordinator's invoke (``lambda:Invoke``, or the local pool) is one way a published ticket
reaches a worker. A process on any host can also list a queue's tickets and claim a pending one
with the same CAS claim (`Worker.process`), so the exactly-once claim, fencing and every other
guarantee are those of an invoked worker: two claimers of one ticket race on its ETag and one
wins; a ticket of a fenced epoch is rejected by the lease check as always.

Cost: one LIST of ``tickets/`` per poll, and one GET per ticket that is new or changed since the
last poll. A claimed ticket's ETag changes only when its holder writes (claim, heartbeat,
commit), so a busy queue's live tickets cost nothing between polls. The caller paces the polls
(and backs off when they find nothing).
"""

from __future__ import annotations

from typing import Any

from s3queue.errors import MalformedMessage
from s3queue.keys import QueueKeys
from s3queue.model import Ticket
from s3queue.storage.base import Storage


class Puller:
    """Finds pending tickets of one queue, oldest first, for a worker to claim."""

    def __init__(self, storage: Storage, keys: QueueKeys) -> None:
        self.storage, self.keys = storage, keys
        self._seen: dict[str, str] = {}
        """Ticket key -> the ETag it had when it was not claimable (claimed, committed, bad)."""

    def poll(self, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` payloads of pending tickets (as the coordinator would invoke with)."""
        if limit <= 0:
            return []
        page = self.storage.list(self.keys.tickets)
        listed = {entry.key: entry.etag for entry in page.entries}
        self._seen = {k: v for k, v in self._seen.items() if listed.get(k) == v}
        found: list[dict[str, Any]] = []
        for key, etag in listed.items():
            if len(found) >= limit:
                break
            if self._seen.get(key) == etag or self.keys.parse_ticket(key) is None:
                continue
            payload = self._pending(key)
            if payload is not None:
                found.append(payload)
        return found

    def _pending(self, key: str) -> dict[str, Any] | None:
        obj = self.storage.get(key)
        if obj is None:
            return None  # finished since the LIST
        try:
            ticket = Ticket.decode(obj.body)
        except MalformedMessage:
            ticket = None  # the coordinator reports it; nothing to claim
        if ticket is None or ticket.state != "pending":
            self._seen[key] = obj.etag
            return None
        return ticket.to_payload(key, obj.etag)

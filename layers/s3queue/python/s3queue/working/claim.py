"""A claimed ticket and its heartbeat: every write to the ticket, from either thread.

Apart from the ticket flow (worker.py) because this is where the lease race lives: the handler
thread and the heartbeat thread both CAS the ticket, so the writes are serialised here, and the
first `Conflict` marks the claim lost for both (the coordinator reaped it into a new generation,
and nothing this holder writes afterwards may count).
"""

from __future__ import annotations

import threading
from typing import Protocol

from s3queue.common.clock import Clock
from s3queue.common.events import Emitter
from s3queue.errors import Conflict, LeaseLost, StorageError
from s3queue.protocol.tickets import Outcome, Ticket
from s3queue.storage.base import Storage, new_token
from s3queue.working.load import Loaded


class Holder(Protocol):
    """What a claim needs of the worker that holds it."""

    storage: Storage
    clock: Clock
    emit: Emitter
    visibility_ms: int


class Claim:
    """A claimed ticket: serialises CAS writes from the handler thread and the heartbeat."""

    def __init__(self, worker: Holder, key: str, ticket: Ticket, etag: str) -> None:
        self.worker, self.key, self.ticket, self.etag = worker, key, ticket, etag
        self.lock = threading.Lock()
        self.lost = False
        self.next_beat_ms = 0
        self.loaded: dict[str, Loaded | None] = {}

    def take(self, owner: str, first: tuple[str, str] | None) -> None:
        """Claim the pending ticket for `owner`, noting `first` (the first ref's key and its
        first message's id) as running; LeaseLost if someone else changed it first."""
        with self.lock:
            self.ticket.state, self.ticket.owner = "claimed", owner
            if first is not None:
                ticket = self.ticket
                ticket.running, ticket.running_index, ticket.running_id = first[0], 0, first[1]
        self.write()

    def write(self, *, lease: bool = True) -> None:
        """CAS the ticket as it now is; LeaseLost if someone else changed it."""
        with self.lock:
            if self.lost:
                raise LeaseLost(self.key)
            now = self.worker.clock.now_ms()
            if lease:
                self.ticket.lease_until_ms = now + self.worker.visibility_ms
                self.ticket.lease_ms = self.worker.visibility_ms
            token = new_token()
            try:
                self.etag = self.worker.storage.put(
                    self.key, self.ticket.encode(token), if_match=self.etag, token=token
                )
            except Conflict as exc:
                self.lost = True
                raise LeaseLost(self.key) from exc
            self.next_beat_ms = now + self.worker.visibility_ms // 3

    def beat(self) -> None:
        self.write()
        self.worker.emit(
            "heartbeat",
            self.worker.clock.now_ms(),
            ticket=self.key,
            finished=len(self.ticket.outcomes),
        )

    def record(self, outcome: Outcome) -> None:
        """Add an outcome; the next heartbeat (due before the next start) or the commit saves it."""
        with self.lock:
            self.ticket.record(outcome)

    def note_running(self, ref: str, index: int, message_id: str) -> bool:
        """Note the message that starts next (the next write saves it; `Ticket.expire` counts a
        delivery for it alone); whether it was noted already (the claim's first message)."""
        with self.lock:
            ticket = self.ticket
            noted = ticket.running == ref and ticket.running_index == index
            ticket.running, ticket.running_index, ticket.running_id = ref, index, message_id
            return noted

    def commit(self) -> None:
        """Write every outcome with the ticket committed: the commit point (LeaseLost if the
        claim was lost first)."""
        with self.lock:
            self.ticket.state = "committed"
            self.ticket.committed_ms = self.worker.clock.now_ms()
        self.write(lease=False)


def heartbeat_loop(claim: Claim, stop: threading.Event, interval: float) -> None:
    """Beat every `interval` seconds until stopped or the lease is lost."""
    while not stop.wait(interval):
        try:
            claim.beat()
        except LeaseLost:
            return
        except StorageError as exc:  # S3 trouble: try again next beat
            claim.worker.emit(
                "heartbeat_failed",
                claim.worker.clock.now_ms(),
                ticket=claim.key,
                error=str(exc),
            )


class Beating:
    """Context manager running the heartbeat thread while handlers run (when enabled)."""

    def __init__(self, claim: Claim, enabled: bool) -> None:
        self.claim, self.enabled = claim, enabled
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> Beating:
        if self.enabled:
            interval = self.claim.worker.visibility_ms / 3000
            self.thread = threading.Thread(
                target=heartbeat_loop,
                args=(self.claim, self.stop, interval),
                name=f"heartbeat-{self.claim.key}",
                daemon=True,
            )
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

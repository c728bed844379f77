"""Tickets: the refs a coordinator publishes, the claim, the outcomes a worker commits."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from s3queue.errors import MalformedMessage
from s3queue.protocol.deadletters import bound_traceback
from s3queue.protocol.permits import Permit
from s3queue.protocol.records import FORMAT

if TYPE_CHECKING:
    from s3queue.protocol.keys import QueueKeys

TICKET_TRACEBACK_CHARS = 128 * 1024
"""The tracebacks one ticket keeps in all: its document travels in a Lambda invoke (1 MB for an
async event), so a ticket's later failures keep what is left of this, then none."""
SHORT_TRACEBACK_CHARS = 512
"""Less room than this left: no traceback (a shorter tail would not show where it was raised)."""
MAX_ERROR_CHARS = 1000
"""An outcome's error text is cut to this (a traceback's last lines are in the logs): a ticket
of 1,000 failed messages stays far below Lambda's 1 MB async payload (issue 19.8)."""
INLINE_DOC_BYTES = 256 * 1024
"""A ticket document up to this size travels in the invoke payload; a larger one is sent as a
reference (its key and ETag) and the worker GETs it."""

OutcomeKind = Literal["done", "retry", "dead", "release", "skip"]
"""done, retry, dead: the handler ran; release: it did not, the message goes back as it was;
skip: an explicit-id message handled elsewhere (its marker is done, or names another key),
retired without running."""
TicketState = Literal["pending", "claimed", "committed"]


class Invocation(TypedDict):
    """What the coordinator sends a worker to start it on a ticket: a Lambda ``Event`` invoke's
    JSON, or a local pool's item. (A message's stored large body is its *payload*, payload.py:
    the word means that alone.)"""

    queue: str
    ticket: str
    """The ticket's key."""
    etag: str
    """The ticket's ETag as published: the worker claims it If-Match, without a GET."""
    doc: NotRequired[dict[str, Any]]
    """The ticket document, up to `INLINE_DOC_BYTES` encoded; else the worker GETs it."""
    held: NotRequired[Ticket]
    """The ticket itself, for a worker in the publisher's own process (the local runtime): no
    encode, no decode on the way. Never sent over the wire (invoke.py leaves it out)."""
    pulled: NotRequired[bool]
    """Found by a puller (pull.py), which other processes may be racing to claim: the worker
    reads ahead only once it holds the claim. Local only, never sent over the wire."""
    stalls: NotRequired[int]
    """Times the leader invoked this pending ticket again (its workers left no trace): each
    halves the worker's read-ahead, as a stalled generation does (readahead.py)."""


@dataclass(slots=True)
class Ref:
    """A ticket's reference to one stored object (a message, or a packed object of many)."""

    key: str
    etag: str
    size: int
    redeliveries: int = 0
    """Lease expiries counted for every message of the ref (tickets of earlier versions)."""
    expiries: dict[str, int] = field(default_factory=dict)
    """A message's index in the object -> lease expiries while the ticket recorded it running."""

    def counted(self, index: int) -> int:
        """Deliveries of the ref's `index`-th message that started its handler and ended with
        its lease (its outcome unrecorded)."""
        return self.redeliveries + self.expiries.get(str(index), 0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "etag": self.etag, "size": self.size}
        if self.redeliveries:
            out["redel"] = self.redeliveries
        if self.expiries:
            out["expired"] = self.expiries
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ref:
        expiries = {str(k): int(v) for k, v in dict(data.get("expired", {})).items()}
        return cls(
            data["key"], data["etag"], int(data["size"]), int(data.get("redel", 0)), expiries
        )


@dataclass(slots=True)
class Outcome:
    """What happened to one message of a ticket (the commit records one per message)."""

    ref: str
    id: str
    kind: OutcomeKind
    at_ms: int
    error: str | None = None
    delay_ms: int = 0
    attempt: int = 0
    """The attempt this outcome ends (0 for a release: the handler did not run). Kept here, not
    derived at apply time: a lease expiry after a heartbeat recorded it must not count."""
    traceback: str | None = None
    """The handler's traceback when it raised (bounded: `Ticket.record`)."""
    dedup: bool = False
    """An explicit id's: an apply that finds its object gone still marks it done (apply.py)."""

    def __post_init__(self) -> None:
        if self.error is not None and len(self.error) > MAX_ERROR_CHARS:
            cut = len(self.error) - MAX_ERROR_CHARS
            self.error = f"{self.error[: MAX_ERROR_CHARS - 40]} ... [{cut + 40} characters cut]"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ref": self.ref, "id": self.id, "kind": self.kind, "at": self.at_ms}
        if self.error is not None:
            out["error"] = self.error
        if self.traceback is not None:
            out["tb"] = self.traceback
        if self.delay_ms:
            out["delay"] = self.delay_ms
        if self.attempt:
            out["attempt"] = self.attempt
        if self.dedup:
            out["dedup"] = 1
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(
            data["ref"],
            data["id"],
            data["kind"],
            int(data["at"]),
            data.get("error"),
            int(data.get("delay", 0)),
            int(data.get("attempt", 0)),
            data.get("tb"),
            bool(data.get("dedup")),
        )


@dataclass(slots=True)
class Ticket:
    """A unit of dispatch: refs to up to ``batch_size`` messages, and the lease on them."""

    queue: str
    epoch: int
    seq: int
    refs: list[Ref]
    created_ms: int
    state: TicketState = "pending"
    generation: int = 0
    owner: str | None = None
    lease_until_ms: int = 0
    committed_ms: int = 0
    running: str | None = None
    """The ref whose message the holder started last (see `expire`)."""
    running_index: int = 0
    """That message's index in the ref's object."""
    running_id: str | None = None
    """That message's id (None when the claim recorded the first message before reading it)."""
    outcomes: list[Outcome] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    permit: Permit | None = None
    """The rate limits this ticket's handler starts are taken against (permits.py)."""
    applied: int = 0
    """Refs of a committed ticket whose outcomes are applied and sources retired, from the
    first: an apply cut short by its time budget records them, and the next applier starts
    after them (working/apply.py)."""
    lease_ms: int = 0
    """The claim's lease: it expires this long after the ticket's last write, by S3's time
    (`storage.base.written_ago`); 0 in a ticket written by an older version (then
    ``lease_until``, the holder's clock, is what the reaper goes by)."""
    partition: str | None = None
    """The folder of every message the ticket refs (`QueueKeys.partition`: a partition's or a
    priority lane's; None the default partition's): the leader plans a ticket from one
    folder's listing, so its consumers never parse it back out of a key."""
    partition_known: bool = True
    """False for a ticket an older version wrote (no ``part``): `folder` reads it off the first
    ref's key, as that version did, while a rolling deploy mixes them."""
    chain: bool = False
    """Published while every slot was taken: its worker looks, once it has committed, for a
    successor the leader parked behind it (`after`) and runs it in the same invocation."""
    after: str | None = None
    """The key of the live ticket this one is parked behind: no worker is invoked on it while
    that ticket lives; its worker takes it next (the successor's pointer, `QueueKeys.chain`),
    or the leader invokes it once it is gone."""

    def folder(self, keys: QueueKeys) -> QueueKeys:
        """`keys` seen from the folder of the ticket's messages (`QueueKeys.partitioned`)."""
        if self.partition_known or not self.refs:
            return keys.partitioned(self.partition)
        return keys.owning(self.refs[0].key)

    def tenant(self, keys: QueueKeys) -> str | None:
        """The partition of the ticket's messages (its folder's, without a priority)."""
        return self.folder(keys).tenant

    def copy(self) -> Ticket:
        """A copy to change apart from this one (its lists, refs' counts and history entries
        are its own): how the leader hands an in-process worker its ticket, or reaps one,
        without an encode and a decode."""
        return replace(
            self,
            refs=[replace(r, expiries=dict(r.expiries)) for r in self.refs],
            outcomes=[replace(o) for o in self.outcomes],
            history=[dict(h) for h in self.history],
        )

    def claim_expired(self, written_ago_ms: int, now_ms: int, skew_ms: int) -> bool:
        """Whether a claimed ticket's lease has run out: by S3's time since its last write,
        never by the holder's clock (issue 19.7); an older ticket by ``lease_until``."""
        if self.lease_ms:
            return written_ago_ms > self.lease_ms
        return self.lease_until_ms + skew_ms < now_ms

    def encode(self, token: str) -> bytes:
        doc = {
            "v": FORMAT,
            "token": token,
            "queue": self.queue,
            "epoch": self.epoch,
            "seq": self.seq,
            "created": self.created_ms,
            "state": self.state,
            "gen": self.generation,
            "owner": self.owner,
            "lease_until": self.lease_until_ms,
            "committed": self.committed_ms,
            "running": self.running,
            "running_index": self.running_index,
            "running_id": self.running_id,
            "refs": [r.to_json() for r in self.refs],
            "outcomes": [o.to_json() for o in self.outcomes],
            "history": self.history,
        }
        if self.permit is not None:
            doc["permit"] = self.permit.to_json()
        if self.lease_ms:
            doc["lease"] = self.lease_ms
        if self.applied:
            doc["applied"] = self.applied
        if self.partition_known:
            doc["part"] = self.partition
        if self.chain:
            doc["chain"] = 1
        if self.after is not None:
            doc["after"] = self.after
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes | dict[str, Any]) -> Ticket:
        try:
            doc = json.loads(data) if isinstance(data, bytes) else data
            return cls(
                queue=doc["queue"],
                epoch=int(doc["epoch"]),
                seq=int(doc["seq"]),
                refs=[Ref.from_json(r) for r in doc["refs"]],
                created_ms=int(doc["created"]),
                state=doc["state"],
                generation=int(doc["gen"]),
                owner=doc.get("owner"),
                lease_until_ms=int(doc.get("lease_until", 0)),
                committed_ms=int(doc.get("committed", 0)),
                running=doc.get("running"),
                running_index=int(doc.get("running_index", 0)),
                running_id=doc.get("running_id"),
                outcomes=[Outcome.from_json(o) for o in doc.get("outcomes", [])],
                history=list(doc.get("history", [])),
                permit=Permit.from_json(doc.get("permit")),
                lease_ms=int(doc.get("lease", 0)),
                applied=int(doc.get("applied", 0)),
                partition=doc.get("part"),
                partition_known="part" in doc,
                chain=bool(doc.get("chain")),
                after=doc.get("after"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedMessage(f"undecodable ticket: {exc}") from exc

    def stalls(self) -> int:
        """Generations that ended with their lease and no new outcome (`expire` counts them)."""
        counts = [h["done"] for h in self.history if h.get("event") == "expired" and "done" in h]
        return sum(1 for i, n in enumerate(counts) if n == (counts[i - 1] if i else 0))

    @property
    def permit_messages(self) -> int:
        """The messages a rate-limited ticket asks its counters for (its permit says)."""
        return self.permit.messages if self.permit is not None else 0

    def invocation(self, key: str, etag: str, *, held: bool = False) -> Invocation:
        """What the coordinator sends a worker: enough to claim without reading the ticket,
        or, for a document above `INLINE_DOC_BYTES`, a reference the worker GETs. `held`: for
        a worker in this process, a copy of the ticket itself instead of its document."""
        invocation = Invocation(queue=self.queue, ticket=key, etag=etag)
        if held:
            invocation["held"] = self.copy()
            return invocation
        encoded = self.encode("")
        if len(encoded) <= INLINE_DOC_BYTES:
            invocation["doc"] = json.loads(encoded)
        return invocation

    def record(self, outcome: Outcome) -> None:
        """Add an outcome, its traceback cut to what is left of `TICKET_TRACEBACK_CHARS` (none
        when less than `SHORT_TRACEBACK_CHARS` is): a ticket's tracebacks stay within that."""
        if outcome.traceback is not None:
            left = TICKET_TRACEBACK_CHARS - sum(len(o.traceback or "") for o in self.outcomes)
            if left < SHORT_TRACEBACK_CHARS:
                outcome.traceback = None
            elif len(outcome.traceback) > left:
                outcome.traceback = bound_traceback(outcome.traceback, left)
        self.outcomes.append(outcome)

    def finished(self) -> set[tuple[str, str]]:
        return {(o.ref, o.id) for o in self.outcomes}

    def expire(self, now_ms: int) -> None:
        """An expired claim back to pending as a new generation (which fences the holder).

        Only the message the ticket records as running counts one more delivery (if its
        outcome was not recorded): it started its handler, and may have killed its worker. A
        message whose handler never started is never counted, so a delivery limit never
        dead-letters it. The worker records `running` before each start on a redelivered
        ticket (one PUT each); on a first delivery the claim records the first message and
        heartbeats the later ones, so a later start after the last heartbeat goes uncounted
        (`Message.redelivered` still shows it).
        """
        finished = (self.running, self.running_id) in self.finished()
        for ref in self.refs:
            if ref.key == self.running and not finished:
                index = str(self.running_index)
                ref.expiries[index] = ref.expiries.get(index, 0) + 1
        self.history.append(
            {
                "event": "expired",
                "owner": self.owner,
                "gen": self.generation,
                "lease_until": self.lease_until_ms,
                "at": now_ms,
                "running": [self.running, self.running_index, self.running_id],
                "done": len(self.outcomes),
            }
        )
        self.state, self.owner, self.lease_until_ms, self.lease_ms = "pending", None, 0, 0
        self.running, self.running_index, self.running_id = None, 0, None
        self.generation += 1

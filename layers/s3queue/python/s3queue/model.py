"""The records S3Queue stores and the message a handler sees; JSON in, JSON out.

Over the house's ~300 lines on purpose: every stored document (message records, dedup
markers, tombstones, tickets) is encoded and decoded here and nowhere else, so one module owns
the bytes. Split it by document (tickets apart) if it grows further.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO, Generic, Literal

from s3queue.errors import MalformedMessage

FORMAT = 1
OutcomeKind = Literal["done", "retry", "dead", "release", "skip"]
"""done, retry, dead: the handler ran; release: it did not, the message goes back as it was;
skip: an explicit-id message already handled (its marker is done), retired without running."""
TicketState = Literal["pending", "claimed", "committed"]
if TYPE_CHECKING:  # a default (PEP 696) lets a bare `Message` mean `Message[Any]` under mypy
    from typing_extensions import TypeVar

    BodyT = TypeVar("BodyT", default=Any)
else:
    from typing import TypeVar

    BodyT = TypeVar("BodyT")
TOMBSTONE = b""
"""What a consumed copy (apply.py) or a redriven dead letter (admin.py) is overwritten with, so
a late writer cannot create it again; messages and dead letters are never empty
(`QueueKeys.is_tombstone`)."""


@dataclass(frozen=True, slots=True)
class Message(Generic[BodyT]):
    """One message as a handler sees it; ``Message[Model]`` declares a typed body (typed.py)."""

    id: str
    body: BodyT
    attempt: int
    """1 + the deliveries of this message known to have started its handler: each failure
    (retry), and each lease expiry while the ticket recorded it as running."""
    enqueued_at: datetime
    group: str | None
    queue: str
    idempotency_key: str
    """Stable across redeliveries and retries: ``<queue>:<id>``."""
    redelivered: bool = False
    """An earlier delivery's lease expired before this message's outcome was recorded: it may
    have run already (whether or not `attempt` counted it)."""
    partition: str | None = None
    """The partition it was enqueued into (``enqueue(partition=)``, or the first folder of an
    ``inbox/<partition>/<name>`` PUT); None for the default partition."""
    attributes: dict[str, str] = field(default_factory=dict)
    """String metadata given at enqueue (``attributes=``), or a plain PUT's ``x-amz-meta-*``."""
    size: int = -1
    """The payload's size in bytes: what `open()` reads (computed from `body` when not given)."""
    opener: Callable[[], BinaryIO] | None = field(default=None, repr=False, compare=False)
    """Opens a stored payload (`enqueue_file`, a large PUT); None when the body is all of it."""

    def __post_init__(self) -> None:
        if self.size < 0:
            object.__setattr__(self, "size", len(body_bytes(self.body)))

    def open(self) -> BinaryIO:
        """A readable binary stream of the payload, read from S3 as you read it (a large one is
        never loaded by the worker); for a body given to `enqueue`, its bytes (JSON-encoded
        unless bytes). Each call opens a new stream from the start: close it when done."""
        if self.opener is not None:
            return self.opener()
        return io.BytesIO(body_bytes(self.body))


def body_bytes(body: Any) -> bytes:
    """A body as bytes: bytes as they are, anything else as compact JSON."""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Payload:
    """Where a message's payload is stored, when it is not in its record."""

    key: str
    size: int
    etag: str | None = None
    """The version to read (an inbox object that may be overwritten); None for ``blobs/``,
    which are written once."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "size": self.size}
        if self.etag is not None:
            out["etag"] = self.etag
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Payload:
        etag = data.get("etag")
        return cls(str(data["key"]), int(data["size"]), str(etag) if etag else None)


@dataclass(slots=True)
class Record:
    """One message inside a ``msg/`` object (a packed object holds many)."""

    id: str
    body: Any
    enqueued_ms: int
    group: str | None = None
    attempt: int = 1
    errors: list[dict[str, Any]] = field(default_factory=list)
    dedup: bool = False
    raw: bool = False
    """The body is bytes (stored base64)."""
    redelivered: bool = False
    """Released from a ticket whose lease had expired: it may have run (`Message.redelivered`)."""
    attributes: dict[str, str] = field(default_factory=dict)
    payload: Payload | None = None
    """Set when the body is stored apart (`body` is then None)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "enqueued_ms": self.enqueued_ms}
        if self.payload is not None:
            out["payload"] = self.payload.to_json()
        elif self.raw:
            out["b64"] = base64.b64encode(self.body).decode()
        else:
            out["body"] = self.body
        if self.group is not None:
            out["group"] = self.group
        if self.attempt != 1:
            out["attempt"] = self.attempt
        if self.errors:
            out["errors"] = self.errors
        if self.dedup:
            out["dedup"] = True
        if self.redelivered:
            out["redelivered"] = True
        if self.attributes:
            out["attrs"] = self.attributes
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        raw = "b64" in data
        body = base64.b64decode(data["b64"], validate=True) if raw else data.get("body")
        return cls(
            id=str(data["id"]),
            body=body,
            enqueued_ms=int(data["enqueued_ms"]),
            group=data.get("group"),
            attempt=int(data.get("attempt", 1)),
            errors=list(data.get("errors", [])),
            dedup=bool(data.get("dedup", False)),
            raw=raw,
            redelivered=bool(data.get("redelivered", False)),
            attributes={str(k): str(v) for k, v in dict(data.get("attrs") or {}).items()},
            payload=Payload.from_json(data["payload"]) if data.get("payload") else None,
        )


def record_for(
    message_id: str,
    body: Any,
    now_ms: int,
    group: str | None = None,
    attributes: dict[str, str] | None = None,
) -> Record:
    """A new record; bytes stay bytes, anything else must be JSON-serialisable."""
    attrs = dict(attributes or {})
    if isinstance(body, bytes | bytearray | memoryview):
        return Record(message_id, bytes(body), now_ms, group, raw=True, attributes=attrs)
    try:
        json.dumps(body, allow_nan=False)  # NaN and Infinity are not JSON
    except (TypeError, ValueError) as exc:
        raise MalformedMessage(f"message body is not JSON-serialisable: {exc}") from exc
    return Record(message_id, body, now_ms, group, attributes=attrs)


def encode_records(records: list[Record], token: str) -> bytes:
    doc = {"v": FORMAT, "token": token, "messages": [r.to_json() for r in records]}
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_records(data: bytes) -> list[Record]:
    """The records of a library-written ``msg/`` object; MalformedMessage if it is not one."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("v") != FORMAT:
            raise MalformedMessage("not an S3Queue message object (missing or unknown 'v')")
        return [Record.from_json(item) for item in doc["messages"]]
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise MalformedMessage(f"undecodable message object: {exc}") from exc


def foreign_id(name: str) -> str:
    """A key-safe, stable message id for an object another service named freely."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:80]
    return f"{safe}-{hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:10]}"


def foreign_record(
    name: str, data: bytes, modified_ms: int, attributes: dict[str, str] | None = None
) -> Record:
    """A message put by another service: JSON when it parses, raw bytes otherwise."""
    attrs = dict(attributes or {})
    try:
        return Record(foreign_id(name), json.loads(data), modified_ms, attributes=attrs)
    except (ValueError, UnicodeDecodeError):
        return Record(foreign_id(name), data, modified_ms, raw=True, attributes=attrs)


@dataclass(frozen=True, slots=True)
class Marker:
    """An explicit id's dedup marker (``ids/<id>``): put "pending" with its message's key
    before the message (producer.py), marked "done" when the message is handled (apply.py)."""

    state: str
    key: str | None = None

    @property
    def done(self) -> bool:
        return self.state == "done"

    def encode(self, token: str) -> bytes:
        doc: dict[str, Any] = {"v": 1, "token": token, "state": self.state}
        if self.key is not None:
            doc["key"] = self.key
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes) -> Marker:
        try:
            doc = json.loads(data)
            state, key = doc.get("state"), doc.get("key")
        except (ValueError, AttributeError) as exc:
            raise MalformedMessage("undecodable marker") from exc
        return cls(str(state), key if isinstance(key, str) else None)


def to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


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

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ref": self.ref, "id": self.id, "kind": self.kind, "at": self.at_ms}
        if self.error is not None:
            out["error"] = self.error
        if self.delay_ms:
            out["delay"] = self.delay_ms
        if self.attempt:
            out["attempt"] = self.attempt
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
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedMessage(f"undecodable ticket: {exc}") from exc

    def to_payload(self, key: str, etag: str) -> dict[str, Any]:
        """What the coordinator sends a worker: enough to claim without reading the ticket."""
        return {
            "queue": self.queue,
            "ticket": key,
            "etag": etag,
            "doc": json.loads(self.encode("")),
        }

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
            }
        )
        self.state, self.owner, self.lease_until_ms = "pending", None, 0
        self.running, self.running_index, self.running_id = None, 0, None
        self.generation += 1

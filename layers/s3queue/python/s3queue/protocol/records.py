"""Message records: the stored form of ``msg/`` objects.

Every message record and tombstone is encoded and decoded here and nowhere else (dedup
markers: markers.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from s3queue.errors import MalformedMessage

FORMAT = 1
TOMBSTONE = b""
"""What a consumed copy (apply.py) or a redriven dead letter (admin.py) is overwritten with, so
a late writer cannot create it again; messages and dead letters are never empty
(`QueueKeys.is_tombstone`)."""


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


def to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)

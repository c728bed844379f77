"""Dead letters: the stored form of a ``dlq/`` object, written by apply and read by operations.

A dead letter is the message's record (`Record.to_json`) with its history beside it. As
`decode` returns it (one schema, also ``s3queue dlq list --json``): ``id``, ``queue``, ``key``
(its DLQ object; pass the last one as ``after=`` for the next page), ``group`` and
``partition`` (or None), ``attributes`` (a dict, empty when none), ``attempts`` (deliveries, the
last included), ``reason`` (the last error), ``errors`` (``[{attempt, at, error, traceback}]``,
``at`` in epoch ms, ``traceback`` the handler's, its last `TRACEBACK_CHARS`, or None),
``enqueued_ms``, ``dead_ms``, and ``body`` with ``body_encoding``: ``"json"`` (the body as
enqueued), ``"base64"`` (bytes) or ``"payload"`` (``body`` is None and ``payload`` is
``{key, size}``: the stored payload, kept beside the dead letter in ``dlq/~payloads/`` and
expired with it; ``payload`` is None otherwise).
"""

from __future__ import annotations

import json
import traceback as tb
from typing import Any, Literal, TypedDict

from s3queue.protocol.records import Record

FORMAT = 1
TRACEBACK_CHARS = 8 * 1024
"""A traceback keeps its last this many characters (where the exception was raised)."""
CUT = "... (traceback cut; its last lines follow)\n"


class ErrorEntry(TypedDict):
    """One failed delivery in a message's error history (also a retry copy's ``errors``)."""

    attempt: int
    at: int
    error: str | None
    traceback: str | None


def format_traceback(exc: BaseException) -> str:
    """`exc`'s traceback (with its causes), bounded to `TRACEBACK_CHARS`."""
    return bound_traceback("".join(tb.format_exception(exc)), TRACEBACK_CHARS)


def bound_traceback(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else a marker and its tail."""
    if len(text) <= limit:
        return text
    return CUT + text[len(text) - (limit - len(CUT)) :]


def error_entry(attempt: int, at: int, error: str | None, traceback: str | None) -> ErrorEntry:
    """An entry of a message's error history, as retry copies and dead letters store it."""
    return {"attempt": attempt, "at": at, "error": error, "traceback": traceback}


class DeadLetter(TypedDict):
    """A dead letter as operators see it (`decode`)."""

    id: str | None
    queue: str | None
    key: str
    group: str | None
    partition: str | None
    attributes: dict[str, str]
    attempts: int | None
    reason: str | None
    errors: list[ErrorEntry]
    enqueued_ms: int | None
    dead_ms: int | None
    body: Any
    body_encoding: Literal["json", "base64", "payload"]
    payload: dict[str, Any] | None


def encode(
    record: Record,
    *,
    queue: str,
    partition: str | None,
    source: str,
    dead_ms: int,
    attempt: int,
    error: str | None,
    token: str,
    traceback: str | None = None,
) -> bytes:
    """A dead letter for `record`, which failed its last delivery (`attempt`) with `error`."""
    last = error_entry(attempt, dead_ms, error, traceback)
    doc = record.to_json()
    doc.update(
        {
            "v": FORMAT,
            "token": token,
            "queue": queue,
            "partition": partition,
            "source": source,
            "dead_ms": dead_ms,
            "attempts": attempt,
            "errors": [*record.errors, last],
            "reason": error,
        }
    )
    return json.dumps(doc).encode()


def decode(key: str, data: bytes) -> DeadLetter:
    """A stored DLQ object in the schema of the module docstring; never raises."""
    doc = _document(data) or {"reason": "undecodable dead letter"}
    raw = "b64" in doc
    payload = doc.get("payload") if isinstance(doc.get("payload"), dict) else None
    errors = [decode_error(e) for e in doc.get("errors") or [] if isinstance(e, dict)]
    return {
        "id": doc.get("id"),
        "queue": doc.get("queue"),
        "key": key,
        "group": doc.get("group"),
        "partition": doc.get("partition"),
        "attributes": dict(doc.get("attrs") or {}),
        "attempts": doc.get("attempts", len(errors) or None),
        "reason": doc.get("reason"),
        "errors": errors,
        "enqueued_ms": doc.get("enqueued_ms"),
        "dead_ms": doc.get("dead_ms"),
        "body": doc.get("b64") if raw else doc.get("body"),
        "body_encoding": "payload" if payload else "base64" if raw else "json",
        "payload": payload,
    }


def decode_error(raw: dict[str, Any]) -> ErrorEntry:
    """A stored history entry in the schema (written before tracebacks were kept: None)."""
    return error_entry(
        raw.get("attempt", 0), raw.get("at", 0), raw.get("error"), raw.get("traceback")
    )


def decode_record(data: bytes) -> tuple[Record, str] | None:
    """The message a dead letter holds and the key it died from (to redrive it into its
    partition); None if it cannot be re-enqueued faithfully."""
    doc = _document(data)
    if doc is None:
        return None
    try:
        return Record.from_json(doc), str(doc.get("source", ""))
    except (ValueError, KeyError, TypeError):
        return None


def redriving(data: bytes, key: str, *, pointed: bool, token: str) -> bytes:
    """The dead letter `data`, marked as being redriven to the message key `key` (`pointed`:
    its id's marker names `key` by now): a redrive run again finishes this one."""
    doc = _document(data) or {}
    doc.update({"token": token, "redrive": {"key": key, "pointed": pointed}})
    return json.dumps(doc).encode()


def redrive_state(data: bytes) -> tuple[str, bool] | None:
    """(key, pointed) of a dead letter a redrive began (`redriving`); None if none did."""
    doc = _document(data) or {}
    state = doc.get("redrive")
    if not isinstance(state, dict) or not isinstance(state.get("key"), str):
        return None
    return state["key"], bool(state.get("pointed"))


def _document(data: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None

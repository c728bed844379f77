"""The queue's controls document: an operator's switches that the dispatcher obeys.

    <prefix>/<queue>/tickets/~controls    {"v": 1, "token": ..., "paused": true, ...}

Written by `Queue.pause` / `Queue.resume` (``s3queue pause|resume QUEUE``) with a CAS on its
ETag (If-None-Match the first time), so two operators never lose each other's other fields;
read by the leader when the LIST of tickets that starts each tick shows a new ETag for it
(`dispatching.gate`): a queue nobody ever paused pays nothing for it. A missing document
means every switch is off; ``resume`` keeps it (off): it goes only with the queue. An
undecodable one (overwritten by hand) reads as paused: a queue someone meant to stop never
starts by accident, and ``s3queue resume`` rewrites it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from s3queue.errors import Conflict
from s3queue.storage.base import Storage, new_token

VERSION = 1
WRITE_ATTEMPTS = 5
"""CAS rounds a switch makes against concurrent writers before it gives up (`Conflict`)."""


@dataclass(frozen=True, slots=True)
class Controls:
    """The switches of one queue (all off: the defaults)."""

    paused: bool = False
    changed_ms: int = 0
    """When a switch last changed, by the writer's clock (shown, never compared)."""

    def encode(self, token: str) -> bytes:
        doc: dict[str, Any] = {
            "v": VERSION,
            "token": token,
            "paused": self.paused,
            "changed_ms": self.changed_ms,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Controls:
        """The switches a stored body says; paused if it cannot be read (module docstring)."""
        try:
            doc = json.loads(data)
            paused = doc["paused"]
            changed = doc.get("changed_ms", 0)
            if not isinstance(paused, bool) or not isinstance(changed, int):
                raise TypeError("paused must be a bool and changed_ms an int")
        except (ValueError, KeyError, TypeError):
            return cls(paused=True)
        return cls(paused=paused, changed_ms=changed)


def read_controls(storage: Storage, key: str) -> tuple[Controls, str | None]:
    """The stored switches and their ETag (None: no document, every switch off)."""
    obj = storage.get(key)
    if obj is None:
        return Controls(), None
    return Controls.decode(obj.body), obj.etag


def set_paused(storage: Storage, key: str, paused: bool, now_ms: int) -> Controls:
    """Turn the pause switch on or off, keeping the other switches (CAS on the ETag)."""
    for _ in range(WRITE_ATTEMPTS):
        current, etag = read_controls(storage, key)
        if current.paused == paused and etag is not None:
            return current
        wanted = replace(current, paused=paused, changed_ms=now_ms)
        token = new_token()
        try:
            storage.put(
                key,
                wanted.encode(token),
                if_match=etag,
                if_none_match=etag is None,
                token=token,
            )
        except Conflict:  # another operator wrote in between: read theirs and try again
            continue
        return wanted
    raise Conflict(f"{key}: changed by others {WRITE_ATTEMPTS} times in a row")

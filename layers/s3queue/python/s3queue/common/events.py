"""Observable state transitions: logged, and handed to an optional listener (metrics, history)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

logger = logging.getLogger("s3queue")

Kind = Literal[
    # producer
    "enqueue",
    "late_notice",
    # coordinator
    "takeover",
    "not_leader",
    "deposed",
    "seal",
    "dispatch",
    "park",
    "doubt",
    "settled",
    "reinvoke",
    "invoke_failed",
    "expire",
    "fenced",
    "corrupt_ticket",
    "release",
    # worker
    "claim",
    "reject",
    "handler_start",
    "handler_finish",
    "heartbeat",
    "heartbeat_failed",
    "lease_lost",
    "chain",
    "skip",
    "commit",
    "applied",
    "apply_paused",
    # either
    "lost_race",
]
"""Every kind of event, in one catalogue: metrics, the chaos checker and `tally` read these."""
KINDS: frozenset[str] = frozenset(get_args(Kind))

# Transitions are INFO; lost races and routine polling are DEBUG.
_DEBUG: frozenset[Kind] = frozenset({"lost_race", "heartbeat", "handler_start", "not_leader"})


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened: `kind` (enqueue, dispatch, claim, ...), when, and details."""

    kind: Kind
    queue: str
    at_ms: int
    fields: dict[str, Any] = field(default_factory=dict)


Listener = Callable[[Event], None]


class Emitter:
    """Logs each event and passes it to the listener, if any."""

    def __init__(self, queue: str, listener: Listener | None = None) -> None:
        self.queue = queue
        self.listener = listener

    def __call__(self, kind: Kind, at_ms: int, **fields: Any) -> None:
        level = logging.DEBUG if kind in _DEBUG else logging.INFO
        if logger.isEnabledFor(level):
            logger.log(level, "%s %s", kind, fields, extra={"queue": self.queue, **_ids(fields)})
        if self.listener is not None:
            self.listener(Event(kind, self.queue, at_ms, fields))


def _ids(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: fields[k] for k in ("ticket", "message_id") if k in fields}

"""Counting what workers did, from their events: the local runtime's summary and the worker
Lambda's metrics count the same things the same way."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

from s3queue.common.events import Event
from s3queue.contract import metric_names

Counter = Literal["processed", "failed", "retried", "dead_lettered", "redelivered"]
METRICS: dict[Counter, str] = {
    "processed": metric_names.PROCESSED,
    "failed": metric_names.FAILED,
    "retried": metric_names.RETRIED,
    "dead_lettered": metric_names.DEAD_LETTERED,
    "redelivered": metric_names.REDELIVERED,
}
"""The CloudWatch metric of each counter."""
_BY_OUTCOME: dict[str, tuple[Counter, ...]] = {
    "done": ("processed",),
    "retry": ("failed", "retried"),
    "dead": ("dead_lettered",),
}


@dataclass
class QueueTally:
    """What workers did on one queue."""

    processed: int = 0
    failed: int = 0
    """Handler runs that raised."""
    retried: int = 0
    dead_lettered: int = 0
    redelivered: int = 0
    """Handler runs of messages whose earlier delivery's lease expired (`Message.redelivered`)."""


class Tally:
    """Counts outcomes per queue from worker events; thread-safe."""

    def __init__(self, queue_names: list[str]) -> None:
        self.queues = {name: QueueTally() for name in queue_names}
        self._lock = threading.Lock()

    def classify(self, event: Event) -> tuple[Counter, ...]:
        """The counters one event adds one to."""
        fields = event.fields
        if event.kind == "handler_start":
            return ("redelivered",) if fields.get("redelivered") else ()
        if event.kind != "handler_finish":
            return ()
        outcome = str(fields.get("outcome"))
        raised = outcome == "dead" and "duration_ms" in fields  # the handler ran and raised
        return (*(("failed",) if raised else ()), *_BY_OUTCOME.get(outcome, ()))

    def __call__(self, event: Event) -> None:
        tally = self.queues.get(event.queue)
        counters = self.classify(event)
        if tally is None or not counters:
            return
        with self._lock:
            for name in counters:
                setattr(tally, name, getattr(tally, name) + 1)

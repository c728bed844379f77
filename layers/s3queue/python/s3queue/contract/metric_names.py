"""CloudWatch metric names shared by the functions that publish them and the stack that alarms.

Every metric lives in `NAMESPACE` with the dimensions ``{service: SERVICE, queue: <queue>}``.
Powertools Metrics adds the ``service`` dimension itself from ``POWERTOOLS_SERVICE_NAME``; the
stack sets that variable to `SERVICE` on every function, so publishers add only ``queue``.
A metric published with another dimension set is a different metric to CloudWatch, and the
alarms and dashboard would not see it.
"""

from __future__ import annotations

NAMESPACE = "S3Queue"
SERVICE = "s3queue"
"""Value of ``POWERTOOLS_SERVICE_NAME`` on every function, hence of the ``service`` dimension."""
DIMENSION_SERVICE = "service"
DIMENSION_QUEUE = "queue"

# Gauges published by the coordinator once per tick, per queue.
PENDING = "Pending"
"""Messages waiting to be dispatched (Count)."""
IN_FLIGHT = "InFlight"
"""Messages in live tickets (Count)."""
DEAD_LETTERS = "DeadLetters"
"""Entries in the queue's DLQ (Count)."""
OLDEST_MESSAGE_AGE = "OldestMessageAge"
"""Age of the oldest pending message (Seconds)."""

# Counters published by the workers, per queue.
PROCESSED = "Processed"
"""Messages whose handler returned (Count)."""
FAILED = "Failed"
"""Handler runs that raised (Count)."""
RETRIED = "Retried"
"""Failed messages scheduled for another attempt (Count)."""
DEAD_LETTERED = "DeadLettered"
"""Messages moved to the DLQ (Count)."""
REDELIVERED = "Redelivered"
"""Deliveries after a lease expired: a handler may run twice (Count)."""
HANDLER_DURATION = "HandlerDuration"
"""Time one handler call took (Milliseconds)."""

COORDINATOR_METRICS = (PENDING, IN_FLIGHT, DEAD_LETTERS, OLDEST_MESSAGE_AGE)
WORKER_METRICS = (PROCESSED, FAILED, RETRIED, DEAD_LETTERED, REDELIVERED, HANDLER_DURATION)


def dimensions(queue: str) -> dict[str, str]:
    """The full dimension set of a queue's metrics, as CloudWatch stores them."""
    return {DIMENSION_SERVICE: SERVICE, DIMENSION_QUEUE: queue}

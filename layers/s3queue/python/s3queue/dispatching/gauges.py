"""`Gauges`: a queue's gauges (pending, in flight, the oldest message's age, dead letters) from
what the coordinator's ticks report, for the coordinator Lambda's metrics and the benches.

Apart from service.py because it is the one thing a run reports outward, on its own cadence
(once per ``interval`` per queue); the serve loop only hands it each tick's result.
"""

from __future__ import annotations

from collections.abc import Callable

from s3queue.common.clock import Clock
from s3queue.contract import metric_names
from s3queue.dispatching.coordinator import Coordinator, TickResult

Publish = Callable[[str, dict[str, float]], None]
"""Receives one queue's gauges: ``{metric name: value}`` (names from `metric_names`)."""


class Gauges:
    """Queue gauges from what ticks report, published at most once per ``interval`` per queue.

    Pending and the oldest message's age come from the last tick that scanned (a tick at the
    in-flight limit does not); the DLQ size costs one LIST page (at most 1,000 counted).
    """

    def __init__(self, publish: Publish, clock: Clock, interval: float = 60.0) -> None:
        self.publish = publish
        self.clock = clock
        self.interval_ms = round(interval * 1000)
        self._published: dict[str, int] = {}
        self._scanned: dict[str, tuple[int, float]] = {}

    def observe(self, coordinator: Coordinator, result: TickResult) -> None:
        queue, now = coordinator.keys.queue, self.clock.now_ms()
        at_limit = result.live_tickets >= coordinator.settings.max_in_flight_tickets
        if not result.paused and not (at_limit and result.dispatched == 0):
            oldest = result.oldest_ready_ms
            age = max(now - oldest, 0) / 1000 if oldest is not None else 0.0
            self._scanned[queue] = (result.waiting, age)
        if not self._due(queue, now):
            return
        values: dict[str, float] = {metric_names.IN_FLIGHT: result.in_flight}
        if queue in self._scanned:
            pending, age = self._scanned[queue]
            values[metric_names.PENDING] = pending
            values[metric_names.OLDEST_MESSAGE_AGE] = age
        page = coordinator.storage.list(coordinator.keys.dlq)
        dead = [e for e in page.entries if not coordinator.keys.is_dead_payload(e.key)]
        values[metric_names.DEAD_LETTERS] = len(dead)
        self.publish(queue, values)

    def idle(self, coordinator: Coordinator) -> None:
        """A probe found nothing to do: nothing pending or in flight, known without a request."""
        queue = coordinator.keys.queue
        if self._due(queue, self.clock.now_ms()):
            zero = (metric_names.PENDING, metric_names.IN_FLIGHT, metric_names.OLDEST_MESSAGE_AGE)
            self.publish(queue, dict.fromkeys(zero, 0.0))

    def _due(self, queue: str, now: int) -> bool:
        last = self._published.get(queue)
        if last is not None and now - last < self.interval_ms:
            return False
        self._published[queue] = now
        return True

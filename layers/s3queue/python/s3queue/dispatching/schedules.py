"""Recurring schedules: a coordinator run enqueues each scheduled queue's due slot.

A slot's message carries an explicit id made of the slot's time (`slot_id`), so an enqueue of
it is idempotent through its ``ids/`` marker (protocol.md, explicit ids): however many runs,
processes or coordinators enqueue the same slot at once, one message goes in. No lease is
needed, and none is taken: a follower enqueues as well as the leader.

    run A    latest slot = 08:50 -- PUT ids/schedule-20261203T085000Z If-None-Match -> created
    run B    latest slot = 08:50 -- PUT ids/schedule-20261203T085000Z If-None-Match -> 412, no-op

Only the latest slot at or before now is ever enqueued: slots missed while nothing ran collapse
into that one (catch-up), as long as it is at most ``schedule_catch_up`` seconds old. What a
process has enqueued is remembered in `Schedules` (a Lambda container keeps it from run to
run), so a slot costs its enqueue once per process, not once per step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from s3queue.common.clock import Clock, ms
from s3queue.contract.schedule import Schedule, slot_id, slot_text
from s3queue.dispatching.coordinator import Coordinator
from s3queue.errors import AccessDenied, BucketNotFound, StorageError
from s3queue.protocol.records import record_for
from s3queue.protocol.writer import Writer

log = logging.getLogger(__name__)

SLOT_ATTRIBUTE = "schedule-slot"
"""The attribute that gives the handler its slot's time (ISO 8601 UTC, to the second)."""


@dataclass(frozen=True)
class Due:
    """What one `Schedules.enqueue_due` did."""

    enqueued: tuple[str, ...] = ()
    """Queues whose slot this call put in (not those whose slot another process put in first)."""
    tried: tuple[str, ...] = ()
    """Queues whose new slot this call enqueued or found enqueued: each has a message waiting,
    whoever put it in, so a run looks at them at once."""
    next_ms: int | None = None
    """When the next slot of any scheduled queue falls; None without a schedule."""


class Schedules:
    """Enqueues the due slots of the scheduled queues; remembers the latest slot of each."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._done: dict[str, int] = {}
        """Per queue, the latest slot this object enqueued (or found enqueued, or skipped)."""

    def enqueue_due(self, coordinators: Iterable[Coordinator]) -> Due:
        """Enqueue each scheduled queue's latest due slot it has not enqueued yet.

        A storage error on one queue is logged and the slot tried again at the next call;
        a missing bucket or credentials end the call (as they end a coordinator run).
        """
        enqueued: list[str] = []
        tried: list[str] = []
        upcoming: list[int] = []
        for coordinator in coordinators:
            schedule = coordinator.settings.parsed_schedule
            if schedule is None:
                continue
            now, queue = self.clock.now_ms(), coordinator.keys.queue
            try:
                written = self._enqueue_latest(coordinator, schedule, now)
            except (BucketNotFound, AccessDenied):
                raise
            except StorageError as exc:
                log.warning("queue %s: scheduled enqueue failed: %s", queue, exc)
                written = None
            if written is not None:
                tried.append(queue)
                if written:
                    enqueued.append(queue)
            upcoming.append(schedule.following(now)[0])
        return Due(tuple(enqueued), tuple(tried), min(upcoming) if upcoming else None)

    def _enqueue_latest(
        self, coordinator: Coordinator, schedule: Schedule, now: int
    ) -> bool | None:
        """Whether this call put the latest slot in; None when there was no slot to try."""
        queue, settings = coordinator.keys.queue, coordinator.settings
        slot = schedule.latest(now)
        if slot <= self._done.get(queue, -1):
            return None
        if now - slot > ms(settings.schedule_catch_up):
            log.info("queue %s: slot %s skipped (older than schedule_catch_up)", queue, slot)
            self._done[queue] = slot
            return None
        written = enqueue_slot(coordinator, slot)
        self._done[queue] = slot
        return written


def enqueue_slot(coordinator: Coordinator, slot: int) -> bool:
    """Put the message of `slot` (idempotent); whether this call's message went in."""
    settings, keys = coordinator.settings, coordinator.keys
    text = slot_text(slot)
    body = settings.scheduled_body if settings.schedule_body else {"slot": text}
    now = coordinator.clock.now_ms()
    record = record_for(slot_id(slot), body, now, attributes={SLOT_ATTRIBUTE: text})
    record.dedup = True
    writer = Writer(
        coordinator.storage,
        keys,
        clock=coordinator.clock,
        emit=coordinator.emit,
        max_message_bytes=settings.max_message_bytes,
    )
    written = writer.send_one(keys, record, 0, now)
    if written:
        log.info(
            "queue %s: scheduled slot %s enqueued", keys.queue, text, extra={"queue": keys.queue}
        )
    return written

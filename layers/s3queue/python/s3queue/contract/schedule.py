"""A queue's recurring schedule (the ``schedule`` setting): its slots, in UTC milliseconds.

``"*/5 * * * *"`` is a cron expression (five fields: minute, hour, day of month, month, day of
week; UTC), read by the `cronsim` package; ``300`` is every 300 seconds, slots on multiples of
300 s since the Unix epoch (so they fall on the same instants in every process). `cronsim` is
imported only when a cron schedule is read: a queue without one never pays its import.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from s3queue.errors import ConfigError

CRON_FIELDS = 5
MIN_INTERVAL = 1.0
"""Seconds: the finest interval schedule."""


@dataclass(frozen=True)
class Schedule:
    """Either a cron expression or an interval in whole milliseconds (never both)."""

    cron: str | None = None
    interval_ms: int = 0

    @classmethod
    def parse(cls, value: Any) -> Schedule:
        """The schedule a ``schedule`` setting names; a `ConfigError` that says what is wrong."""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(
                "schedule must be a cron expression (a str of five fields, UTC) or a number of "
                f"seconds, got {value!r}"
            )
        if isinstance(value, str):
            return cls(cron=_checked_cron(value))
        if value < MIN_INTERVAL:
            raise ConfigError(f"schedule must be at least {MIN_INTERVAL:g} s, got {value!r}")
        return cls(interval_ms=round(value * 1000))

    @property
    def seconds_apart(self) -> float | None:
        """Seconds between slots for an interval; None for cron (they may vary)."""
        return self.interval_ms / 1000 if self.cron is None else None

    def latest(self, now_ms: int) -> int:
        """The last slot at or before `now_ms`."""
        if self.cron is None:
            return now_ms // self.interval_ms * self.interval_ms
        from cronsim import CronSim  # noqa: PLC0415 - only scheduled queues pay this import

        after = _datetime(now_ms // 1000 * 1000 + 1000)  # reverse iteration: strictly before
        return _ms(next(CronSim(self.cron, after, reverse=True)))

    def following(self, after_ms: int, count: int = 1) -> list[int]:
        """The next `count` slots strictly after `after_ms`."""
        if self.cron is None:
            first = self.latest(after_ms) + self.interval_ms
            return [first + i * self.interval_ms for i in range(count)]
        from cronsim import CronSim  # noqa: PLC0415 - only scheduled queues pay this import

        slots = CronSim(self.cron, _datetime(after_ms // 1000 * 1000))
        return [_ms(next(slots)) for _ in range(count)]

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron!r} (UTC)"
        return f"every {self.interval_ms / 1000:g} s"


def _checked_cron(expression: str) -> str:
    from cronsim import CronSim, CronSimError  # noqa: PLC0415 - only scheduled queues pay this

    fields = expression.split()
    if len(fields) != CRON_FIELDS:
        raise ConfigError(
            f"schedule {expression!r}: a cron expression has five fields (minute hour "
            f"day-of-month month day-of-week, UTC), got {len(fields)}"
        )
    try:
        next(CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC)))
    except (CronSimError, ValueError, StopIteration) as exc:
        raise ConfigError(f"schedule {expression!r} is not a valid cron expression: {exc}") from exc
    return " ".join(fields)


def _datetime(at_ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at_ms)


def _ms(at: datetime) -> int:
    return round((at - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1000)


def slot_text(at_ms: int) -> str:
    """A slot as ISO 8601 UTC to the second: ``2026-12-03T08:50:00Z``."""
    return _datetime(at_ms).strftime("%Y-%m-%dT%H:%M:%SZ")


def slot_id(at_ms: int) -> str:
    """The message id of a slot, ``schedule-20261203T085000Z``: one message per slot, whoever
    enqueues it (an explicit id is enqueued once)."""
    return "schedule-" + _datetime(at_ms).strftime("%Y%m%dT%H%M%SZ")

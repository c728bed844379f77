"""Per-queue and coordinator settings: frozen dataclasses with their defaults and validation.

A handler module's ``SETTINGS`` literal overrides a queue's defaults, e.g.::

    SETTINGS = {"visibility_timeout": 120, "max_retries": 3, "memory": 512}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property
from typing import Any

from s3queue.contract.schedule import Schedule
from s3queue.errors import ConfigError

DEFAULT_PREFIX = "s3queue"


@dataclass(frozen=True)
class QueueSettings:
    """Per-queue behaviour; a handler module's ``SETTINGS`` literal overrides the defaults."""

    visibility_timeout: float = 30.0
    """Seconds a claim lasts without a heartbeat before the ticket may be redelivered."""
    max_retries: int = 5
    """Retries after the first attempt; the failure after the last retry dead-letters."""
    backoff_base: float = 1.0
    backoff_cap: float = 300.0
    batch_size: int = 10
    """Messages per ticket (a packed object counts its messages; one larger than a ticket
    rides alone) while there are free ticket slots for what is ready."""
    max_batch_size: int = 1000
    """Under a backlog, tickets grow up to this many messages (sizing.py)."""
    ticket_seconds: float = 2.0
    """Under a backlog, a grown ticket holds about this many seconds of work at the pace recent
    tickets finished (sizing.py); at most half of `timeout`, whatever this says."""
    max_in_flight_tickets: int = 32
    """Backpressure: the coordinator dispatches no more tickets while this many are live."""
    chain: bool = False
    """On Lambda, once every slot is taken, park the next ticket behind a live one for that
    ticket's worker to run next, with no invoke (tickets.py `after`): more messages a second
    through the same slots under a backlog, a little more latency at the knee
    (docs/performance.md). The local runtime ignores it."""
    max_message_bytes: int = 10 * 1024 * 1024
    """Larger objects go to the DLQ unread by the handler."""
    concurrency: int = 8
    """Reserved concurrency of the worker Lambda (deployment only)."""
    memory: int = 1769
    """Worker Lambda memory in MB (deployment only), and so its CPU: Lambda gives one vCPU at
    1,769 MB, a share in proportion below. Under load a worker is CPU-bound, so a message costs
    about the same GB-seconds at any size, and a whole vCPU delivers it sooner
    (docs/performance.md, session 19)."""
    timeout: int = 60
    """Worker Lambda timeout in seconds (deployment only); at least `visibility_timeout`."""
    rate_limit: int = 0
    """Handler starts per second for the whole queue, across every worker (0: no limit);
    paced by the leader, kept by counters where handlers start (dispatching/limits.py)."""
    partition_rate_limit: int = 0
    """Handler starts per second of each partition (0: no limit), as `rate_limit`."""
    partition_concurrency: int = 0
    """Messages of one partition in flight (in live tickets) at once (0: no cap): the leader
    dispatches no more (a packed object larger than the cap goes alone)."""
    paused: bool = False
    """Dispatch nothing new, as after ``s3queue pause`` (which needs no deployment): a
    deployment's override. Enqueues are accepted; tickets in flight finish."""
    schedule: str | float | None = None
    """Enqueue a message at every slot: a cron expression (five fields, UTC) or a number of
    seconds (contract/schedule.py; dispatching/schedules.py enqueues)."""
    schedule_body: str = ""
    """The scheduled message's body as JSON text (the ``SETTINGS`` literal gives any JSON
    value); empty: ``{"slot": "<slot time>"}``."""
    schedule_catch_up: float = 86400.0
    """Seconds after its time that a slot is still enqueued (the latest slot only) when no
    coordinator ran at its time; an older slot is skipped."""

    def __post_init__(self) -> None:
        positive = (
            "visibility_timeout",
            "batch_size",
            "max_in_flight_tickets",
            "backoff_cap",
            "ticket_seconds",
            "schedule_catch_up",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("rate_limit", "partition_rate_limit", "partition_concurrency"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if (self.rate_limit or self.partition_rate_limit) and self.visibility_timeout < 1:
            raise ConfigError("a rate-limited queue needs a visibility_timeout of at least 1 s")
        if self.max_retries < 0 or self.backoff_base < 0:
            raise ConfigError("max_retries and backoff_base must not be negative")
        if self.max_batch_size < self.batch_size:
            raise ConfigError(
                f"max_batch_size ({self.max_batch_size}) must be at least batch_size "
                f"({self.batch_size})"
            )
        if self.timeout < self.visibility_timeout:
            raise ConfigError(
                f"timeout ({self.timeout}s) must be at least visibility_timeout "
                f"({self.visibility_timeout}s)"
            )
        self._check_schedule()

    def _check_schedule(self) -> None:
        if self.schedule is not None:
            Schedule.parse(self.schedule)
        elif self.schedule_body:
            raise ConfigError("schedule_body needs a schedule")

    @cached_property
    def parsed_schedule(self) -> Schedule | None:
        """The schedule, parsed once per settings object (a coordinator reads it every step)."""
        return None if self.schedule is None else Schedule.parse(self.schedule)

    @property
    def scheduled_body(self) -> Any:
        """The body of a scheduled message as given (None when the setting was not given)."""
        return json.loads(self.schedule_body) if self.schedule_body else None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> QueueSettings:
        """Settings from a dict (a handler's SETTINGS); unknown keys are an error."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown settings {unknown}; known: {sorted(known)}")
        converted: dict[str, Any] = {}
        for name, value in values.items():
            if name in SCHEDULE_FIELDS:
                converted[name] = _schedule_value(name, value)
                continue
            if known[name].type == "bool":
                if not isinstance(value, bool):
                    raise ConfigError(f"setting {name} must be true or false, got {value!r}")
                converted[name] = value
                continue
            kind = float if known[name].type == "float" else int
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"setting {name} must be a number, got {value!r}")
            converted[name] = kind(value)
        return replace(
            cls(timeout=max(60, int(converted.get("visibility_timeout", 0)))), **converted
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a ``SETTINGS`` literal gives them: ``from_mapping(to_dict())`` is equal."""
        values = asdict(self)
        values["schedule_body"] = self.scheduled_body
        return values

    def delta(self) -> dict[str, Any]:
        """The fields that differ from the defaults: ``from_mapping(delta())`` is equal."""
        default = QueueSettings().to_dict()
        return {name: v for name, v in self.to_dict().items() if v != default[name]}


SCHEDULE_FIELDS = ("schedule", "schedule_body")
"""Settings that are not numbers: checked by `_schedule_value`."""


def _schedule_value(name: str, value: Any) -> Any:
    """A ``schedule`` as given (checked in ``__post_init__``); a ``schedule_body`` as JSON."""
    if name == "schedule":
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"schedule_body must be a JSON value, got {value!r}: {exc}") from exc


@dataclass(frozen=True)
class CoordinatorSettings:
    """How the coordinator leads, scans and reaps."""

    lease_ttl: float = 30.0
    """Seconds a leader lease lasts without renewal; renewed at a third of it."""
    skew_tolerance: float = 5.0
    """Seconds of clock skew tolerated when judging a lease or claim written by a version that
    did not record its TTL (expiry is otherwise judged by S3's time: protocol.md, "Time")."""
    sweep_interval: float = 60.0
    """Seconds between full rescans of the queue for stragglers behind the cursor."""
    straggler_margin: float = 2.0
    """Seconds the incremental scan re-reads behind its cursor."""
    dispatch_timeout: float = 30.0
    """Seconds an unclaimed ticket waits before its worker is invoked again."""
    scan_pages: int = 2
    """LIST pages read per tick at most (bounds a tick's cost whatever the backlog)."""
    tombstone_ttl: float = 3600.0
    """Seconds a consumed copy's tombstone is kept (see apply.py) before the scan deletes it:
    longer than any applier stays paused between its commit and its apply."""
    publish_concurrency: int = 16
    """Tickets a tick publishes (PUT and invoke) at once; their seqs are reserved as a block
    first (one lease PUT; lease.py). 1: one after another, no reservation."""
    partitions_per_tick: int = 64
    """Partitions a tick reads at most (one LIST each), in turns when a queue has more."""
    discover_interval: float = 1.0
    """Seconds between LISTs of the queue's partition folders (a new partition waits at most
    this long to be read)."""

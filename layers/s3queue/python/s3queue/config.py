"""Settings as frozen dataclasses, and the environment variable names: one source of truth.

The core never reads ``os.environ``; the Lambda entry points call ``from_env`` once per
container. The CDK stack imports the ``ENV_*`` names from here so what it sets is what the
functions read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from s3queue.errors import ConfigError as ConfigError  # noqa: PLC0414 - re-exported from its old home

ENV_BUCKET = "S3QUEUE_BUCKET"
ENV_PREFIX = "S3QUEUE_PREFIX"
ENV_QUEUE = "S3QUEUE_QUEUE"
"""The worker function's queue."""
ENV_QUEUES = "S3QUEUE_QUEUES"
"""The coordinator's queues: JSON ``{queue: {"function": name, "settings": {...}}}``."""
ENV_SETTINGS = "S3QUEUE_SETTINGS"
"""The worker's queue settings: JSON of `QueueSettings` fields."""
ENV_ENDPOINT_URL = "S3QUEUE_ENDPOINT_URL"
"""Optional S3 endpoint (local S3 servers)."""

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
    """Messages (or packed objects) per ticket."""
    max_in_flight_tickets: int = 32
    """Backpressure: the coordinator dispatches no more tickets while this many are live."""
    max_message_bytes: int = 10 * 1024 * 1024
    """Larger objects go to the DLQ unread by the handler."""
    concurrency: int = 8
    """Reserved concurrency of the worker Lambda (deployment only)."""
    memory: int = 256
    """Worker Lambda memory in MB (deployment only)."""
    timeout: int = 60
    """Worker Lambda timeout in seconds (deployment only); at least `visibility_timeout`."""

    def __post_init__(self) -> None:
        positive = ("visibility_timeout", "batch_size", "max_in_flight_tickets", "backoff_cap")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.max_retries < 0 or self.backoff_base < 0:
            raise ConfigError("max_retries and backoff_base must not be negative")
        if self.timeout < self.visibility_timeout:
            raise ConfigError(
                f"timeout ({self.timeout}s) must be at least visibility_timeout "
                f"({self.visibility_timeout}s)"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> QueueSettings:
        """Settings from a dict (a handler's SETTINGS); unknown keys are an error."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown settings {unknown}; known: {sorted(known)}")
        converted: dict[str, Any] = {}
        for name, value in values.items():
            kind = float if known[name].type == "float" else int
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"setting {name} must be a number, got {value!r}")
            converted[name] = kind(value)
        return replace(
            cls(timeout=max(60, int(converted.get("visibility_timeout", 0)))), **converted
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CoordinatorSettings:
    """How the coordinator leads, scans and reaps."""

    lease_ttl: float = 30.0
    """Seconds a leader lease lasts without renewal; renewed at a third of it."""
    skew_tolerance: float = 5.0
    """Seconds of clock skew between machines that never causes a premature takeover."""
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


@dataclass(frozen=True)
class Environment:
    """What a Lambda function reads from its environment, once per container."""

    bucket: str
    prefix: str = DEFAULT_PREFIX
    endpoint_url: str | None = None
    queue: str | None = None
    settings: QueueSettings = field(default_factory=QueueSettings)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if env is None else env
        bucket = env.get(ENV_BUCKET)
        if not bucket:
            raise ConfigError(f"{ENV_BUCKET} is not set")
        try:
            settings = json.loads(env.get(ENV_SETTINGS) or "{}")
            queues = json.loads(env.get(ENV_QUEUES) or "{}")
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{ENV_SETTINGS} or {ENV_QUEUES} is not valid JSON: {exc}") from exc
        return cls(
            bucket=bucket,
            prefix=env.get(ENV_PREFIX) or DEFAULT_PREFIX,
            endpoint_url=env.get(ENV_ENDPOINT_URL) or None,
            queue=env.get(ENV_QUEUE) or None,
            settings=QueueSettings.from_mapping(settings),
            queues=queues,
        )

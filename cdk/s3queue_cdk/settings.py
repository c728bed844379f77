"""Deployment choices read from the CDK context (``cdk.json`` or ``cdk deploy -c key=value``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from constructs import Node
from s3queue.contract.names import STACK_NAME
from s3queue.contract.settings import DEFAULT_PREFIX
from s3queue.errors import ConfigError

CONTEXT_PREFIX = "s3queue:"
_PREFIX = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
_BUCKET_NAME_PREFIX = re.compile(r"([a-z0-9][a-z0-9-]{0,29})?")
_EMAIL = re.compile(r"([^@\s]+@[^@\s]+\.[^@\s]+)?")
_RATE = re.compile(r"rate\((1 (minute|hour|day)|([2-9]|[1-9]\d+) (minutes|hours|days))\)")
_CRON = re.compile(r"cron\(\S+( \S+){5}\)")
_SCHEDULE = re.compile(f"{_RATE.pattern}|{_CRON.pattern}")
_ARN = re.compile(r"(arn:[a-z-]+:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+)?")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class DeploymentSettings:
    """Each field is the context value ``s3queue:<camelCaseName>``; the defaults are cdk.json's."""

    stack_name: str = "S3Queue"
    prefix: str = DEFAULT_PREFIX
    """Root of every queue's keys in the bucket."""
    schedule: str = "rate(1 minute)"
    """EventBridge schedule expression that starts the coordinator."""
    low_latency: bool = False
    """Also start the coordinator on S3 Object Created events under the queue prefixes."""
    ids_retention_days: int = 7
    """How long explicit-id dedup markers live: the dedup window."""
    dlq_retention_days: int = 14
    idempotency_retention_days: int = 7
    """How long an idempotency record lives after its last write; at least the longest
    ``expires_after_seconds`` of any handler, or a live record is deleted early."""
    access_log_retention_days: int = 90
    alarm_email: str = ""
    """Subscribed to the alarm topic when set."""
    oldest_message_alarm_seconds: int = 900
    bucket_name_prefix: str = ""
    """Bucket name ``<prefix>-<account>-<region>``; empty lets CloudFormation name it."""
    kms: bool = False
    """Encrypt the bucket and the alarm topic with a customer-managed KMS key (else SSE-S3)."""
    versioned: bool = False
    retain_data: bool = True
    """Keep the bucket (and key) when the stack is deleted."""
    reserve_concurrency: bool = True
    """Reserve Lambda concurrency (needs account headroom: new accounts may have none)."""
    coordinator_memory: int = 1024
    """The coordinator function's memory in MB, and so its CPU (Lambda gives one vCPU at
    1,769 MB). Its ticks are CPU work between S3 calls: at high rates a share of a vCPU slows
    dispatch; it runs whenever a queue is busy, so its memory is a monthly cost
    (docs/performance.md, session 19)."""
    trace_calls: bool = False
    """X-Ray subsegments for each handler and S3 call (Powertools' Tracer, which imports the
    X-Ray SDK at every cold start); Lambda's own segments are recorded either way."""
    powertools_layer_version: int = 27
    powertools_layer_arn: str = ""
    """A Powertools layer ARN to use instead of AWS's public one (partitions it is not in)."""

    def __post_init__(self) -> None:
        checks = (
            (STACK_NAME, "stack_name", "a letter, then up to 39 of [A-Za-z0-9-]"),
            (_PREFIX, "prefix", "segments of [A-Za-z0-9_.-] joined by '/'"),
            (_SCHEDULE, "schedule", "rate(1 minute), rate(N minutes|hours|days) or cron(6 fields)"),
            (_ARN, "powertools_layer_arn", "a Lambda layer version ARN, or empty"),
            (_BUCKET_NAME_PREFIX, "bucket_name_prefix", "up to 30 of [a-z0-9-]"),
            (_EMAIL, "alarm_email", "an e-mail address, or empty"),
        )
        for pattern, name, expected in checks:
            value = getattr(self, name)
            if not pattern.fullmatch(value):
                raise ConfigError(f"context {context_key(name)}={value!r}: expected {expected}")
        days = ("ids_retention_days", "dlq_retention_days", "idempotency_retention_days")
        for name in (*days, "access_log_retention_days", "oldest_message_alarm_seconds"):
            if getattr(self, name) < 1:
                raise ConfigError(f"context {context_key(name)} must be at least 1")
        if not 128 <= self.coordinator_memory <= 10_240:  # Lambda's range
            key = context_key("coordinator_memory")
            raise ConfigError(f"context {key} must be 128 to 10240 (MB)")

    @property
    def schedule_seconds(self) -> int | None:
        """The interval of a ``rate(...)`` schedule; None for ``cron(...)``."""
        if not self.schedule.startswith("rate("):
            return None
        count, unit = self.schedule[len("rate(") : -1].split()
        return int(count) * _UNIT_SECONDS[unit.removesuffix("s")]

    @classmethod
    def from_context(cls, node: Node) -> DeploymentSettings:
        """The settings from `node`'s context; CLI ``-c`` values arrive as strings."""
        values: dict[str, Any] = {}
        for field in fields(cls):
            raw = node.try_get_context(context_key(field.name))
            if raw is not None:
                values[field.name] = _coerce(field.name, field.type, raw)
        return cls(**values)


def context_key(field_name: str) -> str:
    """``dlq_retention_days`` -> ``s3queue:dlqRetentionDays``."""
    head, *rest = field_name.split("_")
    return CONTEXT_PREFIX + head + "".join(word.capitalize() for word in rest)


def _coerce(name: str, kind: object, raw: object) -> object:
    """`raw` as the field's type (``bool``, ``int`` or ``str``, as annotation text)."""
    text = str(raw).strip()
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
    elif kind == "int":
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if re.fullmatch(r"-?\d+", text):
            return int(text)
    else:
        return text
    raise ConfigError(f"context {context_key(name)}={raw!r}: expected {kind}")

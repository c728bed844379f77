"""What the Lambda functions read from their environment: variable names, the queue map codec.

The core never reads ``os.environ``; the Lambda entry points call ``Environment.from_env`` once
per container.
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from s3queue.contract.settings import DEFAULT_PREFIX, QueueSettings
from s3queue.errors import ConfigError

ENV_BUCKET = "S3QUEUE_BUCKET"
ENV_PREFIX = "S3QUEUE_PREFIX"
ENV_QUEUE = "S3QUEUE_QUEUE"
"""The worker function's queue."""
ENV_QUEUES = "S3QUEUE_QUEUES"
"""The coordinator's queues: `QueueMap.encode` text."""
ENV_SETTINGS = "S3QUEUE_SETTINGS"
"""The worker's queue settings: JSON of `QueueSettings` fields."""
ENV_ENDPOINT_URL = "S3QUEUE_ENDPOINT_URL"
"""Optional S3 endpoint (local S3 servers)."""


@dataclass(frozen=True)
class QueueMap:
    """The coordinator's queues: each one's worker function and settings (``S3QUEUE_QUEUES``).

    Encoded compactly, because Lambda allows 4 KB for all of a function's variables: settings
    as deltas from the defaults with each distinct delta written once, function names after
    their shared ``<stack>_`` head, and the whole zlib-compressed (``zlib:`` + base64) when the
    plain JSON is longer than `PLAIN_LIMIT`.
    """

    functions: dict[str, str] = field(default_factory=dict)
    settings: dict[str, QueueSettings] = field(default_factory=dict)

    def encode(self) -> str:
        head = _shared_head(self.functions)
        profiles: list[dict[str, Any]] = []
        queues: dict[str, Any] = {}
        for queue in sorted(self.functions):
            delta = self.settings.get(queue, QueueSettings()).delta()
            if delta not in profiles:
                profiles.append(delta)
            rest = self.functions[queue][len(head) :]
            index = profiles.index(delta)
            queues[queue] = index if rest == queue else [index, rest]
        doc = {"v": QUEUE_MAP_VERSION, "head": head, "profiles": profiles, "queues": queues}
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        if len(text) <= PLAIN_LIMIT:
            return text
        return COMPRESSED + base64.b64encode(zlib.compress(text.encode(), 9)).decode()

    @classmethod
    def decode(cls, text: str) -> QueueMap:
        """The map from `encode`'s text; anything else is a `ConfigError` naming the variable."""
        try:
            if text.startswith(COMPRESSED):
                text = zlib.decompress(base64.b64decode(text[len(COMPRESSED) :])).decode()
            doc = json.loads(text or "{}")
            return cls._from_doc(doc) if doc else cls()
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, zlib.error) as exc:
            raise ConfigError(f"{ENV_QUEUES} is not a valid queue map: {exc!r}") from exc

    @classmethod
    def _from_doc(cls, doc: dict[str, Any]) -> QueueMap:
        if doc.get("v") != QUEUE_MAP_VERSION:
            raise ConfigError(f"{ENV_QUEUES}: unknown version {doc.get('v')!r}")
        head, profiles = str(doc["head"]), doc["profiles"]
        functions: dict[str, str] = {}
        settings: dict[str, QueueSettings] = {}
        for queue, entry in doc["queues"].items():
            index, rest = (entry, queue) if isinstance(entry, int) else entry
            functions[queue] = head + str(rest)
            settings[queue] = QueueSettings.from_mapping(profiles[index])
        return cls(functions, settings)


QUEUE_MAP_VERSION = 2
PLAIN_LIMIT = 2048
"""Longer plain JSON is compressed: unreadable in the console, but a hundred queues fit."""
COMPRESSED = "zlib:"


def _shared_head(functions: Mapping[str, str]) -> str:
    """The ``<stack>_`` every name is ``<head><queue>`` of, if they agree; else empty."""
    heads = {name[: -len(queue)] for queue, name in functions.items() if name.endswith(queue)}
    if len(heads) == 1:
        (head,) = heads
        if all(name.startswith(head) for name in functions.values()):
            return head
    return ""


@dataclass(frozen=True)
class Environment:
    """What a Lambda function reads from its environment, once per container."""

    bucket: str
    prefix: str = DEFAULT_PREFIX
    endpoint_url: str | None = None
    queue: str | None = None
    settings: QueueSettings = field(default_factory=QueueSettings)
    queues: QueueMap = field(default_factory=QueueMap)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if env is None else env
        bucket = env.get(ENV_BUCKET)
        if not bucket:
            raise ConfigError(f"{ENV_BUCKET} is not set")
        try:
            settings = json.loads(env.get(ENV_SETTINGS) or "{}")
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{ENV_SETTINGS} is not valid JSON: {exc}") from exc
        return cls(
            bucket=bucket,
            prefix=env.get(ENV_PREFIX) or DEFAULT_PREFIX,
            endpoint_url=env.get(ENV_ENDPOINT_URL) or None,
            queue=env.get(ENV_QUEUE) or None,
            settings=QueueSettings.from_mapping(settings),
            queues=QueueMap.decode(env.get(ENV_QUEUES) or ""),
        )

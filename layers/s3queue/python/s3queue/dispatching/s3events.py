"""S3 Object Created events (EventBridge; low-latency mode): which queue an event says has work.

Apart from service.py because it parses a payload AWS defines, and the serve loop only takes
the queues it names (`hot`); the coordinator Lambda is its one caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

from s3queue.contract.names import queue_of_key


def created_key(event: Mapping[str, Any]) -> str | None:
    """The key of an S3 Object Created event (EventBridge; low-latency mode), else None."""
    key = (event.get("detail") or {}).get("object", {}).get("key")
    return key if isinstance(key, str) else None


def hot_queues(event: Mapping[str, Any], prefix: str) -> set[str]:
    """The queue an Object Created event names: it has work, so `serve` skips its probe."""
    key = created_key(event)
    queue = queue_of_key(prefix, unquote_plus(key)) if key else None
    return {queue} if queue else set()

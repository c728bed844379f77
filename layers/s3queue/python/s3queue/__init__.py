"""S3Queue: distributed worker queues backed by nothing but Amazon S3."""

from typing import TYPE_CHECKING, Any

from s3queue.config import CoordinatorSettings, QueueSettings
from s3queue.errors import (
    AccessDenied,
    BucketNotFound,
    Conflict,
    LeaseLost,
    MalformedMessage,
    PermanentError,
    QueueNotFound,
    S3QueueError,
    StorageError,
)
from s3queue.producer import Queue

if TYPE_CHECKING:
    from s3queue.runtime import run_local


def __getattr__(name: str) -> Any:
    # The local runtime is imported on first use: a Lambda function never needs it, and
    # import time is cold-start time.
    if name == "run_local":
        from s3queue.runtime import run_local  # noqa: PLC0415

        return run_local
    raise AttributeError(f"module 's3queue' has no attribute {name!r}")


__all__ = [
    "AccessDenied",
    "BucketNotFound",
    "Conflict",
    "CoordinatorSettings",
    "LeaseLost",
    "MalformedMessage",
    "PermanentError",
    "Queue",
    "QueueNotFound",
    "QueueSettings",
    "S3QueueError",
    "StorageError",
    "run_local",
]

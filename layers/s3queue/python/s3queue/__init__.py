"""S3Queue: distributed worker queues backed by nothing but Amazon S3.

Handlers need only this module: ``from s3queue import Message, PermanentError``.
"""

from typing import TYPE_CHECKING, Any

from s3queue.batch import Item
from s3queue.config import CoordinatorSettings, QueueSettings
from s3queue.errors import (
    AccessDenied,
    BucketNotFound,
    ConfigError,
    Conflict,
    EndpointUnreachable,
    EnqueueIncomplete,
    HandlerExit,
    HandlerTimeout,
    InvalidArgument,
    InvalidBody,
    InvalidName,
    InvokeFailed,
    LeaseLost,
    MalformedMessage,
    PayloadMissing,
    PermanentError,
    QueueNotFound,
    S3QueueError,
    StorageError,
)
from s3queue.model import Message
from s3queue.producer import Queue

if TYPE_CHECKING:
    from s3queue.local.runtime import run_local


def __getattr__(name: str) -> Any:
    # `s3queue.run_local` is an alias of `s3queue.local.run_local`, kept for code written before
    # the local tools moved. It is imported on first use: the Lambda layer does not ship
    # `s3queue.local`, and import time is cold-start time.
    if name == "run_local":
        from s3queue.local.runtime import run_local  # noqa: PLC0415

        return run_local
    raise AttributeError(f"module 's3queue' has no attribute {name!r}")


__all__ = [
    "AccessDenied",
    "BucketNotFound",
    "ConfigError",
    "Conflict",
    "CoordinatorSettings",
    "EndpointUnreachable",
    "EnqueueIncomplete",
    "HandlerExit",
    "HandlerTimeout",
    "InvalidArgument",
    "InvalidBody",
    "InvalidName",
    "InvokeFailed",
    "Item",
    "LeaseLost",
    "MalformedMessage",
    "Message",
    "PayloadMissing",
    "PermanentError",
    "Queue",
    "QueueNotFound",
    "QueueSettings",
    "S3QueueError",
    "StorageError",
    "run_local",
]

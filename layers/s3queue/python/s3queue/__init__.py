"""S3Queue: distributed worker queues backed by nothing but Amazon S3."""

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
from s3queue.runtime import run_local

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

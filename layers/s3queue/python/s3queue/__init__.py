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

__all__ = [
    "AccessDenied",
    "BucketNotFound",
    "Conflict",
    "CoordinatorSettings",
    "LeaseLost",
    "MalformedMessage",
    "PermanentError",
    "QueueNotFound",
    "QueueSettings",
    "S3QueueError",
    "StorageError",
]

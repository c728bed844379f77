"""S3Queue: distributed worker queues backed by nothing but Amazon S3.

Handlers need only this module: ``from s3queue import Message, PermanentError``.

The tree shows the parts: `s3queue.contract` (what the stack and the functions agree on),
`s3queue.protocol` (keys and every stored document), `s3queue.producing`, `s3queue.dispatching`,
`s3queue.working`, `s3queue.operations`, `s3queue.storage`, `s3queue.common` and
`s3queue.local` (the command line and the local runtime, not shipped in the layer).

Only the exceptions are imported with the package: every other name here is loaded on first
use, so ``import s3queue.contract.settings`` (the CDK app) or a handler's
``from s3queue import Message`` does not load the producer, the operator's calls or storage.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from s3queue.errors import (
    AccessDenied,
    AlreadyDispatched,
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
    MessageNotFound,
    PayloadMissing,
    PermanentError,
    QueueNotFound,
    S3QueueError,
    StorageError,
    Throttled,
)

if TYPE_CHECKING:
    from s3queue.contract.settings import CoordinatorSettings, QueueSettings
    from s3queue.local.runtime import run_local
    from s3queue.message import Message
    from s3queue.producing.batch import Item
    from s3queue.producing.producer import Queue

_LAZY = {
    "CoordinatorSettings": "s3queue.contract.settings",
    "Item": "s3queue.producing.batch",
    "Message": "s3queue.message",
    "Queue": "s3queue.producing.producer",
    "QueueSettings": "s3queue.contract.settings",
    # `s3queue.run_local` is an alias of `s3queue.local.run_local`, kept for code written
    # before the local tools moved: the Lambda layer does not ship `s3queue.local`.
    "run_local": "s3queue.local.runtime",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 's3queue' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AccessDenied",
    "AlreadyDispatched",
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
    "MessageNotFound",
    "PayloadMissing",
    "PermanentError",
    "Queue",
    "QueueNotFound",
    "QueueSettings",
    "S3QueueError",
    "StorageError",
    "Throttled",
    "run_local",
]

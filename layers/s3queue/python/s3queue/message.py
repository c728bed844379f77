"""The message a handler sees: ``from s3queue import Message``."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, BinaryIO, Generic

if TYPE_CHECKING:  # a default (PEP 696) lets a bare `Message` mean `Message[Any]` under mypy
    from typing_extensions import TypeVar

    BodyT = TypeVar("BodyT", default=Any)
else:
    from typing import TypeVar

    BodyT = TypeVar("BodyT")


@dataclass(frozen=True, slots=True)
class Message(Generic[BodyT]):
    """One message as a handler sees it; ``Message[Model]`` declares a typed body (typed.py)."""

    id: str
    body: BodyT
    attempt: int
    """1 + the deliveries of this message known to have started its handler: each failure
    (retry), and each lease expiry while the ticket recorded it as running."""
    enqueued_at: datetime
    group: str | None
    queue: str
    idempotency_key: str
    """Stable across redeliveries and retries: ``<queue>:<id>``."""
    redelivered: bool = False
    """An earlier delivery's lease expired before this message's outcome was recorded: it may
    have run already (whether or not `attempt` counted it)."""
    partition: str | None = None
    """The partition it was enqueued into (``enqueue(partition=)``, or the first folder of an
    ``inbox/<partition>/<name>`` PUT); None for the default partition."""
    attributes: dict[str, str] = field(default_factory=dict)
    """String metadata given at enqueue (``attributes=``), or a plain PUT's ``x-amz-meta-*``."""
    size: int = -1
    """The payload's size in bytes: what `open()` reads (computed from `body` when not given)."""
    opener: Callable[[], BinaryIO] | None = field(default=None, repr=False, compare=False)
    """Opens a stored payload (`enqueue_file`, a large PUT); None when the body is all of it."""

    def __post_init__(self) -> None:
        if self.size < 0:
            object.__setattr__(self, "size", len(body_bytes(self.body)))

    def open(self) -> BinaryIO:
        """A readable binary stream of the payload, read from S3 as you read it (a large one is
        never loaded by the worker); for a body given to `enqueue`, its bytes (JSON-encoded
        unless bytes). Each call opens a new stream from the start: close it when done."""
        if self.opener is not None:
            return self.opener()
        return io.BytesIO(body_bytes(self.body))


def body_bytes(body: Any) -> bytes:
    """A body as bytes: bytes as they are, anything else as compact JSON."""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    return json.dumps(body, separators=(",", ":")).encode()

"""The exception tree of S3Queue.

S3QueueError
 +-- Conflict            an expected lost race: a conditional write or delete did not apply
 +-- StorageError        S3 failed after retries, or answered something unexpected
 |    +-- Throttled      S3 kept answering 503 SlowDown: over the bucket's request rate
 |    +-- BucketNotFound
 |    +-- AccessDenied   wrong or missing credentials, or a policy that forbids the call
 |    +-- EndpointUnreachable
 |    +-- EnqueueIncomplete   enqueue_many stopped part of the way: which messages are durable
 +-- QueueNotFound       an admin call named a queue that has no objects
 +-- MessageNotFound     an admin call named a message id the queue does not hold
 +-- AlreadyDispatched   a cancel came too late: a worker started the message, or it was handled
 +-- ConfigError         a setting with a wrong name, type or value
 +-- InvalidArgument     an argument refused at the door (a delay, a group; also a ValueError)
 |    +-- InvalidName    a queue name or message id that cannot be part of a key
 +-- InvokeFailed        Lambda did not accept a worker invocation
 +-- MalformedMessage    a body that cannot be encoded, or an object that cannot be decoded
 +-- PayloadMissing      a message's payload object is gone (purged, or overwritten in inbox/)
 +-- LeaseLost           a worker's lease on a ticket was taken over; it must stop
 +-- PermanentError      raised by a handler: send the message to the DLQ at once
 |    +-- InvalidBody    a body its handler's model refuses (typed messages): DLQ at once
 +-- HandlerExit         recorded when a handler raised a BaseException (sys.exit(), ...)
 +-- HandlerTimeout      recorded when a handler outlived its invocation's timeout
"""

from __future__ import annotations


class S3QueueError(Exception):
    """Base of every error S3Queue raises."""


class Conflict(S3QueueError):
    """A conditional write lost: the object changed, exists, or is gone (412 / 409)."""


class StorageError(S3QueueError):
    """S3 answered an error that retries did not cure."""


class Throttled(StorageError):
    """S3 kept answering ``503 SlowDown`` (or another throttling code) through every retry: the
    request rate is over what the bucket's partition serves now. Nothing was written; slow
    down and send it again (a producer's backpressure signal; a coordinator waits it out)."""


class Consumed(S3QueueError):
    """A create whose first attempt may have applied was not sent again: the object is gone
    and its writer's `resend_if` says it was consumed since (S3Storage, `Storage.put`)."""


class BucketNotFound(StorageError):
    """The bucket does not exist."""


class AccessDenied(StorageError):
    """Credentials are missing, wrong, or not allowed this call."""


class EndpointUnreachable(StorageError):
    """No S3 server answered at the endpoint."""


class EnqueueIncomplete(StorageError):
    """`enqueue_many` stopped at a failed PUT: which messages are stored and which are not.

    ``durable``: ids of the messages stored; ``not_durable``: ids never written (or checked
    absent); ``unknown``: ids whose object could not be checked either. ``retry``: the items
    (as given) that can be passed to `enqueue_many` again without a duplicate: the not durable
    ones, and unknown ones with an explicit id. The ids are in the order of the writes.
    """

    def __init__(
        self,
        message: str,
        *,
        durable: list[str],
        not_durable: list[str],
        unknown: list[str],
        retry: list[object],
    ) -> None:
        super().__init__(message)
        self.durable, self.not_durable, self.unknown = durable, not_durable, unknown
        self.retry = retry


class QueueNotFound(S3QueueError):
    """No queue of that name exists in the bucket."""


class InvalidArgument(S3QueueError, ValueError):
    """An argument S3Queue refuses before doing anything (e.g. a negative or endless delay)."""


class InvalidName(InvalidArgument):
    """A queue name or message id that cannot be part of a key."""


class MessageNotFound(S3QueueError):
    """An operator's call named a message (or dead letter) id the queue does not hold."""


class AlreadyDispatched(S3QueueError):
    """A cancel lost its race: a worker had started the message's handler, or it was handled.

    ``state`` is what its marker said: ``started`` (running, or its outcome not applied yet)
    or ``done``.
    """

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class ConfigError(S3QueueError):
    """A setting with a wrong name, type or value."""


class InvokeFailed(S3QueueError):
    """Lambda did not accept a worker invocation, or the queue has no worker function."""


class MalformedMessage(S3QueueError):
    """A message body or stored object that cannot be encoded or decoded."""


class PayloadMissing(S3QueueError):
    """A message's payload object is gone or was replaced (purged, or an inbox object
    overwritten while its message was in flight)."""


class LeaseLost(S3QueueError):
    """The worker's lease on a ticket was taken over (fencing): stop without committing."""


class PermanentError(S3QueueError):
    """Raised by a handler to dead-letter the message at once, without retries."""


class InvalidBody(PermanentError):
    """A body that fails validation against its handler's declared model (`s3queue.working.typed`):
    dead-lettered at once with the validation errors, since no retry can change the body."""


class HandlerExit(S3QueueError):
    """A handler raised a BaseException (``sys.exit()``, ``KeyboardInterrupt``, ...): recorded
    as that message's failure and retried, never a dead worker (see `s3queue.working.guard`)."""


class HandlerTimeout(S3QueueError):
    """A handler still ran when its invocation's timeout ran out: that delivery failed."""

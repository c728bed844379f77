"""The retry loop of `S3Storage`: every call in a bounded loop with exponential backoff and full
jitter (`s3queue.common.backoff`), for throttling, 5xx and lost connections; each boto3 error
translated into the tree of `s3queue.errors` (the tables: `responses`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as TransportError

from s3queue.common.backoff import compute_backoff
from s3queue.errors import AccessDenied, EndpointUnreachable, S3QueueError, StorageError
from s3queue.storage.responses import classify
from s3queue.storage.servertime import ServerClock

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], None]

_CREDENTIAL_ERRORS = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError)
_TRANSPORT_ERRORS = (TransportError, HTTPClientError, IncompleteReadError)
_LEAN = {
    "head_object": {"Key"},
    "delete_object": {"Key", "IfMatch"},
    "list_objects_v2": {"Prefix", "MaxKeys", "StartAfter", "Delimiter", "ContinuationToken"},
}
"""The calls `call` sends by the lean path, with the parameters it takes (any other goes by
botocore's path: a ranged GET of `transfers.py`, a copy)."""


@dataclass(slots=True)
class Retrier:
    """Runs one bucket's calls: at most `attempts` tries of a transient failure."""

    client: Any
    bucket: str
    attempts: int = 6
    base_delay: float = 0.1
    max_delay: float = 5.0
    sleep: Sleep = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    watcher: ServerClock | None = None
    """Learns S3's time from every answer's ``Date`` (servertime.py)."""
    lean: Any = None
    """The bucket's lean path (`lean.LeanBucket`), which answers the hot calls it has."""

    def run(
        self,
        operation: str,
        key: str | None,
        call: Callable[[], T],
        *,
        recheck: Callable[[], T | None] | None = None,
    ) -> T:
        """Run `call`, retrying transient failures; raise only `s3queue.errors`. `recheck`, after
        a failure and before a retry, may return the result instead (the call had applied)."""
        attempt = 0
        while True:
            sent = self.watcher.local_ms() if self.watcher is not None else 0
            try:
                result = call()
                if self.watcher is not None:
                    self.watcher.observe_answer(result, sent)
                return result
            except (ClientError, BotoCoreError) as exc:
                if self.watcher is not None and isinstance(exc, ClientError):
                    self.watcher.observe_answer(exc.response, sent)
                error, transient = self.translate(exc, operation, key)
                attempt += 1
                if not transient:
                    raise error from exc
                found = recheck() if recheck is not None else None
                if found is not None:
                    return found
                if attempt >= self.attempts:
                    raise error from exc
                log.debug("%s %s: attempt %d failed, retrying: %s", operation, key, attempt, exc)
            self.sleep(compute_backoff(attempt, self.base_delay, self.max_delay, self.rng))

    def call(self, method: str, key: str | None, **params: Any) -> dict[str, Any]:
        """One client call on this bucket (``get_object``: the operation ``GetObject``), retried
        (`run`)."""
        lean = self.lean is not None and method in _LEAN and params.keys() <= _LEAN[method]
        operation = getattr(self.lean if lean else self.client, method)
        name = "".join(part.title() for part in method.split("_"))
        result: dict[str, Any] = self.run(
            name, key, lambda: operation(Bucket=self.bucket, **params)
        )
        return result

    def translate(
        self, exc: ClientError | BotoCoreError, operation: str, key: str | None
    ) -> tuple[S3QueueError, bool]:
        """The error to raise for `exc`, and whether a retry may cure it."""
        where = f"{operation} s3://{self.bucket}/{key or ''}"
        if isinstance(exc, ClientError):
            return _from_client_error(exc, where, self.bucket)
        if isinstance(exc, _CREDENTIAL_ERRORS):
            return AccessDenied(
                f"no usable AWS credentials for {where} ({exc}): set AWS_PROFILE or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or give the function a role"
            ), False
        if isinstance(exc, _TRANSPORT_ERRORS):
            endpoint = self.client.meta.endpoint_url
            return EndpointUnreachable(
                f"no S3 server answered at {endpoint} for {where}: {exc}; is it running?"
            ), True
        return StorageError(f"{where} failed: {exc}"), False


def _from_client_error(exc: ClientError, where: str, bucket: str) -> tuple[S3QueueError, bool]:
    """Map an S3 error response to our tree (`classify`)."""
    error = exc.response.get("Error", {})
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    message = str(error.get("Message", "")).replace("\n", " ")
    return classify(str(error.get("Code", "")), status, message, where, bucket)

"""`RequestCounter`: S3 requests by billing kind, counted on a boto3 client.

The counter listens to botocore's ``before-send.s3`` event, which fires once per HTTP attempt
just before it goes on the wire: the SDK's own retries are counted (S3 bills each of them), calls
refused before sending (parameter validation, missing credentials) are not. A response injected
by another ``before-send`` handler (a test's fault injection) still counts as one attempt.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from typing import Any

KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "POST", "OTHER")

# Operation -> kind. DeleteObjects is one request however many keys it carries; PUT includes
# the other operations S3 bills at the PUT/COPY/POST/LIST tier when they write an object.
_KIND_OF = {
    "PutObject": "PUT",
    "CopyObject": "PUT",
    "UploadPart": "PUT",
    "UploadPartCopy": "PUT",
    "GetObject": "GET",
    "HeadObject": "HEAD",
    "HeadBucket": "HEAD",
    "ListObjectsV2": "LIST",
    "ListObjects": "LIST",
    "ListObjectVersions": "LIST",
    "ListBuckets": "LIST",
    "DeleteObject": "DELETE",
    "DeleteObjects": "DELETE",
    "CreateMultipartUpload": "POST",
    "CompleteMultipartUpload": "POST",
    "RestoreObject": "POST",
    "SelectObjectContent": "POST",
}

_EVENT = "before-send.s3"
_ids = itertools.count()


def kind_of(operation: str) -> str:
    """The billing kind of an S3 operation name (``PutObject`` -> ``PUT``); unknown -> OTHER."""
    return _KIND_OF.get(operation, "OTHER")


class RequestCounter:
    """Counts the HTTP requests one boto3 S3 client sends; thread-safe."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._unique_id = f"s3queue-metering-{next(_ids)}"
        self._attached = False

    @classmethod
    def attach(cls, client: Any) -> RequestCounter:
        """A new counter, already counting every request `client` sends from now on."""
        counter = cls(client)
        client.meta.events.register(_EVENT, counter._on_send, unique_id=counter._unique_id)
        counter._attached = True
        return counter

    def detach(self) -> None:
        """Stop counting; the counts so far are kept."""
        if self._attached:
            self._client.meta.events.unregister(_EVENT, unique_id=self._unique_id)
            self._attached = False

    def counts(self) -> dict[str, int]:
        """Requests so far by kind; every kind is present, zero or not."""
        with self._lock:
            return {kind: self._counts[kind] for kind in KINDS}

    def total(self) -> int:
        """All requests so far."""
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> dict[str, int]:
        """Zero the counts; return what they were."""
        with self._lock:
            before = {kind: self._counts[kind] for kind in KINDS}
            self._counts.clear()
            return before

    def _on_send(self, event_name: str = "", **_: Any) -> None:
        # event_name is "before-send.s3.<Operation>". Return None: a value would replace the
        # HTTP response.
        kind = kind_of(event_name.rsplit(".", 1)[-1])
        with self._lock:
            self._counts[kind] += 1

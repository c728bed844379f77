"""How S3 answers map onto `s3queue.errors`: pure tables and one classifier, no boto3.

`retry.py` pulls the code, status and message out of botocore's `ClientError` and asks
`classify` what to raise and whether a retry may cure it; `s3.py` reads the fields of an answer
with the small readers below.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from s3queue.errors import (
    AccessDenied,
    BucketNotFound,
    Conflict,
    S3QueueError,
    StorageError,
    Throttled,
)
from s3queue.storage.sending import TOKEN_METADATA

_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
# Throttling: the request rate is over the partition's (besides any 429).
_THROTTLING_CODES = frozenset(
    [
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
    ]
)
# Server-side failures a retry may cure (besides any 5xx).
_TRANSIENT_CODES = _THROTTLING_CODES | frozenset(
    [
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
    ]
)
_DENIED_HINTS = {
    "InvalidAccessKeyId": "this endpoint does not know the access key id: check "
    "AWS_ACCESS_KEY_ID / AWS_PROFILE",
    "SignatureDoesNotMatch": "the secret key does not match the access key id: check "
    "AWS_SECRET_ACCESS_KEY",
    "ExpiredToken": "the session token has expired: refresh the credentials",
    "InvalidToken": "the session token is malformed: refresh the credentials",
    "RequestTimeTooSkewed": "this machine's clock is too far from the server's: sync it (NTP)",
}


class Missing(StorageError):
    """A 404 on a key: callers turn it into None, success or Conflict; never raised to users."""


class AlreadyOwned(StorageError):
    """CreateBucket on a bucket we own already: success for `create_bucket`."""


def classify(
    code: str, status: int, message: str, where: str, bucket: str
) -> tuple[S3QueueError, bool]:
    """The error for an S3 error response, and whether a retry may cure it.

    A 404 on a key becomes the private `Missing`, which callers turn into None or success.
    """
    if code == "ConditionalRequestConflict":
        # 409: a concurrent operation on the key; S3 asks for a retry. Still a Conflict once
        # retries run out, and `settle_*_conflict` then tells a real one from this.
        return Conflict(f"{where}: {code}"), True
    if code in _CONFLICT_CODES or status == 412:
        return Conflict(f"{where}: {code or status}"), False
    if code == "NoSuchBucket":
        return BucketNotFound(
            f"S3 bucket {bucket!r} does not exist: create it, or fix the bucket name or region"
        ), False
    if code in _DENIED_HINTS or code == "AccessDenied" or status == 403:
        hint = _DENIED_HINTS.get(code, f"check that the credentials may access bucket {bucket!r}")
        return AccessDenied(f"S3 refused {where} ({code or status}): {hint}"), False
    if status == 404:
        return Missing(f"{where}: not found"), False
    if code == "BucketAlreadyOwnedByYou":
        return AlreadyOwned(f"{where}: already owned"), False
    text = f"{where} failed: {code} {message} (HTTP {status})"
    if is_throttling(code, status):
        return Throttled(text + ": over S3's request rate; slow down and retry"), True
    transient = code in _TRANSIENT_CODES or status >= 500
    return StorageError(text), transient


def is_throttling(code: str, status: int) -> bool:
    """An answer that says the request rate is over what S3 serves now."""
    return code in _THROTTLING_CODES or status == 429


def unquote(etag: str) -> str:
    return etag.strip('"')


def etag(response: dict[str, Any]) -> str:
    return unquote(str(response["ETag"]))


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def served(response: dict[str, Any]) -> int:
    """S3's time when it answered: the response's ``Date`` header in ms (0 if absent)."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    return _date_ms(str(date)) if date else 0


@functools.lru_cache(maxsize=64)
def _date_ms(date: str) -> int:
    """A ``Date`` header in ms: it changes once a second, and every answer carries one."""
    try:
        return ms(parsedate_to_datetime(date))
    except (TypeError, ValueError):
        return 0


def timestamp(text: str) -> datetime | None:
    """S3's two timestamp forms (ISO 8601 in XML bodies, RFC 1123 in headers) as an aware
    datetime, by the standard library's C parsers; None for any other form. botocore parses
    each one with dateutil, a sixth of the runtime's CPU (a LIST of 1,000 keys has 1,000)."""
    try:
        if text.endswith("Z"):
            moment = datetime.fromisoformat(text)
        elif text.endswith("GMT"):
            moment = parsedate_to_datetime(text)
        else:
            return None
    except (TypeError, ValueError, IndexError):
        return None
    return moment if moment.tzinfo is not None else None


_ROOT = re.compile(rb"\s*(?:<\?xml[^>]*\?>\s*)?<([A-Za-z_][\w.:-]*)[\s/>]")


def plainly_complete(body: bytes) -> bool:
    """A 200 answer's XML body whose root is not ``<Error>`` and which ends with that root's
    closing tag: what botocore checks by parsing every body a second time (a truncated body
    is retried as a 500; S3 embeds some errors in a 200), told here without a parse. False
    means "look closer", not "an error"."""
    root = _ROOT.match(body)
    if root is None or root.group(1) == b"Error":
        return False
    closing = b"</" + root.group(1) + b">"
    return body[-len(closing) - 64 :].rstrip().endswith(closing)


def user_metadata(response: dict[str, Any]) -> dict[str, str]:
    """A response's user metadata without the writer's token."""
    metadata = response.get("Metadata") or {}
    return {str(k).lower(): str(v) for k, v in metadata.items() if k != TOKEN_METADATA}

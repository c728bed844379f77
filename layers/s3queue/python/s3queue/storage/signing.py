"""AWS Signature Version 4 for S3, in headers, as botocore's `S3SigV4Auth` signs: the lean path's
signer (`s3queue.storage.lean`), with the day's signing key kept."""

from __future__ import annotations

import hashlib
import hmac
import threading
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
"""The payload hash of a bodiless request."""


class Signer:
    """AWS Signature Version 4 for S3, in headers, with the day's signing key kept: botocore
    derives it with four HMACs on every request. The result is botocore's `S3SigV4Auth`'s for
    the same request and time (`tests/test_lean_path.py`)."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._keys: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def sign(
        self,
        method: str,
        path: str,
        host: str,
        headers: dict[str, str],
        payload: str,
        credentials: Any,
        now: datetime | None = None,
        query: str = "",
    ) -> None:
        """Add ``X-Amz-Date``, ``X-Amz-Content-SHA256``, the token, and ``Authorization``.
        `query`: the canonical query string (names sorted, names and values encoded as
        `canonical_query` does), sent as it is signed."""
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        headers["X-Amz-Date"] = stamp
        headers["X-Amz-Content-SHA256"] = payload
        if credentials.token:
            headers["X-Amz-Security-Token"] = credentials.token
        signed = {"host": host}
        for name, value in headers.items():
            if name != "Content-Length":
                signed[name.lower()] = " ".join(str(value).split())
        names = sorted(signed)
        lines = (f"{name}:{signed[name]}" for name in names)
        canonical = "\n".join([method, path, query, *lines, ""])
        listed = ";".join(names)
        scope = f"{day}/{self.region}/s3/aws4_request"
        digest = hashlib.sha256(f"{canonical}\n{listed}\n{payload}".encode()).hexdigest()
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{digest}"
        key = self._key(credentials.secret_key, day)
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={listed}, Signature={signature}"
        )

    def _key(self, secret: str, day: str) -> bytes:
        known = self._keys.get((secret, day))
        if known is not None:
            return known
        key = f"AWS4{secret}".encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        with self._lock:
            if len(self._keys) > 8:
                self._keys.clear()
            self._keys[(secret, day)] = key
        return key


def canonical_query(params: dict[str, str]) -> str:
    """A query string as SigV4 canonicalises it: names sorted, names and values encoded with
    only ``A-Z a-z 0-9 - _ . ~`` left as they are."""
    return "&".join(
        f"{quote(name, safe='-_.~')}={quote(value, safe='-_.~')}"
        for name, value in sorted(params.items())
    )

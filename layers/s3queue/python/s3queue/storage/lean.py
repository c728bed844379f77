"""A lean path for the hot calls of `S3Storage`: GetObject, HeadObject, PutObject and
DeleteObject of one key, sent without botocore's generic pipeline (issue 22 item 5).

A botocore call of ~1 ms of CPU spends about half of it on work these four calls do not need:
validating and serialising parameters against the model, resolving the endpoint ruleset,
some twenty event hooks, building an `AWSRequest` and preparing it again, deriving the SigV4
key with four HMACs, and walking the output model. What they need is a URL, a few headers, a
signature, one HTTP exchange and a handful of response headers. So, on the clients
`make_client` builds with an endpoint URL (path-style addressing, one signing region):

    S3Storage.get -> LeanBucket.get_object: URL + headers -> SigV4 (the day's key kept)
                  -> events "before-send.s3.GetObject" (hooks may answer instead)
                  -> the client's own URLLib3Session (its pool, timeouts, proxies, TLS)
                  -> 2xx: a boto3-shaped dict; else ClientError, as botocore raises it

What stays botocore's: the credentials (refreshed by its providers), the HTTP session and its
translation of transport failures, the ``before-send`` event (request counters and fault
injectors see every request), and its standard retry policy (`StandardRetryConditions`, the
same exponential backoff; creates are never resent blind, as `sending.no_blind_resend` asks).
What is dropped: its retry quota, the adaptive rate limiter (clients with
``retry_mode="adaptive"`` keep botocore's path), and the other events. A caller's own client
keeps botocore's path too: only a client registered here by `make_client` goes lean.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import BotoCoreError, ClientError
from botocore.retries.standard import ExponentialBackoff, RetryContext, StandardRetryConditions
from botocore.utils import parse_timestamp

from s3queue.storage.responses import timestamp
from s3queue.storage.sending import TOKEN_METADATA

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_META = "x-amz-meta-"
_ERROR = re.compile(rb"<Code>([^<]*)</Code>(?:.*?<Message>([^<]*)</Message>)?", re.S)


@dataclass(frozen=True)
class Settings:
    """What `make_client` registers for a client it built: the lean path's inputs."""

    credentials: Any
    """botocore `Credentials` (refreshable or not): `get_frozen_credentials` on each call."""
    endpoint: str
    """The endpoint URL, path-style: a key's URL is ``{endpoint}/{bucket}/{key}``."""
    region: str
    attempts: int
    """botocore's total attempts (its ``max_attempts`` + 1): the same retries as its path."""


_registered: weakref.WeakKeyDictionary[Any, Settings] = weakref.WeakKeyDictionary()


def register(client: Any, settings: Settings) -> None:
    """Let `S3Storage` take the lean path on `client` (called by `make_client`)."""
    _registered[client] = settings


def bucket_path(client: Any, bucket: str) -> LeanBucket | None:
    """The lean path for `bucket` on `client`, or None (a client `make_client` did not build,
    one without the HTTP session this relies on: botocore's path)."""
    settings = _registered.get(client)
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    if settings is None or not callable(getattr(session, "send", None)):
        return None
    split = urlsplit(settings.endpoint.rstrip("/"))
    default = {"http": 80, "https": 443}.get(split.scheme)
    host = split.hostname or ""
    if split.port is not None and split.port != default:
        host = f"{host}:{split.port}"
    path = f"{split.path}/{quote(bucket, safe='~')}/"
    return LeanBucket(
        bucket,
        f"{split.scheme}://{split.netloc}",
        host,
        path,
        settings,
        session,
        client.meta.events,
        client.meta.service_model,
    )


@dataclass(frozen=True)
class Body:
    """A read body, read as botocore's `StreamingBody` is."""

    data: bytes

    def read(self) -> bytes:
        return self.data


@dataclass
class LeanBucket:
    """One bucket's hot calls, answered as botocore answers them (boto3-shaped dicts)."""

    bucket: str
    origin: str
    host: str
    path: str
    settings: Settings
    session: Any
    events: Any
    model: Any
    signer: Signer = field(init=False)
    _retryable: StandardRetryConditions = field(init=False)

    def __post_init__(self) -> None:
        self.signer = Signer(self.settings.region)
        self._retryable = StandardRetryConditions(max_attempts=self.settings.attempts)

    def get_object(self, *, Bucket: str, Key: str, IfMatch: str | None = None) -> dict[str, Any]:
        headers = {"If-Match": IfMatch} if IfMatch is not None else {}
        response, answer = self._call("GetObject", "GET", Key, headers)
        answer["Body"] = Body(response.content)
        return answer

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        return self._call("HeadObject", "HEAD", Key, {})[1]

    def put_object(
        self,
        *,
        Bucket: str,
        Key: str,
        Body: bytes,
        IfMatch: str | None = None,
        IfNoneMatch: str | None = None,
        Metadata: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        headers = {f"{_META}{name}": value for name, value in (Metadata or {}).items()}
        if IfMatch is not None:
            headers["If-Match"] = IfMatch
        if IfNoneMatch is not None:
            headers["If-None-Match"] = IfNoneMatch
        # A create is never resent blind: `S3Storage.put` checks first (sending.no_blind_resend).
        once = IfNoneMatch == "*" and f"{_META}{TOKEN_METADATA}" in headers
        return self._call("PutObject", "PUT", Key, headers, bytes(Body), once=once)[1]

    def delete_object(self, *, Bucket: str, Key: str, IfMatch: str | None = None) -> dict[str, Any]:
        headers = {"If-Match": IfMatch} if IfMatch is not None else {}
        return self._call("DeleteObject", "DELETE", Key, headers)[1]

    def _call(
        self,
        operation: str,
        method: str,
        key: str,
        headers: dict[str, str],
        body: bytes = b"",
        *,
        once: bool = False,
    ) -> tuple[AWSResponse, dict[str, Any]]:
        """Send, retrying as botocore's standard mode would; a 2xx's answer, else raise."""
        path = self.path + quote(key, safe="/~")
        attempt = 0
        while True:
            attempt += 1
            response: AWSResponse | None = None
            error: BotoCoreError | None = None
            parsed: dict[str, Any] = {}
            try:
                response = self._send(operation, method, path, dict(headers), body)
                parsed = answer(response)
                if response.status_code < 300:
                    return response, parsed
            except BotoCoreError as exc:
                error = exc
            context = RetryContext(
                attempt_number=attempt,
                operation_model=self.model.operation_model(operation),
                parsed_response=parsed,
                http_response=response,
                caught_exception=error,
            )
            if once or not self._retryable.is_retryable(context):
                if error is not None:
                    raise error
                raise ClientError(parsed, operation)
            time.sleep(ExponentialBackoff().delay_amount(context))

    def _send(
        self, operation: str, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> AWSResponse:
        credentials = self.settings.credentials.get_frozen_credentials()
        payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        if body:
            headers["Content-Length"] = str(len(body))
        self.signer.sign(method, path, self.host, headers, payload, credentials)
        request = AWSPreparedRequest(method, self.origin + path, headers, body or None, False)
        hooks = self.events.emit  # botocore's emitter (not s3queue's events)
        for _, hooked in hooks(f"before-send.s3.{operation}", request=request):
            if hooked is not None:
                return hooked
        sent: AWSResponse = self.session.send(request)
        return sent


def answer(response: AWSResponse) -> dict[str, Any]:
    """What botocore's parser gives for these four calls: the fields `S3Storage` reads, or
    ``Error`` (code and message from the XML body; a bodiless HEAD's: the status)."""
    status = response.status_code
    headers = {str(name).lower(): str(value) for name, value in response.headers.items()}
    meta = {"HTTPStatusCode": status, "HTTPHeaders": headers, "RetryAttempts": 0}
    if status >= 300:
        found = _ERROR.search(response.content or b"")
        if found is not None:
            code, message = found.group(1).decode(), (found.group(2) or b"").decode()
        else:
            code, message = str(status), http.client.responses.get(status, "")
        return {"Error": {"Code": code, "Message": message}, "ResponseMetadata": meta}
    parsed: dict[str, Any] = {"ResponseMetadata": meta}
    if "etag" in headers:
        parsed["ETag"] = headers["etag"]
    if "last-modified" in headers:
        text = headers["last-modified"]
        parsed["LastModified"] = timestamp(text) or parse_timestamp(text)
    if "content-length" in headers:
        parsed["ContentLength"] = int(headers["content-length"])
    metadata = {name[len(_META) :]: value for name, value in headers.items() if name[:11] == _META}
    if metadata or "etag" in headers:
        parsed["Metadata"] = metadata
    return parsed


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
    ) -> None:
        """Add ``X-Amz-Date``, ``X-Amz-Content-SHA256``, the token, and ``Authorization``."""
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
        canonical = "\n".join([method, path, "", *(f"{name}:{signed[name]}" for name in names), ""])
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

"""A lean path for the hot calls of `S3Storage`: GetObject, HeadObject, PutObject and
DeleteObject of one key, and ListObjectsV2 (its answer read by `listing.py`), sent without
botocore's generic pipeline (issue 22 item 5).

A botocore call of ~1 ms of CPU spends about half of it on work these four calls do not need:
validating and serialising parameters against the model, resolving the endpoint ruleset,
some twenty event hooks, building an `AWSRequest` and preparing it again, deriving the SigV4
key with four HMACs, and walking the output model. What they need is a URL, a few headers, a
signature, one HTTP exchange and a handful of response headers. So, on the clients
`make_client` builds (with an endpoint URL: path-style, one signing region; on AWS's own
endpoints: see below):

    S3Storage.get -> LeanBucket.get_object: URL + headers -> SigV4 (the day's key kept)
                  -> events "before-send.s3.GetObject" (hooks may answer instead)
                  -> transport.py: one HTTP/1.1 exchange with the session's settings
                     (its timeouts, pool size, TLS check; botocore's session behind a proxy)
                  -> 2xx: a boto3-shaped dict; else ClientError, as botocore raises it

What stays botocore's: the credentials (refreshed by its providers), the HTTP session and its
translation of transport failures, the ``before-send`` event (request counters and fault
injectors see every request), and its standard retry policy (`StandardRetryConditions`, the
same exponential backoff; creates are never resent blind, as `sending.no_blind_resend` asks).
What is dropped: its retry quota, the adaptive rate limiter (clients with
``retry_mode="adaptive"`` keep botocore's path), and the other events. A caller's own client
keeps botocore's path too: only a client registered here by `make_client` goes lean.

On AWS's own endpoints (no endpoint URL: the Lambda functions) a bucket's URL and signing are
botocore's endpoint ruleset's; `s3queue.storage.endpoints` learns them from botocore once per
bucket, and a bucket S3 says lives in another region is handed back to botocore (`moved`).
"""

from __future__ import annotations

import hashlib
import http.client
import re
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import BotoCoreError, ClientError
from botocore.retries.standard import ExponentialBackoff, RetryContext, StandardRetryConditions
from botocore.utils import parse_timestamp

from s3queue.storage.listing import list_query, listed
from s3queue.storage.responses import timestamp
from s3queue.storage.sending import TOKEN_METADATA
from s3queue.storage.signing import EMPTY_SHA256, Signer
from s3queue.storage.transport import Transport, transport_of

_META = "x-amz-meta-"
_ERROR = re.compile(rb"<Code>([^<]*)</Code>(?:.*?<Message>([^<]*)</Message>)?", re.S)


@dataclass(frozen=True)
class Settings:
    """What `make_client` registers for a client it built: the lean path's inputs."""

    credentials: Any
    """botocore `Credentials` (refreshable or not): `get_frozen_credentials` on each call."""
    endpoint: str | None
    """The endpoint URL, path-style: a key's URL is ``{endpoint}/{bucket}/{key}``. None: AWS's
    own endpoints, each bucket's URL learned from botocore (`s3queue.storage.endpoints`)."""
    region: str
    attempts: int
    """botocore's total attempts (its ``max_attempts`` + 1): the same retries as its path."""


_registered: weakref.WeakKeyDictionary[Any, Settings] = weakref.WeakKeyDictionary()


def register(client: Any, settings: Settings) -> None:
    """Let `S3Storage` take the lean path on `client` (called by `make_client`)."""
    _registered[client] = settings


def registered(client: Any) -> tuple[Settings, Any] | None:
    """What `make_client` registered for `client`, and what sends its lean calls (its HTTP
    session's settings in a `transport.Transport`, or the session itself); None: a client it
    did not build, or one without the HTTP session this relies on (botocore's path)."""
    settings = _registered.get(client)
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    if settings is None or not callable(getattr(session, "send", None)):
        return None
    return settings, transport_of(session)


def bucket_path(client: Any, bucket: str) -> LeanBucket | None:
    """The lean path for `bucket` on a client with an endpoint URL (path-style), or None.
    On AWS's own endpoints, `s3queue.storage.endpoints.lean_path` learns it from botocore."""
    found = registered(client)
    endpoint = found[0].endpoint if found is not None else None
    if found is None or endpoint is None:
        return None
    settings, session = found
    split = urlsplit(endpoint.rstrip("/"))
    path = f"{split.path}/{quote(bucket, safe='~')}/"
    return LeanBucket(
        bucket,
        f"{split.scheme}://{split.netloc}",
        host_of(split.scheme, split.netloc),
        path,
        settings,
        session,
        client.meta.events,
        client.meta.service_model,
    )


def host_of(scheme: str, netloc: str) -> str:
    """The ``host`` SigV4 signs for a URL's netloc, as botocore's signer has it (no default
    port)."""
    split = urlsplit(f"{scheme}://{netloc}")
    default = {"http": 80, "https": 443}.get(scheme)
    host = split.hostname or ""
    if split.port is not None and split.port != default:
        host = f"{host}:{split.port}"
    return host


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
    region: str = ""
    """The region signed for (default: the settings'); on AWS, the one botocore signs for."""
    fallback: Any = None
    """On AWS's endpoints: the botocore client a bucket in another region is handed to."""
    moved: bool = False
    """S3 answered that the bucket lives elsewhere: every call goes to `fallback` since."""
    lists: bool = True
    """LISTs go lean too (on AWS: only if botocore prepares the same LIST, `endpoints`)."""
    signer: Signer = field(init=False)
    _retryable: StandardRetryConditions = field(init=False)

    def __post_init__(self) -> None:
        self.signer = Signer(self.region or self.settings.region)
        self._retryable = StandardRetryConditions(max_attempts=self.settings.attempts)

    def get_object(self, *, Bucket: str, Key: str, IfMatch: str | None = None) -> dict[str, Any]:
        headers = {"If-Match": IfMatch} if IfMatch is not None else {}
        sent = self._call("GetObject", "GET", Key, headers)
        if sent is None:
            return self._botocore("get_object", Bucket=Bucket, Key=Key, IfMatch=IfMatch)
        response, answer = sent
        answer["Body"] = Body(response.content)
        return answer

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        sent = self._call("HeadObject", "HEAD", Key, {})
        return (
            sent[1] if sent is not None else self._botocore("head_object", Bucket=Bucket, Key=Key)
        )

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
        sent = self._call("PutObject", "PUT", Key, headers, bytes(Body), once=once)
        if sent is not None:
            return sent[1]
        params = {"IfMatch": IfMatch, "IfNoneMatch": IfNoneMatch, "Metadata": Metadata}
        return self._botocore("put_object", Bucket=Bucket, Key=Key, Body=Body, **params)

    def delete_object(self, *, Bucket: str, Key: str, IfMatch: str | None = None) -> dict[str, Any]:
        headers = {"If-Match": IfMatch} if IfMatch is not None else {}
        sent = self._call("DeleteObject", "DELETE", Key, headers)
        if sent is not None:
            return sent[1]
        return self._botocore("delete_object", Bucket=Bucket, Key=Key, IfMatch=IfMatch)

    def list_objects_v2(self, *, Bucket: str, **params: Any) -> dict[str, Any]:
        """A LIST (``Prefix``, ``MaxKeys``, ``StartAfter``, ``Delimiter``,
        ``ContinuationToken``), its answer read by `listing.listed`."""
        query = list_query(params)
        sent = self._call("ListObjectsV2", "GET", None, {}, query=query) if self.lists else None
        if sent is None:
            return self._botocore("list_objects_v2", Bucket=Bucket, **params)
        return listed(sent[0].content, sent[1])

    def _botocore(self, method: str, **params: Any) -> dict[str, Any]:
        """The call by botocore's path (its region redirector follows the bucket)."""
        given = {name: value for name, value in params.items() if value is not None}
        result: dict[str, Any] = getattr(self.fallback, method)(**given)
        return result

    def _call(
        self,
        operation: str,
        method: str,
        key: str | None,
        headers: dict[str, str],
        body: bytes = b"",
        *,
        once: bool = False,
        query: str = "",
    ) -> tuple[AWSResponse, dict[str, Any]] | None:
        """Send, retrying as botocore's standard mode would; a 2xx's answer, else raise; None:
        the bucket has moved (the call was refused, so resending it is safe, a create too).
        `key` None: the bucket itself (with a `query`)."""
        if self.moved:
            return None
        path = (self.path.rstrip("/") or "/") if key is None else self.path + quote(key, safe="/~")
        attempt = 0
        while True:
            attempt += 1
            response: AWSResponse | None = None
            error: BotoCoreError | None = None
            parsed: dict[str, Any] = {}
            try:
                response = self._send(operation, method, path, dict(headers), body, query)
                parsed = answer(response)
                if response.status_code < 300:
                    return response, parsed
                if self.fallback is not None and moved(response, parsed, self.signer.region):
                    self.moved = True
                    return None
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
        self,
        operation: str,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        query: str = "",
    ) -> AWSResponse:
        request = self.prepare(method, path, headers, body, query=query)
        hooks = self.events.emit  # botocore's emitter (not s3queue's events)
        for _, hooked in hooks(f"before-send.s3.{operation}", request=request):
            if hooked is not None:
                return hooked
        if isinstance(self.session, Transport):  # a slow read is raced (hedging.py)
            answer: AWSResponse = self.session.send(request, operation)
            return answer
        sent: AWSResponse = self.session.send(request)
        return sent

    def prepare(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        now: datetime | None = None,
        *,
        query: str = "",
    ) -> AWSPreparedRequest:
        """The signed request, as sent (`endpoints` compares it with botocore's)."""
        credentials = self.settings.credentials.get_frozen_credentials()
        payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        if body:
            headers["Content-Length"] = str(len(body))
        self.signer.sign(method, path, self.host, headers, payload, credentials, now, query)
        url = self.origin + path + (f"?{query}" if query else "")
        return AWSPreparedRequest(method, url, headers, body or None, False)


_REDIRECTS = {
    "PermanentRedirect",
    "AuthorizationHeaderMalformed",
    "IllegalLocationConstraintException",
}


def moved(response: AWSResponse, parsed: dict[str, Any], region: str) -> bool:
    """S3's answer that the bucket lives in another region than the one signed for: the
    cases botocore's `S3RegionRedirectorv2` follows (a redirect status, one of its error
    codes, a 400 naming another ``x-amz-bucket-region``)."""
    status = response.status_code
    code = parsed.get("Error", {}).get("Code")
    elsewhere = response.headers.get("x-amz-bucket-region") not in (None, region)
    return status in (301, 302, 307) or code in _REDIRECTS or (status == 400 and elsewhere)


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

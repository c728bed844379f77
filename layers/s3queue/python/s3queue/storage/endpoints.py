"""The lean path on AWS's own endpoints (the Lambda functions): each bucket's URL and signing
learned from botocore, never re-implemented.

On AWS, botocore's endpoint ruleset decides a bucket's URL (virtual-hosted, or path-style for a
name with dots; FIPS, dual-stack, partitions, access points, S3 Express) and its auth schemes
decide the signing (SigV4 for ``s3``, SigV4a, S3 Express session tokens, Object Lambda's own
signing name). So `learn` asks botocore, once per client and bucket: it has the client prepare
each of the four hot calls of one key on a probe key, and a LIST with it as prefix, through its
whole pipeline (the ruleset, the auth schemes, the checksum config, every hook a caller
registered), stops each request once signed, before it is sent (no request leaves the
process), and prepares the same call by the lean path at the same time. The lean path is
taken only if the four agree (and a LIST only if it agrees too): the same method and URL (the
bucket's base + the quoted key; a LIST's query as a set of names and values), the same
headers but botocore's informational ones
(`INFORMATIONAL`), and the same signature: plain SigV4 for ``s3``, in the region botocore signs
for, with the same credentials and payload hash. Anything else fails a comparison and keeps
botocore's path: an S3 Express bucket, an access point or Object Lambda ARN, a multi-region
access point (SigV4a), a flexible checksum, a header a caller's hook adds. A bucket that S3
later says lives in another region goes back to botocore (`lean.moved`), whose redirector
follows it.
"""

from __future__ import annotations

import threading
import weakref
from datetime import UTC, datetime
from typing import Any, NoReturn
from urllib.parse import parse_qsl, quote, urlsplit

from s3queue.storage.lean import LeanBucket, Settings, bucket_path, host_of, registered

PROBE_KEY = "s3queue-lean-probe/ü ~+=&;(x)"
"""The key the calls are prepared for (never sent): characters that quoting could get wrong."""

PROBES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("get_object", {"Key": PROBE_KEY, "IfMatch": '"probe"'}),
    ("head_object", {"Key": PROBE_KEY}),
    (
        "put_object",
        {"Key": PROBE_KEY, "Body": b"probe", "IfNoneMatch": "*", "Metadata": {"s3q-token": "t"}},
    ),
    ("delete_object", {"Key": PROBE_KEY, "IfMatch": '"probe"'}),
    ("list_objects_v2", {"Prefix": PROBE_KEY, "StartAfter": PROBE_KEY, "MaxKeys": 1000}),
)
"""Each hot call, with the parameters `S3Storage` gives it."""

INFORMATIONAL = frozenset(
    {"user-agent", "amz-sdk-invocation-id", "amz-sdk-request", "x-amzn-trace-id", "expect"}
    | {"content-length"}
)
"""Headers botocore sends and does not sign (S3 answers alike without them: the SDK's name,
its retry bookkeeping, Lambda's trace id, ``Expect: 100-continue``), and the body's length,
which the HTTP session sets."""

_learned: weakref.WeakKeyDictionary[Any, dict[str, LeanBucket | None]] = weakref.WeakKeyDictionary()
_capturing = threading.local()


def lean_path(client: Any, bucket: str) -> LeanBucket | None:
    """The lean path for `bucket` on `client` (None: botocore's path): path-style on a client
    `make_client` built with an endpoint URL, learned from botocore on AWS's endpoints."""
    found = registered(client)
    if found is None or found[0].endpoint is not None:
        return bucket_path(client, bucket)
    known = _learned.setdefault(client, {})
    if bucket not in known:  # two threads may both learn: the same answer
        known[bucket] = learn(client, bucket, *found)
    return known[bucket]


class _Captured(Exception):
    """Not an error: how a prepared request is taken out of a call."""

    def __init__(self, request: Any) -> None:
        super().__init__("prepared, not sent")
        self.request = request


class _Preparing(LeanBucket):
    """The lean path that prepares and signs, at botocore's time, and sends nothing."""

    now: datetime | None = None

    def _send(
        self,
        operation: str,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        query: str = "",
    ) -> NoReturn:
        raise _Captured(self.prepare(method, path, headers, body, self.now, query=query))


def learn(client: Any, bucket: str, settings: Settings, session: Any) -> LeanBucket | None:
    """The lean path for `bucket` if it sends what botocore sends for each hot call (but for
    `INFORMATIONAL` headers), else None."""
    if bucket.startswith("arn:") or bucket.endswith(("--x-s3", "--xa-s3")):
        return None  # an ARN or a directory bucket: preparing one may call CreateSession
    theirs = [_botocore_request(client, bucket, name, params) for name, params in PROBES]
    first = theirs[0]
    quoted = quote(PROBE_KEY, safe="/~")
    scope = _scope(first) if first is not None else None
    if first is None or scope is None or not first.url.endswith(quoted):
        return None
    split = urlsplit(first.url[: -len(quoted)])
    fields = {
        "bucket": bucket,
        "origin": f"{split.scheme}://{split.netloc}",
        "host": host_of(split.scheme, split.netloc),
        "path": split.path,
        "settings": settings,
        "session": session,
        "events": client.meta.events,
        "model": client.meta.service_model,
        "region": scope,
        "fallback": client,
    }
    probe = _Preparing(**fields)
    agree = {
        name: _agrees(probe, bucket, name, params, their)
        for (name, params), their in zip(PROBES, theirs, strict=True)
    }
    lists = agree.pop("list_objects_v2")  # a LIST that differs: botocore's, alone
    return LeanBucket(**fields, lists=lists) if all(agree.values()) else None


def _agrees(probe: _Preparing, bucket: str, name: str, params: dict[str, Any], their: Any) -> bool:
    """Whether the lean path prepares what botocore prepared (`their`) for one call."""
    if their is None:
        return False
    probe.now = datetime.strptime(_header(their, "X-Amz-Date"), "%Y%m%dT%H%M%SZ")
    probe.now = probe.now.replace(tzinfo=UTC)
    try:
        getattr(probe, name)(Bucket=bucket, **params)
    except _Captured as captured:
        return _sent(captured.request) == _sent(their)
    return False


def _botocore_request(client: Any, bucket: str, name: str, params: dict[str, Any]) -> Any:
    """The request botocore prepares and signs for one call (None: it could not, or sent)."""
    client.meta.events.register_last("request-created.s3", _capture, unique_id="s3queue-lean-probe")
    _capturing.on = True
    try:
        getattr(client, name)(Bucket=bucket, **params)
    except _Captured as captured:
        return captured.request
    except Exception:  # noqa: BLE001 (no credentials, a refused hook...: botocore's path)
        return None
    finally:
        _capturing.on = False
    return None


def _capture(request: Any, **kwargs: Any) -> None:
    """After botocore's signer (both on ``request-created``): take the request, stop the call."""
    if getattr(_capturing, "on", False):
        raise _Captured(request)


def _scope(request: Any) -> str | None:
    """The region of a plain SigV4 ``s3`` signature (None: any other scheme or service)."""
    auth = _header(request, "Authorization")
    algorithm, _, rest = auth.partition(" Credential=")
    scope = rest.split(",", 1)[0].split("/")
    if algorithm != "AWS4-HMAC-SHA256" or len(scope) != 5 or scope[3:] != ["s3", "aws4_request"]:
        return None
    return scope[2]


def _sent(request: Any) -> tuple[str, str, list[tuple[str, str]], dict[str, str]]:
    """What S3 sees of a request, but for `INFORMATIONAL` headers (the body, by its hash in
    ``X-Amz-Content-SHA256``): its query as a set of names and values (the signature, compared
    too, covers their canonical form)."""
    headers = {
        str(name).lower(): _text(value)
        for name, value in request.headers.items()
        if str(name).lower() not in INFORMATIONAL
    }
    url, _, query = request.url.partition("?")
    return request.method, url, sorted(parse_qsl(query, keep_blank_values=True)), headers


def _header(request: Any, name: str) -> str:
    return _text(request.headers.get(name, ""))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

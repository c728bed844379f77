"""The lean path of the hot calls (`s3queue.storage.lean`) signs as botocore does, is accepted
by a server that checks signatures, answers as botocore's path answers, retries as botocore's
standard mode does (never a create), and is taken only on the clients `make_client` builds.

The error mapping through it is proven by the rest of the suite: `tests/test_s3_storage.py`'s
fault injections and `tests/test_storage_contract.py` run on SeaweedFS through the lean path
(their clients are `make_client`'s), and `TestAwsAnswers` there runs both paths on moto."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import boto3
import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from s3queue.errors import Throttled
from s3queue.local.seaweed import EmbeddedS3
from s3queue.storage import lean
from s3queue.storage.clients import make_client
from s3queue.storage.listing import list_query
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3

KEYS = ["q/msg/0001.json", "a key/with spaces+plus", "ünï/cødé~%2F", "x=y&z;(1)!*'"]
WHEN = datetime(2024, 12, 3, 12, 7, 41, tzinfo=UTC)


@pytest.mark.parametrize("token", [None, "session-token"])
@pytest.mark.parametrize(
    ("method", "key", "headers", "body"),
    [
        ("GET", KEYS[0], {}, b""),
        ("PUT", KEYS[1], {"If-None-Match": "*", "x-amz-meta-s3q-token": "t  1"}, b'{"n": 1}'),
        ("DELETE", KEYS[2], {"If-Match": '"abc"'}, b""),
        ("HEAD", KEYS[3], {}, b""),
    ],
)
def test_the_signature_is_botocores(
    method: str,
    key: str,
    headers: dict[str, str],
    body: bytes,
    token: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN one request, signed by botocore's S3SigV4Auth and by the lean signer, at one time
    credentials = Credentials("AKID", "secret", token)
    bucket = lean.bucket_path(_registered_stub(credentials), "bkt")
    assert bucket is not None
    path = bucket.path + quote(key, safe="/~")
    ours = dict(headers)
    payload = hashlib.sha256(body).hexdigest()
    bucket.signer.sign(method, path, bucket.host, ours, payload, credentials, now=WHEN)
    theirs = AWSRequest(method, bucket.origin + path, dict(headers), body)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: WHEN.replace(tzinfo=None))
    S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(theirs)
    # THEN the Authorization headers are equal
    assert ours["Authorization"] == theirs.headers["Authorization"]
    assert bucket.host == "127.0.0.1:9000"


@pytest.mark.parametrize("token", [None, "session-token"])
def test_a_lists_signature_is_botocores(token: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a LIST with odd values in its query, signed by botocore and by the lean signer
    credentials = Credentials("AKID", "secret", token)
    bucket = lean.bucket_path(_registered_stub(credentials), "bkt")
    assert bucket is not None
    params = {"Prefix": KEYS[1], "StartAfter": KEYS[2], "MaxKeys": 7, "Delimiter": "/"}
    ours = bucket.prepare("GET", "/bkt", {}, b"", WHEN, query=list_query(params))
    theirs = AWSRequest("GET", ours.url, {})
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: WHEN.replace(tzinfo=None))
    S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(theirs)
    # THEN the Authorization headers are equal
    assert ours.headers["Authorization"] == theirs.headers["Authorization"]


def _registered_stub(credentials: Credentials) -> Any:
    client = make_client("http://127.0.0.1:9000", "eu-west-1", credentials=("a", "b"))
    lean.register(client, lean.Settings(credentials, "http://127.0.0.1:9000", "eu-west-1", 1))
    return client


@pytest.fixture(scope="module")
def secured() -> Iterator[EmbeddedS3]:
    """A server that checks every signature (SeaweedFS in open mode accepts any)."""
    with EmbeddedS3(credentials=("good-key", "good-secret"), buckets=["locked"]) as server:
        yield server


def test_a_server_that_checks_signatures_accepts_every_call(secured: EmbeddedS3) -> None:
    # GIVEN the lean path and botocore's, on a server that checks signatures
    fast = S3Storage(secured.make_client(), "locked")
    slow = S3Storage(secured.make_client(lean=False), "locked")
    assert fast._lean is not None and slow._lean is None
    for key in KEYS:
        # WHEN each call goes the lean way, with odd keys, conditions and metadata
        etag = fast.put(key, b"body", if_none_match=True, token="t", metadata={"kind": "k"})
        etag = fast.put(key, b"body2", if_match=etag, token="t2")
        got, head = fast.get(key), fast.head(key)
        # THEN each is accepted and answers as botocore's path answers
        # (but for the Date each answer was served at, which may tick between the two)
        assert _undated(got) == _undated(slow.get(key)) and _undated(head) == _undated(
            slow.head(key)
        )
        assert got is not None and got.body == b"body2" and got.etag == etag
        assert head is not None and head.token == "t2" and head.size == 5
        assert [e.key for e in fast.list(key).entries] == [key]  # a LIST, signed lean
        fast.delete(key, if_match=etag)
        assert slow.head(key) is None and fast.get(key) is None


def _undated(found: Any) -> Any:
    return dataclasses.replace(found, served_ms=0) if found is not None else None


def test_throttling_is_retried_as_botocore_retries_but_never_a_create(
    seaweed: EmbeddedS3, bucket: str, injector: Callable[..., Any]
) -> None:
    inject = injector
    client = seaweed.make_client(sdk_retries=2)
    store = S3Storage(client, bucket, sleep=lambda _: None)
    # GIVEN two SlowDowns: botocore's standard policy retries them (backoff), then the PUT lands
    slowdown = inject(client, "PutObject", 503, "SlowDown", times=2)
    etag = store.put("k", b"x")
    assert slowdown.injected == 2 and store.head("k") is not None and etag
    # GIVEN a create answered SlowDown: never resent by the client, `put` checks first
    create = inject(client, "PutObject", 503, "SlowDown", times=1)
    sent: list[str] = []
    client.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.method))
    store.put("new", b"x", if_none_match=True, token="t")
    assert create.injected == 1 and sent == ["PUT", "HEAD", "PUT"]
    # GIVEN more SlowDowns than the client's attempts: Throttled for S3Storage's loop
    inject(client, "HeadObject", 503, "SlowDown", times=100)
    with pytest.raises(Throttled):
        S3Storage(client, bucket, attempts=1).head("k")


def test_only_the_clients_make_client_builds_go_lean() -> None:
    endpoint = "http://127.0.0.1:9"
    plain = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="a",
        aws_secret_access_key="b",
    )  # fmt: skip
    assert lean.bucket_path(plain, "b") is None  # a caller's own client: botocore's path
    assert lean.bucket_path(make_client(endpoint, credentials=("a", "b")), "b") is not None
    assert lean.bucket_path(make_client(endpoint, credentials=("a", "b"), lean=False), "b") is None
    adaptive = make_client(endpoint, credentials=("a", "b"), retry_mode="adaptive")
    assert lean.bucket_path(adaptive, "b") is None  # its rate limiter lives in botocore's retries
    aws = make_client(region="us-east-1", credentials=("a", "b"))
    assert lean.bucket_path(aws, "b") is None  # AWS's endpoints: learned (test_lean_aws.py)


def test_a_list_goes_lean_and_answers_as_botocores(
    seaweed: EmbeddedS3, bucket: str, injector: Callable[..., Any]
) -> None:
    # GIVEN odd keys (spaces, plus, non-ASCII, percent, ampersand) in folders, and two clients
    client = seaweed.make_client()
    fast, slow = S3Storage(client, bucket), S3Storage(seaweed.make_client(lean=False), bucket)
    keys = [f"{folder}/{key}" for folder in ("f a", "f+b", "fü") for key in KEYS]
    for key in keys:
        fast.put(key, b"x" * len(key))
    sent: list[str] = []
    client.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.url))
    # WHEN the same LISTs go the lean way and botocore's: whole, in pages, after a key, folders
    for prefix in ("", "f a/", "f+b/", "fü/"):
        assert _listed(fast, prefix) == _listed(slow, prefix)
        for after in keys:
            assert _listed(fast, prefix, after, 2) == _listed(slow, prefix, after, 2)
    assert fast.list_folders("") == slow.list_folders("") == ("f a/", "f+b/", "fü/")
    # THEN each answer is botocore's, and the lean client sent every LIST itself (its query
    # in canonical order; botocore's starts with list-type)
    names = [[part.split("=")[0] for part in url.split("?")[1].split("&")] for url in sent]
    assert names and all(n == sorted(n) and n[0] != "list-type" for n in names)
    assert len(_listed(fast, "")[0]) == len(keys)
    # AND a body cut short is retried (a 500), never read as a shorter list
    whole = _listed(fast, "")
    cut = injector(client, "ListObjectsV2", 200, body="<ListBucketResult><Contents><Key>a")
    assert _listed(fast, "") == whole and cut.injected == 1


def _listed(
    store: S3Storage, prefix: str, after: str | None = None, limit: int = 1000
) -> tuple[list[tuple[str, str, int, int]], bool]:
    page = store.list(prefix, start_after=after, limit=limit)
    entries = [(e.key, e.etag, e.size, e.last_modified_ms) for e in page.entries]
    return entries, page.truncated

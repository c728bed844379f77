"""The lean path on AWS's own endpoints (`s3queue.storage.endpoints`): each bucket's URL and
signing learned from botocore, taken only where botocore would send the same request.

No request leaves the process: moto's `mock_aws` answers at botocore's ``before-send``, which
the lean path emits too, so a client with no endpoint URL (as in Lambda) runs end to end."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from moto import mock_aws
from s3queue.storage import endpoints, lean
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

KEYS = ["q/msg/0001.json", "a key/with spaces+plus", "ünï/cødé~%2F", "x=y&z;(1)!*'"]
WHEN = datetime(2024, 12, 3, 12, 7, 41, tzinfo=UTC)
REGIONS = ["us-east-1", "eu-west-1"]
BUCKETS = ["bkt", "my.dotted.bkt"]  # virtual-hosted, and path-style (dots: TLS)


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def _clients(region: str) -> tuple[Any, Any]:
    """A client that goes lean and one that does not, on the same (moto) account."""
    fast = make_client(region=region, credentials=("AKID", "secret"))
    slow = make_client(region=region, credentials=("AKID", "secret"), lean=False)
    return fast, slow


@pytest.mark.parametrize("bucket", BUCKETS)
@pytest.mark.parametrize("region", REGIONS)
def test_answers_and_errors_are_botocores(region: str, bucket: str, aws: None) -> None:
    # GIVEN the lean path and botocore's, on AWS's endpoint of one region
    fast, slow = _clients(region)
    S3Storage(slow, bucket).create_bucket()
    hot = endpoints.lean_path(fast, bucket)
    assert hot is not None and endpoints.lean_path(slow, bucket) is None
    for key in KEYS:
        # WHEN each hot call goes both ways, with odd keys, conditions and metadata
        made = hot.put_object(Bucket=bucket, Key=key, Body=b"body", Metadata={"kind": "k"})
        same = slow.put_object(Bucket=bucket, Key=key + "2", Body=b"body", Metadata={"kind": "k"})
        # THEN the answers are botocore's: ETag, LastModified, metadata, size, body
        assert made["ETag"] == same["ETag"]
        for call in ("get_object", "head_object"):
            ours = getattr(hot, call)(Bucket=bucket, Key=key)
            theirs = getattr(slow, call)(Bucket=bucket, Key=key)
            assert _fields(ours) == _fields(theirs)
            if call == "get_object":
                assert ours["Body"].read() == theirs["Body"].read() == b"body"
        # AND its errors are botocore's: NoSuchKey, 404, 412
        etag = made["ETag"]
        for call, params in [
            ("get_object", {"Key": "missing"}),
            ("head_object", {"Key": "missing"}),
            ("get_object", {"Key": key, "IfMatch": '"0"'}),
            ("put_object", {"Key": key, "Body": b"x", "IfMatch": '"0"'}),
            ("put_object", {"Key": key, "Body": b"x", "IfNoneMatch": "*"}),
            ("delete_object", {"Key": key, "IfMatch": '"0"'}),
        ]:
            assert _error(hot, call, bucket, params) == _error(slow, call, bucket, params)
        # AND its LISTs are botocore's: keys, pages, a start after a key, folders
        for params in (
            {"Prefix": ""},
            {"Prefix": key[:3], "MaxKeys": 1},
            {"Prefix": "", "StartAfter": key},
            {"Prefix": "", "Delimiter": "/"},
        ):
            assert _list(hot, bucket, params) == _list(slow, bucket, params)
        hot.delete_object(Bucket=bucket, Key=key, IfMatch=etag)
        assert _error(slow, "head_object", bucket, {"Key": key}) == ("404", 404)
    missing = endpoints.lean_path(fast, "no-such-bucket-here")
    assert missing is not None
    theirs = _error(slow, "list_objects_v2", "no-such-bucket-here", {})
    assert _error(missing, "list_objects_v2", "no-such-bucket-here", {}) == theirs


def _list(client: Any, bucket: str, params: dict[str, Any]) -> tuple[Any, ...]:
    answer = client.list_objects_v2(Bucket=bucket, **params)
    contents = [
        (c["Key"], c["ETag"], c["Size"], c["LastModified"]) for c in answer.get("Contents", [])
    ]
    prefixes = [p["Prefix"] for p in answer.get("CommonPrefixes", [])]
    token = answer.get("NextContinuationToken") is not None
    return contents, prefixes, answer["IsTruncated"], token


def _fields(answer: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(answer.get(name) for name in ("ETag", "LastModified", "Metadata", "ContentLength"))


def _error(client: Any, call: str, bucket: str, params: dict[str, Any]) -> tuple[str, int]:
    with pytest.raises(ClientError) as raised:
        getattr(client, call)(Bucket=bucket, **params)
    response = raised.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.mark.parametrize("bucket", BUCKETS)
@pytest.mark.parametrize("region", REGIONS)
def test_the_request_is_botocores_but_for_the_sdks_own_headers(
    region: str, bucket: str, aws: None
) -> None:
    # GIVEN botocore's prepared request and the lean one for the same call, as each is sent
    fast, slow = _clients(region)
    S3Storage(slow, bucket).create_bucket()
    hot = endpoints.lean_path(fast, bucket)
    assert hot is not None
    sent: dict[str, list[Any]] = {"fast": [], "slow": []}
    for name, client in (("fast", fast), ("slow", slow)):
        seen = sent[name]
        client.meta.events.register_first(
            "before-send.s3", lambda request, s=seen, **_: s.append(request)
        )
    for key in KEYS:
        for client in (hot, slow):
            made = client.put_object(Bucket=bucket, Key=key, Body=b"b", Metadata={"m": "1"})
            client.head_object(Bucket=bucket, Key=key)
            client.delete_object(Bucket=bucket, Key=key, IfMatch=made["ETag"])
    # THEN the URL and host are botocore's, and so is every header but the SDK's own
    assert len(sent["fast"]) == len(sent["slow"]) == 3 * len(KEYS)
    for ours, theirs in zip(sent["fast"], sent["slow"], strict=True):
        assert ours.url == theirs.url and ours.method == theirs.method
        assert hot.host == urlsplit(theirs.url).netloc
        skipped = endpoints.INFORMATIONAL | {"authorization", "x-amz-date"}
        assert _headers(ours, skipped) == _headers(theirs, skipped)


def _headers(request: Any, skipped: frozenset[str] | set[str]) -> dict[str, str]:
    return {
        str(name).lower(): value.decode() if isinstance(value, bytes) else str(value)
        for name, value in request.headers.items()
        if str(name).lower() not in skipped
    }


@pytest.mark.parametrize("token", [None, "session-token"])
@pytest.mark.parametrize("region", REGIONS)
def test_the_signature_is_s3sigv4auths_for_the_virtual_host(
    region: str, token: str | None, monkeypatch: pytest.MonkeyPatch, aws: None
) -> None:
    # GIVEN the learned path of a virtual-hosted bucket, and botocore's S3SigV4Auth, at one time
    hot = endpoints.lean_path(_clients(region)[0], "bkt")
    assert hot is not None and hot.host.startswith("bkt.s3.") and hot.path == "/"
    credentials = Credentials("AKID", "secret", token)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: WHEN.replace(tzinfo=None))
    for key in KEYS:
        path = hot.path + quote(key, safe="/~")
        headers = {"If-None-Match": "*", "x-amz-meta-s3q-token": "t  1"}
        ours = dict(headers)
        payload = botocore.auth.sha256(b"x").hexdigest()
        hot.signer.sign("PUT", path, hot.host, ours, payload, credentials, now=WHEN)
        theirs = AWSRequest("PUT", hot.origin + path, dict(headers), b"x")
        S3SigV4Auth(credentials, "s3", region).add_auth(theirs)
        # THEN the Authorization headers are equal
        assert ours["Authorization"] == theirs.headers["Authorization"]


def test_learning_sends_nothing_and_follows_botocores_endpoint_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN no server at all, and a hook that sees every request the client would send
    monkeypatch.setenv("AWS_USE_FIPS_ENDPOINT", "true")
    client = make_client(region="us-east-2", credentials=("AKID", "secret"))
    sent: list[Any] = []
    client.meta.events.register_first("before-send.s3", lambda request, **_: sent.append(request))
    # WHEN the lean path is learned for a bucket (FIPS: a ruleset choice, not ours)
    hot = endpoints.lean_path(client, "bkt")
    # THEN it is botocore's FIPS host, and nothing was sent
    assert hot is not None and hot.origin == "https://bkt.s3-fips.us-east-2.amazonaws.com"
    assert sent == []
    assert endpoints.lean_path(client, "bkt") is hot  # learned once per client and bucket


def _registered(config: Config, credentials: Any = None) -> Any:
    """A client of botocore's own making, registered for the lean path as `make_client` does."""
    client = boto3.session.Session().client(
        "s3", region_name="us-east-1", aws_access_key_id="AKID", aws_secret_access_key="secret",
        config=config,
    )  # fmt: skip
    signing = credentials or Credentials("AKID", "secret")
    lean.register(client, lean.Settings(signing, None, "us-east-1", 6))
    return client


def test_what_botocore_sends_otherwise_keeps_its_path() -> None:
    plain = Config(
        request_checksum_calculation="when_required", response_checksum_validation="when_required"
    )
    assert endpoints.lean_path(_registered(plain), "bkt") is not None  # the control
    # An access point ARN, an S3 Express directory bucket: never prepared (CreateSession)
    arn = "arn:aws:s3:us-east-1:123456789012:accesspoint/ap"
    assert endpoints.lean_path(_registered(plain), arn) is None
    assert endpoints.lean_path(_registered(plain), "dir--use1-az4--x-s3") is None
    # botocore's default flexible checksums: a CRC32 and an unsigned payload on every PUT, and
    # a GET asking for the object's checksum (x-amz-checksum-mode)
    for sent, read in [("when_supported", "when_required"), ("when_required", "when_supported")]:
        checksums = Config(request_checksum_calculation=sent, response_checksum_validation=read)
        assert endpoints.lean_path(_registered(checksums), "bkt") is None
    # Other credentials than the client signs with: another signature
    assert endpoints.lean_path(_registered(plain, Credentials("OTHER", "s")), "bkt") is None
    # A header a caller's hook adds to a call
    hooked = make_client(region="us-east-1", credentials=("AKID", "secret"))
    hooked.meta.events.register(
        "before-call.s3.PutObject",
        lambda params, **_: params["headers"].update({"x-amz-expected-bucket-owner": "1"}),
    )
    assert endpoints.lean_path(hooked, "bkt") is None
    # ... to a LIST alone: the other calls go lean, a LIST by botocore's path
    hooked = make_client(region="us-east-1", credentials=("AKID", "secret"))
    hooked.meta.events.register(
        "before-call.s3.ListObjectsV2",
        lambda params, **_: params["headers"].update({"x-amz-expected-bucket-owner": "1"}),
    )
    learned = endpoints.lean_path(hooked, "bkt")
    assert learned is not None and not learned.lists
    assert endpoints.lean_path(_registered(plain), "bkt2").lists  # type: ignore[union-attr]


def test_a_list_botocore_prepares_otherwise_goes_its_way(aws: None) -> None:
    # GIVEN a bucket whose LISTs botocore prepares otherwise than the lean path would
    client = make_client(region="us-east-1", credentials=("AKID", "secret"))
    client.meta.events.register(
        "before-call.s3.ListObjectsV2",
        lambda params, **_: params["headers"].update({"x-amz-request-payer": "requester"}),
    )
    S3Storage(client, "bkt").create_bucket()
    sent: list[str] = []
    client.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.url))
    # WHEN S3Storage puts and lists through it
    store = S3Storage(client, "bkt")
    store.put("k", b"x")
    # THEN the PUT went lean and the LIST by botocore's path, with its header, and answered
    assert [e.key for e in store.list("").entries] == ["k"]
    assert store._lean is not None and not store._lean.lists
    assert sent[-1].split("?")[1].startswith("list-type=2")  # botocore's order, not canonical


def test_a_bucket_in_another_region_goes_back_to_botocore(aws: None) -> None:
    # GIVEN the lean path, and S3 answering its next GET that the bucket lives elsewhere
    fast, slow = _clients("eu-west-1")
    S3Storage(slow, "bkt").create_bucket()
    store = S3Storage(fast, "bkt")
    store.put("k", b"v")
    seen: list[Any] = []

    def moved(request: Any, **_: Any) -> AWSResponse | None:
        seen.append(request)
        if len(seen) > 1:
            return None
        body = b"<Error><Code>PermanentRedirect</Code><Message>elsewhere</Message></Error>"
        return AWSResponse(request.url, 301, {}, _Raw(body))

    fast.meta.events.register_first("before-send.s3", moved)
    # WHEN it is read: THEN the read is botocore's (its redirector follows), and so is the next
    got = store.get("k")
    assert got is not None and got.body == b"v" and store._lean is not None and store._lean.moved
    assert store.put("k", b"w", if_match=got.etag) and store.head("k") is not None
    assert [_has_sdk_header(r) for r in seen] == [False, True, True, True]


def _has_sdk_header(request: Any) -> bool:
    return "amz-sdk-invocation-id" in {str(name).lower() for name in request.headers}


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body

"""The cheaper steps of the S3 client the library makes (`s3queue.storage.clients`) give what
botocore's own give: parsed answers equal to its parser's, a 200's hidden error or truncated
body still turned into a 500 to retry, timestamps equal to dateutil's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import HeadersDict
from botocore.parsers import RestXMLParser
from botocore.utils import parse_timestamp
from s3queue.storage import parsing
from s3queue.storage.clients import make_client
from s3queue.storage.parsing import LeanXMLParser, check_200, parse_time
from s3queue.storage.responses import plainly_complete, timestamp

S3 = botocore.session.get_session().get_service_model("s3")
XMLNS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def _contents(n: int) -> str:
    return (
        f"<Contents><Key>q/msg/{n:04d}.json</Key>"
        "<LastModified>2024-12-03T12:07:41.123Z</LastModified>"
        "<ETag>&#34;0123456789abcdef&#34;</ETag><Size>123</Size>"
        "<Owner><ID>0</ID><DisplayName></DisplayName></Owner>"
        "<StorageClass>STANDARD</StorageClass></Contents>"
    )


def _listing(keys: int, folders: int = 0, truncated: bool = False) -> bytes:
    prefixes = "".join(
        f"<CommonPrefixes><Prefix>f{i}/</Prefix></CommonPrefixes>" for i in range(folders)
    )
    return (
        f"{HEAD}<ListBucketResult {XMLNS}><Name>b</Name><Prefix>q/</Prefix><MaxKeys>1000</MaxKeys>"
        f"<IsTruncated>{str(truncated).lower()}</IsTruncated>"
        f"{''.join(_contents(n) for n in range(keys))}{prefixes}"
        f"<NextContinuationToken>tok</NextContinuationToken><KeyCount>{keys}</KeyCount>"
        "</ListBucketResult>"
    ).encode()


DELETED = (
    f"{HEAD}<DeleteResult {XMLNS}><Deleted><Key>a</Key></Deleted>"
    "<Error><Key>b</Key><Code>PreconditionFailed</Code><Message>m</Message></Error>"
    "</DeleteResult>"
).encode()
FAILED = (
    f"{HEAD}<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    "<RequestId>r</RequestId><HostId>h</HostId></Error>"
).encode()
OBJECT_HEADERS = {
    "Date": "Tue, 03 Dec 2024 12:07:41 GMT",
    "Last-Modified": "Tue, 03 Dec 2024 12:07:40 GMT",
    "ETag": '"abc"',
    "Content-Length": "10",
    "Content-Type": "application/octet-stream",
    "Accept-Ranges": "bytes",
    "x-amz-meta-s3q-token": "t",
    "X-Amz-Meta-Kind": "k",
    "x-amz-request-id": "r",
    "x-amz-delete-marker": "false",
    "x-amz-missing-meta": "2",
}

ANSWERS: list[tuple[str, int, dict[str, str], bytes]] = [
    ("ListObjectsV2", 200, {"x-amz-request-id": "r"}, _listing(3, folders=2, truncated=True)),
    ("ListObjectsV2", 200, {}, _listing(1)),
    ("ListObjectsV2", 200, {}, _listing(0, folders=1)),
    ("DeleteObjects", 200, {}, DELETED),
    ("GetObject", 200, OBJECT_HEADERS, b"0123456789"),
    ("HeadObject", 200, OBJECT_HEADERS, b""),
    ("PutObject", 200, {"ETag": '"e2"', "x-amz-request-id": "r"}, b""),
    ("PutObject", 412, {}, FAILED.replace(b"SlowDown", b"PreconditionFailed")),
    ("GetObject", 503, {"x-amz-request-id": "r"}, FAILED),
]


def _parse(
    parser: RestXMLParser, operation: str, status: int, headers: dict[str, str], body: bytes
) -> Any:
    response = {"status_code": status, "headers": HeadersDict(headers), "body": body}
    parsed = parser.parse(response, S3.operation_model(operation).output_shape)
    parsed.pop("Body", None)  # a stream, where botocore makes one
    return parsed


@pytest.mark.parametrize(("operation", "status", "headers", "body"), ANSWERS)
def test_lean_parser_parses_as_botocore_does(
    operation: str, status: int, headers: dict[str, str], body: bytes
) -> None:
    # GIVEN botocore's own parser (dateutil timestamps) and ours
    # WHEN each parses the same answer, twice (the second from the planned shapes)
    theirs = _parse(RestXMLParser(), operation, status, headers, body)
    for _ in range(2):
        ours = _parse(LeanXMLParser(timestamp_parser=parse_time), operation, status, headers, body)
        # THEN the results are equal, timestamps as instants
        assert ours == theirs


def test_the_clients_we_make_use_the_lean_parser() -> None:
    client = make_client("http://127.0.0.1:9")
    factory = client._endpoint._response_parser_factory
    assert isinstance(factory.create_parser("rest-xml"), LeanXMLParser)


def test_botocore_still_has_every_private_name_the_lean_parser_relies_on() -> None:
    # A botocore upgrade that renames one fails here, loudly (the clients then fall back)
    assert parsing.lean_parsing_supported()


def test_a_botocore_without_them_keeps_its_own_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a botocore whose parser lost a name the lean one calls
    monkeypatch.setitem(parsing._RELIED_ON, RestXMLParser, ("_a_name_botocore_renamed",))
    # WHEN a client is made
    client = make_client("http://127.0.0.1:9")
    parser = client._endpoint._response_parser_factory.create_parser("rest-xml")
    # THEN it parses with botocore's own parser
    assert type(parser) is RestXMLParser


def test_each_client_plans_its_own_shapes() -> None:
    # Shapes belong to a client: their plans go with it, not into a cache that outlives it
    first, second = (
        make_client("http://127.0.0.1:9")._endpoint._response_parser_factory.create_parser(
            "rest-xml"
        )
        for _ in range(2)
    )
    assert first._plans is not second._plans and first._bodies is not second._bodies


@pytest.mark.parametrize(
    "text",
    [
        "2024-12-03T12:07:41.000Z",
        "2024-12-03T12:07:41Z",
        "2024-12-03T23:59:59.999Z",
        "Tue, 03 Dec 2024 12:07:41 GMT",
        "1733227661",
        "2024-12-03T12:07:41+02:00",
        "Tue, 03 Dec 2024 12:07:41 +0100",
    ],
)
def test_parse_time_is_botocores(text: str) -> None:
    assert parse_time(text) == parse_timestamp(text)


def test_timestamp_reads_s3s_two_forms_and_leaves_the_rest() -> None:
    moment = datetime(2024, 12, 3, 12, 7, 41, tzinfo=UTC)
    assert timestamp("2024-12-03T12:07:41.000Z") == moment
    assert timestamp("Tue, 03 Dec 2024 12:07:41 GMT") == moment
    assert timestamp("1733227661") is None
    assert timestamp("not a time Z") is None


def test_plainly_complete_only_for_a_whole_body_that_is_no_error() -> None:
    whole = _listing(2)
    assert plainly_complete(whole)
    assert plainly_complete(whole + b"\n")
    assert not plainly_complete(whole[:-5])  # truncated
    assert not plainly_complete(FAILED)
    assert not plainly_complete(b"")
    assert not plainly_complete(b"<!-- comment --><ListBucketResult></ListBucketResult>")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (_listing(2), 200),
        (_listing(2)[:-20], 500),  # a truncated body: retried, as botocore does
        (FAILED, 500),  # S3's error inside a 200
        (DELETED, 200),
    ],
)
def test_check_200_turns_what_botocore_would_into_a_500(body: bytes, status: int) -> None:
    operation = S3.operation_model("ListObjectsV2" if b"ListBucket" in body else "DeleteObjects")
    response = {"status_code": 200, "headers": {}, "body": body}
    check_200(operation_model=operation, response_dict=response)
    assert response["status_code"] == status

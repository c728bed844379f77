"""`listing.list_answer`: a ListObjectsV2 body read straight from its XML, as botocore reads it
(the same answers from a server: `test_lean_path.py`, `test_lean_aws.py`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from s3queue.storage.listing import Truncated, list_answer, list_query

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
PAGE = f"""<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult {NS}><Name>b</Name><Prefix>q%2F</Prefix><KeyCount>2</KeyCount>
<MaxKeys>2</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
<NextContinuationToken>tok+1/2=</NextContinuationToken>
<Contents><Key>q/a+b%2Bc%C3%BC</Key><LastModified>2026-12-05T22:26:48.000Z</LastModified>
<ETag>&quot;e1&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>q/plain</Key><LastModified>2026-12-05T22:26:49.123Z</LastModified>
<ETag>"e2"</ETag><Size>0</Size></Contents>
<CommonPrefixes><Prefix>q/f%20g/</Prefix></CommonPrefixes></ListBucketResult>""".encode()


def test_a_page_reads_as_botocore_gives_it() -> None:
    answer = list_answer(PAGE)
    assert answer["IsTruncated"] is True and answer["KeyCount"] == 2
    assert answer["NextContinuationToken"] == "tok+1/2="  # a token is not decoded
    first, second = answer["Contents"]
    assert first == {
        "Key": "q/a b+cü",  # decoded as botocore decodes: '+' is a space, %2B a plus
        "ETag": '"e1"',
        "Size": 12,
        "LastModified": datetime(2026, 12, 5, 22, 26, 48, tzinfo=UTC),
    }
    assert second["Key"] == "q/plain" and second["Size"] == 0
    assert second["LastModified"] == datetime(2026, 12, 5, 22, 26, 49, 123000, tzinfo=UTC)
    assert answer["CommonPrefixes"] == [{"Prefix": "q/f g/"}]


def test_an_empty_page_and_one_not_url_encoded() -> None:
    empty = list_answer(b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>")
    assert empty == {"IsTruncated": False}
    raw = b"<ListBucketResult><Contents><Key>a+b%20</Key><LastModified>2026-12-05T22:26:48Z"
    raw += b"</LastModified><ETag>e</ETag><Size>1</Size></Contents></ListBucketResult>"
    assert list_answer(raw)["Contents"][0]["Key"] == "a+b%20"  # no EncodingType: as sent


@pytest.mark.parametrize(
    "body",
    [
        PAGE[: len(PAGE) // 2],  # cut in the middle
        b"",
        b"<Error><Code>InternalError</Code></Error>",  # not a list
        b"<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",  # no time
        b"<ListBucketResult><Contents><Key>a</Key><LastModified>2026-12-05T22:26:48Z"
        b"</LastModified><Size>x</Size></Contents></ListBucketResult>",  # no number
    ],
)
def test_what_is_not_a_whole_page_is_truncated(body: bytes) -> None:
    with pytest.raises(Truncated):
        list_answer(body)


def test_the_query_is_canonical() -> None:
    query = list_query({"Prefix": "a b/ü", "MaxKeys": 3, "StartAfter": "x+y~z"})
    assert query == (
        "encoding-type=url&list-type=2&max-keys=3&prefix=a%20b%2F%C3%BC&start-after=x%2By~z"
    )

"""`RequestCounter` counts the requests a client really sends, by billing kind."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from s3queue.errors import Conflict
from s3queue.local.metering import KINDS, RequestCounter, kind_of
from s3queue.local.seaweed import EmbeddedS3
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3


@pytest.fixture
def store(s3_client: Any, bucket: str) -> S3Storage:
    return S3Storage(s3_client, bucket, sleep=lambda _: None)


def test_counts_each_kind(store: S3Storage, s3_client: Any) -> None:
    counter = RequestCounter.attach(s3_client)

    etag = store.put("q/a", b"x")
    store.put("q/b", b"y", if_none_match=True)
    store.get("q/a")
    store.head("q/a")
    store.list("q/")
    store.delete("q/a", if_match=etag)
    store.delete_many(["q/b", "q/c", "q/d"])  # one request for three keys
    store.create_bucket()

    assert counter.counts() == {
        "PUT": 2,
        "GET": 1,
        "HEAD": 1,
        "LIST": 1,
        "DELETE": 2,
        "POST": 0,
        "OTHER": 1,
    }
    assert counter.total() == 8


def test_a_lost_race_costs_its_head(store: S3Storage, s3_client: Any) -> None:
    store.put("q/a", b"x", token="first")
    counter = RequestCounter.attach(s3_client)
    with pytest.raises(Conflict):
        store.put("q/a", b"x", if_none_match=True, token="second")
    # The 412 is checked against the object's token: one PUT, one HEAD.
    assert (counter.counts()["PUT"], counter.counts()["HEAD"]) == (1, 1)


def test_counts_sdk_retries(seaweed: EmbeddedS3, bucket: str, injector: Callable[..., Any]) -> None:
    client = seaweed.make_client(sdk_retries=2)
    # botocore's own backoff sleeps here (up to a second); our loop never runs.
    injector(client, "GetObject", 503, "SlowDown", times=1)
    counter = RequestCounter.attach(client)
    assert S3Storage(client, bucket).get("q/none") is None
    assert counter.counts()["GET"] == 2


def test_reset_returns_and_zeroes(store: S3Storage, s3_client: Any) -> None:
    counter = RequestCounter.attach(s3_client)
    store.list("")
    assert counter.reset()["LIST"] == 1
    assert counter.total() == 0
    assert set(counter.counts()) == set(KINDS)


def test_detach_stops_counting_and_keeps_the_counts(store: S3Storage, s3_client: Any) -> None:
    counter = RequestCounter.attach(s3_client)
    store.list("")
    counter.detach()
    store.list("")
    counter.detach()  # twice is fine
    assert counter.total() == 1


def test_counters_on_one_client_are_independent(store: S3Storage, s3_client: Any) -> None:
    first = RequestCounter.attach(s3_client)
    store.list("")
    second = RequestCounter.attach(s3_client)
    store.list("")
    first.detach()
    store.list("")
    assert (first.total(), second.total()) == (2, 2)


def test_counts_from_many_threads(store: S3Storage, s3_client: Any) -> None:
    counter = RequestCounter.attach(s3_client)
    threads = [
        threading.Thread(target=lambda: [store.head("q/none") for _ in range(5)]) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.counts()["HEAD"] == 40


def test_kind_of_maps_operations() -> None:
    assert [kind_of(op) for op in ("PutObject", "CopyObject", "DeleteObjects")] == [
        "PUT",
        "PUT",
        "DELETE",
    ]
    assert [kind_of(op) for op in ("ListObjectsV2", "CreateMultipartUpload")] == ["LIST", "POST"]
    assert kind_of("CreateBucket") == "OTHER"

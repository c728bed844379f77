"""`S3Storage` beyond the contract: error mapping, retries, lost responses, server deviations.

Faults are injected with a botocore ``before-send`` hook on a real client talking to SeaweedFS
(see `inject` in conftest), so botocore parses real error responses end to end.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import NoCredentialsError
from moto import mock_aws
from s3queue.errors import (
    AccessDenied,
    BucketNotFound,
    Conflict,
    Consumed,
    EndpointUnreachable,
    StorageError,
    Throttled,
)
from s3queue.local.metering import RequestCounter
from s3queue.local.seaweed import EmbeddedS3
from s3queue.storage import new_token
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3

Inject = Callable[..., Any]


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(seaweed: EmbeddedS3) -> Any:
    """A client without botocore's own retries, so each injected error reaches our loop."""
    return seaweed.make_client(sdk_retries=0)


@pytest.fixture
def store(client: Any, bucket: str, sleeps: list[float]) -> S3Storage:
    return S3Storage(client, bucket, sleep=sleeps.append)


class TestMissingBucket:
    @pytest.fixture
    def nowhere(self, shared_s3_client: Any) -> S3Storage:
        return S3Storage(shared_s3_client, "no-such-bucket-s3q", sleep=lambda _: None)

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.get("k"),
            lambda s: s.put("k", b"x"),
            lambda s: s.put("k", b"x", if_none_match=True),
            lambda s: s.delete("k"),
            lambda s: s.delete_many(["k"]),
            lambda s: s.list("q/"),
        ],
        ids=["get", "put", "create", "delete", "delete_many", "list"],
    )
    def test_is_bucket_not_found_naming_the_bucket(
        self, nowhere: S3Storage, call: Callable[[S3Storage], object]
    ) -> None:
        with pytest.raises(BucketNotFound, match="no-such-bucket-s3q"):
            call(nowhere)

    def test_head_cannot_tell_it_from_a_missing_key(self, nowhere: S3Storage) -> None:
        # A HEAD response has no body: S3 answers a bare 404 for both.
        assert nowhere.head("k") is None


class TestCredentials:
    @pytest.fixture(scope="class")
    @classmethod
    def secured(cls) -> Iterator[EmbeddedS3]:
        """A second server that enforces one key pair (SeaweedFS in open mode accepts any)."""
        with EmbeddedS3(credentials=("good-key", "good-secret"), buckets=["locked"]) as server:
            yield server

    @pytest.mark.parametrize(
        ("credentials", "hint"),
        [(("bad-key", "good-secret"), "access key id"), (("good-key", "bad"), "secret key")],
        ids=["unknown-key", "wrong-secret"],
    )
    def test_wrong_credentials_are_access_denied(
        self, secured: EmbeddedS3, credentials: tuple[str, str], hint: str
    ) -> None:
        store = S3Storage(secured.make_client(credentials=credentials), "locked")
        for call in (lambda: store.list(""), lambda: store.put("k", b"x"), lambda: store.head("k")):
            with pytest.raises(AccessDenied) as caught:
                call()
            assert "\n" not in str(caught.value)
        with pytest.raises(AccessDenied, match=hint):
            store.list("")

    def test_right_credentials_work(self, secured: EmbeddedS3) -> None:
        store = S3Storage(secured.make_client(), "locked")
        etag = store.put("k", b"x")
        assert store.list("").entries[0].etag == etag

    def test_missing_credentials_are_access_denied(self, seaweed: EmbeddedS3, bucket: str) -> None:
        # botocore's path (its signer raises); the lean one: tests/test_lean_path.py
        client = seaweed.make_client(sdk_retries=0, lean=False)

        def no_credentials(**_: Any) -> None:
            raise NoCredentialsError()

        client.meta.events.register("before-sign.s3", no_credentials)
        with pytest.raises(AccessDenied, match="AWS_PROFILE"):
            S3Storage(client, bucket).get("k")


def test_unreachable_endpoint_is_retried_then_endpoint_unreachable(sleeps: list[float]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # The port is closed now: connections are refused at once.
    client = make_client(
        f"http://127.0.0.1:{port}", credentials=("k", "s"), sdk_retries=0, connect_timeout=1
    )
    store = S3Storage(client, "b", sleep=sleeps.append)
    with pytest.raises(EndpointUnreachable, match=f"127.0.0.1:{port}"):
        store.get("k")
    assert len(sleeps) == 5


class TestRetries:
    def test_slow_down_is_retried_with_jittered_backoff(
        self, store: S3Storage, client: Any, injector: Inject, sleeps: list[float]
    ) -> None:
        injection = injector(client, "PutObject", 503, "SlowDown", times=3)
        etag = store.put("k", b"x")
        assert injection.injected == 3
        assert (head := store.head("k")) is not None and head.etag == etag
        # Full jitter: attempt n waits uniformly in [0, 0.1 * 2**(n-1)].
        assert len(sleeps) == 3
        assert all(0 <= s <= 0.1 * 2**n for n, s in enumerate(sleeps))

    def test_internal_error_on_get_is_retried(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        store.put("k", b"x")
        injector(client, "GetObject", 500, "InternalError")
        assert (obj := store.get("k")) is not None and obj.body == b"x"

    def test_retries_are_bounded(
        self, store: S3Storage, client: Any, injector: Inject, sleeps: list[float]
    ) -> None:
        injection = injector(client, "ListObjectsV2", 503, "SlowDown", times=100)
        with pytest.raises(StorageError, match="SlowDown") as caught:
            store.list("")
        assert type(caught.value) is Throttled  # the backpressure signal, a StorageError
        assert injection.injected == 6 and len(sleeps) == 5
        assert caught.value.__cause__ is not None

    def test_client_errors_are_not_retried(
        self, store: S3Storage, client: Any, injector: Inject, sleeps: list[float]
    ) -> None:
        injector(client, "PutObject", 400, "InvalidArgument", times=100)
        with pytest.raises(StorageError, match="InvalidArgument"):
            store.put("k", b"x")
        assert sleeps == []


class TestConflicts:
    def test_409_conditional_request_conflict_is_retried(
        self, store: S3Storage, client: Any, injector: Inject, sleeps: list[float]
    ) -> None:
        # S3 answers 409 when a concurrent operation got in the way: nothing was written.
        injector(client, "PutObject", 409, "ConditionalRequestConflict")
        etag = store.put("k", b"x", if_none_match=True)
        assert len(sleeps) == 1
        head = store.head("k")
        assert head is not None and (head.etag, head.token) == (etag, None)

    def test_409_that_persists_is_an_error_not_a_lost_race(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        # A Conflict would tell the caller "it exists": it does not, so that would be a lie.
        injector(client, "PutObject", 409, "ConditionalRequestConflict", times=100)
        with pytest.raises(StorageError) as caught:
            store.put("k", b"x", if_none_match=True)
        assert not isinstance(caught.value, Conflict)
        assert store.head("k") is None

    def test_409_on_a_key_that_really_exists_is_conflict(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        store.put("k", b"theirs", token="theirs")
        injector(client, "PutObject", 409, "ConditionalRequestConflict", times=100)
        with pytest.raises(Conflict):
            store.put("k", b"x", if_none_match=True, token="mine")

    def test_persistent_409_on_an_unchanged_delete_is_an_error(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        etag = store.put("k", b"x")
        injector(client, "DeleteObject", 409, "ConditionalRequestConflict", times=100)
        with pytest.raises(StorageError) as caught:
            store.delete("k", if_match=etag)
        assert not isinstance(caught.value, Conflict)
        assert store.head("k") is not None

    def test_no_such_key_on_conditional_put_is_conflict(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        # AWS answers 404 NoSuchKey to If-Match on a missing key; SeaweedFS answers 412.
        injector(client, "PutObject", 404, "NoSuchKey")
        with pytest.raises(Conflict):
            store.put("k", b"x", if_match="0" * 32)

    def test_412_on_delete_of_a_missing_key_is_success(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        injection = injector(client, "DeleteObject", 412, "PreconditionFailed")
        store.delete("gone", if_match="0" * 32)
        assert injection.injected == 1
        assert store.head("gone") is None

    def test_412_on_delete_of_a_changed_key_is_conflict(self, store: S3Storage) -> None:
        stale = store.put("k", b"x")
        store.put("k", b"y")
        with pytest.raises(Conflict):
            store.delete("k", if_match=stale)  # the server's own 412
        assert store.head("k") is not None


class TestLostResponses:
    """The write applies, its response is lost (503), the retry meets the write itself."""

    def test_lost_create_is_recognised_by_its_token(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        injection = injector(client, "PutObject", 503, "SlowDown", forward=True)
        token = new_token()
        etag = store.put("k", b"x", if_none_match=True, token=token)
        assert injection.injected == 1
        head = store.head("k")
        assert head is not None and (head.etag, head.token) == (etag, token)

    @pytest.mark.parametrize(("status", "code"), [(503, "SlowDown"), (500, "InternalError")])
    def test_a_lost_create_is_confirmed_by_a_head_and_never_resent(
        self, seaweed: EmbeddedS3, bucket: str, injector: Inject, status: int, code: str
    ) -> None:
        """Issue 9.1: the SDK resent a create whose first attempt had applied; the message had
        been handled and deleted meanwhile, so the resend created it again (a second run).
        Now nothing resends a create before a HEAD has shown that it did not apply."""
        # GIVEN botocore's own retries on, as in production, and a create whose response is lost
        client = seaweed.make_client()
        store = S3Storage(client, bucket, sleep=lambda _: None)
        sent: list[str] = []
        client.meta.events.register(
            "before-send.s3", lambda event_name, **_: sent.append(event_name.rsplit(".", 1)[-1])
        )
        injector(client, "PutObject", status, code, forward=True)
        token = new_token()
        # WHEN it is put
        etag = store.put("k", b"x", if_none_match=True, token=token)
        # THEN its own write is recognised by a HEAD at once; the PUT was sent exactly once
        assert sent == ["PutObject", "HeadObject"]
        head = store.head("k")
        assert head is not None and (head.etag, head.token) == (etag, token)

    def test_a_create_that_did_not_apply_is_resent_after_the_head(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        injector(client, "PutObject", 503, "SlowDown")  # refused before it applied
        token = new_token()
        etag = store.put("k", b"x", if_none_match=True, token=token)
        assert (head := store.head("k")) is not None and (head.etag, head.token) == (etag, token)

    @pytest.mark.parametrize("consumed", [True, False])
    def test_a_create_consumed_before_its_recheck_is_not_created_again(
        self, seaweed: EmbeddedS3, bucket: str, injector: Inject, consumed: bool
    ) -> None:
        """The chaos suite's seed 11: a ticket's create applied, its response was lost, and a
        pulling worker claimed, ran and deleted the ticket before the HEAD (itself retried
        after a 503) came back empty; the resend created the ticket a second time. The writer
        now says whether a missing object may be sent again (`resend_if`)."""
        client = seaweed.make_client(sdk_retries=0)
        store = S3Storage(client, bucket, sleep=lambda _: None)
        consumer = S3Storage(seaweed.make_client(), bucket, sleep=lambda _: None)
        injector(client, "PutObject", 503, "SlowDown", forward=True)  # applied, answer lost
        client.meta.events.register(  # a fast consumer deletes it before our recheck
            "before-send.s3.HeadObject", lambda **_: consumer.delete("k")
        )
        asked: list[bool] = []

        def resend_if() -> bool:
            asked.append(True)
            return not consumed

        if consumed:
            with pytest.raises(Consumed):
                store.put("k", b"x", if_none_match=True, token=new_token(), resend_if=resend_if)
            assert consumer.head("k") is None  # not created a second time
        else:  # it says the create never applied: sent again, as before
            store.put("k", b"x", if_none_match=True, token=new_token(), resend_if=resend_if)
            assert consumer.head("k") is not None
        assert asked == [True]

    @pytest.mark.parametrize("guarded", [True, False])
    def test_a_create_written_over_before_its_recheck_is_not_sent_again(
        self, seaweed: EmbeddedS3, bucket: str, injector: Inject, guarded: bool
    ) -> None:
        """A SeaweedFS chaos run (`--seed 200702`, network faults): a ticket's create applied,
        its answer was lost; a pulling worker claimed it (its own token) before the HEAD, then
        ran and deleted it before the resend, which created the ticket again: a second claim
        of generation 0 (`double_claim`). Another writer's token says nothing about whether
        ours applied: a writer with `resend_if` decides, as for a missing object."""
        client = seaweed.make_client(sdk_retries=0)
        store = S3Storage(client, bucket, sleep=lambda _: None)
        consumer = S3Storage(seaweed.make_client(), bucket, sleep=lambda _: None)
        injector(client, "PutObject", 503, "SlowDown", forward=True)  # applied, answer lost
        puts: list[str] = []

        def claim(**_: Any) -> None:  # a fast consumer claims it before our recheck
            head = consumer.head("k")
            assert head is not None
            consumer.put("k", b"claimed", if_match=head.etag, token=new_token())

        def resent(**_: Any) -> None:  # and, guarded, has run and deleted it by a resend
            puts.append("PutObject")
            if guarded and len(puts) == 2:
                consumer.delete("k")

        client.meta.events.register("before-send.s3.HeadObject", claim)
        client.meta.events.register_first("before-send.s3.PutObject", resent)
        if guarded:  # the ticket's writer: never sent again, so never created a second time
            with pytest.raises(Consumed):
                store.put("k", b"x", if_none_match=True, token=new_token(), resend_if=lambda: False)
            assert puts == ["PutObject"]
            got = consumer.get("k")  # the claimed ticket, not created a second time
            assert got is not None and got.body == b"claimed"
        else:  # any other create: sent again, and refused by the other's key
            with pytest.raises(Conflict):
                store.put("k", b"x", if_none_match=True, token=new_token())
            assert puts == ["PutObject", "PutObject"]

    def test_lost_swap_is_recognised_by_its_token(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        base = store.put("k", b"v1", token=new_token())
        injector(client, "PutObject", 500, "InternalError", forward=True)
        etag = store.put("k", b"v2", if_match=base, token=new_token())
        assert (obj := store.get("k")) is not None and (obj.body, obj.etag) == (b"v2", etag)

    def test_lost_create_without_token_is_a_conflict(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        # Why every write carries a token: without one, our own write looks like a rival's.
        injector(client, "PutObject", 503, "SlowDown", forward=True)
        with pytest.raises(Conflict):
            store.put("k", b"x", if_none_match=True)

    def test_lost_conditional_delete_is_success(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        etag = store.put("k", b"x")
        injector(client, "DeleteObject", 503, "SlowDown", forward=True)
        store.delete("k", if_match=etag)
        assert store.head("k") is None


class TestBatches:
    def test_delete_many_sends_one_request_per_thousand_keys(
        self, store: S3Storage, client: Any
    ) -> None:
        real = ["q/0000", "q/1500", "q/2499"]
        for key in real:
            store.put(key, b"x")
        counter = RequestCounter.attach(client)
        store.delete_many(f"q/{i:04d}" for i in range(2500))
        assert counter.counts()["DELETE"] == 3
        assert store.list("q/").entries == []

    def test_delete_many_reports_errors_other_than_no_such_key(
        self, store: S3Storage, client: Any, injector: Inject
    ) -> None:
        body = (
            "<DeleteResult>"
            "<Error><Key>a</Key><Code>NoSuchKey</Code><Message>gone</Message></Error>"
            "<Error><Key>b</Key><Code>AccessDenied</Code><Message>no</Message></Error>"
            "</DeleteResult>"
        )
        injector(client, "DeleteObjects", 200, body=body)
        with pytest.raises(StorageError, match="1 keys, first 'b': AccessDenied"):
            store.delete_many(["a", "b"])

    def test_list_is_one_request_whatever_the_limit(self, store: S3Storage, client: Any) -> None:
        for i in range(5):
            store.put(f"q/{i}", b"x")
        counter = RequestCounter.attach(client)
        assert store.list("q/", limit=2).truncated
        assert len(store.list("q/", limit=5000).entries) == 5
        assert counter.counts()["LIST"] == 2


class TestAwsAnswers:
    """moto answers as AWS does where SeaweedFS deviates (404, not 412, for a missing key)."""

    @pytest.fixture(params=["botocore", "lean", "lean-path-style"])
    def aws(self, request: pytest.FixtureRequest) -> Iterator[S3Storage]:
        """Each path in turn: botocore's and the lean one on AWS's endpoint (virtual-hosted,
        as in Lambda), and the lean one with an endpoint URL (path-style), which moto answers
        as AWS."""
        path_style = request.param == "lean-path-style"
        endpoint = "https://s3.us-east-1.amazonaws.com" if path_style else None
        with mock_aws():
            client = make_client(
                endpoint,
                region="us-east-1",
                credentials=("k", "s"),
                lean=request.param != "botocore",
            )
            store = S3Storage(client, "aws")
            assert (store._lean is not None) == (request.param != "botocore")
            assert store._lean is None or (store._lean.host == "aws.s3.amazonaws.com") != path_style
            store.create_bucket()
            yield store

    def test_if_match_on_missing_key_is_conflict(self, aws: S3Storage) -> None:
        with pytest.raises(Conflict):
            aws.put("k", b"x", if_match="0" * 32)

    def test_conditional_delete_of_missing_key_is_fine(self, aws: S3Storage) -> None:
        aws.put("other", b"x")
        aws.delete("k", if_match="0" * 32)
        assert aws.head("k") is None
        assert [e.key for e in aws.list("").entries] == ["other"]

    def test_create_bucket_twice_is_fine(self, aws: S3Storage) -> None:
        etag = aws.put("k", b"x")
        aws.create_bucket()
        assert (head := aws.head("k")) is not None and head.etag == etag

    def test_start_after_a_folder_name_lists_that_folder(self, aws: S3Storage) -> None:
        # The AWS answer that `S3Storage.list` gives on SeaweedFS too (test_storage_contract).
        for key in ("q/ids/1", "q/inbox/a.json", "q/inbox/b.json", "q/msg/1"):
            aws.put(key, b"x")
        assert [e.key for e in aws.list("q/", start_after="q/inbox").entries] == [
            "q/inbox/a.json",
            "q/inbox/b.json",
            "q/msg/1",
        ]
        page = aws.list("q/", start_after="q/inbox/a.json", limit=1)
        assert [e.key for e in page.entries] == ["q/inbox/b.json"] and page.truncated

    def test_token_recognition(self, aws: S3Storage) -> None:
        token = new_token()
        etag = aws.put("k", b"x", if_none_match=True, token=token)
        assert aws.put("k", b"x", if_none_match=True, token=token) == etag

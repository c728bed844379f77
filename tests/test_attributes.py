"""Message attributes (issue 14 item 2): given at enqueue or as a plain PUT's metadata, checked at
the door, and kept through retries, the dead-letter queue and redrive."""

from __future__ import annotations

from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue import InvalidArgument, Message, PermanentError, run_local
from s3queue.contract.settings import QueueSettings
from s3queue.producing.producer import Queue
from s3queue.storage import MemoryStorage

INBOX_KEY = "s3queue/jobs/inbox/order-7.json"


def test_enqueue_attributes_reach_the_handler() -> None:
    h = Harness()
    h.queue.enqueue({"n": 1}, attributes={"tenant": "acme", "trace-id": "t-1"})
    h.queue.enqueue({"n": 2})
    h.queue.enqueue_many([{"n": 3}, {"n": 4}], attributes={"tenant": "globex"})
    seen = Recorder()
    h.drain(seen)
    by_body = {m.body["n"]: m.attributes for m in seen.seen}
    assert by_body == {
        1: {"tenant": "acme", "trace-id": "t-1"},
        2: {},
        3: {"tenant": "globex"},
        4: {"tenant": "globex"},
    }


def test_a_plain_puts_metadata_arrives_as_attributes() -> None:
    h = Harness()
    h.storage.put(INBOX_KEY, b'{"order": 7}', metadata={"Tenant": "acme", "s3q-token": "x"})
    seen = Recorder()
    h.drain(seen)
    assert [(m.body, m.attributes) for m in seen.seen] == [({"order": 7}, {"tenant": "acme"})]


def test_attributes_survive_retries_the_dlq_and_redrive() -> None:
    # GIVEN a message that fails once, then for good
    h = Harness(settings=QueueSettings(max_retries=1, backoff_base=0.01, backoff_cap=0.01))
    h.queue.enqueue("poison", attributes={"tenant": "acme"})
    failing = Recorder(lambda m: RuntimeError("boom"))
    h.drain(failing)
    # THEN its retry saw them, and so does the dead letter
    assert [m.attributes for m in failing.seen] == [{"tenant": "acme"}] * 2
    [dead] = h.queue.dead_letters()
    assert dead["attributes"] == {"tenant": "acme"}
    # WHEN it is redriven, THEN the fresh message keeps them too
    assert h.queue.redrive() == 1
    seen = Recorder()
    h.drain(seen)
    assert [(m.body, m.attributes, m.attempt) for m in seen.seen] == [
        ("poison", {"tenant": "acme"}, 1)
    ]


def test_a_dead_inbox_message_keeps_its_metadata() -> None:
    h = Harness()
    h.storage.put(INBOX_KEY, b"raw", metadata={"tenant": "acme"})
    h.drain(Recorder(lambda m: PermanentError("no")))
    assert [d["attributes"] for d in h.queue.dead_letters()] == [{"tenant": "acme"}]


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"Tenant": "a"}, "invalid attribute name 'Tenant'"),
        ({"": "a"}, "invalid attribute name ''"),
        ({"a b": "a"}, "invalid attribute name 'a b'"),
        ({"x" * 129: "a"}, "invalid attribute name"),
        ({"s3q-token": "a"}, "the prefix 's3q-' is reserved"),
        ({"n": 1}, "attribute 'n' must be a str, got int"),
        ({"n": "v" * 2048}, "attributes take 2049 bytes"),
        (["tenant"], "attributes must be a mapping"),
    ],
)
def test_bad_attributes_are_refused_before_anything_is_written(
    attributes: Any, message: str
) -> None:
    storage = MemoryStorage()
    queue = Queue("jobs", storage=storage)
    for call in (
        lambda: queue.enqueue({}, attributes=attributes),
        lambda: queue.enqueue_many([{}], attributes=attributes),
    ):
        with pytest.raises(InvalidArgument, match=message):
            call()
    assert storage.list("s3queue/").entries == []


def test_attributes_up_to_the_limit_are_fine() -> None:
    queue = Queue("jobs", storage=MemoryStorage())
    queue.enqueue({}, attributes={"n": "v" * 2047})
    queue.enqueue({}, attributes={"a.b_c-9": "x", "z": ""})
    queue.enqueue({}, attributes={"tenant": "café"})


@pytest.mark.s3
def test_metadata_of_a_raw_put_on_seaweedfs(shared_s3_client: Any, bucket: str) -> None:
    # GIVEN another service's PUT with user metadata, and a library message with attributes
    shared_s3_client.put_object(
        Bucket=bucket, Key=INBOX_KEY, Body=b'{"order": 7}', Metadata={"tenant": "acme"}
    )
    Queue("jobs", bucket=bucket, s3=shared_s3_client).enqueue(
        {"order": 8}, attributes={"tenant": "globex"}
    )
    seen: list[Message] = []
    # WHEN the local runtime drains the queue
    summary = run_local({"jobs": seen.append}, bucket=bucket, s3=shared_s3_client, drain=True)
    # THEN each message carries its own
    assert summary.drained
    assert sorted((m.body["order"], m.attributes["tenant"]) for m in seen) == [
        (7, "acme"),
        (8, "globex"),
    ]

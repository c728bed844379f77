"""Every argument of enqueue / enqueue_many is checked at the door (issue 9 item 5).

A refused call raises a clear `S3QueueError` (`InvalidArgument`, also a `ValueError`, or
`MalformedMessage` for a body) and writes nothing. Before, ``delay=9e9`` overflowed the key's
time field and the handler received the internal envelope as a body.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue.errors import InvalidArgument, MalformedMessage, S3QueueError
from s3queue.local.cli import main
from s3queue.local.seaweed import EmbeddedS3
from s3queue.producing.arguments import MAX_DELAY
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import InvalidName
from s3queue.storage import MemoryStorage

BAD_DELAYS = [
    9e9,
    1e12,
    math.nan,
    math.inf,
    -math.inf,
    -1,
    -0.001,
    10**400,
    MAX_DELAY.total_seconds() + 0.001,
    timedelta(seconds=-1),
    MAX_DELAY + timedelta(microseconds=1),
    "5",
    None,
    True,
    [1],
    Decimal("5"),
]


def nothing_written(h: Harness) -> bool:
    return h.storage.list("s3queue/").entries == []


@pytest.mark.parametrize("delay", BAD_DELAYS, ids=repr)
def test_a_bad_delay_is_refused_and_writes_nothing(delay: Any) -> None:
    h = Harness()
    with pytest.raises(InvalidArgument, match="delay must be"):
        h.queue.enqueue({"n": 1}, delay=delay)
    with pytest.raises(InvalidArgument, match="delay must be"):
        h.queue.enqueue_many([{"n": 1}], delay=delay)
    assert nothing_written(h)


def test_a_bad_argument_is_also_a_value_error_and_an_s3queue_error() -> None:
    with pytest.raises(ValueError):
        Harness().queue.enqueue("x", delay=-1)
    assert issubclass(InvalidArgument, S3QueueError) and issubclass(InvalidName, InvalidArgument)


def test_a_huge_delay_never_reaches_a_handler_as_an_envelope() -> None:
    # GIVEN the delay that overflowed the key's 13-digit time field
    h = Harness()
    with pytest.raises(InvalidArgument):
        h.queue.enqueue({"order": 1}, delay=9e9)
    # WHEN the queue runs, THEN no handler ever sees anything
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == []


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [
        (timedelta(seconds=30), 30),
        (timedelta(minutes=2), 120),
        (30, 30),
        (29.9996, 30),
        (Fraction(61, 2), 30.5),
        (0, 0),
        (MAX_DELAY, MAX_DELAY.total_seconds()),
    ],
    ids=repr,
)
def test_a_good_delay_is_seconds_or_a_timedelta(delay: Any, seconds: float) -> None:
    h = Harness()
    now = h.clock.now_ms()
    h.queue.enqueue({"n": 1}, delay=delay)
    [key] = h.keys("msg/")
    parsed = h.queue.keys.parse_msg(key)
    assert parsed is not None and parsed.ready_ms == now + round(seconds * 1000)
    handler = Recorder()
    h.drain(handler, step=max(seconds, 1.0))
    assert handler.bodies() == [{"n": 1}]


@pytest.mark.parametrize("message_id", [123, 1.5, b"order-1", "", "a b", "order-1\n", "x" * 129])
def test_a_bad_id_is_refused(message_id: Any) -> None:
    h = Harness()
    with pytest.raises(InvalidName, match="invalid message id"):
        h.queue.enqueue("x", id=message_id)
    assert nothing_written(h)


@pytest.mark.parametrize("group", [7, b"g", "", "g" * 129])
def test_a_bad_group_is_refused(group: Any) -> None:
    h = Harness()
    with pytest.raises(InvalidArgument, match="group must be"):
        h.queue.enqueue("x", group=group)
    assert nothing_written(h)


@pytest.mark.parametrize("name", ["jobs\n", 7, "", "Jobs"])
def test_a_bad_queue_name_is_refused(name: Any) -> None:
    with pytest.raises(InvalidName, match="invalid queue name"):
        Queue(name, storage=MemoryStorage())


def test_a_queue_without_bucket_or_storage_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="needs bucket="):
        Queue("jobs")


@pytest.mark.parametrize(
    "body",
    [math.nan, math.inf, {"price": -math.inf}, {"rows": [[1.0, math.nan]]}, {1, 2}, object()],
    ids=repr,
)
def test_a_body_that_is_not_json_is_refused(body: Any) -> None:
    h = Harness()
    with pytest.raises(MalformedMessage, match="not JSON-serialisable"):
        h.queue.enqueue(body)
    assert nothing_written(h)


def test_one_bad_body_in_enqueue_many_writes_nothing() -> None:
    h = Harness()
    bodies = ({"n": n} if n != 500 else {"n": math.nan} for n in range(1000))
    with pytest.raises(MalformedMessage):
        h.queue.enqueue_many(bodies)
    assert nothing_written(h)


@pytest.mark.parametrize("bodies", ["abc", b"abc", {"a": 1}], ids=repr)
def test_enqueue_many_refuses_a_single_body(bodies: Any) -> None:
    h = Harness()
    with pytest.raises(InvalidArgument, match="iterable of bodies"):
        h.queue.enqueue_many(bodies)
    assert nothing_written(h)


def test_good_arguments_still_arrive_intact() -> None:
    h = Harness()
    h.queue.enqueue({"a": [1, 2.5, None, "é"]}, id="order-1", group="g1")
    h.queue.enqueue_many([1, "two", {"three": 3}], delay=timedelta(0))
    handler = Recorder()
    h.drain(handler)
    assert sorted(map(repr, handler.bodies())) == sorted(
        map(repr, [{"a": [1, 2.5, None, "é"]}, 1, "two", {"three": 3}])
    )


@pytest.mark.s3
def test_the_cli_refuses_a_bad_delay_in_one_line_with_exit_code_2(
    seaweed: EmbeddedS3,
    bucket: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "s3queue")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3queue-secret")
    base = ["--endpoint-url", seaweed.endpoint_url, "--bucket", bucket, "enqueue", "send_email"]
    for delay in ("1e12", "nan", "inf", "-5"):
        capsys.readouterr()
        code = main([*base, '{"to": "ada@example.com"}', f"--delay={delay}"])
        out, err = capsys.readouterr()
        assert code == 2 and out == "", (delay, err)
        assert err.startswith("s3queue: error: delay must be finite") and err.count("\n") == 1
    assert seaweed.make_client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_a_queue_of_its_own_client_paces_itself_when_s3_throttles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Queue` without ``s3=`` runs its client's attempts through a `Pacer` (botocore's own
    adaptive mode off): producers slow down together under ``503 SlowDown`` (the pacer and
    its wiring: tests/test_pacing.py; its effect: the simulation's overload runs)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("S3QUEUE_ENDPOINT_URL", "http://127.0.0.1:9")
    queue = Queue("q", bucket="b")
    client = queue.storage._client  # type: ignore[attr-defined]
    assert client.meta.config.retries["mode"] == "standard"
    assert queue.pacing is not None and not queue.pacing.state().paced
    assert Queue("q", storage=MemoryStorage()).pacing is None

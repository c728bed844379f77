"""Functional: the coordinator Lambda on EventBridge events, with moto S3 and Lambda."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from lambda_support import (
    BUCKET,
    FakeContext,
    emf_metrics,
    load_coordinator_app,
    load_worker_app,
    moto_aws,
    object_created_event,
    restoring_logging,
    scheduled_event,
)
from moto.awslambda_simple.models import LambdaSimpleBackend
from s3queue.common.clock import FakeClock, SystemClock
from s3queue.contract.environment import QueueMap
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.invoke import InvokeFailed, LambdaInvoker
from s3queue.errors import ConfigError
from s3queue.local.metering import RequestCounter
from s3queue.producing.producer import Queue
from s3queue.protocol.lease import read_lease
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

FUNCTIONS = {"send_email": "S3Queue-send-email", "generate_report": "S3Queue-generate-report"}
SETTINGS = {"send_email": {"batch_size": 20}, "generate_report": {"batch_size": 5}}


@pytest.fixture(autouse=True)
def _logging() -> Iterator[None]:
    yield from restoring_logging()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from moto_aws(monkeypatch)


@pytest.fixture
def invokes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Every Lambda invoke moto receives: (function name, payload)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    original = LambdaSimpleBackend.invoke

    def record(self: Any, function_name: str, *args: Any, **kwargs: Any) -> Any:
        body = args[1] if len(args) > 1 else kwargs.get("body")
        seen.append((function_name, json.loads(body)))
        return original(self, function_name, *args, **kwargs)

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", record)
    return seen


@pytest.fixture
def clock() -> FakeClock:
    # Starts at the real time: moto stamps the objects with it.
    return FakeClock(start_ms=SystemClock().now_ms())


@pytest.fixture
def counters() -> list[RequestCounter]:
    return []


@pytest.fixture
def coordinator_app(
    aws: Any,
    monkeypatch: pytest.MonkeyPatch,
    clock: FakeClock,
    counters: list[RequestCounter],
) -> Iterator[ModuleType]:
    queues = QueueMap(
        functions=FUNCTIONS,
        settings={q: QueueSettings.from_mapping(SETTINGS[q]) for q in FUNCTIONS},
    )
    monkeypatch.setenv("S3QUEUE_BUCKET", BUCKET)
    monkeypatch.setenv("S3QUEUE_QUEUES", queues.encode())
    app = load_coordinator_app()

    def counted_client(*args: Any, **kwargs: Any) -> Any:
        client = make_client(*args, **kwargs)
        counters.append(RequestCounter.attach(client))
        return client

    monkeypatch.setattr(app, "make_client", counted_client)
    monkeypatch.setattr(app, "CLOCK", clock)
    app.container.cache_clear()
    yield app
    app.container.cache_clear()


def context(clock: FakeClock, seconds: float = 70.0) -> FakeContext:
    """A context whose remaining time runs down with the fake clock."""
    deadline = clock.now_ms() + round(seconds * 1000)
    return FakeContext(
        remaining=lambda: deadline - clock.now_ms(), function_name="S3Queue-coordinator"
    )


def test_an_idle_scheduled_run_costs_one_list_per_queue(
    coordinator_app: ModuleType,
    clock: FakeClock,
    counters: list[RequestCounter],
    invokes: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = coordinator_app.handler(scheduled_event(), context(clock))
    assert result["reason"] == "idle" and result["probes"] == 2 and result["ticks"] == 0
    [counter] = counters
    assert counter.total() == 2 and counter.counts()["LIST"] == 2
    assert invokes == []
    # Gauges that need no request still go out for idle queues.
    metrics = emf_metrics(capsys.readouterr().out)
    assert {(m["name"], m["dimensions"]["queue"]) for m in metrics} >= {
        ("Pending", "send_email"),
        ("InFlight", "generate_report"),
    }


def test_an_object_created_event_ticks_its_queue_without_a_probe(
    coordinator_app: ModuleType,
    aws: Any,
    clock: FakeClock,
    counters: list[RequestCounter],
    invokes: list[tuple[str, dict[str, Any]]],
) -> None:
    """Low-latency mode: the event says the queue has work, so the run leads and dispatches
    at once (no probe LIST first); the other queue is probed as on a schedule."""
    queue = Queue("send_email", storage=S3Storage(aws, BUCKET), clock=clock)
    key = queue.enqueue({"to": "a@example.com"})
    clock.advance(1)
    event = {
        **scheduled_event(),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "detail": {"bucket": {"name": BUCKET}, "object": {"key": f"s3queue/send_email/msg/{key}"}},
    }
    result = coordinator_app.handler(event, context(clock, seconds=15))
    assert result["dispatched"] == 1 and result["probes"] >= 1
    assert [name for name, _ in invokes] == ["S3Queue-send-email"]
    # the probes that ran were the other queue's (and the watch after the dispatch)
    assert coordinator_app.hot_queues(event, "s3queue") == {"send_email"}
    assert coordinator_app.hot_queues(scheduled_event(), "s3queue") == set()
    assert (
        coordinator_app.hot_queues({**event, "detail": {"object": {"key": "x/y"}}}, "s3queue")
        == set()
    )


def test_a_scheduled_run_dispatches_to_each_queue_worker_and_hands_over(
    coordinator_app: ModuleType,
    aws: Any,
    clock: FakeClock,
    invokes: list[tuple[str, dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN messages on both queues
    storage = S3Storage(aws, BUCKET)
    emails, reports = (
        # on the run's clock: a producer on the system's, slowed by a loaded machine, keyed
        # messages past the fake clock's now, and they went out in a second ticket
        Queue("send_email", storage=storage, clock=clock),
        Queue("generate_report", storage=storage, clock=clock),
    )
    for name in ("Ada", "Grace", "Linus"):
        emails.enqueue({"to": f"{name.lower()}@example.com", "template": "welcome", "name": name})
    reports.enqueue_many({"values": [i, i * 2]} for i in range(1, 8))
    clock.advance(1)
    # WHEN the schedule starts a run (no worker ever claims: the tickets stay in flight)
    result = coordinator_app.handler(scheduled_event(), context(clock, seconds=15))
    # THEN each queue's worker function got one Event invoke with its ticket
    assert result["reason"] == "time" and result["dispatched"] == 10
    assert result["led"] == ["generate_report", "send_email"]
    assert sorted(name for name, _ in invokes) == sorted(FUNCTIONS.values())
    payload = dict(invokes)["S3Queue-send-email"]
    assert payload["queue"] == "send_email" and len(payload["doc"]["refs"]) == 3
    # ... the leases were handed over at the end of the run
    for queue in FUNCTIONS:
        lease = read_lease(storage, f"s3queue/{queue}/coordinator")
        assert lease is not None and lease.lease_until_ms == 0
    # ... and the queue gauges went out once (the run lasted under a minute)
    metrics = [m for m in emf_metrics(capsys.readouterr().out) if m["name"] == "InFlight"]
    assert {m["dimensions"]["queue"]: m["values"] for m in metrics} == {
        "send_email": [3.0],
        "generate_report": [7.0],
    }
    assert {m["unit"] for m in metrics} == {"Count"}


def test_coordinator_invokes_reach_the_worker_function(
    coordinator_app: ModuleType,
    aws: Any,
    clock: FakeClock,
    invokes: list[tuple[str, dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a message put by another service straight into the inbox, and the S3 event
    key = "s3queue/send_email/inbox/signup-42.json"
    body = {"to": "barbara@example.com", "template": "welcome", "name": "Barbara"}
    aws.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(body).encode())
    clock.advance(1)
    coordinator_app.handler(object_created_event(key), context(clock, seconds=15))
    [(function, payload)] = invokes
    assert function == "S3Queue-send-email"
    # WHEN the worker function gets the payload Lambda delivers
    monkeypatch.setenv("S3QUEUE_QUEUE", "send_email")
    monkeypatch.setenv("S3QUEUE_SETTINGS", json.dumps(SETTINGS["send_email"]))
    worker = load_worker_app()
    worker.container.cache_clear()
    try:
        result = worker.handler(payload, FakeContext())
    finally:
        worker.container.cache_clear()
        worker.metrics.clear_metrics()
    # THEN the message is handled and gone
    assert result["tickets"][0]["done"] == 1
    assert aws.list_objects_v2(Bucket=BUCKET, Prefix="s3queue/send_email/inbox/")["KeyCount"] == 0


def test_a_run_started_while_another_leads_is_harmless(
    coordinator_app: ModuleType,
    aws: Any,
    clock: FakeClock,
    invokes: list[tuple[str, dict[str, Any]]],
) -> None:
    # GIVEN a run in progress that leads send_email (EventBridge delivered the schedule twice)
    storage = S3Storage(aws, BUCKET)
    Queue("send_email", storage=storage, clock=clock).enqueue({"to": "a@example.com"})
    clock.advance(1)
    first: list[dict[str, Any]] = []
    leader = Coordinator(storage, "send_email", invoker=first.append, clock=clock, owner="first")
    assert leader.tick().dispatched == 1
    # WHEN the duplicate run starts
    result = coordinator_app.handler(scheduled_event(), context(clock))
    # THEN it dispatches nothing, takes nothing over, and ends once quiet
    assert result["reason"] == "idle" and result["led"] == [] and result["dispatched"] == 0
    assert invokes == [] and len(first) == 1
    lease = read_lease(storage, "s3queue/send_email/coordinator")
    assert lease is not None and lease.owner == "first" and lease.epoch == 1


def test_configuration_errors_fail_the_invocation(
    coordinator_app: ModuleType, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3QUEUE_QUEUES", "{}")
    with pytest.raises(ConfigError, match="S3QUEUE_QUEUES is empty"):
        coordinator_app.handler(scheduled_event(), context(clock))
    monkeypatch.setenv("S3QUEUE_QUEUES", json.dumps({"send_email": {"settings": {}}}))
    with pytest.raises(ConfigError, match="S3QUEUE_QUEUES: unknown version None"):
        coordinator_app.handler(scheduled_event(), context(clock))
    monkeypatch.delenv("S3QUEUE_BUCKET")
    with pytest.raises(ConfigError, match="S3QUEUE_BUCKET is not set"):
        coordinator_app.handler(scheduled_event(), context(clock))


def test_lambda_invoker_sends_event_invokes(
    aws: Any, invokes: list[tuple[str, dict[str, Any]]]
) -> None:
    import boto3

    invoker = LambdaInvoker(boto3.client("lambda", region_name="us-east-1"), FUNCTIONS)
    payload = {"queue": "generate_report", "ticket": "t", "etag": "e", "doc": {"refs": []}}
    invoker(payload)
    assert invokes == [("S3Queue-generate-report", payload)]
    with pytest.raises(InvokeFailed, match="no worker function"):
        invoker({**payload, "queue": "unknown"})
    assert QueueSettings.from_mapping(SETTINGS["generate_report"]).batch_size == 5

"""Functional: the worker Lambda entry point on tickets from a real coordinator, with moto S3."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from lambda_support import (
    BUCKET,
    FakeContext,
    capture_logs,
    emf_metrics,
    json_lines,
    load_worker_app,
    metric_total,
    moto_aws,
    restoring_logging,
)
from s3queue.common.clock import FakeClock, SystemClock
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.errors import S3QueueError
from s3queue.message import Message
from s3queue.producing.producer import Queue
from s3queue.storage.base import Object, Page
from s3queue.storage.s3 import S3Storage
from s3queue.working.guard import WorkerKilled
from s3queue.working.worker import Worker

# An invocation that processed no message publishes no metric: Powertools warns, rightly.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

EMAILS = {"visibility_timeout": 30, "max_retries": 5, "batch_size": 20}


class Crash(WorkerKilled):
    """Stops a worker dead inside its handler, as a killed process would."""


@pytest.fixture(autouse=True)
def _logging() -> Iterator[None]:
    yield from restoring_logging()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from moto_aws(monkeypatch)


def _load_app(
    monkeypatch: pytest.MonkeyPatch,
    settings: dict[str, Any],
    *,
    queue: str = "send_email",
    outbox: Path | None = None,
) -> ModuleType:
    """The worker function of `queue` with `settings` (send_email's e-mails into `outbox`), on
    a fresh container."""
    monkeypatch.setenv("S3QUEUE_BUCKET", BUCKET)
    monkeypatch.setenv("S3QUEUE_QUEUE", queue)
    monkeypatch.setenv("S3QUEUE_SETTINGS", json.dumps(settings))
    if outbox is not None:
        monkeypatch.setenv("S3QUEUE_OUTBOX", str(outbox))
    app = load_worker_app()
    app.container.cache_clear()
    return app


@pytest.fixture
def worker_app(aws: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ModuleType]:
    app = _load_app(monkeypatch, EMAILS, outbox=tmp_path / "outbox")
    app.metrics.clear_metrics()
    yield app
    app.container.cache_clear()
    app.metrics.clear_metrics()


class Setup:
    """The producer and a coordinator of queue send_email on the moto bucket."""

    def __init__(
        self,
        client: Any,
        clock: FakeClock | None = None,
        settings: dict[str, Any] = EMAILS,
        *,
        chain: bool = False,
    ) -> None:
        self.storage = S3Storage(client, BUCKET)
        self.settings = QueueSettings.from_mapping(settings)
        self.queue = Queue("send_email", storage=self.storage)
        self.invocations: list[dict[str, Any]] = []
        # moto stamps Last-Modified and Date with the real time; a fake clock drives them here,
        # since expiry is judged by S3's time (issue 19.7)
        coordinating = self.storage if clock is None else _AnsweringAt(self.storage, clock)
        self.coordinator = Coordinator(
            coordinating,  # type: ignore[arg-type]
            "send_email",
            invoker=self.invocations.append,
            settings=self.settings,
            clock=clock,
            chain=chain,
        )

    def tickets(self) -> list[dict[str, Any]]:
        """Dispatch, and return the payloads as Lambda would deliver them (through JSON)."""
        self.coordinator.tick()
        payloads = [json.loads(json.dumps(p)) for p in self.invocations]
        self.invocations.clear()
        return payloads

    def keys(self, part: str) -> list[str]:
        return [e.key for e in self.storage.list(f"s3queue/send_email/{part}").entries]


class _AnsweringAt:
    """A storage whose answers carry `clock`'s time as S3's (their ``Date``)."""

    def __init__(self, inner: S3Storage, clock: FakeClock) -> None:
        self.inner, self.clock = inner, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def list(self, prefix: str, **kwargs: Any) -> Page:
        page = self.inner.list(prefix, **kwargs)
        now = self.clock.now_ms()
        return Page([replace(e, served_ms=now) for e in page.entries], page.truncated)

    def get(self, key: str) -> Object | None:
        found = self.inner.get(key)
        return None if found is None else replace(found, served_ms=self.clock.now_ms())


def email(name: str, to: str | None = None) -> dict[str, str]:
    return {"to": to or f"{name.lower()}@example.com", "template": "welcome", "name": name}


def test_processes_a_ticket_and_publishes_metrics(
    worker_app: ModuleType,
    aws: Any,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    setup = Setup(aws)
    ada = setup.queue.enqueue(email("Ada"))
    setup.queue.enqueue(email("Grace"))
    bad = setup.queue.enqueue(email("Nobody", to="not-an-address"))
    [payload] = setup.tickets()
    logs = capture_logs(worker_app.logger)
    result = worker_app.handler(payload, FakeContext())
    assert result["queue"] == "send_email" and result["batchItemFailures"] == []
    [ticket] = result["tickets"]
    assert (ticket["status"], ticket["done"], ticket["dead"], ticket["retry"]) == (
        "committed",
        2,
        1,
        0,
    )
    assert setup.keys("msg/") == [] and setup.keys("tickets/") == []
    [dead] = setup.queue.dead_letters()
    assert dead["id"] == bad and dead["reason"].startswith("PermanentError: invalid e-mail")
    assert (tmp_path / "outbox" / f"send_email_{ada}.eml").exists()
    out = capsys.readouterr().out
    metrics = emf_metrics(out)
    assert metric_total(metrics, "Processed") == 2
    assert metric_total(metrics, "DeadLettered") == 1 and metric_total(metrics, "Failed") == 1
    assert metric_total(metrics, "Retried") == 0
    durations = [m for m in metrics if m["name"] == "HandlerDuration"]
    assert sum(len(m["values"]) for m in durations) == 3
    assert all(m["unit"] == "Milliseconds" for m in durations)
    assert {json.dumps(m["dimensions"], sort_keys=True) for m in metrics} == {
        '{"queue": "send_email", "service": "s3queue"}'
    }
    assert {m["namespace"] for m in metrics} == {"S3Queue"}
    # Log lines are JSON with the queue, ticket and message id as keys.
    lines = json_lines(logs.getvalue())
    [finish] = [
        d for d in lines if d["message"].startswith("handler_finish") and "error" in d["message"]
    ]
    assert finish["queue"] == "send_email" and finish["message_id"] == bad
    assert finish["ticket"] == payload["ticket"] and finish["function_name"] == "S3Queue-worker"
    [summary] = [d for d in lines if d["message"] == "ticket committed"]
    assert (summary["done"], summary["dead"], summary["ticket"]) == (2, 1, payload["ticket"])
    # The failure is logged with its exception (Powertools' exception fields), and its
    # traceback is kept in the dead letter's history.
    [failed] = [d for d in lines if d["message"].startswith("handler of send_email message")]
    assert failed["message_id"] == bad and failed["exception_name"] == "PermanentError"
    assert "Traceback" in failed["exception"] and "invalid e-mail" in failed["exception"]
    assert "send_email.py" in (dead["errors"][-1]["traceback"] or "")


def test_a_batch_of_tickets_reports_partial_failures(
    worker_app: ModuleType,
    aws: Any,
) -> None:
    setup = Setup(aws)
    setup.queue.enqueue(email("Ada"))
    [good] = setup.tickets()
    gone = {**good, "ticket": "s3queue/send_email/tickets/0000000099-0000000000", "doc": None}
    broken = {**good, "ticket": "s3queue/send_email/tickets/0000000001-0000000007"}
    broken["doc"] = {"queue": "send_email"}  # a ticket document nobody can decode
    result = worker_app.handler({"tickets": [good, gone, broken]}, FakeContext())
    statuses = [t["status"] for t in result["tickets"]]
    assert statuses == ["committed", "gone", "error"]
    assert "MalformedMessage" in result["tickets"][2]["error"]
    assert result["batchItemFailures"] == [{"itemIdentifier": broken["ticket"]}]


def test_an_invocation_where_every_ticket_fails_is_an_error(
    worker_app: ModuleType,
    aws: Any,
) -> None:
    payload = {
        "queue": "send_email",
        "ticket": "s3queue/send_email/tickets/0000000001-0000000000",
        "etag": "abc",
        "doc": {"not": "a ticket"},
    }
    with pytest.raises(S3QueueError, match="every ticket failed"):
        worker_app.handler(payload, FakeContext())


def test_short_remaining_time_releases_messages_untouched(
    worker_app: ModuleType,
    aws: Any,
) -> None:
    # GIVEN a ticket delivered to an invocation that has only 3 s left (the margin is 5 s)
    clock = FakeClock(start_ms=_now_ms())
    setup = Setup(aws, clock=clock)
    for name in ("Ada", "Grace"):
        setup.queue.enqueue(email(name))
    clock.advance(1)
    [payload] = setup.tickets()
    result = worker_app.handler(payload, FakeContext(remaining=lambda: 3_000))
    # THEN nothing ran, nothing counted an attempt, and the messages are still there
    [ticket] = result["tickets"]
    assert (ticket["status"], ticket["release"], ticket["done"]) == ("committed", 2, 0)
    assert len(setup.keys("msg/")) == 2 and setup.keys("tickets/") == []
    # WHEN the coordinator dispatches them again to an invocation with time to spare
    clock.advance(61)
    [again] = setup.tickets()
    seen: list[Message] = []
    worker_app.container().worker.process(again, seen.append, remaining_ms=lambda: 60_000)
    assert [m.attempt for m in seen] == [1, 1]


def test_a_redelivery_after_a_crash_is_counted(
    worker_app: ModuleType,
    aws: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a worker that claimed the ticket and died inside the handler
    clock = FakeClock(start_ms=_now_ms())
    setup = Setup(aws, clock=clock)
    setup.queue.enqueue(email("Ada"))
    clock.advance(1)
    [payload] = setup.tickets()
    dying = Worker(setup.storage, "send_email", settings=setup.settings, clock=clock)

    def crash(message: Message) -> None:
        raise Crash

    with pytest.raises(Crash):
        dying.process(payload, crash)
    # WHEN its lease expires and the coordinator reaps and redelivers the ticket
    clock.advance(setup.settings.visibility_timeout + 10)
    [redelivered] = setup.tickets()
    assert redelivered["doc"]["refs"][0]["expired"] == {"0": 1}  # it had started: counted
    capsys.readouterr()
    result = worker_app.handler(redelivered, FakeContext())
    # THEN the Lambda handles it, and says it was a redelivery
    assert result["tickets"][0]["done"] == 1
    metrics = emf_metrics(capsys.readouterr().out)
    assert metric_total(metrics, "Redelivered") == 1 and metric_total(metrics, "Processed") == 1


def test_config_comes_from_the_environment_once(
    worker_app: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    aws: Any,
) -> None:
    first = worker_app.container()
    monkeypatch.setenv("S3QUEUE_QUEUE", "generate_report")
    assert worker_app.container() is first  # once per container, not per invocation
    assert first.worker.settings == QueueSettings.from_mapping(EMAILS)
    worker_app.container.cache_clear()
    monkeypatch.delenv("S3QUEUE_QUEUE")
    with pytest.raises(S3QueueError, match="S3QUEUE_QUEUE"):
        worker_app.container()


def _now_ms() -> int:
    """Fake clocks start at the real time: moto stamps objects with it."""
    return SystemClock().now_ms()


def test_a_large_payload_through_the_worker_lambda(
    aws: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN a queue whose handler reads payloads by stream, and a payload over its eager limit
    read: dict[str, tuple[bytes, int, Any]] = {}

    def handle(message: Message) -> None:
        with message.open() as stream:
            read[message.id] = (stream.read(), message.size, message.attributes)

    module = ModuleType("handlers.payloads")
    module.handle = handle  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "handlers.payloads", module)
    settings = {"max_message_bytes": 64 * 1024}
    app = _load_app(monkeypatch, settings, queue="payloads")
    storage = S3Storage(aws, BUCKET)
    data = bytes(range(256)) * 2048  # 512 KiB
    (tmp_path / "payload.bin").write_bytes(data)
    queue = Queue("payloads", storage=storage)
    message_id = queue.enqueue_file(tmp_path / "payload.bin", attributes={"tenant": "acme"})
    invocations: list[dict[str, Any]] = []
    coordinator = Coordinator(
        storage,
        "payloads",
        invoker=invocations.append,
        settings=QueueSettings.from_mapping(settings),
    )
    coordinator.tick()
    # WHEN the worker Lambda runs the ticket
    try:
        result = app.handler(json.loads(json.dumps(invocations[0])), FakeContext())
    finally:
        app.container.cache_clear()
    # THEN the handler streamed the whole payload, with its attributes, and the payload went
    # with its message
    assert result["tickets"][0]["done"] == 1
    assert read == {message_id: (data, len(data), {"tenant": "acme"})}
    assert storage.list("s3queue/payloads/blobs/").entries == []


def test_a_parking_queue_runs_the_successor_in_the_same_invocation(
    aws: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN a queue that parks (SETTINGS chain), one slot, a second ticket parked behind the first
    settings = {**EMAILS, "batch_size": 2, "max_in_flight_tickets": 1, "chain": True}
    app = _load_app(monkeypatch, settings, outbox=tmp_path / "outbox")
    setup = Setup(aws, settings=settings, chain=True)
    setup.queue.enqueue_many([email("Ada"), email("Grace")])
    [payload] = setup.tickets()
    setup.queue.enqueue_many([email("Alan"), email("Edsger")])
    assert setup.tickets() == []  # parked, not invoked
    # WHEN the worker function runs the one invoked ticket
    result = app.handler(payload, FakeContext())
    app.container.cache_clear()
    # THEN it ran the parked one next, and reports both
    assert [(t["status"], t["done"]) for t in result["tickets"]] == [
        ("committed", 2),
        ("committed", 2),
    ]
    assert result["tickets"][0]["ticket"] == payload["ticket"]
    assert len(list((tmp_path / "outbox").iterdir())) == 4
    setup.coordinator.tick()  # both gone: the pointer is deleted
    assert setup.keys("") == ["s3queue/send_email/coordinator"]  # the lease alone


def test_the_worker_functions_client_has_room_for_a_walks_reads_and_its_other_calls(
    worker_app: ModuleType,
) -> None:
    """A walk keeps `READ_AHEAD` GETs in flight while the heartbeat and the claim's writes
    go on beside them: the function's client has a connection for each (issue 22: a client
    whose pool is full opens a new connection, and on AWS a TLS handshake, per request)."""
    from s3queue.storage.clients import pool_size
    from s3queue.storage.s3 import S3Storage
    from s3queue.working.readahead import READ_AHEAD

    storage = worker_app.container().worker.storage
    assert isinstance(storage, S3Storage)
    size = pool_size(storage._client)
    assert size is not None and size > READ_AHEAD + 2

"""The local tools without S3: the worker pool, waiting for S3, admin paging and counts, hints."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from harness import CountingStorage, Harness
from s3queue import PermanentError, Queue
from s3queue.errors import EndpointUnreachable
from s3queue.local import dev, monitor
from s3queue.local.pool import WorkerPool
from s3queue.local.runtime import run_local
from s3queue.message import Message
from s3queue.operations.admin import TicketCache, stats
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Page
from s3queue.storage.clients import make_client

WAIT = 10.0
"""Bound on joins and event waits: a failing test ends, a passing one never waits this long."""


def test_pool_replaces_a_thread_that_dies() -> None:
    # GIVEN one worker thread whose first payload raises SystemExit (a BaseException)
    done = threading.Event()

    def process(payload: dict[str, Any]) -> None:
        if payload["n"] == 1:
            raise SystemExit("handler called sys.exit")
        done.set()

    pool = WorkerPool(process, 1)
    pool.start()
    first = pool.threads[0]
    pool.invoke({"n": 1})
    first.join(WAIT)
    assert not first.is_alive()
    # WHEN the monitor revives the pool
    assert pool.revive() == 1
    # THEN a new thread takes the next payload, and the pool is whole again
    pool.invoke({"n": 2})
    assert done.wait(WAIT)
    assert pool.replaced == 1 and pool.threads[0] is not first and pool.threads[0].is_alive()
    assert pool.revive() == 0
    pool.stop()
    assert not pool.threads[0].is_alive() and pool.idle()


def test_pool_counts_an_exception_and_keeps_the_thread() -> None:
    done = threading.Event()

    def process(payload: dict[str, Any]) -> None:
        if payload["n"] == 1:
            raise RuntimeError("a crashed ticket")
        done.set()

    pool = WorkerPool(process, 1)
    pool.start()
    thread = pool.threads[0]
    pool.invoke({"n": 1, "ticket": "t1"})
    pool.invoke({"n": 2})
    assert done.wait(WAIT)
    pool.stop()
    assert pool.errors == 1 and pool.replaced == 0 and pool.threads[0] is thread


def test_retry_unreachable_waits_until_s3_answers(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise EndpointUnreachable("no S3 server answered at http://127.0.0.1:9")

    with caplog.at_level(logging.WARNING, logger="s3queue.local.monitor"):
        assert monitor.retry_unreachable(check, threading.Event(), wait=True, interval=0)
    assert len(calls) == 3
    waits = [r.getMessage() for r in caplog.records if "waiting for S3" in r.getMessage()]
    assert len(waits) == 2 and "127.0.0.1:9" in waits[0] and "Ctrl-C stops" in waits[0]
    assert "S3 answers" in caplog.records[-1].getMessage()


def test_retry_unreachable_fails_at_once_without_wait_and_ends_on_stop() -> None:
    def check() -> None:
        raise EndpointUnreachable("down")

    with pytest.raises(EndpointUnreachable):
        monitor.retry_unreachable(check, threading.Event(), wait=False)
    stop = threading.Event()
    stop.set()
    assert monitor.retry_unreachable(check, stop, wait=True, interval=0) is False


class Flaky(MemoryStorage):
    """MemoryStorage whose first `down` LISTs find no server."""

    def __init__(self, down: int) -> None:
        super().__init__()
        self.down = down

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        if self.down > 0:
            self.down -= 1
            raise EndpointUnreachable("no S3 server answered")
        return super().list(prefix, start_after=start_after, limit=limit)


def test_long_run_waits_for_s3_and_then_works(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a queue with one message, on a storage that is unreachable for two LISTs
    monkeypatch.setattr(monitor, "RETRY_INTERVAL", 0.0)
    storage = Flaky(down=0)
    Queue("jobs", storage=storage).enqueue({"n": 1})
    storage.down = 2
    stop = threading.Event()
    seen: list[Any] = []

    def handle(message: Message) -> None:
        seen.append(message.body)
        stop.set()

    # WHEN a long-running (not drain) runtime starts
    summary = run_local({"jobs": handle}, storage=storage, stop=stop, workers=1, timeout=60)
    # THEN it waited instead of failing, then handled the message
    assert storage.down == 0 and seen == [{"n": 1}]
    assert not summary.drained and "jobs" in summary.queues


def test_drain_fails_at_once_when_s3_is_unreachable() -> None:
    with pytest.raises(EndpointUnreachable):
        run_local({"jobs": print}, storage=Flaky(down=1), drain=True, timeout=60)


def test_stats_reads_only_tickets_that_changed() -> None:
    # GIVEN two messages dispatched in tickets
    h = Harness()
    h.queue.enqueue({"n": 1})
    h.queue.enqueue({"n": 2})
    h.tick()
    counting = CountingStorage(h.storage)
    cache: TicketCache = {}
    now = h.clock.now_ms()
    # WHEN stats is polled twice with one cache
    first = stats(counting, h.queue.keys, now, cache)  # type: ignore[arg-type]
    gets_first = counting.reset().get("GET", 0)
    second = stats(counting, h.queue.keys, now, cache)  # type: ignore[arg-type]
    gets_second = counting.reset().get("GET", 0)
    # THEN the second poll counts the same without reading a ticket again
    assert first == second and first["in_flight"] == 2 and first["tickets"] >= 1
    assert gets_first == first["tickets"] and gets_second == 0


def test_dead_letters_page_by_key_in_one_schema() -> None:
    h = Harness()
    for n in range(5):
        h.queue.enqueue({"n": n})
    h.queue.enqueue(b"\x00raw", id="raw-1")

    def refuse(message: Message) -> None:
        raise PermanentError("no")

    h.drain(refuse)
    page1 = h.queue.dead_letters(limit=4)
    page2 = h.queue.dead_letters(limit=4, after=page1[-1]["key"])
    assert len(page1) == 4 and len(page2) == 2
    everything = h.queue.dead_letters(limit=None)
    assert [e["key"] for e in everything] == [e["key"] for e in page1 + page2]
    schema = {
        "id", "queue", "key", "group", "partition", "attributes", "attempts", "reason",
        "errors", "enqueued_ms", "dead_ms", "body", "body_encoding", "payload",
    }  # fmt: skip
    assert all(set(e) == schema for e in everything)
    raw = [e for e in everything if e["id"] == "raw-1"]
    assert raw[0]["body_encoding"] == "base64" and raw[0]["body"] == "AHJhdw=="
    assert {e["body_encoding"] for e in everything if e["id"] != "raw-1"} == {"json"}
    assert all(e["attempts"] == 1 and e["queue"] == "jobs" for e in everything)


def test_purge_counts_messages_not_objects() -> None:
    # GIVEN 1 message, 3 packed in one object, 1 with an explicit id (a marker object too)
    h = Harness()
    h.queue.enqueue({"n": 0})
    h.queue.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])
    h.queue.enqueue({"n": 4}, id="order-1")
    objects = len(h.keys(tombstones=True))
    # WHEN the queue is purged THEN the count is of messages
    assert h.queue.purge() == 5
    assert objects != 5 and h.queue.stats()["pending"] == 0


def test_client_endpoint_follows_one_rule() -> None:
    url = "http://127.0.0.1:8333"
    env = {"S3QUEUE_ENDPOINT_URL": url}
    assert make_client(environ=env).meta.endpoint_url == url
    assert make_client("http://127.0.0.1:9000", environ=env).meta.endpoint_url.endswith(":9000")
    assert "amazonaws.com" in make_client(region="eu-west-1", environ={}).meta.endpoint_url


def test_queue_without_client_uses_the_endpoint_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3QUEUE_ENDPOINT_URL", "http://127.0.0.1:8333")
    queue = Queue("jobs", bucket="b")
    assert queue.storage._client.meta.endpoint_url == "http://127.0.0.1:8333"  # type: ignore[attr-defined]


def _hint(queues: list[str], handlers: str = "functions/handlers") -> str:
    server = SimpleNamespace(endpoint_url="http://127.0.0.1:18333")
    conn = SimpleNamespace(server=server, bucket="s3queue-dev", prefix="s3queue")
    return dev.hint(conn, handlers, queues)  # type: ignore[arg-type]


def test_dev_hint_names_a_real_queue_and_how_to_connect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(dev.shutil, "which", lambda name: None)  # not on PATH: a checkout
    text = _hint(["billing", "reports"])
    assert "send_email" not in text and ' billing \'{"hello": "world"}\'' in text
    assert "S3QUEUE_ENDPOINT_URL=http://127.0.0.1:18333" in text
    assert "AWS_ENDPOINT_URL_S3=http://127.0.0.1:18333" in text and "aws s3 ls" in text
    command = text.splitlines()[2].split()[0]
    assert command != "s3queue" and ("s3queue" in command or "python" in command)
    assert "ada@example.com" in _hint(["generate_report", "send_email"])


def test_run_local_keeps_its_workers_when_a_handler_exits() -> None:
    # GIVEN one worker thread and a handler whose first call raises SystemExit
    storage = MemoryStorage()
    queue = Queue("jobs", storage=storage)
    queue.enqueue({"n": 1})
    queue.enqueue({"n": 2})
    calls: list[Any] = []

    def handle(message: Message) -> None:
        calls.append(message.body)
        if len(calls) == 1:
            raise SystemExit("a handler called sys.exit()")

    # WHEN the queue runs to the end
    summary = run_local(
        {"jobs": handle},
        storage=storage,
        workers=1,
        drain=True,
        timeout=30,
        overrides={"visibility_timeout": 1.0, "backoff_base": 0.01, "backoff_cap": 0.05},
    )
    # THEN both messages were handled: the thread that died was replaced (or survived)
    assert summary.drained
    assert {"n": 1} in calls and {"n": 2} in calls and len(calls) >= 3
    assert queue.stats()["pending"] == 0 and queue.dead_letters() == []
